"""The benchmarks' CPU-side pieces (their timings need a GPU: tools/bench_*.py)."""
import pytest

from layers import optim
from tools.timing import with_foreach


@pytest.mark.parametrize("flag", [False, True])
def test_a_row_runs_with_its_own_foreach_setting_and_restores_the_one_around_it(flag):
    seen = []
    before = optim.FOREACH
    run = with_foreach(flag, lambda: seen.append(optim.FOREACH) or "out")
    assert run() == "out" and seen == [flag] and optim.FOREACH is before

    def fails():
        seen.append(optim.FOREACH)
        raise ValueError("step failed")
    with pytest.raises(ValueError):
        with_foreach(flag, fails)()
    assert seen == [flag, flag] and optim.FOREACH is before


def test_a_row_whose_statistics_are_not_finite_is_reported_and_fails_the_tool(capsys):
    import numpy as np
    import torch
    from tools.timing import finite_statistics, report_non_finite

    class Device:                   # a CuPy array's read-back
        def __init__(self, values):
            self.values = np.asarray(values)

        def get(self):
            return self.values
    syncs = []
    assert finite_statistics(lambda: Device([1.0, 2.0]), lambda: syncs.append(1))
    assert not finite_statistics(lambda: Device([1.0, np.nan]), lambda: syncs.append(1))
    assert not finite_statistics(lambda: torch.tensor([np.inf], dtype=torch.bfloat16),
                                 lambda: syncs.append(1))
    assert syncs == [1, 1, 1]
    assert report_non_finite([], "losses") == 0
    assert report_non_finite(["cudnnlite captured"], "losses") == 1
    assert "error: cudnnlite captured: the last step's losses are not all finite" in \
        capsys.readouterr().err

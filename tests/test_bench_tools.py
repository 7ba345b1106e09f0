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

"""The benchmarks' CPU-side pieces (their timings need a GPU: tools/bench_*.py)."""
import pytest

from layers import optim
from layers.ops import conv as ops_conv
from tools.timing import with_foreach, with_setting


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


@pytest.mark.parametrize("flag", [False, True])
def test_a_row_runs_with_its_own_whole_input_route(flag):
    seen = []
    before = ops_conv.WHOLE_INPUT_AS_GEMM
    run = with_setting(ops_conv, "WHOLE_INPUT_AS_GEMM", flag,
                       with_foreach(not flag, lambda: seen.append(
                           (ops_conv.WHOLE_INPUT_AS_GEMM, optim.FOREACH))))
    run()
    assert seen == [(flag, not flag)] and ops_conv.WHOLE_INPUT_AS_GEMM is before


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


def test_the_profile_groups_host_time_by_package():
    """tools.profile_dcgan's table: every profiled function counted once, in its package's row
    (a layers op's own Python in 'layers', NumPy's in 'numpy', builtins apart)."""
    import cProfile
    import os
    import pstats

    import numpy as np

    import layers as L
    from tools.profile_dcgan import by_package, package_of

    assert package_of(os.path.join("x", "site-packages", "cupy", "_core", "core.py")) == "cupy"
    assert package_of(os.path.join("repo", "layers", "tensor.py")) == "layers"
    assert package_of(os.path.join("repo", "cudnnlite", "conv.py")) == "cudnnlite"
    assert package_of("~") == "(C calls and builtins)"
    assert package_of(os.path.join("usr", "lib", "python3.11", "enum.py")) == "(other Python)"
    x = L.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        (x * 2.0).sum().backward()
        np.linalg.norm(x.data)
    prof.disable()
    stats = pstats.Stats(prof)
    rows = {row: (ms, calls) for row, ms, calls in by_package(stats, steps=3)}
    assert rows["layers"][1] > 0 and rows["numpy"][1] > 0
    total_ms = sum(v[2] for v in stats.stats.values()) * 1e3 / 3
    assert sum(ms for ms, _ in rows.values()) == pytest.approx(total_ms, rel=1e-12)
    assert sum(c for _, c in rows.values()) == pytest.approx(
        sum(v[1] for v in stats.stats.values()) / 3, rel=1e-12)


def test_the_profile_times_each_c_entry_point_per_call(monkeypatch):
    """tools.profile_dcgan's C-call table: calls per step and host time per call of each wrapped
    entry point, the real functions back in place afterwards. Stand-ins with known costs (a
    sleep) take the place of two cuDNN functions."""
    import time

    from cudnnlite import api
    from tools.profile_dcgan import c_call_times

    def fake(name, seconds):
        def fn(*args):
            time.sleep(seconds)
        fn.arg_names = ("handle",)
        return fn
    monkeypatch.setattr(api, "cudnnConvolutionForward", fake("cudnnConvolutionForward", 0.004))
    monkeypatch.setattr(api, "cudnnActivationForward", fake("cudnnActivationForward", 0.001))
    conv_fn, act_fn = api.cudnnConvolutionForward, api.cudnnActivationForward

    def step():
        api.cudnnConvolutionForward(None)
        api.cudnnActivationForward(None)
        api.cudnnActivationForward(None)
        api.cudnnActivationForward(None)
    rows = c_call_times(step, steps=3)
    assert [name for name, _, _ in rows] == ["cudnnConvolutionForward", "cudnnActivationForward"]
    (_, n_conv, us_conv), (_, n_act, us_act) = rows
    assert (n_conv, n_act) == (1.0, 3.0)
    assert 4000 <= us_conv < 4000 + 20000 and 1000 <= us_act < 1000 + 20000
    assert api.cudnnConvolutionForward is conv_fn and api.cudnnActivationForward is act_fn


@pytest.mark.gpu
def test_the_profile_finds_a_host_sync_in_a_step_and_none_in_a_step_without():
    """tools.profile_dcgan's sync check: a step that reads a result back waits behind the busy
    kernel (and names where); one that only launches returns at once."""
    import cupy

    from tools.profile_dcgan import waits
    a = cupy.ones(1000, cupy.float32)
    sync = cupy.cuda.get_current_stream().synchronize

    def launches():
        (a * 2).sum()

    def reads_back():
        float((a * 2).sum())
    launches(), reads_back()          # warm: a kernel's first launch loads its module, which waits
    host_ms, stalls = waits(launches, sync, busy_ms=200)
    assert host_ms < 100 and stalls == []
    host_ms, stalls = waits(reads_back, sync, busy_ms=200)
    assert host_ms >= 150 and stalls and stalls[0][1] >= 50


def test_the_profile_times_each_op_by_direction():
    """tools.profile_dcgan's op table: every op's forward and backward (and an optimizer
    update) counted per step with its host time, on the NumPy path; a slowed op is the most
    expensive row."""
    import time

    import numpy as np

    import layers as L
    from layers.ops import elementwise
    from tools.profile_dcgan import op_times

    model = L.nn.Sequential(L.nn.Linear(4, 3), L.nn.Tanh())
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    x = L.tensor(np.ones((2, 4), np.float32))
    real_forward = elementwise.Tanh.forward

    def slow(self, *a):
        time.sleep(0.02)
        return real_forward(self, *a)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    import pytest
    # first-call costs (imports, caches) and a collection of a test session's garbage (120 ms
    # once, seen) are not the slowed op's to beat
    import gc
    step()
    gc.collect()
    gc.disable()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(elementwise.Tanh, "forward", slow)
            rows = op_times(step, steps=2, models={"net": model})
    finally:
        gc.enable()
    table = {(d, op): (n, us) for d, op, n, us in rows}
    assert rows[0][:2] == ("fprop", "Tanh") and table[("fprop", "Tanh")][1] >= 20000, rows
    assert table[("fprop", "Tanh")][0] == 1.0 and table[("bprop", "Tanh")][0] == 1.0
    assert ("optimizer", "SGD") in table and table[("optimizer", "SGD")][0] == 2.0  # W and b
    assert all(n > 0 and us >= 0 for n, us in table.values())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_batch_norm_fusion_that_builds_equals_the_unfused_calls(dtype):
    """tools.bench_fusions' graphs on netD.main.5's shape: each variant cuDNN builds a plan for
    gives the convolution of LeakyReLU(x * scale + bias) that cudnnlite.conv computes unfused, and
    its GenStats the float64 sums of its own output (the tool checks before it times). The
    statistics-free convolution builds on any GPU; on a Hopper GPU (compute capability 9.x) every
    variant does -- cuDNN 9.19's runtime-fusion engine built each on the H100 -- so there a
    variant with no plan fails rather than passing unchecked."""
    import cupy
    from tools import bench_fusions
    fused, unfused = bench_fusions.measure(bench_fusions.LAYERS[1], dtype, plans=1, repeats=1)
    hopper = cupy.cuda.Device().compute_capability.startswith("9")
    for variant, (us, engine, n, problem, *err) in fused.items():
        must_build = hopper or variant == "conv"
        assert us is not None or not must_build, (variant, problem)
        assert us is None or problem is None, (variant, problem)
    assert all(us > 0 for us in unfused.values())


def test_the_host_benchmark_stubs_every_gpu_call_and_undoes_its_patches():
    """tools.bench_host times the engine's Python with every GPU call a stub: none of the host
    harness's real answers (each counted in host_kernels.CALLS) may run -- one that did would
    be counted as the engine's time -- and the layers' GPU path points back at CuPy after."""
    pytest.importorskip("cupy")
    import host_kernels
    from layers import backend
    from tools import bench_host
    before = backend._cupy
    from cudnnlite import conv
    settings_before = conv.settings
    host_kernels.CALLS.clear()
    ms, calls, rows = bench_host.measure(width=16, batch=2, steps=2, repeats=1, ops=True)
    assert not host_kernels.CALLS, dict(host_kernels.CALLS)
    assert ms > 0 and all(calls[k] > 0 for k in ("cuDNN calls", "CuPy kernels", "allocations",
                                                 "cuBLAS products", "CuPy operators (kernels)"))
    assert calls["cuBLAS products"] == 19          # width 16: the thin and whole-input routes
    # the other convolutions through the graph API, as train.dcgan's on a GPU (none through the
    # legacy calls' fallback), and the settings as they were after. A step's convolutions: 20
    # forward (netD's 5 three times, netG's 5 transposed), 17 data gradients (netD's 4, 4 and
    # 5 -- its first layer's input is the image, wanted only through the fake one -- and
    # netG's 4), 15 filter gradients (netD's 5 twice -- frozen in G's pass -- and netG's 5)
    from cudnnlite import conv
    assert calls["cuDNN graph executions"] + calls["cuBLAS products"] == 20 + 17 + 15
    assert conv.graph_fallbacks["calls"] == 0
    assert conv.settings.api == settings_before.api
    assert not any(type(plan).__name__ == "HostPlan" for problem in conv._plans._entries.values()
                   for plan in problem._graph_plans._entries.values())   # no stand-in kept
    assert {(d, op) for d, op, *_ in rows} >= {("fprop", "Conv2d"), ("bprop", "BatchNorm")}
    assert backend._cupy is before
    # and no stub stays in the layers' kernel caches: the next kernel made is CuPy's own
    import cupy
    from layers import finite, kernels
    assert type(finite._multi_word_kernel("float32")) is cupy.RawKernel
    assert type(kernels.elementwise("cudnnlite_probe", "T x", "T y", "y = x")) is \
        cupy.ElementwiseKernel

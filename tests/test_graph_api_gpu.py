"""Convolutions through cuDNN's backend (graph) API (conv.configure(api='graph')): every direction
against the float64 NumPy reference and the legacy path, alpha / beta, strided inputs, a captured
DCGAN step, and the clear refusals."""
import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import conv, graph
from gpu_util import rounded, storage, to_device, to_host
from reference import (TOLERANCE, conv_backward_data, conv_backward_filter, conv_forward,
                       rel_err)
from test_conv_gpu import GEOMETRIES, _case, _id

pytestmark = pytest.mark.gpu

UNGROUPED = [g for g in GEOMETRIES if g[8] == 1]


@pytest.fixture(autouse=True)
def _graph_no_tf32():
    with conv.using(api="graph", allow_tf32=False):
        yield


def _or_skip_unsupported(fn, dtype):
    """float64 has few (maybe no) graph-API engines, and such a problem falls back to the legacy
    calls (conv.graph_fallbacks): say so instead of testing the legacy path here. Any other
    dtype falling back fails: these tests are of the graph path."""
    calls = conv.graph_fallbacks["calls"]
    out = fn()
    if conv.graph_fallbacks["calls"] != calls:
        why = str(conv.graph_fallbacks["last"]).splitlines()[0]
        if dtype != "float64":
            pytest.fail(f"{dtype} fell back to the legacy call: {why}")
        pytest.skip(f"no graph-API engine: {why}")
    return out


@pytest.fixture
def on_the_graph_path():
    """The test's convolutions all ran through graph-API plans (none fell back)."""
    calls = conv.graph_fallbacks["calls"]
    yield
    assert conv.graph_fallbacks["calls"] == calls, conv.graph_fallbacks["last"]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("g", UNGROUPED, ids=_id)
def test_every_direction_matches_the_float64_reference(g, dtype, layout):
    import cupy
    if layout == "NHWC" and dtype == "float64":
        pytest.skip("cuDNN has no float64 NHWC convolution engines")
    rng = np.random.default_rng(5)
    x, W, geo = _case(rng, g, dtype)
    st, pd, dl = geo["stride"], geo["pad"], geo["dilation"]
    y = conv_forward(x, W, st, pd, dl, 1)
    gy = rounded(rng.standard_normal(y.shape), dtype)
    store, override = storage(dtype)
    xd, Wd, gyd = (to_device(a, dtype, layout) for a in (x, W, gy))
    y_shape = np.moveaxis(y, 1, -1).shape if layout == "NHWC" else y.shape
    poison = 0xFFFF if store == "uint16" else np.nan
    out = cupy.full(y_shape, poison, dtype=store)
    yd = _or_skip_unsupported(lambda: conv.forward(xd, Wd, layout=layout, out=out,
                                                   dtype=override, **geo), dtype)
    gx = _or_skip_unsupported(lambda: conv.backward_data(Wd, gyd, xd.shape, layout=layout,
                                                         dtype=override, **geo), dtype)
    gW = _or_skip_unsupported(lambda: conv.backward_filter(xd, gyd, Wd.shape, layout=layout,
                                                           dtype=override, **geo), dtype)
    assert rel_err(to_host(yd, dtype, layout), y) < TOLERANCE[dtype]
    assert rel_err(to_host(gx, dtype, layout), conv_backward_data(gy, W, x.shape, st, pd, dl, 1)) \
        < TOLERANCE[dtype]
    assert rel_err(to_host(gW, dtype, layout),
                   conv_backward_filter(x, gy, W.shape, st, pd, dl, 1)) < TOLERANCE[dtype]


def test_alpha_and_beta_accumulate_as_the_legacy_path(on_the_graph_path):
    import cupy
    rng = np.random.default_rng(6)
    x, W, geo = _case(rng, GEOMETRIES[2], "float32")
    xd, Wd = cupy.asarray(x, np.float32), cupy.asarray(W, np.float32)
    y0 = cupy.asarray(rng.standard_normal(conv_forward(x, W, geo["stride"], geo["pad"],
                                                       geo["dilation"], 1).shape), np.float32)
    graph_out = conv.forward(xd, Wd, out=y0.copy(), alpha=0.5, beta=2.0, **geo)
    with conv.using(api="legacy"):
        legacy_out = conv.forward(xd, Wd, out=y0.copy(), alpha=0.5, beta=2.0, **geo)
    ref = 0.5 * conv_forward(x, W, geo["stride"], geo["pad"], geo["dilation"], 1) \
        + 2.0 * y0.get().astype(np.float64)
    assert rel_err(graph_out.get(), ref) < TOLERANCE["float32"]
    assert rel_err(graph_out.get(), legacy_out.get()) < TOLERANCE["float32"]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_benchmark_mode_runs_the_fastest_timed_plan_and_leaves_the_output_alone(
        layout, on_the_graph_path):
    """algo_mode='benchmark' on the graph API: each direction's plan is the fastest of those
    timed on the call's own arrays (its .timings), the result equals the float64 reference, and
    beta = 1 accumulates into the caller's output once (timing ran on a scratch copy)."""
    import cupy
    rng = np.random.default_rng(11)
    x, W, geo = _case(rng, GEOMETRIES[2], "float32")
    st, pd, dl = geo["stride"], geo["pad"], geo["dilation"]
    y = conv_forward(x, W, st, pd, dl, 1)
    gy = rounded(rng.standard_normal(y.shape), "float32")
    xd, Wd, gyd = (to_device(a, "float32", layout) for a in (x, W, gy))
    gW0 = to_device(rng.standard_normal(W.shape), "float32", layout)
    with conv.using(algo_mode="benchmark"):
        yd = conv.forward(xd, Wd, layout=layout, **geo)
        gx = conv.backward_data(Wd, gyd, xd.shape, layout=layout, **geo)
        gW = conv.backward_filter(xd, gyd, Wd.shape, layout=layout, out=gW0.copy(), beta=1.0,
                                  **geo)
    assert rel_err(to_host(yd, "float32", layout), y) < TOLERANCE["float32"]
    assert rel_err(to_host(gx, "float32", layout),
                   conv_backward_data(gy, W, x.shape, st, pd, dl, 1)) < TOLERANCE["float32"]
    want = conv_backward_filter(x, gy, W.shape, st, pd, dl, 1) + to_host(gW0, "float32", layout)
    assert rel_err(to_host(gW, "float32", layout), want) < TOLERANCE["float32"]
    p = conv.plan(xd.shape, conv.element_strides(xd), Wd.shape, "float32", layout, pd, st, dl, 1)
    plans = [v for k, v in p._graph_plans.items() if k[4].algo_mode == "benchmark"]
    assert all(isinstance(v, graph.ExecutionPlan) for v in plans)
    assert len(plans) == 3
    for plan in plans:
        times = [t for _, t in plan.timings if isinstance(t, float)]
        assert times and min(times) in [t for e, t in plan.timings if e == plan.engine]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_every_plan_benchmark_mode_may_pick_gives_the_reference(direction):
    """Benchmark mode keeps whichever of the heuristics' first graph.BENCHMARK_LIMIT accepted
    plans is fastest, so each of them must be right: on a DCGAN-sized channels-last problem
    (64 -> 128 channels, 4x4, stride 2) with TF32 allowed, every such plan's output is within
    TF32's rounding of the float64 reference."""
    import cupy
    from cudnnlite import get_handle
    rng = np.random.default_rng(12)
    x = rng.standard_normal((16, 64, 32, 32))
    W = rng.standard_normal((128, 64, 4, 4)) / np.sqrt(64 * 16)
    geo = dict(stride=(2, 2), pad=(1, 1), dilation=(1, 1))
    y = conv_forward(x, W, geo["stride"], geo["pad"], geo["dilation"], 1)
    gy = rng.standard_normal(y.shape)
    xd, Wd, gyd = (to_device(a, "float32", "NHWC") for a in (x, W, gy))
    d, a, b, want = {
        "fwd": (conv.FWD, xd, Wd, y),
        "bwd_data": (conv.BWD_DATA, Wd, gyd, conv_backward_data(gy, W, x.shape, *geo.values(), 1)),
        "bwd_filter": (conv.BWD_FILTER, xd, gyd,
                       conv_backward_filter(x, gy, W.shape, *geo.values(), 1))}[direction]
    out_shape = {"fwd": gyd.shape, "bwd_data": xd.shape, "bwd_filter": Wd.shape}[direction]
    h = get_handle()
    with conv.using(allow_tf32=True):
        p = conv.plan(xd.shape, conv.element_strides(xd), Wd.shape, "float32", "NHWC",
                      geo["pad"], geo["stride"], geo["dilation"], 1)
        plans = graph.accepted_plans(h, conv.graph_operations(p, d, h), conv._accept(p, h),
                                     limit=graph.BENCHMARK_LIMIT)
    assert plans
    keys = [graph.config_key(plan.cfg) for plan in plans]        # each a distinct configuration
    assert len(set(keys)) == len(keys), keys
    assert all(0 <= t < graph.KNOB_TYPES for _, knobs in keys for t, _ in knobs), keys
    for plan in plans:
        out = cupy.full(out_shape, np.nan, np.float32)
        plan.execute(h, conv._UIDS[d.name], (a.data.ptr, b.data.ptr, out.data.ptr),
                     h.workspace(plan.workspace))
        err = rel_err(to_host(out, "float32", "NHWC"), want)
        assert err < TOLERANCE["tf32"], (plan, err)


def test_a_strided_views_strides_go_in_the_backend_tensor():
    """x an ordered, aligned slice of a bigger buffer: no copy, its strides in the tensor
    (forward and backward-filter both read it)."""
    import cupy
    rng = np.random.default_rng(7)
    big = cupy.asarray(rng.standard_normal((4, 9, 20, 24)), np.float32)
    x = big[1:3, 4:7, 0:16, 0:16]
    assert not x.flags.c_contiguous and x.data.ptr % 16 == 0
    W = cupy.asarray(rng.standard_normal((5, 3, 3, 3)), np.float32)
    gy = cupy.asarray(rng.standard_normal((2, 5, 16, 16)), np.float32)
    xh = x.get().astype(np.float64)
    y = conv.forward(x, W, pad=1)
    gW = conv.backward_filter(x, gy, W.shape, pad=1)
    assert rel_err(y.get(), conv_forward(xh, W.get().astype(np.float64), (1, 1), (1, 1), (1, 1),
                                         1)) < TOLERANCE["float32"]
    assert rel_err(gW.get(), conv_backward_filter(xh, gy.get().astype(np.float64), W.shape,
                                                  (1, 1), (1, 1), (1, 1), 1)) \
        < TOLERANCE["float32"]
    p = conv.plan(x.shape, conv.element_strides(x), W.shape, "float32", "NCHW", 1, 1, 1, 1)
    assert p.x.strides == (4320, 480, 24, 1)
    plans = p._graph_plans.values()           # forward's and backward-filter's, not refusals
    assert len(plans) == 2 and all(isinstance(v, graph.ExecutionPlan) for v in plans)


def test_grouped_convolutions_take_the_legacy_calls():
    """The graph path builds ungrouped problems; grouped ones (and explicit legacy `algo=`s) go
    through the legacy calls under api='graph' too, with the same results."""
    import cupy
    rng = np.random.default_rng(8)
    x, W, geo = _case(rng, GEOMETRIES[3], "float32")        # dilation 2, groups 2
    y = conv.forward(cupy.asarray(x, np.float32), cupy.asarray(W, np.float32), **geo)
    ref = conv_forward(x, W, geo["stride"], geo["pad"], geo["dilation"], geo["groups"])
    assert rel_err(y.get(), ref) < TOLERANCE["float32"]
    p = conv.plan(x.shape, conv.c_strides(x.shape), W.shape, "float32", "NCHW", geo["pad"],
                  geo["stride"], geo["dilation"], geo["groups"])
    assert len(p._graph_plans) == 0


def test_the_plan_says_which_engine_and_is_built_once():
    import cupy
    x = cupy.ones((2, 3, 8, 8), np.float32)
    W = cupy.ones((4, 3, 3, 3), np.float32)
    conv.forward(x, W, pad=1)
    p = conv.plan(x.shape, conv.c_strides(x.shape), W.shape, "float32", "NCHW", 1, 1, 1, 1)
    plans = list(p._graph_plans.values())
    assert len(plans) == 1 and isinstance(plans[0], graph.ExecutionPlan)
    conv.forward(x, W, pad=1)
    assert list(p._graph_plans.values()) == plans
    assert "engine" in plans[0].desc.summary and plans[0].workspace >= 0


def test_a_captured_dcgan_step_on_the_graph_path_matches_the_legacy_path(on_the_graph_path):
    """Two DCGAN steps (batch 8, small widths), captured, graph API against legacy: the same
    losses and weights to float32 rounding (TF32 off on both)."""
    import layers as L
    from train import dcgan
    results = []
    for api in ("legacy", "graph"):
        with conv.using(api=api):
            L.manual_seed(0)
            G, D = dcgan.Generator(ngf=8).to(0), dcgan.Discriminator(ndf=8).to(0)
            oG, oD = dcgan.make_optimizers(G, D)
            step = dcgan.make_step(G, D, oG, oD, 100, 0, None, cuda_graph=True)
            real = L.random.device_generator().uniform((8, 1, 64, 64)) * 2 - 1
            stats = [step(real) for _ in range(3)]        # eager warm-up, capture, replay
            results.append((stats, [p.numpy() for p in G.parameters()]))
    (s0, w0), (s1, w1) = results
    for a, b in zip(s0, s1):
        for k in a:
            assert abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(a[k])), k
    for a, b in zip(w0, w1):
        assert rel_err(b, a) < 1e-4


@pytest.mark.parametrize("activation", [None, "relu", "tanh", "sigmoid"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fused_conv_bias_activation_equals_the_separate_calls(activation, dtype):
    """The seed's Conv-Bias-ReLU fusion: one operation graph (conv, pointwise add, pointwise
    activation) against the float64 reference of the three steps. An engine that fuses float32
    NCHW may not exist: then the refusal must name what was tried, and the test says so."""
    import cupy
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 8, 12, 12))
    W = rng.standard_normal((16, 8, 3, 3)) * 0.2
    b = rng.standard_normal(16)
    xr, Wr, br = rounded(x, dtype), rounded(W, dtype), rounded(b, dtype)
    ref = conv_forward(xr, Wr, (1, 1), (1, 1), (1, 1), 1) + br[None, :, None, None]
    ref = {None: ref, "relu": np.maximum(ref, 0), "tanh": np.tanh(ref),
           "sigmoid": 1 / (1 + np.exp(-ref))}[activation]
    try:
        y = conv.forward_fused(cupy.asarray(x.astype(dtype)), cupy.asarray(W.astype(dtype)),
                               cupy.asarray(b.astype(dtype)), activation, pad=1)
    except cl.NotSupported as e:
        assert "fusion" in str(e) and "tried" in str(e)
        pytest.skip(f"no engine fuses conv + bias + {activation} in {dtype} NCHW: "
                    f"{str(e).splitlines()[0]}")
    assert rel_err(y.get().astype(np.float64), ref) < TOLERANCE[dtype]


def test_fused_conv_refuses_a_bad_activation_and_bias():
    import cupy
    x, W = cupy.ones((1, 2, 4, 4), np.float32), cupy.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(cl.BadParam, match="activation must be one of"):
        conv.forward_fused(x, W, cupy.ones(3, np.float32), "gelu")
    with pytest.raises(cl.BadParamShapeMismatch, match="one value per output channel"):
        conv.forward_fused(x, W, cupy.ones(4, np.float32), "relu")


def test_fused_relu_keeps_a_nan():
    """A NaN reaching the fused ReLU stays NaN (torch's relu keeps it; cuDNN's default drops it,
    so the pointwise descriptor asks for propagation)."""
    import cupy
    x = np.ones((1, 2, 5, 5), np.float32)
    x[0, 0, 2, 2] = np.nan
    try:
        y = conv.forward_fused(cupy.asarray(x), cupy.ones((3, 2, 1, 1), np.float32),
                               cupy.zeros(3, np.float32), "relu")
    except cl.NotSupported as e:
        pytest.skip(f"no engine fuses conv + bias + relu in float32 NCHW: {str(e).splitlines()[0]}")
    assert np.isnan(y.get()[0, :, 2, 2]).all() and not np.isnan(y.get()[0, :, 0, 0]).any()

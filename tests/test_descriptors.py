"""Descriptors against cuDNN's own getters and closed forms; runs on a machine with no GPU."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cudnnlite as cl
from cudnnlite.descriptors import packed_strides

DTYPES = [("float32", cl.DataType.FLOAT), ("float64", cl.DataType.DOUBLE),
          ("float16", cl.DataType.HALF), ("bfloat16", cl.DataType.BFLOAT16),
          ("int8", cl.DataType.INT8), ("int32", cl.DataType.INT32)]


@st.composite
def dims_and_strides(draw):
    nd = draw(st.integers(3, 8))
    dims = draw(st.lists(st.integers(1, 9), min_size=nd, max_size=nd))
    order = draw(st.permutations(range(nd)))          # any memory order, optionally padded
    gaps = draw(st.lists(st.integers(0, 3), min_size=nd, max_size=nd))
    strides, step = [0] * nd, 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis] + gaps[axis]
    return tuple(dims), tuple(strides)


@settings(max_examples=200, deadline=None)
@given(dims_and_strides(), st.sampled_from(DTYPES))
def test_tensor_descriptor_round_trip(ds, dtype):
    dims, strides = ds
    name, dt = dtype
    desc = cl.TensorDescriptor(dims, name, strides)
    assert desc.setup() == (dt, dims, strides)
    assert desc == cl.TensorDescriptor(dims, dt, strides)
    assert repr(desc) == f"TensorDescriptor({dt.name}, dims={dims}, strides={strides})"


@pytest.mark.parametrize("layout,axes", [("NCHW", (0, 1, 2, 3)), ("NHWC", (0, 3, 1, 2))])
def test_tensor_descriptor_from_array(layout, axes):
    a = np.zeros((2, 3, 5, 7), np.float16)
    desc = cl.TensorDescriptor.from_array(a, layout)
    assert desc.setup() == (cl.DataType.HALF, tuple(a.shape[i] for i in axes),
                            tuple(a.strides[i] // 2 for i in axes))


def test_tensor_descriptor_from_strided_view():
    a = np.zeros((4, 6, 8, 10), np.float32)[::2, 1:5, :, ::3]   # a non-contiguous view
    assert cl.TensorDescriptor.from_array(a).setup() == (
        cl.DataType.FLOAT, (2, 4, 8, 4), (960, 80, 10, 3))


@pytest.mark.parametrize("dims", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 5, 4, 6)])
def test_packed_strides_match_numpy(dims):
    nchw = np.zeros(dims, np.float32)
    assert packed_strides(dims) == tuple(s // 4 for s in nchw.strides)
    nhwc = np.zeros((dims[0],) + dims[2:] + (dims[1],), np.float32)
    assert packed_strides(dims, "NHWC") == cl.TensorDescriptor.from_array(nhwc, "NHWC").strides


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=4, max_size=5), st.sampled_from(["NCHW", "NHWC"]),
       st.sampled_from(DTYPES[:4]))
def test_filter_descriptor_round_trip(dims, layout, dtype):
    name, dt = dtype
    desc = cl.FilterDescriptor(dims, name, layout)
    assert desc.setup() == (dt, cl.TensorFormat[layout], tuple(dims))
    assert f"{cl.TensorFormat[layout].name}, dims={tuple(dims)}" in repr(desc)


def test_filter_descriptor_from_array_layouts():
    krsc = np.zeros((8, 3, 5, 4), np.float32)           # K, R, S, C
    assert cl.FilterDescriptor.from_array(krsc, "NHWC").setup()[2] == (8, 4, 3, 5)
    with pytest.raises(cl.BadParam, match="cudnnSetFilterNdDescriptor.*C-contiguous"):
        cl.FilterDescriptor.from_array(krsc.transpose(0, 3, 1, 2), "NCHW")


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 3).flatmap(lambda n: st.tuples(
           st.lists(st.integers(0, 5), min_size=n, max_size=n),
           st.lists(st.integers(1, 4), min_size=n, max_size=n),
           st.lists(st.integers(1, 3), min_size=n, max_size=n))),
       st.integers(1, 8), st.sampled_from(list(cl.MathType)),
       st.sampled_from([cl.DataType.FLOAT, cl.DataType.DOUBLE, cl.DataType.HALF]),
       st.sampled_from(list(cl.ConvMode)))
def test_convolution_descriptor_round_trip(geometry, groups, math, compute, mode):
    pad, stride, dilation = (tuple(v) for v in geometry)
    desc = cl.ConvolutionDescriptor(pad, stride, dilation, groups=groups, math_type=math,
                                    compute_type=compute, mode=mode)
    assert desc.setup() == (pad, stride, dilation, mode, compute, groups, math)
    other = cl.ConvolutionDescriptor(pad, stride, dilation, groups=groups, math_type=math,
                                     compute_type=compute, mode=mode)
    assert desc == other and hash(desc) == hash(other)


def test_convolution_descriptor_scalars_broadcast():
    desc = cl.ConvolutionDescriptor(1, 2, 3, spatial_dims=3)
    assert desc.setup()[:3] == ((1, 1, 1), (2, 2, 2), (3, 3, 3))


@pytest.mark.parametrize("mode,coef", [(cl.ActivationMode.RELU, 0.0),
                                       (cl.ActivationMode.CLIPPED_RELU, 6.0),
                                       (cl.ActivationMode.ELU, 0.5),
                                       (cl.ActivationMode.SIGMOID, 0.0),
                                       (cl.ActivationMode.TANH, 0.0)])
def test_activation_descriptor_round_trip(mode, coef):
    desc = cl.ActivationDescriptor(mode, coef)
    assert desc.setup() == (mode, cl.NanPropagation.NOT_PROPAGATE_NAN, coef)


def _closed_form(size, k, pad, stride, dil):
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


@st.composite
def conv_problems(draw):
    n_spatial = draw(st.integers(2, 3))
    groups = draw(st.integers(1, 4))
    N = draw(st.integers(1, 4))
    C = groups * draw(st.integers(1, 4))
    K = groups * draw(st.integers(1, 4))
    spatial, kernel, pad, stride, dil = [], [], [], [], []
    for _ in range(n_spatial):
        k, d = draw(st.integers(1, 5)), draw(st.integers(1, 3))
        p = draw(st.integers(0, 4))
        span = d * (k - 1) + 1
        size = draw(st.integers(max(1, span - 2 * p), span - 2 * p + 20))
        spatial.append(size); kernel.append(k); pad.append(p); dil.append(d)
        stride.append(draw(st.integers(1, 4)))
    return N, C, K, groups, spatial, kernel, pad, stride, dil


@settings(max_examples=300, deadline=None)
@given(conv_problems(), st.sampled_from(["NCHW", "NHWC"]))
def test_conv_output_shape_matches_closed_form(problem, layout):
    N, C, K, groups, spatial, kernel, pad, stride, dil = problem
    x = cl.TensorDescriptor([N, C] + spatial, "float32", packed_strides([N, C] + spatial, layout))
    w = cl.FilterDescriptor([K, C // groups] + kernel, "float32", layout)
    conv = cl.ConvolutionDescriptor(pad, stride, dil, groups=groups)
    expected = (N, K) + tuple(_closed_form(*a) for a in zip(spatial, kernel, pad, stride, dil))
    assert cl.conv_output_shape(x, w, conv) == expected


# ---- bad set-ups: the right CudnnError subclass, naming the function and the values ----------

def test_negative_pad():
    with pytest.raises(cl.BadParam) as e:
        cl.ConvolutionDescriptor((-1, 0), 1, 1)
    msg = str(e.value)
    assert e.value.function == "cudnnSetConvolutionNdDescriptor"
    assert "padA = [-1, 0]" in msg and "negative" in msg


@pytest.mark.parametrize("stride,dilation", [((0, 1), 1), (1, (1, 0))])
def test_zero_stride_or_dilation(stride, dilation):
    with pytest.raises(cl.BadParam, match="cudnnSetConvolutionNdDescriptor"):
        cl.ConvolutionDescriptor(0, stride, dilation)


def test_channel_group_mismatch_names_descriptors():
    x = cl.TensorDescriptor((2, 6, 8, 8))
    w = cl.FilterDescriptor((4, 4, 3, 3))          # 2 groups of 4 channels != 6
    conv = cl.ConvolutionDescriptor(1, 1, 1, groups=2)
    with pytest.raises(cl.BadParam) as e:
        cl.conv_output_shape(x, w, conv)
    msg = str(e.value)
    assert msg.startswith("cudnnGetConvolutionNdForwardOutputDim failed: CUDNN_STATUS_BAD_PARAM")
    assert "dims=(2, 6, 8, 8)" in msg and "dims=(4, 4, 3, 3)" in msg and "groups=2" in msg
    assert "groupCount" in msg                  # cuDNN's own cudnnGetLastErrorString text


def test_wrong_rank():
    x = cl.TensorDescriptor((2, 3, 8, 8, 8))
    w = cl.FilterDescriptor((4, 3, 3, 3))
    with pytest.raises(cl.BadParam, match="cudnnGetConvolutionNdForwardOutputDim"):
        cl.conv_output_shape(x, w, cl.ConvolutionDescriptor(0, 1, 1))


def test_kernel_larger_than_padded_input():
    x = cl.TensorDescriptor((1, 1, 2, 2))
    w = cl.FilterDescriptor((1, 1, 5, 5))
    with pytest.raises(cl.BadParam, match="cudnnGetConvolutionNdForwardOutputDim"):
        cl.conv_output_shape(x, w, cl.ConvolutionDescriptor(0, 1, 1))


@pytest.mark.parametrize("dtype", ["complex64", "uint32", np.dtype("U3")])
def test_unsupported_dtype(dtype):
    with pytest.raises(cl.NotSupportedDataType) as e:
        cl.TensorDescriptor((1, 2, 3, 4), dtype)
    assert e.value.function == "cudnnSetTensorNdDescriptor"
    assert isinstance(e.value, cl.NotSupported)


def test_negative_dim():
    with pytest.raises(cl.BadParam, match="cudnnSetTensorNdDescriptor(.|\n)*dimA = \\[2, -3, 4, 4\\]"):
        cl.TensorDescriptor((2, -3, 4, 4))


def test_unknown_layout():
    with pytest.raises(cl.BadParam, match="layout"):
        cl.FilterDescriptor((1, 1, 1, 1), "float32", "CHWN")


def test_descriptor_freed_when_dropped():
    desc = cl.TensorDescriptor((1, 2, 3, 4))
    finalizer = desc._finalizer
    assert finalizer.alive
    del desc
    assert not finalizer.alive


def test_backend_descriptors_take_typed_attributes_and_print_them():
    """The graph API's descriptors (no GPU needed until finalize): attributes set by type, shown
    in repr; a wrong attribute type is cuDNN's own BAD_PARAM_ATTRIBUTE_TYPE, naming the call."""
    from cudnnlite import graph
    from cudnnlite.enums import Attr, AttrType, BackendDescriptorType, DataType
    d = graph.BackendDescriptor(BackendDescriptorType.TENSOR_DESCRIPTOR, [
        (Attr.TENSOR_UNIQUE_ID, AttrType.INT64, 7),
        (Attr.TENSOR_DATA_TYPE, AttrType.DATA_TYPE, DataType.HALF),
        (Attr.TENSOR_DIMENSIONS, AttrType.INT64, [2, 3, 8, 8])], finalize=False)
    text = repr(d)
    assert text.startswith("BackendDescriptor(TENSOR_DESCRIPTOR, TENSOR_UNIQUE_ID=7")
    assert "TENSOR_DIMENSIONS=[2, 3, 8, 8]" in text and text.endswith("not finalized)")
    with pytest.raises(cl.CudnnError, match="cudnnBackendSetAttribute(.|\n)*ATTRIBUTE_TYPE"):
        d.set(Attr.TENSOR_STRIDES, AttrType.FLOAT, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(cl.BadParam, match="cudnnBackendSetAttribute"):
        d.set(Attr.CONVOLUTION_COMP_TYPE, AttrType.DATA_TYPE, DataType.FLOAT)


def test_the_conv_api_setting_is_checked():
    from cudnnlite import conv
    with pytest.raises(ValueError, match="api must be 'legacy' or 'graph'"):
        conv.configure(api="frontend")
    with conv.using(api="graph") as s:
        assert s.api == "graph"
    assert conv.settings.api == "legacy"


def test_a_problem_no_graph_engine_takes_goes_through_the_legacy_calls(monkeypatch, request):
    """api='graph' where no backend engine takes a problem (none on the host; float64 on a GPU,
    say): each direction runs through its legacy cudnnConvolution* call instead, counted in
    conv.graph_fallbacks with the reason, and the results equal NumPy float64's."""
    import host_kernels
    from conftest import gpu_path_on_host
    from cudnnlite import conv
    from reference import conv_backward_data, conv_backward_filter, conv_forward
    warn = conv._warn_fallback
    gpu_path_on_host(request, monkeypatch)
    monkeypatch.setattr(conv, "_warn_fallback", warn)
    rng = np.random.default_rng(3)
    x, W, gy = (rng.standard_normal(s) for s in ((2, 3, 6, 6), (4, 3, 3, 3), (2, 4, 6, 6)))
    hx, hW, hgy = (host_kernels.host(a.astype(np.float32)) for a in (x, W, gy))
    host_kernels.CALLS.clear()

    def directions():
        return [conv.forward(hx, hW, pad=1), conv.backward_data(hW, hgy, x.shape, pad=1),
                conv.backward_filter(hx, hgy, W.shape, pad=1)]
    with conv.using(api="graph"):
        with pytest.warns(RuntimeWarning, match="legacy call") as warned:
            got = directions()
        assert len(warned) == 3                  # each problem's first refusal, once
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            directions()
    geo = ((1, 1), (1, 1), (1, 1), 1)                         # stride, pad, dilation, groups
    want = [conv_forward(x, W, *geo), conv_backward_data(gy, W, x.shape, *geo),
            conv_backward_filter(x, gy, W.shape, *geo)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g.get()), w, rtol=1e-4, atol=1e-4)
    assert [host_kernels.CALLS[f"cudnnConvolution{d}"] for d in
            ("Forward", "BackwardData", "BackwardFilter")] == [2, 2, 2]
    assert conv.graph_fallbacks["calls"] == 6
    assert "no graph-API engine on the host" in str(conv.graph_fallbacks["last"])
    # the refusal kept for a problem holds none of the arrays of the call that made it
    import gc
    import weakref
    x2 = host_kernels.host(rng.standard_normal((1, 3, 5, 5)).astype(np.float32))
    ref = weakref.ref(x2)
    with conv.using(api="graph"), pytest.warns(RuntimeWarning):
        y2 = conv.forward(x2, hW, pad=1)
    del x2, y2
    gc.collect()
    assert ref() is None


def test_benchmark_timing_runs_on_its_own_scratch_output_and_workspace(monkeypatch, request):
    """conv._TimingRun (graph.fastest_plan's run): each plan executes on the call's a and b into
    a scratch output this object keeps (a copy of c when beta accumulates into it, so c is left
    alone) with a workspace of its own sized to the plan; the handle's workspace is not grown."""
    from types import SimpleNamespace
    import host_kernels
    from conftest import gpu_path_on_host
    from cudnnlite import conv
    gpu_path_on_host(request, monkeypatch)
    rng = np.random.default_rng(4)
    a, b, c = (host_kernels.host(rng.standard_normal(s).astype(np.float32))
               for s in ((2, 3, 6, 6), (4, 3, 3, 3), (2, 4, 6, 6)))
    executed = []
    plan = SimpleNamespace(workspace=256, execute=lambda h, uids, ptrs, ws: executed.append(
        (uids, ptrs, ws)))
    run = conv._TimingRun(conv.FWD, a, b, c, 1.0, "handle")
    run(plan)
    run(plan)
    uids, ptrs, ws = executed[0]
    assert ptrs == (a.data.ptr, b.data.ptr, run.scratch.data.ptr) != (a.data.ptr, b.data.ptr,
                                                                      c.data.ptr)
    assert np.array_equal(np.asarray(run.scratch.get()), np.asarray(c.get()))     # beta: c's copy
    assert ws == run.workspace.data.ptr and run.workspace.nbytes >= 256 and executed[1][2] == ws
    assert list(uids) == list(conv._UIDS["cudnnConvolutionForward"])


def test_benchmark_mode_keeps_the_fastest_plan_that_runs(monkeypatch):
    """graph.fastest_plan (algo_mode='benchmark' on the graph API): every accepted plan up to
    the limit is timed on the problem's arrays, one whose execution fails is skipped, the
    fastest is kept with every timing; none that runs is NotSupported naming the timings."""
    from types import SimpleNamespace
    from cudnnlite import graph
    plans = [SimpleNamespace(engine=e) for e in (7, 3, 12, 5)]
    asked = []
    monkeypatch.setattr(graph, "accepted_plans",
                        lambda h, g, accept, limit: asked.append(limit) or plans[:limit])
    ms = {7: 0.30, 3: 0.12, 12: None, 5: 0.20}         # engine 12 fails to execute
    ran = []

    def run(plan):
        ran.append(plan.engine)
        if ms[plan.engine] is None:
            raise cl.BadParam("cudnnBackendExecute", {}, "execution failed")

    def time_ms(fn):
        fn()
        return ms[ran[-1]]
    checked = []
    best = graph.fastest_plan(None, "g", None, run, limit=4, time_ms=time_ms,
                              check=lambda: checked.append(ran[-1]))
    assert checked == [12]                  # the stream checked once, after the failed plan
    assert best.engine == 3 and asked == [4] and ran == [7, 3, 12, 5]
    assert [t[0] for t in best.timings] == [7, 3, 12, 5] and best.timings[1][1] == 0.12
    assert "execution failed" in best.timings[2][1]
    assert graph.fastest_plan(None, "g", None, run, limit=2, time_ms=time_ms,
                              check=lambda: None).engine == 3
    ms.update({7: None, 3: None})
    with pytest.raises(cl.NotSupported, match="every accepted plan failed"):
        graph.fastest_plan(None, "g", None, run, limit=3, time_ms=time_ms, check=lambda: None)

    def sticky():                            # a CUDA error on the stream: raised, not skipped
        raise RuntimeError("cudaErrorIllegalAddress")
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        graph.fastest_plan(None, "g", None, run, limit=3, time_ms=time_ms, check=sticky)


def test_accepted_plans_skip_a_configuration_met_before(monkeypatch):
    """The heuristics' mode-A list and fallback list overlap: an engine configuration with the
    engine and knob choices of one met before is not built or counted again, so `limit` (the
    benchmark's 10) reaches that many distinct configurations; one whose key cannot be read is
    tried as it comes."""
    from types import SimpleNamespace
    from cudnnlite import graph
    from cudnnlite.enums import HeurMode
    lists = {HeurMode.A: ["a1", "a2", "a3"], HeurMode.FALLBACK: ["f1", "f2", "f3", "f4"]}
    keys = {"a1": (7, ((3, 1),)), "a2": (7, ((3, 2),)), "a3": (9, ()), "f1": (7, ((3, 1),)),
            "f2": (9, ()), "f3": None, "f4": (11, ())}
    monkeypatch.setattr(graph, "engine_configs", lambda g, mode: lists[mode])

    def config_key(cfg):
        if keys[cfg] is None:
            raise cl.NotSupported("cudnnBackendGetAttribute", {}, "unreadable")
        return keys[cfg]
    monkeypatch.setattr(graph, "config_key", config_key)
    built = []

    def plan(handle, cfg):
        built.append(cfg)
        return SimpleNamespace(cfg=cfg, engine=cfg, notes=[], workspace=0)
    monkeypatch.setattr(graph, "ExecutionPlan", plan)
    got = graph.accepted_plans(None, "g", limit=10)
    assert [p.cfg for p in got] == built == ["a1", "a2", "a3", "f3", "f4"]
    assert [p.cfg for p in graph.accepted_plans(None, "g", limit=4)] == ["a1", "a2", "a3", "f3"]


def test_execution_plan_keeps_a_variant_pack_per_pointer_set(monkeypatch):
    """An eager loop alternates pointer sets (netD on real, then on fake images): each set's pack
    is made once and found again, up to PACKS_PER_PLAN sets; the pack handed to cuDNN is the one
    made for exactly those pointers."""
    import threading
    from cudnnlite import api, graph
    from cudnnlite._cache import LRU
    made, executed = [], []

    class FakePack:
        def __init__(self, kind, attrs):
            self.pointers = attrs[1][2]
            made.append(self)
    monkeypatch.setattr(graph, "BackendDescriptor", FakePack)
    monkeypatch.setattr(api, "cudnnBackendExecute", lambda h, plan, pack: executed.append(pack))
    plan = graph.ExecutionPlan.__new__(graph.ExecutionPlan)
    plan.desc, plan._packs, plan._lock = None, LRU(graph.PACKS_PER_PLAN), threading.Lock()
    sets = [[16 * k, 16 * k + 1024, 16 * k + 2048] for k in range(3)]
    for _ in range(4):
        for ptrs in sets:
            plan.execute(None, [1, 2, 3], ptrs, 0)
    assert len(made) == 3 and [p.pointers for p in executed] == sets * 4
    for k in range(graph.PACKS_PER_PLAN + 1):            # more sets than kept: the oldest goes
        plan.execute(None, [1, 2, 3], [k, k + 1, k + 2], 0)
    plan.execute(None, [1, 2, 3], sets[0], 0)
    assert len(made) == 3 + graph.PACKS_PER_PLAN + 1 + 1


def test_pointwise_operations_take_their_attributes_with_no_gpu():
    """The fused conv + bias + activation graph's pointwise pieces: each attribute name goes with
    its type (cuDNN refuses a mismatch at set time, GPU or not); finalizing needs a GPU."""
    from cudnnlite import graph
    from cudnnlite.enums import BackendDescriptorType as Kind, DataType, PointwiseMode
    t = [graph.BackendDescriptor(Kind.TENSOR_DESCRIPTOR, [], finalize=False) for _ in range(3)]
    add = graph.pointwise_operation(PointwiseMode.ADD, t[0], t[1], b=t[2], finalize=False)
    relu = graph.pointwise_operation(PointwiseMode.RELU_FWD, t[1], t[0], compute=DataType.DOUBLE,
                                     finalize=False)
    assert "OPERATION_POINTWISE_BDESC" in repr(add) and "BDESC" not in repr(relu)
    pw = relu.attrs["OPERATION_POINTWISE_PW_DESCRIPTOR"]
    assert pw.attrs == {"POINTWISE_MODE": PointwiseMode.RELU_FWD,
                        "POINTWISE_MATH_PREC": DataType.DOUBLE, "POINTWISE_NAN_PROPAGATION": 1}
    with pytest.raises(cl.BadParam):
        pw.set(graph.Attr.POINTWISE_MODE, graph.AttrType.INT64, 3)    # the wrong type


def test_batch_norm_fusion_pieces_take_their_attributes_with_no_gpu():
    """What tools.bench_fusions builds: batch norm's statistics as a GenStats operation, and
    LeakyReLU as RELU_FWD with a slope below zero; each attribute goes with its type (cuDNN
    checks at set time, GPU or not: a slope given as an int64 is refused)."""
    from cudnnlite import graph
    from cudnnlite.enums import BackendDescriptorType as Kind, DataType, PointwiseMode
    t = [graph.BackendDescriptor(Kind.TENSOR_DESCRIPTOR, [], finalize=False) for _ in range(3)]
    stats = graph.gen_stats_operation(t[0], t[1], t[2], finalize=False)
    assert stats.attrs == {"OPERATION_GENSTATS_MODE": graph.GenStatsMode.SUM_SQSUM,
                           "OPERATION_GENSTATS_MATH_PREC": DataType.FLOAT,
                           "OPERATION_GENSTATS_XDESC": t[0], "OPERATION_GENSTATS_SUMDESC": t[1],
                           "OPERATION_GENSTATS_SQSUMDESC": t[2]}
    leaky = graph.pointwise_operation(PointwiseMode.RELU_FWD, t[0], t[1], slope=0.2,
                                      finalize=False)
    pw = leaky.attrs["OPERATION_POINTWISE_PW_DESCRIPTOR"]
    assert pw.attrs["POINTWISE_RELU_LOWER_CLIP_SLOPE"] == 0.2
    assert "RELU_LOWER_CLIP_SLOPE" not in repr(graph.pointwise(PointwiseMode.RELU_FWD,
                                                               DataType.FLOAT, finalize=False))
    with pytest.raises(cl.BadParam):
        pw.set(graph.Attr.POINTWISE_RELU_LOWER_CLIP_SLOPE, graph.AttrType.INT64, 0)


# the backend API's enums as cudnnlite spells them -> the headers' prefix; cuDNN's own spelling
# where it differs
_HEADER_PREFIX = {"BackendDescriptorType": "CUDNN_BACKEND_", "AttrType": "CUDNN_TYPE_",
                  "Attr": "CUDNN_ATTR_", "PointwiseMode": "CUDNN_POINTWISE_",
                  "GenStatsMode": "CUDNN_GENSTATS_", "HeurMode": "CUDNN_HEUR_MODE_",
                  "NumericalNote": "CUDNN_NUMERICAL_NOTE_", "DataType": "CUDNN_DATA_"}
_HEADER_SPELLING = {("AttrType", "NAN_PROPAGATION"): "NAN_PROPOGATION"}


@pytest.mark.parametrize("enum", sorted(_HEADER_PREFIX))
def test_backend_enums_equal_the_installed_headers(enum):
    """Every value cudnnlite.enums gives the graph API equals the installed cuDNN's own header
    (cudnn_graph.h, found by cuda.pathfinder): a wrong attribute number would set another
    attribute -- RELU_UPPER_CLIP (4) for RELU_LOWER_CLIP_SLOPE (5) would compute a clipped ReLU,
    no error."""
    import pathlib
    import re
    from cudnnlite import enums
    pathfinder = pytest.importorskip("cuda.pathfinder")
    include = pathfinder.find_nvidia_header_directory("cudnn")
    if include is None:
        pytest.skip("no cuDNN headers installed")
    text = "\n".join(p.read_text() for p in pathlib.Path(include).glob("cudnn*.h"))
    for m in getattr(enums, enum):
        name = _HEADER_SPELLING.get((enum, m.name), m.name)
        found = {int(v) for v in re.findall(
            rf"\b{_HEADER_PREFIX[enum]}{name}\s*(?:CUDNN_DEPRECATED_ENUM\s*)?=\s*(-?\d+)", text)}
        assert found == {m.value}, (enum, m.name, m.value, found)

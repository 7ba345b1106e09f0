"""cuDNN's backend ("graph") API through ctypes: descriptors of any kind set by attribute, operation
graphs, engine heuristics, execution plans, and execution through variant packs.

    x = tensor(uid=1, dims=(N, C, H, W), strides=..., dtype=DataType.FLOAT)
    op = BackendDescriptor(OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, [(Attr.X, x), ...])
    g = operation_graph(handle, [op])
    plan = first_plan(handle, g, accept)          # heuristics' engine configs, best first
    execute(handle, plan, {1: x_ptr, 2: w_ptr, 3: y_ptr}, workspace_ptr)

Every descriptor is finalized once and kept (a plan is built once per problem and cached by the
caller); a call then costs one cudnnBackendExecute and, for pointers the plan has not seen among
its last PACKS_PER_PLAN sets, one variant pack. Descriptors free themselves and print every attribute they were given.
"""
import ctypes
import threading
import weakref

from . import api
from ._cache import LRU
from .enums import (Attr, AttrType, BackendDescriptorType as Kind, DataType, GenStatsMode,
                    HeurMode, NumericalNote, PointwiseMode)
from .errors import CudnnError

PACKS_PER_PLAN = 32     # variant packs kept per execution plan (one per pointer set; an eager
                        # DCGAN step made ~10 a step anew with 8 kept: H100 profile, 2026-11-23)

_CTYPES = {
    AttrType.HANDLE: ctypes.c_void_p, AttrType.DATA_TYPE: ctypes.c_int,
    AttrType.BOOLEAN: ctypes.c_bool, AttrType.INT64: ctypes.c_int64,
    AttrType.FLOAT: ctypes.c_float, AttrType.DOUBLE: ctypes.c_double,
    AttrType.VOID_PTR: ctypes.c_void_p, AttrType.CONVOLUTION_MODE: ctypes.c_int,
    AttrType.HEUR_MODE: ctypes.c_int, AttrType.NUMERICAL_NOTE: ctypes.c_int,
    AttrType.BEHAVIOR_NOTE: ctypes.c_int, AttrType.BACKEND_DESCRIPTOR: ctypes.c_void_p,
    AttrType.INT32: ctypes.c_int32, AttrType.POINTWISE_MODE: ctypes.c_int,
    AttrType.NAN_PROPAGATION: ctypes.c_int, AttrType.GENSTATS_MODE: ctypes.c_int,
    AttrType.KNOB_TYPE: ctypes.c_int,
}


def _pointer_value(v):
    """A handle / descriptor / int as the void* cuDNN takes."""
    p = getattr(v, "_as_parameter_", v)
    return p.value if isinstance(p, ctypes.c_void_p) else p


class BackendDescriptor:
    """Owns one cudnnBackendDescriptor_t of `kind`. attrs: (Attr, AttrType, values) triples set in
    order; finalize=True finalizes it. Descriptors given as values are kept alive with it."""

    def __init__(self, kind, attrs=(), finalize=True):
        self.kind = Kind(kind)
        handle = ctypes.c_void_p()
        api.cudnnBackendCreateDescriptor(self.kind, ctypes.byref(handle))
        self._as_parameter_ = handle
        self._finalizer = weakref.finalize(self, api.cudnnBackendDestroyDescriptor, handle)
        self.attrs = {}
        self._keep = []
        self.finalized = False
        for name, type_, values in attrs:
            self.set(name, type_, values)
        if finalize:
            self.finalize()

    def set(self, name, type_, values):
        name, type_ = Attr(name), AttrType(type_)
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        ctype = _CTYPES[type_]
        if ctype is ctypes.c_void_p:
            self._keep += [v for v in values if isinstance(v, BackendDescriptor)]
            arr = (ctype * len(values))(*[_pointer_value(v) for v in values])
        else:
            number = float if ctype in (ctypes.c_float, ctypes.c_double) else int
            arr = (ctype * len(values))(*[number(v) for v in values])
        api.cudnnBackendSetAttribute(self, name, type_, len(values), arr)
        self.attrs[name.name] = values if len(values) > 1 else values[0]

    def get(self, name, type_, count=1):
        """Up to `count` elements of attribute `name` (a list)."""
        ctype = _CTYPES[AttrType(type_)]
        arr = (ctype * max(count, 1))()
        n = ctypes.c_int64()
        api.cudnnBackendGetAttribute(self, Attr(name), AttrType(type_), count, ctypes.byref(n), arr)
        return list(arr[:n.value])

    def count(self, name, type_):
        """How many elements attribute `name` holds."""
        n = ctypes.c_int64()
        api.cudnnBackendGetAttribute(self, Attr(name), AttrType(type_), 0, ctypes.byref(n), None)
        return n.value

    def finalize(self):
        api.cudnnBackendFinalize(self)
        self.finalized = True
        return self

    def __repr__(self):
        def show(v):
            if isinstance(v, BackendDescriptor):
                return f"<{v.kind.name}>"
            if isinstance(v, list):
                return "[" + ", ".join(show(x) for x in v) + "]"
            return repr(v)
        body = ", ".join(f"{k}={show(v)}" for k, v in self.attrs.items())
        return f"BackendDescriptor({self.kind.name}{', ' + body if body else ''}" \
               f"{'' if self.finalized else ', not finalized'})"


def tensor(uid, dims, strides, dtype, alignment=16, virtual=False):
    """A finalized backend tensor: unique id, logical dims (N, C, *spatial) and element strides."""
    return BackendDescriptor(Kind.TENSOR_DESCRIPTOR, [
        (Attr.TENSOR_UNIQUE_ID, AttrType.INT64, uid),
        (Attr.TENSOR_DATA_TYPE, AttrType.DATA_TYPE, DataType(dtype)),
        (Attr.TENSOR_DIMENSIONS, AttrType.INT64, list(dims)),
        (Attr.TENSOR_STRIDES, AttrType.INT64, list(strides)),
        (Attr.TENSOR_BYTE_ALIGNMENT, AttrType.INT64, alignment),
        (Attr.TENSOR_IS_VIRTUAL, AttrType.BOOLEAN, virtual)])


def convolution(pad, stride, dilation, compute, mode=1):
    """A finalized backend convolution descriptor (mode 1 = CUDNN_CROSS_CORRELATION, as
    PyTorch's; symmetric padding: pre = post = pad)."""
    return BackendDescriptor(Kind.CONVOLUTION_DESCRIPTOR, [
        (Attr.CONVOLUTION_COMP_TYPE, AttrType.DATA_TYPE, DataType(compute)),
        (Attr.CONVOLUTION_CONV_MODE, AttrType.CONVOLUTION_MODE, mode),
        (Attr.CONVOLUTION_SPATIAL_DIMS, AttrType.INT64, len(pad)),
        (Attr.CONVOLUTION_DILATIONS, AttrType.INT64, list(dilation)),
        (Attr.CONVOLUTION_FILTER_STRIDES, AttrType.INT64, list(stride)),
        (Attr.CONVOLUTION_PRE_PADDINGS, AttrType.INT64, list(pad)),
        (Attr.CONVOLUTION_POST_PADDINGS, AttrType.INT64, list(pad))])


# the three convolution operations: (descriptor kind, attribute names of a, b, c, conv, alpha, beta)
_CONV_OPS = {
    "cudnnConvolutionForward": (
        Kind.OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        (Attr.OPERATION_CONVOLUTION_FORWARD_X, Attr.OPERATION_CONVOLUTION_FORWARD_W,
         Attr.OPERATION_CONVOLUTION_FORWARD_Y, Attr.OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         Attr.OPERATION_CONVOLUTION_FORWARD_ALPHA, Attr.OPERATION_CONVOLUTION_FORWARD_BETA)),
    "cudnnConvolutionBackwardData": (
        Kind.OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        (Attr.OPERATION_CONVOLUTION_BWD_DATA_W, Attr.OPERATION_CONVOLUTION_BWD_DATA_DY,
         Attr.OPERATION_CONVOLUTION_BWD_DATA_DX, Attr.OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         Attr.OPERATION_CONVOLUTION_BWD_DATA_ALPHA, Attr.OPERATION_CONVOLUTION_BWD_DATA_BETA)),
    "cudnnConvolutionBackwardFilter": (
        Kind.OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
        (Attr.OPERATION_CONVOLUTION_BWD_FILTER_X, Attr.OPERATION_CONVOLUTION_BWD_FILTER_DY,
         Attr.OPERATION_CONVOLUTION_BWD_FILTER_DW, Attr.OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         Attr.OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, Attr.OPERATION_CONVOLUTION_BWD_FILTER_BETA)),
}


def convolution_operation(direction, a, b, c, conv, alpha, beta, double):
    """The finalized operation of one convolution direction, its tensors in the legacy call's
    argument order (fwd: x, W, y; bwd-data: W, dy, dx; bwd-filter: x, dy, dW)."""
    kind, names = _CONV_OPS[direction]
    scalar = AttrType.DOUBLE if double else AttrType.FLOAT
    return BackendDescriptor(kind, [
        (names[0], AttrType.BACKEND_DESCRIPTOR, a), (names[1], AttrType.BACKEND_DESCRIPTOR, b),
        (names[2], AttrType.BACKEND_DESCRIPTOR, c), (names[3], AttrType.BACKEND_DESCRIPTOR, conv),
        (names[4], scalar, alpha), (names[5], scalar, beta)])


def pointwise(mode, compute, finalize=True, slope=None):
    """A pointwise descriptor: the operation (PointwiseMode) and the precision it computes in;
    NaN propagates (cuDNN's default for ReLU drops it; torch keeps it). slope: RELU_FWD's slope
    below zero (LeakyReLU's negative_slope)."""
    attrs = [(Attr.POINTWISE_MODE, AttrType.POINTWISE_MODE, PointwiseMode(mode)),
             (Attr.POINTWISE_MATH_PREC, AttrType.DATA_TYPE, DataType(compute)),
             (Attr.POINTWISE_NAN_PROPAGATION, AttrType.NAN_PROPAGATION, 1)]
    if slope is not None:
        attrs.append((Attr.POINTWISE_RELU_LOWER_CLIP_SLOPE, AttrType.DOUBLE, slope))
    return BackendDescriptor(Kind.POINTWISE_DESCRIPTOR, attrs, finalize)


def pointwise_operation(mode, x, y, b=None, compute=DataType.FLOAT, finalize=True, slope=None):
    """y = mode(x) or y = mode(x, b) (b broadcast along its size-1 dims, as a bias (1, K, 1, 1))."""
    attrs = [(Attr.OPERATION_POINTWISE_PW_DESCRIPTOR, AttrType.BACKEND_DESCRIPTOR,
              pointwise(mode, compute, finalize, slope)),
             (Attr.OPERATION_POINTWISE_XDESC, AttrType.BACKEND_DESCRIPTOR, x)]
    if b is not None:
        attrs.append((Attr.OPERATION_POINTWISE_BDESC, AttrType.BACKEND_DESCRIPTOR, b))
    attrs.append((Attr.OPERATION_POINTWISE_YDESC, AttrType.BACKEND_DESCRIPTOR, y))
    return BackendDescriptor(Kind.OPERATION_POINTWISE_DESCRIPTOR, attrs, finalize)


def gen_stats_operation(x, sum_, sqsum, compute=DataType.FLOAT, finalize=True):
    """sum_ and sqsum (1, C, 1, 1) = per-channel sum and sum of squares of x: batch norm's
    statistics, as an operation a convolution's epilogue can compute."""
    return BackendDescriptor(Kind.OPERATION_GEN_STATS_DESCRIPTOR, [
        (Attr.OPERATION_GENSTATS_MODE, AttrType.GENSTATS_MODE, GenStatsMode.SUM_SQSUM),
        (Attr.OPERATION_GENSTATS_MATH_PREC, AttrType.DATA_TYPE, DataType(compute)),
        (Attr.OPERATION_GENSTATS_XDESC, AttrType.BACKEND_DESCRIPTOR, x),
        (Attr.OPERATION_GENSTATS_SUMDESC, AttrType.BACKEND_DESCRIPTOR, sum_),
        (Attr.OPERATION_GENSTATS_SQSUMDESC, AttrType.BACKEND_DESCRIPTOR, sqsum)], finalize)


def operation_graph(handle, ops):
    return BackendDescriptor(Kind.OPERATIONGRAPH_DESCRIPTOR, [
        (Attr.OPERATIONGRAPH_HANDLE, AttrType.HANDLE, handle),
        (Attr.OPERATIONGRAPH_OPS, AttrType.BACKEND_DESCRIPTOR, list(ops))])


def engine_configs(graph, mode=HeurMode.A):
    """The engine configurations cuDNN's heuristics propose for `graph`, best first."""
    heur = BackendDescriptor(Kind.ENGINEHEUR_DESCRIPTOR, [
        (Attr.ENGINEHEUR_OPERATION_GRAPH, AttrType.BACKEND_DESCRIPTOR, graph),
        (Attr.ENGINEHEUR_MODE, AttrType.HEUR_MODE, HeurMode(mode))])
    n = heur.count(Attr.ENGINEHEUR_RESULTS, AttrType.BACKEND_DESCRIPTOR)
    cfgs = [BackendDescriptor(Kind.ENGINECFG_DESCRIPTOR, finalize=False) for _ in range(n)]
    arr = (ctypes.c_void_p * max(n, 1))(*[_pointer_value(c) for c in cfgs])
    got = ctypes.c_int64()
    api.cudnnBackendGetAttribute(heur, Attr.ENGINEHEUR_RESULTS, AttrType.BACKEND_DESCRIPTOR, n,
                                 ctypes.byref(got), arr)
    for c in cfgs[:got.value]:
        c.finalized = True              # cuDNN filled (and finalized) them
        c._keep += [heur, graph]        # what they were made from lives as long as they do
    return cfgs[:got.value]


def engine_notes(cfg):
    """(engine global index, [NumericalNote]) of an engine configuration."""
    engine = BackendDescriptor(Kind.ENGINE_DESCRIPTOR, finalize=False)
    arr = (ctypes.c_void_p * 1)(_pointer_value(engine))
    n = ctypes.c_int64()
    api.cudnnBackendGetAttribute(cfg, Attr.ENGINECFG_ENGINE, AttrType.BACKEND_DESCRIPTOR, 1,
                                 ctypes.byref(n), arr)
    engine.finalized = True
    index = engine.get(Attr.ENGINE_GLOBAL_INDEX, AttrType.INT64)[0]
    notes = engine.get(Attr.ENGINE_NUMERICAL_NOTE, AttrType.NUMERICAL_NOTE, 16)
    known = []
    for v in notes:
        try:
            known.append(NumericalNote(v))
        except ValueError:
            known.append(v)
    return index, known


KNOB_TYPES = 46          # CUDNN_KNOB_TYPE_COUNTS: at most one choice per knob type


def engine_knobs(cfg):
    """The knob choices of an engine configuration: ((knob type, value), ...), sorted."""
    choices = [BackendDescriptor(Kind.KNOB_CHOICE_DESCRIPTOR, finalize=False)
               for _ in range(KNOB_TYPES)]
    arr = (ctypes.c_void_p * KNOB_TYPES)(*[_pointer_value(c) for c in choices])
    got = ctypes.c_int64()
    api.cudnnBackendGetAttribute(cfg, Attr.ENGINECFG_KNOB_CHOICES, AttrType.BACKEND_DESCRIPTOR,
                                 KNOB_TYPES, ctypes.byref(got), arr)
    knobs = []
    for c in choices[:got.value]:
        c.finalized = True              # cuDNN filled them
        knobs.append((c.get(Attr.KNOB_CHOICE_KNOB_TYPE, AttrType.KNOB_TYPE)[0],
                      c.get(Attr.KNOB_CHOICE_KNOB_VALUE, AttrType.INT64)[0]))
    return tuple(sorted(knobs))


def config_key(cfg):
    """What makes two engine configurations the same: (engine global index, knob choices)."""
    return engine_notes(cfg)[0], engine_knobs(cfg)


class ExecutionPlan:
    """A finalized execution plan: the engine chosen, its notes, its workspace size."""

    def __init__(self, handle, cfg):
        self.cfg = cfg
        self.desc = BackendDescriptor(Kind.EXECUTION_PLAN_DESCRIPTOR, [
            (Attr.EXECUTION_PLAN_HANDLE, AttrType.HANDLE, handle),
            (Attr.EXECUTION_PLAN_ENGINE_CONFIG, AttrType.BACKEND_DESCRIPTOR, cfg)])
        self.workspace = self.desc.get(Attr.EXECUTION_PLAN_WORKSPACE_SIZE, AttrType.INT64)[0]
        self.engine, self.notes = engine_notes(cfg)
        self.desc.summary = (f"engine {self.engine}" + "".join(
            f" {getattr(n, 'name', n)}" for n in self.notes))   # what profilers print
        self._packs = LRU(PACKS_PER_PLAN)   # (pointers, workspace) -> variant pack
        self._lock = threading.Lock()

    def __repr__(self):
        return (f"ExecutionPlan(engine={self.engine}, notes={[getattr(n, 'name', n) for n in self.notes]}, "
                f"workspace={self.workspace})")

    def execute(self, handle, uids, pointers, workspace):
        """Run the plan on device pointers (uids[i] -> pointers[i]) with `workspace` bytes at
        the workspace pointer. Variant packs are kept per pointer set (the last PACKS_PER_PLAN):
        an eager training loop allocates the same way every step, so CuPy's pool hands out the
        same addresses and each call of a step finds its pack from the step before."""
        key = (tuple(pointers), workspace)
        with self._lock:
            pack = self._packs.get(key, lambda: BackendDescriptor(
                Kind.VARIANT_PACK_DESCRIPTOR, [
                    (Attr.VARIANT_PACK_UNIQUE_IDS, AttrType.INT64, list(uids)),
                    (Attr.VARIANT_PACK_DATA_POINTERS, AttrType.VOID_PTR, list(pointers)),
                    (Attr.VARIANT_PACK_WORKSPACE, AttrType.VOID_PTR, workspace)]))
        api.cudnnBackendExecute(handle, self.desc, pack)


def accepted_plans(handle, graph, accept=lambda notes, workspace: True, limit=1):
    """Up to `limit` plans, in the heuristics' order (mode A, then the fallback list), built
    from the engine configurations that finalize into a plan `accept(notes, workspace)` takes;
    CudnnError NotSupported naming every configuration tried (and how each failed) when none
    does. A configuration met before (the same engine and knob choices: the two lists overlap)
    is skipped, so `limit` distinct ones are tried."""
    from .errors import NotSupported
    tried, plans, met = [], [], set()
    for mode in (HeurMode.A, HeurMode.FALLBACK):
        try:
            cfgs = engine_configs(graph, mode)
        except CudnnError as e:
            tried.append(f"heuristics {mode.name}: {str(e).splitlines()[0]}")
            continue
        for cfg in cfgs:
            try:
                key = config_key(cfg)
            except CudnnError:
                key = None                    # (unreadable: tried as it comes)
            if key is not None:
                if key in met:
                    continue
                met.add(key)
            try:
                plan = ExecutionPlan(handle, cfg)
            except CudnnError as e:
                tried.append(f"{mode.name} config: {str(e).splitlines()[0]}")
                continue
            if accept(plan.notes, plan.workspace):
                plans.append(plan)
                if len(plans) == limit:
                    return plans
            else:
                tried.append(f"engine {plan.engine} "
                             f"{[getattr(n, 'name', n) for n in plan.notes]} "
                             f"workspace {plan.workspace}: not accepted")
    if plans:
        return plans
    raise NotSupported("cudnnBackendFinalize", {"graph": graph, "tried": tried},
                       "no engine configuration of the heuristics gives an accepted plan")


def first_plan(handle, graph, accept=lambda notes, workspace: True):
    """The first plan accepted_plans finds: cuDNN's heuristics' choice."""
    return accepted_plans(handle, graph, accept, limit=1)[0]


BENCHMARK_LIMIT = 10     # plans timed per problem (torch.backends.cudnn.benchmark_limit's default)


def event_ms(fn, repeats=3):
    """GPU milliseconds of one fn() on the current stream: CUDA events around `repeats` calls,
    after one untimed call."""
    import cupy
    fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / repeats


def _stream_error():
    """Raise the CUDA error a failed launch left on the current stream, if any (a sticky one
    that every later call would meet too): synchronizing surfaces it."""
    import cupy
    cupy.cuda.get_current_stream().synchronize()


def fastest_plan(handle, graph, accept, run, limit=BENCHMARK_LIMIT, time_ms=event_ms,
                 check=_stream_error):
    """The fastest of the first `limit` accepted plans (accepted_plans), each timed as
    time_ms(lambda: run(plan)): what torch's cudnn.benchmark does with the backend API. run(plan)
    executes the plan on the problem's own arrays (a scratch output). A plan whose execution
    cuDNN refuses is skipped, after check() says the stream holds no CUDA error (which would
    fail every plan, and then everything else: it is raised). The plan returned carries
    .timings, [(engine, ms or the error)] of all."""
    best, best_ms, timings = None, float("inf"), []
    for plan in accepted_plans(handle, graph, accept, limit):
        try:
            ms = time_ms(lambda: run(plan))
        except CudnnError as e:
            check()
            timings.append((plan.engine, str(e).splitlines()[0]))
            continue
        timings.append((plan.engine, ms))
        if ms < best_ms:
            best, best_ms = plan, ms
    if best is None:
        from .errors import NotSupported
        raise NotSupported("cudnnBackendExecute", {"graph": graph, "timings": timings},
                           "every accepted plan failed to execute")
    best.timings = timings
    return best

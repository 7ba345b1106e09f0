"""Convolution on CuPy arrays: forward, backward-data, backward-filter, backward-bias, and the
transposed convolution, which *is* backward-data.

Shape legend: x (N, C, *spatial), W (K, C/groups, *filter), y (N, K, *out) in logical order;
layout 'NCHW' stores them so, 'NHWC' stores x/y as (N, *spatial, C) and W as (K, *filter, C).
Each problem (shapes, strides, dtype, geometry) gets a Plan holding its descriptors (an LRU of
PLAN_CACHE_SIZE); each direction's algorithm is chosen once per Plan, device and `settings`
(heuristics, benchmark, or explicit). Arrays pass cudnnlite.boundary's checks first.
"""
import ctypes
import operator
import weakref
from dataclasses import dataclass
from typing import NamedTuple

from . import api
from .descriptors import (ConvolutionDescriptor, FilterDescriptor, TensorDescriptor, as_tuple,
                          check_layout, conv_output_shape, data_type, element_strides,
                          logical_axes, packed_strides)
from .enums import (ConvBwdDataAlgo, ConvBwdFilterAlgo, ConvFwdAlgo, DataType, MathType,
                    PointwiseMode, Status)
from .errors import BadParam, BadParamShapeMismatch, NotSupported
from ._cache import LRU
from ._settings import cached_hash, settings_functions, state_without_hash
from .handle import keep_alive
from .boundary import (ALIGNMENT, CallCache, apart, check_out, check_shape, common_dtype,
                       device_array, handle, output, packed, scalar, strided)


@dataclass(frozen=True)
class Settings:
    """How algorithms are chosen. Part of every cache key, so changing it takes effect at once."""
    __hash__ = cached_hash
    __getstate__ = state_without_hash
    algo_mode: str = "heuristic"        # "heuristic" (cudnnGet*_v7; the graph heuristics' first)
                                        # or "benchmark" (cudnnFind*Ex; timing the graph's plans)
    deterministic: bool = False         # only algorithms cuDNN reports as deterministic
    allow_tf32: bool = True             # fp32 convs may use TF32 tensor cores (PyTorch's default)
    workspace_limit: int = 1 << 30      # bytes; algorithms needing more are skipped
    api: str = "legacy"                 # "legacy" (cudnnConvolution*) or "graph" (backend API:
                                        # cached execution plans run through variant packs, of
                                        # the engines the settings above accept the heuristics'
                                        # first, or with "benchmark" the fastest of their first
                                        # graph.BENCHMARK_LIMIT; 26-33 against 100-150 us of host
                                        # time a call in a DCGAN step on an H100)


settings = Settings()


def _check(changes):
    if "algo_mode" in changes and changes["algo_mode"] not in ("heuristic", "benchmark"):
        raise ValueError(f"algo_mode must be 'heuristic' or 'benchmark', got {changes['algo_mode']!r}")
    if "api" in changes and changes["api"] not in ("legacy", "graph"):
        raise ValueError(f"api must be 'legacy' or 'graph', got {changes['api']!r}")


# configure(deterministic=True) for the rest of the process; `with conv.using(api="graph"):`
configure, using = settings_functions(__name__, _check)


class Choice(NamedTuple):
    algo: int
    math_type: MathType
    workspace: int


class _Direction:
    """One of the three convolutions: inputs a, b -> output c, in cuDNN's argument order."""

    def __init__(self, name, heuristics, find, workspace_size, max_count, perf, algos):
        self.name, self.heuristics, self.find = name, heuristics, find
        self.workspace_size, self.max_count, self.perf, self.algos = \
            workspace_size, max_count, perf, algos

    @property
    def compute(self):
        """The C function, looked up in cudnnlite.api at call time like every other call site
        (so a profiler that wraps api's compute functions, tools.kernels, sees these too)."""
        return getattr(api, self.name)

    def __repr__(self):
        return f"<{self.name}>"


FWD = _Direction("cudnnConvolutionForward",
                 api.cudnnGetConvolutionForwardAlgorithm_v7,
                 api.cudnnFindConvolutionForwardAlgorithmEx,
                 api.cudnnGetConvolutionForwardWorkspaceSize,
                 api.cudnnGetConvolutionForwardAlgorithmMaxCount, api.ConvFwdAlgoPerf, ConvFwdAlgo)
BWD_DATA = _Direction("cudnnConvolutionBackwardData",
                      api.cudnnGetConvolutionBackwardDataAlgorithm_v7,
                      api.cudnnFindConvolutionBackwardDataAlgorithmEx,
                      api.cudnnGetConvolutionBackwardDataWorkspaceSize,
                      api.cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
                      api.ConvBwdDataAlgoPerf, ConvBwdDataAlgo)
BWD_FILTER = _Direction("cudnnConvolutionBackwardFilter",
                        api.cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                        api.cudnnFindConvolutionBackwardFilterAlgorithmEx,
                        api.cudnnGetConvolutionBackwardFilterWorkspaceSize,
                        api.cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
                        api.ConvBwdFilterAlgoPerf, ConvBwdFilterAlgo)


def requested_math(dt):
    if dt in (DataType.HALF, DataType.BFLOAT16):
        return MathType.TENSOR_OP
    if dt == DataType.FLOAT and not settings.allow_tf32:
        return MathType.FMA
    return MathType.DEFAULT


class Plan:
    """Descriptors of one convolution problem, and the algorithm chosen for each direction."""

    def __init__(self, x_dims, x_strides, w_dims, dt, layout, pad, stride, dilation, groups):
        self.dt, self.layout = dt, layout
        self.x = TensorDescriptor(x_dims, dt, x_strides)
        self.w = FilterDescriptor(w_dims, dt, layout)
        compute = DataType.DOUBLE if dt == DataType.DOUBLE else DataType.FLOAT
        spatial = len(x_dims) - 2
        self._conv_args = dict(pad=pad, stride=stride, dilation=dilation, spatial_dims=spatial,
                               groups=groups, compute_type=compute)
        probe = ConvolutionDescriptor(**self._conv_args)
        self.y_dims = conv_output_shape(self.x, self.w, probe)
        self.y = TensorDescriptor(self.y_dims, dt, packed_strides(self.y_dims, layout))
        self.y_shape = _shape_in_layout(self.y_dims, layout)     # as the output array is stored
        self._convs = {}      # math type -> ConvolutionDescriptor
        self._choices = {}    # (direction, device, settings, algo) -> Choice
        self.geometry = tuple(as_tuple(v, spatial) for v in (pad, stride, dilation)) + (groups,)
        # (direction, device, alpha, beta, settings) -> plan, or the NotSupported
        # that building it raised (not retried on every call)
        self._graph_plans = LRU(GRAPH_PLANS_PER_PROBLEM)
        self._descs = {FWD: (self.x, self.w, self.y), BWD_DATA: (self.w, self.y, self.x),
                       BWD_FILTER: (self.x, self.y, self.w)}

    def conv(self, math_type):
        desc = self._convs.get(math_type)
        if desc is None:
            desc = self._convs[math_type] = ConvolutionDescriptor(**self._conv_args,
                                                                  math_type=math_type)
        return desc

    def descs(self, d):
        """(a, b, c) descriptors in direction d's argument order."""
        return self._descs[d]

    def choose(self, d, handle, a, b, c, algo=None):
        """The algorithm for direction d on handle's device under the current settings (chosen
        once per device: GPUs differ in what is fastest and what fits)."""
        key = (d.name, handle.device_id, settings, algo)
        choice = self._choices.get(key)
        if choice is None:
            choice = self._choices[key] = _choose(self, d, handle, a, b, c, algo)
        return choice

    def graph_plan(self, d, handle, alpha, beta, arrays=None):
        """The backend-API execution plan of direction d on handle's device (built once per
        alpha / beta and settings): its tensors carry the same dims and
        strides as the legacy descriptors, x / W / y have unique ids 1 / 2 / 3. With
        algo_mode='benchmark' and the call's (a, b, c) arrays, the fastest of the heuristics'
        first plans on them (graph.fastest_plan), else their first."""
        plan = self.graph_plan_or_refusal(d, handle, alpha, beta, arrays)
        if isinstance(plan, NotSupported):
            raise NotSupported(plan.function, plan.arguments, plan.detail)
        return plan

    def graph_plan_or_refusal(self, d, handle, alpha, beta, arrays=None):
        """graph_plan, or the NotSupported that building it raised (kept and returned, not
        raised: what a fallback to the legacy call costs is this lookup). The refusal kept is a
        fresh exception, with no traceback or context that would hold the call's arrays. The
        first refusal of a problem is also a RuntimeWarning naming it."""
        key = (d.name, handle.device_id, alpha, beta, settings)
        refused = []

        def make():
            try:
                return _new_graph_plan(self, d, handle, alpha, beta, arrays)
            except NotSupported as e:
                refused.append(NotSupported(e.function, e.arguments, e.detail))
                return refused[0]
        plan = self._graph_plans.get(key, make)
        if refused:
            _warn_fallback(refused[0])
        return plan

    def candidates(self, d, handle):
        """Every (algo, status, memory, determinism, math) cuDNN's heuristics list for direction d."""
        adesc, bdesc, cdesc = self.descs(d)
        count = ctypes.c_int()
        d.max_count(handle, ctypes.byref(count))
        perfs = (d.perf * count.value)()
        returned = ctypes.c_int()
        d.heuristics(handle, adesc, bdesc, self.conv(requested_math(self.dt)), cdesc, count.value,
                     ctypes.byref(returned), perfs)
        return list(perfs[:returned.value])


def _choose(plan, d, handle, a, b, c, algo):
    adesc, bdesc, cdesc = plan.descs(d)
    math = requested_math(plan.dt)
    if algo is not None:
        algo = d.algos(algo)
        size = ctypes.c_size_t()
        d.workspace_size(handle, adesc, bdesc, plan.conv(math), cdesc, algo, ctypes.byref(size))
        return Choice(int(algo), math, size.value)
    if settings.algo_mode == "benchmark":
        perfs = _benchmark(plan, d, handle, a, b, c, math)
    else:
        perfs = plan.candidates(d, handle)
    usable = [p for p in perfs
              if p.status == Status.SUCCESS
              and p.memory <= settings.workspace_limit
              and (p.determinism == 1 or not settings.deterministic)
              and (p.mathType == MathType.FMA or math != MathType.FMA)]
    import cupy
    for p in usable:
        try:
            handle.workspace(p.memory)     # falls back to the next algorithm when memory is short
        except cupy.cuda.memory.OutOfMemoryError:
            continue
        return Choice(p.algo, MathType(p.mathType), p.memory)
    listed = [(d.algos(p.algo).name, Status(p.status).name, p.memory,
               "deterministic" if p.determinism else "non-deterministic", MathType(p.mathType).name)
              for p in perfs]
    raise NotSupported(d.heuristics.__name__,
                       {"a": adesc, "b": bdesc, "c": cdesc, "conv": plan.conv(math),
                        "settings": settings, "candidates": listed},
                       "no algorithm fits the settings (workspace limit, determinism, math type)")


def _benchmark(plan, d, handle, a, b, c, math):
    """cudnnFind*AlgorithmEx: runs every algorithm once, with a scratch output and the largest
    workspace (up to the limit) the pool can give."""
    import cupy
    adesc, bdesc, cdesc = plan.descs(d)
    scratch = cupy.empty_like(c)
    size = settings.workspace_limit
    workspace = None
    while workspace is None:
        try:
            workspace = cupy.empty(size, dtype=cupy.uint8)
        except cupy.cuda.memory.OutOfMemoryError:
            if size == 0:
                raise
            size //= 2
    count = ctypes.c_int()
    d.max_count(handle, ctypes.byref(count))
    perfs = (d.perf * count.value)()
    returned = ctypes.c_int()
    d.find(handle, adesc, a.data.ptr, bdesc, b.data.ptr, plan.conv(math), cdesc, scratch.data.ptr,
           count.value, ctypes.byref(returned), perfs, workspace.data.ptr, size)
    return list(perfs[:returned.value])


PLAN_CACHE_SIZE = 1024     # problems kept (LRU); Tacotron's variable lengths make new ones
GRAPH_PLANS_PER_PROBLEM = 16   # graph-API plans kept per problem (directions x alpha / beta ...)
_plans = LRU(PLAN_CACHE_SIZE)


def plan(x_shape, x_strides, w_shape, dtype, layout="NCHW", pad=0, stride=1, dilation=1, groups=1):
    """The (cached) Plan for a problem given as array shapes in `layout`, x's element strides and
    the data type of x, W and y."""
    key = (tuple(x_shape), tuple(x_strides), tuple(w_shape), data_type(dtype), layout, pad, stride,
           dilation, groups)
    return _plans.get(key, lambda: _new_plan(*key))


def _array_plan(x, w_shape, dt, layout, pad, stride, dilation, groups):
    """plan() for an array x already through the boundary, memoised on what the array gives
    directly (no stride arithmetic on a hit)."""
    key = (x.shape, x.strides, x.itemsize, w_shape, dt, layout, pad, stride, dilation, groups)
    return _plans.get(key, lambda: plan(x.shape, element_strides(x), w_shape, dt, layout, pad,
                                        stride, dilation, groups))


def _new_plan(x_shape, x_strides, w_shape, dt, layout, pad, stride, dilation, groups):
    check_layout(layout, "cudnnSetTensorNdDescriptor")
    if len(x_shape) != len(w_shape) or len(x_shape) not in (4, 5):
        raise BadParam("cudnnSetConvolutionNdDescriptor", {"x.shape": x_shape, "W.shape": w_shape},
                       "x and W must both be 4-d (2-d convolution) or 5-d (3-d convolution)")
    axes = logical_axes(len(x_shape), layout)
    x_dims = tuple(x_shape[i] for i in axes)
    x_str = tuple(x_strides[i] for i in axes)
    w_dims = tuple(w_shape[i] for i in axes)
    return Plan(x_dims, x_str, w_dims, dt, layout, pad, stride, dilation, groups)


def clear_cache():
    """Forget every Plan (descriptors and algorithm choices)."""
    _plans.clear()
    _calls.clear()


def _shape_in_layout(dims, layout):
    """Array shape (as stored) for logical dims (N, C, *spatial)."""
    axes = logical_axes(len(dims), layout)
    shape = [0] * len(dims)
    for i, axis in enumerate(axes):
        shape[axis] = dims[i]
    return tuple(shape)


# the unique ids of (a, b, c) in each direction's argument order: x = 1, W = 2, y = 3
_UIDS = {"cudnnConvolutionForward": (1, 2, 3), "cudnnConvolutionBackwardData": (2, 3, 1),
         "cudnnConvolutionBackwardFilter": (1, 3, 2)}


def _accept(p, handle, grow=True):
    """The settings' filter on a graph-API engine: workspace limit, determinism, no TF32 (tensor
    cores) for float32 when allow_tf32 is off, never an engine that down-converts its inputs
    (to a narrower type than the data's: torch's filter too), and a workspace that can be
    allocated (else the next engine, as _choose does): the handle's, grown to it, or with
    grow=False (benchmarking candidates) one allocated and given back to the pool."""
    import cupy
    from .enums import NumericalNote as Note
    tf32_off = p.dt == DataType.FLOAT and not settings.allow_tf32

    def accept(notes, workspace):
        if (workspace > settings.workspace_limit
                or Note.DOWN_CONVERT_INPUTS in notes
                or (settings.deterministic and Note.NONDETERMINISTIC in notes)
                or (tf32_off and Note.TENSOR_CORE in notes)):
            return False
        try:
            if grow:
                handle.workspace(workspace)
            elif workspace:
                cupy.empty(workspace, cupy.uint8)       # (back to CuPy's pool at once)
        except cupy.cuda.memory.OutOfMemoryError:
            return False
        return True
    return accept


def _new_graph_plan(p, d, handle, alpha, beta, arrays=None):
    import cupy
    from . import graph
    ops = graph_operations(p, d, handle, alpha, beta)
    try:
        # (no timing while a CUDA graph is being captured: the heuristics' first plan then)
        if settings.algo_mode == "benchmark" and arrays is not None and \
                not cupy.cuda.get_current_stream().is_capturing():
            plan = graph.fastest_plan(handle, ops, _accept(p, handle, grow=False),
                                      _TimingRun(d, *arrays, beta, handle))
            handle.workspace(plan.workspace)        # the handle's grows to the winner's only
        else:
            plan = graph.first_plan(handle, ops, _accept(p, handle))
        plan.desc.problem = _problem(d.name, p)     # (what tools.kernels says it computes)
        return plan
    except NotSupported as e:
        raise NotSupported(e.function, {"direction": d.name, "x": p.x, "w": p.w, "y": p.y,
                                        "geometry": p.geometry,
                                        "alpha": alpha, "beta": beta, "settings": settings,
                                        **e.arguments}, e.detail) from None


def _problem(what, p):
    """(what, x dims, W dims, y dims, (pad, stride, dilation, groups)) of problem p: a plan's
    description for profilers (values, not p: the plan is kept by p's own cache)."""
    return what, p.x.dims, p.w.dims, p.y.dims, p.geometry


def graph_operations(p, d, handle, alpha=1.0, beta=0.0):
    """The finalized operation graph of problem p's direction d: tensors with the legacy
    descriptors' dims and strides, x / W / y unique ids 1 / 2 / 3 (_UIDS gives d's order)."""
    from . import graph
    pad, stride, dilation, groups = p.geometry
    w_strides = packed_strides(p.w.dims, p.layout)
    # every pointer is 16-byte aligned: cudnnlite.boundary copies any view that is not
    tensors = {1: graph.tensor(1, p.x.dims, p.x.strides, p.dt, ALIGNMENT),
               2: graph.tensor(2, p.w.dims, w_strides, p.dt, ALIGNMENT),
               3: graph.tensor(3, p.y.dims, p.y.strides, p.dt, ALIGNMENT)}
    double = p.dt == DataType.DOUBLE
    conv = graph.convolution(pad, stride, dilation, DataType.DOUBLE if double else DataType.FLOAT)
    a, b, c = (tensors[u] for u in _UIDS[d.name])
    op = graph.convolution_operation(d.name, a, b, c, conv, alpha, beta, double)
    return graph.operation_graph(handle, [op])


class _TimingRun:
    """run(plan) for graph.fastest_plan: the plan on the call's a and b into a scratch copy of c
    (c itself is left as it is) with a workspace of its own, as _benchmark's scratch output and
    temporary workspace; both live as long as this object (fastest_plan's whole loop)."""

    def __init__(self, d, a, b, c, beta, handle):
        import cupy
        self.d, self.handle = d, handle
        self.scratch = c.copy() if beta else cupy.empty_like(c)
        self.pointers = (a.data.ptr, b.data.ptr, self.scratch.data.ptr)
        self.workspace = None

    def __call__(self, plan):
        import cupy
        if plan.workspace and (self.workspace is None or self.workspace.nbytes < plan.workspace):
            self.workspace = cupy.empty(plan.workspace, cupy.uint8)
        plan.execute(self.handle, _UIDS[self.d.name], self.pointers,
                     self.workspace.data.ptr if plan.workspace else 0)


def _run_graph(d, plan, a, b, c, handle):
    keep_alive(plan)          # a CUDA graph captured from it runs the plan's code and constants
    plan.execute(handle, _UIDS[d.name], (a.data.ptr, b.data.ptr, c.data.ptr),
                 handle.workspace(plan.workspace))
    return c


# Problems that api="graph" sent through the legacy calls because no graph-API engine takes
# them (float64 on cuDNN 9, say; the reason is cached with the problem's plans, so a fallback
# costs one lookup): how many calls, and the last reason. Results are the same either way; each
# problem's first refusal is also a RuntimeWarning, since the legacy calls cost more host time.
graph_fallbacks = {"calls": 0, "last": None}


def _warn_fallback(refusal):
    import warnings
    first = str(refusal).split("\n  tried", 1)[0]      # (not the list of every engine tried)
    warnings.warn(f"cudnnlite.conv: api='graph' runs this problem through the legacy call "
                  f"instead (counted in conv.graph_fallbacks; the whole refusal is its 'last'): "
                  f"{first}", RuntimeWarning, stacklevel=3)


def _run(d, p, a, b, c, alpha, beta, algo, handle, seen=None):
    # the graph path: ungrouped problems with no explicit legacy algorithm that a graph-API
    # engine takes (grouped ones, an `algo=` naming a legacy algorithm and the problems in
    # graph_fallbacks go through the legacy calls); a steady-state call (`seen`, below) keeps
    # the plan for its next time
    if settings.api == "graph" and algo is None and p.geometry[3] == 1:
        plan = p.graph_plan_or_refusal(d, handle, float(alpha), float(beta), (a, b, c))
        if not isinstance(plan, NotSupported):
            if seen is not None:
                seen.keep_graph(plan)
            return _run_graph(d, plan, a, b, c, handle)
        graph_fallbacks["calls"] += 1
        graph_fallbacks["last"] = plan
    choice = p.choose(d, handle, a, b, c, algo)
    adesc, bdesc, cdesc = p.descs(d)
    d.compute(handle, scalar(p.dt, alpha), adesc, a.data.ptr, bdesc, b.data.ptr,
              p.conv(choice.math_type), choice.algo, handle.workspace(choice.workspace),
              choice.workspace, scalar(p.dt, beta), cdesc, c.data.ptr)
    return c


# ---- the steady-state path: what the checks concluded, kept per call signature ---------------
# A training loop makes the same calls every step: the same shapes, strides, dtypes, devices,
# alignments and settings, on memory CuPy's pool hands out again. Each of the three calls below
# first looks its signature up (boundary.signature of its arrays, its other arguments and the
# settings): on a hit every check of the call would pass as it did the last time, so it goes
# straight to the problem's Plan with an output of the shape found then. Only calls whose
# arrays went through as they came (packed: no copy made) are kept.

CALL_CACHE_SIZE = 4096
_calls = CallCache(CALL_CACHE_SIZE)


class _Seen:
    """What a call's checks concluded -- its direction, output and Plan -- and, once it has run
    through the graph API, the execution plan it ran (the one graph_plan keeps). Both plans by
    weak reference: the problem's cache (_plans, PLAN_CACHE_SIZE) owns them, so a problem it
    has dropped is not kept alive here, and a call that finds its Plan gone takes the checks."""
    __slots__ = ("d", "_p", "shape", "dtype", "_graph")

    def __init__(self, d, p, shape, dtype):
        self.d, self._p, self.shape, self.dtype = d, weakref.ref(p), shape, dtype
        self._graph = None

    def run(self, h, a, b, out, alpha, beta, algo):
        """The call, or _UNSEEN where its Plan is gone."""
        p = self._p()
        if p is None:
            return _UNSEEN
        c = output(out, self.shape, self.dtype)
        graph = self._graph() if self._graph is not None else None
        if graph is not None:
            return _run_graph(self.d, graph, a, b, c, h)
        return _run(self.d, p, a, b, c, alpha, beta, algo, h, self)

    def keep_graph(self, plan):
        self._graph = weakref.ref(plan)


_UNSEEN = object()


def _steady(key, a, b, out, alpha, beta, algo, fn, names):
    """The call kept under `key` (_calls), run on these arrays (named `names` in function fn's
    errors); _UNSEEN where none is kept or its Plan is gone (the caller then takes the checks).
    An `out` is checked apart from a and b here: a relation, not in the key."""
    seen = _calls.seen(key)
    if seen is None:
        return _UNSEEN
    if out is not None:
        apart(fn, "out", out, **{names[0]: a, names[1]: b})
    return seen[0].run(seen[1], a, b, out, alpha, beta, algo)


def forward(x, W, *, stride=1, pad=0, dilation=1, groups=1, layout="NCHW", algo=None, out=None,
            alpha=1.0, beta=0.0, dtype=None):
    """y = alpha * conv(x, W) + beta * out. x may be a strided view (its strides go in the
    descriptor when cuDNN can take them, else one copy is made); W is copied if not packed.
    `dtype` names the data type when the storage dtype does not (bf16 bits in uint16 arrays)."""
    fn = "cudnnConvolutionForward"
    stride, pad, dilation, groups = _geometry(fn, stride, pad, dilation, groups)
    key = _calls.key((x, W, out), FWD, stride, pad, dilation, groups, layout, algo, alpha, beta,
                     dtype, settings)
    done = _steady(key, x, W, out, alpha, beta, algo, fn, ("x", "W"))
    if done is not _UNSEEN:
        return done
    given = x, W
    dt = common_dtype(fn, dtype, x=x, W=W, out=out)
    x, W = strided(fn, "x", x), packed(fn, "W", W)
    p = _array_plan(x, W.shape, dt, layout, pad, stride, dilation, groups)
    check_out(fn, "out", out, p.y_shape, x.dtype, beta)
    apart(fn, "out", out, x=x, W=W)
    h = handle(fn, x=x, W=W, out=out)
    out = output(out, p.y_shape, x.dtype)
    if x is given[0] and W is given[1] and x.flags.c_contiguous:
        _calls.remember(key, h, _Seen(FWD, p, p.y_shape, x.dtype))
    return _strided_or_packed(x, lambda x: _run(
        FWD, _array_plan(x, W.shape, dt, layout, pad, stride, dilation, groups), x, W, out, alpha,
        beta, algo, h))


ACTIVATIONS = {None: None, "relu": PointwiseMode.RELU_FWD, "tanh": PointwiseMode.TANH_FWD,
               "sigmoid": PointwiseMode.SIGMOID_FWD}
_FUSED_UIDS = (1, 2, 3, 4)        # x, W, y, bias (the intermediates are virtual: ids 5 and 6)


def forward_fused(x, W, bias, activation=None, *, stride=1, pad=0, dilation=1, layout="NCHW",
                  out=None, dtype=None):
    """y = activation(conv(x, W) + bias) as one cuDNN operation graph -- a convolution whose
    output feeds a pointwise add of the bias and a pointwise activation ('relu', 'tanh',
    'sigmoid' or None), the intermediates virtual (never written to memory): the seed's
    Conv-Bias-ReLU fusion. bias has shape (K,). Plans are built once per problem; a problem no
    engine fuses raises NotSupported naming every engine tried (callers fall back to the
    separate calls). Ungrouped convolutions only."""
    fn = "cudnnBackendExecute"
    stride, pad, dilation, _ = _geometry(fn, stride, pad, dilation, 1)
    if activation not in ACTIVATIONS:
        raise BadParam(fn, {"activation": activation},
                       f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    dt = common_dtype(fn, dtype, x=x, W=W, bias=bias, out=out)
    x, W, bias = packed(fn, "x", x), packed(fn, "W", W), packed(fn, "bias", bias)
    p = _array_plan(x, W.shape, dt, layout, pad, stride, dilation, 1)
    check_shape(fn, "bias", bias, (p.y.dims[1],), "one value per output channel is")
    check_out(fn, "out", out, p.y_shape, x.dtype)
    apart(fn, "out", out, x=x, W=W, bias=bias)
    h = handle(fn, x=x, W=W, bias=bias, out=out)
    plan = fused_plan(p, h, activation)
    if isinstance(plan, NotSupported):
        raise NotSupported(plan.function, plan.arguments, plan.detail)
    keep_alive(plan)
    out = output(out, p.y_shape, x.dtype)
    plan.execute(h, _FUSED_UIDS, (x.data.ptr, W.data.ptr, out.data.ptr, bias.data.ptr),
                 h.workspace(plan.workspace))
    return out


def fused_plan(p, handle, activation):
    """Problem p's fused plan on handle's device, or the NotSupported that building it raised
    (kept, so a problem no engine fuses is refused at the cost of a lookup)."""
    def make():
        try:
            return _new_fused_plan(p, handle, activation)
        except NotSupported as e:
            return e
    return p._graph_plans.get(("fused", activation, handle.device_id, settings), make)


def _new_fused_plan(p, handle, activation):
    from . import graph
    pad, stride, dilation, _ = p.geometry
    double = p.dt == DataType.DOUBLE
    compute = DataType.DOUBLE if double else DataType.FLOAT
    K, nd = p.y.dims[1], len(p.y.dims)
    bias_dims = (1, K) + (1,) * (nd - 2)
    x = graph.tensor(1, p.x.dims, p.x.strides, p.dt, ALIGNMENT)
    w = graph.tensor(2, p.w.dims, packed_strides(p.w.dims, p.layout), p.dt, ALIGNMENT)
    y = graph.tensor(3, p.y.dims, p.y.strides, p.dt, ALIGNMENT)
    b = graph.tensor(4, bias_dims, packed_strides(bias_dims, p.layout), p.dt, ALIGNMENT)
    conv_out = graph.tensor(5, p.y.dims, p.y.strides, compute, ALIGNMENT, virtual=True)
    conv = graph.convolution(pad, stride, dilation, compute)
    ops = [graph.convolution_operation(FWD.name, x, w, conv_out, conv, 1.0, 0.0, double)]
    if activation is None:
        ops.append(graph.pointwise_operation(PointwiseMode.ADD, conv_out, y, b=b, compute=compute))
    else:
        biased = graph.tensor(6, p.y.dims, p.y.strides, compute, ALIGNMENT, virtual=True)
        ops += [graph.pointwise_operation(PointwiseMode.ADD, conv_out, biased, b=b,
                                          compute=compute),
                graph.pointwise_operation(ACTIVATIONS[activation], biased, y, compute=compute)]
    try:
        plan = graph.first_plan(handle, graph.operation_graph(handle, ops), _accept(p, handle))
        plan.desc.problem = _problem(f"conv + bias + {activation}", p)     # (tools.kernels)
        return plan
    except NotSupported as e:
        raise NotSupported(e.function, {"fusion": f"conv + bias + {activation}", "x": p.x,
                                        "w": p.w, "y": p.y, "geometry": p.geometry,
                                        "settings": settings, **e.arguments}, e.detail) from None


def backward_data(W, gy, x_shape, *, stride=1, pad=0, dilation=1, groups=1, layout="NCHW",
                  algo=None, out=None, alpha=1.0, beta=0.0, dtype=None):
    """gx = alpha * conv^T(gy, W) + beta * out, gx of shape x_shape (the transposed convolution)."""
    fn = "cudnnConvolutionBackwardData"
    x_shape = _int_shape(fn, "x_shape", x_shape)
    stride, pad, dilation, groups = _geometry(fn, stride, pad, dilation, groups)
    key = _calls.key((W, gy, out), BWD_DATA, x_shape, stride, pad, dilation, groups, layout,
                     algo, alpha, beta, dtype, settings)
    done = _steady(key, W, gy, out, alpha, beta, algo, fn, ("W", "gy"))
    if done is not _UNSEEN:
        return done
    given = W, gy
    dt = common_dtype(fn, dtype, W=W, gy=gy, out=out)
    W, gy = packed(fn, "W", W), packed(fn, "gy", gy)
    p = plan(x_shape, c_strides(x_shape), W.shape, dt, layout, pad, stride, dilation, groups)
    check_shape(fn, "gy", gy, p.y_shape, "the convolution's output is")
    check_out(fn, "out", out, x_shape, gy.dtype, beta)
    apart(fn, "out", out, W=W, gy=gy)
    h = handle(fn, W=W, gy=gy, out=out)
    if W is given[0] and gy is given[1]:
        _calls.remember(key, h, _Seen(BWD_DATA, p, x_shape, gy.dtype))
    return _run(BWD_DATA, p, W, gy, output(out, x_shape, gy.dtype), alpha, beta, algo, h)


def backward_filter(x, gy, w_shape, *, stride=1, pad=0, dilation=1, groups=1, layout="NCHW",
                    algo=None, out=None, alpha=1.0, beta=0.0, dtype=None):
    """gW = alpha * wgrad(x, gy) + beta * out, gW of shape w_shape (in layout)."""
    fn = "cudnnConvolutionBackwardFilter"
    w_shape = _int_shape(fn, "w_shape", w_shape)
    stride, pad, dilation, groups = _geometry(fn, stride, pad, dilation, groups)
    key = _calls.key((x, gy, out), BWD_FILTER, w_shape, stride, pad, dilation, groups, layout,
                     algo, alpha, beta, dtype, settings)
    done = _steady(key, x, gy, out, alpha, beta, algo, fn, ("x", "gy"))
    if done is not _UNSEEN:
        return done
    given = x, gy
    dt = common_dtype(fn, dtype, x=x, gy=gy, out=out)
    x, gy = strided(fn, "x", x), packed(fn, "gy", gy)
    p = _array_plan(x, w_shape, dt, layout, pad, stride, dilation, groups)
    check_shape(fn, "gy", gy, p.y_shape, "the convolution's output is")
    check_out(fn, "out", out, w_shape, x.dtype, beta)
    apart(fn, "out", out, x=x, gy=gy)
    h = handle(fn, x=x, gy=gy, out=out)
    out = output(out, w_shape, x.dtype)
    if x is given[0] and gy is given[1] and x.flags.c_contiguous:
        _calls.remember(key, h, _Seen(BWD_FILTER, p, w_shape, x.dtype))
    return _strided_or_packed(x, lambda x: _run(
        BWD_FILTER, _array_plan(x, w_shape, dt, layout, pad, stride, dilation, groups), x, gy,
        out, alpha, beta, algo, h))


def _int_shape(function, name, shape):
    """shape as a tuple of Python ints (NumPy integers taken), before it joins a call's key: a
    float size (2.0) would equal an int one in the key, so a call the checks refuse could be
    answered from one they passed."""
    try:
        return tuple(operator.index(n) for n in shape)
    except TypeError:
        raise BadParam(function, {name: shape}, f"{name} must be a sequence of integers, got "
                       f"{shape!r}") from None


def _geometry(function, stride, pad, dilation, groups):
    """stride, pad, dilation (an int, or one per spatial dimension) and groups as Python ints,
    NumPy integers taken, anything else a BadParam naming `function` -- before they join the
    call's key (a float equal to a kept int would be answered from the call cache) or a Plan's
    (its descriptor would truncate 1.5 to 1)."""
    out = []
    for name, v in (("stride", stride), ("pad", pad), ("dilation", dilation),
                    ("groups", groups)):
        t = type(v)
        if t is int or t is tuple and all(type(i) is int for i in v):
            out.append(v)
            continue
        try:
            out.append(tuple(operator.index(i) for i in v) if isinstance(v, (tuple, list))
                       else operator.index(v))
        except TypeError:
            raise BadParam(function, {name: v}, f"{name} must be an integer or a sequence of "
                           f"integers, got {v!r}") from None
    return out


def _strided_or_packed(x, run):
    """run(x) with x's own strides in its descriptor; if cuDNN has no algorithm for those strides,
    run(one packed copy of x) (the result is the same, only slower)."""
    try:
        return run(x)
    except NotSupported:
        if x.flags.c_contiguous:
            raise
        return run(x.copy(order="C"))


def backward_bias(gy, *, layout="NCHW", out=None, alpha=1.0, beta=0.0, dtype=None):
    """gb[k] = alpha * sum of gy over N and spatial + beta * out[k]; gb has shape (K,)."""
    fn = "cudnnConvolutionBackwardBias"
    check_layout(layout, fn)
    dt = common_dtype(fn, dtype, gy=gy, out=out)
    gy = strided(fn, "gy", gy)
    dims, strides = _logical(gy, layout)
    gdesc = TensorDescriptor(dims, dt, strides)
    K = gdesc.dims[1]
    bdesc = TensorDescriptor((1, K) + (1,) * (gy.ndim - 2), dt)
    check_out(fn, "out", out, (K,), gy.dtype, beta)
    apart(fn, "out", out, gy=gy)
    h = handle(fn, gy=gy, out=out)
    out = output(out, (K,), gy.dtype)
    api.cudnnConvolutionBackwardBias(h, scalar(dt, alpha), gdesc, gy.data.ptr, scalar(dt, beta),
                                     bdesc, out.data.ptr)
    return out


def _logical(a, layout):
    """(dims, element strides) of array a stored in `layout`, in cuDNN's logical order."""
    axes = logical_axes(a.ndim, layout)
    st = element_strides(a)
    return tuple(a.shape[i] for i in axes), tuple(st[i] for i in axes)


def transpose_output_shape(in_size, kernel, stride, padding, output_padding, dilation):
    """PyTorch's ConvTranspose output size along one dim."""
    return (in_size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_transpose(x, W, *, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                   layout="NCHW", algo=None, dtype=None):
    """Transposed convolution (PyTorch's conv_transpose2d/3d) as cuDNN backward-data.

    x: (N, Cin, *spatial); W in PyTorch layout (Cin, Cout/groups, *filter) -- which is exactly
    cuDNN's KCRS filter with K = Cin, C = Cout/groups (NHWC: (Cin, *filter, Cout/groups)).
    y: (N, Cout, *out), out = (in-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1.
    """
    device_array("cudnnConvolutionBackwardData", "x", x)
    device_array("cudnnConvolutionBackwardData", "W", W)
    *_, groups = _geometry("cudnnConvolutionBackwardData", 1, 0, 1, groups)   # (before y's dims)
    spatial = x.ndim - 2
    s, p, op, d = (as_tuple(v, spatial, "cudnnConvolutionBackwardData")
                   for v in (stride, padding, output_padding, dilation))
    axes = logical_axes(x.ndim, layout)
    x_dims = [x.shape[i] for i in axes]
    w_dims = [W.shape[i] for i in axes]
    if x_dims[1] != w_dims[0]:
        raise BadParamShapeMismatch("cudnnConvolutionBackwardData",
                                    {"x.shape": x.shape, "W.shape": W.shape},
                                    f"x has {x_dims[1]} channels but W (Cin, Cout/groups, ...) "
                                    f"expects {w_dims[0]}")
    for i in range(spatial):
        if not (op[i] < s[i] or op[i] < d[i]) or min(s[i], d[i]) < 1 or p[i] < 0 or op[i] < 0:
            raise BadParam("cudnnConvolutionBackwardData",
                           {"stride": s, "padding": p, "output_padding": op, "dilation": d},
                           f"output_padding must be smaller than either stride or dilation "
                           f"(dim {i}: output_padding={op[i]}, stride={s[i]}, dilation={d[i]})")
    out = [transpose_output_shape(x_dims[2 + i], w_dims[2 + i], s[i], p[i], op[i], d[i])
           for i in range(spatial)]
    y_dims = [x_dims[0], w_dims[1] * groups] + out
    if all(op[i] < s[i] for i in range(spatial)):
        y_shape = _shape_in_layout(y_dims, layout)
        return backward_data(W, x, y_shape, stride=s, pad=p, dilation=d, groups=groups,
                             layout=layout, algo=algo, dtype=dtype)
    # output_padding >= stride (allowed when < dilation): cuDNN's dims would disagree, so take the
    # unpadded full transposed convolution and crop / zero-extend it to the requested size.
    return transpose_cropped(x, W, s, d, begin=p, size=out, groups=groups, layout=layout,
                             algo=algo, dtype=dtype)


def transpose_cropped(x, W, stride, dilation, begin, size, *, groups=1, layout="NCHW", algo=None,
                      dtype=None):
    """Window [begin, begin+size) of the full (pad 0) transposed convolution, zeros past its end.
    Covers output_padding >= stride and asymmetric ('same') padding."""
    import cupy
    spatial = x.ndim - 2
    axes = logical_axes(x.ndim, layout)
    x_dims = [x.shape[i] for i in axes]
    w_dims = [W.shape[i] for i in axes]
    full = [(x_dims[2 + i] - 1) * stride[i] + dilation[i] * (w_dims[2 + i] - 1) + 1
            for i in range(spatial)]
    full_dims = [x_dims[0], w_dims[1] * groups] + full
    y_full = backward_data(W, x, _shape_in_layout(full_dims, layout), stride=stride, pad=0,
                           dilation=dilation, groups=groups, layout=layout, algo=algo, dtype=dtype)
    y_dims = full_dims[:2] + list(size)
    y = cupy.zeros(_shape_in_layout(y_dims, layout), dtype=y_full.dtype)
    dst = [slice(None)] * x.ndim
    src = [slice(None)] * x.ndim
    for i in range(spatial):
        lo, hi = begin[i], min(begin[i] + size[i], full[i])
        src[axes[2 + i]] = slice(lo, max(lo, hi))
        dst[axes[2 + i]] = slice(0, max(0, hi - lo))
    y[tuple(dst)] = y_full[tuple(src)]
    return y


def c_strides(shape):
    """Element strides of a C-contiguous array: a packed tensor in whichever layout it is stored."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)

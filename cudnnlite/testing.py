"""Helpers for users' own test suites: build convolution descriptors from a spec, assert what cuDNN
reads back, the output shape it computes, and that a bad set-up is rejected with the expected
status. None of it needs a GPU except `algorithms`, which lists what cuDNN offers on the device."""
import re
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Optional

from .descriptors import (ConvolutionDescriptor, FilterDescriptor, TensorDescriptor, as_tuple,
                          conv_output_shape, data_type, logical_axes, packed_strides)
from .enums import ConvMode, DataType, MathType, Status, TensorFormat
from .errors import CudnnError, NotInitialized


@dataclass(frozen=True)
class ConvSpec:
    """One convolution as cuDNN's forward sees it, dims in cuDNN's logical order:
    x (N, C, *spatial), W (K, C/groups, *filter) -> y (N, K, *out). `layout` ('NCHW' or 'NHWC')
    is how x and y are packed in memory and W's filter format (KCRS or KRSC). pad / stride /
    dilation: one int for every spatial dim, or one per dim. compute_type None: DOUBLE for
    float64 data, else FLOAT (as cudnnlite.conv does)."""
    x: tuple
    w: tuple
    pad: object = 0
    stride: object = 1
    dilation: object = 1
    groups: int = 1
    layout: str = "NCHW"
    dtype: object = "float32"
    mode: ConvMode = ConvMode.CROSS_CORRELATION
    math_type: MathType = MathType.DEFAULT
    compute_type: Optional[DataType] = None

    def geometry(self):
        """(pad, stride, dilation) as tuples, one value per spatial dim."""
        n = len(self.x) - 2
        return tuple(as_tuple(v, n) for v in (self.pad, self.stride, self.dilation))

    def compute(self):
        if self.compute_type is not None:
            return DataType(self.compute_type)
        return DataType.DOUBLE if data_type(self.dtype) == DataType.DOUBLE else DataType.FLOAT


class Descriptors(NamedTuple):
    x: TensorDescriptor
    w: FilterDescriptor
    conv: ConvolutionDescriptor
    y: TensorDescriptor


def _x_w_conv(spec):
    x = TensorDescriptor(spec.x, spec.dtype, packed_strides(spec.x, spec.layout))
    w = FilterDescriptor(spec.w, spec.dtype, spec.layout)
    conv = ConvolutionDescriptor(*spec.geometry(), spatial_dims=len(spec.x) - 2,
                                 groups=spec.groups, mode=spec.mode,
                                 compute_type=spec.compute(), math_type=spec.math_type)
    return x, w, conv


def build(spec):
    """The x, W, conv and y descriptors of `spec`; y's dims are the ones cuDNN computes. Raises
    the CudnnError subclass of the first call cuDNN rejects."""
    x, w, conv = _x_w_conv(spec)
    y_dims = conv_output_shape(x, w, conv)
    return Descriptors(x, w, conv, TensorDescriptor(y_dims, spec.dtype,
                                                    packed_strides(y_dims, spec.layout)))


def expected_output_shape(spec):
    """y's dims (N, K, *out) from the closed form out = (in + 2p - d(k-1) - 1) // s + 1."""
    out = [(n + 2 * p - d * (k - 1) - 1) // s + 1
           for n, k, p, s, d in zip(spec.x[2:], spec.w[2:], *spec.geometry())]
    return (spec.x[0], spec.w[0], *out)


def cudnn_output_shape(spec):
    """y's dims as cudnnGetConvolutionNdForwardOutputDim computes them."""
    return conv_output_shape(*_x_w_conv(spec))


def assert_output_shape(spec, expected=None):
    """cuDNN's output dims equal `expected` (default: the closed form)."""
    expected = expected_output_shape(spec) if expected is None else tuple(expected)
    got = cudnn_output_shape(spec)
    assert got == expected, (f"cudnnGetConvolutionNdForwardOutputDim gives {got}, expected "
                             f"{expected}\n  spec: {spec}")
    return got


_FIELDS = {"x": ("data type", "dims", "strides"), "w": ("data type", "format", "dims"),
           "conv": ("pad", "stride", "dilation", "mode", "compute type", "groups", "math type"),
           "y": ("data type", "dims", "strides")}


def expected_setups(spec):
    """What each descriptor of `spec` should read back, in Descriptor.setup()'s form."""
    dt = data_type(spec.dtype)
    y = expected_output_shape(spec)
    return {"x": (dt, tuple(spec.x), packed_strides(spec.x, spec.layout)),
            "w": (dt, TensorFormat[spec.layout], tuple(spec.w)),
            "conv": (*spec.geometry(), ConvMode(spec.mode), spec.compute(), spec.groups,
                     MathType(spec.math_type)),
            "y": (dt, y, packed_strides(y, spec.layout))}


def _show(v):
    return f"{type(v).__name__}.{v.name}" if isinstance(v, Enum) else repr(v)


def assert_descriptors(spec, descriptors=None):
    """Every value cuDNN reads back from (x, W, conv, y) -- data type, dims, strides, filter format,
    pad / stride / dilation, mode, compute type, groups, math type -- equals the spec. descriptors:
    your own (x, w, conv, y), any of them None to skip it; default: build(spec)."""
    descriptors = build(spec) if descriptors is None else descriptors
    want = expected_setups(spec)
    problems = []
    for name, desc in zip(_FIELDS, descriptors):
        if desc is None:
            continue
        for field, got, expected in zip(_FIELDS[name], desc.setup(), want[name]):
            if got != expected:
                problems.append(f"{name} {field}: cuDNN holds {_show(got)}, the spec says "
                                f"{_show(expected)}")
    assert not problems, ("descriptors disagree with the spec:\n  " + "\n  ".join(problems)
                          + f"\n  spec: {spec}")
    return descriptors


def assert_rejected(spec, error, match=None, function=None):
    """Building `spec` raises `error` -- a CudnnError subclass (matched with isinstance, so BadParam
    also takes BadParamShapeMismatch) or an exact Status -- optionally from the C function
    `function` and with a message matching the regex `match`. Returns the CudnnError."""
    try:
        descriptors = build(spec)
    except CudnnError as e:
        status = e.status.name if isinstance(e.status, Status) else e.status
        got = f"{type(e).__name__} (CUDNN_STATUS_{status}) from {e.function}:\n{e}"
        if isinstance(error, type):
            assert isinstance(e, error), f"expected {error.__name__}, got {got}"
        else:
            assert e.status == Status(error), \
                f"expected CUDNN_STATUS_{Status(error).name}, got {got}"
        assert function is None or e.function == function, f"expected it from {function}, got {got}"
        assert match is None or re.search(match, str(e)), f"{match!r} not found in {got}"
        return e
    expected = error.__name__ if isinstance(error, type) else f"CUDNN_STATUS_{Status(error).name}"
    raise AssertionError(f"cuDNN accepted the set-up, expected {expected}:\n  spec: {spec}\n  "
                         + "\n  ".join(f"{k} = {v!r}" for k, v in descriptors._asdict().items()))


class Algorithm(NamedTuple):
    direction: str        # 'fwd', 'bwd-data' or 'bwd-filter'
    algo: str             # e.g. 'IMPLICIT_PRECOMP_GEMM'
    status: str           # 'SUCCESS', or why cuDNN cannot run it for this set-up
    workspace: int        # bytes
    deterministic: bool
    math_type: str


def algorithms(spec):
    """Every algorithm cuDNN's heuristics list for each direction of `spec`, as cudnnlite.conv's
    Plan asks for them (cross-correlation; math type per cudnnlite.conv.settings). Needs a GPU."""
    from . import conv
    from .handle import get_handle
    try:
        handle = get_handle()
    except NotInitialized as e:
        raise NotInitialized("cudnnCreate", {"spec": spec}, "cudnnlite.testing.algorithms "
                             f"needs a CUDA device: {e.detail}") from None
    axes = logical_axes(len(spec.x), spec.layout)      # memory axis of each logical dim
    x_shape, w_shape = [0] * len(spec.x), [0] * len(spec.w)
    for i, axis in enumerate(axes):
        x_shape[axis], w_shape[axis] = spec.x[i], spec.w[i]
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    plan = conv.plan(x_shape, conv.c_strides(x_shape), w_shape, spec.dtype, spec.layout,
                     *spec.geometry(), spec.groups)
    rows = []
    for direction, d in (("fwd", conv.FWD), ("bwd-data", conv.BWD_DATA),
                         ("bwd-filter", conv.BWD_FILTER)):
        for p in plan.candidates(d, handle):
            rows.append(Algorithm(direction, d.algos(p.algo).name, Status(p.status).name,
                                  p.memory, bool(p.determinism), MathType(p.mathType).name))
    return rows


__all__ = ["ConvSpec", "Descriptors", "build", "expected_output_shape", "cudnn_output_shape",
           "assert_output_shape", "expected_setups", "assert_descriptors", "assert_rejected",
           "Algorithm", "algorithms"]

"""cuDNN descriptors as Python objects: built from shapes (or an array) and a dtype, freed by
weakref.finalize, read back from cuDNN's own getters for repr and ==. None of this needs a GPU.

Shape legend: N batch, C channels, H W (D) spatial; K output channels; R S filter height/width.
Dims are always given in cuDNN's logical order (N, C, *spatial) / (K, C, *spatial); `layout`
says how they lie in memory: 'NCHW' (channels first) or 'NHWC' (channels last).
"""
import operator
import weakref
from ctypes import byref, c_double, c_int, c_void_p

import numpy as np

from . import api
from ._cache import LRU
from .enums import ActivationMode, ConvMode, DataType, MathType, NanPropagation, TensorFormat
from .errors import BadParam, CudnnError, NotSupportedDataType

MAX_DIMS = 8  # CUDNN_DIM_MAX

_NUMPY_TO_CUDNN = {
    "float32": DataType.FLOAT, "float64": DataType.DOUBLE, "float16": DataType.HALF,
    "bfloat16": DataType.BFLOAT16, "int8": DataType.INT8, "uint8": DataType.UINT8,
    "int32": DataType.INT32, "int64": DataType.INT64, "bool": DataType.BOOLEAN,
}
_ITEMSIZE = {DataType.FLOAT: 4, DataType.DOUBLE: 8, DataType.HALF: 2, DataType.BFLOAT16: 2,
             DataType.INT8: 1, DataType.UINT8: 1, DataType.INT32: 4, DataType.INT64: 8,
             DataType.BOOLEAN: 1}
LAYOUTS = ("NCHW", "NHWC")
_BY_DTYPE = {}          # dtype (object, type or name) -> DataType, filled by data_type


def data_type(dtype, function="cudnnSetTensorNdDescriptor"):
    """cuDNN data type for a NumPy/CuPy dtype, a DataType, or a name such as 'bfloat16'.
    (bfloat16 arrays: ml_dtypes' dtype, which CuPy 14 supports; bf16 bits held in uint16 arrays
    are taken too, with data_type='bfloat16'.)"""
    if isinstance(dtype, DataType):
        return dtype
    hit = _BY_DTYPE.get(dtype)            # a dtype object or name seen before: no .name lookup
    if hit is not None:                   # (np.dtype's .name is Python code, ~2 us a call)
        return hit
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    try:
        dt = _BY_DTYPE[dtype] = _NUMPY_TO_CUDNN[name]
        return dt
    except KeyError:
        raise NotSupportedDataType(function, {"dtype": name},
                                   f"no cuDNN data type for {name}; supported: "
                                   + ", ".join(_NUMPY_TO_CUDNN)) from None


def itemsize(dt):
    return _ITEMSIZE[dt]


def check_layout(layout, function):
    if layout not in LAYOUTS:
        raise BadParam(function, {"layout": layout}, f"layout must be one of {LAYOUTS}")


def logical_axes(ndim, layout):
    """Array axes in cuDNN's logical order (N, C, *spatial) for an array stored in `layout`."""
    if layout == "NCHW":
        return tuple(range(ndim))
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


INT32_MAX = 2 ** 31 - 1


def _ints(values, function, name):
    """values as a C int array, each checked to fit: ctypes would wrap 2**32 + 192 to 192
    silently (a stride of a view over 8 GiB read as a packed tensor's)."""
    values = [int(v) for v in values]
    if any(not -INT32_MAX - 1 <= v <= INT32_MAX for v in values):
        raise BadParam(function, {name: tuple(values)},
                       f"{name} {tuple(values)} do not fit the C ints this descriptor takes "
                       f"(|value| < 2**31)")
    return (c_int * max(len(values), 1))(*values)


class Descriptor:
    """Owns one cudnn*Descriptor_t. `_as_parameter_` lets api functions take the object itself,
    so a failing call prints the descriptor's setup."""
    _create = _destroy = None

    _ready = False   # set True once a subclass __init__ has set the descriptor up

    def __init__(self):
        handle = c_void_p()
        type(self)._create(byref(handle))
        self._as_parameter_ = handle
        self._finalizer = weakref.finalize(self, type(self)._destroy, handle)

    def setup(self):
        """Everything cuDNN reports about this descriptor, as a tuple (compared by ==)."""
        raise NotImplementedError

    def __eq__(self, other):
        return type(self) is type(other) and self.setup() == other.setup()

    def __hash__(self):
        return hash(self.setup())

    def __repr__(self):
        if not self._ready:
            return f"{type(self).__name__}(<not set>)"
        try:
            return f"{type(self).__name__}({self._describe()})"
        except CudnnError:
            return f"{type(self).__name__}(<not set>)"


class TensorDescriptor(Descriptor):
    """cudnnTensorDescriptor_t: dims (N, C, *spatial), element strides (default: packed NCHW)."""
    _create = api.cudnnCreateTensorDescriptor
    _destroy = api.cudnnDestroyTensorDescriptor

    def __init__(self, dims, dtype="float32", strides=None):
        super().__init__()
        self.data_type = data_type(dtype)
        dims = tuple(int(d) for d in dims)
        if strides is None:
            strides = packed_strides(dims)
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(dims):
            raise BadParam("cudnnSetTensorNdDescriptor", {"dims": dims, "strides": strides},
                           "dims and strides differ in length")
        fn = "cudnnSetTensorNdDescriptor"
        api.cudnnSetTensorNdDescriptor(self, self.data_type, len(dims), _ints(dims, fn, "dims"),
                                       _ints(strides, fn, "strides"))
        self.dims, self.strides = dims, strides   # what we set; setup() reads cuDNN's copy
        self._ready = True

    @classmethod
    def from_array(cls, a, layout="NCHW", dtype=None):
        """Describe an array stored in `layout`, with its own strides (a view that
        cudnnlite.boundary.strided passed, or a packed array)."""
        check_layout(layout, "cudnnSetTensorNdDescriptor")
        dt = data_type(a.dtype if dtype is None else dtype)
        axes = logical_axes(a.ndim, layout)
        strides = element_strides(a)
        return cls([a.shape[i] for i in axes], dt, [strides[i] for i in axes])

    @classmethod
    def cached(cls, a, layout="NCHW", dtype=None):
        """from_array, memoised (LRU, TENSOR_CACHE_SIZE) on (shape, strides, dtype, layout):
        descriptors are immutable once set, so one per distinct geometry serves every call."""
        key = (a.shape, a.strides, a.dtype.str if dtype is None else data_type(dtype), layout)
        return _tensor_cache.get(key, lambda: cls.from_array(a, layout, dtype))

    def setup(self):
        dt, nb = c_int(), c_int()
        dims, strides = (c_int * MAX_DIMS)(), (c_int * MAX_DIMS)()
        api.cudnnGetTensorNdDescriptor(self, MAX_DIMS, byref(dt), byref(nb), dims, strides)
        n = nb.value
        return DataType(dt.value), tuple(dims[:n]), tuple(strides[:n])

    def _describe(self):
        dt, dims, strides = self.setup()
        return f"{dt.name}, dims={dims}, strides={strides}"


TENSOR_CACHE_SIZE = 4096
_tensor_cache = LRU(TENSOR_CACHE_SIZE)


def element_strides(a):
    """Array a's strides in elements, the stride of each size-1 axis set to what a packed array
    has there (it is never stepped over, and cuDNN checks it like any other)."""
    out = [0] * a.ndim
    inner = 1
    for i in range(a.ndim - 1, -1, -1):
        out[i] = a.strides[i] // a.itemsize if a.shape[i] != 1 else inner
        inner = out[i] * a.shape[i]
    return tuple(out)


def packed_strides(dims, layout="NCHW"):
    """Element strides of a packed tensor with logical dims (N, C, *spatial) stored in `layout`."""
    axes = logical_axes(len(dims), layout)      # logical dim i lives at memory axis axes[i]
    shape = [0] * len(dims)
    for i, axis in enumerate(axes):
        shape[axis] = dims[i]
    memory_strides = [1] * len(dims)
    for axis in range(len(dims) - 2, -1, -1):
        memory_strides[axis] = memory_strides[axis + 1] * shape[axis + 1]
    return tuple(memory_strides[axis] for axis in axes)


class FilterDescriptor(Descriptor):
    """cudnnFilterDescriptor_t: dims (K, C/groups, *spatial); memory format NCHW = KCRS (PyTorch)
    or NHWC = KRSC. Filters are always packed."""
    _create = api.cudnnCreateFilterDescriptor
    _destroy = api.cudnnDestroyFilterDescriptor

    def __init__(self, dims, dtype="float32", layout="NCHW"):
        super().__init__()
        check_layout(layout, "cudnnSetFilterNdDescriptor")
        self.data_type = data_type(dtype, "cudnnSetFilterNdDescriptor")
        self.format = TensorFormat[layout]
        dims = tuple(int(d) for d in dims)
        api.cudnnSetFilterNdDescriptor(self, self.data_type, self.format, len(dims),
                                       _ints(dims, "cudnnSetFilterNdDescriptor", "dims"))
        self.dims = dims
        self._ready = True

    @classmethod
    def from_array(cls, W, layout="NCHW", dtype=None):
        """W is (K, C, *spatial) for 'NCHW' or (K, *spatial, C) for 'NHWC', C-contiguous."""
        dt = data_type(W.dtype if dtype is None else dtype, "cudnnSetFilterNdDescriptor")
        if not W.flags.c_contiguous:
            raise BadParam("cudnnSetFilterNdDescriptor",
                           {"shape": W.shape, "strides": W.strides},
                           "filters must be C-contiguous (cuDNN filter descriptors have no strides)")
        check_layout(layout, "cudnnSetFilterNdDescriptor")
        return cls([W.shape[i] for i in logical_axes(W.ndim, layout)], dt, layout)

    def setup(self):
        dt, fmt, nb = c_int(), c_int(), c_int()
        dims = (c_int * MAX_DIMS)()
        api.cudnnGetFilterNdDescriptor(self, MAX_DIMS, byref(dt), byref(fmt), byref(nb), dims)
        return DataType(dt.value), TensorFormat(fmt.value), tuple(dims[:nb.value])

    def _describe(self):
        dt, fmt, dims = self.setup()
        return f"{dt.name}, {fmt.name}, dims={dims}"


class ConvolutionDescriptor(Descriptor):
    """cudnnConvolutionDescriptor_t: per spatial dim pad / stride / dilation, plus mode, compute
    type, group count and math type. Scalars broadcast to `spatial_dims`."""
    _create = api.cudnnCreateConvolutionDescriptor
    _destroy = api.cudnnDestroyConvolutionDescriptor

    def __init__(self, pad=0, stride=1, dilation=1, *, spatial_dims=2, groups=1,
                 mode=ConvMode.CROSS_CORRELATION, compute_type=DataType.FLOAT,
                 math_type=MathType.DEFAULT):
        super().__init__()
        pad, stride, dilation = (as_tuple(v, spatial_dims) for v in (pad, stride, dilation))
        if not len(pad) == len(stride) == len(dilation):
            raise BadParam("cudnnSetConvolutionNdDescriptor",
                           {"pad": pad, "stride": stride, "dilation": dilation},
                           "pad, stride and dilation differ in length")
        fn = "cudnnSetConvolutionNdDescriptor"
        api.cudnnSetConvolutionNdDescriptor(self, len(pad), _ints(pad, fn, "pad"),
                                            _ints(stride, fn, "stride"),
                                            _ints(dilation, fn, "dilation"), ConvMode(mode),
                                            data_type(compute_type))
        api.cudnnSetConvolutionGroupCount(self, int(groups))
        api.cudnnSetConvolutionMathType(self, MathType(math_type))
        self.pad, self.stride, self.dilation, self.groups = pad, stride, dilation, int(groups)
        self.math_type = MathType(math_type)
        self._ready = True

    def set_math_type(self, math_type):
        api.cudnnSetConvolutionMathType(self, MathType(math_type))
        self.math_type = MathType(math_type)

    def setup(self):
        n, mode, ct = c_int(), c_int(), c_int()
        pad, stride, dil = (c_int * MAX_DIMS)(), (c_int * MAX_DIMS)(), (c_int * MAX_DIMS)()
        api.cudnnGetConvolutionNdDescriptor(self, MAX_DIMS - 2, byref(n), pad, stride, dil,
                                            byref(mode), byref(ct))
        groups, math = c_int(), c_int()
        api.cudnnGetConvolutionGroupCount(self, byref(groups))
        api.cudnnGetConvolutionMathType(self, byref(math))
        k = n.value
        return (tuple(pad[:k]), tuple(stride[:k]), tuple(dil[:k]), ConvMode(mode.value),
                DataType(ct.value), groups.value, MathType(math.value))

    def _describe(self):
        pad, stride, dil, mode, ct, groups, math = self.setup()
        return (f"pad={pad}, stride={stride}, dilation={dil}, mode={mode.name}, "
                f"compute={ct.name}, groups={groups}, math={math.name}")


def as_tuple(v, n, function="cudnnSetConvolutionNdDescriptor"):
    """An int (n times) or a sequence of ints as a tuple of Python ints; a float, even a whole
    one, is a BadParam naming `function` (int() would have cut 1.5 to 1)."""
    try:
        if isinstance(v, (int, np.integer)):
            return (operator.index(v),) * n
        return tuple(operator.index(x) for x in v)
    except TypeError:
        raise BadParam(function, {"value": v}, f"expected an integer or a sequence of "
                       f"integers, got {v!r}") from None


class ActivationDescriptor(Descriptor):
    """cudnnActivationDescriptor_t: mode, NaN propagation, coef (clipped-relu ceiling, elu alpha)."""
    _create = api.cudnnCreateActivationDescriptor
    _destroy = api.cudnnDestroyActivationDescriptor

    def __init__(self, mode, coef=0.0, nan_opt=NanPropagation.NOT_PROPAGATE_NAN):
        super().__init__()
        api.cudnnSetActivationDescriptor(self, ActivationMode(mode), NanPropagation(nan_opt),
                                         float(coef))
        self.mode, self.coef = ActivationMode(mode), float(coef)
        self._ready = True

    def setup(self):
        mode, nan, coef = c_int(), c_int(), c_double()
        api.cudnnGetActivationDescriptor(self, byref(mode), byref(nan), byref(coef))
        return ActivationMode(mode.value), NanPropagation(nan.value), coef.value

    def _describe(self):
        mode, nan, coef = self.setup()
        return f"{mode.name}, {nan.name}, coef={coef}"


def conv_output_shape(x, w, conv):
    """Output dims (N, K, *spatial) of conv(x, w), from cuDNN's cudnnGetConvolutionNdForwardOutputDim.
    x: TensorDescriptor, w: FilterDescriptor, conv: ConvolutionDescriptor."""
    n = len(x.dims)
    out = (c_int * n)()
    api.cudnnGetConvolutionNdForwardOutputDim(conv, x, w, n, out)
    return tuple(out)


__all__ = ["TensorDescriptor", "FilterDescriptor", "ConvolutionDescriptor", "ActivationDescriptor",
           "conv_output_shape", "data_type", "packed_strides", "element_strides", "logical_axes"]

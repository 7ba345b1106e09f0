"""cuDNN activations (relu, sigmoid, tanh, elu, clipped relu, identity, swish) forward/backward
and tensor arithmetic (cudnnAddTensor with broadcasting, cudnnScaleTensor) on CuPy arrays."""
from . import api
from ._args import check_device
from ._args import scalar as _scalar
from .descriptors import ActivationDescriptor, TensorDescriptor, data_type
from .enums import ActivationMode
from .errors import BadParam
from .handle import get_handle

_activations = {}


def _activation(mode, coef):
    key = (ActivationMode(mode), float(coef))
    desc = _activations.get(key)
    if desc is None:
        desc = _activations[key] = ActivationDescriptor(*key)
    return desc


def _as4d(function, name, a):
    """cuDNN tensor ops want 4 to 8 dims: pad with trailing 1s (a view, same memory)."""
    check_device(function, **{name: a})
    if a.ndim > 8:
        raise BadParam(function, {f"{name}.shape": a.shape}, "at most 8 dims")
    return a.reshape(a.shape + (1,) * (4 - a.ndim)) if a.ndim < 4 else a


def forward(x, mode, coef=0.0, *, out=None, alpha=1.0, beta=0.0, dtype=None):
    """y = alpha * act(x) + beta * out. coef: clipped-relu ceiling, elu alpha, swish beta."""
    import cupy
    fn = "cudnnActivationForward"
    x4 = _as4d(fn, "x", x)
    dt = data_type(dtype or x.dtype.name, fn)
    if out is None:
        out = cupy.empty_like(x)
    y4 = _as4d(fn, "out", out)
    api.cudnnActivationForward(get_handle(), _activation(mode, coef), _scalar(dt, alpha),
                               TensorDescriptor.cached(x4, dtype=dt), x4.data.ptr,
                               _scalar(dt, beta), TensorDescriptor.cached(y4, dtype=dt),
                               y4.data.ptr)
    return out


def backward(y, gy, x, mode, coef=0.0, *, out=None, alpha=1.0, beta=0.0, dtype=None):
    """gx = alpha * act'(x) * gy + beta * out, given the forward's x and y."""
    import cupy
    fn = "cudnnActivationBackward"
    y4, gy4, x4 = _as4d(fn, "y", y), _as4d(fn, "gy", gy), _as4d(fn, "x", x)
    dt = data_type(dtype or x.dtype.name, fn)
    if out is None:
        out = cupy.empty_like(x)
    gx4 = _as4d(fn, "out", out)
    api.cudnnActivationBackward(get_handle(), _activation(mode, coef), _scalar(dt, alpha),
                                TensorDescriptor.cached(y4, dtype=dt), y4.data.ptr,
                                TensorDescriptor.cached(gy4, dtype=dt), gy4.data.ptr,
                                TensorDescriptor.cached(x4, dtype=dt), x4.data.ptr,
                                _scalar(dt, beta), TensorDescriptor.cached(gx4, dtype=dt),
                                gx4.data.ptr)
    return out


def add_tensor(a, c, *, alpha=1.0, beta=1.0, dtype=None):
    """c = alpha * a + beta * c in place; a broadcasts over c where its dims are 1 (bias add)."""
    fn = "cudnnAddTensor"
    a4, c4 = _as4d(fn, "a", a), _as4d(fn, "c", c)
    dt = data_type(dtype or c.dtype.name, fn)
    api.cudnnAddTensor(get_handle(), _scalar(dt, alpha), TensorDescriptor.cached(a4, dtype=dt),
                       a4.data.ptr, _scalar(dt, beta), TensorDescriptor.cached(c4, dtype=dt),
                       c4.data.ptr)
    return c


def scale_tensor(y, alpha, *, dtype=None):
    """y *= alpha in place."""
    fn = "cudnnScaleTensor"
    y4 = _as4d(fn, "y", y)
    dt = data_type(dtype or y.dtype.name, fn)
    api.cudnnScaleTensor(get_handle(), TensorDescriptor.cached(y4, dtype=dt), y4.data.ptr,
                         _scalar(dt, alpha))
    return y

"""cuDNN activations (relu, sigmoid, tanh, elu, clipped relu, identity, swish) forward/backward
and tensor arithmetic (cudnnAddTensor with broadcasting, cudnnScaleTensor) on CuPy arrays."""
from . import api
from ._cache import LRU
from .boundary import (ALIGNMENT, CallCache, apart, check_out, check_shape, common_dtype,
                       handle, is_packed, output, packed, scalar)
from .descriptors import ActivationDescriptor, TensorDescriptor
from .enums import ActivationMode, NanPropagation
from .errors import BadParam, BadParamShapeMismatch

_activations = LRU(64)


def _activation(mode, coef):
    """The activation descriptor of (mode, coef), NaN propagating: relu(NaN) is NaN, as torch's
    and the graph API's pointwise ops have it (cuDNN's default, NOT_PROPAGATE_NAN, would make a
    NaN input 0 and hide it from the non-finite checks after the layer)."""
    key = (ActivationMode(mode), float(coef))
    return _activations.get(key, lambda: ActivationDescriptor(*key, NanPropagation.PROPAGATE_NAN))


def _as4d(a):
    """cuDNN tensor ops want 4 to 8 dims: pad with trailing 1s (a view, same memory)."""
    return a.reshape(a.shape + (1,) * (4 - a.ndim)) if a.ndim < 4 else a


def _checked(function, dtype, **arrays):
    """The data type of a call whose arrays (None skipped) are device arrays of one dtype with at
    most 8 dims."""
    dt = common_dtype(function, dtype, **arrays)
    for name, a in arrays.items():
        if a is not None and a.ndim > 8:
            raise BadParam(function, {f"{name}.shape": a.shape}, "at most 8 dims")
    return dt


# The steady-state path of the two activation calls, as cudnnlite.conv's: what the checks
# concluded (data type, descriptor) kept per call signature; only calls whose arrays went
# through uncopied are kept.
CALL_CACHE_SIZE = 256
_calls = CallCache(CALL_CACHE_SIZE)      # -> (data type, descriptor)


def clear_cache():
    """Forget the activation descriptors and the calls kept."""
    _activations.clear()
    _calls.clear()


def forward(x, mode, coef=0.0, *, out=None, alpha=1.0, beta=0.0, dtype=None):
    """y = alpha * act(x) + beta * out. coef: clipped-relu ceiling, elu alpha, swish beta."""
    fn = "cudnnActivationForward"
    key = _calls.key((x, out), fn, mode, coef, alpha, beta, dtype)
    seen = _calls.seen(key)
    if seen is not None:          # (a relation, not in the key; the checks below do it too)
        apart(fn, "out", out, in_place=("x",), x=x)      # (cuDNN: y may be x itself)
    if seen is None:
        given = x
        dt = _checked(fn, dtype, x=x, out=out)
        x = packed(fn, "x", x)
        check_out(fn, "out", out, x.shape, x.dtype, beta)
        apart(fn, "out", out, in_place=("x",), x=x)
        h = handle(fn, x=x, out=out)
        desc = TensorDescriptor.cached(_as4d(x), dtype=dt)
        if x is given:
            _calls.remember(key, h, (dt, desc))
    else:
        (dt, desc), h = seen
    out = output(out, x.shape, x.dtype)
    x4, y4 = _as4d(x), _as4d(out)
    api.cudnnActivationForward(h, _activation(mode, coef), scalar(dt, alpha), desc, x4.data.ptr,
                               scalar(dt, beta), desc, y4.data.ptr)
    return out


def backward(y, gy, x, mode, coef=0.0, *, out=None, alpha=1.0, beta=0.0, dtype=None):
    """gx = alpha * act'(x) * gy + beta * out, given the forward's x and y."""
    fn = "cudnnActivationBackward"
    key = _calls.key((y, gy, x, out), fn, mode, coef, alpha, beta, dtype)
    seen = _calls.seen(key)
    if seen is not None:          # (a relation, not in the key; the checks below do it too)
        apart(fn, "out", out, in_place=("gy",), y=y, gy=gy, x=x)     # (dx may be dy itself)
    if seen is None:
        given = y, gy, x
        dt = _checked(fn, dtype, y=y, gy=gy, x=x, out=out)
        y, gy, x = packed(fn, "y", y), packed(fn, "gy", gy), packed(fn, "x", x)
        check_shape(fn, "gy", gy, y.shape, "y has")
        check_shape(fn, "x", x, y.shape, "y has")
        check_out(fn, "out", out, x.shape, x.dtype, beta)
        apart(fn, "out", out, in_place=("gy",), y=y, gy=gy, x=x)
        h = handle(fn, y=y, gy=gy, x=x, out=out)
        desc = TensorDescriptor.cached(_as4d(x), dtype=dt)
        if all(a is b for a, b in zip((y, gy, x), given)):
            _calls.remember(key, h, (dt, desc))
    else:
        (dt, desc), h = seen
    out = output(out, x.shape, x.dtype)
    y4, gy4, x4, gx4 = _as4d(y), _as4d(gy), _as4d(x), _as4d(out)
    api.cudnnActivationBackward(h, _activation(mode, coef), scalar(dt, alpha), desc, y4.data.ptr,
                                desc, gy4.data.ptr, desc, x4.data.ptr, scalar(dt, beta), desc,
                                gx4.data.ptr)
    return out


def _in_place(function, name, a):
    """An array cuDNN writes in place must be packed already: a copy would lose the result."""
    if not is_packed(a):
        raise BadParam(function, {f"{name}.strides": a.strides, f"{name}.ptr": a.data.ptr},
                       f"{name} is written in place, so it must be C-contiguous and "
                       f"{ALIGNMENT}-byte aligned")


def add_tensor(a, c, *, alpha=1.0, beta=1.0, dtype=None):
    """c = alpha * a + beta * c in place; a broadcasts over c where its dims are 1 (bias add)."""
    fn = "cudnnAddTensor"
    dt = _checked(fn, dtype, a=a, c=c)
    _in_place(fn, "c", c)
    if a.ndim != c.ndim or any(m not in (1, n) for m, n in zip(a.shape, c.shape)):
        raise BadParamShapeMismatch(fn, {"a.shape": a.shape, "c.shape": c.shape},
                                    f"a {a.shape} must have c's dims {c.shape}, or 1 where it "
                                    f"broadcasts")
    a = packed(fn, "a", a)
    h = handle(fn, a=a, c=c)
    a4, c4 = _as4d(a), _as4d(c)
    api.cudnnAddTensor(h, scalar(dt, alpha), TensorDescriptor.cached(a4, dtype=dt), a4.data.ptr,
                       scalar(dt, beta), TensorDescriptor.cached(c4, dtype=dt), c4.data.ptr)
    return c


def scale_tensor(y, alpha, *, dtype=None):
    """y *= alpha in place."""
    fn = "cudnnScaleTensor"
    dt = _checked(fn, dtype, y=y)
    _in_place(fn, "y", y)
    h = handle(fn, y=y)
    y4 = _as4d(y)
    api.cudnnScaleTensor(h, TensorDescriptor.cached(y4, dtype=dt), y4.data.ptr, scalar(dt, alpha))
    return y

"""The boundary: every array is checked here before its pointer is handed to cuDNN -- device
memory on the current device, one of cuDNN's allowed dtype combinations, the shape the call
expects, strides a descriptor can state (else one contiguous copy) -- and alpha / beta pointers
are made here. A violation raises a BadParam subclass naming the C function, the argument and
its values, before any pointer leaves Python."""
import ctypes

from ._cache import LRU
from .descriptors import data_type, itemsize
from .enums import DataType
from .errors import BadParam, BadParamShapeMismatch, NotSupportedDataType
from .handle import get_handle

ALIGNMENT = 16      # bytes: the widest vector load cuDNN's kernels make; views off it are copied


_DEVICE_TYPES = set()      # array types whose instances were seen to carry data.ptr


def device_array(function, name, a):
    """a must be device memory (a CuPy array, or anything with its data.ptr / shape / strides)."""
    if type(a) in _DEVICE_TYPES:
        return
    if hasattr(getattr(a, "data", None), "ptr"):
        _DEVICE_TYPES.add(type(a))
    else:
        raise BadParam(function, {name: type(a).__name__},
                       f"{name} must be a CuPy array (device memory), got {type(a).__name__}")


def common_dtype(function, dtype=None, **arrays):
    """The cuDNN data type of a call whose arrays (None skipped) must all hold one dtype, as
    x / W / y of a convolution: their common dtype, or `dtype` (e.g. 'bfloat16' for bf16 bits
    held in uint16 arrays), whose item size must match the arrays'."""
    first = a0 = None
    for n, a in arrays.items():
        if a is None:
            continue
        device_array(function, n, a)
        if a0 is None:
            first, a0 = n, a
        elif a.dtype != a0.dtype:
            raise BadParam(function, {f"{first}.dtype": a0.dtype.name, f"{n}.dtype": a.dtype.name},
                           f"{first} and {n} must have one dtype, got {a0.dtype.name} and "
                           f"{a.dtype.name}")
    dt = data_type(a0.dtype if dtype is None else dtype, function)
    if dtype is not None and itemsize(dt) != a0.itemsize:
        raise BadParam(function, {"dtype": dtype, f"{first}.dtype": a0.dtype.name},
                       f"dtype={dtype!r} takes {itemsize(dt)}-byte elements but {first} holds "
                       f"{a0.dtype.name} ({a0.itemsize} bytes)")
    if dtype is not None:                 # a relabel of storage that names no cuDNN type only
        try:
            own = data_type(a0.dtype, function)
        except NotSupportedDataType:
            own = None
        if own is not None and own != dt:
            raise BadParam(function, {"dtype": dtype, f"{first}.dtype": a0.dtype.name},
                           f"dtype={dtype!r} would read {first}'s {a0.dtype.name} values as "
                           f"{dt.name} bits; dtype= names the type of bits held in integer "
                           f"storage (bfloat16 in uint16 arrays)")
    return dt


def describable(a):
    """True when a tensor descriptor can state a's own strides: each positive, a multiple of the
    item size, axes in the array's order and not overlapping (a slice of a C-ordered array), and
    the first element 16-byte aligned. Transposed, broadcast (zero-stride), reversed (negative
    stride) and misaligned views are not."""
    if a.data.ptr % ALIGNMENT:
        return False
    inner = a.itemsize             # extent of the axes inside the current one
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n == 1:
            continue
        if s % a.itemsize or s < inner or s // a.itemsize > 2 ** 31 - 1:   # (C int strides)
            return False
        inner = s * n
    return True


def is_packed(a):
    """C-contiguous with its first element 16-byte aligned: what cuDNN is told by packed strides."""
    return a.flags.c_contiguous and a.data.ptr % ALIGNMENT == 0


def strided(function, name, a):
    """a itself when its strides can go in its descriptor (see describable), else one aligned
    C-contiguous copy. Callers keep what this returns and use it for every later call that reads
    the same tensor (backward included)."""
    device_array(function, name, a)
    if is_packed(a) or describable(a):
        return a
    return a.copy(order="C")


def packed(function, name, a):
    """a itself when it is C-contiguous and aligned (cuDNN is told packed strides), else one copy
    that is. For calls whose descriptors cannot carry strides (filters, batch norm, RNN data)."""
    device_array(function, name, a)
    if is_packed(a):
        return a
    return a.copy(order="C")


def overlap(a, b):
    """True when the memory strided arrays a and b reach (their extents) meets: they may share
    memory. An empty array shares none."""
    alo, ahi = extent(a)
    blo, bhi = extent(b)
    return alo < bhi and blo < ahi


def extent(a):
    """[first byte, last byte + 1) of the memory a strided array a reaches (empty: (p, p))."""
    lo = hi = a.data.ptr
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return lo, lo
        if s > 0:
            hi += s * (n - 1)
        else:
            lo += s * (n - 1)
    return lo, hi + a.itemsize


def apart(function, out_name, out, in_place=(), error=BadParam, **inputs):
    """An array a call writes (`out`; None passes) shares no memory with the arrays it reads
    (`inputs`, None skipped): cuDNN and cuBLAS read their inputs while they write, so an
    overlap is a result computed from half-written inputs. Names in `in_place` may be `out`
    itself -- the same memory, shape and strides -- where the C function documents in-place
    operation (cudnnActivationForward's x and y); a partial overlap is refused there too. A
    relation between arrays, so the call caches' per-array signatures cannot stand for it:
    callers check it on every call that has an `out`. `error`: the refusal's class (cuBLAS's
    InvalidValue for cudnnlite.blas). Arrays that are not device arrays pass here: the
    per-array checks refuse them, naming them."""
    if not _on_device(out) or out.size == 0:
        return
    lo, hi = extent(out)
    for name, a in inputs.items():
        if not _on_device(a) or a.size == 0:
            continue
        if name in in_place and a.data.ptr == out.data.ptr and a.shape == out.shape and \
                a.strides == out.strides:
            continue
        alo, ahi = extent(a)
        if alo < hi and lo < ahi:
            raise error(function, {f"{out_name}.ptr": out.data.ptr,
                                   f"{out_name}.bytes": hi - lo, f"{name}.ptr": a.data.ptr,
                                   f"{name}.bytes": ahi - alo},
                        f"{out_name} shares memory with {name}, which {function} reads while "
                        f"it writes {out_name}: pass an {out_name} apart from the inputs")


def _on_device(a):
    """a is an array with a device pointer (CuPy's, or one device_array has accepted)."""
    return a is not None and type(a) in _DEVICE_TYPES or \
        isinstance(getattr(getattr(a, "data", None), "ptr", None), int)


def check_shape(function, name, a, shape, what="the call expects"):
    if tuple(a.shape) != tuple(shape):
        raise BadParamShapeMismatch(function, {f"{name}.shape": tuple(a.shape),
                                               "expected": tuple(shape)},
                                    f"{name} has shape {tuple(a.shape)}, {what} {tuple(shape)}")


def check_out(function, name, out, shape, dtype, beta=0.0):
    """An `out=` array cuDNN writes into: device memory of exactly `shape` and `dtype`,
    C-contiguous and aligned (cuDNN is told packed strides and writes every element). None passes
    (the function allocates one) unless beta != 0, which blends the old contents in."""
    if out is None:
        if beta != 0:
            raise BadParam(function, {"beta": beta}, f"beta != 0 blends into `{name}`: pass "
                           f"{name}=")
        return None
    device_array(function, name, out)
    check_shape(function, name, out, shape, "the result is")
    if out.dtype != dtype:
        raise BadParam(function, {f"{name}.dtype": out.dtype.name, "expected": str(dtype)},
                       f"{name} has dtype {out.dtype.name}, the result is {dtype}")
    if not is_packed(out):
        raise BadParam(function, {f"{name}.strides": out.strides, f"{name}.ptr": out.data.ptr},
                       f"{name} must be C-contiguous and {ALIGNMENT}-byte aligned: cuDNN writes it "
                       f"as a packed tensor")
    return out


def output(out, shape, dtype):
    """The array a call writes: `out` (already through check_out) or a new one (after handle():
    allocating needs a device)."""
    if out is not None:
        return out
    import cupy
    return cupy.empty(shape, dtype=dtype)


CALL_CACHE = True
"""True: the convolution, batch-norm *Ex and activation calls keep what their checks concluded
per signature (below) and skip the checks on a repeated call; False: every call takes them
(what tools.bench_dcgan --call-cache compares)."""


def signature(*arrays):
    """Everything the checks above read of each array (None stays None): its type, shape,
    strides, dtype, device and the alignment of its first element. Two calls whose arrays have
    one signature pass or fail every check alike, so a call can keep what the checks concluded
    under it (a steady-state training step makes the same calls every step: CallCache, below,
    as cudnnlite.conv, .batchnorm and .activation keep them). None when an array is of a type
    device_array has not accepted yet (a NumPy array, say), or with CALL_CACHE off: such a call
    takes the checks."""
    if not CALL_CACHE:
        return None
    for a in arrays:
        if a is not None and type(a) not in _DEVICE_TYPES:
            return None
    return tuple(None if a is None else
                 (type(a), a.shape, a.strides, a.dtype, a.device.id, a.data.ptr % ALIGNMENT)
                 for a in arrays)


class CallCache:
    """A boundary function's steady-state path: what its checks concluded (descriptors, sizes,
    an output's shape) kept per call -- the signature of each of its arrays and its other
    arguments -- for the next call with the same, which skips the checks. Kept only for calls
    whose arrays went through as they came (no copy made); the caller says so by calling
    `remember` only then."""

    def __init__(self, size):
        self.entries = LRU(size)

    @staticmethod
    def key(arrays, *args):
        """The call's key, or None (nothing kept or looked up: CALL_CACHE off, or an array of a
        type device_array has not accepted yet)."""
        sig = signature(*arrays)
        return None if sig is None else (sig, args)

    def seen(self, key):
        """(what was kept, the current handle), or None: not seen, an unhashable argument (a
        list as `pad`), or kept on another device than the current one -- the checked path then
        says which array is where."""
        try:
            kept = None if key is None else self.entries.peek(key)
        except TypeError:
            return None
        if kept is None:
            return None
        device, value = kept
        h = handle("cudnnCreate")        # the current device's, bound to the current stream
        return (value, h) if h.device_id == device else None

    def remember(self, key, h, value):
        """Keep `value` for `key` on handle h's device (the checks passed there)."""
        if key is not None:
            try:
                self.entries.put(key, (h.device_id, value))
            except TypeError:
                pass

    def clear(self):
        self.entries.clear()

    def __len__(self):
        return len(self.entries)


def handle(function, **arrays):
    """The current device's handle (bound to CuPy's current stream), after checking every array
    (None skipped) lives on that device."""
    h = get_handle()
    for name, a in arrays.items():
        if a is not None and a.device.id != h.device_id:
            raise BadParam(function, {f"{name}.device": a.device.id,
                                      "current device": h.device_id},
                           f"{name} is on device {a.device.id} but the current device is "
                           f"{h.device_id}; call under `with cupy.cuda.Device({a.device.id}):`")
    return h


_scalars = LRU(256)


def scalar(dt, value):
    """A pointer to alpha / beta as cuDNN wants it (double for double data, else float). Cached:
    the call that takes it holds its own reference, so eviction never frees one in use."""
    double = dt == DataType.DOUBLE
    fixed = _FIXED.get((double, value))        # 0 and 1, most calls' alpha and beta
    if fixed is not None:
        return fixed
    return _scalars.get((double, value), lambda: ctypes.byref(
        ctypes.c_double(value) if double else ctypes.c_float(value)))


_FIXED = {(double, float(v)): ctypes.byref(ctypes.c_double(v) if double else ctypes.c_float(v))
          for double in (False, True) for v in (0, 1)}

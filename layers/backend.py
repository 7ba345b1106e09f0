"""Where data lives: NumPy arrays on the CPU, CuPy arrays on a GPU. Devices are 'cpu' or an int."""
import collections
import contextlib
import sys

import numpy as np

_cupy = None


def cupy():
    """The cupy module, imported on first use (the NumPy path never needs it)."""
    global _cupy
    if _cupy is None:
        import cupy as cp
        _cupy = cp
    return _cupy


_GPU_TYPES = set()


def is_gpu(a):
    """True for device arrays (CuPy's ndarray, or anything with __cuda_array_interface__)."""
    t = type(a)
    if t is np.ndarray:
        return False
    if t in _GPU_TYPES:
        return True
    if hasattr(t, "__cuda_array_interface__"):    # a class attribute check: computes nothing
        _GPU_TYPES.add(t)
        return True
    return False


try:                                    # NumPy has no bfloat16; ml_dtypes' is CuPy's too
    import ml_dtypes as _ml_dtypes
    bfloat16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:                     # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None


def np_dtype(x):
    """np.dtype(x), where x may also be a torch dtype (torch.float32, torch.bfloat16: read by its
    name, torch not imported), so torch code's dtype arguments are taken as they are."""
    if type(x).__name__ == "dtype" and type(x).__module__ == "torch":
        return np.dtype(str(x).removeprefix("torch."))
    return np.dtype(x)


def floating_dtype_or_none(x):
    """x as a floating NumPy dtype when it names one (np.float32, 'bfloat16',
    ml_dtypes.bfloat16), else None (a device such as 'cpu', 0 or 'cuda:1')."""
    if isinstance(x, (int, np.integer)) or (isinstance(x, str) and
                                           (x in ("cpu", "cuda") or x.startswith("cuda:")
                                            or x.isdigit())):
        return None
    try:
        dtype = np_dtype(x)
    except TypeError:
        return None
    return dtype if is_floating(dtype) else None


def dtype_or_none(x):
    """x as a NumPy dtype of any kind when it names one (np.int64, 'bool', np.float32), else
    None (a device: 'cpu', 0, 'cuda:1')."""
    if x is None or isinstance(x, (int, np.integer)) or (isinstance(x, str) and (
            x in ("cpu", "cuda") or x.startswith("cuda:") or x.isdigit())):
        return None
    try:
        return np_dtype(x)
    except TypeError:
        return None


_DTYPE_NAMES = {}


def dtype_name(dtype):
    """dtype.name, memoised by the dtype object (NumPy works the name out in Python on each
    access: ~116 times an eager DCGAN step, ~0.5 ms of it profiled on an H100's host)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def is_floating(dtype):
    """float16 / bfloat16 / float32 / float64 (bfloat16 is a NumPy 'V'-kind extension dtype)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == bfloat16


# torch's two rules for Python ints meeting an integer dtype: a value stored is checked
# (fit_integers), an operand of arithmetic or a comparison is cast, wrapping (cast_integer);
# neither takes an int outside [-2**63, 2**64)

def _beyond_64_bits(fn, values):
    big = next((int(x) for x in np.asarray(values).ravel() if not -2 ** 63 <= int(x) < 2 ** 64),
               None)
    if big is not None:
        raise OverflowError(f"{fn}: the Python int {big} does not fit in int64 or uint64 "
                            f"(as torch)")


def fit_integers(fn, values, dtype):
    """Integer values (a Python int or an integer array) as integer `dtype`, torch's way: a value
    outside the dtype's range is refused ('value cannot be converted to type int8 without
    overflow'), except that an unsigned dtype takes negatives down to -max, wrapped as two's
    complement (-1 is 255 in uint8), as torch's."""
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    low = -int(info.max) if dtype.kind == "u" else int(info.min)
    v = np.asarray(values)
    if v.size and not -2 ** 63 <= int(v.min()) <= int(v.max()) < 2 ** 64:
        _beyond_64_bits(fn, v)
    if v.size and (int(v.min()) < low or int(v.max()) > int(info.max)):
        bad = next(int(x) for x in v.ravel() if not low <= int(x) <= int(info.max))
        raise RuntimeError(f"{fn}: value {bad} cannot be converted to type {dtype} without "
                           f"overflow (as torch)")
    return v.astype(np.int64).astype(dtype) if v.dtype.kind != "u" else v.astype(dtype)


def fit_value(fn, value, dtype, finite=True):
    """A Python or NumPy number stored into `dtype` (full, fill_, masked_fill, scatter's value,
    x[i] = v, tensor(..., dtype=)) as torch stores it, else torch's refusal ('value cannot be
    converted to type uint8 without overflow'), never a silently wrong value:
    - an integer dtype takes an integer as fit_integers does, and a floating value truncated
      toward zero (2.7 is 2), refused where NaN, infinite or outside the dtype's range before
      truncating (-0.5 into uint8, 127.9 into int8, 2.0 ** 63 into int64, as torch's -- whose
      cast gives INT64_MIN for that last one);
    - a floating dtype refuses, with `finite` (torch's full, fill_, masked_fill, scatter, clamp;
      x[i] = v and where for float32 alone; tensor() never), a finite value beyond its largest
      (65504.5 into float16; torch stores inf for a one-element tensor's fill_);
    - bool takes the value's truth.
    Returns the value as a Python number (a complex dtype's, and other values: unchanged)."""
    if not isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return value
    kind, low, high = limits(dtype)
    if isinstance(value, (bool, np.bool_)):
        return bool(value) if kind in "bf" else int(value) if kind == "i" else value
    if kind == "f":
        value = int(value) if isinstance(value, (int, np.integer)) else float(value)
        if finite and not -high <= value <= high and value == value and \
                abs(value) != float("inf"):
            raise RuntimeError(f"{fn}: value {value} cannot be converted to type "
                               f"{np.dtype(dtype)} without overflow (as torch)")
        return value
    if kind == "b":
        return bool(value)
    if kind == "i":
        if isinstance(value, (int, np.integer)):
            return int(fit_integers(fn, value, dtype))
        value = float(value)
        if not low <= value <= high:                    # (NaN fails it too, as inf)
            raise RuntimeError(f"{fn}: value {value} cannot be converted to type "
                               f"{np.dtype(dtype)} without overflow (as torch)")
        return int(value)
    return value


_LIMITS = {}                # dtype -> (kind: 'f' / 'i' / 'b' / other, lowest, largest)


def limits(dtype):
    """(kind -- 'f' floating, 'i' integer, else NumPy's kind letter --, lowest, largest) of a
    dtype's finite values (None, None for the others), kept per dtype."""
    found = _LIMITS.get(dtype)
    return found if found is not None else _limits(dtype)


def _limits(dtype):
    d = np.dtype(dtype)
    if is_floating(d):
        info = _ml_dtypes.finfo(d) if d == bfloat16 else np.finfo(d)
        limits = ("f", -float(info.max), float(info.max))
    elif d.kind in "iu":
        info = np.iinfo(d)
        limits = ("i", int(info.min), int(info.max))
    else:
        limits = (d.kind, None, None)
    _LIMITS[dtype] = _LIMITS[d] = limits
    return limits


def cast_integer(n, dtype):
    """A Python int as torch casts an operand to an integer tensor's dtype: modulo 2**bits, so
    uint8 + 300 adds 44 and uint8 > -1 compares with 255 (NumPy 2 raises OverflowError)."""
    if not -2 ** 63 <= n < 2 ** 64:
        _beyond_64_bits("the operand", n)
    bits = 8 * dtype.itemsize
    if dtype.kind == "u":
        return n % (1 << bits)
    half = 1 << (bits - 1)
    return (n + half) % (1 << bits) - half


def promote_types(a, b):
    """The dtype two tensors of these dtypes combine in, as torch.promote_types: a floating
    dtype with a bool or integer one is the floating one (int64 with float32: float32, where
    NumPy says float64); float16 with bfloat16 is float32 (NumPy cannot combine them);
    otherwise NumPy's result type."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    fa, fb = is_floating(a), is_floating(b)
    if fa != fb and (b if fa else a).kind in "biu":     # floating with bool / integer
        return a if fa else b
    if is_half(a) and is_half(b):
        return np.dtype(np.float32)
    return np.result_type(a, b)


_default_float = [np.dtype(np.float32)]     # torch's default dtype (set_default_dtype)


def default_float():
    """torch's default dtype: what a Python float, a floating factory without dtype=, a new
    module's parameters and a floating function of integers give; float32 unless
    set_default_dtype said otherwise."""
    return _default_float[0]


def default_complex():
    """The default complex dtype: complex128 with a float64 default, else complex64."""
    return np.dtype(np.complex128 if _default_float[0] == np.float64 else np.complex64)


def set_default_dtype(d):
    """torch.set_default_dtype: float32 or float64 (torch's float16 default is not done here:
    batch norm and the optimizers keep float32 parameters and state for half data)."""
    try:
        dtype = None if d is None or d is float else np.dtype(d)   # (NumPy reads both as
    except TypeError:                                               # float64; torch refuses)
        dtype = None
    if dtype is None or not is_floating(dtype):
        raise TypeError(f"set_default_dtype: only floating-point types are supported as the "
                        f"default type, got {d!r}")
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"set_default_dtype({dtype.name}): a half-precision default dtype is not "
                        f"done here (float32 or float64); cast the model with .to({dtype.name}) "
                        f"instead")
    _default_float[0] = dtype


get_default_dtype = default_float          # (torch's name for it)


def number_dtype(value):
    """torch's dtype for a number standing alone (torch.full's fill value, torch.where's two
    numbers): bool, int64 for an integer, complex64 for a complex number, else the default
    float (NumPy scalars by their kind, at torch's widths)."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64)
    if isinstance(value, (complex, np.complexfloating)):
        return default_complex()
    return default_float()


def _combine(higher, lower):
    """torch's combine_categories: the result of a more significant class of operands
    (`higher`: dimensioned tensors over 0-d ones over Python numbers) with a less significant
    one; None where a class is absent."""
    if higher is None:
        return lower
    if lower is None or is_floating(higher):
        return higher
    if higher == np.bool_ or is_floating(lower):
        return promote_types(higher, lower)
    return higher


def result_dtype(*operands):
    """The dtype an elementwise op of these operands (arrays, 0-d or not, and Python numbers)
    computes in, by torch's rule (torch.result_type): promote_types over the dimensioned arrays;
    a 0-d array or a number counts only where it is of a higher category (bool < integer <
    floating) -- a float32 tensor times a float64 0-d one stays float32, an int64 tensor times
    2.5 is float32 (the default dtype), times a 0-d float64 tensor float64."""
    dim = zero = wrapped = None
    for v in operands:
        dtype = getattr(v, "dtype", None)
        if dtype is None:                       # a Python number (bool, int, float)
            dtype = np.dtype(np.bool_) if isinstance(v, (bool, np.bool_)) else \
                np.dtype(np.int64) if isinstance(v, (int, np.integer)) else default_float()
            wrapped = dtype if wrapped is None else promote_types(wrapped, dtype)
        elif v.ndim == 0:
            zero = dtype if zero is None else promote_types(zero, dtype)
        else:
            dim = dtype if dim is None else promote_types(dim, dtype)
    return _combine(dim, _combine(zero, wrapped))


def same_dtype(a, b):
    """Two operands of an elementwise op with their arrays in result_dtype (torch's rule);
    Python numbers as they are (weak: they take the arrays' dtype)."""
    da, db = getattr(a, "dtype", None), getattr(b, "dtype", None)
    if da is not None and db is not None:          # the common cases first, decided at once:
        if da == db:                               # two arrays of one dtype,
            return a, b
    elif da is not None or db is not None:         # or a number with NumPy-float data, which
        data, number = (da, b) if da is not None else (db, a)    # no number outranks
        if data.kind == "f" and isinstance(number, (int, float)):
            return a, b
    dtype = result_dtype(a, b)
    return tuple(v.astype(dtype, copy=False) if hasattr(v, "dtype") and v.dtype != dtype else v
                 for v in (a, b))


def is_half(dtype):
    """float16 or bfloat16: stored in 16 bits, computed in float32."""
    dtype = np.dtype(dtype)
    return dtype.itemsize == 2 and is_floating(dtype)


def from_foreign(a):
    """A PyTorch tensor as a NumPy array (a CPU tensor; bfloat16 through float32, which NumPy
    cannot take directly) or a CuPy array (a CUDA tensor, sharing its memory); anything else
    as it is. (torch.Tensor's class has __cuda_array_interface__, so is_gpu alone would take a
    CPU tensor for a device array.)"""
    torch = sys.modules.get("torch")         # (not imported: no torch tensor can exist)
    if torch is None or not isinstance(a, torch.Tensor):
        return a
    t = a.detach()
    if t.is_cuda:
        return cupy().from_dlpack(t)
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(bfloat16)
    return t.numpy()


def dim_index(d, n, name=None):
    """Axis d of an n-axis shape in [0, n) (negative counts from the end), or torch's
    IndexError."""
    if not -n <= d < n:
        raise IndexError(f"{name + ': ' if name else ''}dimension out of range (expected to be in "
                         f"range of [{-n}, {n - 1}], but got {d})")
    return int(d) % n


def out_of_range(name, idx, n, what, skip=None):
    """The entries of integer array `idx` outside [0, n) (`skip`: a value exempt, an ignore_index):
    on the host an IndexError naming the first (NumPy would wrap a negative index silently, as
    a GPU gather would); on a device, where reading them back would wait for the GPU, a boolean
    mask of them, which the op turns into NaN outputs -- the loss goes non-finite and the
    training loop's check says where -- as torch's CUDA kernels assert on the device. None when
    there is none to mark (the host's case)."""
    xp = xp_of(idx)
    bad = (idx < 0) | (idx >= n)
    if skip is not None:
        bad &= idx != skip
    if xp is not np:
        return bad
    if bad.any():
        first = idx[bad].flat[0]
        raise IndexError(f"{name}: {what} {int(first)} is out of range for {n} "
                         f"({int(bad.sum())} such)")
    return None


def accumulation_dtype(dtype):
    """The dtype sums, means, softmaxes and losses of `dtype` data are computed in: float32 for
    half-precision data (float16 and bfloat16, as torch accumulates), else the data's own dtype."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if is_half(dtype) else dtype


def channels_last_strides(shape, itemsize):
    """The byte strides of an (N, C, H, W) array stored as (N, H, W, C): PyTorch's channels_last
    memory format. Size-1 axes keep their own strides, so even C = 1 says which format it is."""
    N, C, H, W = shape
    return (H * W * C * itemsize, itemsize, W * C * itemsize, C * itemsize)


def is_channels_last(a):
    """True for a 4-d (N, C, H, W) array stored channels-last (see channels_last_strides)."""
    return a.ndim == 4 and tuple(a.strides) == channels_last_strides(a.shape, a.itemsize)


def to_channels_last(a):
    """A copy of 4-d `a` (N, C, H, W) stored channels-last, on a's device; `a` itself when it
    is already."""
    if is_channels_last(a):
        return a
    out = _empty_channels_last(a)
    out[...] = a
    return out


def empty_like(a, dtype=None, xp=None):
    """An uninitialised array shaped as `a`, of `dtype` (a's by default), laid out as torch's
    preserve_format lays out a copy of `a`: channels-last stays so (with C = 1 or H = W = 1 too:
    its exact strides, which NumPy's and CuPy's empty_like drop), a permutation of a dense
    layout (transposed) keeps its order of axes, anything else -- broadcast, strided slices --
    is C-ordered (order='K' would sort a broadcast's zero strides first). On a's device, or,
    given `xp`, that module's current device."""
    dtype = a.dtype if dtype is None else dtype
    if xp is None:
        xp = xp_of(a)
        with _on_device_of(a):
            return _empty_laid_out(xp, a, dtype)
    return _empty_laid_out(xp, a, dtype)


def _empty_laid_out(xp, a, dtype):
    if is_channels_last(a):
        N, C, H, W = a.shape
        return xp.empty((N, H, W, C), dtype=dtype).transpose(0, 3, 1, 2)
    order = dense_order(a)
    if order is None or a.flags.c_contiguous or order == tuple(range(a.ndim)):
        return xp.empty(a.shape, dtype=dtype)
    back = [0] * a.ndim
    for i, axis in enumerate(order):
        back[axis] = i
    return xp.empty(tuple(a.shape[i] for i in order), dtype=dtype).transpose(back)


def _empty_channels_last(a):
    """An uninitialised (N, C, H, W) array shaped as 4-d `a`, stored channels-last on a's device."""
    N, C, H, W = a.shape
    with _on_device_of(a):
        return xp_of(a).empty((N, H, W, C), dtype=a.dtype).transpose(0, 3, 1, 2)


def is_dense(a):
    """C-ordered or channels-last: every element of `a` in a.size consecutive items, so a kernel
    that treats it as a flat buffer (the multi-tensor ones) reaches each element once."""
    return a.flags.c_contiguous or is_channels_last(a)


def to_contiguous(a):
    """A C-ordered copy of `a` on its device, or `a` when it is C-ordered and not channels-last
    (a channels-last array with C = 1 or H = W = 1 counts as C-contiguous to NumPy and CuPy,
    but its strides still say channels-last)."""
    if a.flags.c_contiguous and not is_channels_last(a):
        return a
    with _on_device_of(a):
        return xp_of(a).array(a, order="C", copy=True)


def _on_device_of(a):
    return cupy().cuda.Device(a.device.id) if is_gpu(a) else contextlib.nullcontext()


def xp_of(a):
    return cupy() if is_gpu(a) else np


def xp_of_gpu(gpu):
    return cupy() if gpu else np


def device_of(a):
    return a.device.id if is_gpu(a) else "cpu"


def parse_device(device):
    """'cpu' | 'cuda' | 'cuda:1' | 1 | '1' -> 'cpu' or an int."""
    if device is None or device == "cpu":
        return "cpu"
    if isinstance(device, int):
        return device
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:"):
        text = text[5:]
    if text.isdigit():
        return int(text)
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or an int, got {device!r}")


def to_device(a, device):
    """Copy (if needed) array `a` to `device`."""
    device = parse_device(device)
    if device == "cpu":
        return _keeping_layout(a, lambda b: b.get()) if is_gpu(a) else a
    cp = cupy()
    if is_gpu(a) and a.device.id == device:
        return a
    try:
        with cp.cuda.Device(device):
            return _keeping_layout(a, cp.asarray)
    except cp.cuda.runtime.CUDARuntimeError as e:
        if _usable_devices(cp) > device:
            raise
        raise RuntimeError(f"device {device}: no such CUDA device here "
                           f"({str(e).splitlines()[0]}); use 'cpu' for the NumPy path") from None


def _keeping_layout(a, copy):
    """copy(a) -- a transfer, which CuPy makes C-ordered -- stored in a's order of axes, as
    torch's .to() keeps a tensor's layout: channels-last stays channels-last (even with C = 1,
    see channels_last_strides), a transposed array stays transposed; an array that is not a
    permutation of a dense one (broadcast, strided slices) comes C-ordered, as torch's
    preserve_format makes a tensor that is not dense and non-overlapping contiguous."""
    if not hasattr(a, "strides"):                 # (a list, a number: as CuPy takes them)
        return copy(a)
    if is_channels_last(a):
        return copy(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    order = dense_order(a)
    if a.flags.c_contiguous or order is None or order == tuple(range(a.ndim)):
        return copy(a)
    back = [0] * a.ndim
    for i, axis in enumerate(order):
        back[axis] = i
    return copy(a.transpose(order)).transpose(back)


def addable(a, shape, dtype):
    """Device array `a` (a leaf's .grad) can be handed as the out= of a GPU call that adds its
    result into it (beta = 1) as it is: `shape` and `dtype`, C-contiguous, 16-byte aligned --
    what cudnnlite's and cudnnlite.blas's out= must be. None is not."""
    return a is not None and is_gpu(a) and tuple(a.shape) == tuple(shape) and \
        a.dtype == dtype and a.flags.c_contiguous and a.data.ptr % 16 == 0


def dense_order(a):
    """a's axes, outermost in memory first, when a is a permutation of a dense array (C-ordered,
    channels-last, transposed: a.transpose(order) is C-contiguous), as a tuple; else None.
    Memoised on (shape, strides, itemsize): the vector kernels and the non-finite check ask it
    of every activation, every step."""
    key = (a.shape, a.strides, a.itemsize)
    order = _DENSE_ORDERS.get(key, False)
    if order is False:
        if len(_DENSE_ORDERS) >= 4096:
            _DENSE_ORDERS.clear()
        order = _DENSE_ORDERS[key] = _dense_order(*key)
    return order


_DENSE_ORDERS = {}


def _dense_order(shape, strides, itemsize):
    order = tuple(sorted(range(len(shape)), key=lambda i: -abs(strides[i])))
    if 0 in shape:
        return order
    inner = itemsize        # (told from the strides: a view made to ask costs CuPy ~2 us)
    for i in reversed(order):
        if shape[i] != 1 and strides[i] != inner:
            return None
        inner *= shape[i]
    return order


def flat_view(a):
    """a's elements as a 1-d view in memory order, when a is a permutation of a dense array;
    else None."""
    order = dense_order(a)
    return None if order is None else a.transpose(order).reshape(-1)


def copy_like(a, like):
    """A copy of array a's values stored as `like` is laid out (empty_like: a channels-last
    layout with C = 1 too, which copy(order='K') would lose)."""
    out = empty_like(like)
    out[...] = a
    return out


def sum_rounded_once(a, axis):
    """a summed over `axis` with a float32 accumulator for half data (float16 / bfloat16: one
    rounding at the end, where a half accumulator rounds at every addition), in a's dtype."""
    return a.sum(axis=axis, dtype=accumulation_dtype(a.dtype)).astype(a.dtype, copy=False)


def _usable_devices(cp):
    """How many CUDA devices the runtime answers for (0 when it cannot even count them)."""
    try:
        return cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError:
        return 0


def concatenate(arrays, axis=0):
    """numpy / cupy concatenate, safe inside CUDA-graph capture (two device arrays: one kernel,
    kernels.join2). CuPy joins more than 8 arrays
    with one kernel that reads a table of their addresses, copied from the host through a pinned
    staging buffer that a captured graph does not keep (CuPy may hand the buffer out again, and a
    replay would read whatever it then holds). While the current stream is capturing, such a
    join is made array by array into the result instead: one copy each, which a graph replays
    cheaply; otherwise this is numpy's / CuPy's own concatenate."""
    arrays = list(arrays)
    if _joinable_pair(arrays, axis):          # two device arrays: one kernel, not two copies
        from .kernels import join2
        return join2(arrays[0], arrays[1], axis)
    if not _capturing_many(arrays):
        return xp_of(arrays[0]).concatenate(arrays, axis=axis) if arrays else \
            np.concatenate(arrays, axis=axis)
    ndim = arrays[0].ndim
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ValueError(f"concatenate: axis {axis} is out of range for {ndim}-d arrays")
    axis %= ndim
    for a in arrays:
        if a.ndim != ndim or a.shape[:axis] + a.shape[axis + 1:] != \
                arrays[0].shape[:axis] + arrays[0].shape[axis + 1:]:
            raise ValueError(f"concatenate: shapes {arrays[0].shape} and {a.shape} differ off "
                             f"axis {axis}")
    cp = cupy()
    shape = list(arrays[0].shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = cp.empty(shape, dtype=cp.result_type(*arrays))
    start, before = 0, (slice(None),) * axis
    for a in arrays:
        out[before + (slice(start, start + a.shape[axis]),)] = a
        start += a.shape[axis]
    return out


def stack(arrays, axis=0):
    """numpy / cupy stack (a new axis `axis`), capture-safe as concatenate."""
    arrays = list(arrays)
    if len(arrays) == 2 and is_gpu(arrays[0]) and arrays[0].shape == arrays[1].shape and \
            -arrays[0].ndim - 1 <= axis <= arrays[0].ndim:
        axis %= arrays[0].ndim + 1
        return concatenate([cupy().expand_dims(a, axis) for a in arrays], axis)
    if not _capturing_many(arrays):
        return xp_of(arrays[0]).stack(arrays, axis=axis) if arrays else np.stack(arrays, axis)
    ndim = arrays[0].ndim + 1
    if not -ndim <= axis < ndim:
        raise ValueError(f"stack: axis {axis} is out of range for {ndim - 1}-d arrays")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"stack: arrays of shapes {sorted({a.shape for a in arrays})} differ")
    axis %= ndim
    return concatenate([cupy().expand_dims(a, axis) for a in arrays], axis)


def _joinable_pair(arrays, axis):
    """Two non-empty device arrays of one dtype and device whose shapes agree off `axis`
    (kernels.join2 joins them in one launch, where CuPy copies each in with its own)."""
    if len(arrays) != 2 or not all(is_gpu(a) for a in arrays):
        return False
    a, b = arrays
    if a.ndim != b.ndim or not -a.ndim <= axis < a.ndim or a.dtype != b.dtype or \
            a.device.id != b.device.id or not (a.size and b.size):
        return False
    axis %= a.ndim
    return a.shape[:axis] + a.shape[axis + 1:] == b.shape[:axis] + b.shape[axis + 1:]


def _capturing_many(arrays):
    """More than 8 device arrays to join while the current stream captures a CUDA graph."""
    return len(arrays) > 8 and is_gpu(arrays[0]) and \
        cupy().cuda.get_current_stream().is_capturing()


_TABLES = None                          # rows -> (device table, pinned buffer or None)
_INFLIGHT = collections.deque()         # (event, pinned buffer) of eager uploads maybe unfinished


def device_table(rows):
    """Integer rows (pointers, offsets: tuples of ints) as one device int64 array on the current
    device. Safe inside CUDA-graph capture, unlike cupy.asarray of host data: the copy comes from
    a pinned buffer this function owns -- kept until the copy is known done when eager, and for
    the life of a graph captured with it (whose memcpy node reads it at every replay:
    cudnnlite.capture_scope keeps it). Eager tables are made once per distinct table (the last
    64 kept); a table made while capturing lives in the graph's own memory pool, so it is kept
    by that graph only and never shared."""
    global _TABLES
    from cudnnlite._cache import LRU
    from cudnnlite.handle import keep_alive
    cp = cupy()
    if cp.cuda.get_current_stream().is_capturing():
        entry = _upload_table(rows)
    else:
        if _TABLES is None:
            _TABLES = LRU(64)
        entry = _TABLES.get((cp.cuda.runtime.getDevice(), tuple(rows)),
                            lambda: _upload_table(rows))
    keep_alive(entry)
    return entry[0]


def _upload_table(rows):
    cp = cupy()
    host = np.asarray(rows, np.int64).ravel()
    pinned = cp.cuda.alloc_pinned_memory(host.nbytes)
    np.frombuffer(pinned, np.int64, host.size)[:] = host
    table = cp.empty(host.size, np.int64)
    stream = cp.cuda.get_current_stream()
    # (the runtime's own cudaMemcpyAsync: CuPy's copy_from_host_async refuses a capturing
    # stream, though CUDA captures a copy from pinned memory as a memcpy node)
    cp.cuda.runtime.memcpyAsync(table.data.ptr, pinned.ptr, host.nbytes,
                                cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
    if stream.is_capturing():
        return table, pinned
    while _INFLIGHT and _INFLIGHT[0][0].done:
        _INFLIGHT.popleft()
    _INFLIGHT.append((stream.record(), pinned))
    return table, None

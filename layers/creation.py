"""Tensor factories, as torch's: zeros / ones / full / empty, rand / randn / randint, each with
its *_like, and arange, linspace, eye.

    L.randn(64, 100, 1, 1, device=0)       # DCGAN's noise, drawn on the GPU
    L.zeros_like(x)                        # x's shape, dtype, device and memory format
    L.arange(5)                            # int64, as torch: [0, 1, 2, 3, 4]

Sizes are ints, or one sequence of them. The dtype, where none is given, is torch's: the default
dtype (float32 unless L.set_default_dtype), except full (its fill value's: int64, bool or the
default), arange (int64 when start, end and step are all ints) and randint (int64). The device is
'cpu' (the default), an int, 'cuda' or 'cuda:N'. Random draws come from layers.random, seeded by
L.manual_seed: the host generator on the CPU, the device's counter-based generator on a GPU (a
captured CUDA graph draws new numbers on each replay). A seed gives the same numbers on its device
every run; they are not torch's (another generator)."""
from operator import index as _index

import numpy as np

from . import random
from .backend import (cupy, default_float, fit_value, is_floating, np_dtype, number_dtype,
                      parse_device, xp_of)
from .backend import empty_like as backend_empty_like
from .tensor import Tensor

__all__ = ["zeros", "ones", "full", "empty", "rand", "randn", "randint", "randperm", "zeros_like",
           "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like",
           "arange", "linspace", "eye"]


def _size(fn, size):
    """torch's size arguments: ints, or one tuple / list of them (a Tensor's .shape too); none
    at all is refused, as torch's (a 0-d tensor's size is ())."""
    if not size:
        raise TypeError(f'{fn}() missing 1 required positional arguments: "size" (as torch; '
                        f'() for a 0-d tensor)')
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        out = tuple(_index(n) for n in size)
    except TypeError:
        raise TypeError(f"{fn}(): size must be ints or one sequence of ints, got "
                        f"{size!r}") from None
    if any(n < 0 for n in out):
        raise ValueError(f"{fn}(): negative dimension in size {out}")
    return out


def _dtype(fn, dtype, default=None):
    if dtype is None:
        return default_float() if default is None else np.dtype(default)
    try:
        return np_dtype(dtype)
    except TypeError:
        raise TypeError(f"{fn}(): dtype must name a NumPy dtype (np.float32, 'bfloat16', "
                        f"'int64', ...), got {dtype!r}") from None


def _floating(fn, dtype):
    if not is_floating(dtype):
        raise TypeError(f"{fn}(): dtype {dtype.name} is not floating: {fn} draws floating "
                        f"values (randint draws integers)")
    return dtype


def _made(a, requires_grad):
    t = Tensor(a)
    if requires_grad:
        t.requires_grad = True          # (refused for an integer dtype, as torch)
    return t


def _on(device, make):
    """make(xp) on `device`: NumPy for 'cpu', else CuPy under that device."""
    device = parse_device(device)
    if device == "cpu":
        return make(np)
    cp = cupy()
    with cp.cuda.Device(device):
        return make(cp)


# ---- filled ------------------------------------------------------------------------------------

def full(*args, fill_value=None, dtype=None, device=None, requires_grad=False):
    """A tensor of `size` holding fill_value: full(size, fill_value) as torch (also
    full(size, fill_value=v))."""
    if fill_value is None:
        if len(args) != 2:
            raise TypeError("full(): takes (size, fill_value)")
        args, fill_value = args[:1], args[1]
        if not isinstance(args[0], (tuple, list)):
            raise TypeError(f"full(): size must be a tuple of ints, got {args[0]!r} (as torch)")
    size = _size("full", args)
    dt = _dtype("full", dtype, number_dtype(fill_value))
    fill_value = fit_value("full()", fill_value, dt)   # (torch's rule: -1.0 into uint8 refused)
    return _made(_on(device, lambda xp: xp.full(size, fill_value, dtype=dt)), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    size, dt = _size("zeros", size), _dtype("zeros", dtype)
    return _made(_on(device, lambda xp: xp.zeros(size, dtype=dt)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    size, dt = _size("ones", size), _dtype("ones", dtype)
    return _made(_on(device, lambda xp: xp.ones(size, dtype=dt)), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """Uninitialised memory, as torch.empty: write it before reading it."""
    size, dt = _size("empty", size), _dtype("empty", dtype)
    return _made(_on(device, lambda xp: xp.empty(size, dtype=dt)), requires_grad)


# ---- random ------------------------------------------------------------------------------------

# a uniform draw for a half dtype keeps this many bits (its significand's), so that rounding
# it to the dtype is exact and never gives 1.0
_UNIFORM_BITS = {"float16": 11, "bfloat16": 8}


def _host_rng(generator, fn, device="cpu"):
    """The NumPy Generator host draws come from: a host L.Generator's, else manual_seed's. A
    GPU tensor's draws refuse a host generator, and a host draw a GPU one, as torch's."""
    if generator is None:
        return random.host_generator()
    if isinstance(generator, random.Generator) and generator.device != "cpu" and \
            parse_device(device) != "cpu":
        raise RuntimeError(f"{fn}(): a GPU L.Generator is not taken here ({fn} draws on the "
                           f"host, then copies to the device); use a host L.Generator")
    rng = random.host_rng(generator, f"{fn}()", numpy_ok=False)   # (a GPU one: torch's words)
    if parse_device(device) != "cpu":
        raise RuntimeError(f"{fn}(): Expected a 'cuda' device type for generator but found "
                           f"'cpu' (an L.Generator draws on the host)")
    return rng


def _draw(size, dtype, device, kind, generator=None, fn="rand"):
    """`kind` ('uniform' on [0, 1), 'normal') values of `size` as `dtype` on `device`, from
    `generator` (an L.Generator of that device) or manual_seed's generators. The device generator
    draws float32 (24 random bits a uniform): float64 results are those float32 values. A
    uniform for a half dtype is cut to the dtype's bits before it is converted (rounded, 0.9999
    would become 1.0, outside [0, 1))."""
    on_device = isinstance(generator, random.Generator) and generator.device != "cpu"
    if on_device:              # (a GPU L.Generator: refused unless the draw is on its device)
        own = generator.device_generator(parse_device(device), f"{fn}()")
    else:
        host = _host_rng(generator, fn, device)

    def make(xp):
        if xp is np:
            gen = host
            if kind == "normal":
                return gen.standard_normal(size).astype(dtype)
            a = gen.random(size, dtype=np.float64 if dtype == np.float64 else np.float32)
        else:
            gen = own if on_device else random.device_generator()
            a = gen.uniform(size) if kind == "uniform" else gen.normal(size)
        bits = _UNIFORM_BITS.get(dtype.name) if kind == "uniform" else None
        if bits is not None:
            a = xp.floor(a * 2.0 ** bits) / 2.0 ** bits
        return a if a.dtype == dtype else a.astype(dtype)
    return _on(device, make)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1)."""
    size, dt = _size("rand", size), _floating("rand", _dtype("rand", dtype))
    return _made(_draw(size, dt, device, "uniform", generator, "rand"), requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal."""
    size, dt = _size("randn", size), _floating("randn", _dtype("randn", dtype))
    return _made(_draw(size, dt, device, "normal", generator, "randn"), requires_grad)


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Integers uniform on [low, high): randint(high, size) or randint(low, high, size), as
    torch (size may also be given by keyword). On a GPU they are drawn by the host generator
    and copied (one transfer: not for use inside a captured step, where CUDA refuses it)."""
    if size is None:
        if not args:
            raise TypeError("randint(): takes (high, size) or (low, high, size)")
        args, size = args[:-1], args[-1]
        if not isinstance(size, (tuple, list)):
            raise TypeError(f"randint(): argument 'size' must be a tuple of ints, not "
                            f"{type(size).__name__} (as torch)")
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError("randint(): takes (high, size) or (low, high, size)")
    low, high = _index(low), _index(high)
    if low >= high:
        raise ValueError(f"randint(): low >= high ({low} >= {high}): the range [low, high) is "
                         f"empty")
    size = _size("randint", (size,))
    dt = _dtype("randint", dtype, np.int64)
    if dt.kind in "iu" and not (np.iinfo(dt).min <= low and high - 1 <= np.iinfo(dt).max):
        raise ValueError(f"randint(): [{low}, {high}) does not fit in {dt.name} "
                         f"[{np.iinfo(dt).min}, {np.iinfo(dt).max}]")
    a = _host_rng(generator, "randint", device).integers(low, high, size,
                                                        dtype=np.int64).astype(dt)
    device = parse_device(device)
    return _made(a if device == "cpu" else _on(device, lambda cp: cp.asarray(a)),
                 requires_grad)


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """torch.multinomial: for each row of non-negative weights `input` (1-d, or 2-d: a row per
    distribution), num_samples category indices (int64), drawn with or without replacement
    with probabilities proportional to the weights, on input's device and from its generator
    (manual_seed's), not torch's numbers. With replacement: the inverse of each row's
    cumulative distribution at uniform draws (a category of weight 0 never drawn); without:
    the categories in increasing order of exponential race times E / w (E = -log(1 - u) > 0,
    compared as log E - log w: no overflow for tiny weights), which is sequential draws without
    replacement (Efraimidis and Spirakis), categories of weight 0 last. The weights are checked
    as torch checks them (on a GPU: one read back)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): input must be a Tensor, got {type(input).__name__}")
    if not is_floating(input.dtype):
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{input.dtype}")
    if input.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got shape {input.shape}")
    num_samples = _index(num_samples)
    n = input.shape[-1]
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > n:
        raise RuntimeError(f"cannot sample n_sample > prob_dist.size(-1) samples without "
                           f"replacement (n_sample {num_samples}, {n} categories)")
    if n == 0:
        raise RuntimeError("multinomial(): input has no categories (its last size is 0)")
    xp = xp_of(input.data)
    w = input.data.reshape(-1, n).astype(np.float64)
    bad_value = ~xp.isfinite(w).all() | (w < 0).any()
    bad_sum = (w.max(axis=1) <= 0).any()      # (the sum is 0 where the largest is: no negatives)
    if bool(bad_value):                               # (on a GPU: the read back)
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bool(bad_sum):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    w = w / w.max(axis=1, keepdims=True)     # (each row's largest 1: its sums cannot overflow)
    rows = w.shape[0]
    device = "cpu" if xp is np else input.data.device.id
    u = _draw((rows, num_samples if replacement else n), np.dtype(np.float64), device,
              "uniform", generator, "multinomial")
    if replacement:
        cdf = xp.cumsum(w, axis=1)
        cdf = cdf / cdf[:, -1:]          # (1.0 exactly from the last weight > 0 on: u < 1 stops
        # there); each row moved 2 apart, so that one search serves them all
        offset = 2 * xp.arange(rows, dtype=np.float64)[:, None]
        at = xp.searchsorted((cdf + offset).ravel(), (u + offset).ravel(), side="right")
        out = at.reshape(rows, num_samples) - n * xp.arange(rows)[:, None]
    else:
        # u moved half a step of its draw (24 random bits on a GPU, 53 on the host) off 0, so
        # that no race time is 0: a draw of exactly 0 would put its category first whatever
        # its weight
        u = u + (2.0 ** -54 if xp is np else 2.0 ** -25)
        with np.errstate(divide="ignore"):             # (log 0: NumPy's warning; torch's none)
            keys = xp.log(-xp.log1p(-u)) - xp.log(w)       # (weight 0: inf, after every other)
        out = xp.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    out = out.astype(np.int64)
    return Tensor(out if input.ndim == 2 else out[0])


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0 .. n-1 (int64 unless `dtype`), as torch's; drawn by the host
    generator and copied to a GPU (one transfer)."""
    n = _index(n)
    if n < 0:
        raise RuntimeError(f"randperm(): n must be non-negative, got {n}")
    dt = _dtype("randperm", dtype, np.int64)
    if dt.kind in "iu" and n - 1 > np.iinfo(dt).max:
        raise RuntimeError(f"randperm(): n = {n} is too large for dtype {dt.name}")
    a = _host_rng(generator, "randperm", device).permutation(n).astype(dt)
    device = parse_device(device)
    return _made(a if device == "cpu" else _on(device, lambda cp: cp.asarray(a)),
                 requires_grad)


# ---- like another tensor -----------------------------------------------------------------------

def _like(fn, t, dtype, device):
    """(shape, dtype, device, maker of an empty array laid out as t is) of Tensor / array t."""
    a = t.data if isinstance(t, Tensor) else t
    dt = np.dtype(a.dtype) if dtype is None else _dtype(fn, dtype)
    here = "cpu" if xp_of(a) is np else a.device.id
    device = here if device is None else parse_device(device)

    def empty(xp):                       # (torch's preserve_format: backend.empty_like)
        return backend_empty_like(a, dt, xp)
    return a.shape, dt, device, empty


def empty_like(t, dtype=None, device=None, requires_grad=False):
    _, _, device, empty = _like("empty_like", t, dtype, device)
    return _made(_on(device, empty), requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    _, dt, device, empty = _like("full_like", t, dtype, device)
    fill_value = fit_value("full_like()", fill_value, dt)

    def make(xp):
        a = empty(xp)
        a.fill(fill_value)
        return a
    return _made(_on(device, make), requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return full_like(t, 0, dtype, device, requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return full_like(t, 1, dtype, device, requires_grad)


def _random_like(fn, t, dtype, device, requires_grad, draw):
    shape, dt, device, empty = _like(fn, t, dtype, device)

    def make(xp):
        a = empty(xp)
        a[...] = draw(shape, dt, device)
        return a
    return _made(_on(device, make), requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return _random_like("rand_like", t, dtype, device, requires_grad,
                        lambda shape, dt, dev: rand(shape, dtype=dt, device=dev).data)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return _random_like("randn_like", t, dtype, device, requires_grad,
                        lambda shape, dt, dev: randn(shape, dtype=dt, device=dev).data)


def randint_like(t, low=0, high=None, dtype=None, device=None, requires_grad=False):
    """randint_like(t, high) or randint_like(t, low, high), as torch; t's dtype by default."""
    if high is None:
        low, high = 0, low
    return _random_like("randint_like", t, dtype, device, requires_grad,
                        lambda shape, dt, dev: randint(low, high, shape, dtype=dt,
                                                       device=dev).data)


# ---- ranges ------------------------------------------------------------------------------------

def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """[start, end) by step, as torch: arange(end) or arange(start, end, step); int64 when all
    three are ints (Python bools too; NumPy's are not, as torch), else the default dtype.
    Floating values are start + i * step computed in float64, then rounded once to the dtype.
    For an integer dtype torch first truncates start and step to integers (and for int64, end
    too, so that the count is the integers' count and a step that truncates to 0 is refused)."""
    if end is None:
        start, end = 0, start
    ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dt = _dtype("arange", dtype, np.int64 if ints else None)
    if dt == np.bool_:
        raise NotImplementedError('"arange" is not implemented for bool, as torch')
    if not (np.isfinite(float(start)) and np.isfinite(float(end))):
        raise RuntimeError(f"arange(): unsupported range: {start} -> {end}")
    if step == 0:
        raise ValueError("arange(): step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(f"arange(): [{start}, {end}) and step {step}: the bounds are "
                         f"inconsistent with the step's sign (as torch)")
    n = max(0, int(np.ceil((float(end) - float(start)) / float(step))))
    if dt.kind in "iu":
        start, step = _truncated(start), _truncated(step)
        if dt == np.int64:
            if step == 0:
                raise ValueError(f"arange(): step must be nonzero (step {step} truncates to 0 "
                                 f"for int64, as torch)")
            sign = 1 if step > 0 else -1
            n = max(0, (_truncated(end) - start + step - sign) // step)
        a = (start + np.arange(n, dtype=np.int64) * step).astype(dt)    # (wraps, as torch)
    elif ints:
        a = (start + np.arange(n, dtype=np.int64) * step).astype(dt)
    else:
        a = (float(start) + np.arange(n, dtype=np.int64) * float(step)).astype(dt)
    device = parse_device(device)
    return _made(a if device == "cpu" else _on(device, lambda cp: cp.asarray(a)),
                 requires_grad)


def _truncated(v):
    """v as an int64 towards 0, as torch converts an arange bound for an integer dtype."""
    out = int(v)
    if not -2 ** 63 <= out < 2 ** 63:
        raise RuntimeError(f"arange(): value {v} cannot be converted to type int64_t without "
                           f"overflow")
    return out


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """`steps` values from start to end inclusive, evenly spaced, as torch: computed in float64
    (the first half from start, the second from end, as torch's kernel does) and rounded once."""
    steps = _index(steps)
    if steps < 0:
        raise ValueError(f"linspace(): number of steps must be non-negative, got {steps}")
    dt = _dtype("linspace", dtype)
    start, end = float(start), float(end)
    i = np.arange(steps, dtype=np.float64)
    if steps == 1:
        a = np.full(1, start)
    else:
        delta = (end - start) / (steps - 1)
        a = np.where(i < steps // 2, start + i * delta, end - (steps - 1 - i) * delta)
    a = a.astype(dt)
    device = parse_device(device)
    return _made(a if device == "cpu" else _on(device, lambda cp: cp.asarray(a)),
                 requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """The n x m identity (m = n by default)."""
    n = _index(n)
    m = n if m is None else _index(m)
    if n < 0 or m < 0:
        raise ValueError(f"eye(): n and m must be non-negative, got {n} and {m}")
    dt = _dtype("eye", dtype)
    return _made(_on(device, lambda xp: xp.eye(n, m, dtype=dt)), requires_grad)

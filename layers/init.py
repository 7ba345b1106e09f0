"""Initialisers, in place, with PyTorch's formulas and defaults (torch.nn.init). Values are drawn
on the host from layers.random's generator, then copied to the tensor's device."""
import math
import warnings

import numpy as np

from .backend import is_floating, to_device
from .changes import mark_changed


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """torch's recommended gain for a nonlinearity; leaky_relu's param (its negative slope) must
    be a Python int or float (not a bool; NumPy's float64 is a float, its float32 is not), as
    torch checks."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        number = isinstance(param, int) and not isinstance(param, bool) or \
            isinstance(param, float)                     # (np.float64 is a float; np.float32 not)
        if param is not None and not number:
            raise ValueError(f"negative_slope {param} not a valid number")
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def calculate_fan_in_and_fan_out(shape):
    """fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field (as torch; for a
    ConvTranspose weight (Cin, Cout/g, R, S) that makes fan_in Cout/g * R * S)."""
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need at least 2 dims, got shape {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _fill(t, values, by):
    t.data[...] = to_device(values.astype(t.dtype), t.device)
    mark_changed(t, by)
    return t


def _floating(t, fn, empty_ok=False):
    """Refuse a tensor that cannot hold random draws (integers, bools), as torch does: its
    values would be truncated draws. empty_ok: a zero-element one is taken (torch's normal_
    runs no kernel for it; its uniform_ checks first)."""
    if not is_floating(t.dtype) and not (empty_ok and 0 in t.shape):
        raise NotImplementedError(f"init.{fn}: not implemented for dtype {np.dtype(t.dtype)}; "
                                  f"it draws floating values (as torch)")


def _rng(generator, fn):
    """The NumPy Generator the draws come from (layers.random.host_rng)."""
    from .random import host_rng
    return host_rng(generator, f"init.{fn}")


def uniform_(t, a=0.0, b=1.0, generator=None):
    _floating(t, "uniform_")
    if not (math.isfinite(a) and math.isfinite(b)):
        raise RuntimeError(f"init.uniform_: bounds must be finite, got from={a}, to={b}")
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} "
                           f"> to={b}")
    return _fill(t, _rng(generator, "uniform_").uniform(a, b, t.shape), "init.uniform_")


def normal_(t, mean=0.0, std=1.0, generator=None):
    _floating(t, "normal_", empty_ok=True)
    if not std >= 0:                                     # (NaN too)
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _fill(t, _rng(generator, "normal_").normal(mean, std, t.shape), "init.normal_")


def trunc_normal_(t, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal(mean, std) truncated to [a, b], drawn exactly as torch's by rejection: normal draws
    outside [a, b] drawn again where most fall inside (probability > 0.3), else uniform draws on
    [a, b] kept with probability pdf(x) / pdf's peak on [a, b] (a narrow or far range). Warns,
    as torch, when mean is more than 2 std from [a, b]."""
    _floating(t, "trunc_normal_")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    rng, n = _rng(generator, "trunc_normal_"), t.size

    def cdf(x):
        return (1.0 + math.erf((x - mean) / std / math.sqrt(2.0))) / 2.0
    if cdf(b) - cdf(a) > 0.3:
        def draw(k):
            x = rng.normal(mean, std, k)
            return x, (a <= x) & (x <= b)
    else:
        mode = max(a, min(mean, b))
        log_peak = -0.5 * ((mode - mean) / std) ** 2

        def draw(k):
            x = rng.uniform(a, b, k)
            return x, np.log(rng.random(k)) <= -0.5 * ((x - mean) / std) ** 2 - log_peak
    out, kept = draw(n)
    todo = np.flatnonzero(~kept)
    while todo.size:                       # (only the rejected are drawn again)
        x, kept = draw(todo.size)
        out[todo[kept]] = x[kept]
        todo = todo[~kept]
    return _fill(t, out.reshape(t.shape), "init.trunc_normal_")


def eye_(t):
    """The identity in a 2-d tensor (ones on the diagonal of any rectangle), as torch's."""
    if t.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(t, np.eye(*t.shape), "init.eye_")


def dirac_(t, groups=1):
    """A 3-, 4- or 5-d convolution weight that passes its input through (each group's output
    channel d takes input channel d at the kernel's centre), as torch's."""
    if t.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if t.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = t.shape[0] // groups
    w = np.zeros(t.shape)
    centre = tuple(k // 2 for k in t.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, t.shape[1])):
            w[(g * per_group + d, d) + centre] = 1
    return _fill(t, w, "init.dirac_")


def sparse_(t, sparsity, std=0.01, generator=None):
    """A 2-d tensor of Normal(0, std) draws with ceil(sparsity * rows) of each column's entries
    (at random rows) zero, as torch's."""
    if t.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = t.shape
    rng = _rng(generator, "sparse_")
    w = rng.normal(0.0, std, (rows, cols))
    zeros = math.ceil(sparsity * rows)
    for c in range(cols):
        w[rng.permutation(rows)[:zeros], c] = 0
    return _fill(t, w, "init.sparse_")


def constant_(t, value):
    t.data[...] = value
    mark_changed(t, "init.constant_")
    return t


def zeros_(t):
    return constant_(t, 0)


def ones_(t):
    return constant_(t, 1)


def xavier_uniform_(t, gain=1.0, generator=None):
    _floating(t, "xavier_uniform_")
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a, generator)


def xavier_normal_(t, gain=1.0, generator=None):
    _floating(t, "xavier_normal_", empty_ok=True)
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def orthogonal_(t, gain=1.0, generator=None):
    """torch's: the rows (or, for a wide tensor, the columns) of t flattened to 2-d orthonormal,
    times gain -- the Q of a normal matrix's QR, its signs fixed by R's diagonal (so Q is drawn
    uniformly, as torch's)."""
    if t.ndim < 2:
        raise ValueError(f"orthogonal_: only tensors with 2 or more dimensions are supported, "
                         f"got shape {tuple(t.shape)}")
    if t.size == 0:
        return t
    _floating(t, "orthogonal_")
    rows = t.shape[0]
    cols = t.size // rows
    a = _rng(generator, "orthogonal_").standard_normal((rows, cols))
    if rows < cols:
        a = a.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, gain * q.reshape(t.shape), "init.orthogonal_")


def _kaiming_std(shape, a, mode, nonlinearity):
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    mode = mode.lower()                                  # ('FAN_OUT' taken, as torch)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out'] "
                         f"(torch's message)")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def _no_elements(t):
    """torch's kaiming_* return a zero-element tensor as it is, with a warning, before any
    check (of mode, or dtype)."""
    if 0 in t.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if _no_elements(t):
        return t
    _floating(t, "kaiming_uniform_")
    bound = math.sqrt(3.0) * _kaiming_std(t.shape, a, mode, nonlinearity)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if _no_elements(t):
        return t
    _floating(t, "kaiming_normal_")
    return normal_(t, 0.0, _kaiming_std(t.shape, a, mode, nonlinearity), generator)


def default_weight_and_bias_(weight, bias):
    """What torch.nn.Linear / Conv*d.reset_parameters do: kaiming_uniform_(a=sqrt(5)) for the
    weight (a uniform bound of 1/sqrt(fan_in)), and the same bound for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight.shape)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)

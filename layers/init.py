"""Initialisers, in place, with PyTorch's formulas and defaults (torch.nn.init). Values are drawn
on the host from layers.random's generator, then copied to the tensor's device."""
import math
import warnings

import numpy as np

from .backend import is_floating, to_device
from .random import host_generator
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


def uniform_(t, a=0.0, b=1.0):
    _floating(t, "uniform_")
    if not (math.isfinite(a) and math.isfinite(b)):
        raise RuntimeError(f"init.uniform_: bounds must be finite, got from={a}, to={b}")
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} "
                           f"> to={b}")
    return _fill(t, host_generator().uniform(a, b, t.shape), "init.uniform_")


def normal_(t, mean=0.0, std=1.0):
    _floating(t, "normal_", empty_ok=True)
    if not std >= 0:                                     # (NaN too)
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _fill(t, host_generator().normal(mean, std, t.shape), "init.normal_")


def constant_(t, value):
    t.data[...] = value
    mark_changed(t, "init.constant_")
    return t


def zeros_(t):
    return constant_(t, 0)


def ones_(t):
    return constant_(t, 1)


def xavier_uniform_(t, gain=1.0):
    _floating(t, "xavier_uniform_")
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)


def xavier_normal_(t, gain=1.0):
    _floating(t, "xavier_normal_", empty_ok=True)
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def orthogonal_(t, gain=1.0):
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
    a = host_generator().standard_normal((rows, cols))
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


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    if _no_elements(t):
        return t
    _floating(t, "kaiming_uniform_")
    bound = math.sqrt(3.0) * _kaiming_std(t.shape, a, mode, nonlinearity)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    if _no_elements(t):
        return t
    _floating(t, "kaiming_normal_")
    return normal_(t, 0.0, _kaiming_std(t.shape, a, mode, nonlinearity))


def default_weight_and_bias_(weight, bias):
    """What torch.nn.Linear / Conv*d.reset_parameters do: kaiming_uniform_(a=sqrt(5)) for the
    weight (a uniform bound of 1/sqrt(fan_in)), and the same bound for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight.shape)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)

"""Initialisers, in place, with PyTorch's formulas and defaults (torch.nn.init). Values are drawn
on the host from layers.random's generator, then copied to the tensor's device."""
import math

import numpy as np

from .backend import to_device
from .random import host_generator
from .changes import mark_changed


def calculate_gain(nonlinearity, param=None):
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv_transpose2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
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


def uniform_(t, a=0.0, b=1.0):
    return _fill(t, host_generator().uniform(a, b, t.shape), "init.uniform_")


def normal_(t, mean=0.0, std=1.0):
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
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)


def xavier_normal_(t, gain=1.0):
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
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out "
                         f"(torch's message)")
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:                 # (a zero-element tensor: nothing to draw, as torch warns)
        return 0.0
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(t.shape, a, mode, nonlinearity)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    return normal_(t, 0.0, _kaiming_std(t.shape, a, mode, nonlinearity))


def default_weight_and_bias_(weight, bias):
    """What torch.nn.Linear / Conv*d.reset_parameters do: kaiming_uniform_(a=sqrt(5)) for the
    weight (a uniform bound of 1/sqrt(fan_in)), and the same bound for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight.shape)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)

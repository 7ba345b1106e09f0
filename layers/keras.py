"""Keras-layout entry points: NHWC inputs and outputs, Keras kernel layouts, Keras padding rules
(including 'same''s asymmetric split), on the same ops as everything else.

    conv2d            kernel (R, S, Cin, Cout)  -- keras.layers.Conv2D
    conv2d_transpose  kernel (R, S, Cout, Cin)  -- keras.layers.Conv2DTranspose

Both become cuDNN NHWC problems: Conv2D's kernel is the KRSC filter (Cout, R, S, Cin); the
transposed conv's kernel is the KRSC filter (Cin, R, S, Cout) of the convolution whose
backward-data it is.
"""
from . import functional as F
from .functional import pair as _pair
from .ops import conv as _conv
from .tensor import Tensor


def _as_tensor(a):
    return a if isinstance(a, Tensor) or a is None else Tensor(a)


def _same_padding(size, k, stride, dilation):
    """TensorFlow's SAME: out = ceil(size / stride), the padding split with the extra at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def conv2d(x, kernel, bias=None, strides=1, padding="valid", dilation_rate=1):
    """keras.layers.Conv2D's computation: x (N, H, W, Cin) -> (N, P, Q, Cout)."""
    x, kernel, bias = _as_tensor(x), _as_tensor(kernel), _as_tensor(bias)
    strides, dilation = _pair(strides), _pair(dilation_rate)
    if padding not in ("valid", "same"):
        raise ValueError(f"conv2d: padding must be 'valid' or 'same', got {padding!r}")
    if x.ndim != 4 or kernel.ndim != 4 or x.shape[3] != kernel.shape[2]:
        raise ValueError(f"conv2d: x (N, H, W, Cin) {x.shape} and kernel (R, S, Cin, Cout) "
                         f"{kernel.shape} do not match")
    W = F.transpose(kernel, 3, 0, 1, 2)                       # (Cout, R, S, Cin): KRSC
    pads = [(0, 0), (0, 0)] if padding == "valid" else [
        _same_padding(x.shape[1 + i], kernel.shape[i], strides[i], dilation[i]) for i in range(2)]
    if all(before == after for before, after in pads):
        return F.conv2d(x, W, bias, strides, [p[0] for p in pads], dilation, layout="NHWC")
    x = F.pad(x, (0, 0, pads[1][0], pads[1][1], pads[0][0], pads[0][1]))   # W pair, then H
    return F.conv2d(x, W, bias, strides, 0, dilation, layout="NHWC")


def deconv_output_length(size, k, padding, output_padding, stride, dilation):
    """Keras' output length of Conv2DTranspose along one dim."""
    k = k + (k - 1) * (dilation - 1)
    if output_padding is None:
        return size * stride + max(k - stride, 0) if padding == "valid" else size * stride
    pad = k // 2 if padding == "same" else 0
    return (size - 1) * stride + k - 2 * pad + output_padding


def conv2d_transpose(x, kernel, bias=None, strides=1, padding="valid", output_padding=None,
                     dilation_rate=1):
    """keras.layers.Conv2DTranspose's computation: x (N, H, W, Cin) -> (N, H', W', Cout)."""
    x, kernel, bias = _as_tensor(x), _as_tensor(kernel), _as_tensor(bias)
    strides, dilation = _pair(strides), _pair(dilation_rate)
    ops = [None, None] if output_padding is None else list(_pair(output_padding))
    if padding not in ("valid", "same"):
        raise ValueError(f"conv2d_transpose: padding must be 'valid' or 'same', got {padding!r}")
    if x.ndim != 4 or kernel.ndim != 4 or x.shape[3] != kernel.shape[3]:
        raise ValueError(f"conv2d_transpose: x (N, H, W, Cin) {x.shape} and kernel "
                         f"(R, S, Cout, Cin) {kernel.shape} do not match")
    for i in range(2):
        if ops[i] is not None and ops[i] >= strides[i]:
            raise ValueError(f"conv2d_transpose: output_padding {tuple(ops)} must be smaller "
                             f"than strides {strides}")
    size, begin = [], []
    for i in range(2):
        n, k, s, d = x.shape[1 + i], kernel.shape[i], strides[i], dilation[i]
        out = deconv_output_length(n, k, padding, ops[i], s, d)
        size.append(out)
        # TensorFlow's conv2d_backprop_input: SAME pads the forward conv out -> n, extra at the end
        total = max((n - 1) * s + (k - 1) * d + 1 - out, 0) if padding == "same" else 0
        begin.append(total // 2)
    W = F.transpose(kernel, 3, 0, 1, 2)                       # (Cin, R, S, Cout): KRSC
    return _conv.ConvTranspose2d.apply(x, W, bias, stride=strides, dilation=dilation, groups=1,
                                       begin=tuple(begin), size=tuple(size), layout="NHWC")

"""The user-facing spelling of every op (torch.nn.functional-like). Argument checks that both
paths share live here, so a misuse gets the same clear error on the CPU and the GPU."""
import builtins
import functools
import itertools
import math
import operator
import warnings

import numpy as np

from .ops import attention as _att
from .ops import conv as _conv
from .ops import elementwise as _ew
from .ops import linalg as _la
from .ops import loss as _loss
from .ops import norm as _norm
from .ops import reduce as _red
from .ops import shape as _sh
from .backend import (accumulation_dtype, cast_integer, cupy, default_float, device_of,
                      dim_index, fit_integers, fit_value, is_channels_last, is_floating, is_gpu,
                      is_half, limits, number_dtype, out_of_range, np_dtype, parse_device,
                      promote_types, result_dtype, same_dtype, to_device, xp_of)
from .changes import mark_changed
from .tensor import Tensor, is_grad_enabled, no_grad


def single(name, v):
    """An int or a sequence of one int (torch's 1-d spellings: stride=(2,)) as an int."""
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise ValueError(f"{name}: expected an int or one int in a sequence, got {v!r}")
        v = v[0]
    return int(operator.index(v))


def pair(v):
    """An int or a pair of ints as a tuple of two ints (kernel sizes, strides, paddings)."""
    if isinstance(v, str):
        raise TypeError(f"expected an int or a pair of ints, got {v!r}")
    return (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)


def _check_float(name, *tensors):
    dtypes = {t.dtype for t in tensors if isinstance(t, Tensor)}
    if len(dtypes) > 1:
        raise TypeError(f"{name}: inputs must share one floating dtype, got "
                        + ", ".join(f"{t.dtype} (shape {t.shape})" for t in tensors
                                    if isinstance(t, Tensor)))


# ---- arithmetic -------------------------------------------------------------------------------

def _operand(a, like=None, ints=None):
    """Tensors pass through; Python numbers stay constants; NumPy scalars become Python numbers
    and other arrays constant Tensors. A floating constant takes the floating dtype of the Tensor
    it meets (`like`), as torch's scalars do: a float64 constant must not turn a float32 graph --
    and its gradients -- into float64. It also takes that Tensor's device (a NumPy constant
    meeting a GPU tensor is copied there once; two Tensors on different devices stay an error)."""
    if isinstance(a, np.generic) or (isinstance(a, np.ndarray) and a.ndim == 0):
        a = a.item()           # (np.float64 is a float too, but NumPy lets it promote)
    if type(a) is int and ints is not None and like is not None and like.dtype.kind in "iu":
        # (torch's two rules for a Python int meeting an integer tensor: arithmetic and
        # comparisons cast it, wrapping; a value stored -- clamp, x[i] = v -- is checked)
        if ints == "cast":
            return cast_integer(a, like.dtype)
        return int(fit_integers(ints, a, like.dtype))
    if isinstance(a, (Tensor, int, float)):
        return a
    a = Tensor(a)
    if like is None:
        return a
    data = a.data
    if is_floating(a.dtype) and is_floating(like.dtype) and a.dtype != like.dtype:
        data = data.astype(like.dtype)
    if device_of(data) != device_of(like.data):
        data = to_device(data, device_of(like.data))
    return a if data is a.data else Tensor(data)


def _operands(a, b, ints=None):
    return (_operand(a, b if isinstance(b, Tensor) else None, ints),
            _operand(b, a if isinstance(a, Tensor) else None, ints))


def add(a, b): return _ew.Add.apply(*_operands(a, b, "cast"))
def sub(a, b): return _ew.Sub.apply(*_operands(_no_bool(a, "sub"), _no_bool(b, "sub"), "cast"))
def mul(a, b): return _ew.Mul.apply(*_operands(a, b, "cast"))
def div(a, b): return _ew.Div.apply(*_operands(a, b))      # (in floats: 300 stays 300)
def remainder(a, b): return _ew.Remainder.apply(*_operands(a, b, "cast"))
def floor_divide(a, b): return _ew.FloorDivide.apply(*_operands(a, b, "cast"))
def fmod(a, b): return _ew.Fmod.apply(*_operands(a, b, "cast"))
def atan2(a, b):
    """torch.atan2: integer operands in the default dtype, as torch's."""
    return _ew.Atan2.apply(*_operands(*(_floating(t) if isinstance(t, Tensor) else t
                                        for t in (a, b))))


def bincount(x, weights=None, minlength=0):
    """torch.bincount: how often each value 0..max of a 1-d non-negative integer tensor occurs
    (int64), or the sum of its weights (their dtype); at least minlength bins. No gradient, as
    torch's: weights that require one are refused."""
    if x.ndim != 1 or x.dtype.kind not in "iu" or (x.size and int(x.data.min()) < 0):
        raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs, got "
                           f"{x.dtype} {x.shape} (as torch)")
    w = None
    if weights is not None:
        if weights.requires_grad and is_grad_enabled():
            raise RuntimeError("bincount: no gradient for weights (torch's has none); detach "
                               "them")
        if weights.shape != x.shape:
            raise ValueError(f"bincount: weights {weights.shape} must match input {x.shape}")
        w = _on_device_of(x, weights, "bincount", "the weights are")
    xp = xp_of(x.data)
    counts = xp.bincount(x.data, weights=w, minlength=minlength)
    return Tensor(counts.astype(np.int64 if w is None else w.dtype, copy=False))
def neg(x): return _ew.Neg.apply(_no_bool(x, "neg"))
def pow(x, exponent):
    """x ** exponent: a constant exponent (a number), or a Tensor one (then x may be a number:
    2 ** t, Tensor.__rpow__), as torch.pow."""
    if isinstance(exponent, Tensor):
        if type(x) is int and exponent.dtype.kind in "iu":
            x = cast_integer(x, exponent.dtype)     # (300 ** uint8 takes 44, as torch's)
        return _ew.PowTensor.apply(x, exponent)
    exponent = _operand(exponent)             # (a NumPy scalar as a Python number: no float64)
    if not isinstance(exponent, int):
        x = _floating(x)                      # (an integer base to a float power: float32)
    elif x.dtype.kind in "biu":               # (torch's checks of an int power of int data)
        if exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed (as torch)")
        if x.dtype.kind == "b":
            x = x.astype(np.int64)            # (bool ** 2 is int64, as torch promotes it)
        exponent = int(fit_integers("pow()", exponent, x.dtype))
    return _ew.Pow.apply(x, exponent=exponent)


def exp(x): return _ew.Exp.apply(_floating(x))
def log(x): return _ew.Log.apply(_floating(x))
def log1p(x): return _ew.Log1p.apply(_floating(x))
def expm1(x): return _ew.Expm1.apply(_floating(x))
def log2(x): return _ew.Log2.apply(_floating(x))
def log10(x): return _ew.Log10.apply(_floating(x))
def reciprocal(x): return _ew.Reciprocal.apply(_floating(x))
def rsqrt(x): return _ew.Rsqrt.apply(_floating(x))
def sin(x): return _ew.Sin.apply(_floating(x))
def cos(x): return _ew.Cos.apply(_floating(x))
def tan(x): return _ew.Tan.apply(_floating(x))
def sinh(x): return _ew.Sinh.apply(_floating(x))
def cosh(x): return _ew.Cosh.apply(_floating(x))
def atan(x): return _ew.Arctan.apply(_floating(x))
def asin(x): return _ew.Arcsin.apply(_floating(x))
def acos(x): return _ew.Arccos.apply(_floating(x))
def asinh(x): return _ew.Arcsinh.apply(_floating(x))
def acosh(x): return _ew.Arccosh.apply(_floating(x))
def atanh(x): return _ew.Arctanh.apply(_floating(x))
def erf(x): return _ew.Erf.apply(_floating(x))
def _rounding(name):
    def rounding(x):
        if not is_floating(x.dtype):          # (integers are whole already: torch keeps them,
            if name == "sign" and x.dtype != np.bool_:    # as they are; sign of an integer
                return Tensor(xp_of(x.data).sign(x.data))  # stays one, of a bool itself)
            return clone(x)
        return _ew.Rounding.apply(x, ufunc=name)
    rounding.__name__ = rounding.__qualname__ = name
    rounding.__doc__ = f"torch.{name}: its gradient is 0, as torch's."
    return rounding


floor, ceil, trunc, sign = (_rounding(name) for name in ("floor", "ceil", "trunc", "sign"))


def round(x, decimals=0):  # noqa: A001  (torch.round)
    """torch.round: half to even; with decimals, of x * 10**decimals, divided back (torch's
    formula). Its gradient is 0."""
    if not is_floating(x.dtype):
        return clone(x)
    return _ew.Rounding.apply(x, ufunc="rint", decimals=operator.index(decimals))


def square(x):
    """x * x; of bool data int64 (as torch)."""
    x = x.astype(np.int64) if isinstance(x, Tensor) and x.dtype == np.bool_ else x
    return mul(x, x)


# ---- activations composed of the ops above (both paths and the gradients come with them; each
# branch of a `where` is kept finite where it is not taken: a 0 gradient times an inf would be
# NaN) ---------------------------------------------------------------------------------------

def softplus(x, beta=1.0, threshold=20.0):
    """torch's: log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""
    x = _float_only(x, "softplus")
    bx = x * beta if beta != 1 else x
    pos, neg = clamp(bx, min=0.0), clamp(bx, max=0.0)     # (each branch's finite argument)
    soft = where(bx > 0, pos + log1p(exp(-pos)), log1p(exp(neg)))
    soft = soft / beta if beta != 1 else soft
    return soft if threshold == np.inf else where(bx > threshold, x, soft)


def silu(x, inplace=False):
    """torch's: x sigmoid(x)."""
    return x * sigmoid(_float_only(x, "silu"))


def mish(x, inplace=False):
    """torch's: x tanh(softplus(x))."""
    return x * tanh(softplus(_float_only(x, "mish")))


def elu(x, alpha=1.0, inplace=False):
    """torch's: x where x > 0, else alpha (exp(x) - 1)."""
    x = _float_only(x, "elu")
    return where(x > 0, x, (exp(clamp(x, max=0.0)) - 1) * alpha)


def hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    """torch's: x clamped to [min_val, max_val]; the gradient only strictly inside (as torch's
    hardtanh, where clamp's reaches the bounds too)."""
    x = _float_only(x, "hardtanh")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} > max_val {max_val}")
    inside = (x > min_val) & (x < max_val)
    with no_grad():
        bound = clamp(x, min_val, max_val)
    return where(inside, x, bound)


def relu6(x, inplace=False):
    """torch's: hardtanh(x, 0, 6)."""
    return hardtanh(x, 0.0, 6.0)


def logsigmoid(x):
    """torch's: log(sigmoid(x)) = -softplus(-x), without overflow."""
    return -softplus(-_float_only(x, "logsigmoid"), threshold=np.inf)   # (no linear part)


def _floating(x):
    """x, or for integer / bool data its copy in the default dtype: as torch, a floating function
    of integers (exp, log, sigmoid, tanh, a float power or bound) computes in the default float
    dtype; NumPy would give float64, or integers (sigmoid's zeros)."""
    if isinstance(x, Tensor) and not is_floating(x.dtype):
        return Tensor(x.data.astype(default_float()))
    return x


def _float_only(x, name):
    """x, unless it holds integer / bool data: refused as torch refuses it (NumPy would truncate a
    slope, a softmax, to integers)."""
    if isinstance(x, Tensor) and not is_floating(x.dtype):
        raise TypeError(f"{name}: takes floating data, got {x.dtype} (as torch); cast it first")
    return x


def _no_bool(a, name):
    """a, unless it is a bool array or Tensor: torch refuses `-` on bool tensors (NumPy's
    answer depends on the other operand)."""
    if getattr(a, "dtype", None) == np.bool_:
        raise TypeError(f"{name}: the - operator does not take bool tensors (as torch); use "
                        f"logical ops, or cast to an integer or floating dtype first")
    return a


def cast(x, dtype):
    """x as `dtype`: between floating dtypes differentiably (the gradient is cast back to x's
    dtype); to or from integer / bool a constant, as torch's (x.long() of class scores is no
    longer in the graph)."""
    dtype = np_dtype(dtype)
    if is_floating(dtype) and is_floating(x.dtype):
        return _ew.Cast.apply(x, dtype=dtype)
    if dtype.kind not in "biuf" and not is_floating(dtype):
        raise TypeError(f"cast: {x.dtype} -> {dtype}: expected a floating, integer or bool dtype")
    return Tensor(x.data.astype(dtype))


def matmul(a, b):
    a, b = _operands(a, b)        # (a NumPy matrix meeting a tensor: its dtype, its device)
    if a.shape[-1] != (b.shape[0] if b.ndim == 1 else b.shape[-2]):
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not line up "
                         f"({a.shape[-1]} != {b.shape[0] if b.ndim == 1 else b.shape[-2]})")
    _check_float("matmul", a, b)
    return _la.MatMul.apply(a, b)


def linear(x, weight, bias=None):
    """y = x @ weight.T + bias, weight (out_features, in_features)."""
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input has {x.shape[-1]} features (shape {x.shape}) but weight "
                         f"expects {weight.shape[1]} (weight shape {weight.shape})")
    _check_float("linear", x, weight, bias)
    return _la.Linear.apply(x, weight, bias)


# ---- activations ------------------------------------------------------------------------------

def relu(x, inplace=False):
    """(inplace is taken for torch's spelling; the result is a new tensor)"""
    return _ew.ReLU.apply(x)
def sigmoid(x): return _ew.Sigmoid.apply(_floating(x))
def tanh(x): return _ew.Tanh.apply(_floating(x))


def leaky_relu(x, negative_slope=0.01, inplace=False):
    return _ew.LeakyReLU.apply(_float_only(x, "leaky_relu"), slope=negative_slope)


def gelu(x, approximate="none"):
    """torch.nn.functional.gelu: x * Phi(x), or its tanh approximation ('tanh')."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _ew.GELU.apply(_float_only(x, "gelu"), approximate=approximate)


def clamp(x, min=None, max=None):
    """min(max(x, min), max), as torch.clamp. A Tensor bound broadcasts with x and takes the
    gradient where it is the value taken (x's where min <= x <= max, ties going to x, as
    torch's)."""
    # (NumPy scalar bounds as Python numbers: np.float64 would make a float32 graph float64)
    min, max = (b if b is None else _operand(b, x, "clamp()") for b in (min, max))
    if is_floating(x.dtype):                  # (70000 refused as a float16 bound, as torch)
        min, max = (fit_value("clamp()", b, x.dtype) for b in (min, max))
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        for name, bound, beyond in (("min", min, operator.lt), ("max", max, operator.gt)):
            if isinstance(bound, Tensor):
                x = where(beyond(x.data, _on_device_of(x, bound, "clamp")), bound, x)
            elif bound is not None:
                x = clamp(x, **{name: bound})
        return x
    if any(isinstance(b, float) for b in (min, max)):
        x = _floating(x)                      # (integers clamped to a float bound: float32)
    return _ew.Clamp.apply(x, lo=min, hi=max)


def where(cond, a, b):
    """a where cond else b (numpy.where / torch.where); cond is a constant boolean array (or
    Tensor) that broadcasts with a and b; a or b may be a Python number."""
    if (isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating))) and \
            result_dtype(*(v.data if isinstance(v, Tensor) else v for v in (a, b))) == np.float32:
        a, b = (fit_value("where()", v, np.float32) for v in (a, b))  # (1e39 refused into a
    return _where(cond, a, b)                                         # float32 result, as torch)


def _where(cond, a, b):
    """where, its numbers already checked (masked_fill's value, fitted to x's dtype)."""
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):          # (two numbers: torch's dtype for them, on cond's
        c = cond if isinstance(cond, Tensor) else Tensor(np.asarray(cond))   # device)
        dtype = promote_types(number_dtype(a), number_dtype(b))
        a = Tensor(xp_of(c.data).asarray(a, dtype=dtype))
        like = a
    c = _on_device_of(like, cond, "where")
    if c.dtype != bool:
        raise TypeError(f"where: the condition must be boolean, got {c.dtype}")
    try:
        np.broadcast_shapes(c.shape, tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ())))
    except ValueError:
        raise ValueError(f"where: condition {c.shape}, a {getattr(a, 'shape', ())} and b "
                         f"{getattr(b, 'shape', ())} do not broadcast together") from None
    return _ew.Where.apply(*_operands(a, b, "where()"), cond=c)


def maximum(a, b):
    """torch.maximum: elementwise, NaN propagating; at a tie each side gets half the gradient,
    at a NaN each the whole of it (torch's rule)."""
    return _ew.Extremum.apply(*_operands(a, b), larger=True)


def minimum(a, b):
    """torch.minimum (as maximum)."""
    return _ew.Extremum.apply(*_operands(a, b), larger=False)


def isnan(x): return Tensor(xp_of(x.data).isnan(x.data))
def isinf(x): return Tensor(xp_of(x.data).isinf(x.data))
def isfinite(x): return Tensor(xp_of(x.data).isfinite(x.data))


def narrow(x, dim, start, length):
    """torch.narrow: `length` entries of `dim` from `start` (a view's values, in the graph)."""
    dim = dim_index(dim, x.ndim, "narrow")
    start = start + x.shape[dim] if start < 0 else start
    if not (0 <= start and length >= 0 and start + length <= x.shape[dim]):
        raise IndexError(f"narrow: start {start} and length {length} out of range for dim "
                         f"{dim} of size {x.shape[dim]}")
    return getitem(x, tuple(slice(start, start + length) if d == dim else slice(None)
                            for d in range(x.ndim)))


def flip(x, dims):
    """torch.flip: a copy with `dims` reversed (in the graph; not a view, as torch's)."""
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    axes = [dim_index(d, x.ndim, "flip") for d in dims]
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"flip: dim {dims} appears more than once (as torch refuses)")
    return clone(getitem(x, tuple(slice(None, None, -1) if d in axes else slice(None)
                                  for d in range(x.ndim))))


def masked_fill(x, mask, value):
    """x with `value` where mask is True (torch.Tensor.masked_fill): x's dtype kept, the value
    stored as torch stores it (backend.fit_value: 2.7 into integer data is 2; -1 into uint8 is
    255; -1.0, 300 or 70000.0 into float16 refused); no gradient flows to x there. A 0-d Tensor
    value is cast to x's dtype (checked as a number when it is on the host; a GPU one is cast
    without the check, which would read it back) and takes the masked positions' gradient."""
    if isinstance(value, (int, float, np.number)):
        value = fit_value("masked_fill()", value, x.dtype)
    elif isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"masked_fill(): only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.ndim} dimension(s) (as torch)")
        if value.dtype != x.dtype:
            if not is_gpu(value.data):      # (checked as a number where reading it is free;
                fit_value("masked_fill()", value.item(), x.dtype)   # a GPU value is cast)
            value = _astype(value, x.dtype)     # (x's dtype kept; the gradient cast back)
        if value.device != x.device:        # (a host value for a GPU x, as torch takes it)
            value = value.to(x.device)
    return _where(mask, value, x)


def dropout(x, p=0.5, training=True, inplace=False):
    """torch's (inplace accepted: the result is a new tensor, as for relu's; layers records
    no in-place change of a tensor in a graph)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    return _ew.Dropout.apply(x, p=p)


def _feature_dropout(name, x, p, training, batched):
    """Whole channels dropped: one draw per (item, channel) of batched (N, C, ...) input, per
    channel of unbatched (C, ...) input, the kept ones scaled by 1 / (1 - p)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    lead = 2 if batched else 1
    if x.ndim < lead:
        raise RuntimeError(f"{name}: Feature dropout requires at least 2 dimensions in the "
                           f"input, got shape {tuple(x.shape)}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    return _ew.Dropout.apply(x, p=p, mask_shape=tuple(x.shape[:lead]) + (1,) * (x.ndim - lead))


def _deprecated_rank(name, x, expected):
    warnings.warn(f"{name}: Received a {x.ndim}-D input to {name}, which is deprecated and will "
                  f"result in an error in a future release (as torch's). {name} expects "
                  f"{expected}", UserWarning, stacklevel=3)


def dropout1d(x, p=0.5, training=True, inplace=False):
    """torch's: whole channels of (N, C, L) input, or of unbatched (C, L), dropped."""
    if x.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {x.ndim}D input "
                           f"of shape {tuple(x.shape)}")
    return _feature_dropout("dropout1d", x, p, training, batched=x.ndim == 3)


def dropout2d(x, p=0.5, training=True, inplace=False):
    """torch's: whole channels dropped -- one draw per (item, channel) of (N, C, H, W) input, or
    of (N, C, L) input (torch's reading of 3-d input, with its warning) -- the kept
    ones scaled by 1 / (1 - p). Other input of 2 or more dimensions is (N, C, ...), with
    torch's deprecation warning."""
    if x.ndim not in (3, 4):
        _deprecated_rank("dropout2d", x, "3-d (N, C, L) or 4-d (N, C, H, W) input")
    elif x.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), "
                      "where C is the channel dim (as torch's); F.dropout1d says so",
                      UserWarning, stacklevel=2)
    return _feature_dropout("dropout2d", x, p, training, batched=True)


def dropout3d(x, p=0.5, training=True, inplace=False):
    """torch's: whole channels of (N, C, D, H, W) input, or of unbatched (C, D, H, W), dropped;
    other input is unbatched (C, ...), with torch's deprecation warning."""
    if x.ndim not in (4, 5):
        _deprecated_rank("dropout3d", x, "4-d (C, D, H, W) or 5-d (N, C, D, H, W) input")
    return _feature_dropout("dropout3d", x, p, training, batched=x.ndim == 5)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch's: softmax(q k^T * scale + mask) v over the last two axes (q (..., L, E), k (..., S,
    E), v (..., S, Ev)); attn_mask bool (True: attend) or float (added), is_causal the lower
    triangle of (L, S); a row with nothing to attend gives 0, its gradient 0 (torch's safe
    softmax); dropout_p applied to the weights whenever given, as torch's. Composed of the
    engine's ops (batched cuBLASLt products on a GPU)."""
    return _attention("scaled_dot_product_attention", query, key, value, attn_mask, dropout_p,
                      is_causal, scale, enable_gqa)[0]


def _attention(name, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """(output, weights) of scaled_dot_product_attention (MultiheadAttention's weights too)."""
    _check_float(name, query, key, value)
    if key.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{name}: query {query.shape}, key {key.shape} and value {value.shape} "
                         f"must be (..., L, E), (..., S, E) and (..., S, Ev)")
    if is_causal and attn_mask is not None:
        raise RuntimeError(f"{name}: Explicit attn_mask should not be set when is_causal=True "
                           f"(as torch)")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        if query.shape[-3] % key.shape[-3]:
            raise ValueError(f"{name}: {query.shape[-3]} query heads are not a multiple of "
                             f"{key.shape[-3]} key / value heads")
        n = query.shape[-3] // key.shape[-3]
        key, value = repeat_interleave(key, n, dim=-3), repeat_interleave(value, n, dim=-3)
    L_, S = query.shape[-2], key.shape[-2]
    s = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = matmul(query, transpose(key, -2, -1)) * s
    if is_causal:
        attn_mask = Tensor(np.tril(np.ones((L_, S), np.bool_))).to(query.device)
    if attn_mask is not None:
        if attn_mask.dtype != np.bool_ and not is_floating(attn_mask.dtype):
            raise TypeError(f"{name}: Expected attn_mask dtype to be bool or float, got "
                            f"{attn_mask.dtype} (as torch)")
        if attn_mask.dtype == np.bool_:
            scores = where(_on_device_of(query, attn_mask, name), scores, -math.inf)
        else:
            scores = scores + attn_mask
    # rows with nothing to attend: weights 0 (not NaN), no gradient (torch's _safe_softmax)
    dead = (isinf(scores) & (scores < 0)).all(dim=-1, keepdim=True)
    weights = where(dead, 0.0, softmax(where(dead, 0.0, scores), dim=-1))
    if dropout_p > 0:
        weights = dropout(weights, dropout_p)
    return matmul(weights, value), weights


def additive_attention(query, location, processed_memory, v, memory, mask=None):
    """Additive attention after its projections (layers.ops.attention): weights = softmax over
    t of v . tanh(query + location + processed_memory) (-inf where mask is True), context =
    weights . memory. query (B, A), location and processed_memory (B, L, A), v (1, A) (a
    Linear(A, 1)'s weight), memory (B, L, E), mask (B, L) bool or None -> (context (B, E),
    weights (B, L)). One kernel each way on the GPU."""
    mask = _attention_checks("additive_attention", query, processed_memory, v, memory, mask,
                             {"location": (location, ("B", "L", "A"))})
    return _att.AdditiveAttention.apply(query, location, processed_memory, v, memory, mask)


def location_attention(query, weights_prev, weights_cum, location_kernel, processed_memory, v,
                       memory, mask=None):
    """additive_attention with its location features computed in the op (one kernel each way
    on the GPU): location[b, t] = the 'same'-padded windows of weights_prev and weights_cum
    (B, L) around t times location_kernel (2 K, A), K odd (rows: K taps on the previous weights,
    then K on the cumulative ones) -- NVIDIA's location conv (F, 2, K) and dense layer (A, F),
    both bias-free, composed: conv.reshape(F, 2 K).T @ dense.T."""
    K2 = location_kernel.shape[0] if location_kernel.ndim == 2 else None
    if K2 is None or K2 % 4 != 2:
        raise ValueError(f"location_attention: location_kernel {location_kernel.shape}: "
                         f"expected (2 K, A) with K odd ('same' padding)")
    mask = _attention_checks("location_attention", query, processed_memory, v, memory, mask,
                             {"weights_prev": (weights_prev, ("B", "L")),
                              "weights_cum": (weights_cum, ("B", "L")),
                              "location_kernel": (location_kernel, (K2, "A"))})
    return _att.LocationAttention.apply(query, weights_prev, weights_cum, location_kernel,
                                        processed_memory, v, memory, mask)


def _attention_checks(name, query, processed_memory, v, memory, mask, more):
    """The shapes the attention ops take -- B, L, A from processed_memory (B, L, A) -- every
    operand named in the error; one floating dtype; a mask moved to the device, boolean."""
    dims = dict(zip("BLA", processed_memory.shape)) if processed_memory.ndim == 3 else {}
    if mask is not None:
        mask = _on_device_of(processed_memory, mask, name)
        if mask.dtype != bool:
            raise TypeError(f"{name}: the mask must be boolean (True at padding), got "
                            f"{mask.dtype}")
    want = {"query": (query, ("B", "A")), "v": (v, (1, "A")), "memory": (memory, ("B", "L", "E")),
            **more}
    if mask is not None:
        want["mask"] = (mask, ("B", "L"))
    dims["E"] = memory.shape[-1]

    def fits(a, spec):
        return len(a.shape) == len(spec) and all(
            n == (dims.get(d) if isinstance(d, str) else d) for n, d in zip(a.shape, spec))
    if not dims.get("A") or not all(fits(a, spec) for a, spec in want.values()):
        raise ValueError(f"{name}: processed_memory {processed_memory.shape} (B, L, A) needs "
                         + ", ".join(f"{k} ({', '.join(map(str, spec))})"
                                     for k, (_, spec) in want.items())
                         + "; got " + ", ".join(f"{k} {a.shape}" for k, (a, _) in want.items()))
    _check_float(name, query, processed_memory, v, memory,
                 *(a for a, _ in more.values()))
    return mask


_ELEMENTWISE = (" (the elementwise maximum or minimum of two tensors is L.maximum(a, b) or "
                "L.minimum(a, b))")


def _dim(name, axis, dim, default=None):
    """torch's `dim` where NumPy's `axis` is taken (either, not both); dim=() or [] is every
    axis, as torch reads it (NumPy's axis=() is none)."""
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{name}: got both axis={axis} and dim={dim} (they are one argument: "
                            f"NumPy's name and torch's)")
        if isinstance(dim, Tensor):
            raise TypeError(f"{name}: dim is an axis, got a Tensor{_ELEMENTWISE}")
        return default if isinstance(dim, (tuple, list)) and not dim else dim
    if isinstance(axis, Tensor):
        raise TypeError(f"{name}: axis is an axis, got a Tensor{_ELEMENTWISE}")
    return default if axis is None else axis


def _keepdim(name, keepdims, keepdim):
    if keepdim is not None:
        if keepdims:
            raise TypeError(f"{name}: got both keepdims and keepdim (one argument)")
        return bool(keepdim)
    return keepdims


def implicit_softmax_dim(ndim):
    """torch's axis for a softmax given none (its legacy rule, which it warns about): 0 for a
    0-, 1- or 3-d input, else 1."""
    return 0 if ndim in (0, 1, 3) else 1


def softmax(x, axis=None, *, dim=None):
    """torch.nn.functional.softmax; no axis: torch's implicit one (implicit_softmax_dim: 1 for
    4-d input, 0 for 3-d -- not the last)."""
    return _softmax(_red.Softmax, "softmax", x,
                    _dim("softmax", axis, dim, implicit_softmax_dim(x.ndim)))


def log_softmax(x, axis=None, *, dim=None):
    return _softmax(_red.LogSoftmax, "log_softmax", x,
                    _dim("log_softmax", axis, dim, implicit_softmax_dim(x.ndim)))


def _method_softmax(fn, name):
    """Tensor.softmax / log_softmax: an axis is required, as torch's methods require dim."""
    def method(self, axis=None, **torch_names):
        if axis is None and torch_names.get("dim") is None:
            raise TypeError(f"{name}() missing required argument 'dim' (as torch's "
                            f"Tensor.{name})")
        return fn(self, axis, **torch_names)
    return method


def _softmax(op, name, x, axis):
    """op along axis: of a 0-d tensor as of its one-element 1-d view (as torch), of an empty one
    an empty result (a maximum over nothing has no value)."""
    x = _float_only(x, name)
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: takes one axis (an int, as torch's dim), got {axis!r}")
    if x.ndim == 0:
        return reshape(op.apply(reshape(x, 1), axis=0), ())
    if x.size == 0:
        return mul(x, 1)
    return op.apply(x, axis=axis)


# ---- reductions and shapes ----------------------------------------------------------------------

def sum(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """x summed over `axis` (torch's `dim`; a tuple takes several), `keepdims` (`keepdim`)."""
    return _red.Sum.apply(x, axis=_dim("sum", axis, dim), keepdims=_keepdim("sum", keepdims,
                                                                            keepdim))


def mean(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    return _red.Mean.apply(x, axis=_dim("mean", axis, dim),
                           keepdims=_keepdim("mean", keepdims, keepdim))


def amax(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """The maximum over `axis` (all by default), as torch.amax: its gradient shared among ties."""
    axis = _dim("amax", axis, dim)
    empty = [a for a in _red._axes(axis, x.ndim) if x.shape[a] == 0]
    if empty or (x.size == 0 and x.ndim == 0):
        raise RuntimeError(f"amax: a maximum over axis {empty[0] if empty else 0} of size 0 "
                           f"(shape {x.shape}) has no value (as torch)")
    return _red.Amax.apply(x, axis=axis, keepdims=_keepdim("amax", keepdims, keepdim))


def argmax(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """The index of the first maximum along `axis` (of the flattened tensor by default), int64,
    as torch.argmax; no gradient."""
    return _arg("argmax", x, axis, keepdims, dim, keepdim)


def _arg(name, x, axis, keepdims, dim, keepdim):
    """NumPy's / CuPy's argmax or argmin (`name`) with torch's dim / keepdim, int64, in no
    graph (of the flattened tensor where no axis is given)."""
    axis, keep = _dim(name, axis, dim), _keepdim(name, keepdims, keepdim)
    xp = xp_of(x.data)
    if axis is None:
        i = getattr(xp, name)(x.data.reshape(-1))
        return Tensor(xp.asarray(i, dtype=np.int64).reshape((1,) * x.ndim if keep else ()))
    return Tensor(getattr(xp, name)(x.data, axis=axis, keepdims=keep).astype(np.int64,
                                                                              copy=False))


def max(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """torch's Tensor.max: with no axis the maximum (amax); along one, (values, indices) --
    values whose gradient goes to the index torch.max picks (the first maximum)."""
    axis = _dim("max", axis, dim)
    if axis is None:
        return amax(x)
    if x.ndim == 0:            # (along 0 or -1: itself, at index 0, as torch)
        return _along_of_0d("max", x, axis)
    keep = _keepdim("max", keepdims, keepdim)
    indices = argmax(x, axis, keepdims=True)
    values = _red.MaxAlong.apply(x, index=indices.data, axis=axis)
    if not keep:
        values = squeeze(values, axis)
        indices = Tensor(indices.data.squeeze(axis))
    return MaxResult(values, indices)


def _along_of_0d(name, x, axis):
    """max / min of a 0-d tensor along axis 0 or -1 (torch's): the value itself, index 0."""
    dim_index(axis, 1, name)
    return MaxResult(reshape(x, ()), Tensor(xp_of(x.data).zeros((), np.int64)))


def amin(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """The minimum over `axis` (all by default), as torch.amin: of floating data -amax(-x), its
    gradient shared among ties; of integer / bool data (no gradient) NumPy's / CuPy's amin
    (negation would wrap: uint8 0, int8 -128)."""
    if is_floating(x.dtype):
        return neg(amax(neg(x), axis, keepdims, dim=dim, keepdim=keepdim))
    axis, keep = _dim("amin", axis, dim), _keepdim("amin", keepdims, keepdim)
    return Tensor(xp_of(x.data).amin(x.data, axis=axis, keepdims=keep))


def argmin(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """The index of the first minimum along `axis`, int64, as torch.argmin; no gradient."""
    return _arg("argmin", x, axis, keepdims, dim, keepdim)


def min(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """torch's Tensor.min: with no axis the minimum (amin); along one, (values, indices) --
    values whose gradient goes to the first minimum (a floating max of -x)."""
    axis = _dim("min", axis, dim)
    if axis is None:
        return amin(x)
    if x.ndim == 0:
        return _along_of_0d("min", x, axis)
    keep = _keepdim("min", keepdims, keepdim)
    if not is_floating(x.dtype):
        indices = argmin(x, axis, True)
        values = Tensor(xp_of(x.data).take_along_axis(x.data, indices.data, axis=axis))
        return MaxResult(*((values, indices) if keep else
                           (squeeze(values, axis), Tensor(indices.data.squeeze(axis)))))
    values, indices = max(neg(x), axis, keepdims, keepdim=keepdim)
    return MaxResult(neg(values), indices)


def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var(x, dim, unbiased, keepdim, *, correction): the squared deviations' sum over
    `dim` (all by default) divided by max(0, n - correction) (correction 1, Bessel's, torch's
    default; unbiased=False: 0)."""
    if unbiased is not None and correction is not None:
        raise TypeError("var: got both unbiased and correction (one setting, as torch)")
    correction = (1 if unbiased is None or unbiased else 0) if correction is None else correction
    x = _float_only(x, "var")
    axis = _dim("var", None, dim)
    n = x.size if axis is None else builtins.int(np.prod([x.shape[a] for a in
                                                          _red._axes(axis, x.ndim)]))
    d = x - mean(x, axis, keepdims=True)
    return sum(d * d, axis, keepdims=builtins.bool(keepdim)) / \
        builtins.float(builtins.max(n - correction, 0))


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std: var's square root; where it is 0 (constant data) its gradient is 0, as
    torch's (the root's own is infinite there)."""
    v = var(x, dim, unbiased, keepdim, correction=correction)
    return where(v == 0, 0.0, where(v == 0, 1.0, v) ** 0.5)


def logsumexp(x, dim, keepdim=False):
    """torch.logsumexp: log(sum(exp(x))) over `dim` (an int or a tuple), without overflow: the
    maximum is taken out first, as a constant (its gradient cancels), and a row whose maximum is
    infinite is summed as it is (-inf where every term is -inf, as torch)."""
    x = _floating(x)
    dim = _dim("logsumexp", None, dim)         # (() / []: every axis)
    axes = _red._axes(dim, x.ndim)
    if x.size == 0:                  # (a sum over nothing: log 0 = -inf, as torch)
        return log(sum(exp(x), axes, keepdim=keepdim))
    with no_grad():
        m = amax(x, dim, keepdim=True) if x.ndim else x
        m = where(isinf(m), 0.0, m)
    y = log(sum(exp(x - m), axes, keepdim=True)) + m
    return y if keepdim else reshape(y, tuple(n for d, n in enumerate(x.shape) if d not in axes))


def cumsum(x, dim, *, dtype=None):
    """torch.cumsum: the running sum along `dim`; bool and integer data give int64 (as torch),
    `dtype` casts first."""
    if dtype is not None and np.dtype(dtype) == np.bool_:
        raise NotImplementedError("cumsum: not implemented for dtype bool (torch's neither)")
    x = x.astype(dtype) if dtype is not None else x      # (then summed in that dtype, as torch)
    if x.ndim == 0:
        dim_index(dim, 1, "cumsum")
        return reshape(_red.Cumsum.apply(reshape(x, 1), axis=0, keep=dtype is not None), ())
    return _red.Cumsum.apply(x, axis=dim_index(dim, x.ndim, "cumsum"), keep=dtype is not None)


def cumprod(x, dim, *, dtype=None):
    """torch.cumprod: the running product along `dim`; bool and integer data give int64 (as
    torch), `dtype` casts first. Its gradient is exact where a factor is 0."""
    if dtype is not None and np.dtype(dtype) == np.bool_:
        raise NotImplementedError("cumprod: not implemented for dtype bool (torch's neither)")
    x = x.astype(dtype) if dtype is not None else x
    if x.ndim == 0:
        dim_index(dim, 1, "cumprod")
        return reshape(_red.Cumprod.apply(reshape(x, 1), axis=0, keep=dtype is not None), ())
    return _red.Cumprod.apply(x, axis=dim_index(dim, x.ndim, "cumprod"), keep=dtype is not None)


def prod(x, dim=None, keepdim=False, *, dtype=None):
    """torch.prod: of every element, or along one `dim`; bool and integer data give int64 (as
    torch), `dtype` casts first. Its gradient is exact where a factor is 0."""
    x = x.astype(dtype) if dtype is not None else x     # (then multiplied in that dtype)
    keep = dtype is not None
    if dim is not None:
        if not isinstance(dim, (int, np.integer)):
            raise TypeError(f"prod: dim is one axis (an int, as torch's), got {dim!r}")
        axis = dim_index(dim, builtins.max(x.ndim, 1), "prod")
        if x.ndim == 0:
            return _red.Prod.apply(x, axis=None, keepdims=False, keep=keep)
        return _red.Prod.apply(x, axis=axis, keepdims=bool(keepdim), keep=keep)
    return _red.Prod.apply(x, axis=None, keepdims=False, keep=keep)


def norm(x, p="fro", dim=None, keepdim=False, *, dtype=None):
    """torch.norm's vector norms (torch.linalg.vector_norm): p a number (2, 1, inf, -inf, 0 or
    any other) or 'fro' (2) over `dim` (an int, a tuple, or every axis). Matrix norms ('nuc')
    are not done here."""
    if isinstance(p, str):
        if p != "fro":
            raise ValueError(f"norm: p={p!r} (a matrix norm) is not done here; the vector norms "
                             f"are (a number, or 'fro')")
        p = 2
    x = x.astype(dtype) if dtype is not None else _float_only(x, "norm")
    dim = _dim("norm", None, dim)              # (() / []: every axis)
    return _red.VectorNorm.apply(x, ord=float(p), axis=dim, keepdims=bool(keepdim))


def normalize(x, p=2.0, dim=1, eps=1e-12):
    """torch.nn.functional.normalize: x / max(||x||_p over dim, eps)."""
    n = norm(x, p, dim, keepdim=True)
    return x / clamp(n, min=eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """torch's: sum over dim of (x1 / max(||x1||, eps)) (x2 / max(||x2||, eps)), x1 and x2
    broadcast; the norms' clamp is outside the gradient, as torch's (it clamps them under
    no_grad)."""
    common = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    x1, x2 = broadcast_to(x1, common), broadcast_to(x2, common)

    def unit(x):
        n = norm(x, 2, dim, keepdim=True)
        with no_grad():
            lift = clamp(n, min=eps) - n          # (0 but where the norm is below eps)
        return x / (n + lift)
    return sum(unit(x1) * unit(x2), dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """torch's: the p-norm of x1 - x2 + eps over the last axis."""
    return norm(x1 - x2 + eps, p, -1, keepdim)


def outer(a, b):
    """torch.outer of two 1-d tensors."""
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"outer: expected two 1-d tensors, got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return reshape(a, -1, 1) * reshape(b, 1, -1)


def repeat_interleave(x, repeats, dim=None):
    """torch.repeat_interleave: each entry along dim (of the flattened tensor with no dim)
    repeated `repeats` times (an int, or one count an entry: read on the host, as torch's
    does); an index_select, so the gradient sums the copies."""
    if dim is None:
        x, dim = reshape(x, -1), 0
    dim = dim_index(dim, x.ndim, "repeat_interleave")
    counts = repeats.data if isinstance(repeats, Tensor) else repeats
    counts = np.asarray(counts.get() if is_gpu(counts) else counts)
    if counts.size == 1:                       # (one count for every entry, as torch's)
        counts = counts.reshape(())
    if counts.ndim and counts.shape != (x.shape[dim],):
        raise ValueError(f"repeat_interleave: repeats must have one count for each of the "
                         f"{x.shape[dim]} entries of dim {dim}, got shape {counts.shape}")
    if np.any(counts < 0):
        raise ValueError("repeat_interleave: repeats may not be negative (as torch)")
    index = np.repeat(np.arange(x.shape[dim]), counts)
    return index_select(x, dim, xp_of(x.data).asarray(index))


def nonzero(x, as_tuple=False):
    """torch.nonzero: the int64 indices of the non-zero entries, (n, ndim), or one index
    Tensor an axis with as_tuple; no gradient."""
    xp = xp_of(x.data)
    if x.ndim == 0:                 # (torch's: (1, 0) or (0, 0); as_tuple as of a 1-d one)
        if as_tuple:
            return nonzero(reshape(x, 1), as_tuple=True)
        return Tensor(xp.zeros((1 if x.data.item() else 0, 0), np.int64))
    idx = xp.nonzero(x.data)
    if as_tuple:
        return tuple(Tensor(i.astype(np.int64, copy=False)) for i in idx)
    return Tensor(xp.stack(idx, axis=1).astype(np.int64, copy=False))


def allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """torch.allclose: a bool (read back from a device)."""
    return builtins.bool(xp_of(a.data).allclose(a.data, _operand(b, a).data
                                                if isinstance(b, Tensor) else b,
                                                rtol=rtol, atol=atol, equal_nan=equal_nan))


def _logical(name):
    def logical(*tensors):
        arrays = [t.data if isinstance(t, Tensor) else t for t in tensors]
        return Tensor(getattr(xp_of(arrays[0]), name)(*arrays))
    logical.__name__ = logical.__qualname__ = name
    logical.__doc__ = f"torch.{name}: a bool Tensor, in no graph."
    return logical


logical_and, logical_or, logical_xor, logical_not = (
    _logical(name) for name in ("logical_and", "logical_or", "logical_xor", "logical_not"))


def absolute(x):
    """|x| (Tensor.abs, torch.abs); the gradient sign(x), 0 at 0, as torch's."""
    if x.dtype == np.bool_:
        raise TypeError("abs: takes no bool tensor (as torch)")
    return _ew.Abs.apply(x)


def sqrt(x):
    """x ** 0.5 (torch.sqrt; its gradient infinite at 0, as torch's)."""
    return pow(x, 0.5)


def expand(x, *sizes):
    """torch's Tensor.expand: broadcast_to, -1 keeping an axis's size."""
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    lead = len(sizes) - x.ndim
    return broadcast_to(x, tuple(x.shape[i - lead] if n == -1 and i >= lead else n
                                 for i, n in enumerate(sizes)))


def repeat(x, *sizes):
    """torch's Tensor.repeat (numpy.tile): each axis's copies laid end to end, as a broadcast
    of x with a new axis before each and a reshape (the gradient sums the copies)."""
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    if len(sizes) < x.ndim:
        raise ValueError(f"repeat: {len(sizes)} sizes for {x.ndim} dimensions (torch's rule: at "
                         f"least one per dimension)")
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    spread = broadcast_to(reshape(x, tuple(v for n in shape for v in (1, n))),
                          tuple(v for r, n in zip(sizes, shape) for v in (r, n)))
    return reshape(spread, tuple(r * n for r, n in zip(sizes, shape)))


def split(x, split_size_or_sections, dim=0):
    """torch.split: pieces of split_size along `dim` (the last may be shorter), or of the sizes
    listed; views of x, made by one op (ops.shape.Split), as torch's."""
    dim = dim_index(dim, x.ndim, "split")
    n = x.shape[dim]
    if isinstance(split_size_or_sections, (int, np.integer)):
        step = int(split_size_or_sections)
        if step < 0 or step == 0 and n > 0:
            raise ValueError(f"split: split_size must be positive (0 only for an empty dim), "
                             f"got {step} for dim {dim}'s size {n}")
        sizes = [builtins.min(step, n - i) for i in range(0, n, step)] if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if builtins.min(sizes, default=0) < 0:
            raise ValueError(f"split: sizes {sizes} must not be negative")
        if builtins.sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} sum to {builtins.sum(sizes)}, not dim {dim}'s "
                             f"size {n}")
    return _sh.Split.apply(x, sizes=tuple(sizes), axis=dim)


def chunk(x, chunks, dim=0):
    """torch.chunk: `chunks` pieces of ceil(n / chunks) along `dim` (fewer when they run out)."""
    n = x.shape[dim_index(dim, x.ndim, "chunk")]
    if builtins.int(chunks) < 1:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    if n == 0:                                # (torch: `chunks` empty pieces)
        return split(x, [0] * builtins.int(chunks), dim)
    return split(x, builtins.max(-(-n // builtins.int(chunks)), 1), dim)


def gather(x, dim, index):
    """torch.gather: out[i][j] = x[i][index[i][j]] along `dim` (index of x's number of axes, no
    larger than x off `dim`; the result has its shape), differentiable in x."""
    dim = dim_index(dim, x.ndim, "gather")
    idx = _on_device_of(x, index, "gather")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"gather: index must hold integers, got {idx.dtype}")
    if idx.ndim != x.ndim or any(i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape))
                                 if d != dim):
        raise RuntimeError(f"gather: index {tuple(idx.shape)} must have input {tuple(x.shape)}'s "
                           f"number of axes and be no larger off dim {dim} (torch's rule)")
    return _sh.Gather.apply(x, index=idx.astype(np.int64, copy=False), axis=dim)


def scatter(x, dim, index, src=None, value=None, reduce=None):
    """torch.scatter: x with x[i][index[i][j]] = src[i][j] along `dim` (or the number `value`),
    differentiable in x and src; reduce='add' adds instead (scatter_add). index has x's number
    of axes, is no larger than src, nor than x off `dim` (torch's rules)."""
    name = "scatter_add" if reduce == "add" else "scatter"
    if reduce not in (None, "add"):
        raise ValueError(f"{name}: reduce must be None or 'add', got {reduce!r} (torch's "
                         f"'multiply' is not done here)")
    if isinstance(src, (int, float, np.number)) and value is None:   # (torch: scatter(d, i, 1.0))
        src, value = None, src
    if (src is None) == (value is None):
        raise TypeError(f"{name}: give src (a Tensor) or value (a number), not both")
    dim = dim_index(dim, x.ndim, name)
    idx = _on_device_of(x, index, name)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name}: index must hold integers, got {idx.dtype}")
    if src is not None:
        if not isinstance(src, Tensor):
            src = Tensor(_on_device_of(x, src, name))
        if src.dtype != x.dtype:
            raise TypeError(f"{name}: src has dtype {src.dtype}, x has {x.dtype}: they must be "
                            f"one (as torch)")
        if src.ndim != x.ndim or any(i > n for i, n in zip(idx.shape, src.shape)):
            raise RuntimeError(f"{name}: index {tuple(idx.shape)} must be no larger than src "
                               f"{src.shape} in every axis (torch's rule)")
    if idx.ndim != x.ndim or any(i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape))
                                 if d != dim):
        raise RuntimeError(f"{name}: index {tuple(idx.shape)} must have input {tuple(x.shape)}'s "
                           f"number of axes and be no larger off dim {dim} (torch's rule)")
    if src is None:         # (stored as torch stores it: 2.7 into integers is 2, -0.5 refused)
        src = _operand(fit_value(f"{name}()", value, x.dtype), x, f"{name}()")
    return _sh.Scatter.apply(x, src, index=idx.astype(np.int64, copy=False), axis=dim,
                             reduce=reduce)


def scatter_add(x, dim, index, src):
    """torch.scatter_add: x with src added at index along `dim` (repeated indices add up)."""
    return scatter(x, dim, index, src, reduce="add")


def _scatter_(x, dim, index, src=None, value=None, reduce=None):
    """x.scatter_(...) / x.scatter_add_(...): into x's own array (a tensor of no recorded
    graph, as the other in-place methods)."""
    return _store_result(x, "scatter_add_()" if reduce == "add" else "scatter_()",
                         lambda: scatter(x, dim, index, src, value, reduce), src)


def index_select(x, dim, index):
    """torch.index_select: the entries of x at `index` (1-d) along `dim`, differentiable."""
    dim = dim_index(dim, x.ndim, "index_select")
    idx = _on_device_of(x, index, "index_select")
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise TypeError(f"index_select: index must be a 1-d integer array, got {idx.dtype} "
                        f"{tuple(idx.shape)}")
    shape = tuple(idx.shape[0] if d == dim else n for d, n in enumerate(x.shape))
    spread = idx.reshape(tuple(-1 if d == dim else 1 for d in range(x.ndim)))
    return gather(x, dim, Tensor(xp_of(idx).broadcast_to(spread, shape)))


def argsort(x, dim=-1, descending=False):
    """torch.argsort, int64: equal values in their order (stable) either way, as torch's CPU
    sort keeps them; descending puts NaN first (torch's order of NaN)."""
    dim = dim_index(dim, x.ndim, "argsort") if x.ndim else 0
    xp = xp_of(x.data)
    if x.ndim == 0:
        return Tensor(xp.zeros((), np.int64))
    key = x.data.astype(np.float32) if is_half(x.dtype) else x.data   # (bfloat16's compares
    if not descending:                                                  # leave NaN be)
        return Tensor(xp.argsort(key, axis=dim, kind="stable").astype(np.int64, copy=False))
    # descending, ties first-come: the stable ascending order of the reversed values, mapped
    # back to the original positions and read from the end (NaN, last ascending, comes first)
    order = xp.argsort(xp.flip(key, axis=dim), axis=dim, kind="stable").astype(np.int64)
    return Tensor(xp.flip(x.shape[dim] - 1 - order, axis=dim))


def sort(x, dim=-1, descending=False):
    """torch.sort: (values, indices), the values' gradient going back to where each came from."""
    indices = argsort(x, dim, descending)
    if x.ndim == 0:
        return MaxResult(x, indices)
    return MaxResult(gather(x, dim, indices), indices)


def topk(x, k, dim=-1, largest=True, sorted=True):
    """torch.topk: the k largest (smallest) along `dim`, in order, with their indices."""
    dim = dim_index(dim, x.ndim, "topk")
    if not 0 <= int(k) <= x.shape[dim]:
        raise RuntimeError(f"topk: k ({k}) out of range for dim {dim} of size {x.shape[dim]}")
    values, indices = sort(x, dim, descending=largest)
    take = tuple(slice(0, int(k)) if d == dim else slice(None) for d in range(x.ndim))
    return MaxResult(getitem(values, take), Tensor(indices.data[take]))


class MaxResult(tuple):
    """(values, indices), as torch's max(dim) return (torch.return_types.max)."""
    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __new__(cls, values, indices):
        return super().__new__(cls, (values, indices))


def flatten(x, start_dim=0, end_dim=-1):
    """Dimensions start_dim..end_dim as one (torch.flatten)."""
    nd = builtins.max(x.ndim, 1)
    a, b = dim_index(start_dim, nd, "flatten"), dim_index(end_dim, nd, "flatten")
    if a > b:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for "
                         f"{x.ndim} dims")
    if x.ndim == 0:
        return reshape(x, 1)
    n = 1
    for d in x.shape[a:b + 1]:
        n *= d
    return reshape(x, *(x.shape[:a] + (n,) + x.shape[b + 1:]))


def unsqueeze(x, dim):
    """A new axis of size 1 at `dim` (torch.unsqueeze; negative counts from the new end)."""
    d = dim_index(dim, x.ndim + 1, "unsqueeze")
    return reshape(x, *(x.shape[:d] + (1,) + x.shape[d:]))


def squeeze(x, dim=None):
    """Axes of size 1 removed: all, or `dim`'s (an int or a tuple) where it has size 1 (as torch:
    an axis of another size stays)."""
    dims = range(x.ndim) if dim is None else (dim,) if isinstance(dim, (int, np.integer)) \
        else dim
    dims = [dim_index(d, builtins.max(x.ndim, 1), "squeeze") for d in dims]
    drop = {d for d in dims if x.shape[d] == 1} if x.ndim else set()
    return reshape(x, *(n for i, n in enumerate(x.shape) if i not in drop))


def reshape(x, *shape):
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    known = [n for n in shape if n != -1]
    size = int(np.prod(known)) if known else 1
    if shape.count(-1) > 1 or (-1 not in shape and size != x.size) or \
            (-1 in shape and (size == 0 or x.size % size)):
        raise ValueError(f"reshape: cannot view shape {x.shape} ({x.size} elements) as {shape}")
    return _sh.Reshape.apply(x, shape=shape)


def transpose(x, *axes):
    """x with its axes permuted: no axes, reversed (NumPy's, torch's .T); two axes, those two
    swapped (torch's transpose(dim0, dim1): NumPy's reading of (0, 1) on a 2-d tensor, a
    permutation that changes nothing, is never what a torch user meant); a tuple or one axis per
    dimension, that permutation (NumPy's, torch's permute)."""
    if len(axes) == 2 and all(isinstance(a, (int, np.integer)) for a in axes):
        for a in axes:
            if not -x.ndim <= a < x.ndim:
                raise ValueError(f"transpose: axis {a} is out of range for a {x.ndim}-d tensor")
        perm = list(range(x.ndim))
        i, j = axes[0] % x.ndim, axes[1] % x.ndim
        perm[i], perm[j] = perm[j], perm[i]
        axes = tuple(perm)
    axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
    if axes and sorted(a % x.ndim for a in axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of a {x.ndim}-d tensor")
    return _sh.Transpose.apply(x, axes=axes)


def broadcast_to(x, shape):
    """x repeated along its size-1 and new leading axes to `shape`: a stride-0 view (torch's
    expand / numpy.broadcast_to)."""
    shape = tuple(shape)
    if not _fits(x.shape, shape):
        raise ValueError(f"broadcast_to: shape {x.shape} cannot be broadcast to {shape}")
    return _sh.BroadcastTo.apply(x, shape=shape)


def concat(tensors, axis=None, *, dim=None):
    axis = _dim("concat", axis, dim, 0)
    _check_same_except("concat", tensors, axis)
    return _sh.Concat.apply(*_promoted(tensors), axis=axis)


def _promoted(tensors):
    """The tensors in the one dtype torch's promotion gives them (int64 with float32: float32,
    where NumPy's concatenate gives float64), each cast in the graph where it differs."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) < 2:
        return tensors
    target = functools.reduce(promote_types, dtypes)
    return [t if t.dtype == target else _astype(t, target) for t in tensors]


cat = concat


def tril(x, diagonal=0):
    """torch.tril: the lower triangle of the last two axes, from `diagonal` down."""
    return _triangle("tril", x, diagonal, upper=False)


def triu(x, diagonal=0):
    """torch.triu: the upper triangle of the last two axes, from `diagonal` up."""
    return _triangle("triu", x, diagonal, upper=True)


def _triangle(name, x, diagonal, upper):
    if x.ndim < 2:
        raise ValueError(f"{name}: input must have at least 2 dimensions, got shape {x.shape}")
    return _sh.Triangle.apply(x, diagonal=operator.index(diagonal), upper=upper)


def roll(x, shifts, dims=None):
    """torch.roll: entries moved `shifts` places along `dims` (an int or a tuple, with as many
    shifts), those pushed off one end coming back at the other; no dims: of the flattened
    tensor, its shape kept."""
    if dims is None:
        if not isinstance(shifts, (int, np.integer)) and len(shifts) != 1:
            raise ValueError(f"roll: {len(shifts)} shifts need as many dims, got dims=None")
        return reshape(roll(reshape(x, -1), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} differ in length")
    for shift, dim in zip(shifts, dims):
        dim = dim_index(dim, x.ndim, "roll")
        n = x.shape[dim]
        shift = operator.index(shift) % n if n else 0
        if shift:
            x = concat([narrow(x, dim, n - shift, shift), narrow(x, dim, 0, n - shift)], dim)
    return x


def bmm(a, b):
    """torch.bmm: batched products of two 3-d tensors of one batch size (matmul without its
    broadcasting)."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: expected two 3-d tensors of one batch size, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    return matmul(a, b)


def stack(tensors, axis=None, *, dim=None):
    axis = _dim("stack", axis, dim, 0)
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack: all tensors need one shape, got {sorted(shapes)}")
    return _sh.Stack.apply(*_promoted(tensors), axis=axis)


def unstack(x, axis=0):
    """The tuple of slices along `axis` (torch.unbind)."""
    if x.shape[axis] == 1:
        return (reshape(x, *(x.shape[:axis % x.ndim] + x.shape[axis % x.ndim + 1:])),)
    return _sh.Unstack.apply(x, axis=axis % x.ndim)


def _check_same_except(name, tensors, axis):
    ref = tensors[0].shape
    for t in tensors[1:]:
        if len(t.shape) != len(ref) or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref))
                                           if i != axis % len(ref)):
            raise ValueError(f"{name}: shapes {ref} and {t.shape} differ outside axis {axis}")


def getitem(x, index):
    """x[index], torch's way: where ints and index arrays mix, the ints select first (NumPy
    would take them as index arrays, and a slice between moves the indexed axes to the front)."""
    split = _ints_first(index, on_host=False)
    if split is not None:
        return getitem(getitem(x, split[0]), split[1])
    return _sh.GetItem.apply(x, index=index)


def _ints_first(index, on_host=True):
    """(the ints of `index` as a basic index, the rest of it) when it mixes ints (or 0-d integer
    arrays) with index arrays, else None. torch selects the ints first; NumPy counts them as
    index arrays, which reorders the result's axes when a slice lies between. on_host: a 0-d
    device int is read back (the first part must be a view, for an assignment); else it stays
    a 0-d index array there, which selects as an int does (0-d index arrays broadcast to no
    axes: nothing moves), without a host sync."""
    if not isinstance(index, tuple):
        return None
    index = tuple(i.data if isinstance(i, Tensor) else i for i in index)
    kinds = [_index_kind(i) for i in index]
    if not {"int", "array"} <= {kind for kind, _ in kinds}:
        return None
    first, rest = [], []
    for i, (kind, taken) in zip(index, kinds):
        if kind == "int":
            first.append(builtins.int(i) if on_host or not is_gpu(i) else i)
        elif kind == "new":              # None, or a bool scalar: an axis made, none taken
            rest.append(i)
        elif i is Ellipsis:
            first.append(i)
            rest.append(i)
        else:                            # a slice, or an array: every axis it takes, whole
            first.extend([slice(None)] * taken)
            rest.append(i)
    return tuple(first), tuple(rest)


def _index_kind(i):
    """(kind, axes of x it takes): 'int' (an int, a 0-d integer array), 'array' (an index
    array or list: a bool mask takes its ndim axes), 'new' (None or a bool scalar: takes none,
    adds one) or 'basic' (a slice, Ellipsis)."""
    if i is None or isinstance(i, (builtins.bool, np.bool_)):
        return "new", 0
    if isinstance(i, (builtins.int, np.integer)):
        return "int", 1
    if isinstance(i, (list, tuple)):            # (a tuple inside the index: a sequence, as a
        a = np.asarray(i)                       # list, for torch and NumPy alike)
        return "array", (a.ndim if a.dtype == np.bool_ else 1)
    ndim, dtype = getattr(i, "ndim", None), getattr(i, "dtype", None)
    if ndim is None:
        return "basic", 1
    kind = np.dtype(dtype).kind
    if ndim == 0:
        return ("int", 1) if kind in "iu" else ("new", 0) if kind == "b" else ("basic", 1)
    return "array", (ndim if kind == "b" else 1)


def reverse_padded(x, lengths):
    """x (T, B, ...) with each sequence b reversed within its first lengths[b] steps, the padding
    after it left in place (the reverse direction of a packed-sequence RNN). lengths: a Tensor or
    array of B ints in 1..T, on x's device."""
    n = _on_device_of(x, lengths, "reverse_padded")
    if n.dtype.kind not in "iu" or n.shape != (x.shape[1],):
        raise ValueError(f"reverse_padded: lengths must be {x.shape[1]} integers (one per "
                         f"sequence of x {x.shape}), got {n.dtype} {n.shape}")
    return _sh.ReversePadded.apply(x, n)


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(x, pad, mode="constant", value=None):
    """torch.nn.functional.pad: widths in its order (last_before, last_after, 2nd-last_before,
    ...), a negative one cropping; mode 'constant' (value, default 0), or 'reflect' (mirrored
    about the edge, which is not repeated), 'replicate' (the edge repeated) or 'circular'
    (wrapped round), which pad the last 1, 2 or 3 axes of a tensor of one or two more (torch's
    rule) and take no value. A copied element's gradient is added to its source's."""
    if mode not in PAD_MODES:
        raise NotImplementedError(f"pad: unrecognised padding mode {mode!r}; expected one of "
                                  f"{list(PAD_MODES)}")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: {pad} must hold (before, after) pairs for at most {x.ndim} axes")
    if mode != "constant":
        k = len(pad) // 2
        if value is not None and value != 0:
            raise RuntimeError(f"pad: padding mode {mode!r} doesn't take in value argument "
                               f"(got {value}), as torch")
        if k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):
            raise NotImplementedError(
                f"pad: padding size {len(pad)} is not supported for {x.ndim}D input in mode "
                f"{mode!r} (torch's rule: 2 widths pad the last axis of a 2-d or 3-d tensor, 4 "
                f"the last two of a 3-d or 4-d one, 6 the last three of a 4-d or 5-d one)")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    if any(b < 0 or a < 0 for b, a in widths):          # a negative width crops, as torch's
        crop = []
        for axis, ((b, a), n) in enumerate(zip(widths, x.shape)):
            start, stop = builtins.max(-b, 0), n - builtins.max(-a, 0)
            if stop < start:
                raise ValueError(f"pad: {tuple(pad)} crops more than axis {axis}'s size {n} "
                                 f"({-builtins.min(b, 0)} before, {-builtins.min(a, 0)} after)")
            crop.append(slice(start, stop))
        x = getitem(x, tuple(crop))
        widths = [(builtins.max(b, 0), builtins.max(a, 0)) for b, a in widths]
    for axis, ((b, a), n) in enumerate(zip(widths, x.shape)):
        if mode == "reflect" and builtins.max(b, a) >= n and (b or a):
            raise RuntimeError(f"pad: reflect padding {(b, a)} of axis {axis} must be less than "
                               f"its size {n} (input shape {tuple(x.shape)}), as torch")
        if mode in ("replicate", "circular") and (b or a) and n == 0:
            raise RuntimeError(f"pad: {mode} padding of axis {axis}, which is empty (input "
                               f"shape {tuple(x.shape)})")
        if mode == "circular" and builtins.max(b, a) > n:
            raise RuntimeError(f"pad: circular padding {(b, a)} of axis {axis} wraps around "
                               f"its size {n} more than once (input shape {tuple(x.shape)}), "
                               f"as torch refuses")
    if value is not None and x.dtype.kind in "iu" and \
            not np.iinfo(x.dtype).min <= value <= np.iinfo(x.dtype).max:
        raise RuntimeError(f"pad: value {value} cannot be converted to type {x.dtype} without "
                           f"overflow (as torch; it wrapped round here)")
    return _sh.Pad.apply(x, pad_width=tuple(widths), mode=mode,
                         value=0.0 if value is None else value)


def _on_device_of(x, a, name, what="the indices/target are"):
    """An index / target array moved to x's device; a Tensor elsewhere is a device mix."""
    if isinstance(a, Tensor):
        if a.device != x.device:
            raise RuntimeError(f"{name}: input is on {x.device} but {what} on {a.device}")
        return a.data
    return to_device(np.asarray(a) if isinstance(a, (list, tuple)) else a, x.device)


def embedding(indices, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """torch's: the rows of weight the indices pick (no gradient into padding_idx's row). With
    max_norm, each picked row whose norm_type-norm exceeds it is first scaled in place to
    max_norm (torch's renorm: max_norm / (norm + 1e-7)), as torch does. scale_grad_by_freq:
    each pick's gradient divided by how often its row is picked in `indices`."""
    if sparse:
        raise NotImplementedError("embedding: sparse gradients are not done here "
                                  "(docs/from_pytorch.md)")
    idx = _on_device_of(weight, indices, "embedding")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {idx.dtype}")
    if max_norm is not None:
        _renorm_rows(weight, idx, max_norm, norm_type)
    return _sh.Embedding.apply(weight, idx, padding_idx=padding_idx,
                               scale_grad_by_freq=bool(scale_grad_by_freq))


def _renorm_rows(weight, idx, max_norm, norm_type):
    """torch.embedding_renorm_: the rows idx picks, scaled in place to norm max_norm where
    theirs is larger (outside the graph, as torch's)."""
    xp = xp_of(weight.data)
    # indices checked before any row changes (the host raises; a device's bad ones are skipped,
    # their outputs NaN in the lookup)
    bad = out_of_range("embedding", idx, weight.shape[0], "index")
    rows = xp.unique(idx[~bad] if bad is not None else idx)
    w = weight.data[rows].astype(accumulation_dtype(weight.dtype))
    p = float(norm_type)
    norms = xp.abs(w).max(1) if p == math.inf else (xp.abs(w) ** p).sum(1) ** (1 / p)
    scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    weight.data[rows] = (w * scale[:, None]).astype(weight.dtype)
    mark_changed(weight, "embedding(max_norm=)")


# ---- convolution and normalization ------------------------------------------------------------

def _channels_last(*tensors):
    """Any 4-d operand stored channels-last (PyTorch's memory format): an NCHW-shaped op then runs
    on the NHWC views of its operands, as PyTorch's convolutions do -- cuDNN's NHWC kernels,
    results stored channels-last -- views taken inside the op (ops.nchw_views), no copies."""
    return any(isinstance(t, Tensor) and is_channels_last(t.data) for t in tensors)


def _nhwc_conv(x, weight):
    """A convolution runs channels-last (above) -- except float64 on the GPU: cuDNN has no
    float64 NHWC convolution engine (checked on the H100), so it runs as NCHW on the same views
    (their strides stated in the descriptors), and its result is stored NCHW."""
    return _channels_last(x, weight) and not (is_gpu(x.data) and x.data.dtype == np.float64)


def _check_conv(name, x, weight, ndim):
    if x.ndim != ndim or weight.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim}-d input and weight ({ndim - 1}-d input: one "
                         f"unbatched item), got input {x.shape} and weight {weight.shape}")
    _check_float(name, x, weight)


def _unbatched(x, weight, ndim, layout="NCHW"):
    """True for one item without its batch axis (torch's unbatched input: (C, H, W) to conv2d),
    which the convolutions run as a batch of one."""
    return x.ndim == ndim - 1 and weight.ndim == ndim and layout == "NCHW"


def _check_geometry(name, groups, bias, channels_out, stride, dilation, padding,
                    output_padding=(0, 0)):
    """torch's refusals of a convolution's numbers: strides, dilations and groups of at least
    1, no negative padding or output_padding, a bias of one value per output channel."""
    (s0, s1), (d0, d1), (p0, p1), (o0, o1) = stride, dilation, padding, output_padding
    if s0 >= 1 and s1 >= 1 and d0 >= 1 and d1 >= 1 and p0 >= 0 and p1 >= 0 and o0 >= 0 and \
            o1 >= 0 and groups >= 1 and (bias is None or bias.data.shape == (channels_out,)):
        return          # (the common case: no builtin called, an eager step makes 20 of these)
    pairs = {"stride": stride, "dilation": dilation, "padding": padding,
             "output_padding": output_padding}
    for what, least in (("stride", 1), ("dilation", 1), ("padding", 0), ("output_padding", 0)):
        v = pairs.get(what)
        if v is not None and builtins.min(v) < least:
            raise ValueError(f"{name}: {what} {v} must be {'positive' if least else 'non-negative'}"
                             f" (as torch)")
    if groups < 1:
        raise ValueError(f"{name}: groups must be positive, got {groups}")
    if bias is not None and tuple(bias.shape) != (channels_out,):
        raise ValueError(f"{name}: bias of shape {tuple(bias.shape)} for {channels_out} output "
                         f"channels: expected shape ({channels_out},) (as torch)")


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
           activation=None):
    """x (N, C, H, W), weight (K, C/groups, R, S) [NHWC: x (N, H, W, C), weight (K, R, S, C/g)].
    padding: a number, a pair, or 'valid' / 'same' (as torch).
    activation None, 'relu', 'tanh' or 'sigmoid' is applied to conv + bias; on the GPU the three
    run as one fused cuDNN graph where an engine supports it (for float16 / bfloat16 data, tanh
    and the sigmoid run as their own op, which keeps its input for the gradient)."""
    if _unbatched(x, weight, 4, layout):
        return squeeze(conv2d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups,
                              layout, activation), 0)
    _check_conv("conv2d", x, weight, 4)
    if activation not in (None, "relu", "tanh", "sigmoid"):
        raise ValueError(f"conv2d: activation must be None, 'relu', 'tanh' or 'sigmoid', got "
                         f"{activation!r}")
    C = x.shape[-1] if layout == "NHWC" else x.shape[1]
    Cg = weight.shape[-1] if layout == "NHWC" else weight.shape[1]
    if groups < 1 or C != Cg * groups or weight.shape[0] % groups:
        raise ValueError(f"conv2d: input has {C} channels (shape {x.shape}) but weight "
                         f"{weight.shape} with groups={groups} expects {Cg * groups}")
    if activation in ("tanh", "sigmoid") and x.dtype.itemsize == 2:
        # half data: these two take their gradient from their input, as the activation ops do
        # (from an output rounded to bfloat16, 1 - y^2 near saturation is mostly rounding), so
        # the convolution's output is kept and the activation runs as its own op
        act = tanh if activation == "tanh" else sigmoid
        return act(conv2d(x, weight, bias, stride, padding, dilation, groups, layout))
    stride, dilation = pair(stride), pair(dilation)
    if isinstance(padding, str):
        x, padding = _string_padding("conv2d", x, weight, padding, stride, dilation, layout)
    padding = pair(padding)
    _check_geometry("conv2d", groups, bias, weight.shape[0], stride=stride, dilation=dilation,
                    padding=padding)
    spatial, k = (x.shape[1:3], weight.shape[1:3]) if layout == "NHWC" else \
        (x.shape[2:], weight.shape[2:])
    for n, r, p, d in zip(spatial, k, padding, dilation):
        if n + 2 * p < d * (r - 1) + 1:
            raise ValueError(f"conv2d: the (dilated) kernel {tuple(k)} (dilation {dilation}) is "
                             f"larger than the padded input {tuple(spatial)} (padding "
                             f"{padding}): no output position (as torch refuses)")
    nchw = layout == "NCHW" and _nhwc_conv(x, weight)    # (NHWC views inside the op)
    return _conv.Conv2d.apply(x, weight, bias, stride=stride, pad=padding,
                              dilation=dilation, groups=groups,
                              layout="NHWC" if nchw else layout, nchw=nchw, activation=activation)


def _string_padding(name, x, weight, padding, stride, dilation, layout):
    """torch's padding='valid' (none) and 'same' (stride 1: the output as large as the input;
    d * (k - 1) split evenly, an odd one's extra at the end -- padded here, as torch pads it,
    since cuDNN pads both sides alike) -> (x, symmetric padding)."""
    if padding not in ("valid", "same"):
        raise ValueError(f"{name}: padding {padding!r} is neither 'valid' nor 'same' (nor a "
                         f"number)")
    if padding == "valid":
        return x, 0
    if pair(stride) != (1, 1):
        raise ValueError(f"{name}: padding='same' needs stride 1 (as torch), got stride "
                         f"{stride}")
    kernel = weight.shape[1:3] if layout == "NHWC" else weight.shape[2:]
    total = [d * (k - 1) for d, k in zip(pair(dilation), kernel)]
    extra = [t % 2 for t in total]
    if any(extra):
        x = pad(x, ((0, 0) if layout == "NHWC" else ()) + (0, extra[1], 0, extra[0]))
    return x, tuple(t // 2 for t in total)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """x (N, C, L), weight (K, C/groups, k): conv2d on (N, C, 1, L). padding: a number, or
    'valid' / 'same' (as torch)."""
    if _unbatched(x, weight, 3):
        return squeeze(conv1d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups),
                       0)
    _check_conv("conv1d", x, weight, 3)
    stride, dilation = single("conv1d", stride), single("conv1d", dilation)
    padding = padding if isinstance(padding, str) else single("conv1d", padding)
    if padding == "same" and stride != 1:
        raise ValueError(f"conv1d: padding='same' needs stride 1 (as torch), got stride {stride}")
    y = conv2d(reshape(x, x.shape[0], x.shape[1], 1, x.shape[2]),
               reshape(weight, weight.shape[0], weight.shape[1], 1, weight.shape[2]), bias,
               (1, stride), padding if isinstance(padding, str) else (0, padding),
               (1, dilation), groups)
    return reshape(y, y.shape[0], y.shape[1], y.shape[3])


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """PyTorch's conv_transpose1d: x (N, Cin, L), weight (Cin, Cout/groups, k); conv_transpose2d
    on (N, Cin, 1, L)."""
    if _unbatched(x, weight, 3):
        return squeeze(conv_transpose1d(unsqueeze(x, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation), 0)
    _check_conv("conv_transpose1d", x, weight, 3)
    stride, padding, output_padding, dilation = (
        single("conv_transpose1d", v) for v in (stride, padding, output_padding, dilation))
    y = conv_transpose2d(reshape(x, x.shape[0], x.shape[1], 1, x.shape[2]),
                         reshape(weight, weight.shape[0], weight.shape[1], 1, weight.shape[2]),
                         bias, (1, stride), (0, padding), (0, output_padding), groups,
                         (1, dilation))
    return reshape(y, y.shape[0], y.shape[1], y.shape[3])


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, layout="NCHW"):
    """PyTorch's conv_transpose2d: weight (Cin, Cout/groups, R, S)."""
    if _unbatched(x, weight, 4, layout):
        return squeeze(conv_transpose2d(unsqueeze(x, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation, layout), 0)
    _check_conv("conv_transpose2d", x, weight, 4)
    stride, padding, output_padding, dilation = (pair(v) for v in
                                                 (stride, padding, output_padding, dilation))
    C = x.shape[-1] if layout == "NHWC" else x.shape[1]
    if C != weight.shape[0]:
        raise ValueError(f"conv_transpose2d: input has {C} channels (shape {x.shape}) but weight "
                         f"{weight.shape} (Cin, Cout/groups, R, S) expects {weight.shape[0]}")
    Cout = (weight.shape[-1] if layout == "NHWC" else weight.shape[1]) * groups
    _check_geometry("conv_transpose2d", groups, bias, Cout, stride=stride, dilation=dilation,
                    padding=padding, output_padding=output_padding)
    if C % groups:
        raise ValueError(f"conv_transpose2d: {C} input channels (shape {x.shape}) do not divide "
                         f"into groups={groups} (as torch)")
    for i in range(2):
        if not (output_padding[i] < stride[i] or output_padding[i] < dilation[i]):
            raise ValueError(f"conv_transpose2d: output_padding {output_padding} must be smaller "
                             f"than either stride {stride} or dilation {dilation}")
    spatial = (1, 2) if layout == "NHWC" else (2, 3)
    size = [_conv.transposed_size(x.shape[a], weight.shape[a], stride[i], padding[i],
                                  output_padding[i], dilation[i]) for i, a in enumerate(spatial)]
    if builtins.min(size) < 1:
        raise ValueError(f"conv_transpose2d: output size {size} is not positive (input {x.shape}, "
                         f"weight {weight.shape}, padding {padding})")
    nchw = layout == "NCHW" and _nhwc_conv(x, weight)    # (NHWC views inside the op)
    return _conv.ConvTranspose2d.apply(x, weight, bias, stride=stride, dilation=dilation,
                                       groups=groups, begin=padding, size=tuple(size),
                                       layout="NHWC" if nchw else layout, nchw=nchw)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """As torch.nn.functional.batch_norm; running_* are arrays/Tensors updated in place."""
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2-d input (N, C, ...), got {x.shape}")
    C = x.shape[1]
    if training and x.size // C <= 1:
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                         f"got input of shape {x.shape}")
    xp = np if x.device == "cpu" else cupy()
    rm, rv = (None if r is None else _on_device_of(x, r, "batch_norm") if isinstance(r, Tensor)
              else r for r in (running_mean, running_var))
    for r in (rm, rv):
        if r is not None and is_gpu(r) != (x.device != "cpu"):
            raise RuntimeError(f"batch_norm: input is on {x.device} but the running statistics "
                               f"are on {'cpu' if not is_gpu(r) else r.device.id}")
    if rm is None and not training:
        training = True       # no running statistics: batch statistics, as torch
    # cuDNN's rule, kept on both paths: float64 statistics and affine parameters for float64
    # data, float32 for float32 / float16 data
    pdtype = np.float64 if x.dtype == np.float64 else np.float32
    weight = weight if weight is not None else Tensor(xp.ones(C, dtype=pdtype))
    bias = bias if bias is not None else Tensor(xp.zeros(C, dtype=pdtype))
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", rm), ("running_var", rv)):
        if t is not None and tuple(t.shape) != (C,):
            raise ValueError(f"batch_norm: {name} has shape {tuple(t.shape)}, expected ({C},) "
                             f"for input {x.shape}")
        if t is not None and t.dtype != pdtype:
            raise TypeError(f"batch_norm: {name} is {t.dtype}, but {x.dtype} input takes "
                            f"{np.dtype(pdtype).name} statistics and parameters")
    nchw = _channels_last(x)          # channels-last (N, C, H, W): batch norm of its NHWC view
    return _norm.BatchNorm.apply(x, weight, bias, running_mean=rm, running_var=rv,
                                 training=training, momentum=momentum, eps=eps,
                                 layout="NHWC" if nchw else "NCHW", nchw=nchw)


# ---- losses -----------------------------------------------------------------------------------

def _checkpair(name, a, b, broadcast=None):
    """The input and target of a loss, shapes checked; two floating Tensors of different dtypes
    both in the wider one (as torch promotes: a bfloat16 output and a float32 target make a
    float32 loss, whichever comes first; the cast is differentiable). broadcast: shapes that
    differ but broadcast are taken, both stretched to the common shape (as torch's mse_loss,
    l1_loss, ...: 'warn' with its warning, 'quiet' without, as kl_div); else refused."""
    if tuple(a.shape) != tuple(b.shape):
        try:
            common = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        except ValueError:
            common = None
        if broadcast is None or common is None:
            raise ValueError(f"{name}: input shape {tuple(a.shape)} and target shape "
                             f"{tuple(b.shape)} differ")
        if broadcast == "warn":
            warnings.warn(f"{name}: using a target size ({tuple(b.shape)}) that is different "
                          f"to the input size ({tuple(a.shape)}); this will likely lead to "
                          f"incorrect results due to broadcasting (torch's warning)",
                          UserWarning, stacklevel=3)
        a, b = (broadcast_to(v, common) if isinstance(v, Tensor) else v for v in (a, b))
    if isinstance(b, Tensor) and is_floating(a.dtype) and is_floating(b.dtype) and \
            a.dtype != b.dtype:
        common = promote_types(a.dtype, b.dtype)      # (float16 with bfloat16: float32)
        return a.astype(common), b.astype(common)
    return a, _operand(b, a)


REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(name, reduction):
    """A loss's `reduction`, one of PyTorch's three (anything else was an unreduced loss on the
    NumPy path and a sum on the GPU's)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def binary_cross_entropy(p, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """torch's: -(t log p + (1 - t) log(1 - p)) per element, times `weight` (a constant that
    broadcasts to p) where given, then reduced."""
    _legacy_reduction("binary_cross_entropy", size_average, reduce)
    _check_reduction("binary_cross_entropy", reduction)
    p, target = _checkpair("binary_cross_entropy", p, target)
    if weight is None:
        return _loss.BCELoss.apply(p, target, reduction=reduction)
    return _weighted(_loss.BCELoss.apply(p, target, reduction="none"), weight, reduction,
                     "binary_cross_entropy")


def binary_cross_entropy_with_logits(x, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """torch's: BCE of sigmoid(x) in its stable form; pos_weight (per class, the last axis)
    scales the positive term: l = (1 - t) x + (1 + (pw - 1) t) softplus(-x); weight as BCE's."""
    name = "binary_cross_entropy_with_logits"
    _legacy_reduction(name, size_average, reduce)
    _check_reduction(name, reduction)
    x, target = _checkpair(name, x, target)
    if weight is None and pos_weight is None:
        return _loss.BCEWithLogitsLoss.apply(x, target, reduction=reduction)
    if pos_weight is None:
        loss = _loss.BCEWithLogitsLoss.apply(x, target, reduction="none")
    else:
        if isinstance(target, Tensor) and target.requires_grad and is_grad_enabled():
            raise NotImplementedError(f"{name}: gradient with respect to the target is not "
                                      f"implemented; detach() the target")
        pw = _constant_like(x, pos_weight, name, "pos_weight")
        t = target.data if isinstance(target, Tensor) else target
        # softplus(-x) is the loss of a target of 1: the op's own stable form and gradient
        softplus_neg = _loss.BCEWithLogitsLoss.apply(x, xp_of(x.data).ones_like(x.data),
                                                     reduction="none")
        loss = x * Tensor((1 - t).astype(x.dtype, copy=False)) + softplus_neg * Tensor(
            (1 + (pw - 1) * t).astype(x.dtype, copy=False))
    return _weighted(loss, weight, reduction, name) if weight is not None else \
        _reduced(loss, reduction)


def _store_result(x, name, compute, *others):
    """An in-place method whose out-of-place form is `compute`: into x's own array, on a
    tensor of no recorded graph (as the other in-place methods; `others`: its operands, which
    may tie it to one)."""
    _in_place_check(x, name, *(t for t in others if isinstance(t, Tensor)))
    with no_grad():
        y = compute()
    return _store(x, y.data, name)


def _no_dims(name):
    raise TypeError(f"{name}() missing required argument 'dims' (as torch's)")


def _mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2-d tensors, got {a.shape} and {b.shape} (as torch)")
    return matmul(a, b)


def _t(x):
    """torch's .t(): a 2-d tensor transposed, a 0- or 1-d one as it is."""
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, got {x.ndim} (as torch)")
    return x if x.ndim < 2 else transpose(x, 1, 0)


def _new(x, kind, args, dtype, device):
    """torch's x.new_zeros / new_ones / new_empty / new_full: x's dtype and device unless
    given."""
    from . import creation
    kw = {"dtype": x.dtype if dtype is None else dtype,
          "device": x.device if device is None else device}
    if kind == "full":
        return creation.full(args[0], args[1], **kw)
    return getattr(creation, kind)(*args, **kw)


def _multinomial(x, num_samples, replacement=False, *, generator=None):
    from .creation import multinomial
    return multinomial(x, num_samples, replacement, generator=generator)


def _new_tensor(x, data, dtype, device):
    from .tensor import tensor
    return tensor(data, dtype=x.dtype if dtype is None else dtype,
                  device=x.device if device is None else device)


def _legacy_reduction(name, size_average, reduce):
    if size_average is not None or reduce is not None:
        raise TypeError(f"{name}: size_average and reduce (torch's deprecated arguments) are not "
                        f"taken; use reduction='mean' | 'sum' | 'none'")


def _constant_like(x, value, name, what):
    """A constant weight on x's device, in x's dtype (a Tensor that requires grad refused: as
    torch's loss weights, it is not differentiated)."""
    if isinstance(value, Tensor) and value.requires_grad:
        raise TypeError(f"{name}: {what} must be a constant (it requires grad here)")
    a = _on_device_of(x, value, name)
    return a.astype(x.dtype, copy=False)


def _weighted(loss, weight, reduction, name):
    w = _constant_like(loss, weight, name, "weight")
    try:
        fits = np.broadcast_shapes(tuple(w.shape), loss.shape) == loss.shape
    except ValueError:
        fits = False
    if not fits:          # (as torch: a weight that would grow the loss's shape is refused)
        raise ValueError(f"{name}: weight of shape {tuple(w.shape)} does not broadcast to the "
                         f"input's {loss.shape}")
    return _reduced(loss * Tensor(w), reduction)


def _reduced(loss, reduction):
    return loss if reduction == "none" else loss.mean() if reduction == "mean" else loss.sum()


def mse_loss(a, b, reduction="mean"):
    _check_reduction("mse_loss", reduction)
    a, b = _checkpair("mse_loss", a, b, "warn")
    return _loss.MSELoss.apply(a, b, reduction=reduction)


def one_hot(target, num_classes=-1):
    """torch.nn.functional.one_hot: int64 (..., num_classes), 1 at each index; num_classes -1:
    the largest index + 1 (read back from a device, as torch's)."""
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"one_hot: takes class indices (integers), got {t.dtype}")
    xp = xp_of(t)
    n = builtins.int(t.max()) + 1 if num_classes == -1 and t.size else builtins.int(num_classes)
    if t.size and (builtins.int(t.min()) < 0 or builtins.int(t.max()) >= n):
        raise RuntimeError(f"one_hot: class values must be in [0, {n}), got "
                           f"[{builtins.int(t.min())}, {builtins.int(t.max())}]")
    return Tensor((t[..., None] == xp.arange(n)).astype(np.int64))


def nll_loss(logp, target, weight=None, *args, ignore_index=-100, reduction="mean"):
    """torch.nn.functional.nll_loss: -logp[n, target[n]] (logp (N, C, *d), target (N, *d)),
    weighted per class, ignore_index counting for nothing; 'mean' divides by the weights of the
    targets counted. Composed of a gather of each item's class and its weight, so both paths
    and the gradient come with it; an ignored item is 0 whatever its row holds (-inf included).
    An index out of range: the host raises, a device gives NaN (as cross_entropy)."""
    if args:
        raise TypeError("nll_loss: ignore_index and reduction are keyword-only here (torch's "
                        "positional places after weight are its deprecated size_average)")
    _check_reduction("nll_loss", reduction)
    t = _on_device_of(logp, target, "nll_loss")
    if t.dtype.kind not in "iu":
        raise TypeError(f"nll_loss: target must hold class indices (integers), got {t.dtype}")
    if logp.ndim == 1:                        # (C,): one item
        loss = nll_loss(reshape(logp, 1, -1), Tensor(t.reshape(1)), weight,
                        ignore_index=ignore_index, reduction=reduction)
        return reshape(loss, ()) if reduction == "none" else loss
    if (logp.shape[0],) + tuple(logp.shape[2:]) != tuple(t.shape):
        raise ValueError(f"nll_loss: input {tuple(logp.shape)} (N, C, ...) and target "
                         f"{tuple(t.shape)} (N, ...) do not match")
    C, xp = logp.shape[1], xp_of(t)
    bad = out_of_range("nll_loss", t, C, "target", skip=ignore_index)
    valid = t != ignore_index
    w = _class_weight(logp, weight)
    w = xp.ones(C, logp.dtype) if w is None else w.astype(logp.dtype, copy=False)
    safe = xp.where(valid, t, 0)
    if bad is not None:                       # (a device: NaN where a target is out of range)
        safe = xp.where(bad, 0, safe)
    weights = w[safe] * valid                 # each item's class weight, 0 where ignored
    if bad is not None:
        weights = xp.where(bad, xp.nan, weights)
    # only each item's own class is read (a -inf elsewhere, a class ruled out, stays out of it)
    picked = squeeze(gather(logp, 1, Tensor(safe[:, None])), 1)
    losses = where(Tensor(valid), -(picked * Tensor(weights.astype(logp.dtype))), 0.0)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return sum(losses)
    # the mean over the weights counted; none counted (every target ignored): NaN, with a zero
    # gradient, as torch (a 0 / 0 would make the gradient NaN too)
    total = weights.sum().astype(logp.dtype)
    return sum(losses) / Tensor(xp.where(total == 0, 1, total).astype(logp.dtype)) + \
        Tensor(xp.where(total == 0, xp.nan, 0).astype(logp.dtype))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm: over the last len(normalized_shape) axes, (x - mean) /
    sqrt(biased var + eps), times weight plus bias. Composed of reductions and arithmetic."""
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else \
        tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ValueError(f"layer_norm: input {tuple(x.shape)} does not end in normalized_shape "
                         f"{shape}")
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    centred = x - mean(x, axes, keepdims=True)
    y = centred / (mean(centred * centred, axes, keepdims=True) + eps) ** 0.5
    if weight is not None:
        y = y * weight
    return _as_half_input(y if bias is None else y + bias, x)


def _as_half_input(y, x):
    """A norm's result in its input's float16 / bfloat16 where float32 weights widened it, as
    torch's mixed-dtype norms give it (a bfloat16 model with float32 norm parameters)."""
    return y.to(x.dtype) if y.dtype != x.dtype and is_half(x.dtype) else y


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: x (N, C, ...) normalized over each of num_groups groups
    of C / num_groups channels (and every spatial position) with the biased variance, then a
    per-channel weight and bias. Composed of layer_norm's arithmetic on an (N, G, -1) view;
    channels-last input runs as it is laid out (reshape copies where it must)."""
    if x.ndim < 2:
        raise ValueError(f"group_norm: expected at least 2-d input (N, C, ...), got {x.shape}")
    N, C = x.shape[:2]
    if num_groups < 1 or C % num_groups:
        raise ValueError(f"group_norm: {C} channels do not divide into num_groups={num_groups} "
                         f"(as torch refuses)")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise ValueError(f"group_norm: {name} of shape {tuple(p.shape)} for {C} channels")
    y = x
    if x.size:                                     # (an empty batch: nothing to normalize)
        group = x.size // N // num_groups
        y = reshape(layer_norm(reshape(x, N, num_groups, group), (group,), eps=eps), *x.shape)
    per_channel = (1, C) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * reshape(weight, *per_channel)
    return _as_half_input(y if bias is None else y + reshape(bias, *per_channel), x)


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm: use_input_stats, each sample's own statistics per
    channel (a group_norm of one channel a group), and the running statistics, where given,
    moved toward the batch's average of them (the variances unbiased), as torch's; else the
    running statistics (evaluation of a module that tracks them)."""
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expected (N, C, L) or (N, C, H, W) input, got "
                         f"{x.shape}")
    C = x.shape[1]
    if (running_mean is None) != (running_var is None):
        raise ValueError("instance_norm: running_mean and running_var must either both be None "
                         "or neither be None (as torch)")
    if use_input_stats:
        if math.prod(x.shape[2:]) <= 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {x.shape}")
        if running_mean is not None:              # (and running_var: checked above)
            _track_instance_statistics(x, running_mean, running_var, momentum)
        return group_norm(x, C, weight, bias, eps)
    if running_mean is None:
        raise ValueError("instance_norm: use_input_stats=False needs running_mean and "
                         "running_var (as torch)")
    shape = (1, C) + (1,) * (x.ndim - 2)
    y = (x - reshape(running_mean, shape)) * rsqrt(reshape(running_var, shape) + eps)
    if weight is not None:
        y = y * reshape(weight, shape)
    if bias is not None:
        y = y + reshape(bias, shape)
    return _as_half_input(y, x)        # (half data: float32 statistics, a result of its dtype)


def _track_instance_statistics(x, running_mean, running_var, momentum):
    """running = (1 - momentum) running + momentum * (the batch's mean of each sample's
    per-channel mean / unbiased variance), in place and outside the graph (torch's)."""
    axes = tuple(range(2, x.ndim))
    n = math.prod(x.shape[2:])
    with no_grad():
        mean_x = mean(x, axes, keepdims=True)
        d = x - mean_x
        var = sum(d * d, axes) / (n - 1)
        for running, batch in ((running_mean, mean(reshape(mean_x, x.shape[:2]), 0)),
                               (running_var, mean(var, 0))):
            running.copy_(running * (1 - momentum) + batch.to(running.dtype) * momentum)


def masked_mse_loss(a, b, mask):
    """Mean of (a - b)**2 over the elements where mask (broadcasting to a) is True: padded frames
    of a variable-length batch count for nothing, neither in the sum nor in the count."""
    a, b = _checkpair("masked_mse_loss", a, b)
    m = _on_device_of(a, mask, "masked_mse_loss")
    if m.dtype != bool:
        raise TypeError(f"masked_mse_loss: the mask must be boolean, got {m.dtype}")
    return _loss.MaskedMSELoss.apply(a, b, mask=m)


def l1_loss(a, b, reduction="mean"):
    _check_reduction("l1_loss", reduction)
    a, b = _checkpair("l1_loss", a, b, "warn")
    return _loss.L1Loss.apply(a, b, reduction=reduction)


def smooth_l1_loss(a, b, reduction="mean", beta=1.0):
    """torch's: 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (d = a - b); beta 0
    is l1_loss. Composed: both paths and the gradients (torch's at |d| = beta) come with it."""
    _check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta} (as torch)")
    if beta == 0:
        return l1_loss(a, b, reduction)
    a, b = _checkpair("smooth_l1_loss", a, b, "warn")
    d = a - b
    size = absolute(d)
    return _reduced(where(size < beta, d * d * (0.5 / beta), size - 0.5 * beta), reduction)


def huber_loss(a, b, reduction="mean", delta=1.0):
    """torch's: 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere (d = a - b)."""
    _check_reduction("huber_loss", reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta} (as torch)")
    a, b = _checkpair("huber_loss", a, b, "warn")
    d = a - b
    size = absolute(d)
    return _reduced(where(size < delta, d * d * 0.5, (size - 0.5 * delta) * delta), reduction)


def kl_div(logp, target, reduction="mean", log_target=False):
    """torch's: target (log target - logp) pointwise (0 where target is 0, torch's xlogy), or
    exp(target) (target - logp) with log_target; reduction also 'batchmean' (the sum over the
    batch size, the KL divergence's mean). The target's gradient comes too, as torch's (where
    the target is 0, that of -target logp alone: torch's is NaN there)."""
    if reduction not in REDUCTIONS + ("batchmean",):
        raise ValueError(f"kl_div: reduction must be 'mean', 'batchmean', 'sum' or 'none', got "
                         f"{reduction!r}")
    batch = logp.shape[0] if logp.ndim else 1          # (the input's, as torch's batchmean)
    logp, target = _checkpair("kl_div", logp, target, "quiet")
    if log_target:
        loss = exp(target) * (target - logp)
    else:
        zero = target == 0
        loss = where(zero, 0.0, target * log(where(zero, 1.0, target))) - target * logp
    if reduction == "batchmean":
        return sum(loss) / batch
    return _reduced(loss, reduction)


def cross_entropy(logits, target, weight=None, *args, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """torch's F.cross_entropy: logits (N, C, *d) -- or (C,), one unbatched item -- and target
    either class indices (N, *d) of an integer dtype or class probabilities of the logits' shape
    (a floating dtype: -sum_c p_c log softmax(x)_c, its gradient reaching the target too, means
    over the N * d items; no ignore_index there, as torch); `weight` (C,) per class, and
    `label_smoothing` in [0, 1]. The options after weight are keyword-only (torch's third to
    fifth places are its deprecated size_average / reduce)."""
    if args:
        raise TypeError("cross_entropy: ignore_index, reduction and label_smoothing are "
                        "keyword-only here (torch's positional places after weight are its "
                        "deprecated size_average and reduce)")
    _check_reduction("cross_entropy", reduction)
    if logits.ndim == 1:                     # (C,): one item, as torch's unbatched input
        target = target if isinstance(target, Tensor) else \
            Tensor(_on_device_of(logits, target, "cross_entropy"))
        loss = cross_entropy(reshape(logits, 1, -1), reshape(target, (1,) + target.shape),
                             weight, ignore_index=ignore_index, reduction=reduction,
                             label_smoothing=label_smoothing)
        return reshape(loss, ()) if reduction == "none" else loss
    t = Tensor(_on_device_of(logits, target, "cross_entropy"))
    if is_floating(t.dtype) and tuple(t.shape) != tuple(logits.shape):
        raise TypeError(f"cross_entropy: target must hold class indices (integers, shape "
                        f"(N, ...)) or class probabilities (floating, the logits' shape "
                        f"{tuple(logits.shape)}); got {t.dtype} of shape {tuple(t.shape)}")
    if is_floating(t.dtype):
        return _cross_entropy_probabilities(logits, target, weight, ignore_index, reduction,
                                            label_smoothing)
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold class indices (integers) or class "
                        f"probabilities (floating), got {t.dtype}")
    if (logits.shape[0],) + tuple(logits.shape[2:]) != tuple(t.shape):
        raise ValueError(f"cross_entropy: logits {tuple(logits.shape)} (N, C, ...) and target "
                         f"{tuple(t.shape)} (N, ...) do not match")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got "
                         f"{label_smoothing}")
    w = _class_weight(logits, weight)
    return _loss.CrossEntropyLoss.apply(logits, t, weight=w, ignore_index=ignore_index,
                                        reduction=reduction, label_smoothing=label_smoothing)


def _class_weight(logits, weight):
    """cross_entropy's `weight` on the logits' device, checked: one floating value a class, a
    constant (one that requires grad is refused: its gradient would be dropped silently)."""
    if weight is None:
        return None
    if isinstance(weight, Tensor) and weight.requires_grad and is_grad_enabled():
        raise TypeError("cross_entropy / nll_loss: a weight that requires grad is not "
                        "differentiated here; pass weight.detach() (or a constant)")
    w = _on_device_of(logits, weight, "cross_entropy")
    if tuple(w.shape) != (logits.shape[1],):
        raise ValueError(f"cross_entropy: a weight of shape {tuple(w.shape)} for "
                         f"{logits.shape[1]} classes (it needs one per class)")
    if not is_floating(w.dtype):
        raise TypeError(f"cross_entropy: weight must be floating, got {w.dtype}")
    return w


def _cross_entropy_probabilities(logits, target, weight, ignore_index, reduction, smoothing):
    """cross_entropy of class-probability targets, composed of log_softmax, products and sums
    (their gradients reach the logits and, where it requires grad, the target)."""
    if ignore_index != -100:
        raise ValueError(f"cross_entropy: ignore_index ({ignore_index}) is not supported for "
                         f"class-probability (floating) targets, as in torch")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    p = target if isinstance(target, Tensor) else \
        Tensor(_on_device_of(logits, target, "cross_entropy"))     # (of the logits' shape)
    C = logits.shape[1]
    if smoothing:
        p = p * (1.0 - smoothing) + smoothing / C
    w = _class_weight(logits, weight)
    if w is not None:
        p = p * reshape(Tensor(w), (1, C) + (1,) * (logits.ndim - 2))
    loss = -sum(p * log_softmax(logits, dim=1), dim=1)
    return {"mean": mean, "sum": sum}[reduction](loss) if reduction != "none" else loss


# ---- pooling ----------------------------------------------------------------------------------
# Composed of the ops above, so both paths have them and their gradients come with them: each of
# a window's kh * kw offsets is one strided slice of the (padded) input, the slices are stacked
# and reduced -- max(dim=0), whose gradient goes to the first maximum in the window's row-major
# order, as torch's kernels pick it; or a sum divided by each window's count. A launch per
# offset on a GPU: a teaching engine's pooling, not cuDNN's.

def _pool_args(name, x, kernel_size, stride, padding, dilation, ceil_mode):
    """(unbatched, x as (N, C, H, W), k, s, p, d, (oh, ow), extra padding after) by torch's
    rules for 2-d pooling, refusals in its words."""
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape "
                         f"{x.shape}")
    if not is_floating(x.dtype):
        raise TypeError(f"{name}: expected a floating input, got {x.dtype}")
    k = pair(kernel_size)
    s = k if stride is None or (not isinstance(stride, (int, np.integer)) and
                                len(stride) == 0) else pair(stride)
    p, d = pair(padding), pair(dilation)
    if builtins.min(k + s + d) < 1 or builtins.min(p) < 0:
        raise ValueError(f"{name}: kernel_size {k}, stride {s} and dilation {d} must be positive "
                         f"and padding {p} non-negative")
    if any(pi > ki // 2 for pi, ki in zip(p, k)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, but got "
                         f"pad={p}, kernel_size={k} (torch's rule)")
    unbatched = x.ndim == 3
    if unbatched:
        x = unsqueeze(x, 0)
    out, extra = [], []
    for n, ki, si, pi, di in zip(x.shape[2:], k, s, p, d):
        span = di * (ki - 1) + 1
        o = (n + 2 * pi - span + ((si - 1) if ceil_mode else 0)) // si + 1
        if ceil_mode and (o - 1) * si >= n + pi:      # (a last window starting in the padding)
            o -= 1
        if o < 1:
            raise ValueError(f"{name}: input {tuple(x.shape)} with kernel_size {k}, stride {s}, "
                             f"padding {p}, dilation {d}: output size is too small ({o})")
        out.append(o)
        extra.append(builtins.max(0, (o - 1) * si + span - (n + 2 * pi)))
    return unbatched, x, k, s, p, d, tuple(out), tuple(extra)


def _windows(x, k, s, d, out):
    """The kh * kw offsets' strided slices of padded x, stacked on a new first axis."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, s, d, out
    return stack([getitem(x, (slice(None), slice(None),
                               slice(r * dh, r * dh + (oh - 1) * sh + 1, sh),
                               slice(c * dw, c * dw + (ow - 1) * sw + 1, sw)))
                  for r in range(kh) for c in range(kw)])


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """torch.nn.functional.max_pool2d: x (N, C, H, W) or (C, H, W); padding counts as -inf;
    return_indices also gives each maximum's flat index into its input plane (H * W)."""
    unbatched, x, k, s, p, d, out, extra = _pool_args("max_pool2d", x, kernel_size, stride,
                                                      padding, dilation, ceil_mode)
    padded = pad(x, (p[1], p[1] + extra[1], p[0], p[0] + extra[0]), value=-np.inf)
    y, which = max(_windows(padded, k, s, d, out), dim=0)
    if unbatched:
        y = squeeze(y, 0)
    if not return_indices:
        return y
    xp, (oh, ow), W = xp_of(which.data), out, x.shape[3]
    r, c = which.data // k[1], which.data % k[1]
    rows = xp.arange(oh).reshape(oh, 1) * s[0] - p[0] + r * d[0]
    cols = xp.arange(ow).reshape(1, ow) * s[1] - p[1] + c * d[1]
    index = Tensor((rows * W + cols).astype(np.int64))
    return y, (Tensor(index.data[0]) if unbatched else index)


def _window_counts(n, k, s, p, o, include_pad):
    """Each of o windows' element count along one axis of size n: within the padded axis
    [-p, n + p) (count_include_pad), else within [0, n); a ceil-mode window's part past the
    padding never counts (torch's avg_pool2d)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    if not include_pad:
        start, end = np.maximum(start, 0), np.minimum(end, n)
    return end - start


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """torch.nn.functional.avg_pool2d: x (N, C, H, W) or (C, H, W); each window's sum over its
    count (count_include_pad: padding zeros counted) or over divisor_override."""
    unbatched, x, k, s, p, d, out, extra = _pool_args("avg_pool2d", x, kernel_size, stride,
                                                      padding, 1, ceil_mode)
    if divisor_override is not None and int(divisor_override) < 1:
        raise ValueError(f"avg_pool2d: divisor_override must be positive, got "
                         f"{divisor_override}")
    padded = pad(x, (p[1], p[1] + extra[1], p[0], p[0] + extra[0]))
    total = sum(_windows(padded, k, s, d, out), dim=0)
    if divisor_override is not None:
        y = total / float(divisor_override)
    else:
        counts = np.outer(*(_window_counts(n, ki, si, pi, o, count_include_pad)
                            for n, ki, si, pi, o in zip(x.shape[2:], k, s, p, out)))
        y = total / Tensor(to_device(counts.astype(x.dtype), x.device))
    return squeeze(y, 0) if unbatched else y


def _adaptive_bounds(n, o):
    """torch's adaptive windows along an axis of n into o: [floor(i n / o), ceil((i + 1) n / o))."""
    return [(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]


def _adaptive(name, x, output_size, reduce):
    """x's 2-d adaptive pooling into output_size by `reduce` over each window, separably: each
    row's part of the window, then those results down the window's rows (a max of the rows'
    maxima is the window's, and the first of them in row-major order, as torch's kernel picks
    it; a mean of equal-width rows' means is the window's)."""
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape "
                         f"{x.shape}")
    if not is_floating(x.dtype):
        raise TypeError(f"{name}: expected a floating input, got {x.dtype}")
    size = (output_size, output_size) if isinstance(output_size, (int, np.integer)) or \
        output_size is None else tuple(output_size)
    size = tuple(n if o is None else int(o) for n, o in zip(x.shape[-2:], size))
    if builtins.min(size) < 1 or builtins.min(x.shape[-2:]) < 1:
        raise ValueError(f"{name}: output_size {size} and the input's H, W {x.shape[-2:]} must be "
                         f"positive")
    for axis, o in ((x.ndim - 1, size[1]), (x.ndim - 2, size[0])):
        n = x.shape[axis]
        if n == o:
            continue
        parts = []
        for a, b in _adaptive_bounds(n, o):
            index = [slice(None)] * x.ndim
            index[axis] = slice(a, b)
            parts.append(reduce(getitem(x, tuple(index)), axis))
        x = stack(parts, axis=axis)
    return x


def adaptive_avg_pool2d(x, output_size):
    """torch.nn.functional.adaptive_avg_pool2d (an int or a pair; None keeps that size)."""
    return _adaptive("adaptive_avg_pool2d", x, output_size,
                     lambda part, axis: mean(part, axis=axis))


def adaptive_max_pool2d(x, output_size):
    """torch.nn.functional.adaptive_max_pool2d's values (no return_indices)."""
    return _adaptive("adaptive_max_pool2d", x, output_size,
                     lambda part, axis: max(part, dim=axis).values)


def _as_2d(name, x):
    if x.ndim not in (2, 3):
        raise ValueError(f"{name}: expected a 2-d (C, L) or 3-d (N, C, L) input, got shape "
                         f"{x.shape}")
    return unsqueeze(x, -2)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """torch.nn.functional.max_pool1d: x (N, C, L) or (C, L), as a pooling over (1, L);
    return_indices also gives each maximum's index along L."""
    one = lambda v: (1, int(v if isinstance(v, (int, np.integer)) else v[0]))   # noqa: E731
    y = max_pool2d(_as_2d("max_pool1d", x), one(kernel_size),
                   None if stride is None else one(stride), (0, one(padding)[1]),
                   one(dilation), ceil_mode, return_indices)
    if not return_indices:
        return squeeze(y, -2)
    y, index = y                       # (a flat index into a (1, L) plane: the index along L)
    return squeeze(y, -2), Tensor(index.data.squeeze(-2))


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """torch.nn.functional.avg_pool1d: x (N, C, L) or (C, L), as a pooling over (1, L)."""
    one = lambda v: (1, int(v if isinstance(v, (int, np.integer)) else v[0]))   # noqa: E731
    y = avg_pool2d(_as_2d("avg_pool1d", x), one(kernel_size),
                   None if stride is None else one(stride), (0, one(padding)[1]), ceil_mode,
                   count_include_pad)
    return squeeze(y, -2)


def adaptive_avg_pool1d(x, output_size):
    """torch.nn.functional.adaptive_avg_pool1d: x (N, C, L) or (C, L)."""
    o = int(output_size if isinstance(output_size, (int, np.integer)) else output_size[0])
    return squeeze(adaptive_avg_pool2d(_as_2d("adaptive_avg_pool1d", x), (1, o)), -2)



# ---- resampling: F.interpolate (nn.Upsample) ----------------------------------------------------

_LINEAR = {3: "linear", 4: "bilinear"}      # the linear mode of a 1-d / 2-d spatial input


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate of (N, C, L) or (N, C, H, W) input: mode 'nearest',
    'nearest-exact' (any dtype), 'linear' (3-d) or 'bilinear' (4-d; floating data, half data in
    float32 rounded once), align_corners as torch's. Each spatial axis is resampled in turn,
    composed of index_select and weights (both paths, and the gradient: the entries each source
    feeds, summed). Source positions and weights are computed as torch's CPU kernels compute
    them (in float32 for float32 and half data, with their shortcuts), so the same neighbours
    are picked."""
    if x.ndim not in _LINEAR:
        raise ValueError(f"interpolate: input must be 3-d (N, C, L) or 4-d (N, C, H, W) here, got "
                         f"shape {tuple(x.shape)}")
    if mode not in ("nearest", "nearest-exact", _LINEAR[x.ndim]):
        raise ValueError(f"interpolate: mode {mode!r} for {x.ndim}-d input is not done here: "
                         f"'nearest', 'nearest-exact' or {_LINEAR[x.ndim]!r}")
    linear = mode == _LINEAR[x.ndim]
    if align_corners is not None and not linear:
        raise ValueError("interpolate: align_corners can only be set with the interpolating "
                         "modes (linear, bilinear), as torch")
    if antialias:
        raise ValueError("interpolate: antialias is not done here")
    if linear and not is_floating(x.dtype):
        raise TypeError(f"interpolate: mode {mode!r} of {x.dtype} data is not done here (the "
                        f"nearest modes take it); cast it to a floating dtype first")
    if linear and is_half(x.dtype):       # (in float32, rounded once: torch's opmath)
        return _astype(interpolate(_astype(x, np.float32), size, scale_factor, mode,
                                   align_corners, recompute_scale_factor), x.dtype)
    spatial = x.shape[2:]
    k = len(spatial)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        size = tuple(size) if isinstance(size, (tuple, list)) else (size,) * k
        if len(size) != k or not all(isinstance(n, (int, np.integer)) and n > 0 for n in size):
            raise ValueError(f"interpolate: size must be {k} positive ints, got {size}")
        scales = (None,) * k
    else:
        sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else \
            (scale_factor,) * k
        if len(sf) != k or not all(f > 0 for f in sf):
            raise ValueError(f"interpolate: scale_factor must be {k} positive numbers, got "
                             f"{scale_factor}")
        size = tuple(int(math.floor(n * f)) for n, f in zip(spatial, sf))
        if not all(size):
            raise ValueError(f"interpolate: scale_factor {scale_factor} makes an empty output "
                             f"from {tuple(spatial)}")
        scales = (None,) * k if recompute_scale_factor else sf
    opmath = np.float64 if x.dtype == np.float64 else np.float32
    xp = xp_of(x.data)
    for d, (n_in, n_out, sf) in enumerate(zip(spatial, size, scales)):
        axis = 2 + d
        if linear and n_in == n_out:      # (torch's kernels copy an axis of the same size)
            continue
        if linear:
            i0, i1, w = _linear_sources(n_in, n_out, sf, bool(align_corners), opmath)
            w = xp.asarray(w.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1 - axis)))
            x = index_select(x, axis, xp.asarray(i0)) * (1 - Tensor(w)) + \
                index_select(x, axis, xp.asarray(i1)) * Tensor(w)
        elif mode == "nearest-exact" or k == 1 or n_in != n_out:
            x = index_select(x, axis, xp.asarray(_nearest_sources(n_in, n_out, sf,
                                                                  mode == "nearest-exact", k)))
    return x


def _scale(n_in, n_out, scale_factor, opmath):
    """torch's compute_scales_value: 1 / scale_factor where one was given, else in / out."""
    if scale_factor is not None:
        return opmath(1.0 / scale_factor)
    return opmath(opmath(n_in) / opmath(n_out))


def _nearest_sources(n_in, n_out, scale_factor, exact, k):
    """The source index of each output entry, as torch's CPU kernels take it (float
    arithmetic): for 2-d 'nearest', nearest_idx with its shortcuts (the same size: itself;
    twice the size: i >> 1); for 1-d 'nearest' and 'nearest-exact', the formula alone."""
    if not exact and k == 2 and n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    if not exact and k == 2 and n_out == n_in:
        return np.arange(n_out)
    scale = _scale(n_in, n_out, scale_factor, np.float32)
    dst = np.arange(n_out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return np.minimum(np.floor(dst * scale).astype(np.int64), n_in - 1)


def _linear_sources(n_in, n_out, scale_factor, align_corners, opmath):
    """(left index, right index, right weight) of each output entry, as torch's
    area_pixel_compute_source_index and guard_index_and_lambda, in `opmath` (float64 data: in
    float64, which torch's fused multiply-add beats by a rounding)."""
    if align_corners:
        scale = opmath(n_in - 1) / opmath(n_out - 1) if n_out > 1 else opmath(0)
        src = np.arange(n_out, dtype=opmath) * scale
    else:
        scale = _scale(n_in, n_out, scale_factor, opmath)
        # scale * (i + 0.5) - 0.5 with one rounding, as torch's CPU kernel (a fused multiply-add)
        # computes it in float32: the float32 factors' product is exact in float64
        wide = np.float64(scale) * (np.arange(n_out, dtype=np.float64) + 0.5) - 0.5
        src = np.maximum(wide.astype(opmath), 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    w = np.clip(src - i0.astype(opmath), 0, 1)
    i1 = i0 + (i0 < n_in - 1)
    return i0, i1, w

# ---- in place: x += y, x.add_(y), x[i] = v, x.copy_(y), ... (torch's rules) ----------------------
# An in-place change writes the tensor's own array -- every other name for it, a view, a
# parameter's optimizer state, sees it -- and is recorded (changes.mark_changed): an op whose
# forward saved that memory then refuses its backward. As torch: a leaf that requires grad is
# changed in place only under no_grad(); a result that needs a cast to a lower category (float
# into an integer tensor, anything into bool) is refused. One difference: a tensor of a recorded
# graph (`loss += term` in a loop) is not written (torch rebases its graph): `x += y` makes a
# new tensor and binds x to it -- the gradients are exact, but another name for the old tensor
# keeps the old values -- and the method spellings (add_, x[i] = v, ...), which cannot rebind,
# are refused there.

def _in_graph(x, name, *others):
    """Whether an in-place op on x must be recorded in the graph (grad mode on, x or an operand
    requires grad); a leaf that requires grad is refused there, as torch refuses it."""
    if not is_grad_enabled():
        return False
    if x.requires_grad and x.is_leaf:
        raise RuntimeError(f"{name}: a leaf tensor that requires grad (shape {x.shape}) is "
                           f"changed in place outside no_grad(), as torch refuses it; change it "
                           f"under `with no_grad():` (an optimizer step, an initialisation)")
    return x.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others)


def _in_place_check(x, name, *others):
    """Refuse an in-place method on x where it would have to be recorded in the graph."""
    if _in_graph(x, name, *others):
        raise RuntimeError(f"{name}: a tensor of a recorded graph is not changed in place here "
                           f"(torch records it in place); write x = x + y (a new tensor), or "
                           f"do it under no_grad()")


def _in_place_operand(x, other, name, ints=None):
    if isinstance(other, Tensor):
        return _on_device_of(x, other, name, "the operand is")
    other = _operand(other, x, name if ints is None else ints)
    return other.data if isinstance(other, Tensor) else other


def _fits(shape, target):
    """Whether an array of `shape` broadcasts to `target` (an in-place result must)."""
    try:
        return np.broadcast_shapes(tuple(shape), target) == target
    except ValueError:
        return False


def _fits_in(x, result, name):
    """torch's rules for an in-place result: no cast to a lower category (float into an integer
    tensor, anything into bool), no change of x's shape."""
    dtype = result.dtype
    if is_floating(dtype) and not is_floating(x.dtype) or \
            (dtype != np.bool_ and x.dtype == np.bool_):
        raise TypeError(f"{name}: the result's type {dtype} cannot be cast to the tensor's "
                        f"{x.dtype} (as torch)")
    if not _fits(tuple(result.shape), x.shape):
        raise RuntimeError(f"{name}: a result of shape {tuple(result.shape)} does not fit the "
                           f"tensor's shape {x.shape} (an in-place op cannot change the shape)")


def _store(x, result, name):
    """result (an array or a number) into x's own array, broadcast, cast by torch's rule."""
    if getattr(result, "dtype", None) is not None:
        _fits_in(x, result, name)
    x.data[...] = result
    mark_changed(x, name)
    return x


def _arith_(x, other, op, name, alpha=1):
    _in_place_check(x, name, other)
    return _arith_into(x, other, op, name, alpha)


def _augmented(x, other, op, name, out_of_place):
    """x op= other: in place (by ufunc `op`, or as out_of_place computes it where op is None),
    or -- for a tensor of a recorded graph -- out_of_place(x, other), which Python binds to x
    (the header's one difference from torch)."""
    if _in_graph(x, name, other):
        y = out_of_place(x, other)
        _fits_in(x, y, name)                  # (a new tensor, but x's dtype and shape, as torch)
        return y if y.dtype == x.dtype else _astype(y, x.dtype)
    if op is None:                            # (computed as out_of_place does, stored into x)
        with no_grad():
            return _store(x, out_of_place(x, other).data, name)
    return _arith_into(x, other, op, name)


def _arith_into(x, other, op, name, alpha=1):
    b = _in_place_operand(x, other, name, "cast")
    if alpha != 1:
        b = b * _operand(alpha, x, "cast")    # (alpha -1 on uint8 is 255, as torch casts it)
    a, b = same_dtype(x.data, b)
    return _store(x, op(a, b), name)


def _setitem(x, index, value):
    name = "x[...] = value"
    _in_place_check(x, name, value)
    if isinstance(index, Tensor):
        index = index.data
    elif isinstance(index, tuple):
        index = tuple(i.data if isinstance(i, Tensor) else i for i in index)
    split = _ints_first(index)
    target = x.data if split is None else x.data[split[0]]     # (a view: the ints selected)
    # (a number stored as torch stores it: -1.0 or NaN into integers refused, 2.5 is 2; a
    # value beyond float32's range refused there, and stored as inf in float16 / bfloat16, as
    # torch's, which converts it to float32 first)
    value = fit_value(name, value, x.dtype, finite=x.dtype == np.float32)
    target[index if split is None else split[1]] = _in_place_operand(x, value, name)
    mark_changed(x, name)


def _copy_(x, src):
    """torch's copy_: src's values (any dtype, any device: copied over) broadcast into x."""
    _in_place_check(x, "copy_()", src)
    data = src.data if isinstance(src, Tensor) else np.asarray(src)
    if not _fits(data.shape, x.shape):
        raise RuntimeError(f"copy_(): a source of shape {tuple(data.shape)} does not broadcast "
                           f"to the tensor's shape {x.shape}")
    x.data[...] = to_device(data, device_of(x.data)).astype(x.dtype, copy=False)
    mark_changed(x, "copy_()")
    return x


def _draw_(x, name, *args):
    """x filled in place by layers.init's initialiser `name` ('normal_', 'uniform_': torch's
    x.normal_(), x.uniform_()): refused where an in-place change is (a leaf that requires grad,
    outside no_grad), and for integer data."""
    _in_place_check(x, f"{name}()")
    if not is_floating(x.dtype):
        raise NotImplementedError(f"{name}(): draws floating values; not implemented for "
                                  f"{x.dtype} (as torch)")
    from . import init
    return getattr(init, name)(x, *args)


def _fill_(x, value, name="fill_()"):
    _in_place_check(x, name, value)
    if isinstance(value, Tensor):             # (a 0-d tensor, as torch's fill_ takes)
        if value.ndim:
            raise RuntimeError(f"{name}: takes a number or a 0-d tensor, got shape {value.shape}")
        value = _on_device_of(x, value, name, "the value is")
    else:                   # (-1 into uint8 is 255, -1.0 or 300 refused, 2.7 is 2, as torch's)
        value = fit_value(name, value, x.dtype)
    x.data[...] = value
    mark_changed(x, name)
    return x


def _uniform_bounds(bounds, kw):
    """x.uniform_(from=0, to=1)'s bounds ('from' is a Python keyword: positional, or **kw)."""
    names = ("from", "to")
    unknown = set(kw) - set(names)
    if unknown or len(bounds) > 2:
        raise TypeError(f"uniform_(): takes (from=0, to=1), got {bounds} {kw}")
    given = dict(zip(names, bounds), **kw)
    return float(given.get("from", 0.0)), float(given.get("to", 1.0))


def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique: the distinct values (sorted), with the index of each element's value
    (int64, x's shape; (x.size(dim),) with dim) and each value's count; no gradient, as
    torch's. (sorted=False gives them sorted too.)"""
    xp = xp_of(x.data)
    if dim is not None:
        dim = dim_index(dim, x.ndim, "unique")
    out = xp.unique(x.data, return_inverse=True, return_counts=True, axis=dim,
                    equal_nan=False)                        # (each NaN its own value, as torch)
    values, inverse, counts = out
    result = [Tensor(values)]
    if return_inverse:          # (x's shape; NumPy 2 / CuPy 14 give dim's a 1-d one already)
        result.append(Tensor(inverse.reshape(x.shape if dim is None else -1).astype(np.int64)))
    if return_counts:
        result.append(Tensor(counts.astype(np.int64)))
    return result[0] if len(result) == 1 else tuple(result)


def clone(x, memory_format=None):
    """A copy that stays in the graph (its gradient passes through), laid out as x, or in
    `memory_format` ('contiguous', 'channels_last'), as torch's."""
    return _ew.Clone.apply(x, memory_format=_memory_format("clone", x, memory_format))


MEMORY_FORMATS = (None, "contiguous", "channels_last")


def _memory_format(fn, x, memory_format):
    """torch's memory format names (also "contiguous_format", "preserve_format" and torch's own
    objects: "torch.channels_last") as None, 'contiguous' or 'channels_last'."""
    name = None if memory_format is None else str(memory_format).removeprefix("torch.")
    name = {"contiguous_format": "contiguous", "preserve_format": None}.get(name, name)
    if name not in MEMORY_FORMATS:
        raise ValueError(f"{fn}(): memory_format must be 'contiguous' or 'channels_last', got "
                         f"{memory_format!r}")
    if name == "channels_last" and x.ndim != 4:
        raise RuntimeError(f"{fn}(): channels_last is a layout of 4-d (N, C, H, W) tensors, got "
                           f"shape {x.shape}")
    return name


def is_contiguous(x, memory_format="contiguous"):
    """x's memory is dense in `memory_format`'s order ('contiguous': C order, size-1 axes
    ignored, as torch's)."""
    if _memory_format("is_contiguous", x, memory_format) == "channels_last":
        return bool(x.data.transpose(0, 2, 3, 1).flags.c_contiguous)
    return bool(x.data.flags.c_contiguous)


def suggested_memory_format(x):
    """torch's suggest_memory_format: 'channels_last' for a 4-d tensor whose strides order its
    axes (N, H, W, C) -- dense or not, size-1 axes aside, N and C not told apart by equal
    strides (a 1 x 1 problem) --, else 'contiguous'."""
    a = x.data
    if a.ndim != 4 or a.strides[1] == 0:
        return "contiguous"
    least = 0
    for d in (1, 3, 2, 0):
        n, stride = a.shape[d], a.strides[d] // a.itemsize
        if n == 0 or stride < least or (d == 0 and least == a.strides[1] // a.itemsize):
            return "contiguous"
        least = stride * n if n > 1 else stride
    return "channels_last"


def to_memory_format(x, memory_format):
    """torch's x.to(memory_format=...): x itself where its suggested format is that one
    (suggested_memory_format: a transposed or sliced tensor is 'contiguous' there and comes
    back as it is, as torch's), else a copy in it, in the graph."""
    name = _memory_format("to", x, memory_format)
    if name is None or suggested_memory_format(x) == name:
        return x
    return _ew.Clone.apply(x, memory_format=name)


def contiguous(x, memory_format="contiguous"):
    """x itself when its memory is already in `memory_format`, else a copy in it that stays in
    the graph (torch's x.contiguous(), x.to(memory_format=...))."""
    if memory_format is None or str(memory_format).endswith("preserve_format"):
        if x.data.flags.c_contiguous:        # (as torch: refused where a copy is needed)
            return x
        raise RuntimeError("contiguous(): preserve_format is not a format contiguous() makes "
                           "(as torch); use 'contiguous' or 'channels_last'")
    name = _memory_format("contiguous", x, memory_format)
    if name is None or is_contiguous(x, name):
        return x
    return _ew.Clone.apply(x, memory_format=name)


# ---- Tensor's operators and array methods: spellings of the functions above, installed on the
# class here so that layers.tensor imports no op -------------------------------------------------

def _matrix_transpose(self):
    """torch's x.mT: the last two axes swapped (a batch of matrices transposed)."""
    if self.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. "
                           f"Got {self.ndim}-D tensor.")
    return transpose(self, -2, -1)


def _astype(self, dtype):
    """A copy cast to `dtype` (differentiable: the gradient is cast back), or self when it
    already has it. Mixed precision: e.g. a float32 loss of bfloat16 outputs."""
    return self if self.dtype == np_dtype(dtype) else cast(self, dtype)


def _reduction(reduce):
    """A Tensor method for the reduction `reduce` (NumPy's axis / keepdims, or torch's dim /
    keepdim by name); its own function object, named for itself when installed."""
    return lambda self, axis=None, keepdims=False, **torch_names: reduce(self, axis, keepdims,
                                                                         **torch_names)


def _comparison(ufunc):
    """A Tensor method comparing with NumPy's or CuPy's ufunc `ufunc` (its own function object:
    each spelling is named for itself)."""
    return lambda self, other: _compare(self, other,
                                        lambda x, y: getattr(xp_of(x), ufunc)(x, y))


def _compare(a, b, ufunc):
    """a <op> b elementwise (==, !=, <, <=, >, >=; & | ^), as torch's: in no graph, the two
    in torch's promoted dtype (an int64 against a float32 tensor compares in float32, as torch,
    not NumPy's float64); a number or NumPy constant broadcasts, a Tensor must live on a's
    device."""
    if isinstance(b, Tensor):
        if b.device != a.device:
            raise RuntimeError(f"comparison: {a.device} and {b.device} tensors (shapes {a.shape}, "
                               f"{b.shape}), as torch refuses")
        other = b.data
    else:
        other = _operand(b, a, "cast")
        other = other.data if isinstance(other, Tensor) else other
    return Tensor(ufunc(*same_dtype(a.data, other)))     # (torch's promotion, not NumPy's)


def _bool(self):
    """torch's: the truth of a one-element tensor; of others ambiguous (an error)."""
    if self.size != 1:
        many = "no values" if self.size == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {many} is ambiguous (shape "
                           f"{self.shape}), as torch; use .any() or .all() on its numpy()")
    return builtins.bool(self.item())


def _array(self, dtype=None, copy=None):
    """np.asarray(tensor): its values (a host copy of device data), as torch's __array__; of a
    tensor that requires grad refused, as torch's (np.exp(x) would cut the graph silently)."""
    if self.requires_grad:
        raise RuntimeError("Can't convert a Tensor that requires grad to a NumPy array (a NumPy "
                           "function of it would leave the graph); use x.detach(), as torch")
    a = self.numpy()
    return a if dtype is None else a.astype(dtype)


def _truth(self, name, dim, keepdim):
    """Tensor.any / .all: a bool Tensor, in no graph."""
    axis = None if dim is None else dim_index(dim, self.ndim, name)
    xp = xp_of(self.data)
    return Tensor(getattr(xp, name)(self.data, axis=axis, keepdims=keepdim))


def _iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor, as torch")
    return (self[i] for i in range(self.shape[0]))


def _to_device(self, device):
    """Tensor._to_device: a copy on `device` -- in the graph (ops.shape.ToDevice) where self
    requires grad and a graph is recorded, as torch's .to(device) -- or self if already there."""
    if device_of(self.data) == parse_device(device):
        return self
    if self.requires_grad and is_grad_enabled():
        return _sh.ToDevice.apply(self, device=parse_device(device))
    return Tensor(to_device(self.data, device))


# ---- torch's composite spellings: each is made of the ops above, so it has both paths and its
# gradients from theirs ---------------------------------------------------------------------------

def addcmul(input, tensor1, tensor2, *, value=1):
    """torch.addcmul: input + value * tensor1 * tensor2."""
    return add(input, _scaled(mul(tensor1, tensor2), value))


def addcdiv(input, tensor1, tensor2, *, value=1):
    """torch.addcdiv: input + value * tensor1 / tensor2 (integer tensor1 and tensor2 refused,
    as torch refuses their division here)."""
    if all(isinstance(t, Tensor) and not is_floating(t.dtype) for t in (tensor1, tensor2)):
        raise RuntimeError("addcdiv: integer division of tensor1 by tensor2 is not supported "
                           "(as torch); use true division: input + value * (t1 / t2)")
    return add(input, _scaled(div(tensor1, tensor2), value))


def _scaled(x, value):
    """x * value; a float value scaling integer data is truncated first (0.5 scales by 0), as
    torch's scalars alpha / beta / value are for integer tensors."""
    if isinstance(value, (int, float)) and value == 1:
        return x
    if isinstance(value, (float, np.floating)) and isinstance(x, Tensor) and \
            not is_floating(x.dtype):
        value = builtins.int(value)
    return mul(x, value)


def _one_dtype(name, **tensors):
    """torch's refusal of a dtype mix where an op takes one dtype (lerp's input, end and a
    weight of one axis or more; the addmm family's three tensors): a RuntimeError naming
    each tensor's dtype, where arithmetic would promote silently. (_check_float is this
    engine's own refusal, a TypeError, for its ops -- matmul, conv, the RNNs; this one is for
    torch's names whose refusal torch makes a RuntimeError.)"""
    dtypes = {k: t.dtype for k, t in tensors.items() if isinstance(t, Tensor)}
    if len(set(dtypes.values())) > 1:
        raise RuntimeError(f"{name}: expected one dtype, got " + ", ".join(
            f"{k} {np.dtype(d).name}" for k, d in dtypes.items()) + " (torch refuses the mix; "
            "cast one first)")


def lerp(input, end, weight):
    """torch.lerp, differentiable in all three, by torch's two formulas: input + weight *
    (end - input) where |weight| < 0.5, end - (end - input) * (1 - weight) elsewhere (exact at
    weight 1). input, end and a weight tensor of one axis or more share one floating dtype (a
    0-d weight may have another), as torch's."""
    if not isinstance(input, Tensor) or not isinstance(end, Tensor):
        raise TypeError(f"lerp: input and end must be Tensors, got {type(input).__name__} and "
                        f"{type(end).__name__} (as torch)")
    for t in (input, end):
        if isinstance(t, Tensor) and not is_floating(t.dtype):
            raise NotImplementedError(f"lerp: {t.dtype} data: lerp takes floating tensors "
                                      f"(as torch)")
    _one_dtype("lerp", input=input, end=end,
               weight=weight if isinstance(weight, Tensor) and weight.ndim else None)
    if isinstance(weight, (int, float, np.number)):
        return add(input, mul(weight, sub(end, input))) if abs(weight) < 0.5 else \
            sub(end, mul(sub(end, input), 1 - weight))
    low = _comparison("less")(absolute(weight), 0.5)
    return where(low, add(input, mul(weight, sub(end, input))),
                 sub(end, mul(sub(end, input), sub(1, weight))))


def hypot(input, other):
    """torch.hypot: sqrt(input ** 2 + other ** 2), without overflow or underflow on the way."""
    return _ew.Hypot.apply(*_operands(*(_floating(t) if isinstance(t, Tensor) else t
                                        for t in (input, other))))


def swapaxes(input, axis0, axis1):
    """torch.swapaxes: transpose(input, axis0, axis1)."""
    return transpose(input, axis0, axis1)


def swapdims(input, dim0, dim1):
    """torch.swapdims: transpose(input, dim0, dim1)."""
    return transpose(input, dim0, dim1)


def movedim(input, source, destination):
    """torch.movedim / moveaxis: the axes `source` (an int or a sequence) moved to
    `destination`, the others keeping their order."""
    x = input
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims) (as torch)")
    src = [dim_index(d, x.ndim, "movedim") for d in src]
    dst = [dim_index(d, x.ndim, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError(f"movedim: repeated dim in source {src} or destination {dst} "
                           f"(as torch)")
    rest = iter(a for a in range(x.ndim) if a not in src)
    placed = dict(zip(dst, src))
    return transpose(x, tuple(placed[d] if d in placed else next(rest) for d in range(x.ndim)))


def tile(input, dims):
    """torch.tile: repeat, with 1s put in front of `dims` where it names fewer axes than input
    has (and new leading axes where it names more)."""
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """torch.nansum: the sum with NaNs taken as 0 (their gradient 0); integer data summed as
    sum sums it (int64)."""
    x = input if dtype is None else _astype(input, dtype)
    if is_floating(x.dtype):
        x = where(isnan(x), 0.0, x)
    y = sum(x, dim=dim, keepdim=keepdim)
    return y if dtype is None else _astype(y, dtype)   # (int32 asked: int32, not sum's int64)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """torch.nanmean: the mean of the elements that are not NaN (NaN where all are); floating
    data only, as torch's."""
    if not is_floating(input.dtype):
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype "
                           f"but got {input.dtype} (as torch)")
    x = input if dtype is None else _astype(input, dtype)
    present = logical_not(isnan(x))
    return div(nansum(x, dim, keepdim), sum(present, dim=dim, keepdim=keepdim))


def count_nonzero(input, dim=None):
    """torch.count_nonzero: int64 counts of the non-zero elements over `dim` (all by default)."""
    return sum(_comparison("not_equal")(input, 0), dim=dim)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.isclose: elementwise |input - other| <= atol + rtol * |other|, a bool Tensor (no
    gradient)."""
    b = other.data if isinstance(other, Tensor) else other
    if isinstance(other, Tensor) and other.device != input.device:
        raise RuntimeError(f"isclose: input is on {input.device}, other on {other.device}")
    return Tensor(xp_of(input.data).isclose(input.data, b, rtol=rtol, atol=atol,
                                            equal_nan=equal_nan))


def equal(input, other):
    """torch.equal: True when input and other have one shape and equal elements (read back)."""
    _two_tensors("equal", input, other)
    return tuple(input.shape) == tuple(other.shape) and builtins.bool(
        xp_of(input.data).array_equal(input.data,
                                      _on_device_of(input, other, "equal", "the other is")))


def dot(input, tensor):
    """torch.dot: the inner product of two 1-d tensors of one dtype and length."""
    a, b = input, tensor
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"dot: 1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors "
                           f"(as torch)")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot: expected both vectors to have same dtype, but found "
                           f"{a.dtype} and {b.dtype} (as torch)")
    if a.shape != b.shape:
        raise RuntimeError(f"dot: inconsistent tensor size, expected tensor [{a.shape[0]}] and "
                           f"src [{b.shape[0]}] to have the same number of elements (as torch)")
    return matmul(a, b)


def _beta_alpha(name, input, product, beta, alpha):
    """beta * input + alpha * product, in product's shape (input broadcasts to it); beta 0
    leaves input out, its NaN and inf too, as torch's."""
    product = _scaled(product, alpha)
    in_shape = tuple(getattr(input, "shape", ()))
    if not _fits(in_shape, product.shape):
        raise RuntimeError(f"{name}: input of shape {in_shape} does not broadcast to the "
                           f"product's {product.shape} (as torch)")
    if isinstance(beta, (int, float)) and beta == 0:
        return product
    return add(_scaled(input, beta), product)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """torch.addmm: beta * input + alpha * (mat1 @ mat2), mat1 and mat2 2-d."""
    _one_dtype("addmm", input=input, mat1=mat1, mat2=mat2)
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"addmm: mat1 and mat2 must be matrices, got {mat1.ndim}-d and "
                           f"{mat2.ndim}-d (as torch)")
    return _beta_alpha("addmm", input, matmul(mat1, mat2), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """torch.addmv: beta * input + alpha * (mat @ vec), mat 2-d, vec 1-d."""
    _one_dtype("addmv", input=input, mat=mat, vec=vec)
    if mat.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"addmv: vector + matrix @ vector expected, got mat {mat.ndim}-d "
                           f"and vec {vec.ndim}-d (as torch)")
    return _beta_alpha("addmv", input, matmul(mat, vec), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """torch.baddbmm: beta * input + alpha * (batch1 @ batch2), per batch (3-d)."""
    _one_dtype("baddbmm", input=input, batch1=batch1, batch2=batch2)
    return _beta_alpha("baddbmm", input, bmm(batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """torch.addbmm: beta * input + alpha * the sum over the batch of batch1[i] @ batch2[i]."""
    _one_dtype("addbmm", input=input, batch1=batch1, batch2=batch2)
    return _beta_alpha("addbmm", input, sum(bmm(batch1, batch2), dim=0), beta, alpha)


def exp2(x):
    """torch.exp2: 2 ** x."""
    return pow(2.0, _floating(x))


def frac(x):
    """torch.frac: x - trunc(x) (the fractional part, with x's sign); its gradient 1."""
    return sub(x, trunc(x))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var_mean: (var, mean) over `dim`."""
    return (var(x, dim, unbiased, keepdim, correction=correction),
            mean(x, dim=dim, keepdim=keepdim))


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std_mean: (std, mean) over `dim`."""
    return (std(x, dim, unbiased, keepdim, correction=correction),
            mean(x, dim=dim, keepdim=keepdim))


def unflatten(x, dim, sizes):
    """torch.unflatten: axis `dim` split into `sizes` (one may be -1)."""
    d = dim_index(dim, x.ndim, "unflatten")
    return reshape(x, x.shape[:d] + tuple(sizes) + x.shape[d + 1:])


def diff(x, n=1, dim=-1, prepend=None, append=None):
    """torch.diff: the n-th forward difference along `dim`, after prepend / append (tensors)
    are joined to x there."""
    if n < 0:
        raise RuntimeError(f"diff: order must be non-negative but got {n} (as torch)")
    if x.ndim == 0:
        raise RuntimeError("diff: expects input to be at least one-dimensional (as torch)")
    d = dim_index(dim, x.ndim, "diff")
    if prepend is not None or append is not None:
        x = cat([t for t in (prepend, x, append) if t is not None], dim=d)
    for _ in range(n):
        if x.shape[d] == 0:
            break
        lo = tuple(slice(None) if a != d else slice(0, -1) for a in range(x.ndim))
        hi = tuple(slice(None) if a != d else slice(1, None) for a in range(x.ndim))
        x = sub(getitem(x, hi), getitem(x, lo)) if x.dtype != np.bool_ else \
            logical_xor(getitem(x, hi), getitem(x, lo))
    return x


def masked_select(input, mask):
    """torch.masked_select: the elements of x where mask (broadcast with x) is True, as a 1-d
    Tensor (its length read back from a device, as torch's)."""
    m = _on_device_of(input, mask, "masked_select", "the mask is")
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected a bool mask, got {m.dtype} (as torch)")
    shape = np.broadcast_shapes(input.shape, tuple(m.shape))
    return getitem(expand(input, shape), Tensor(xp_of(m).broadcast_to(m, shape)))


def _along(x, dim, index, name, dtypes=(np.int64,), error=RuntimeError):
    """(axis, index as a 1-d int64 array on x's device) for index_fill / index_add /
    index_copy: `dtypes` the index dtypes torch takes there (int64; index_add int32 too), a
    refusal torch's kind of `error`."""
    d = dim_index(dim, builtins.max(x.ndim, 1), name)
    idx = _on_device_of(x, index, name)
    if idx.ndim > 1 or idx.dtype not in dtypes:
        raise error(f"{name}: Expected dtype {' / '.join(np.dtype(t).name for t in dtypes)} "
                         f"for a 0-d or 1-d index, got {idx.dtype} of shape {tuple(idx.shape)} "
                         f"(as torch)")
    return d, idx.astype(np.int64, copy=False).reshape(-1)


def index_fill(input, dim, index, value):
    """torch.index_fill: input with the positions `index` along `dim` set to value (a number
    or a 0-d Tensor, stored as masked_fill stores it); no gradient to input there. A negative
    index counts from the end, as torch's; one outside [-n, n) is refused (read back from a
    device: CuPy's indexing would wrap it)."""
    x = input
    d, idx = _along(x, dim, index, "index_fill()", error=IndexError)
    n = x.shape[d] if x.ndim else 1
    bad = (idx < -n) | (idx >= n)
    if builtins.bool(bad.any()):
        first = builtins.int(idx[bad][0])
        raise IndexError(f"index_fill(): index {first} is out of bounds for dimension {d} with "
                         f"size {n} (as torch)")
    hit = xp_of(x.data).zeros(n, dtype=bool)
    hit[idx] = True
    shape = [1] * x.ndim
    if x.ndim:
        shape[d] = n
    return masked_fill(x, Tensor(hit.reshape(shape)), value)


def _index_spread(x, d, idx, source, name):
    """idx broadcast to source's shape along axis d (the index scatter takes)."""
    if source.ndim != x.ndim or idx.shape[0] != source.shape[d] or any(
            s != n for a, (s, n) in enumerate(zip(source.shape, x.shape)) if a != d):
        raise RuntimeError(f"{name}: source {source.shape} must match x {x.shape} off dim {d} "
                           f"and hold one slice per index ({idx.shape[0]}) along it (as torch)")
    shape = [1] * x.ndim
    shape[d] = idx.shape[0]
    return xp_of(idx).broadcast_to(idx.reshape(shape), source.shape)


def _on_0d_as_1d(fn, x, source, *args):
    """fn of a 0-d x and source as of their one-element 1-d views (torch's index ops take 0-d
    tensors so), the result 0-d again."""
    if x.ndim:
        return fn(x, source, *args)
    return reshape(fn(reshape(x, 1), reshape(source, 1) if source.ndim == 0 else source, *args),
                   ())


def index_add(input, dim, index, source, *, alpha=1):
    """torch.index_add: input with alpha * source's slices added at the positions `index`
    along `dim` (repeated indices add up; out of range refused, by scatter), differentiable in
    input and source."""
    d, idx = _along(input, dim, index, "index_add()", (np.int64, np.int32))
    return _on_0d_as_1d(lambda x, src: scatter_add(
        x, d, _index_spread(x, d, idx, src, "index_add()"), _scaled(src, alpha)), input, source)


def index_copy(input, dim, index, source):
    """torch.index_copy: input with its slices at `index` along `dim` replaced by source's (an
    index given twice: which write wins is not defined, as torch's)."""
    d, idx = _along(input, dim, index, "index_copy()")
    return _on_0d_as_1d(lambda x, src: scatter(
        x, d, _index_spread(x, d, idx, src, "index_copy()"), src), input, source)


def argwhere(input):
    """torch.argwhere: nonzero(input), the (n, ndim) int64 indices of its non-zero entries."""
    return nonzero(input)


def select(input, dim, index):
    """torch.select: input indexed by `index` along `dim` (that axis gone)."""
    d = dim_index(dim, input.ndim, "select")
    return getitem(input, (slice(None),) * d + (index,))


def kthvalue(input, k, dim=-1, keepdim=False):
    """torch.kthvalue: (values, indices) of the k-th smallest entry (1 is the smallest) along
    `dim`, NaN counted largest, as torch sorts it; the values' gradient to where each came
    from."""
    x = input
    if x.ndim == 0:
        if k != 1:
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension 0 "
                               f"(k {k}, size 1) (as torch)")
        return MaxResult(mul(x, 1), Tensor(xp_of(x.data).zeros((), np.int64)))
    d = dim_index(dim, x.ndim, "kthvalue")
    if not 1 <= builtins.int(k) <= x.shape[d]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d} "
                           f"(k {k}, size {x.shape[d]}) (as torch)")
    return _pick_sorted(x, d, builtins.int(k) - 1, keepdim)


def _pick_sorted(x, d, i, keepdim):
    """(values, indices) of entry i of x sorted ascending along axis d (stable, NaN last)."""
    values, indices = sort(x, d)
    take = tuple(slice(i, i + 1) if a == d else slice(None) for a in range(x.ndim))
    v, j = getitem(values, take), Tensor(indices.data[take])
    if not keepdim:
        v, j = squeeze(v, d), Tensor(j.data.squeeze(d))
    return MaxResult(v, j)


def median(input, dim=None, keepdim=False):
    """torch.median: the lower median (of the n entries the ((n - 1) // 2)-th smallest), NaN
    where there is a NaN (torch's rule; nanmedian would skip them). No dim: of all the entries,
    a 0-d Tensor; with dim: (values, indices) along it. The gradient goes to the entry taken."""
    x = input
    if dim is None:
        if x.size == 0:
            if not is_floating(x.dtype):
                raise RuntimeError("median() of an empty integer tensor has no value (as torch)")
            return Tensor(xp_of(x.data).full((), np.nan, dtype=x.dtype))
        v = median(reshape(x, -1), 0).values
        if not is_floating(x.dtype):
            return v
        # torch's gradient: shared evenly among the entries equal to the median (the NaNs,
        # where it is NaN); the value stays the one picked, exactly (s - s is 0)
        picked = Tensor(v.data)                 # (no read-back: a NaN median ties the NaNs)
        ties = logical_or(_comparison("equal")(x, picked), logical_and(isnan(x), isnan(picked)))
        s = sum(where(ties, x, 0.0))
        return add(Tensor(v.data), div(sub(s, Tensor(s.data)), sum(ties)))
    if x.ndim == 0:
        return MaxResult(mul(x, 1), Tensor(xp_of(x.data).zeros((), np.int64)))
    d = dim_index(dim, x.ndim, "median")
    if x.shape[d] == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size (as torch)")
    values, indices = _pick_sorted(x, d, (x.shape[d] - 1) // 2, keepdim=True)
    if is_floating(x.dtype):                # (a NaN along dim: the median is the first NaN)
        nan = isnan(x)
        has = nan.data.any(axis=d, keepdims=True)
        first = xp_of(x.data).argmax(nan.data, axis=d, keepdims=True).astype(np.int64)
        indices = Tensor(xp_of(x.data).where(has, first, indices.data))
        values = where(Tensor(has), gather(x, d, indices), values)
    if not keepdim:
        values, indices = squeeze(values, d), Tensor(indices.data.squeeze(d))
    return MaxResult(values, indices)


class _AminmaxResult(tuple):
    """(min, max), as torch.return_types.aminmax."""
    min = property(lambda self: self[0])
    max = property(lambda self: self[1])

    def __new__(cls, lo, hi):
        return super().__new__(cls, (lo, hi))


def aminmax(input, *, dim=None, keepdim=False):
    """torch.aminmax: (min, max) over `dim` (all by default), amin's and amax's."""
    return _AminmaxResult(amin(input, dim=dim, keepdim=keepdim),
                          amax(input, dim=dim, keepdim=keepdim))


def fmax(input, other):
    """torch.fmax: the elementwise maximum where a NaN loses to a number (NaN only where both
    are); the gradient to input where input >= other or other is NaN, else to other (torch's
    rule)."""
    _two_tensors("fmax", input, other)
    take = logical_or(_comparison("greater_equal")(input, other), isnan(other))
    return where(take, input, other)


def _two_tensors(name, input, other):
    for arg, v in (("input", input), ("other", other)):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not "
                            f"{type(v).__name__} (as torch)")


def fmin(input, other):
    """torch.fmin: as fmax, the elementwise minimum."""
    _two_tensors("fmin", input, other)
    take = logical_or(_comparison("less_equal")(input, other), isnan(other))
    return where(take, input, other)


def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: gather along `dim` with input and indices broadcast off it (no
    dim: of the flattened input)."""
    if dim is None:
        return gather(reshape(input, -1), 0,
                      _on_device_of(input, indices, "take_along_dim").reshape(-1))
    d = dim_index(dim, input.ndim, "take_along_dim")
    idx = _on_device_of(input, indices, "take_along_dim")
    if idx.ndim != input.ndim:
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number "
                           f"of dimensions, but got {input.ndim} and {idx.ndim} (as torch)")
    try:
        off = np.broadcast_shapes(tuple(n for a, n in enumerate(input.shape) if a != d),
                                  tuple(n for a, n in enumerate(idx.shape) if a != d))
    except ValueError:
        raise RuntimeError(f"take_along_dim(): input {input.shape} and indices "
                           f"{tuple(idx.shape)} do not broadcast off dim {d} (as torch)") from None
    shape_of = lambda n: off[:d] + (n,) + off[d:]          # noqa: E731
    x = expand(input, shape_of(input.shape[d]))
    return gather(x, d, Tensor(xp_of(idx).broadcast_to(idx, shape_of(idx.shape[d]))))


def diag(input, diagonal=0):
    """torch.diag: of a 1-d tensor the square matrix with it on diagonal `diagonal` (above the
    main one for a positive offset), of a 2-d one that diagonal as a 1-d tensor;
    differentiable."""
    x, k = input, builtins.int(diagonal)
    xp = xp_of(x.data)
    if x.ndim == 1:
        n = x.shape[0]
        m = n + builtins.abs(k)
        i = xp.arange(n)
        flat = (i * m + i + k) if k >= 0 else ((i - k) * m + i)
        zero = Tensor(xp.zeros(m * m, dtype=x.dtype))
        return reshape(scatter(zero, 0, Tensor(flat.astype(np.int64)), x), m, m)
    if x.ndim == 2:
        rows, cols = x.shape
        n = builtins.max(0, builtins.min(rows, cols - k) if k >= 0 else
                         builtins.min(rows + k, cols))
        i = xp.arange(n)
        r, c = (i, i + k) if k >= 0 else (i - k, i)
        return getitem(x, (Tensor(r.astype(np.int64)), Tensor(c.astype(np.int64))))
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D (as torch)")


# ---- more of torch's top-level spellings ------------------------------------------------------

def subtract(input, other, *, alpha=1):
    """torch.subtract / torch.sub with alpha: input - alpha * other (a float alpha with two
    integer operands refused, as torch's)."""
    return sub(input, _alpha_times("subtract", other, alpha, input))


def rsub(input, other, *, alpha=1):
    """torch.rsub: other - alpha * input."""
    return sub(other, _alpha_times("rsub", input, alpha, other))


def _alpha_times(name, x, alpha, partner):
    """alpha * x for torch's alpha= (a number x stays a number)."""
    if isinstance(alpha, (int, np.integer)) and alpha == 1:
        return x
    if isinstance(alpha, (float, np.floating)) and all(
            not is_floating(t.dtype) if isinstance(t, Tensor) else isinstance(t, (int, bool))
            for t in (x, partner)):
        raise RuntimeError(f"{name}: for integral input tensors, argument alpha must not be a "
                           f"floating point number (as torch)")
    return mul(x, alpha) if isinstance(x, Tensor) else x * alpha


def multiply(input, other):
    """torch.multiply: input * other."""
    return mul(input, other)


def divide(input, other, *, rounding_mode=None):
    """torch.divide / true_divide: input / other; rounding_mode 'trunc' rounds the quotient
    toward zero, 'floor' down (floor_divide), both in the operands' dtype, as torch's."""
    if rounding_mode is None:
        return div(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode != "trunc":
        raise ValueError(f"divide: rounding_mode must be None, 'trunc' or 'floor', got "
                         f"{rounding_mode!r} (as torch)")
    dtype = result_dtype(*(t.data if isinstance(t, Tensor) else t for t in (input, other)))
    q = trunc(div(input, other))
    return q if is_floating(dtype) else _astype(q, dtype)


def true_divide(input, other):
    """torch.true_divide: input / other."""
    return div(input, other)


def negative(input):
    """torch.negative: -input."""
    return neg(input)


def positive(input):
    """torch.positive: input itself (bool refused, as torch's)."""
    if input.dtype == np.bool_:
        raise TypeError("positive(): the bool type is not supported (as torch)")
    return input


def clamp_min(input, min):
    """torch.clamp_min: clamp(input, min=min)."""
    return clamp(input, min=min)


def clamp_max(input, max):
    """torch.clamp_max: clamp(input, max=max)."""
    return clamp(input, max=max)


def deg2rad(input):
    """torch.deg2rad: input * pi / 180 (integers: the default float dtype)."""
    return mul(_floating(input), math.pi / 180)


def rad2deg(input):
    """torch.rad2deg: input * 180 / pi."""
    return mul(_floating(input), 180 / math.pi)


def greater(input, other): return _comparison("greater")(input, other)          # noqa: E704
def less(input, other): return _comparison("less")(input, other)                # noqa: E704
def greater_equal(input, other): return _comparison("greater_equal")(input, other)  # noqa: E704
def less_equal(input, other): return _comparison("less_equal")(input, other)    # noqa: E704
def not_equal(input, other): return _comparison("not_equal")(input, other)      # noqa: E704


def permute(input, dims):
    """torch.permute: input's axes in the order `dims`."""
    return transpose(input, tuple(dims))


def ravel(input):
    """torch.ravel: the 1-d view (a copy where it cannot be one)."""
    return reshape(input, -1)


def msort(input):
    """torch.msort: input's values sorted along axis 0."""
    return sort(input, 0).values


def atleast_1d(*tensors):
    """torch.atleast_1d: each tensor with at least one axis (a 0-d one as shape (1,))."""
    return _atleast(tensors, lambda t: reshape(t, 1) if t.ndim == 0 else t)


def atleast_2d(*tensors):
    """torch.atleast_2d: 0-d as (1, 1), 1-d (n,) as (1, n)."""
    return _atleast(tensors, lambda t: reshape(t, (1,) * (2 - t.ndim) + t.shape)
                    if t.ndim < 2 else t)


def atleast_3d(*tensors):
    """torch.atleast_3d: 0-d as (1, 1, 1), 1-d (n,) as (1, n, 1), 2-d (m, n) as (m, n, 1)."""
    def three(t):
        return reshape(t, (1, 1, 1)) if t.ndim == 0 else reshape(t, (1, t.shape[0], 1)) \
            if t.ndim == 1 else unsqueeze(t, -1) if t.ndim == 2 else t
    return _atleast(tensors, three)


def _atleast(tensors, fn):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(fn(t) for t in tensors[0])
    return fn(tensors[0]) if len(tensors) == 1 else tuple(fn(t) for t in tensors)


def _non_empty(name, tensors):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList (as torch)")
    return tensors


def hstack(tensors):
    """torch.hstack: cat along axis 1, or axis 0 for 1-d tensors."""
    ts = atleast_1d(tuple(_non_empty("hstack", tensors)))
    return cat(list(ts), dim=0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    """torch.vstack (row_stack): the tensors as at least 2-d, cat along axis 0."""
    return cat(list(atleast_2d(tuple(_non_empty("vstack", tensors)))), dim=0)


def dstack(tensors):
    """torch.dstack: the tensors as at least 3-d, cat along axis 2."""
    return cat(list(atleast_3d(tuple(_non_empty("dstack", tensors)))), dim=2)


def column_stack(tensors):
    """torch.column_stack: 0-d and 1-d tensors as columns (n, 1), then hstack."""
    return hstack([reshape(t, (t.size, 1)) if t.ndim <= 1 else t
                   for t in _non_empty("column_stack", tensors)])


def broadcast_shapes(*shapes):
    """torch.broadcast_shapes: the shape the given shapes broadcast to."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) if isinstance(s, (tuple, list)) else (s,)
                                            for s in shapes)))
    except ValueError as e:
        raise RuntimeError(f"broadcast_shapes: shapes {shapes} do not broadcast (as torch): "
                           f"{e}") from None


def broadcast_tensors(*tensors):
    """torch.broadcast_tensors: each expanded to their common shape."""
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(expand(t, shape) for t in tensors)


def meshgrid(*tensors, indexing="ij"):
    """torch.meshgrid: 1-d tensors spread over a grid, 'ij' (matrix) or 'xy' (Cartesian: the
    first two axes swapped) indexing; differentiable (each grid sums back to its tensor)."""
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r} (as torch)")
    ts = _non_empty("meshgrid", ts)
    if any(t.ndim > 1 for t in ts):
        raise RuntimeError("meshgrid: expects all tensors to be 0-d or 1-d (as torch)")
    if len({t.dtype for t in ts}) > 1 or len({t.device for t in ts}) > 1:
        raise RuntimeError(f"meshgrid expects all tensors to have the same dtype and device, "
                           f"got {[(str(t.dtype), str(t.device)) for t in ts]} (as torch)")
    ts = [reshape(t, -1) for t in ts]
    axes = list(range(len(ts)))              # the grid axis of each tensor
    if indexing == "xy" and len(ts) >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for t, a in zip(ts, axes):
        shape[a] = t.shape[0]
    grids = []
    for t, a in zip(ts, axes):
        view = [1] * len(ts)
        view[a] = t.shape[0]
        grids.append(expand(reshape(t, tuple(view)), tuple(shape)))
    return tuple(grids)


def kron(input, other):
    """torch.kron: the Kronecker product (both as of the larger number of axes)."""
    n = builtins.max(input.ndim, other.ndim)
    a = reshape(input, (1,) * (n - input.ndim) + input.shape)
    b = reshape(other, (1,) * (n - other.ndim) + other.shape)
    # a's axis i and b's axis i interleaved: (a0, b0, a1, b1, ...), then merged pairwise
    ea = reshape(a, tuple(d for s in a.shape for d in (s, 1)))
    eb = reshape(b, tuple(d for s in b.shape for d in (1, s)))
    return reshape(mul(ea, eb), tuple(p * q for p, q in zip(a.shape, b.shape)))


def tensordot(a, b, dims=2):
    """torch.tensordot: a's last `dims` axes contracted with b's first (or the axes of two
    lists), by one matrix product."""
    _one_dtype("tensordot", a=a, b=b)
    _no_bool_product("tensordot", a, b)
    if isinstance(dims, Tensor) and dims.ndim == 0:
        dims = builtins.int(dims.item())          # (torch takes a 0-d tensor as the int)
    if isinstance(dims, (int, np.integer)):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims} (as torch)")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, (int, np.integer)) else list(d) for d in dims)
    da = [dim_index(d, a.ndim, "tensordot") for d in da]
    db = [dim_index(d, b.ndim, "tensordot") for d in db]
    if [a.shape[i] for i in da] != [b.shape[j] for j in db]:
        raise RuntimeError(f"tensordot: contracted dimensions {[a.shape[i] for i in da]} and "
                           f"{[b.shape[j] for j in db]} need to match (as torch)")
    fa = [i for i in range(a.ndim) if i not in da]
    fb = [j for j in range(b.ndim) if j not in db]
    k = 1
    for i in da:
        k *= a.shape[i]
    # (the sizes stated, not -1: nothing contracted, k = 0, is zeros of the result's shape)
    m, n = (math.prod(t.shape[i] for i in free) for t, free in ((a, fa), (b, fb)))
    am = reshape(transpose(a, tuple(fa + da)), (m, k))
    bm = reshape(transpose(b, tuple(db + fb)), (k, n))
    return reshape(matmul(am, bm), tuple(a.shape[i] for i in fa) + tuple(b.shape[j] for j in fb))


def rot90(input, k=1, dims=(0, 1)):
    """torch.rot90: rotated by 90 degrees k times in the plane of `dims`, from the first axis
    toward the second."""
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected total rotation dims == 2, but got dims = "
                           f"{len(dims)} (as torch)")
    d0, d1 = (dim_index(d, input.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise RuntimeError("rot90: expected rotation dims to be different (as torch)")
    k %= 4
    if k == 1:
        return transpose(flip(input, (d1,)), d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(transpose(input, d0, d1), (d1,))
    return mul(input, 1)


def logaddexp(input, other):
    """torch.logaddexp: log(exp(input) + exp(other)), without overflow (the larger plus
    log1p(exp(-|difference|)))."""
    return add(maximum(input, other), log1p(exp(neg(_gap(input, other)))))


def _gap(a, b):
    """|a - b|, 0 where a == b (two equal infinities: their difference would be NaN)."""
    return where(_comparison("equal")(a, b), 0.0, absolute(sub(a, b)))


def logaddexp2(input, other):
    """torch.logaddexp2: log2(2 ** input + 2 ** other)."""
    return add(maximum(input, other), div(log1p(exp2(neg(_gap(input, other)))), math.log(2)))


def xlogy(input, other):
    """torch.xlogy: input * log(other), 0 where input is 0 (NaN where other is); the gradient
    log(other) for input and input / other for other, as torch's, but 0 for other where both
    are 0 (torch's 0 / 0 is NaN); a number for either: a constant."""
    x, y = (_floating(t) if isinstance(t, Tensor) else t for t in (input, other))
    like = x if isinstance(x, Tensor) else y
    x, y = (t if isinstance(t, Tensor) else
            Tensor(xp_of(like.data).full((), t, dtype=like.dtype)) for t in (x, y))
    # (where input is 0, a log that is not finite -- other <= 0 or inf -- would make 0 * log
    # NaN: 1 stands in for other there)
    off = logical_and(x == 0, logical_or(y <= 0, isinf(y)))
    return mul(x, log(where(off, 1.0, y)))


def sinc(input):
    """torch.sinc: sin(pi x) / (pi x), 1 at 0 (its gradient 0 there)."""
    x = _floating(input)
    zero = _comparison("equal")(x, 0)
    px = mul(where(zero, 1.0, x), math.pi)
    return where(zero, 1.0, div(sin(px), px))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """torch.nan_to_num: NaN, +inf and -inf replaced (by 0 and the dtype's largest / lowest
    finite values by default); the gradient 0 where a value was replaced."""
    x = input
    if not is_floating(x.dtype):
        return Tensor(x.data.copy())            # (no NaN or inf to replace; bool stays bool)
    kind, low, high = limits(x.dtype)
    hi = high if posinf is None else posinf
    lo = low if neginf is None else neginf
    x = where(isnan(x), nan, x)
    x = where(_comparison("equal")(x, float("inf")), hi, x)
    return where(_comparison("equal")(x, float("-inf")), lo, x)


def dist(input, other, p=2):
    """torch.dist: the p-norm of input - other (broadcast)."""
    return norm(reshape(sub(input, other), -1), p)


def trace(input):
    """torch.trace: the sum of a 2-d tensor's main diagonal."""
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim} "
                           f"(as torch)")
    if input.dtype == np.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool' (as torch)")
    return sum(diag(input))


def heaviside(input, values):
    """torch.heaviside: values where input == 0, 1 where input > 0, else 0 (NaN too), in
    input's dtype, which values must share (no gradient, as torch's)."""
    if not isinstance(values, Tensor):
        raise TypeError(f"heaviside(): argument 'values' must be Tensor, not "
                        f"{type(values).__name__} (as torch)")
    if values.dtype != input.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different dtypes "
                           f"({input.dtype}, {values.dtype}) (as torch)")
    xp = xp_of(input.data)
    v = _on_device_of(input, values, "heaviside", "values are")
    x = input.data
    return Tensor(xp.where(x == 0, v, (x > 0).astype(x.dtype)).astype(x.dtype, copy=False))


def signbit(input):
    """torch.signbit: True where the sign bit is set (-0.0 included)."""
    return Tensor(xp_of(input.data).signbit(input.data))


def isneginf(input):
    """torch.isneginf."""
    return Tensor(xp_of(input.data).isneginf(input.data)) if is_floating(input.dtype) else \
        Tensor(xp_of(input.data).zeros(input.shape, bool))


def isposinf(input):
    """torch.isposinf."""
    return Tensor(xp_of(input.data).isposinf(input.data)) if is_floating(input.dtype) else \
        Tensor(xp_of(input.data).zeros(input.shape, bool))


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """torch.isin: whether each element is among test_elements (no gradient); either may be a
    number (a number as elements: a 0-d answer)."""
    if not isinstance(elements, Tensor):
        if not isinstance(test_elements, Tensor):
            raise TypeError("isin(): elements or test_elements must be a Tensor (as torch)")
        elements = Tensor(xp_of(test_elements.data).asarray(elements))
    xp = xp_of(elements.data)
    t = _on_device_of(elements, test_elements, "isin", "test_elements are") \
        if isinstance(test_elements, (Tensor, list, tuple)) else test_elements
    return Tensor(xp.isin(elements.data, t, assume_unique=assume_unique, invert=invert))


# ---- more of torch's spellings, each made of the ops above ----------------------------------------

def _no_bool_product(name, *tensors):
    if any(isinstance(t, Tensor) and t.dtype == np.bool_ for t in tensors):
        raise NotImplementedError(f"{name}: not implemented for bool tensors (as torch)")


def mm(input, mat2):
    """torch.mm: the product of two matrices of one dtype."""
    _one_dtype("mm", input=input, mat2=mat2)
    if input.ndim == 2 and mat2.ndim == 2 and input.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mm: mat1 and mat2 shapes cannot be multiplied "
                           f"({input.shape[0]}x{input.shape[1]} and "
                           f"{mat2.shape[0]}x{mat2.shape[1]}) (as torch)")
    _no_bool_product("mm", input, mat2)
    return _mm(input, mat2)


def mv(input, vec):
    """torch.mv: a matrix times a vector, of one dtype."""
    _one_dtype("mv", input=input, vec=vec)
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"mv: vector + matrix @ vector expected, got {input.ndim}-d and "
                           f"{vec.ndim}-d (as torch)")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"mv: size mismatch, got input ({input.shape[0]}x{input.shape[1]}) "
                           f"and vec ({vec.shape[0]}) (as torch)")
    _no_bool_product("mv", input, vec)
    return matmul(input, vec)


def inner(input, other):
    """torch.inner: the sum over the last axes of input and other (a product where either is
    0-d)."""
    if input.ndim == 0 or getattr(other, "ndim", 0) == 0:
        return mul(input, other)
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner: last dimensions of input {tuple(input.shape)} and other "
                           f"{tuple(other.shape)} differ (as torch)")
    return tensordot(input, other, dims=([-1], [-1]))


def vdot(input, other):
    """torch.vdot of real vectors: dot."""
    return dot(input, other)


def cross(input, other, dim=None):
    """torch.cross: the cross product along `dim` (of size 3 in both; input and other, of one
    number of axes and one dtype, broadcast). No dim: input's first axis of size 3, with
    torch's deprecation warning (torch.linalg.cross takes the last)."""
    if not isinstance(other, Tensor) or input.ndim != other.ndim:
        raise RuntimeError(f"cross: inputs must have the same number of dimensions, got "
                           f"{input.ndim} and {getattr(other, 'ndim', 0)} (as torch)")
    _one_dtype("cross", input=input, other=other)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated (torch's "
                      "warning): give dim (input's first axis of size 3 is taken)", UserWarning,
                      stacklevel=2)
        dim = next((d for d, n in enumerate(input.shape) if n == 3), None)
        if dim is None:
            raise RuntimeError(f"cross: no dimension of size 3 in input {tuple(input.shape)} "
                               f"(as torch)")
    dim = dim_index(dim, input.ndim, "cross")
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"cross: inputs dimension {dim} must have length 3, got "
                           f"{input.shape[dim]} and {other.shape[dim]} (as torch)")
    a, b = broadcast_tensors(input, other)
    (a0, a1, a2), (b0, b1, b2) = ([select(t, dim, i) for i in range(3)] for t in (a, b))
    return stack([sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2)),
                  sub(mul(a0, b1), mul(a1, b0))], dim=dim)


def fliplr(input):
    """torch.fliplr: flipped left to right (axis 1; at least 2-d)."""
    if input.ndim < 2:
        raise RuntimeError(f"fliplr: input must be >= 2-d, got {input.ndim}-d (as torch)")
    return flip(input, (1,))


def flipud(input):
    """torch.flipud: flipped upside down (axis 0; at least 1-d)."""
    if input.ndim < 1:
        raise RuntimeError("flipud: input must be >= 1-d, got a 0-d tensor (as torch)")
    return flip(input, (0,))


def tensor_split(input, indices_or_sections=None, /, dim=0, *, sections=None, indices=None,
                 tensor_indices_or_sections=None):
    """torch.tensor_split: views of input along `dim`: n pieces (the first size % n one longer),
    or the pieces between the listed indices (Python's slicing: clamped, negative from the end,
    an index before the last one gives an empty piece). A 0-d integer tensor is a count, a 1-d
    one indices."""
    given = [v for v in (indices_or_sections, sections, indices, tensor_indices_or_sections)
             if v is not None]
    if len(given) != 1:
        raise TypeError("tensor_split: give one of indices_or_sections, sections, indices and "
                        "tensor_indices_or_sections (as torch's keywords)")
    spec = given[0]
    kinds = {"sections": (int, np.integer), "indices": (list, tuple),
             "tensor_indices_or_sections": Tensor}
    expected = next((kinds[k] for k, v in (("sections", sections), ("indices", indices), (
        "tensor_indices_or_sections", tensor_indices_or_sections)) if v is not None),
        (Tensor, int, np.integer, list, tuple))
    if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, expected) or isinstance(
            spec, (list, tuple)) and any(isinstance(i, (bool, np.bool_)) or not isinstance(
                i, (int, np.integer)) for i in spec):
        raise TypeError(f"tensor_split: indices_or_sections must be an int, a list of ints or "
                        f"an int64 tensor (sections= an int, indices= a list, "
                        f"tensor_indices_or_sections= a tensor), got {spec!r} (as torch)")
    dim = dim_index(dim, input.ndim, "tensor_split")
    n = input.shape[dim]
    if isinstance(spec, Tensor):
        if spec.dtype != np.int64 or spec.ndim > 1:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be a 0-d "
                               f"or 1-d int64 tensor, got {spec.dtype} {tuple(spec.shape)} (as "
                               f"torch)")
        spec = builtins.int(spec.item()) if spec.ndim == 0 else [builtins.int(i) for i in
                                                                  spec.numpy()]
    if isinstance(spec, (int, np.integer)):
        if spec < 1:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got "
                               f"{spec} (as torch)")
        q, r = divmod(n, builtins.int(spec))
        bounds = list(itertools.accumulate([q + 1] * r + [q] * (builtins.int(spec) - r)))[:-1]
    else:
        bounds = [builtins.int(i) for i in spec]
    lead = (slice(None),) * dim
    return tuple(input[lead + (slice(a, b),)] for a, b in zip([None] + bounds, bounds + [None]))


def _even_split(name, input, spellings, dim, least):
    """hsplit / vsplit / dsplit: `spellings` (indices_or_sections, sections, indices) -- torch's
    three keyword names, one given -- along `dim`, of input of at least `least` axes."""
    given = [v for v in spellings if v is not None]
    if len(given) != 1:
        raise TypeError(f"{name}: give one of indices_or_sections, sections and indices (as "
                        f"torch's keywords)")
    sections = given[0]
    if isinstance(sections, Tensor) and sections.ndim == 0 and sections.dtype.kind in "iu":
        sections = builtins.int(sections.item())        # (torch takes a 0-d one as the count)
    if isinstance(sections, Tensor) or isinstance(sections, (bool, np.bool_)) or \
            spellings[1] is not None and not isinstance(sections, (int, np.integer)) or \
            spellings[2] is not None and not isinstance(sections, (list, tuple)):
        raise TypeError(f"{name}: takes an int (sections=) or a list of ints (indices=), got "
                        f"{sections!r} (as torch)")
    if input.ndim < least:
        raise RuntimeError(f"{name} requires a tensor with at least {least} dimension, but got "
                           f"a tensor with {input.ndim} dimensions! (as torch)")
    if isinstance(sections, (int, np.integer)) and (sections == 0 or
                                                     input.shape[dim] % sections):
        raise RuntimeError(f"{name} attempted to split along dimension {dim}, but the size of "
                           f"the dimension {input.shape[dim]} is not divisible by the "
                           f"split_size {sections}! (as torch)")
    return tensor_split(input, sections, dim)


def hsplit(input, indices_or_sections=None, /, *, sections=None, indices=None):
    """torch.hsplit: tensor_split along axis 1 (axis 0 of a vector); a count must divide."""
    return _even_split("torch.hsplit", input, (indices_or_sections, sections, indices), 0 if input.ndim == 1 else 1, 1)


def vsplit(input, indices_or_sections=None, /, *, sections=None, indices=None):
    """torch.vsplit: tensor_split along axis 0 (at least 2-d); a count must divide."""
    return _even_split("torch.vsplit", input, (indices_or_sections, sections, indices), 0, 2)


def dsplit(input, indices_or_sections=None, /, *, sections=None, indices=None):
    """torch.dsplit: tensor_split along axis 2 (at least 3-d); a count must divide."""
    return _even_split("torch.dsplit", input, (indices_or_sections, sections, indices), 2, 3)


def take(input, index):
    """torch.take: input read as one flat vector at `index` (any shape, negative from the end),
    in index's shape; differentiable in input."""
    if not isinstance(index, Tensor) or index.dtype != np.int64:
        raise RuntimeError(f"take(): index must be an int64 tensor, got "
                           f"{getattr(index, 'dtype', type(index).__name__)} (as torch)")
    n = input.size
    flat = _on_device_of(input, index, "take", "index is").reshape(-1)
    bad = xp_of(flat).logical_or(flat >= n, flat < -n).any()
    if builtins.bool(bad):      # (a read-back on a GPU: CuPy's indexing would wrap the index)
        raise IndexError(f"take: index out of range for a tensor of {n} elements (as torch)")
    flat = Tensor(flat + (flat < 0) * n)
    return reshape(index_select(reshape(input, (-1,)), 0, flat), tuple(index.shape))


def logit(input, eps=None):
    """torch.logit: log p - log(1 - p), p first taken to eps where below it and else to 1 - eps
    where above that (torch's order: eps > 0.5 too) when eps is given, the gradient 0 there.
    The gradient 1 / p + 1 / (1 - p): infinite at 0 and 1, as torch's."""
    p = _floating(input)
    if eps is not None:
        lo, hi = eps, 1 - eps
        p = where(_comparison("less")(p, lo), lo, where(_comparison("greater")(p, hi), hi, p))
    return sub(log(p), log1p(neg(p)))


def fix(input):
    """torch.fix: trunc (bool refused, as torch's)."""
    if input.dtype == np.bool_:
        raise NotImplementedError("fix: not implemented for bool tensors (as torch)")
    return trunc(input)


def sgn(input):
    """torch.sgn of real data: sign."""
    return sign(input)


def float_power(input, exponent):
    """torch.float_power: input ** exponent in float64."""
    as64 = lambda t: _astype(t, np.float64) if isinstance(t, Tensor) else float(t)  # noqa: E731
    return pow(as64(input), as64(exponent))


def copysign(input, other):
    """torch.copysign: |input| with other's sign (its sign bit: -0.0 counts as negative); the
    gradient flows to input only (0 at input 0, as torch's)."""
    if isinstance(other, Tensor):
        dtype = result_dtype(input.data, other.data)    # (torch's promotion, 0-d rules too)
        dtype = dtype if is_floating(dtype) else default_float()
        x = absolute(_astype(input, dtype) if input.dtype != dtype else input)
        return where(signbit(other), neg(x), x)
    x = absolute(_floating(input))
    return neg(x) if math.copysign(1.0, other) < 0 else x


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """torch.trapezoid: the trapezoid rule's integral of y along `dim`, at spacing dx (1) or
    at the points x (1-d: one per sample; else broadcast to y, fewer axes taken as leading
    ones). Integer y gives the default float dtype; bool is refused, as torch's."""
    if x is not None and dx is not None:
        raise TypeError("trapezoid: give x or dx, not both (as torch)")
    dim = dim_index(dim, y.ndim, "trapezoid")
    n = y.shape[dim]
    if n == 0:                  # (no interval: 0 in y's own dtype and shape without dim, as torch)
        shape = tuple(m for d, m in enumerate(y.shape) if d != dim)
        return sum(y, dim=dim) if is_floating(y.dtype) else \
            Tensor(xp_of(y.data).zeros(shape, y.dtype))
    for name, t in (("y", y), ("x", x), ("dx", dx)):
        if isinstance(t, (bool, np.bool_)) or isinstance(t, Tensor) and t.dtype == np.bool_:
            raise RuntimeError(f"trapezoid: received a bool input for `{name}`, but bool is not "
                               f"supported (as torch)")
    pairs = add(narrow(y, dim, 0, n - 1), narrow(y, dim, 1, n - 1))
    if x is None:
        return mul(sum(pairs, dim=dim), (1.0 if dx is None else dx) / 2)
    if x.ndim == 1:
        if x.shape[0] != n:
            raise RuntimeError(f"trapezoid: There must be one x value for each sample point: "
                               f"x has {x.shape[0]}, y {n} along dim {dim} (as torch)")
        x = reshape(x, tuple(n if d == dim else 1 for d in range(y.ndim)))
    elif x.ndim < y.ndim:
        x = reshape(x, (1,) * (y.ndim - x.ndim) + tuple(x.shape))
    return div(sum(mul(diff(x, dim=dim), pairs), dim=dim), 2)


def cartesian_prod(*tensors):
    """torch.cartesian_prod: every combination of the 1-d tensors' elements, one row each (one
    tensor: itself)."""
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"cartesian_prod: expect 1-d tensors, got {t.ndim}-d (as torch)")
    if len(tensors) == 1:
        return tensors[0]
    return stack([reshape(g, (-1,)) for g in meshgrid(*tensors, indexing="ij")], dim=1)


def block_diag(*tensors):
    """torch.block_diag: the tensors (0-d, 1-d as one row, 2-d) along the diagonal of one
    matrix, zeros elsewhere; their dtypes promoted."""
    if not tensors:
        return Tensor(np.zeros((1, 0), default_float()))
    blocks = []
    for t in tensors:
        if t.ndim > 2:
            raise RuntimeError(f"block_diag: Input tensors must have 2 or fewer dimensions. "
                               f"Input has {t.ndim} dimensions (as torch)")
        blocks.append(reshape(t, (1, 1) if t.ndim == 0 else (1, -1) if t.ndim == 1 else
                              tuple(t.shape)))
    dtype = result_dtype(*(t.data for t in tensors))    # (a 0-d one promotes as torch's)
    width = builtins.sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        right = width - left - b.shape[1]
        rows.append(pad(_astype(b, dtype) if b.dtype != dtype else b, (left, right)))
        left += b.shape[1]
    return cat(rows, dim=0)


def cdist(x1, x2, p=2.0):
    """torch.cdist: the p-norm distance of each row of x1 (..., P, M) to each of x2 (..., R,
    M): (..., P, R), by differences (torch takes a matrix product for p = 2 past 25 rows, which
    rounds otherwise); the gradient at a distance 0 is 0, as torch's."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"cdist: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must be at "
                           f"least 2-d with one number of columns (as torch)")
    _one_dtype("cdist", x1=x1, x2=x2)
    if not is_floating(x1.dtype):
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype} (as "
                           f"torch)")
    if not p >= 0:                                  # (NaN too)
        raise RuntimeError(f"cdist only supports non-negative p values, got {p} (as torch)")
    return norm(sub(unsqueeze(x1, -2), unsqueeze(x2, -3)), p=p, dim=-1)


def vander(x, N=None, increasing=False):
    """torch.vander: columns x ** (N - 1), ..., x ** 0 (increasing: the other way round), by a
    running product (so the gradient at x = 0 is finite, as torch's)."""
    if x.ndim != 1:
        raise RuntimeError(f"vander: x must be a one-dimensional tensor, got {x.ndim}-d (as "
                           f"torch)")
    N = x.shape[0] if N is None else builtins.int(N)
    if N < 0:
        raise RuntimeError(f"vander: N must be non-negative, got {N} (as torch)")
    dtype = x.dtype if x.dtype != np.bool_ else np.dtype(np.int64)
    x = _astype(x, dtype) if x.dtype != dtype else x
    ones = Tensor(xp_of(x.data).ones((x.shape[0], builtins.min(N, 1)), dtype))
    cols = [ones] + ([cumprod(expand(unsqueeze(x, 1), x.shape[0], N - 1), 1)] if N > 1 else [])
    out = cat(cols, dim=1)
    return out if increasing else flip(out, (1,))


def promote_types(type1, type2):
    """torch.promote_types: the smallest dtype both cast to (NumPy dtypes, bfloat16 as torch
    promotes it)."""
    from . import backend
    return backend.promote_types(type1, type2)


def can_cast(from_, to):
    """torch.can_cast: whether casting keeps the kind's order (bool < integers < floating <
    complex): float64 to float32 yes, float to int no."""
    rank = lambda d: 0 if d == np.bool_ else 1 if d.kind in "iu" else 2 if is_floating(d) \
        else 3   # noqa: E731     (bfloat16's kind is NumPy's 'V')
    return rank(np_dtype(from_)) <= rank(np_dtype(to))


def triu_indices(row, col, offset=0, *, dtype=np.int64, device=None):
    """torch.triu_indices: (2, n) row and column indices of the upper triangle."""
    _counts(row, col)
    return _tri_indices(np.triu_indices(row, offset, col), dtype, device)


def tril_indices(row, col, offset=0, *, dtype=np.int64, device=None):
    """torch.tril_indices: (2, n) row and column indices of the lower triangle."""
    _counts(row, col)
    return _tri_indices(np.tril_indices(row, offset, col), dtype, device)


def _counts(row, col):
    for name, n in (("row", row), ("col", col)):
        if n < 0:
            raise RuntimeError(f"{name} must be non-negative, got {n} (as torch)")


def _tri_indices(ij, dtype, device):
    out = Tensor(np.stack(ij).astype(np_dtype(dtype)))
    return out if device is None else out.to(device)


def _stride(self, dim=None):
    """torch's Tensor.stride(): the strides in elements (of one axis with dim)."""
    strides = tuple(builtins.int(s) // self.data.itemsize for s in self.data.strides)
    return strides if dim is None else strides[dim_index(dim, self.ndim, "stride")]


def _data_ptr(self):
    """torch's Tensor.data_ptr(): the address of the first element (device memory on a GPU)."""
    return builtins.int(self.data.data.ptr if is_gpu(self.data) else
                        self.data.__array_interface__["data"][0])


def _install_tensor_methods():
    spellings = {
        "__neg__": lambda self: neg(self),
        "__pos__": lambda self: self,
        # bitwise / logical on bool and integer tensors, as torch's: no graph (as comparisons)
        "__and__": _comparison("bitwise_and"), "__rand__": _comparison("bitwise_and"),
        "__or__": _comparison("bitwise_or"), "__ror__": _comparison("bitwise_or"),
        "__xor__": _comparison("bitwise_xor"), "__rxor__": _comparison("bitwise_xor"),
        "__invert__": lambda self: Tensor(xp_of(self.data).invert(self.data)),
        "__getitem__": lambda self, index: getitem(self, index),
        "flatten": lambda self, start_dim=0, end_dim=-1: flatten(self, start_dim, end_dim),
        "unsqueeze": lambda self, dim: unsqueeze(self, dim),
        "squeeze": lambda self, dim=None: squeeze(self, dim),
        "softmax": _method_softmax(softmax, "softmax"),
        "log_softmax": _method_softmax(log_softmax, "log_softmax"),
        "reshape": lambda self, *shape: reshape(self, *shape),
        "view": lambda self, *shape: reshape(self, *shape),
        "transpose": lambda self, *axes: transpose(self, *axes),
        "permute": lambda self, *dims: transpose(
            self, tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list))
            else dims) if dims else _no_dims("permute"),   # ((0, 1) changes nothing)
        "exp": lambda self: exp(self),
        "log1p": lambda self: log1p(self),
        "logsumexp": lambda self, dim, keepdim=False: logsumexp(self, dim, keepdim),
        "cumsum": lambda self, dim, dtype=None: cumsum(self, dim, dtype=dtype),
        "cumprod": lambda self, dim, dtype=None: cumprod(self, dim, dtype=dtype),
        "prod": lambda self, dim=None, keepdim=False, dtype=None: prod(self, dim, keepdim,
                                                                       dtype=dtype),
        "norm": lambda self, p="fro", dim=None, keepdim=False, dtype=None: norm(
            self, p, dim, keepdim, dtype=dtype),
        "tril": lambda self, diagonal=0: tril(self, diagonal),
        "triu": lambda self, diagonal=0: triu(self, diagonal),
        "roll": lambda self, shifts, dims=None: roll(self, shifts, dims),
        "bmm": lambda self, other: bmm(self, other),
        "square": lambda self: square(self),
        "log": lambda self: log(self),
        "relu": lambda self: relu(self),
        "tanh": lambda self: tanh(self),
        "sigmoid": lambda self: sigmoid(self),
        "clamp": lambda self, min=None, max=None: clamp(self, min, max),
        "astype": _astype,
        "_to_device": _to_device,
        "__bool__": _bool,
        "__iter__": _iter,
        "__array__": _array,
        "__float__": lambda self: builtins.float(self.item()),
        "__int__": lambda self: builtins.int(self.item()),
        "__abs__": lambda self: absolute(self),
        "any": lambda self, dim=None, keepdim=False: _truth(self, "any", dim, keepdim),
        "all": lambda self, dim=None, keepdim=False: _truth(self, "all", dim, keepdim),
        "numel": lambda self: builtins.int(self.data.size),
        "dim": lambda self: self.ndim,
        "pow": lambda self, exponent: pow(self, exponent),
        "abs": lambda self: absolute(self),
        "sqrt": lambda self: sqrt(self),
        "masked_fill": lambda self, mask, value: masked_fill(self, mask, value),
        "masked_fill_": lambda self, mask, value: _store_result(
            self, "masked_fill_()", lambda: masked_fill(self, mask, value), value),
        "clamp_": lambda self, min=None, max=None: _store_result(
            self, "clamp_()", lambda: clamp(self, min, max)),
        "mm": lambda self, other: _mm(self, other),
        "t": lambda self: _t(self),
        "narrow": lambda self, dim, start, length: narrow(self, dim, start, length),
        "flip": lambda self, *dims: flip(self, dims[0] if len(dims) == 1 else dims)
        if dims else _no_dims("flip"),
        "unbind": lambda self, dim=0: unstack(self, dim),
        "maximum": lambda self, other: maximum(self, other),
        "minimum": lambda self, other: minimum(self, other),
        "isnan": lambda self: isnan(self),
        "isinf": lambda self: isinf(self),
        "isfinite": lambda self: isfinite(self),
        "type_as": lambda self, other: _astype(self, other.dtype),
        "new_zeros": lambda self, *size, dtype=None, device=None: _new(
            self, "zeros", size, dtype, device),
        "new_ones": lambda self, *size, dtype=None, device=None: _new(
            self, "ones", size, dtype, device),
        "new_empty": lambda self, *size, dtype=None, device=None: _new(
            self, "empty", size, dtype, device),
        "new_full": lambda self, size, fill_value, dtype=None, device=None: _new(
            self, "full", (size, fill_value), dtype, device),
        "new_tensor": lambda self, data, dtype=None, device=None: _new_tensor(
            self, data, dtype, device),
        "var": lambda self, dim=None, unbiased=None, keepdim=False, **kw: var(
            self, dim, unbiased, keepdim, **kw),
        "std": lambda self, dim=None, unbiased=None, keepdim=False, **kw: std(
            self, dim, unbiased, keepdim, **kw),
        "expand": lambda self, *sizes: expand(self, *sizes),
        "expand_as": lambda self, other: expand(self, other.shape),
        "view_as": lambda self, other: reshape(self, other.shape),
        "repeat": lambda self, *sizes: repeat(self, *sizes),
        "gather": lambda self, dim, index: gather(self, dim, index),
        "scatter": lambda self, dim, index, src=None, value=None, reduce=None: scatter(
            self, dim, index, src, value, reduce),
        "scatter_add": lambda self, dim, index, src: scatter_add(self, dim, index, src),
        "scatter_": lambda self, dim, index, src=None, value=None, reduce=None: _scatter_(
            self, dim, index, src, value, reduce),
        "scatter_add_": lambda self, dim, index, src: _scatter_(self, dim, index, src,
                                                               reduce="add"),
        "index_select": lambda self, dim, index: index_select(self, dim, index),
        "sort": lambda self, dim=-1, descending=False: sort(self, dim, descending),
        "argsort": lambda self, dim=-1, descending=False: argsort(self, dim, descending),
        "topk": lambda self, k, dim=-1, largest=True, sorted=True: topk(self, k, dim, largest,
                                                                          sorted),
        "split": lambda self, size, dim=0: split(self, size, dim),
        "chunk": lambda self, chunks, dim=0: chunk(self, chunks, dim),
        "contiguous": lambda self, memory_format="contiguous": contiguous(self, memory_format),
        "is_contiguous": lambda self, memory_format="contiguous": is_contiguous(self,
                                                                                memory_format),
        "_to_memory_format": to_memory_format,
        "clone": lambda self, memory_format=None: clone(self, memory_format),
        "__iadd__": lambda self, other: _augmented(self, other, np.add, "x += y", add),
        "__isub__": lambda self, other: _augmented(self, _no_bool(other, "sub"), np.subtract,
                                                   "x -= y", sub),
        "__imul__": lambda self, other: _augmented(self, other, np.multiply, "x *= y", mul),
        "__itruediv__": lambda self, other: _augmented(self, other, _ew.true_divide, "x /= y",
                                                       div),
        "add_": lambda self, other, alpha=1: _arith_(self, other, np.add, "add_()", alpha),
        "sub_": lambda self, other, alpha=1: _arith_(self, _no_bool(other, "sub"), np.subtract,
                                                     "sub_()", alpha),
        "mul_": lambda self, other: _arith_(self, other, np.multiply, "mul_()"),
        "div_": lambda self, other: _arith_(self, other, _ew.true_divide, "div_()"),
        "__setitem__": _setitem,
        "copy_": _copy_,
        "fill_": _fill_,
        "normal_": lambda self, mean=0.0, std=1.0: _draw_(self, "normal_", mean, std),
        "uniform_": lambda self, *bounds, **kw: _draw_(self, "uniform_",
                                                       *_uniform_bounds(bounds, kw)),
        "zero_": lambda self: _fill_(self, 0, "zero_()"),
        "multinomial": _multinomial,
        "T": property(lambda self: transpose(self)),
        "mT": property(_matrix_transpose),
        # the op that made the tensor (None for a leaf and outside the graph), as torch's
        # grad_fn; its class names the op
        "grad_fn": property(lambda self: self._ctx),
    }
    for name, symbol, op in (("floordiv", "//", floor_divide), ("mod", "%", remainder),
                             ("pow", "**", pow), ("and", "&", spellings["__and__"]),
                             ("or", "|", spellings["__or__"]), ("xor", "^", spellings["__xor__"])):
        spellings[f"__i{name}__"] = lambda self, other, op=op, symbol=symbol: _augmented(
            self, other, None, f"x {symbol}= y", op)
    # the binary operators, each with its reflected form (2 - x is x.__rsub__(2))
    for name, op in (("add", add), ("sub", sub), ("mul", mul), ("truediv", div),
                     ("pow", pow), ("matmul", matmul), ("mod", remainder),
                     ("floordiv", floor_divide)):
        spellings[f"__{name}__"] = lambda self, other, op=op: op(self, other)
        spellings[f"__r{name}__"] = lambda self, other, op=op: op(other, self)
    spellings["remainder"] = spellings["__mod__"]
    for name, operator_name in (("add", "__add__"), ("sub", "__sub__"), ("mul", "__mul__"),
                                ("div", "__truediv__"), ("neg", "__neg__"),
                                ("matmul", "__matmul__")):          # (x.add(y) is x + y)
        spellings[name] = spellings[operator_name]
    for name, reduce in (("sum", sum), ("mean", mean), ("amax", amax), ("max", max),
                         ("argmax", argmax), ("amin", amin), ("argmin", argmin), ("min", min)):
        spellings[name] = _reduction(reduce)          # (x.sum(dim=1, keepdim=True), ...)
    for short, ufunc in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"),
                         ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal")):
        for name in (f"__{short}__", short):          # (x == y and x.eq(y))
            spellings[name] = _comparison(ufunc)
    for fn in (expm1, log2, log10, reciprocal, rsqrt, sin, cos, tan, sinh, cosh, atan, asin, acos,
               asinh, acosh, atanh, erf, floor, ceil, trunc, sign, logical_not):
        spellings[fn.__name__] = lambda self, fn=fn: fn(self)
    for fn in (fmod, atan2, logical_and, logical_or, logical_xor, outer, allclose):
        spellings[fn.__name__] = lambda self, other, fn=fn, **kw: fn(self, other, **kw)
    spellings["round"] = lambda self, decimals=0: round(self, decimals)
    spellings["repeat_interleave"] = lambda self, repeats, dim=None: repeat_interleave(
        self, repeats, dim)
    spellings["nonzero"] = lambda self, as_tuple=False: nonzero(self, as_tuple)
    spellings["bincount"] = lambda self, weights=None, minlength=0: bincount(self, weights,
                                                                             minlength)
    spellings["unique"] = lambda self, sorted=True, return_inverse=False, return_counts=False, \
        dim=None: unique(self, sorted, return_inverse, return_counts, dim)
    spellings["is_floating_point"] = lambda self: is_floating(self.dtype)
    for fn in (addcmul, addcdiv):
        spellings[fn.__name__] = lambda self, t1, t2, *, value=1, fn=fn: fn(self, t1, t2,
                                                                            value=value)
    for fn in (addmm, addmv, baddbmm, addbmm):
        spellings[fn.__name__] = lambda self, a, b, *, beta=1, alpha=1, fn=fn: fn(
            self, a, b, beta=beta, alpha=alpha)
    for fn in (lerp, index_fill, index_copy, select, hypot, dot, isclose, equal, masked_select):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    for fn in (exp2, frac):
        spellings[fn.__name__] = lambda self, fn=fn: fn(self)
    for fn in (kthvalue, median, fmax, fmin, take_along_dim, diag):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    spellings["aminmax"] = lambda self, *, dim=None, keepdim=False: aminmax(self, dim=dim,
                                                                            keepdim=keepdim)
    for fn in (subtract, clamp_min, clamp_max, broadcast_to, kron, rot90, logaddexp,
               logaddexp2, xlogy, dist, heaviside, isin):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    for fn in (positive, deg2rad, rad2deg, ravel, msort, sinc, nan_to_num, trace, signbit,
               isneginf, isposinf):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    for fn in (multiply, divide, true_divide, negative, greater, less, greater_equal,
               less_equal, not_equal):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    for fn in (mv, inner, vdot, cross, fliplr, flipud, tensor_split, hsplit, vsplit, dsplit,
               take, logit, fix, sgn, float_power, copysign, absolute):
        spellings[fn.__name__] = lambda self, *args, fn=fn, **kw: fn(self, *args, **kw)
    spellings.update(
        clip=lambda self, min=None, max=None: clamp(self, min, max),
        swapaxes=lambda self, axis0, axis1: swapaxes(self, axis0, axis1),
        swapdims=lambda self, dim0, dim1: swapdims(self, dim0, dim1),
        movedim=lambda self, source, destination: movedim(self, source, destination),
        moveaxis=lambda self, source, destination: movedim(self, source, destination),
        tile=lambda self, *dims, **kw: tile(self, kw["dims"] if "dims" in kw else dims[0] if len(
            dims) == 1 and isinstance(dims[0], (tuple, list)) else dims),
        nansum=lambda self, dim=None, keepdim=False, *, dtype=None: nansum(self, dim, keepdim,
                                                                           dtype=dtype),
        nanmean=lambda self, dim=None, keepdim=False, *, dtype=None: nanmean(self, dim, keepdim,
                                                                             dtype=dtype),
        count_nonzero=lambda self, dim=None: count_nonzero(self, dim),
        unflatten=lambda self, dim, sizes: unflatten(self, dim, sizes),
        diff=lambda self, n=1, dim=-1, prepend=None, append=None: diff(self, n, dim, prepend,
                                                                       append),
        index_add=lambda self, dim, index, source, *, alpha=1: index_add(self, dim, index,
                                                                         source, alpha=alpha),
        argwhere=lambda self: argwhere(self),
        where=lambda self, condition, other: where(condition, self, other),
        bitwise_and=lambda self, other: spellings["__and__"](self, other),
        bitwise_or=lambda self, other: spellings["__or__"](self, other),
        bitwise_xor=lambda self, other: spellings["__xor__"](self, other),
        bitwise_not=lambda self: spellings["__invert__"](self),
        short=lambda self: _astype(self, np.int16), byte=lambda self: _astype(self, np.uint8),
        char=lambda self: _astype(self, np.int8),
        element_size=lambda self: builtins.int(self.data.itemsize),
        nelement=lambda self: builtins.int(self.data.size),
        ndimension=lambda self: self.ndim,
        stride=lambda self, dim=None: _stride(self, dim), data_ptr=lambda self: _data_ptr(self),
        nbytes=property(lambda self: builtins.int(self.data.nbytes)),
        itemsize=property(lambda self: builtins.int(self.data.itemsize)))
    for name, method in spellings.items():
        if not isinstance(method, property):
            method.__name__ = method.__qualname__ = name
        setattr(Tensor, name, method)
    Tensor.__hash__ = object.__hash__       # (by identity, as torch's: __eq__ is elementwise)


_install_tensor_methods()

"""Elementwise ops with NumPy broadcasting: arithmetic, exp/log, activations, clamp, dropout.

Most are written once for both paths through `self.xp` (NumPy or CuPy run the same expression);
relu / sigmoid / tanh take cuDNN's activation kernels on the GPU (half-precision data: CuPy
kernels), leaky_relu a fused CuPy kernel.
"""
import math

import numpy as np

from .. import kernels
from ..backend import (accumulation_dtype, default_float, copy_like, is_channels_last,
                       is_floating, is_half, same_dtype, to_channels_last)
from ..tensor import Function


def shape_of(a):
    return getattr(a, "shape", ())


def unbroadcast(g, shape):
    """Sum g over the axes that broadcasting added or stretched, giving `shape`."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                     if n == 1 and g.shape[lead + i] != 1)
    A = accumulation_dtype(g.dtype)          # half data: summed in float32, rounded once
    return g.sum(axis=axes, keepdims=True, dtype=A).astype(g.dtype, copy=False).reshape(shape)


def unbroadcast_graph(g, shape):
    """unbroadcast of a gradient Tensor, in differentiable ops (create_graph's backward_graph)."""
    from .. import functional as F
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                     if n == 1 and g.shape[lead + i] != 1)
    return F.reshape(F.sum(g, axes, keepdims=True), shape)


def _grads_graph(fn, *terms):
    """backward_graph's tuple: each term (a function of nothing, called only where that input
    wants a gradient) unbroadcast to its input's shape, None for the others."""
    return tuple(unbroadcast_graph(term(), shape_of(t)) if need else None
                 for t, need, term in zip(fn.inputs, fn.needs_input_grad, terms))


def _const(like, array):
    """A constant Tensor (no graph) of `array` in the dtype of the Tensor `like`."""
    from ..tensor import Tensor
    return Tensor(array.astype(like.dtype, copy=False))


class Add(Function):
    def forward(self, a, b):
        self.shapes = shape_of(a), shape_of(b)
        a, b = same_dtype(a, b)
        return a + b

    def backward(self, gy):
        return tuple(unbroadcast(gy, s) if need else None
                     for s, need in zip(self.shapes, self.needs_input_grad))

    def backward_graph(self, gy):
        return _grads_graph(self, lambda: gy, lambda: gy)


class Sub(Function):
    def forward(self, a, b):
        self.shapes = shape_of(a), shape_of(b)
        a, b = same_dtype(a, b)
        return a - b

    def backward(self, gy):
        ga = unbroadcast(gy, self.shapes[0]) if self.needs_input_grad[0] else None
        gb = unbroadcast(-gy, self.shapes[1]) if self.needs_input_grad[1] else None
        return ga, gb

    def backward_graph(self, gy):
        return _grads_graph(self, lambda: gy, lambda: -gy)


class Mul(Function):
    def forward(self, a, b):
        a, b = same_dtype(a, b)
        need = self.needs_input_grad or (False, False)
        self.shapes = shape_of(a), shape_of(b)
        self.saved = (a if need[1] else None), (b if need[0] else None)   # (as torch's mul)
        return a * b

    def backward(self, gy):
        a, b = self.saved
        ga = unbroadcast(gy * b, self.shapes[0]) if self.needs_input_grad[0] else None
        gb = unbroadcast(gy * a, self.shapes[1]) if self.needs_input_grad[1] else None
        return ga, gb

    def backward_graph(self, gy):
        a, b = self.inputs
        return _grads_graph(self, lambda: gy * b, lambda: gy * a)


def _division_operands(a, b):
    """a and b for a true division, in one dtype (same_dtype); bool / integer data in the default
    float dtype, as torch's true division (NumPy's would be float64)."""
    a, b = same_dtype(a, b)
    if not any(is_floating(v.dtype) for v in (a, b) if hasattr(v, "dtype")):
        a, b = (v.astype(default_float()) if hasattr(v, "dtype") else v for v in (a, b))
    return a, b


def true_divide(a, b):
    """a / b by Div's rule (x /= y uses it on arrays)."""
    a, b = _division_operands(a, b)
    return a / b


class Div(Function):
    def forward(self, a, b):
        a, b = _division_operands(a, b)
        need = self.needs_input_grad or (False, False)
        self.shapes = shape_of(a), shape_of(b)
        self.saved = (a if need[1] else None), b           # (as torch's div)
        return a / b

    def backward(self, gy):
        a, b = self.saved
        if self.gpu:           # half data: -gy (a / b) / b in float, rounded once (at the end)
            acc = accumulation_dtype(gy.dtype)      # (a Python number operand stays as it is)
            gy, a, b = (v.astype(acc, copy=False) if hasattr(v, "astype") else v
                        for v in (gy, a, b))
        ga = unbroadcast(gy / b, self.shapes[0]) if self.needs_input_grad[0] else None
        # -gy a / b^2 as torch takes it, -gy (a / b) / b: b * b leaves float32's range first
        gb = unbroadcast(-gy * (a / b) / b, self.shapes[1]) if self.needs_input_grad[1] else None
        return ga, gb

    def backward_graph(self, gy):
        a, b = self.inputs
        return _grads_graph(self, lambda: gy / b, lambda: -gy * (a / b) / b)


class Extremum(Function):
    """y = max(a, b) (larger) or min(a, b) elementwise, NaN propagating, in the operands'
    promoted dtype (torch.maximum / minimum); each side's gradient as torch's: all of gy where
    it is the one taken or either is NaN, half where they are equal, 0 where the other wins."""

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        self.shapes = shape_of(a), shape_of(b)
        if self.needs_input_grad:
            self.saved = a, b
        return (self.xp.maximum if self.larger else self.xp.minimum)(a, b)

    def backward(self, gy):
        a, b = self.saved
        xp, need = self.xp, self.needs_input_grad
        equal = a == b
        half = gy * gy.dtype.type(0.5)
        loses_a = (a < b) if self.larger else (a > b)           # (NaN: neither loses)
        grads = []
        for i, loses in enumerate((loses_a, (b < a) if self.larger else (b > a))):
            if not need[i]:
                grads.append(None)
                continue
            g = xp.where(loses, gy.dtype.type(0), xp.where(equal, half, gy))
            grads.append(unbroadcast(g.astype(gy.dtype, copy=False), self.shapes[i]))
        return tuple(grads)

    def backward_graph(self, gy):
        from .. import functional as F
        a, b = same_dtype(*(getattr(t, "data", t) for t in self.inputs))
        equal = a == b
        losers = ((a < b), (b < a)) if self.larger else ((a > b), (b > a))
        return _grads_graph(self, *(
            (lambda lose=lose: F.where(lose, 0.0, F.where(equal, gy * 0.5, gy)))
            for lose in losers))


def _integer_zero_divisor(name, a, b):
    """An integer division by zero, refused as torch refuses it (NumPy would give 0 with a
    warning); on the host only (a device would have to sync to know). Floating data divides by
    an integer 0 as by 0.0 (inf, NaN), as torch's."""
    dtype_a = getattr(a, "dtype", None)
    if is_floating(dtype_a if dtype_a is not None else np.dtype(type(a))):
        return
    dtype = getattr(b, "dtype", None)
    if dtype is not None and dtype.kind in "iub" and isinstance(b, np.ndarray) and \
            not np.all(b != 0):
        raise ZeroDivisionError(f"{name}: integer division by zero (as torch)")
    if dtype is None and isinstance(b, (int, np.integer)) and b == 0:
        raise ZeroDivisionError(f"{name}: integer division by zero (as torch)")


def _floating_operands(a, b):
    return any(hasattr(v, "dtype") and is_floating(v.dtype) for v in (a, b))


def floor_divide(xp, a, b):
    """a // b as NumPy's and torch's: for floats, from fmod (1.0 // 0.1 is 9.0; CuPy's
    floor_divide gives 10.0, the floor of a / b rounded)."""
    if xp is not np and _floating_operands(a, b):
        return kernels.floor_divmod(a, b, "quotient")
    return xp.floor_divide(a, b)


class Remainder(Function):
    """y = a - floor(a / b) * b, the sign of b's (Python's %, torch.remainder); ga = gy,
    gb = -gy * floor(a / b)."""
    ufunc = "remainder"

    def quotient(self, a, b):
        return floor_divide(self.xp, a, b)

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        _integer_zero_divisor(self.ufunc, a, b)
        self.shapes = shape_of(a), shape_of(b)
        if self.needs_input_grad and self.needs_input_grad[1]:
            self.saved = a, b
        if self.gpu and self.ufunc == "remainder" and _floating_operands(a, b):
            return kernels.floor_divmod(a, b, "remainder")
        return getattr(self.xp, self.ufunc)(a, b)

    def backward(self, gy):
        need = self.needs_input_grad
        ga = unbroadcast(gy, self.shapes[0]) if need[0] else None
        gb = None
        if need[1]:
            a, b = self.saved
            gb = unbroadcast(-gy * self.quotient(a, b).astype(gy.dtype, copy=False),
                             self.shapes[1])
        return ga, gb


class Fmod(Remainder):
    """y = a - trunc(a / b) * b, the sign of a's (C's fmod, torch.fmod); gb = -gy trunc(a / b)."""
    ufunc = "fmod"

    def quotient(self, a, b):
        return self.xp.trunc(a / b)



class Atan2(Function):
    """y = atan2(a, b), the angle of the point (b, a) (torch.atan2); with r = 1 / (a^2 + b^2),
    ga = gy b r and gb = -gy a r (torch's formula)."""

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        self.shapes, self.saved = (shape_of(a), shape_of(b)), (a, b)
        return self.xp.arctan2(a, b)

    def backward(self, gy):
        a, b = self.saved
        r = 1 / (a * a + b * b)
        need = self.needs_input_grad
        return (unbroadcast(gy * b * r, self.shapes[0]) if need[0] else None,
                unbroadcast(gy * -a * r, self.shapes[1]) if need[1] else None)

    def backward_graph(self, gy):
        a, b = self.inputs
        return _grads_graph(self, lambda: gy * b / (a * a + b * b),
                            lambda: gy * -a / (a * a + b * b))


class Hypot(Function):
    """y = sqrt(a^2 + b^2) without overflow or underflow on the way (NumPy's / CuPy's hypot;
    torch.hypot); ga = gy a / y, gb = gy b / y (torch's formula: NaN at a = b = 0)."""

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        y = self.xp.hypot(a, b)
        self.shapes, self.saved = (shape_of(a), shape_of(b)), (a, b, y)
        return y

    def backward(self, gy):
        a, b, y = self.saved
        need = self.needs_input_grad
        return (unbroadcast(gy * a / y, self.shapes[0]) if need[0] else None,
                unbroadcast(gy * b / y, self.shapes[1]) if need[1] else None)

    def backward_graph(self, gy):
        from .. import functional as F
        a, b = self.inputs
        return _grads_graph(self, lambda: gy * a / F.hypot(a, b), lambda: gy * b / F.hypot(a, b))


class FloorDivide(Function):
    """y = floor(a / b) (Python's //, torch.floor_divide); no derivative, as torch's: a
    backward through it is refused, not silently zero."""

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        _integer_zero_divisor("floor_divide", a, b)
        return floor_divide(self.xp, a, b)

    def backward(self, gy):
        raise NotImplementedError("FloorDivide.backward: the derivative of floor division (//) "
                                  "is not implemented (as torch's); detach() its operands")


class Cast(Function):
    """y = x as self.dtype; gx = gy as x's dtype."""
    upcast_half = False

    def forward(self, x):
        self.src = x.dtype
        return x.astype(self.dtype)

    def backward(self, gy):
        return gy.astype(self.src)

    def backward_graph(self, gy):
        from .. import functional as F
        return F.cast(gy, self.src)


class Clone(Function):
    """y = a copy of x laid out as x is, or in `memory_format` ('contiguous': C order;
    'channels_last': a 4-d (N, C, H, W) stored (N, H, W, C)); gx = gy."""
    memory_format = None

    def forward(self, x):
        if self.memory_format == "channels_last":
            return to_channels_last(x) if not is_channels_last(x) else copy_like(x, x)
        if self.memory_format == "contiguous":    # (C order's strides for size-1 axes too)
            out = self.xp.empty(x.shape, x.dtype)
            out[...] = x
            return out
        return copy_like(x, x)

    def backward(self, gy):
        return gy

    def backward_graph(self, gy):
        return gy


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy

    def backward_graph(self, gy):
        return -gy


class Pow(Function):
    """y = x ** c for a constant exponent c."""

    def forward(self, x):
        self.saved = x
        return x ** self.exponent

    def backward(self, gy):
        x = self.saved
        if self.exponent == 0:                # (0 * 0 ** -1 is NaN at x = 0; torch gives 0)
            return self.xp.zeros_like(gy)
        return gy * self.exponent * x ** (self.exponent - 1)

    def backward_graph(self, gy):
        if self.exponent == 0:
            return gy * 0
        (x,) = self.inputs
        return gy * self.exponent * x ** (self.exponent - 1) if self.exponent != 1 else gy


class PowTensor(Function):
    """y = a ** b with b a Tensor (a a Tensor or a number: 2 ** x), broadcasting; as torch, the
    exponent's gradient y * log(a) is 0 where a == 0 and b >= 0, and a's is 0 where b == 0."""

    def forward(self, a, b):
        a, b = same_dtype(a, b)
        self.shapes = shape_of(a), shape_of(b)
        y = a ** b
        self.saved = a, b, y
        return y

    def backward(self, gy):
        a, b, y = self.saved
        xp = self.xp
        ga = gb = None
        if self.needs_input_grad[0]:                 # (0 ** -1, log 0: masked as torch's)
            ga = xp.where(b == 0, 0, gy * b * a ** (b - 1)).astype(gy.dtype)
            ga = unbroadcast(ga, self.shapes[0])
        if self.needs_input_grad[1]:
            gb = xp.where((a == 0) & (b >= 0), 0, gy * y * xp.log(a)).astype(gy.dtype)
            gb = unbroadcast(gb, self.shapes[1])
        return ga, gb


class Exp(Function):
    def forward(self, x):
        self.saved = y = self.xp.exp(x)
        return y

    def backward(self, gy):
        return gy * self.saved

    def backward_graph(self, gy):
        from .. import functional as F
        return gy * F.exp(self.inputs[0])


class Abs(Function):
    """y = |x|; gx = gy * sign(x) (0 at 0, as torch's)."""

    def forward(self, x):
        self.saved = x
        return self.xp.abs(x)

    def backward(self, gy):
        return (gy * self.xp.sign(self.saved)).astype(gy.dtype, copy=False)

    def backward_graph(self, gy):
        return gy * _const(gy, self.xp.sign(self.saved))


class Log(Function):
    def forward(self, x):
        self.saved = x
        return self.xp.log(x)

    def backward(self, gy):
        return gy / self.saved

    def backward_graph(self, gy):
        return gy / self.inputs[0]


class Log1p(Function):
    """y = log(1 + x), exact for small x (log of 1 + x rounds x away); gx = gy / (1 + x)."""

    def forward(self, x):
        self.saved = x
        return self.xp.log1p(x)

    def backward(self, gy):
        return gy / (1 + self.saved)

    def backward_graph(self, gy):
        return gy / (1 + self.inputs[0])


class Unary(Function):
    """y = f(x) for one of torch's floating elementwise functions, through the NumPy / CuPy
    ufunc of the same name (`ufunc`); its gradient gy * f'(x) from `derivative(x, y)`, in the
    data's dtype. One class per function below: the table of what torch has and its derivative
    is all they are. (An integer input was made float32 before: functional._floating.)"""
    ufunc = None

    def forward(self, x):
        y = getattr(self.xp, self.ufunc)(x)
        self.saved = x, y
        return y

    def backward(self, gy):
        x, y = self.saved
        return (gy * self.derivative(self.xp, x, y)).astype(gy.dtype, copy=False)

    def backward_graph(self, gy):
        """The same derivative(), on Tensors: x, and y recomputed by this op's class (the
        functions it names taken from layers.functional, which has each under NumPy's name)."""
        from .. import functional as F
        (x,) = self.inputs
        return gy * self.derivative(F, x, type(self).apply(x))


class Sin(Unary):
    ufunc = "sin"
    def derivative(self, xp, x, y): return xp.cos(x)


class Cos(Unary):
    ufunc = "cos"
    def derivative(self, xp, x, y): return -xp.sin(x)


class Tan(Unary):
    ufunc = "tan"
    def derivative(self, xp, x, y): return 1 + y * y


class Expm1(Unary):
    """exp(x) - 1, exact for small x."""
    ufunc = "expm1"
    def derivative(self, xp, x, y): return y + 1


class Log2(Unary):
    ufunc = "log2"
    def derivative(self, xp, x, y): return 1 / (x * math.log(2))


class Log10(Unary):
    ufunc = "log10"
    def derivative(self, xp, x, y): return 1 / (x * math.log(10))


class Reciprocal(Unary):
    ufunc = "reciprocal"
    def derivative(self, xp, x, y): return -(y * y)


class Rsqrt(Unary):
    """1 / sqrt(x) (NumPy has no rsqrt ufunc: the quotient, one rounding more than torch's)."""
    def forward(self, x):
        y = (1 / self.xp.sqrt(x)).astype(x.dtype, copy=False)
        self.saved = x, y
        return y

    def derivative(self, xp, x, y): return -0.5 * y * y * y


class Sinh(Unary):
    ufunc = "sinh"
    def derivative(self, xp, x, y): return xp.cosh(x)


class Cosh(Unary):
    ufunc = "cosh"
    def derivative(self, xp, x, y): return xp.sinh(x)


class Arctan(Unary):
    ufunc = "arctan"
    def derivative(self, xp, x, y): return 1 / (1 + x * x)


class Arcsin(Unary):
    ufunc = "arcsin"
    def derivative(self, xp, x, y): return 1 / xp.sqrt(1 - x * x)


class Arccos(Unary):
    ufunc = "arccos"
    def derivative(self, xp, x, y): return -1 / xp.sqrt(1 - x * x)


class Arcsinh(Unary):
    ufunc = "arcsinh"
    def derivative(self, xp, x, y): return 1 / xp.sqrt(x * x + 1)


class Arccosh(Unary):
    ufunc = "arccosh"
    def derivative(self, xp, x, y): return 1 / xp.sqrt(x * x - 1)


class Arctanh(Unary):
    ufunc = "arctanh"
    def derivative(self, xp, x, y): return 1 / (1 - x * x)


class Erf(Unary):
    """The error function, 2/sqrt(pi) times the integral of exp(-t^2) from 0 to x (NumPy has no
    erf ufunc: math.erf element by element on the CPU, exact in float64; CUDA's erf on the
    GPU, in float for float32 and half data)."""

    def forward(self, x):
        y = kernels.erf(x) if self.gpu else _erf(x).astype(x.dtype)
        self.saved = x, y
        return y

    def derivative(self, xp, x, y): return (2 / math.sqrt(math.pi)) * xp.exp(-(x * x))


class Rounding(Unary):
    """floor / ceil / rint (round: half to even, as torch's; with `decimals`, NumPy's / CuPy's
    round, torch's formula) / trunc / sign of floating data: a step function, whose gradient is
    0 everywhere, as torch's. sign(NaN) is 0, as torch's (NumPy's is NaN)."""
    decimals = 0

    def forward(self, x):
        self.saved = x, None
        if self.decimals:
            return self.xp.round(x, self.decimals)
        y = getattr(self.xp, self.ufunc)(x)
        return self.xp.where(x != x, 0, y).astype(x.dtype, copy=False) if self.ufunc == "sign" \
            else y

    def derivative(self, xp, x, y):
        return xp.zeros_like(x)

    def backward_graph(self, gy):
        return gy * 0                           # (a step function: 0, no graph back to x)


class _CudnnActivation(Function):
    """y = f(x) with cuDNN's activation forward/backward on the GPU. A channels-last x is run as
    its packed NHWC view (elementwise, the order does not matter) and y is channels-last too.
    Half-precision data takes this project's CuPy kernels instead (float math, one rounding),
    whose every dtype CI compiles: cuDNN's legacy activations are not checked with bfloat16
    here. Their gradient is taken from x, on both paths: from a y rounded to bfloat16 (or even
    kept in float32), tanh's 1 - y^2 and the sigmoid's y (1 - y) near saturation would keep
    only the rounding. float32 / float64 data take torch's formulas, from y."""
    mode = None
    name = None                # the CuPy kernels' name for the activation
    nhwc = False
    kernel = False

    def forward_gpu(self, x):
        from cudnnlite import activation, boundary
        self.kernel = is_half(x.dtype) or x.size == 0     # (cuDNN takes no empty tensor)
        if self.kernel:
            self.saved = x, None
            return kernels.activation(self.name, x)
        self.nhwc = is_channels_last(x)
        if self.nhwc:
            x = x.transpose(0, 2, 3, 1)
        x = boundary.packed("cudnnActivationForward", "x", x)    # the copy backward reads too
        y = activation.forward(x, self.mode)
        self.saved = x, y
        return y.transpose(0, 3, 1, 2) if self.nhwc else y

    def backward(self, gy):
        x, y = self.saved
        if self.gpu and self.kernel:
            return kernels.activation_grad_from_x(self.name, x, gy)
        if self.gpu:
            from cudnnlite import activation
            if self.nhwc:
                gy = gy.transpose(0, 2, 3, 1)
            gx = activation.backward(y, self.xp.ascontiguousarray(gy), x, self.mode)
            return gx.transpose(0, 3, 1, 2) if self.nhwc else gx
        return self.grad_cpu(x, y, gy)

    def backward_graph(self, gy):
        return gy * self.derivative_graph(self.inputs[0])


class ReLU(_CudnnActivation):
    mode = 1  # CUDNN_ACTIVATION_RELU
    name = "relu"

    def forward_cpu(self, x):
        y = np.maximum(x, 0)
        self.saved = x, y
        return y

    def grad_cpu(self, x, y, gy):
        # selected, as torch's threshold_backward: a NaN gy stays out, a NaN x passes gy
        return np.where(x <= 0, gy.dtype.type(0), gy)

    def backward_graph(self, gy):
        from .. import functional as F
        return F.where(self.inputs[0].data <= 0, 0.0, gy)


class Sigmoid(_CudnnActivation):
    mode = 0  # CUDNN_ACTIVATION_SIGMOID
    name = "sigmoid"

    def forward_cpu(self, x):
        # exp of a non-positive number only: no overflow for large |x|
        e = np.exp(-np.abs(x))
        y = np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)
        self.saved = x, y
        return y

    def grad_cpu(self, x, y, gy):
        if self.half is not None:       # half data, as the GPU path: from x, no cancellation
            e = np.exp(-np.abs(x))
            return gy * e / ((1 + e) * (1 + e))
        return gy * y * (1 - y)         # (float32 / float64: torch's formula, from y)

    def derivative_graph(self, x):
        y = Sigmoid.apply(x)
        return y * (1 - y)


class Tanh(_CudnnActivation):
    mode = 2  # CUDNN_ACTIVATION_TANH
    name = "tanh"

    def forward_cpu(self, x):
        y = np.tanh(x)
        self.saved = x, y
        return y

    def grad_cpu(self, x, y, gy):
        if self.half is not None:       # half data, as the GPU path: 1 / cosh^2 from x,
            e = np.exp(-2 * np.abs(x))  # as 4 e / (1 + e)^2 (no overflow for large |x|)
            return gy * 4 * e / ((1 + e) * (1 + e))
        return gy * (1 - y * y)

    def derivative_graph(self, x):
        y = Tanh.apply(x)
        return 1 - y * y


class LeakyReLU(Function):
    """y = x if x > 0 else slope * x."""

    def forward_cpu(self, x):
        self.saved = x
        return np.where(x > 0, x, x * x.dtype.type(self.slope))

    def forward_gpu(self, x):
        self.saved = x
        return kernels.leaky_relu(x, self.slope)

    def backward(self, gy):
        x = self.saved
        if self.gpu:
            return kernels.leaky_relu_grad(x, gy, self.slope)
        return np.where(x > 0, gy, gy * gy.dtype.type(self.slope))

    def backward_graph(self, gy):
        from .. import functional as F
        return F.where(self.inputs[0].data > 0, gy, gy * self.slope)


_erf = np.vectorize(math.erf, otypes=[np.float64])     # (NumPy has no erf: math's, exact)


class GELU(Function):
    """y = x * Phi(x), Phi the standard normal CDF (approximate='none'), or torch's
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ('tanh'); gx = gy * y'(x), from x. The NumPy
    path computes in float64 and rounds once."""

    def forward(self, x):
        self.saved = x
        if self.gpu:
            return kernels.gelu(x, self.approximate)
        v = x.astype(np.float64)
        if self.approximate == "tanh":
            y = 0.5 * v * (1 + np.tanh(_SQRT_2_PI * (v + 0.044715 * v ** 3)))
        else:
            y = v * 0.5 * (1 + _erf(v / math.sqrt(2)))
        return y.astype(x.dtype)

    def backward(self, gy):
        x = self.saved
        if self.gpu:
            return kernels.gelu_grad(x, gy, self.approximate)
        v = x.astype(np.float64)
        if self.approximate == "tanh":
            t = np.tanh(_SQRT_2_PI * (v + 0.044715 * v ** 3))
            d = 0.5 * (1 + t) + 0.5 * v * _SQRT_2_PI * (1 + 3 * 0.044715 * v * v) * (1 - t * t)
        else:
            d = 0.5 * (1 + _erf(v / math.sqrt(2))) + v * np.exp(-0.5 * v * v) / math.sqrt(
                2 * math.pi)
        return (gy * d).astype(gy.dtype)

    def backward_graph(self, gy):
        """gy * y'(x), y' spelled in differentiable ops (Erf for the normal CDF)."""
        from .. import functional as F
        (x,) = self.inputs
        if self.approximate == "tanh":
            t = F.tanh(_SQRT_2_PI * (x + 0.044715 * x ** 3))
            d = 0.5 * (1 + t) + 0.5 * x * _SQRT_2_PI * (1 + 3 * 0.044715 * x * x) * (1 - t * t)
        else:
            d = 0.5 * (1 + Erf.apply(x / math.sqrt(2))) + x * F.exp(-0.5 * x * x) / math.sqrt(
                2 * math.pi)
        return gy * d


_SQRT_2_PI = math.sqrt(2 / math.pi)


class Where(Function):
    """y = a where cond else b, cond a constant boolean array broadcasting with a and b (a or b
    may be a Python number: torch.masked_fill is where(mask, value, x)). y has the two arrays'
    promoted dtype (an int array and a float one: float), or the one array's dtype where the
    other operand is a number. Each input's gradient is gy where it was picked, 0 elsewhere."""
    kept = ("cond",)

    def forward(self, a, b):
        xp = self.xp
        self.shapes = shape_of(a), shape_of(b)
        a, b = same_dtype(a, b)                  # (a number takes the array's dtype)
        dtype = (a if hasattr(a, "dtype") else b).dtype
        return xp.where(self.cond, a, b).astype(dtype, copy=False)

    def backward(self, gy):
        zero = gy.dtype.type(0)
        ga = unbroadcast(self.xp.where(self.cond, gy, zero), self.shapes[0]) \
            if self.needs_input_grad[0] else None
        gb = unbroadcast(self.xp.where(self.cond, zero, gy), self.shapes[1]) \
            if self.needs_input_grad[1] else None
        return ga, gb

    def backward_graph(self, gy):
        from .. import functional as F
        return _grads_graph(self, lambda: F.where(self.cond, gy, 0.0),
                            lambda: F.where(self.cond, 0.0, gy))


class Clamp(Function):
    """y = min(max(x, lo), hi); the gradient passes where lo <= x <= hi (as torch.clamp)."""

    def forward(self, x):
        self.saved = x
        return self.xp.clip(x, self.lo, self.hi)

    def _kept(self):
        """Where the gradient passes: lo <= x <= hi."""
        x = self.saved
        keep = self.xp.ones(x.shape, dtype=bool)
        if self.lo is not None:
            keep &= x >= self.lo
        if self.hi is not None:
            keep &= x <= self.hi
        return keep

    def backward(self, gy):
        return self.xp.where(self._kept(), gy, gy.dtype.type(0))   # (selected, as torch's)

    def backward_graph(self, gy):
        from .. import functional as F
        return F.where(self._kept(), gy, 0.0)


class Dropout(Function):
    """y = x * mask / (1 - p), mask ~ Bernoulli(1 - p); NumPy's generator on the CPU, the
    device-side counter-based generator on the GPU (no host sync, safe in a CUDA graph).
    mask_shape (Dropout2d's (N, C, 1, 1)): one draw for each entry of that shape, broadcast
    over x (a whole channel kept or dropped); None: one per element."""
    mask_shape = None

    def forward_cpu(self, x):
        from .. import random
        keep = random.host_generator().random(self.mask_shape or x.shape) >= self.p
        self.saved = scale = keep.astype(x.dtype) / x.dtype.type(1 - self.p)
        return x * scale

    def forward_gpu(self, x):
        from .. import random
        if self.mask_shape is None:
            y, self.saved = random.device_generator().dropout(x, self.p)
            return y
        ones = self.xp.ones(self.mask_shape, x.dtype)
        _, self.saved = random.device_generator().dropout(ones, self.p)
        return (x * self.saved).astype(x.dtype, copy=False)

    def backward(self, gy):
        return gy * self.saved

    def backward_graph(self, gy):
        return gy * _const(gy, self.saved)

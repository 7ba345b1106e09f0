"""Losses, each one op (forward and its closed-form gradient): BCE, BCE-with-logits, MSE, L1,
cross-entropy. `reduction` is 'mean' | 'sum' | 'none' as in PyTorch. Half-precision inputs are
computed in float32 (the loss is returned in the input's dtype, gradients cast back by the
engine), as torch's losses accumulate."""
import numpy as np

from .. import kernels
from ..backend import accumulation_dtype, out_of_range
from ..tensor import Function


def _wide(*arrays):
    """The arrays in their accumulation dtype (no copy for float32 / float64)."""
    return tuple(a.astype(accumulation_dtype(a.dtype), copy=False) for a in arrays)


def _reduce(l, reduction, dtype):
    """The reduced loss in the inputs' dtype."""
    if reduction == "mean":
        l = l.mean()
    elif reduction == "sum":
        l = l.sum()
    return l.astype(dtype, copy=False)


def _scale(gy, n, reduction):
    """The upstream gradient as it reaches each element, in the accumulation dtype (a device
    scalar stays on the device; a count above float16's 65504 stays finite)."""
    gy, = _wide(gy)
    return gy / gy.dtype.type(n) if reduction == "mean" else gy


def _wide_graph(*tensors):
    """_wide of Tensors (or constant arrays), a differentiable cast (create_graph's composites)."""
    from .. import functional as F
    return tuple(F.cast(t, accumulation_dtype(t.dtype)) if hasattr(t, "requires_grad") and
                 accumulation_dtype(t.dtype) != t.dtype else t for t in tensors)


def _reduce_graph(l, reduction, dtype):
    """_reduce of a loss Tensor."""
    from .. import functional as F
    if reduction == "mean":
        l = F.mean(l)
    elif reduction == "sum":
        l = F.sum(l)
    return F.cast(l, dtype) if l.dtype != dtype else l


def _scale_graph(gy, n, reduction):
    """_scale of a gradient Tensor."""
    (gy,) = _wide_graph(gy)
    return gy / n if reduction == "mean" else gy


def _no_target_grad(fn):
    if fn.needs_input_grad[1]:
        raise NotImplementedError(f"{type(fn).__name__}: gradient with respect to the target "
                                  f"is not implemented; detach() the target")


class BCELoss(Function):
    """l = -(t log p + (1 - t) log(1 - p)), each log clamped at -100 (as torch). An input
    outside [0, 1] is refused on the NumPy path, as torch's CPU kernel refuses it (a NaN passes:
    layers.finite says where it came from); the GPU path, which would need a host sync to
    refuse it, gives NaN there (torch's CUDA kernel stops the process with a device assert)."""

    def forward_cpu(self, p, t):
        dtype = p.dtype
        outside = (p < 0) | (p > 1)
        if outside.any():
            raise ValueError(f"binary_cross_entropy: all elements of input should be between 0 "
                             f"and 1 (as torch), got {p[outside].ravel()[:4]} among "
                             f"{int(outside.sum())} outside")
        self.saved = p, t = _wide(p, t)
        with np.errstate(divide="ignore"):
            l = -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log1p(-p), -100))
        return _reduce(l, self.reduction, dtype)

    def forward_gpu(self, p, t):
        dtype = p.dtype
        self.saved = p, t = _wide(p, t)
        return kernels.bce(p, t, self.reduction).astype(dtype, copy=False)

    def backward(self, gy):
        _no_target_grad(self)
        p, t = self.saved
        if self.gpu:            # (the mean's 1 / n inside the kernel)
            n = p.size if self.reduction == "mean" else 1
            return kernels.bce_grad(p, t, *_wide(gy), n), None
        g = _scale(gy, p.size, self.reduction)
        return g * (p - t) / np.maximum((1 - p) * p, p.dtype.type(1e-12)), None

    def backward_graph(self, gy):
        """backward's formula on Tensors (its max((1 - p) p, 1e-12) too: p of exactly 0 or 1, a
        saturated sigmoid's, gives no 0 / 0)."""
        from .. import functional as F
        _no_target_grad(self)
        p, t = self.inputs
        wp, wt = _wide_graph(p, t)
        g = _scale_graph(gy, p.size, self.reduction)
        return F.cast(g * (wp - wt) / F.clamp((1 - wp) * wp, min=1e-12), p.dtype), None


class BCEWithLogitsLoss(Function):
    """l = max(x, 0) - x t + log(1 + exp(-|x|)), the stable form of BCE(sigmoid(x), t)."""

    def forward(self, x, t):
        xp = self.xp
        dtype = x.dtype
        self.saved = x, t = _wide(x, t)
        l = xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x)))
        return _reduce(l, self.reduction, dtype)

    def backward(self, gy):
        _no_target_grad(self)
        x, t = self.saved
        xp = self.xp
        sig = 1 / (1 + xp.exp(-x))
        return _scale(gy, x.size, self.reduction) * (sig - t), None

    def backward_graph(self, gy):
        """backward's gy (sigmoid(x) - t) on Tensors (smooth at x = 0, where max(x, 0) and |x| of
        the loss's stable form have their kinks)."""
        from .. import functional as F
        _no_target_grad(self)
        x, t = self.inputs
        wx, wt = _wide_graph(x, t)
        g = _scale_graph(gy, x.size, self.reduction)
        return F.cast(g * (F.sigmoid(wx) - wt), x.dtype), None


class MSELoss(Function):
    def forward(self, a, b):
        dtype = a.dtype
        a, b = _wide(a, b)
        self.saved = d = a - b
        return _reduce(d * d, self.reduction, dtype)

    def backward(self, gy):
        d = self.saved
        g = 2 * _scale(gy, d.size, self.reduction) * d
        return (g if self.needs_input_grad[0] else None,
                -g if self.needs_input_grad[1] else None)

    def composite(self, a, b):
        dtype = a.dtype
        a, b = _wide_graph(a, b)
        d = a - b
        return _reduce_graph(d * d, self.reduction, dtype)


class MaskedMSELoss(Function):
    """l = sum(mask * (a - b)**2) / count(mask), the mask broadcast to a's shape; the count stays
    on the device (no host sync)."""

    def forward(self, a, b):
        xp = self.xp
        dtype = a.dtype
        a, b = _wide(a, b)
        m = xp.broadcast_to(self.mask, a.shape)
        self.saved = d = xp.where(m, a - b, 0).astype(a.dtype, copy=False)
        self.count = m.sum().astype(a.dtype)
        return ((d * d).sum() / self.count).astype(dtype, copy=False)

    def backward(self, gy):
        d = self.saved
        g = 2 * (_wide(gy)[0] / self.count) * d
        return (g if self.needs_input_grad[0] else None,
                -g if self.needs_input_grad[1] else None)

    def composite(self, a, b):
        from .. import functional as F
        from ..tensor import Tensor
        dtype = a.dtype
        a, b = _wide_graph(a, b)
        d = F.where(self.xp.broadcast_to(self.mask, a.shape), a - b, 0.0)
        return F.cast(F.sum(d * d) / Tensor(self.count), dtype)


class L1Loss(Function):
    def forward(self, a, b):
        dtype = a.dtype
        a, b = _wide(a, b)
        self.saved = d = a - b
        return _reduce(self.xp.abs(d), self.reduction, dtype)

    def backward(self, gy):
        d = self.saved
        g = _scale(gy, d.size, self.reduction) * self.xp.sign(d)
        return (g if self.needs_input_grad[0] else None,
                -g if self.needs_input_grad[1] else None)

    def composite(self, a, b):
        from .. import functional as F
        dtype = a.dtype
        a, b = _wide_graph(a, b)
        return _reduce_graph(F.absolute(a - b), self.reduction, dtype)


class CrossEntropyLoss(Function):
    """logits (N, C, *d), integer target (N, *d), as torch's cross_entropy: per item
        l = (1 - e) * w[t] * -logp[t]  +  (e / C) * sum_c w[c] * -logp[c]
    with logp = log_softmax(logits) over C, class weights w (self.weight, (C,); None: ones) and
    label smoothing e; targets equal to ignore_index give 0 and are not counted; "mean" divides
    by the sum of w[t] over the counted items."""
    weight = None
    label_smoothing = 0.0

    def forward(self, x, target):
        xp = self.xp
        dtype = x.dtype
        x, = _wide(x)
        C = x.shape[1]
        shifted = x - x.max(axis=1, keepdims=True)
        logp = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        bad = out_of_range("cross_entropy", target, C, "target", skip=self.ignore_index)
        valid = target != self.ignore_index
        if bad is not None:
            valid &= ~bad
        safe = xp.where(valid, target, 0)
        picked = xp.take_along_axis(logp, xp.expand_dims(safe, 1), axis=1).squeeze(1)
        w = None if self.weight is None else self.weight.astype(x.dtype, copy=False)
        wt = valid.astype(x.dtype) if w is None else xp.where(valid, w[safe], 0)   # w[t], counted
        l = xp.where(valid, -picked * wt, 0)                 # (an ignored row's logp may be -inf)
        e = self.label_smoothing
        if e:
            wb = None if w is None else w.reshape((1, C) + (1,) * (x.ndim - 2))
            smooth = -(logp if wb is None else logp * wb).sum(axis=1)
            l = (1 - e) * l + (e / C) * xp.where(valid, smooth, 0)
        l = l.astype(x.dtype, copy=False)
        if bad is not None:                   # (a device: NaN where a target is out of range)
            l = xp.where(bad, xp.nan, l).astype(x.dtype)
        self.saved = logp, safe, valid, wt, w
        if self.reduction == "mean":
            self.count = wt.sum()                            # stays on the device
            with np.errstate(invalid="ignore", divide="ignore"):   # (all ignored: NaN, as torch)
                return (l.sum() / self.count).astype(dtype, copy=False)
        return _reduce(l, self.reduction, dtype)

    def backward(self, gy):
        _no_target_grad(self)
        logp, safe, valid, wt, w = self.saved
        xp = self.xp
        p = xp.exp(logp)
        onehot = xp.zeros_like(p)
        xp.put_along_axis(onehot, xp.expand_dims(safe, 1), 1, axis=1)
        g = (p - onehot) * xp.expand_dims(wt, 1)
        e = self.label_smoothing
        if e:
            C = p.shape[1]
            shape = (1, C) + (1,) * (p.ndim - 2)
            smooth = p * C - 1 if w is None else p * w.sum() - w.reshape(shape)
            g = (1 - e) * g + (e / C) * smooth * xp.expand_dims(valid, 1)
        gy, = _wide(gy)
        if self.reduction == "mean":          # (nothing counted: a NaN loss, as torch, but a
            gy = gy / xp.where(self.count == 0, 1, self.count)     # zero gradient, as torch)
        elif self.reduction == "none":
            gy = xp.expand_dims(gy, 1)
        return g * gy, None

    def composite(self, x, target):
        """-sum_c K[n, c] logp[n, c], K the constant weights forward's rule gives each class of
        each item (its target's (1 - e) w[t], e / C w[c] to every class, 0 for an ignored
        item), from forward's saved arrays; reduced as forward."""
        from .. import functional as F
        from ..tensor import Tensor
        _no_target_grad(self)
        logp, safe, valid, wt, w = self.saved
        xp, e = self.xp, self.label_smoothing
        C = logp.shape[1]
        K = xp.zeros_like(logp)
        xp.put_along_axis(K, xp.expand_dims(safe, 1), 1, axis=1)
        K = (1 - e) * K * xp.expand_dims(wt, 1)
        if e:
            wb = 1 if w is None else w.reshape((1, C) + (1,) * (logp.ndim - 2))
            K = K + (e / C) * wb * xp.expand_dims(valid, 1)
        dtype = x.dtype
        (x,) = _wide_graph(x)
        l = -F.sum(F.log_softmax(x, 1) * Tensor(K.astype(logp.dtype, copy=False)), 1)
        if self.reduction == "mean":
            return F.cast(F.sum(l) / Tensor(self.count), dtype)
        return _reduce_graph(l, self.reduction, dtype)

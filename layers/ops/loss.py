"""Losses, each one op (forward and its closed-form gradient): BCE, BCE-with-logits, MSE, L1,
cross-entropy. `reduction` is 'mean' | 'sum' | 'none' as in PyTorch."""
import numpy as np

from .. import kernels
from ..tensor import Function


def _reduce(l, reduction):
    if reduction == "mean":
        return l.mean()
    if reduction == "sum":
        return l.sum()
    return l


def _scale(gy, n, reduction):
    """The upstream gradient as it reaches each element (a device scalar stays on the device)."""
    return gy / gy.dtype.type(n) if reduction == "mean" else gy


def _no_target_grad(fn):
    if fn.needs_input_grad[1]:
        raise NotImplementedError(f"{type(fn).__name__}: gradient with respect to the target "
                                  f"is not implemented; detach() the target")


class BCELoss(Function):
    """l = -(t log p + (1 - t) log(1 - p)), each log clamped at -100 (as torch)."""

    def forward_cpu(self, p, t):
        self.saved = p, t
        with np.errstate(divide="ignore"):
            l = -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log1p(-p), -100))
        return _reduce(l.astype(p.dtype), self.reduction)

    def forward_gpu(self, p, t):
        self.saved = p, t
        return _reduce(kernels.bce(p, t), self.reduction)

    def backward(self, gy):
        _no_target_grad(self)
        p, t = self.saved
        g = _scale(gy, p.size, self.reduction)
        if self.gpu:
            return kernels.bce_grad(p, t, g), None
        return g * (p - t) / np.maximum((1 - p) * p, p.dtype.type(1e-12)), None


class BCEWithLogitsLoss(Function):
    """l = max(x, 0) - x t + log(1 + exp(-|x|)), the stable form of BCE(sigmoid(x), t)."""

    def forward(self, x, t):
        xp = self.xp
        self.saved = x, t
        l = xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x)))
        return _reduce(l, self.reduction)

    def backward(self, gy):
        _no_target_grad(self)
        x, t = self.saved
        xp = self.xp
        sig = 1 / (1 + xp.exp(-x))
        return _scale(gy, x.size, self.reduction) * (sig - t), None


class MSELoss(Function):
    def forward(self, a, b):
        self.saved = d = a - b
        return _reduce(d * d, self.reduction)

    def backward(self, gy):
        d = self.saved
        g = 2 * _scale(gy, d.size, self.reduction) * d
        return (g if self.needs_input_grad[0] else None,
                -g if self.needs_input_grad[1] else None)


class L1Loss(Function):
    def forward(self, a, b):
        self.saved = d = a - b
        return _reduce(self.xp.abs(d), self.reduction)

    def backward(self, gy):
        d = self.saved
        g = _scale(gy, d.size, self.reduction) * self.xp.sign(d)
        return (g if self.needs_input_grad[0] else None,
                -g if self.needs_input_grad[1] else None)


class CrossEntropyLoss(Function):
    """logits (N, C, *d), integer target (N, *d); l = -log_softmax(logits)[target], targets equal
    to ignore_index skipped (and not counted in the mean)."""

    def forward(self, x, target):
        xp = self.xp
        shifted = x - x.max(axis=1, keepdims=True)
        logp = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        valid = target != self.ignore_index
        safe = xp.where(valid, target, 0)
        picked = xp.take_along_axis(logp, xp.expand_dims(safe, 1), axis=1).squeeze(1)
        l = xp.where(valid, -picked, 0).astype(x.dtype)
        self.saved = logp, safe, valid
        if self.reduction == "mean":
            self.count = valid.sum().astype(x.dtype)     # stays on the device
            return l.sum() / self.count
        return _reduce(l, self.reduction)

    def backward(self, gy):
        _no_target_grad(self)
        logp, safe, valid = self.saved
        xp = self.xp
        g = xp.exp(logp)
        onehot = xp.zeros_like(g)
        xp.put_along_axis(onehot, xp.expand_dims(safe, 1), 1, axis=1)
        g = (g - onehot) * xp.expand_dims(valid, 1)
        scale = gy / self.count if self.reduction == "mean" else gy
        if self.reduction == "none":
            scale = xp.expand_dims(gy, 1)
        return g * scale, None

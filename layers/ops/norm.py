"""Batch normalization over every axis but the channel axis 1: x (N, C), (N, C, L), (N, C, H, W).

Training: batch statistics, running statistics updated in place with factor `momentum` and the
unbiased variance (as PyTorch); evaluation: the running statistics. GPU: cuDNN; CPU: NumPy.
Statistics and the affine parameters are float32 for float32 / float16 data (float64 for float64),
as cuDNN requires; the NumPy path computes half-precision data in float32 too.
"""
import numpy as np

from ..backend import accumulation_dtype, addable
from ..tensor import ADDED, Function, fresh
from . import nchw_views


@nchw_views
class BatchNorm(Function):
    """Params: running_mean, running_var (arrays or None), training, momentum, eps; layout
    'NCHW' (channels on axis 1) or 'NHWC' (4-d, channels last). On the GPU, training mode, the
    weight's and bias's gradients are added by cuDNN into their existing .grad arrays when both
    have one (Function.grad_into)."""
    layout = "NCHW"
    adds_into_grad = True

    def _stats_axes(self, x):
        return tuple(range(x.ndim - 1)) if self.layout == "NHWC" else \
            (0,) + tuple(range(2, x.ndim))

    def _bshape(self, x):
        if self.layout == "NHWC":
            return (1,) * (x.ndim - 1) + (x.shape[-1],)
        return (1, x.shape[1]) + (1,) * (x.ndim - 2)

    def _channels(self, x):
        return x.shape[-1 if self.layout == "NHWC" else 1]

    def composite(self, x, gamma, beta):
        """Batch norm in other ops, from the statistics forward used (create_graph; on the
        Tensors as given, NCHW-shaped where nchw): training, the batch's mean and biased
        variance; evaluation, the running statistics (as they are now: changed since forward,
        they give another gradient)."""
        from .. import functional as F
        from ..tensor import Tensor
        channel = x.ndim - 1 if self.layout == "NHWC" and not self.nchw else 1
        axes = tuple(a for a in range(x.ndim) if a != channel)
        shape = tuple(n if a == channel else 1 for a, n in enumerate(x.shape))
        xf = F.cast(x, gamma.dtype) if x.dtype != gamma.dtype else x
        if self.training:
            d = xf - F.mean(xf, axes, keepdims=True)
            var = F.mean(d * d, axes, keepdims=True)
        else:
            d = xf - Tensor(self.running_mean.reshape(shape))
            var = Tensor(self.running_var.reshape(shape))
        y = d * (var + self.eps) ** -0.5 * F.reshape(gamma, shape) + F.reshape(beta, shape)
        return F.cast(y, x.dtype) if y.dtype != x.dtype else y

    def forward_cpu(self, x, gamma, beta):
        dtype = x.dtype
        x = x.astype(accumulation_dtype(dtype), copy=False)
        axes, bshape = self._stats_axes(x), self._bshape(x)
        n = x.size // self._channels(x)
        if self.training:
            # the statistics' sums in float64: NumPy adds up an axis that is not the fastest
            # one element after another, so float32 sums over a channels-last batch lose digits
            mean = (x.sum(axis=axes, dtype=np.float64) / n).astype(x.dtype)
            d = x - mean.reshape(bshape)
            var = np.square(d).sum(axis=axes, dtype=np.float64) / n      # (biased)
            if self.running_mean is not None:
                m = self.momentum
                self.running_mean *= 1 - m
                self.running_mean += m * mean
                self.running_var *= 1 - m
                self.running_var += m * var * (n / (n - 1))
        else:
            mean, var = self.running_mean, self.running_var
            d = x - mean.reshape(bshape)
        invstd = (1 / np.sqrt(var + self.eps)).astype(x.dtype)
        xhat = d * invstd.reshape(bshape)
        self.saved = xhat, invstd, gamma
        return (xhat * gamma.reshape(bshape) + beta.reshape(bshape)).astype(dtype, copy=False)

    def forward_gpu(self, x, gamma, beta):
        from cudnnlite import batchnorm, boundary
        # cuDNN's batch norm reads packed data: one copy of a strided x, saved for backward
        x = boundary.packed("cudnnBatchNormalizationForwardTraining", "x", x)
        x4 = x.reshape(x.shape + (1, 1)) if x.ndim == 2 else x     # (N, C) -> (N, C, 1, 1)
        if self.training and self.layout == "NHWC":
            # as torch for channels-last training: the *Ex calls in SPATIAL_PERSISTENT mode, the
            # only way to cuDNN's NHWC kernels (~30x faster on an H100; cudnnlite.batchnorm)
            y, mean, invstd, reserve = batchnorm.forward_training_ex(
                x4, gamma, beta, self.running_mean, self.running_var, momentum=self.momentum,
                eps=self.eps, layout=self.layout)
            self.saved = x4, mean, invstd, gamma, (beta, reserve)
        elif self.training:
            y, mean, invstd = batchnorm.forward_training(x4, gamma, beta, self.running_mean,
                                                         self.running_var, momentum=self.momentum,
                                                         eps=self.eps, layout=self.layout)
            self.saved = x4, mean, invstd, gamma, None
        else:
            y = batchnorm.forward_inference(x4, gamma, beta, self.running_mean, self.running_var,
                                            eps=self.eps, layout=self.layout)
            mean = invstd = None
            if self.needs_input_grad is not None:   # the statistics this forward used (a later
                cp = self.xp                        # training forward updates them in place)
                mean = self.running_mean.copy()
                invstd = 1 / cp.sqrt(self.running_var + self.eps)
            self.saved = x4, mean, invstd, gamma, None
        return y.reshape(x.shape)

    def backward(self, gy):
        if self.gpu:
            return self._backward_gpu(gy)
        xhat, invstd, gamma = self.saved
        gy = gy.astype(xhat.dtype, copy=False)
        axes, bshape = self._stats_axes(xhat), self._bshape(xhat)
        gbeta = gy.sum(axis=axes, dtype=np.float64).astype(gy.dtype)     # (float64 sums, as
        ggamma = (gy * xhat).sum(axis=axes, dtype=np.float64).astype(gy.dtype)      # forward's)
        scale = (gamma * invstd).reshape(bshape)
        if self.training:
            n = xhat.size // self._channels(xhat)
            gx = scale / n * (n * gy - gbeta.reshape(bshape) - xhat * ggamma.reshape(bshape))
        else:
            gx = gy * scale
        return fresh(gx), fresh(ggamma), fresh(gbeta)        # each made here (tensor.Fresh)

    def _backward_gpu(self, gy):
        x4, mean, invstd, gamma, ex = self.saved
        gy4 = gy.reshape(x4.shape)
        if self.training:
            from cudnnlite import batchnorm
            from cudnnlite.boundary import overlap
            into = self.grad_into       # weight's and bias's: two arrays apart (cuDNN writes both)
            add_to = (into[1], into[2]) if into is not None and len(into) == 3 and \
                all(addable(a, gamma.shape, gamma.dtype) for a in into[1:]) and \
                not overlap(into[1], into[2]) else None
            if ex is not None:
                beta, reserve = ex
                gx, ggamma, gbeta = batchnorm.backward_ex(x4, gy4, gamma, beta, mean, invstd,
                                                          reserve, eps=self.eps,
                                                          layout=self.layout, add_to=add_to)
            else:
                gx, ggamma, gbeta = batchnorm.backward(x4, gy4, gamma, mean, invstd,
                                                       eps=self.eps, layout=self.layout,
                                                       add_to=add_to)
            if add_to is not None:
                return fresh(gx.reshape(gy.shape)), ADDED, ADDED
            return fresh(gx.reshape(gy.shape)), fresh(ggamma), fresh(gbeta)    # cuDNN's outputs
        bshape = self._bshape(x4)
        xhat = (x4 - mean.reshape(bshape)) * invstd.reshape(bshape)
        axes = self._stats_axes(x4)
        gx = gy4 * (gamma * invstd).reshape(bshape)
        return fresh(gx.reshape(gy.shape)), fresh((gy4 * xhat).sum(axis=axes)), \
            fresh(gy4.sum(axis=axes))

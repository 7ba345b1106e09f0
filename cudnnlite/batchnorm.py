"""Batch normalization on CuPy arrays: training forward (batch statistics, running statistics
updated in place as PyTorch does: momentum 0.1, unbiased running variance), inference forward,
backward. Modes: SPATIAL (statistics over N and spatial, params (C,)) and PER_ACTIVATION
(statistics over N, params (C, *spatial)). Parameters and statistics are float32 (float64 for
float64 data), whatever the data type."""
from . import api
from ._args import check_device, scalar
from .descriptors import TensorDescriptor, data_type
from .enums import BatchNormMode, DataType
from .errors import BadParam, BadParamShapeMismatch
from .handle import get_handle

_derived = {}


def _setup(function, x, layout, mode, dtype, params):
    check_device(function, x=x, **params)
    if x.ndim < 3:
        raise BadParam(function, {"x.shape": x.shape},
                       "x must be at least 3-d (N, C, L) / (N, C, H, W); reshape (N, C) to (N, C, 1, 1)")
    dt = data_type(dtype or x.dtype.name, function)
    if x.ndim == 3:  # (N, C, L): cuDNN wants >= 4 dims
        x = x[..., None] if layout == "NCHW" else x[:, :, None, :]
    xdesc = TensorDescriptor.cached(x, layout, dt)
    mode = BatchNormMode(mode)
    key = (xdesc.dims, dt, mode)
    bdesc = _derived.get(key)
    if bdesc is None:
        bdesc = TensorDescriptor((1,) * len(xdesc.dims), DataType.FLOAT)  # re-set by Derive
        api.cudnnDeriveBNTensorDescriptor(bdesc, xdesc, mode)
        bdesc.dims, bdesc.strides = bdesc.setup()[1:]
        _derived[key] = bdesc
    expected = 1
    for d in bdesc.dims:
        expected *= d
    for name, a in params.items():
        if a is not None and (a.size != expected or not a.flags.c_contiguous):
            raise BadParamShapeMismatch(function,
                                        {f"{name}.shape": a.shape, "x": xdesc, "mode": mode.name},
                           f"{name} must be a contiguous array of {expected} elements "
                           f"(shape {bdesc.dims} for mode {mode.name}), got shape {a.shape}")
    return x, xdesc, bdesc, mode, scalar(dt, 1.0), scalar(dt, 0.0)


def _ptr(a):
    return None if a is None else a.data.ptr


def forward_training(x, gamma, beta, running_mean=None, running_var=None, *, momentum=0.1,
                     eps=1e-5, mode=BatchNormMode.SPATIAL, layout="NCHW", dtype=None):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with batch statistics.

    running_mean/var (optional, updated in place): r = (1 - momentum) * r + momentum * batch stat,
    the variance term unbiased (n / (n - 1)), as PyTorch. Returns (y, saved_mean, saved_invstd)."""
    import cupy
    fn = "cudnnBatchNormalizationForwardTraining"
    x4, xdesc, bdesc, mode, one, zero = _setup(fn, x, layout, mode, dtype, dict(
        gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var))
    y = cupy.empty_like(x)
    saved_mean = cupy.empty(gamma.shape, dtype=gamma.dtype)
    saved_invstd = cupy.empty(gamma.shape, dtype=gamma.dtype)
    y4 = y.reshape(x4.shape) if y.ndim != x4.ndim else y
    api.cudnnBatchNormalizationForwardTraining(
        get_handle(), mode, one, zero, xdesc, x4.data.ptr, xdesc, y4.data.ptr, bdesc, gamma.data.ptr,
        beta.data.ptr, float(momentum), _ptr(running_mean), _ptr(running_var), float(eps),
        saved_mean.data.ptr, saved_invstd.data.ptr)
    return y, saved_mean, saved_invstd


def forward_inference(x, gamma, beta, mean, var, *, eps=1e-5, mode=BatchNormMode.SPATIAL,
                      layout="NCHW", dtype=None):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with the given (running) statistics."""
    import cupy
    fn = "cudnnBatchNormalizationForwardInference"
    x4, xdesc, bdesc, mode, one, zero = _setup(fn, x, layout, mode, dtype,
                                               dict(gamma=gamma, beta=beta, mean=mean, var=var))
    y = cupy.empty_like(x)
    y4 = y.reshape(x4.shape) if y.ndim != x4.ndim else y
    api.cudnnBatchNormalizationForwardInference(
        get_handle(), mode, one, zero, xdesc, x4.data.ptr, xdesc, y4.data.ptr, bdesc,
        gamma.data.ptr, beta.data.ptr, mean.data.ptr, var.data.ptr, float(eps))
    return y


def backward(x, gy, gamma, saved_mean, saved_invstd, *, eps=1e-5, mode=BatchNormMode.SPATIAL,
             layout="NCHW", dtype=None):
    """(gx, ggamma, gbeta) of training-mode batch norm, from the forward's saved statistics."""
    import cupy
    fn = "cudnnBatchNormalizationBackward"
    x4, xdesc, bdesc, mode, one, zero = _setup(fn, x, layout, mode, dtype, dict(
        gamma=gamma, saved_mean=saved_mean, saved_invstd=saved_invstd))
    if gy.shape != x.shape:
        raise BadParamShapeMismatch(fn, {"x.shape": x.shape, "gy.shape": gy.shape},
                       f"gy has shape {gy.shape}, x has {x.shape}")
    gy4 = cupy.ascontiguousarray(gy).reshape(x4.shape)
    gydesc = TensorDescriptor.cached(gy4, layout, xdesc.data_type)
    gx = cupy.empty(x4.shape, dtype=x.dtype)
    gxdesc = TensorDescriptor.cached(gx, layout, xdesc.data_type)
    ggamma = cupy.empty_like(gamma)
    gbeta = cupy.empty_like(gamma)
    api.cudnnBatchNormalizationBackward(
        get_handle(), mode, one, zero, one, zero, xdesc, x4.data.ptr, gydesc, gy4.data.ptr, gxdesc,
        gx.data.ptr, bdesc, gamma.data.ptr, ggamma.data.ptr, gbeta.data.ptr, float(eps),
        saved_mean.data.ptr, saved_invstd.data.ptr)
    return gx.reshape(x.shape), ggamma, gbeta

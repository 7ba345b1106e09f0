"""Batch normalization on CuPy arrays: training forward (batch statistics, running statistics
updated in place as PyTorch does: momentum 0.1, unbiased running variance), inference forward,
backward. Modes: SPATIAL (statistics over N and spatial, params (C,)) and PER_ACTIVATION
(statistics over N, params (C, *spatial)). Parameters and statistics are float32 for float32 /
float16 / bfloat16 data and float64 for float64 data, as cuDNN requires. x, y and gy are packed
(a strided x is copied once: pass the same packed x to backward, see `packed`).

forward_training_ex / backward_ex are the *Ex calls, which take a workspace and a reserve space.
With SPATIAL_PERSISTENT they reach cuDNN's fast NHWC kernels, which the plain calls never use:
on an H100, NHWC (128, 64, 32, 32) float32 took 42 + 62 us forward + backward against 1,282 +
1,977 us through cudnnBatchNormalizationForwardTraining / Backward in SPATIAL mode (bfloat16
alike). PyTorch takes this path for channels-last training. cuDNN documents that PERSISTENT mode
may overflow where the data's range is extreme (cudnnQueryRuntimeError reports it)."""
from ctypes import byref, c_size_t
from typing import NamedTuple

from . import api
from ._cache import LRU
from .boundary import (CallCache, apart, check_out, check_shape, common_dtype, device_array,
                       handle, overlap, packed, scalar)
from .descriptors import TensorDescriptor
from .enums import BatchNormMode, BatchNormOps, DataType
from .errors import BadParam, BadParamShapeMismatch

_derived = LRU(1024)        # (x dims, data type, mode) -> the derived parameter descriptor
_ex_sizes = LRU(1024)       # (x dims, strides, type, device, mode, backward) -> (workspace,
                            # reserve space) bytes


def _param_dtype(dt):
    return "float64" if dt == DataType.DOUBLE else "float32"


def _setup(function, x, layout, mode, dtype, params):
    """(packed 4-d x, x descriptor, parameter descriptor, mode, data type) after checking x and
    every parameter array (None skipped): device, dtype, size, contiguity."""
    dt = common_dtype(function, dtype, x=x)
    if x.ndim < 3:
        raise BadParam(function, {"x.shape": x.shape},
                       "x must be at least 3-d (N, C, L) / (N, C, H, W); reshape (N, C) to (N, C, 1, 1)")
    if dt not in (DataType.FLOAT, DataType.DOUBLE, DataType.HALF, DataType.BFLOAT16):
        raise BadParam(function, {"x.dtype": dt.name}, "batch norm takes float64, float32, "
                       "float16 or bfloat16 data")
    x = packed(function, "x", x)
    x4 = x
    if x.ndim == 3:  # (N, C, L): cuDNN wants >= 4 dims
        x4 = x[..., None] if layout == "NCHW" else x[:, :, None, :]
    xdesc = TensorDescriptor.cached(x4, layout, dt)
    mode = BatchNormMode(mode)

    def derive():
        bdesc = TensorDescriptor((1,) * len(xdesc.dims), DataType.FLOAT)  # re-set by Derive
        api.cudnnDeriveBNTensorDescriptor(bdesc, xdesc, mode)
        bdesc.dims, bdesc.strides = bdesc.setup()[1:]
        return bdesc
    bdesc = _derived.get((xdesc.dims, dt, mode), derive)
    expected = 1
    for d in bdesc.dims:
        expected *= d
    want = _param_dtype(dt)
    for name, a in params.items():
        if a is None:
            continue
        device_array(function, name, a)
        if a.size != expected or not a.flags.c_contiguous:
            raise BadParamShapeMismatch(function,
                                        {f"{name}.shape": a.shape, "x": xdesc, "mode": mode.name},
                                        f"{name} must be a contiguous array of {expected} elements "
                                        f"(shape {bdesc.dims} for mode {mode.name}), got shape "
                                        f"{a.shape}")
        if a.dtype != want:
            raise BadParam(function, {f"{name}.dtype": a.dtype.name, "x.dtype": dt.name},
                           f"{name} must be {want} for {dt.name} data (cuDNN's batch-norm "
                           f"parameters and statistics), got {a.dtype.name}")
    return x, x4, xdesc, bdesc, mode, dt


def _ptr(a):
    return None if a is None else a.data.ptr


def forward_training(x, gamma, beta, running_mean=None, running_var=None, *, momentum=0.1,
                     eps=1e-5, mode=BatchNormMode.SPATIAL, layout="NCHW", dtype=None):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with batch statistics.

    running_mean/var (optional, updated in place): r = (1 - momentum) * r + momentum * batch stat,
    the variance term unbiased (n / (n - 1)), as PyTorch. Returns (y, saved_mean, saved_invstd)."""
    import cupy
    fn = "cudnnBatchNormalizationForwardTraining"
    x, x4, xdesc, bdesc, mode, dt = _setup(fn, x, layout, mode, dtype, dict(
        gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var))
    h = handle(fn, x=x, gamma=gamma, beta=beta, running_mean=running_mean,
               running_var=running_var)
    y = cupy.empty_like(x4)
    saved_mean = cupy.empty(gamma.shape, dtype=gamma.dtype)
    saved_invstd = cupy.empty(gamma.shape, dtype=gamma.dtype)
    api.cudnnBatchNormalizationForwardTraining(
        h, mode, scalar(dt, 1.0), scalar(dt, 0.0), xdesc, x4.data.ptr, xdesc, y.data.ptr, bdesc,
        gamma.data.ptr, beta.data.ptr, float(momentum), _ptr(running_mean), _ptr(running_var),
        float(eps), saved_mean.data.ptr, saved_invstd.data.ptr)
    return y.reshape(x.shape), saved_mean, saved_invstd


def forward_inference(x, gamma, beta, mean, var, *, eps=1e-5, mode=BatchNormMode.SPATIAL,
                      layout="NCHW", dtype=None):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with the given (running) statistics."""
    import cupy
    fn = "cudnnBatchNormalizationForwardInference"
    x, x4, xdesc, bdesc, mode, dt = _setup(fn, x, layout, mode, dtype,
                                           dict(gamma=gamma, beta=beta, mean=mean, var=var))
    h = handle(fn, x=x, gamma=gamma, beta=beta, mean=mean, var=var)
    y = cupy.empty_like(x4)
    api.cudnnBatchNormalizationForwardInference(
        h, mode, scalar(dt, 1.0), scalar(dt, 0.0), xdesc, x4.data.ptr, xdesc, y.data.ptr, bdesc,
        gamma.data.ptr, beta.data.ptr, mean.data.ptr, var.data.ptr, float(eps))
    return y.reshape(x.shape)


def backward(x, gy, gamma, saved_mean, saved_invstd, *, eps=1e-5, mode=BatchNormMode.SPATIAL,
             layout="NCHW", dtype=None, add_to=None):
    """(gx, ggamma, gbeta) of training-mode batch norm, from the forward's saved statistics.
    add_to=(ggamma, gbeta): existing parameter gradients the new ones are added into (cuDNN's
    betaParamDiff = 1), and returned."""
    import cupy
    fn = "cudnnBatchNormalizationBackward"
    x, x4, xdesc, bdesc, mode, dt = _setup(fn, x, layout, mode, dtype, dict(
        gamma=gamma, saved_mean=saved_mean, saved_invstd=saved_invstd))
    common_dtype(fn, dtype, x=x, gy=gy)
    check_shape(fn, "gy", gy, x.shape, "x has")
    add_to = _pair(fn, add_to)
    _check_add_to(fn, add_to, gamma, x=x, gy=gy, saved_mean=saved_mean,
                  saved_invstd=saved_invstd)
    gy4 = packed(fn, "gy", gy).reshape(x4.shape)
    h = handle(fn, x=x, gy=gy4, gamma=gamma, saved_mean=saved_mean, saved_invstd=saved_invstd,
               **_named(add_to))
    gx = cupy.empty_like(x4)
    ggamma, gbeta = add_to or (cupy.empty_like(gamma), cupy.empty_like(gamma))
    one, zero = scalar(dt, 1.0), scalar(dt, 0.0)
    api.cudnnBatchNormalizationBackward(
        h, mode, one, zero, one, one if add_to else zero, xdesc, x4.data.ptr, xdesc,
        gy4.data.ptr, xdesc, gx.data.ptr, bdesc, gamma.data.ptr, ggamma.data.ptr,
        gbeta.data.ptr, float(eps), _ptr(saved_mean), _ptr(saved_invstd))
    return gx.reshape(x.shape), ggamma, gbeta


def _pair(function, add_to):
    """add_to as a tuple (ggamma, gbeta), or None."""
    if add_to is None:
        return None
    if not isinstance(add_to, (tuple, list)) or len(add_to) != 2:
        raise BadParam(function, {"add_to": type(add_to).__name__},
                       "add_to must be a pair (ggamma, gbeta)")
    return tuple(add_to)


def _check_add_to(function, add_to, gamma, **read):
    """add_to (backward's, through _pair): None, or (ggamma, gbeta) as cuDNN writes them -- two
    device arrays of gamma's shape and dtype, C-contiguous and aligned (check_out), whose memory
    does not overlap each other (cuDNN adds the two gradients into them at once) nor what the
    call reads (gamma and `read`)."""
    if add_to is None:
        return
    names = ("add_to[0] (ggamma)", "add_to[1] (gbeta)")
    for name, a in zip(names, add_to):
        if a is None:
            raise BadParam(function, {name: None}, f"{name} must be an array to add into, got None")
        check_out(function, name, a, gamma.shape, gamma.dtype)
    _add_to_apart(function, add_to, gamma, **read)


def _add_to_apart(function, add_to, gamma, **read):
    """add_to's two arrays share no memory with each other (cuDNN writes both gradients at once)
    nor with what the call reads (gamma, ...): relations, checked on every call (apart)."""
    if add_to is None:
        return
    a, b = add_to
    if overlap(a, b):
        raise BadParam(function, {"add_to[0].ptr": a.data.ptr, "add_to[1].ptr": b.data.ptr,
                                  "bytes": a.nbytes},
                       "add_to's two arrays overlap: cuDNN writes both gradients at once")
    for i, out in enumerate(add_to):
        apart(function, f"add_to[{i}]", out, gamma=gamma, **read)


def _named(add_to):
    return {} if add_to is None else {"add_to[0]": add_to[0], "add_to[1]": add_to[1]}


def _ex_sizes_for(h, xdesc, bdesc, dt, mode, backward):
    """(workspace, reserve space) bytes of the *Ex call (BN ops, no activation), asked once per
    problem."""
    def ask():
        ws, rs = c_size_t(), c_size_t()
        if backward:
            api.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                h, mode, BatchNormOps.BN, xdesc, None, xdesc, None, xdesc, bdesc, None, byref(ws))
        else:
            api.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                h, mode, BatchNormOps.BN, xdesc, None, xdesc, bdesc, None, byref(ws))
        api.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, BatchNormOps.BN, None,
                                                                 xdesc, byref(rs))
        return ws.value, rs.value
    return _ex_sizes.get((xdesc.dims, xdesc.strides, dt, h.device_id, mode, backward), ask)


# The *Ex calls' steady-state path, as cudnnlite.conv's: what the checks concluded (descriptors,
# sizes) kept per call signature (boundary.signature of every array, and the other arguments);
# a hit goes straight to the C call. Only calls whose x (and gy) went through as they came are
# kept.
CALL_CACHE_SIZE = 1024
_calls = CallCache(CALL_CACHE_SIZE)


class _Seen(NamedTuple):
    x4_shape: tuple          # x's (N, C, L) as the 4-d array cuDNN is given; None: x is 4-d
    xdesc: TensorDescriptor
    bdesc: TensorDescriptor
    mode: BatchNormMode
    dt: DataType
    workspace: int
    reserve: int


def _seen(x, x4, *rest):
    return _Seen(None if x4.ndim == x.ndim else x4.shape, *rest)


def clear_cache():
    """Forget the derived parameter descriptors, the *Ex calls' sizes and the calls kept."""
    _derived.clear()
    _ex_sizes.clear()
    _calls.clear()


def forward_training_ex(x, gamma, beta, running_mean=None, running_var=None, *, momentum=0.1,
                        eps=1e-5, mode=BatchNormMode.SPATIAL_PERSISTENT, layout="NHWC",
                        dtype=None):
    """forward_training through cudnnBatchNormalizationForwardTrainingEx (batch norm alone, no
    activation): returns (y, saved_mean, saved_invstd, reserve), `reserve` the reserve space
    (a uint8 array, maybe empty) that backward_ex must be given."""
    import cupy
    fn = "cudnnBatchNormalizationForwardTrainingEx"
    key = _calls.key((x, gamma, beta, running_mean, running_var), fn, mode, layout, dtype)
    seen = _calls.seen(key)
    if seen is None:
        given = x
        x, x4, xdesc, bdesc, mode, dt = _setup(fn, x, layout, mode, dtype, dict(
            gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var))
        h = handle(fn, x=x, gamma=gamma, beta=beta, running_mean=running_mean,
                   running_var=running_var)
        ws, rs = _ex_sizes_for(h, xdesc, bdesc, dt, mode, backward=False)
        if x is given:
            _calls.remember(key, h, _seen(x, x4, xdesc, bdesc, mode, dt, ws, rs))
    else:
        (x4_shape, xdesc, bdesc, mode, dt, ws, rs), h = seen
        x4 = x if x4_shape is None else x.reshape(x4_shape)
    y = cupy.empty_like(x4)
    saved_mean = cupy.empty(gamma.shape, dtype=gamma.dtype)
    saved_invstd = cupy.empty(gamma.shape, dtype=gamma.dtype)
    reserve = cupy.empty((rs,), dtype=cupy.uint8)
    api.cudnnBatchNormalizationForwardTrainingEx(
        h, mode, BatchNormOps.BN, scalar(dt, 1.0), scalar(dt, 0.0), xdesc, x4.data.ptr, None,
        None, xdesc, y.data.ptr, bdesc, gamma.data.ptr, beta.data.ptr, float(momentum),
        _ptr(running_mean), _ptr(running_var), float(eps), saved_mean.data.ptr,
        saved_invstd.data.ptr, None, h.workspace(ws), ws, reserve.data.ptr if rs else None, rs)
    return y.reshape(x.shape), saved_mean, saved_invstd, reserve


def backward_ex(x, gy, gamma, beta, saved_mean, saved_invstd, reserve, *, eps=1e-5,
                mode=BatchNormMode.SPATIAL_PERSISTENT, layout="NHWC", dtype=None, add_to=None):
    """backward through cudnnBatchNormalizationBackwardEx, from forward_training_ex's saved
    statistics and reserve space (same mode): (gx, ggamma, gbeta). add_to as backward's."""
    import cupy
    fn = "cudnnBatchNormalizationBackwardEx"
    add_to = _pair(fn, add_to)
    key = _calls.key((x, gy, gamma, beta, saved_mean, saved_invstd, reserve) +
                     (add_to or (None, None)), fn, mode, layout, dtype)
    seen = _calls.seen(key)
    if seen is None:
        given = x, gy
        x, x4, xdesc, bdesc, mode, dt = _setup(fn, x, layout, mode, dtype, dict(
            gamma=gamma, beta=beta, saved_mean=saved_mean, saved_invstd=saved_invstd))
        common_dtype(fn, dtype, x=x, gy=gy)
        check_shape(fn, "gy", gy, x.shape, "x has")
        _check_add_to(fn, add_to, gamma)
        gy_packed = packed(fn, "gy", gy)
        gy4 = gy_packed.reshape(x4.shape)
        h = handle(fn, x=x, gy=gy4, gamma=gamma, beta=beta, saved_mean=saved_mean,
                   saved_invstd=saved_invstd, reserve=reserve, **_named(add_to))
        ws, rs = _ex_sizes_for(h, xdesc, bdesc, dt, mode, backward=True)
        if reserve.dtype != cupy.uint8 or reserve.size < rs:
            raise BadParam(fn, {"reserve.size": reserve.size, "reserve.dtype": reserve.dtype.name,
                                "needed bytes": rs, "x": xdesc, "mode": mode.name},
                           "reserve must be forward_training_ex's reserve space for this x and "
                           "mode")
        if x is given[0] and gy_packed is given[1]:
            _calls.remember(key, h, _seen(x, x4, xdesc, bdesc, mode, dt, ws, rs))
    else:
        (x4_shape, xdesc, bdesc, mode, dt, ws, rs), h = seen
        x4, gy4 = (x, gy) if x4_shape is None else (x.reshape(x4_shape), gy.reshape(x4_shape))
    # add_to's relations to the other arrays are not in the call's key: checked every call
    _add_to_apart(fn, add_to, gamma, beta=beta, x=x, gy=gy, saved_mean=saved_mean,
                  saved_invstd=saved_invstd)
    gx = cupy.empty_like(x4)
    ggamma, gbeta = add_to or (cupy.empty_like(gamma), cupy.empty_like(gamma))
    one, zero = scalar(dt, 1.0), scalar(dt, 0.0)
    api.cudnnBatchNormalizationBackwardEx(
        h, mode, BatchNormOps.BN, one, zero, one, one if add_to else zero, xdesc, x4.data.ptr,
        None, None, xdesc,
        gy4.data.ptr, None, None, xdesc, gx.data.ptr, bdesc, gamma.data.ptr, beta.data.ptr,
        ggamma.data.ptr, gbeta.data.ptr, float(eps), _ptr(saved_mean), _ptr(saved_invstd), None,
        h.workspace(ws), ws, reserve.data.ptr if rs else None, rs)
    return gx.reshape(x.shape), ggamma, gbeta

"""layers: a define-by-run autograd engine whose ops run on NumPy (the readable reference, any
machine) or on cuDNN / CuPy (where the data is on a GPU), with PyTorch-exact layers, losses and
optimizers, and Keras-layout convolution entry points."""
import builtins as _builtins
import sys as _sys

import numpy as _np

from . import autograd, data, func, functional, graph, init, kernels, keras, nn, optim
from . import functional as F
from .backend import get_default_dtype, parse_device, set_default_dtype
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, ones, ones_like,
                       multinomial, rand, rand_like, randint, randint_like, randn, randn_like,
                       randperm, zeros, zeros_like)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential
from .functional import absolute as abs  # noqa: A001  (torch's top-level spellings)
from .functional import (add, amax, amin, argmax, argmin, argsort, cat, chunk, clamp, clone,
                         div, exp, flatten, gather, index_select, log, log_softmax, masked_fill,
                         matmul, max, mean, min, mul, neg, pow, relu, reshape, sigmoid, softmax,
                         sort, split, sqrt, squeeze, stack, std, sub, sum, tanh, topk, transpose,
                         unsqueeze, var, where, maximum, minimum, isnan, isinf, isfinite,
                         narrow, flip, log1p, expm1, log2, log10, reciprocal, rsqrt, sin,
                         cos, tan, sinh, cosh, atan, asin, acos, asinh, acosh, atanh, erf, square,
                         logsumexp, cumsum, cumprod, prod, norm, tril, triu, roll, bmm, floor,
                         ceil, trunc, sign, fmod, remainder, floor_divide, logical_and,
                         logical_or, logical_xor, logical_not, outer,
                         repeat_interleave, nonzero, allclose, cosine_similarity,
                         pairwise_distance, unique, atan2, bincount, addcmul, addcdiv, lerp,
                         hypot, swapaxes, movedim, tile, nansum, nanmean, count_nonzero,
                         isclose, equal, dot, addmm, addmv, baddbmm, addbmm, exp2, frac,
                         var_mean, std_mean, unflatten, diff, masked_select, index_fill,
                         index_add, index_copy, select, swapdims, argwhere, kthvalue, median,
                         aminmax, fmax, fmin, take_along_dim, diag, subtract, rsub,
                         positive, clamp_min, clamp_max, deg2rad, rad2deg, ravel, msort,
                         atleast_1d, atleast_2d, atleast_3d, hstack, vstack, dstack,
                         column_stack, broadcast_to, broadcast_shapes, broadcast_tensors,
                         meshgrid, kron, tensordot, rot90, logaddexp, logaddexp2, xlogy, sinc,
                         nan_to_num, dist, trace, heaviside, signbit, isneginf, isposinf, isin,
                         triu_indices, tril_indices, scatter, scatter_add, permute, greater,
                         less, greater_equal, less_equal, not_equal, mm, mv, inner, vdot,
                         cross, fliplr, flipud, tensor_split, hsplit, vsplit, dsplit, take,
                         logit, fix, sgn, float_power, copysign, trapezoid, cartesian_prod,
                         block_diag, cdist, vander, can_cast, absolute, promote_types)
from .functional import multiply, divide, true_divide, negative, vstack as row_stack
from .functional import clamp as clip, movedim as moveaxis  # (torch's aliases)
from .functional import round  # noqa: A001
from .einsum import einsum
from . import random as _random
from .random import Generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from .tensor import Tensor as _Tensor
from .backend import bfloat16
# torch's dtype names, as NumPy dtypes (torch.float32 -> L.float32 ...)
float16 = half = _np.dtype("float16")
float32 = float = _np.dtype("float32")    # noqa: A001  (torch.float is float32)
float64 = double = _np.dtype("float64")
int8, uint8, int16 = _np.dtype("int8"), _np.dtype("uint8"), _np.dtype("int16")
short = int16
int32 = int = _np.dtype("int32")          # noqa: A001
int64 = long = _np.dtype("int64")
bool = _np.dtype("bool")                  # noqa: A001
# torch's memory formats, as the names layers takes (torch.channels_last -> L.channels_last)
channels_last, contiguous_format, preserve_format = ("channels_last", "contiguous_format",
                                                     "preserve_format")


class cuda:  # noqa: N801  (torch.cuda's spelling)
    """torch.cuda.is_available() / device_count(): whether CuPy sees a CUDA device (no error
    where CuPy or a driver is missing: False / 0)."""

    @staticmethod
    def device_count():
        try:
            from .backend import cupy
            return _builtins.int(cupy().cuda.runtime.getDeviceCount())   # (int: the dtype here)
        except Exception:           # (no CuPy, no driver, no device: none to count)
            return 0

    @staticmethod
    def is_available():
        return cuda.device_count() > 0

    # the device generators' states and seeds (layers.random), torch.cuda's spellings
    @staticmethod
    def get_rng_state(device="cuda"):
        return _random.get_device_rng_state(_random.cuda_index(device, "cuda"))

    @staticmethod
    def set_rng_state(new_state, device="cuda"):
        _random.set_device_rng_state(new_state, _random.cuda_index(device, "cuda"))

    @staticmethod
    def get_rng_state_all():
        return [_random.get_device_rng_state(d) for d in range(cuda.device_count())]

    @staticmethod
    def set_rng_state_all(new_states):
        for d, state in enumerate(new_states):
            _random.set_device_rng_state(state, d)

    @staticmethod
    def manual_seed(seed):
        """(No CuPy or no device: nothing to seed, as torch's is silently ignored then.)"""
        try:
            device = _random.cuda_index("cuda", "cuda")
        except (ImportError, RuntimeError):     # (CuPy's CUDARuntimeError is a RuntimeError)
            return
        _random.seed_devices(seed, device)

    @staticmethod
    def manual_seed_all(seed):
        _random.seed_devices(seed)


def is_floating_point(t):
    """torch.is_floating_point."""
    return _Tensor.is_floating_point(t)


def from_numpy(a):
    """torch.from_numpy: a Tensor sharing the NumPy array's memory."""
    if not isinstance(a, _np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(a).__name__}")
    return as_tensor(a)


def is_tensor(obj):
    return isinstance(obj, _Tensor)
from .serialization import load, save
from .tensor import (Function, Tensor, as_tensor, enable_grad, inference_mode, is_grad_enabled,
                     no_grad, set_grad_enabled, tensor)

__all__ = ["autograd", "Tensor", "Function", "tensor", "as_tensor", "no_grad", "inference_mode", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "Module", "Parameter",
           "Sequential", "ModuleList", "ModuleDict", "functional", "F", "nn", "init", "optim", "keras", "manual_seed", "save",
           "initial_seed", "seed", "get_rng_state", "set_rng_state", "Generator",
           "load", "parse_device", "zeros", "ones", "full", "empty", "rand", "randn", "randint",
           "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
           "randint_like", "randperm", "multinomial", "arange", "linspace", "eye", "einsum",
           "unique", "func", "set_default_dtype", "get_default_dtype", "utils",
           # torch's top-level functions (layers.functional's)
           "abs", "add", "amax", "amin", "argmax", "argmin", "argsort", "cat", "chunk", "clamp",
           "clone", "div", "exp", "flatten", "gather", "index_select", "log", "log_softmax",
           "masked_fill", "matmul", "max", "mean", "min", "mul", "neg", "pow", "relu", "reshape",
           "sigmoid", "softmax", "sort", "split", "sqrt", "squeeze", "stack", "std", "sub", "sum",
           "tanh", "topk", "transpose", "unsqueeze", "var", "where", "maximum", "minimum",
           "isnan", "isinf", "isfinite", "narrow", "flip", "log1p", "from_numpy", "is_tensor",
           "expm1", "log2", "log10", "reciprocal", "rsqrt", "sin", "cos", "tan", "sinh", "cosh",
           "atan", "asin", "acos", "asinh", "acosh", "atanh", "erf", "square", "logsumexp",
           "cumsum",
           "cumprod", "prod", "norm", "tril", "triu", "roll", "bmm", "atan2", "bincount",
           "floor", "ceil", "trunc", "sign", "round", "fmod", "remainder", "floor_divide",
           "logical_and", "logical_or", "logical_xor", "logical_not", "outer",
           "repeat_interleave", "nonzero", "allclose", "cosine_similarity", "cuda",
           "pairwise_distance", "is_floating_point",
           "bfloat16", "float16", "half", "float32", "float", "float64", "double", "int8",
           "uint8", "int16", "short", "int32", "int", "int64", "long", "bool"]
__all__ += ["channels_last", "contiguous_format", "preserve_format"]
__all__ += ["addcmul", "addcdiv", "lerp", "hypot", "swapaxes", "swapdims", "movedim", "moveaxis",
            "tile", "nansum", "nanmean", "count_nonzero", "isclose", "equal", "dot", "addmm",
            "addmv", "baddbmm", "addbmm", "exp2", "frac", "var_mean", "std_mean", "unflatten",
            "diff", "masked_select", "index_fill", "index_add", "index_copy", "select", "clip",
            "argwhere", "kthvalue", "median", "aminmax", "fmax", "fmin", "take_along_dim", "diag",
            "subtract", "rsub", "positive", "clamp_min", "clamp_max", "deg2rad", "rad2deg",
            "ravel", "msort", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack",
            "row_stack", "dstack", "column_stack", "broadcast_to", "broadcast_shapes",
            "broadcast_tensors", "meshgrid", "kron", "tensordot", "rot90", "logaddexp",
            "logaddexp2", "xlogy", "sinc", "nan_to_num", "dist", "trace", "heaviside", "signbit",
            "isneginf", "isposinf", "isin", "triu_indices", "tril_indices", "scatter",
            "scatter_add", "permute", "multiply", "divide", "true_divide", "negative", "greater",
            "less", "greater_equal", "less_equal", "not_equal", "mm", "mv", "inner", "vdot",
            "cross", "fliplr", "flipud", "tensor_split", "hsplit", "vsplit", "dsplit", "take",
            "logit", "fix", "sgn", "float_power", "copysign", "trapezoid", "cartesian_prod",
            "block_diag", "cdist", "vander", "can_cast", "absolute", "promote_types"]


class _Utils:
    """torch.utils' spelling: L.utils.data (layers.data: Dataset, DataLoader, ...); also
    `from layers.utils.data import DataLoader`."""
    data = data


utils = _Utils()
_sys.modules[__name__ + ".utils"] = utils
_sys.modules[__name__ + ".utils.data"] = data

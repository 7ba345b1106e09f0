"""layers: a define-by-run autograd engine whose ops run on NumPy (the readable reference, any
machine) or on cuDNN / CuPy (where the data is on a GPU), with PyTorch-exact layers, losses and
optimizers, and Keras-layout convolution entry points."""
from . import autograd, functional, graph, init, kernels, keras, nn, optim
from . import functional as F
from .backend import parse_device
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, ones, ones_like,
                       rand, rand_like, randint, randint_like, randn, randn_like, zeros,
                       zeros_like)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential
from .functional import absolute as abs  # noqa: A001  (torch's top-level spellings)
from .functional import (add, amax, amin, argmax, argmin, argsort, cat, chunk, clamp, clone,
                         div, exp, flatten, gather, index_select, log, log_softmax, masked_fill,
                         matmul, max, mean, min, mul, neg, pow, relu, reshape, sigmoid, softmax,
                         sort, split, sqrt, squeeze, stack, std, sub, sum, tanh, topk, transpose,
                         unsqueeze, var, where)
from .random import manual_seed
from .serialization import load, save
from .tensor import (Function, Tensor, as_tensor, enable_grad, inference_mode, is_grad_enabled,
                     no_grad, set_grad_enabled, tensor)

__all__ = ["autograd", "Tensor", "Function", "tensor", "as_tensor", "no_grad", "inference_mode", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "Module", "Parameter",
           "Sequential", "ModuleList", "ModuleDict", "functional", "F", "nn", "init", "optim", "keras", "manual_seed", "save",
           "load", "parse_device", "zeros", "ones", "full", "empty", "rand", "randn", "randint",
           "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
           "randint_like", "arange", "linspace", "eye",
           # torch's top-level functions (layers.functional's)
           "abs", "add", "amax", "amin", "argmax", "argmin", "argsort", "cat", "chunk", "clamp",
           "clone", "div", "exp", "flatten", "gather", "index_select", "log", "log_softmax",
           "masked_fill", "matmul", "max", "mean", "min", "mul", "neg", "pow", "relu", "reshape",
           "sigmoid", "softmax", "sort", "split", "sqrt", "squeeze", "stack", "std", "sub", "sum",
           "tanh", "topk", "transpose", "unsqueeze", "var", "where"]

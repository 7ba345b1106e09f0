"""cudnnlite: a thin ctypes binding of the cuDNN 9 C API with CuPy arrays as tensors.

    api          every C prototype, declared once
    boundary     the checks every array passes before its pointer reaches cuDNN
    descriptors  Tensor / Filter / Convolution / Activation descriptors (no GPU needed)
    conv         convolution fwd / bwd-data / bwd-filter / bwd-bias, transposed convolution
    batchnorm    batch norm training / inference / backward
    activation   activations, cudnnAddTensor, cudnnScaleTensor
    rnn          the v8 RNN API: dropout / RNN / RNN-data descriptors, weight space, fwd / bwd
    graph        the backend (graph) API: descriptors, operation graphs, execution plans
    blas         cuBLASLt matmul (bias epilogue, strided batches), capturable in a CUDA graph;
                 loaded on first `from cudnnlite import blas`
"""
from . import activation, api, batchnorm, boundary, conv, rnn
from ._lib import ENV_VAR, LibraryNotFound
from ._lib import path as library_path
from .descriptors import (ActivationDescriptor, ConvolutionDescriptor, FilterDescriptor,
                          TensorDescriptor, conv_output_shape, data_type)
from .enums import *  # noqa: F401,F403 -- the IntEnums are part of the public API
from .errors import *  # noqa: F401,F403 -- CudnnError and its subclasses
from .errors import CudnnError
from .handle import capture_scope, get_handle


def version():
    """The loaded libcudnn's version as (major, minor, patch), e.g. (9, 19, 0)."""
    v = api.cudnnGetVersion()
    return v // 10000, v // 100 % 100, v % 100

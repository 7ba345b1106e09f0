"""cuDNN 9 enum types as IntEnums (values from cudnn_graph.h / cudnn_ops.h / cudnn_cnn.h / cudnn_adv.h)."""
from enum import IntEnum

__all__ = ["Status", "DataType", "TensorFormat", "ConvMode", "MathType", "ConvFwdAlgo",
           "ConvBwdDataAlgo", "ConvBwdFilterAlgo", "Determinism", "BatchNormMode", "ActivationMode",
           "NanPropagation", "RNNAlgo", "RNNMode", "RNNBiasMode", "DirectionMode", "RNNInputMode",
           "ForwardMode", "RNNDataLayout", "WgradMode"]


class Status(IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1001
    SUBLIBRARY_VERSION_MISMATCH = 1002
    SERIALIZATION_VERSION_MISMATCH = 1003
    DEPRECATED = 1004
    LICENSE_ERROR = 1005
    RUNTIME_IN_PROGRESS = 1006
    RUNTIME_FP_OVERFLOW = 1007
    SUBLIBRARY_LOADING_FAILED = 1008
    BAD_PARAM = 2000
    INVALID_VALUE = 2001
    BAD_PARAM_NULL_POINTER = 2002
    BAD_PARAM_MISALIGNED_POINTER = 2003
    BAD_PARAM_NOT_FINALIZED = 2004
    BAD_PARAM_OUT_OF_BOUND = 2005
    BAD_PARAM_SIZE_INSUFFICIENT = 2006
    BAD_PARAM_STREAM_MISMATCH = 2007
    BAD_PARAM_SHAPE_MISMATCH = 2008
    BAD_PARAM_DUPLICATED_ENTRIES = 2009
    BAD_PARAM_ATTRIBUTE_TYPE = 2010
    BAD_PARAM_CUDA_GRAPH_MISMATCH = 2011
    BAD_PARAM_DESCRIPTOR_TYPE = 2012
    NOT_SUPPORTED = 3000
    NOT_SUPPORTED_GRAPH_PATTERN = 3001
    NOT_SUPPORTED_SHAPE = 3002
    NOT_SUPPORTED_DATA_TYPE = 3003
    NOT_SUPPORTED_LAYOUT = 3004
    NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER = 3005
    NOT_SUPPORTED_INCOMPATIBLE_CUDART = 3006
    NOT_SUPPORTED_ARCH_MISMATCH = 3007
    NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING = 3008
    NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE = 3009
    NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT = 3010
    NOT_SUPPORTED_PADDING = 3011
    NOT_SUPPORTED_BAD_LAUNCH_PARAM = 3012
    NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API = 3013
    NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE = 3014
    INTERNAL_ERROR = 4000
    INTERNAL_ERROR_COMPILATION_FAILED = 4001
    INTERNAL_ERROR_UNEXPECTED_VALUE = 4002
    INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003
    INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 4004
    INTERNAL_ERROR_BAD_LAUNCH_PARAM = 4005
    INTERNAL_ERROR_TEXTURE_CREATION_FAILED = 4006
    EXECUTION_FAILED = 5000
    EXECUTION_FAILED_CUDA_DRIVER = 5001
    EXECUTION_FAILED_CUBLAS = 5002
    EXECUTION_FAILED_CUDART = 5003
    EXECUTION_FAILED_CURAND = 5004


class DataType(IntEnum):
    FLOAT = 0
    DOUBLE = 1
    HALF = 2
    INT8 = 3
    INT32 = 4
    UINT8 = 6
    BFLOAT16 = 9
    INT64 = 10
    BOOLEAN = 11


class TensorFormat(IntEnum):
    NCHW = 0
    NHWC = 1
    NCHW_VECT_C = 2


class ConvMode(IntEnum):
    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class MathType(IntEnum):
    DEFAULT = 0          # fp32 convs may use TF32 tensor cores
    TENSOR_OP = 1
    TENSOR_OP_ALLOW_CONVERSION = 2
    FMA = 3              # plain fp32 FMA: no TF32


class ConvFwdAlgo(IntEnum):
    IMPLICIT_GEMM = 0
    IMPLICIT_PRECOMP_GEMM = 1
    GEMM = 2
    DIRECT = 3
    FFT = 4
    FFT_TILING = 5
    WINOGRAD = 6
    WINOGRAD_NONFUSED = 7


class ConvBwdDataAlgo(IntEnum):
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    FFT_TILING = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5


class ConvBwdFilterAlgo(IntEnum):
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    ALGO_3 = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5
    FFT_TILING = 6


class Determinism(IntEnum):
    NON_DETERMINISTIC = 0
    DETERMINISTIC = 1


class BatchNormMode(IntEnum):
    PER_ACTIVATION = 0   # statistics over N: scale/bias/mean/var are 1xCxHxW
    SPATIAL = 1          # statistics over N,H,W: 1xCx1x1
    SPATIAL_PERSISTENT = 2


class ActivationMode(IntEnum):
    SIGMOID = 0
    RELU = 1
    TANH = 2
    CLIPPED_RELU = 3
    ELU = 4
    IDENTITY = 5
    SWISH = 6


class NanPropagation(IntEnum):
    NOT_PROPAGATE_NAN = 0
    PROPAGATE_NAN = 1


class RNNAlgo(IntEnum):
    STANDARD = 0
    PERSIST_STATIC = 1
    PERSIST_DYNAMIC = 2
    PERSIST_STATIC_SMALL_H = 3


class RNNMode(IntEnum):
    RNN_RELU = 0
    RNN_TANH = 1
    LSTM = 2
    GRU = 3


class RNNBiasMode(IntEnum):
    NO_BIAS = 0
    SINGLE_INP_BIAS = 1
    DOUBLE_BIAS = 2
    SINGLE_REC_BIAS = 3


class DirectionMode(IntEnum):
    UNIDIRECTIONAL = 0
    BIDIRECTIONAL = 1


class RNNInputMode(IntEnum):
    LINEAR_INPUT = 0
    SKIP_INPUT = 1


class ForwardMode(IntEnum):
    INFERENCE = 0
    TRAINING = 1


class RNNDataLayout(IntEnum):
    SEQ_MAJOR_UNPACKED = 0
    SEQ_MAJOR_PACKED = 1
    BATCH_MAJOR_UNPACKED = 2


class WgradMode(IntEnum):
    ADD = 0
    SET = 1

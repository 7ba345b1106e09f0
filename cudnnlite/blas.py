"""cuBLASLt through ctypes: the matrix products of Linear, matmul and the LSTM cell, on CuPy's
current stream with a workspace this module owns -- so, unlike CuPy's own cuBLAS calls, they can
be captured in a CUDA graph (a whole Tacotron 2 step).

    matmul(a, b, out=None, *, bias=None, alpha=1.0, beta=0.0)
        -> alpha * (a @ b) + beta * out + bias        a (M, K) or (B, M, K), b (K, N) or (B, K, N)

Row-major arrays, column-major cuBLAS. A row-major (r, c) matrix with row stride ld, read the way
cuBLAS reads memory, is the column-major (c, r) matrix with leading dimension ld: its transpose.
So Y = A @ B is computed as Y^T = B^T A^T: cuBLAS's first operand is our b, its second our a, and
its D, column-major (N, M), is Y row-major (M, N). A transposed view (`W.T`, `swapaxes`) is read
where it lies, with the other transpose flag, not copied. `describe` does this mapping from shapes
and strides alone (tests check it against a column-major emulator, no GPU needed).

Why ctypes and not nvmath-python's `nvmath.bindings.cublasLt` (checked on 2026-11-22 with
nvmath-python 1.0.0): that module refuses to load without libcuda.so.1 ("NotSupportedError: CUDA
driver is not found"), so nothing built on it could be tested on a GPU-less CI machine, whereas
libcublasLt's descriptors are host objects that are created, set and read back with no GPU (only
cublasLtCreate fails there, with NOT_INITIALIZED, as cudnnCreate does). libcublasLt comes with
the nvidia-cudnn-cu12 / -cu13 wheels (their nvidia-cublas dependency).
"""
import ctypes
import functools
import threading
import weakref
from ctypes import POINTER, Structure, byref, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t
from ctypes import c_uint32, c_uint64, c_void_p, sizeof
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from . import api
from ._cache import LRU
from ._lib import load
from ._settings import cached_hash, settings_functions, state_without_hash
from .boundary import ALIGNMENT, apart
from .handle import Workspace

ENV_VAR = "CUDNNLITE_LIBCUBLASLT"
lib, path = load("cublasLt", ENV_VAR, ["libcublasLt.so.13", "libcublasLt.so.12"],
                 "Install nvidia-cublas-cu12 / -cu13 (a dependency of nvidia-cudnn-cu12 / -cu13)")


# ---- enums (cublas_api.h, cublasLt.h, library_types.h) --------------------------------------

class Status(IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    ARCH_MISMATCH = 8
    MAPPING_ERROR = 11
    EXECUTION_FAILED = 13
    INTERNAL_ERROR = 14
    NOT_SUPPORTED = 15
    LICENSE_ERROR = 16


class CudaDataType(IntEnum):
    R_32F = 0
    R_64F = 1
    R_16F = 2
    R_16BF = 14


class ComputeType(IntEnum):
    COMPUTE_16F = 64
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_64F = 70
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77


class Op(IntEnum):
    N = 0
    T = 1


class Order(IntEnum):
    COL = 0
    ROW = 1


class Epilogue(IntEnum):
    DEFAULT = 1
    RELU = 2
    BIAS = 4
    RELU_BIAS = 6
    GELU = 32
    GELU_BIAS = 36
    BGRADA = 256
    BGRADB = 512


class MatmulDescAttr(IntEnum):
    COMPUTE_TYPE = 0
    SCALE_TYPE = 1
    POINTER_MODE = 2
    TRANSA = 3
    TRANSB = 4
    EPILOGUE = 7
    BIAS_POINTER = 8
    BIAS_DATA_TYPE = 26


class LayoutAttr(IntEnum):
    TYPE = 0
    ORDER = 1
    ROWS = 2
    COLS = 3
    LD = 4
    BATCH_COUNT = 5
    STRIDED_BATCH_OFFSET = 6


class PreferenceAttr(IntEnum):
    MAX_WORKSPACE_BYTES = 1
    MIN_ALIGNMENT_A_BYTES = 5
    MIN_ALIGNMENT_B_BYTES = 6
    MIN_ALIGNMENT_C_BYTES = 7
    MIN_ALIGNMENT_D_BYTES = 8


_DTYPES = {"float32": CudaDataType.R_32F, "float64": CudaDataType.R_64F,
           "float16": CudaDataType.R_16F, "bfloat16": CudaDataType.R_16BF}
_ITEMSIZE = {CudaDataType.R_32F: 4, CudaDataType.R_64F: 8, CudaDataType.R_16F: 2,
             CudaDataType.R_16BF: 2}
_NAMES = {}           # dtype -> dtype.name (NumPy works a name out in Python on each access)


# ---- errors ---------------------------------------------------------------------------------

class CublasError(RuntimeError):
    """A cuBLASLt call returned a status other than CUBLAS_STATUS_SUCCESS, or a call was refused
    before it (the function it would have reached named in `function`)."""

    def __init__(self, function, arguments=(), detail="", status=Status.INVALID_VALUE):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = int(status)
        self.function, self.arguments, self.detail = function, dict(arguments), detail
        name = self.status.name if isinstance(self.status, Status) else "UNKNOWN"
        lines = [f"{function} failed: CUBLAS_STATUS_{name} ({int(self.status)})"
                 + (f": {detail}" if detail else "")]
        lines += [f"  {k} = {_describe(v)}" for k, v in self.arguments.items()]
        super().__init__("\n".join(lines))


class InvalidValue(CublasError):
    """CUBLAS_STATUS_INVALID_VALUE, or arguments refused at the boundary."""


class NotSupported(CublasError):
    """CUBLAS_STATUS_NOT_SUPPORTED, or no algorithm for the problem."""


class NotInitialized(CublasError):
    """CUBLAS_STATUS_NOT_INITIALIZED (cublasLtCreate with no usable GPU)."""


_CLASSES = {Status.INVALID_VALUE: InvalidValue, Status.NOT_SUPPORTED: NotSupported,
            Status.NOT_INITIALIZED: NotInitialized}


def _describe(value):
    if type(value).__name__ == "CArgObject":
        return "<pointer>"
    if isinstance(value, ctypes._SimpleCData):
        return repr(value.value)
    return repr(value)


def _fail(status, function, arguments):
    detail = lib.cublasLtGetStatusString(status).decode(errors="replace")
    raise _CLASSES.get(status, CublasError)(function, arguments, detail, status)


# ---- prototypes, each declared once ---------------------------------------------------------

lib.cublasLtGetStatusString.argtypes = [c_int]
lib.cublasLtGetStatusString.restype = c_char_p
prototype = api.prototype_for(lib, _fail)
handle_t = desc_t = c_void_p


class _Algo(Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes."""
    _fields_ = [("data", c_uint64 * 8)]


class HeuristicResult(Structure):
    """cublasLtMatmulHeuristicResult_t"""
    _fields_ = [("algo", _Algo), ("workspaceSize", c_size_t), ("state", c_int),
                ("wavesCount", c_float), ("reserved", c_int * 4)]


@prototype(restype=c_size_t)
def cublasLtGetVersion():
    """size_t cublasLtGetVersion(void)"""


@prototype(POINTER(handle_t))
def cublasLtCreate(lightHandle):
    """cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)"""


@prototype(handle_t)
def cublasLtDestroy(lightHandle):
    """cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)"""


@prototype(POINTER(desc_t), c_int, c_int)
def cublasLtMatmulDescCreate(matmulDesc, computeType, scaleType):
    """cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
    cublasComputeType_t computeType, cudaDataType_t scaleType)"""


@prototype(desc_t)
def cublasLtMatmulDescDestroy(matmulDesc):
    """cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)"""


@prototype(desc_t, c_int, c_void_p, c_size_t)
def cublasLtMatmulDescSetAttribute(matmulDesc, attr, buf, sizeInBytes):
    """cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
    cublasLtMatmulDescAttributes_t attr, const void *buf, size_t sizeInBytes)"""


@prototype(desc_t, c_int, c_void_p, c_size_t, POINTER(c_size_t))
def cublasLtMatmulDescGetAttribute(matmulDesc, attr, buf, sizeInBytes, sizeWritten):
    """cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
    cublasLtMatmulDescAttributes_t attr, void *buf, size_t sizeInBytes, size_t *sizeWritten)"""


@prototype(POINTER(desc_t), c_int, c_uint64, c_uint64, c_int64)
def cublasLtMatrixLayoutCreate(matLayout, type, rows, cols, ld):
    """cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
    cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)"""


@prototype(desc_t)
def cublasLtMatrixLayoutDestroy(matLayout):
    """cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)"""


@prototype(desc_t, c_int, c_void_p, c_size_t)
def cublasLtMatrixLayoutSetAttribute(matLayout, attr, buf, sizeInBytes):
    """cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
    cublasLtMatrixLayoutAttribute_t attr, const void *buf, size_t sizeInBytes)"""


@prototype(desc_t, c_int, c_void_p, c_size_t, POINTER(c_size_t))
def cublasLtMatrixLayoutGetAttribute(matLayout, attr, buf, sizeInBytes, sizeWritten):
    """cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
    cublasLtMatrixLayoutAttribute_t attr, void *buf, size_t sizeInBytes, size_t *sizeWritten)"""


@prototype(POINTER(desc_t))
def cublasLtMatmulPreferenceCreate(pref):
    """cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)"""


@prototype(desc_t)
def cublasLtMatmulPreferenceDestroy(pref):
    """cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)"""


@prototype(desc_t, c_int, c_void_p, c_size_t)
def cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, sizeInBytes):
    """cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t sizeInBytes)"""


@prototype(desc_t, c_int, c_void_p, c_size_t, POINTER(c_size_t))
def cublasLtMatmulPreferenceGetAttribute(pref, attr, buf, sizeInBytes, sizeWritten):
    """cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attr, void *buf, size_t sizeInBytes,
    size_t *sizeWritten)"""


@prototype(handle_t, desc_t, desc_t, desc_t, desc_t, desc_t, desc_t, c_int,
           POINTER(HeuristicResult), POINTER(c_int))
def cublasLtMatmulAlgoGetHeuristic(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc,
                                   preference, requestedAlgoCount, heuristicResultsArray,
                                   returnAlgoCount):
    """cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
    cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t
    Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)"""


@prototype(handle_t, desc_t, c_void_p, c_void_p, desc_t, c_void_p, desc_t, c_void_p, c_void_p,
           desc_t, c_void_p, desc_t, POINTER(_Algo), c_void_p, c_size_t, c_void_p)
def cublasLtMatmul(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
                   algo, workspace, workspaceSizeInBytes, stream):
    """cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t
    computeDesc, const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
    cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc,
    void *D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
    size_t workspaceSizeInBytes, cudaStream_t stream)"""


def version():
    """The loaded libcublasLt's version as (major, minor, patch), e.g. (12, 9, 3)."""
    v = cublasLtGetVersion()
    return v // 10000, v // 100 % 100, v % 100


# ---- descriptors: host objects, no GPU needed -----------------------------------------------

class _Descriptor:
    """Owns one cuBLASLt descriptor; attributes are set and read back by name with their C types
    (`_types`), repr prints every one as cuBLASLt reports it."""
    _create = _destroy = _set = _get = None
    _types = {}         # attribute -> ctypes type
    _shown = {}         # attribute -> enum printed for its value

    def __init__(self, *create_args):
        handle = c_void_p()
        type(self)._create(byref(handle), *create_args)
        self._as_parameter_ = handle
        self._finalizer = weakref.finalize(self, type(self)._destroy, handle)

    def set(self, attr, value):
        v = self._types[attr](value)
        type(self)._set(self, attr, byref(v), sizeof(v))

    def get(self, attr):
        v, written = self._types[attr](), c_size_t()
        type(self)._get(self, attr, byref(v), sizeof(v), byref(written))
        return v.value

    def setup(self):
        """Every attribute as cuBLASLt reports it: ((name, value), ...)."""
        out = []
        for attr in self._types:
            value = self.get(attr)
            shown = self._shown.get(attr)
            if shown is not None and value is not None:
                try:
                    value = shown(value)
                except ValueError:
                    pass
            out.append((attr.name.lower(), value))
        return tuple(out)

    def __repr__(self):
        parts = ", ".join(f"{k}={v.name if isinstance(v, IntEnum) else v}"
                          for k, v in self.setup())
        return f"{type(self).__name__}({parts})"


class MatmulDesc(_Descriptor):
    """cublasLtMatmulDesc_t: compute and scale types, transposes of A and B, epilogue."""
    _create, _destroy = cublasLtMatmulDescCreate, cublasLtMatmulDescDestroy
    _set, _get = cublasLtMatmulDescSetAttribute, cublasLtMatmulDescGetAttribute
    _types = {MatmulDescAttr.COMPUTE_TYPE: c_int32, MatmulDescAttr.SCALE_TYPE: c_int32,
              MatmulDescAttr.TRANSA: c_int32, MatmulDescAttr.TRANSB: c_int32,
              MatmulDescAttr.EPILOGUE: c_uint32, MatmulDescAttr.BIAS_DATA_TYPE: c_int32,
              MatmulDescAttr.BIAS_POINTER: c_void_p}
    _shown = {MatmulDescAttr.COMPUTE_TYPE: ComputeType, MatmulDescAttr.SCALE_TYPE: CudaDataType,
              MatmulDescAttr.TRANSA: Op, MatmulDescAttr.TRANSB: Op,
              MatmulDescAttr.EPILOGUE: Epilogue, MatmulDescAttr.BIAS_DATA_TYPE: CudaDataType}

    def __init__(self, compute, scale, transa=Op.N, transb=Op.N, epilogue=Epilogue.DEFAULT,
                 bias_type=None):
        super().__init__(int(compute), int(scale))
        self.set(MatmulDescAttr.TRANSA, int(transa))
        self.set(MatmulDescAttr.TRANSB, int(transb))
        self.set(MatmulDescAttr.EPILOGUE, int(epilogue))
        if bias_type is not None:
            self.set(MatmulDescAttr.BIAS_DATA_TYPE, int(bias_type))


class MatrixLayout(_Descriptor):
    """cublasLtMatrixLayout_t: a column-major rows x cols matrix with leading dimension ld, and
    for a strided batch the count and the element offset between matrices (0: one matrix read
    by every item)."""
    _create, _destroy = cublasLtMatrixLayoutCreate, cublasLtMatrixLayoutDestroy
    _set, _get = cublasLtMatrixLayoutSetAttribute, cublasLtMatrixLayoutGetAttribute
    _types = {LayoutAttr.TYPE: c_uint32, LayoutAttr.ORDER: c_int32, LayoutAttr.ROWS: c_uint64,
              LayoutAttr.COLS: c_uint64, LayoutAttr.LD: c_int64, LayoutAttr.BATCH_COUNT: c_int32,
              LayoutAttr.STRIDED_BATCH_OFFSET: c_int64}
    _shown = {LayoutAttr.TYPE: CudaDataType, LayoutAttr.ORDER: Order}

    def __init__(self, data_type, rows, cols, ld, batch=1, batch_stride=0):
        super().__init__(int(data_type), rows, cols, ld)
        if batch != 1:
            self.set(LayoutAttr.BATCH_COUNT, batch)
            self.set(LayoutAttr.STRIDED_BATCH_OFFSET, batch_stride)


class Preference(_Descriptor):
    """cublasLtMatmulPreference_t: the workspace an algorithm may use and the pointer alignment
    it must accept (16 bytes: every pointer this module passes is, and any 16-aligned one may
    come later, so algorithms that need more are never chosen)."""
    _create, _destroy = cublasLtMatmulPreferenceCreate, cublasLtMatmulPreferenceDestroy
    _set, _get = cublasLtMatmulPreferenceSetAttribute, cublasLtMatmulPreferenceGetAttribute
    _types = {PreferenceAttr.MAX_WORKSPACE_BYTES: c_uint64,
              PreferenceAttr.MIN_ALIGNMENT_A_BYTES: c_uint32,
              PreferenceAttr.MIN_ALIGNMENT_B_BYTES: c_uint32,
              PreferenceAttr.MIN_ALIGNMENT_C_BYTES: c_uint32,
              PreferenceAttr.MIN_ALIGNMENT_D_BYTES: c_uint32}

    def __init__(self, max_workspace, alignment=ALIGNMENT):
        super().__init__()
        self.set(PreferenceAttr.MAX_WORKSPACE_BYTES, max_workspace)
        for attr in list(self._types)[1:]:
            self.set(attr, alignment)


# ---- settings -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Part of every plan's key, so a change takes effect at once."""
    __hash__ = cached_hash
    __getstate__ = state_without_hash
    allow_tf32: bool = False            # float32 products may use TF32 tensor cores (off, as
                                        # torch.backends.cuda.matmul.allow_tf32 by default)
    workspace_limit: int = 32 << 20     # bytes an algorithm may use (cuBLAS's Hopper advice)


settings = Settings()


# configure(allow_tf32=True) for the rest of the process; `with blas.using(allow_tf32=True):`
configure, using = settings_functions(__name__)


# ---- the problem: row-major arrays -> cuBLAS's column-major operands ------------------------

class Operand(NamedTuple):
    """One cuBLAS operand: its column-major layout (rows, cols, ld), the transpose applied to it,
    and the element offset between batch items (0: the same matrix for every item)."""
    rows: int
    cols: int
    ld: int
    op: Op
    batch_stride: int


class Problem(NamedTuple):
    """Everything a plan depends on. m, n, k are cuBLAS's: D = op(A) op(B) is (m, n) column-major,
    so m = N and n = M of the row-major product; cuBLAS's A is our b, its B our a."""
    data_type: CudaDataType
    compute: ComputeType
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    ldd: int
    batch: int
    stride_d: int
    epilogue: Epilogue


def matrix_view(x):
    """How a row-major (R, C) matrix -- the last two axes of x -- lies for cuBLAS, or None when
    no layout states it (copy it): ('rowmajor', ld) for unit column stride (cuBLAS reads the
    transpose, (C, R) with leading dimension ld), ('colmajor', ld) for unit row stride (cuBLAS
    reads it as is, (R, C)). Size-1 axes take any stride. Leading dimensions must not overlap
    rows / columns (ld >= the inner extent), and a batch axis must have a stride >= 0."""
    return _matrix_view(tuple(x.shape), tuple(x.strides), x.itemsize)


@functools.lru_cache(maxsize=4096)
def _matrix_view(shape, strides, itemsize):
    if any(v % itemsize or v < 0 for v in strides):
        return None
    R, C = shape[-2:]
    sr, sc = strides[-2] // itemsize, strides[-1] // itemsize
    if sc == 1 or C == 1:
        ld = sr if R > 1 else C
        if ld >= max(C, 1):
            return "rowmajor", ld
    if sr == 1 or R == 1:
        ld = sc if C > 1 else R
        if ld >= max(R, 1):
            return "colmajor", ld
    return None


def _batch_stride(shape, strides, itemsize):
    """Element offset between the matrices of a 3-d array (0 for one matrix, 2-d or batch 1)."""
    if len(shape) == 2 or shape[0] == 1:
        return 0
    return strides[0] // itemsize


def describe(a, b, data_type, has_bias=False, allow_tf32=False):
    """The Problem for y = a @ b, with a (M, K) or (Ba, M, K), b (K, N) or (Bb, K, N) whose
    matrices matrix_view accepts and y C-contiguous (M, N) or (B, M, N). Reads only shapes and
    strides (no GPU); memoised on them, so a call of a known geometry costs one lookup."""
    return _problem(tuple(a.shape), tuple(a.strides), tuple(b.shape), tuple(b.strides),
                    a.itemsize, int(data_type), bool(has_bias), bool(allow_tf32))


@functools.lru_cache(maxsize=4096)
def _problem(a_shape, a_strides, b_shape, b_strides, itemsize, data_type, has_bias, allow_tf32):
    M, K = a_shape[-2:]
    N = b_shape[-1]
    batch = max(a_shape[0] if len(a_shape) == 3 else 1, b_shape[0] if len(b_shape) == 3 else 1)
    kind_b, ld_b = _matrix_view(b_shape, b_strides, itemsize)
    kind_a, ld_a = _matrix_view(a_shape, a_strides, itemsize)
    stride_b = _batch_stride(b_shape, b_strides, itemsize)
    stride_a = _batch_stride(a_shape, a_strides, itemsize)
    # cuBLAS's A must become b^T (N, K): a row-major b already reads as b^T
    op_a = (Operand(N, K, ld_b, Op.N, stride_b) if kind_b == "rowmajor"
            else Operand(K, N, ld_b, Op.T, stride_b))
    # cuBLAS's B must become a^T (K, M)
    op_b = (Operand(K, M, ld_a, Op.N, stride_a) if kind_a == "rowmajor"
            else Operand(M, K, ld_a, Op.T, stride_a))
    if data_type == CudaDataType.R_64F:
        compute = ComputeType.COMPUTE_64F
    elif data_type == CudaDataType.R_32F and allow_tf32:
        compute = ComputeType.COMPUTE_32F_FAST_TF32
    else:
        compute = ComputeType.COMPUTE_32F
    return Problem(CudaDataType(data_type), compute, N, M, K, op_a, op_b, max(N, 1), batch,
                   M * N if batch > 1 else 0, Epilogue.BIAS if has_bias else Epilogue.DEFAULT)


# ---- plans and the call ---------------------------------------------------------------------

REQUESTED_ALGOS = 8
_FAKE_BIAS = 16     # a bias pointer aligned to exactly 16 bytes, for the heuristic query only


class Plan:
    """A problem's descriptors and the algorithm cuBLASLt's heuristic chose for them (the first
    that fits the workspace limit), built once per problem and device."""

    def __init__(self, problem, handle, workspace_limit):
        p = self.problem = problem
        scale = CudaDataType.R_64F if p.compute == ComputeType.COMPUTE_64F else CudaDataType.R_32F
        self.double = scale == CudaDataType.R_64F
        bias = p.epilogue in (Epilogue.BIAS, Epilogue.RELU_BIAS, Epilogue.GELU_BIAS)
        self.desc = MatmulDesc(p.compute, scale, p.a.op, p.b.op, p.epilogue,
                               p.data_type if bias else None)
        self.layout_a = MatrixLayout(p.data_type, p.a.rows, p.a.cols, p.a.ld, p.batch,
                                     p.a.batch_stride)
        self.layout_b = MatrixLayout(p.data_type, p.b.rows, p.b.cols, p.b.ld, p.batch,
                                     p.b.batch_stride)
        self.layout_d = MatrixLayout(p.data_type, p.m, p.n, p.ldd, p.batch, p.stride_d)
        self.preference = Preference(workspace_limit)
        self.lock = threading.Lock()        # the bias pointer is set on the shared desc per call
        if bias:
            self.desc.set(MatmulDescAttr.BIAS_POINTER, _FAKE_BIAS)
        results, count = (HeuristicResult * REQUESTED_ALGOS)(), c_int()
        cublasLtMatmulAlgoGetHeuristic(handle, self.desc, self.layout_a, self.layout_b,
                                       self.layout_d, self.layout_d, self.preference,
                                       REQUESTED_ALGOS, results, byref(count))
        usable = [r for r in results[:count.value]
                  if r.state == Status.SUCCESS and r.workspaceSize <= workspace_limit]
        if not usable:
            raise NotSupported("cublasLtMatmulAlgoGetHeuristic", self.arguments(),
                               f"no algorithm for this problem within {workspace_limit} bytes of "
                               f"workspace ({count.value} returned)", Status.NOT_SUPPORTED)
        self.algo = _Algo.from_buffer_copy(usable[0].algo)
        self.workspace = usable[0].workspaceSize

    def arguments(self):
        return {"computeDesc": self.desc, "Adesc": self.layout_a, "Bdesc": self.layout_b,
                "Ddesc": self.layout_d, "preference": self.preference}

    def run(self, handle, stream, a_ptr, b_ptr, d_ptr, bias_ptr, alpha, beta):
        scalar = ctypes.c_double if self.double else ctypes.c_float
        alpha, beta = scalar(alpha), scalar(beta)
        ws = handle.workspace.pointer(self.workspace, "cublasLtMatmul", handle)
        with self.lock:
            if bias_ptr:
                self.desc.set(MatmulDescAttr.BIAS_POINTER, bias_ptr)
            # cuBLAS's A is our b, its B our a (see the module docstring); C is D (beta blends)
            cublasLtMatmul(handle, self.desc, byref(alpha), b_ptr, self.layout_a, a_ptr,
                           self.layout_b, byref(beta), d_ptr, self.layout_d, d_ptr,
                           self.layout_d, byref(self.algo), ws, self.workspace, stream)

    def __repr__(self):
        return (f"Plan({self.problem}, algo workspace={self.workspace}, desc={self.desc!r}, "
                f"A={self.layout_a!r}, B={self.layout_b!r}, D={self.layout_d!r})")


PLAN_CACHE_SIZE = 1024
_plans = LRU(PLAN_CACHE_SIZE)
_no_epilogue = set()        # bias problems no algorithm takes in its epilogue: add bias after


class Handle:
    """One cublasLtHandle_t per CUDA device and its workspace (cuBLASLt takes the stream per
    call, so nothing is bound)."""

    def __init__(self, device_id):
        import cupy
        self.device_id = device_id
        handle = c_void_p()
        with cupy.cuda.Device(device_id):
            cublasLtCreate(byref(handle))
        self._as_parameter_ = handle
        self._finalizer = weakref.finalize(self, cublasLtDestroy, handle)
        self.workspace = Workspace()

    def __repr__(self):
        return f"cublasLtHandle(device={self.device_id})"


_handles = {}


def get_handle():
    """The cuBLASLt handle of CuPy's current device."""
    try:
        import cupy
        device_id = cupy.cuda.runtime.getDevice()
    except Exception as e:          # no CuPy, or no device visible
        raise NotInitialized("cublasLtCreate", {}, f"no CUDA device is visible ({e})",
                             Status.NOT_INITIALIZED) from None
    handle = _handles.get(device_id)
    if handle is None:
        handle = _handles[device_id] = Handle(device_id)
    return handle


# ---- the boundary ---------------------------------------------------------------------------

_FN = "cublasLtMatmul"


def _device_array(name, x):
    if not hasattr(getattr(x, "data", None), "ptr"):
        raise InvalidValue(_FN, {name: type(x).__name__},
                           f"{name} must be a CuPy array (device memory), got {type(x).__name__}")


def _operand(name, x):
    """x itself when its matrices lie as a layout can state (matrix_view) and it is 16-byte
    aligned, else one C-contiguous copy. The caller uses what this returns."""
    _device_array(name, x)
    if x.ndim not in (2, 3):
        raise InvalidValue(_FN, {f"{name}.shape": tuple(x.shape)},
                           f"{name} must be 2-d (M, K) or 3-d (batch, M, K), got {x.ndim}-d")
    if x.data.ptr % ALIGNMENT == 0 and matrix_view(x) is not None:
        return x
    return x.copy(order="C")


def _data_type(dtype, a, b):
    if a.dtype != b.dtype:
        raise InvalidValue(_FN, {"a.dtype": a.dtype.name, "b.dtype": b.dtype.name},
                           f"a and b must have one dtype, got {a.dtype.name} and {b.dtype.name}")
    name = (_NAMES.get(a.dtype) or _NAMES.setdefault(a.dtype, a.dtype.name)) if dtype is None \
        else dtype
    dt = _DTYPES.get(name)
    if dt is None:
        raise NotSupported(_FN, {"dtype": name}, f"no cuBLASLt data type for {name}; supported: "
                           + ", ".join(_DTYPES), Status.NOT_SUPPORTED)
    if _ITEMSIZE[dt] != a.itemsize:
        raise InvalidValue(_FN, {"dtype": name, "a.dtype": a.dtype.name},
                           f"dtype={name!r} takes {_ITEMSIZE[dt]}-byte elements but a holds "
                           f"{a.dtype.name}")
    own = _DTYPES.get(a.dtype.name) if dtype is not None else dt
    if own is not None and own != dt:       # (a relabel of integer storage only)
        raise InvalidValue(_FN, {"dtype": name, "a.dtype": a.dtype.name},
                           f"dtype={name!r} would read a's {a.dtype.name} values as {name} bits; "
                           f"dtype= names the type of bits held in integer storage (bfloat16 in "
                           f"uint16 arrays)")
    return dt


def matmul(a, b, out=None, *, bias=None, alpha=1.0, beta=0.0, dtype=None, allow_tf32=None):
    """out = alpha * (a @ b) + beta * out + bias, on CuPy's current stream.

    a (M, K) or (B, M, K); b (K, N) or (B, K, N) (a 2-d or batch-1 operand is read by every
    item); bias (N,) or None; out (M, N) or (B, M, N), C-contiguous, needed when beta != 0.
    Views (transposes, slices) are read in place when a layout can state them, else copied.
    bfloat16 arrays (ml_dtypes' dtype, CuPy 14) need no dtype; dtype='bfloat16' reads bf16 bits
    held in uint16 arrays. float32 products use TF32 only under configure(allow_tf32=True),
    or with allow_tf32=True for this call (False: not for this call; None: the setting)."""
    _device_array("a", a)
    _device_array("b", b)
    dt = _data_type(dtype, a, b)
    if a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise InvalidValue(_FN, {"a.shape": tuple(a.shape), "b.shape": tuple(b.shape)},
                           "a and b must be 2-d or 3-d (a leading batch axis)")
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    ba, bb = (a.shape[0] if a.ndim == 3 else 1), (b.shape[0] if b.ndim == 3 else 1)
    if K != K2 or (ba != bb and 1 not in (ba, bb)):
        raise InvalidValue(_FN, {"a.shape": tuple(a.shape), "b.shape": tuple(b.shape)},
                           f"a {tuple(a.shape)} @ b {tuple(b.shape)}: inner sizes {K} and {K2} "
                           f"or batch sizes {ba} and {bb} do not match")
    shape = (max(ba, bb), M, N) if 3 in (a.ndim, b.ndim) else (M, N)
    if bias is not None:
        _device_array("bias", bias)
        if tuple(bias.shape) != (N,) or bias.dtype != a.dtype:
            raise InvalidValue(_FN, {"bias.shape": tuple(bias.shape), "bias.dtype": bias.dtype.name,
                                     "expected": ((N,), a.dtype.name)},
                               f"bias must be ({N},) {a.dtype.name}, one value per output column")
    if out is None:
        if beta != 0:
            raise InvalidValue(_FN, {"beta": beta}, "beta != 0 blends into `out`: pass out=")
    else:
        _device_array("out", out)
        if tuple(out.shape) != shape or out.dtype != a.dtype:
            raise InvalidValue(_FN, {"out.shape": tuple(out.shape), "out.dtype": out.dtype.name,
                                     "expected": (shape, a.dtype.name)},
                               f"out must be {shape} {a.dtype.name}, the result of "
                               f"{tuple(a.shape)} @ {tuple(b.shape)}")
        if not out.flags.c_contiguous or out.data.ptr % ALIGNMENT:
            raise InvalidValue(_FN, {"out.strides": out.strides, "out.ptr": out.data.ptr},
                               f"out must be C-contiguous and {ALIGNMENT}-byte aligned")
        apart(_FN, "out", out, error=InvalidValue, a=a, b=b, bias=bias)   # (C = D: in place)
    handle = get_handle()
    for name, x in (("a", a), ("b", b), ("out", out), ("bias", bias)):
        if x is not None and x.device.id != handle.device_id:
            raise InvalidValue(_FN, {f"{name}.device": x.device.id,
                                     "current device": handle.device_id},
                               f"{name} is on device {x.device.id} but the current device is "
                               f"{handle.device_id}")
    import cupy
    a, b = _operand("a", a), _operand("b", b)
    if bias is not None and (not bias.flags.c_contiguous or bias.data.ptr % ALIGNMENT):
        bias = bias.copy()
    y = cupy.empty(shape, dtype=a.dtype) if out is None else out
    if y.size == 0:
        return y
    if K == 0:              # an empty sum: cuBLAS is not asked; beta = 0 never reads out
        if beta == 0:
            y[...] = 0
        else:
            y *= beta
        if bias is not None:
            y += bias
        return y
    s = settings
    problem = describe(a, b, dt, bias is not None,
                       s.allow_tf32 if allow_tf32 is None else allow_tf32)
    key = (problem, handle.device_id, s.workspace_limit)
    if bias is not None and key in _no_epilogue:
        problem, key = problem._replace(epilogue=Epilogue.DEFAULT), None
    try:
        plan = _plans.get(key or (problem, handle.device_id, s.workspace_limit),
                          lambda: Plan(problem, handle, s.workspace_limit))
    except NotSupported:
        if problem.epilogue == Epilogue.DEFAULT:
            raise
        # no algorithm takes the bias in its epilogue here: the product, then one addition
        _no_epilogue.add(key)
        return matmul(a, b, out, bias=bias, alpha=alpha, beta=beta, dtype=dtype,
                      allow_tf32=allow_tf32)
    stream = cupy.cuda.get_current_stream().ptr
    with_bias = bias is not None and problem.epilogue != Epilogue.DEFAULT
    plan.run(handle, stream, a.data.ptr, b.data.ptr, y.data.ptr,
             bias.data.ptr if with_bias else 0, alpha, beta)
    if bias is not None and not with_bias:
        y += bias
    return y

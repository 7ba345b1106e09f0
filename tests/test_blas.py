"""cudnnlite.blas with no GPU: libcublasLt's descriptors (created, set, read back), the mapping of
row-major arrays onto cuBLAS's column-major operands (checked by running the described problem
through a NumPy emulator of cublasLtMatmul's column-major semantics), and the boundary's refusals."""
import itertools

import numpy as np
import pytest

import layers as L

from cudnnlite import blas
from cudnnlite.blas import CudaDataType, Epilogue, Op

from fake_device import FakeDeviceArray as Dev


def test_the_library_loads_and_reports_its_version():
    major, minor, _ = blas.version()
    assert major >= 12 and "cublasLt" in blas.path


def test_matmul_desc_reads_back_what_was_set():
    d = blas.MatmulDesc(blas.ComputeType.COMPUTE_32F_FAST_TF32, CudaDataType.R_32F, Op.T, Op.N,
                        Epilogue.BIAS, CudaDataType.R_16F)
    setup = dict(d.setup())
    assert setup["compute_type"] == blas.ComputeType.COMPUTE_32F_FAST_TF32
    assert (setup["transa"], setup["transb"]) == (Op.T, Op.N)
    assert setup["epilogue"] == Epilogue.BIAS and setup["bias_data_type"] == CudaDataType.R_16F
    d.set(blas.MatmulDescAttr.BIAS_POINTER, 4096)
    assert d.get(blas.MatmulDescAttr.BIAS_POINTER) == 4096
    assert "transa=T" in repr(d) and "epilogue=BIAS" in repr(d)


def test_matrix_layout_reads_back_rows_cols_ld_and_batch():
    lay = blas.MatrixLayout(CudaDataType.R_16BF, 3, 5, 7, batch=4, batch_stride=35)
    assert dict(lay.setup()) == dict(type=CudaDataType.R_16BF, order=blas.Order.COL, rows=3,
                                     cols=5, ld=7, batch_count=4, strided_batch_offset=35)
    one = dict(blas.MatrixLayout(CudaDataType.R_32F, 2, 9, 2).setup())
    assert one["batch_count"] == 1 and one["strided_batch_offset"] == 0


def test_preference_holds_the_workspace_limit_and_alignment():
    setup = dict(blas.Preference(12345).setup())
    assert setup["max_workspace_bytes"] == 12345
    assert {v for k, v in setup.items() if k.startswith("min_alignment")} == {16}


# ---- the row-major -> column-major mapping ---------------------------------------------------

def colmajor(x, rows, cols, ld, offset):
    """The column-major (rows, cols) matrix with leading dimension ld that cuBLAS reads starting
    `offset` elements past x's first element (x: a NumPy array standing in for device memory)."""
    item = x.itemsize
    start = np.lib.stride_tricks.as_strided(x, (offset + 1,), (item,))[offset:]
    return np.lib.stride_tricks.as_strided(start, (rows, cols), (item, ld * item))


def emulate(problem, a, b, d, bias=None, alpha=1.0, beta=0.0):
    """cublasLtMatmul as documented, in float64: for each batch item i,
    D_i = alpha op(A_i) op(B_i) + beta C_i (+ bias per row), column-major. cuBLAS's A is our b
    and its B our a (blas.describe); C = D. Writes into d (our row-major y)."""
    p = problem
    for i in range(p.batch):
        A = colmajor(b, p.a.rows, p.a.cols, p.a.ld, i * p.a.batch_stride).astype(np.float64)
        B = colmajor(a, p.b.rows, p.b.cols, p.b.ld, i * p.b.batch_stride).astype(np.float64)
        A = A.T if p.a.op == Op.T else A
        B = B.T if p.b.op == Op.T else B
        assert A.shape == (p.m, p.k) and B.shape == (p.k, p.n)
        D = colmajor(d, p.m, p.n, p.ldd, i * p.stride_d)
        value = alpha * (A @ B) + (beta * D if beta else 0)    # beta = 0: C is not read
        if p.epilogue == Epilogue.BIAS:
            value = value + bias.astype(np.float64)[:, None]
        D[...] = value


def views(rng, shape):
    """An array of `shape` as several views: C-contiguous, the transpose of a contiguous array,
    a slice of a wider array (leading dimension > extent), and a slice of a taller transposed
    one."""
    *batch, R, C = shape
    yield "contiguous", rng.standard_normal(shape)
    yield "transposed", np.swapaxes(rng.standard_normal((*batch, C, R)), -1, -2)
    yield "wide slice", rng.standard_normal((*batch, R, C + 3))[..., :C]
    yield "transposed slice", np.swapaxes(rng.standard_normal((*batch, C + 2, R)), -1, -2)[..., :C]


SIZES = [(1, 1, 1), (1, 5, 3), (4, 1, 6), (3, 7, 1), (5, 4, 6), (2, 3, 2)]
BATCHES = [((), ()), ((3,), (3,)), ((3,), ()), ((), (4,)), ((1,), (5,)), ((2,), (1,))]


@pytest.mark.parametrize("M,K,N", SIZES)
@pytest.mark.parametrize("ba,bb", BATCHES)
def test_described_problem_computes_a_at_b_for_every_view(M, K, N, ba, bb):
    rng = np.random.default_rng(M * 100 + K * 10 + N)
    for (ka, a), (kb, b) in itertools.product(views(rng, (*ba, M, K)), views(rng, (*bb, K, N))):
        p = blas.describe(a, b, CudaDataType.R_64F)
        y = np.full(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (M, N), np.nan)
        emulate(p, a, b, y)
        np.testing.assert_allclose(y, a @ b, rtol=1e-12, atol=1e-12,
                                   err_msg=f"a {ka} {a.shape}, b {kb} {b.shape}: {p}")


def test_bias_alpha_and_beta_follow_cublas_semantics():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 6))
    bias, old = rng.standard_normal(6), rng.standard_normal((3, 4, 6))
    p = blas.describe(a, b, CudaDataType.R_64F, has_bias=True)
    assert p.epilogue == Epilogue.BIAS
    y = old.copy()
    emulate(p, a, b, y, bias, alpha=0.5, beta=2.0)
    np.testing.assert_allclose(y, 0.5 * (a @ b) + 2.0 * old + bias, rtol=1e-12)


def test_compute_type_follows_dtype_and_the_tf32_setting():
    a, b = np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32)
    assert blas.describe(a, b, CudaDataType.R_32F).compute == blas.ComputeType.COMPUTE_32F
    assert blas.describe(a, b, CudaDataType.R_32F, allow_tf32=True).compute == \
        blas.ComputeType.COMPUTE_32F_FAST_TF32
    assert blas.describe(a.astype(np.float64), b.astype(np.float64), CudaDataType.R_64F,
                         allow_tf32=True).compute == blas.ComputeType.COMPUTE_64F
    h = a.astype(np.float16), b.astype(np.float16)
    assert blas.describe(*h, CudaDataType.R_16F, allow_tf32=True).compute == \
        blas.ComputeType.COMPUTE_32F
    bf = a.astype(L.backend.bfloat16), b.astype(L.backend.bfloat16)
    assert blas.describe(*bf, CudaDataType.R_16BF).compute == blas.ComputeType.COMPUTE_32F


@pytest.mark.parametrize("make", [
    lambda x: x[:, ::2],                                   # neither axis unit-stride
    lambda x: x[::-1],                                     # negative stride
    lambda x: np.lib.stride_tricks.as_strided(x, (4, 3), (4, 4)),   # rows overlap (ld < cols)
])
def test_views_no_layout_states_are_refused_by_matrix_view(make):
    x = np.zeros((8, 6), np.float32)
    assert blas.matrix_view(make(x)) is None


def test_matrix_view_reads_transposes_in_place():
    x = np.zeros((4, 6), np.float32)
    assert blas.matrix_view(x) == ("rowmajor", 6)
    assert blas.matrix_view(x.T) == ("colmajor", 6)
    assert blas.matrix_view(x[:, :3]) == ("rowmajor", 6)
    assert blas.matrix_view(x[:1]) == ("rowmajor", 6)          # one row: any row stride
    assert blas.matrix_view(x[:, :1]) == ("rowmajor", 6)       # one column


# ---- the boundary, before any device is touched ----------------------------------------------

def refuses(match, *args, **kwargs):
    with pytest.raises(blas.InvalidValue, match=match) as e:
        blas.matmul(*args, **kwargs)
    assert e.value.function == "cublasLtMatmul"
    return e.value


def test_mixed_dtypes_are_refused_with_both_named():
    e = refuses("one dtype, got float32 and float16", Dev((2, 3)), Dev((3, 4), "float16"))
    assert e.arguments == {"a.dtype": "float32", "b.dtype": "float16"}


def test_dtype_relabels_integer_storage_only():
    refuses("would read a's float16 values as bfloat16 bits", Dev((2, 3), "float16"),
            Dev((3, 4), "float16"), dtype="bfloat16")


def test_shapes_that_do_not_line_up_are_refused():
    refuses(r"inner sizes 3 and 5", Dev((2, 3)), Dev((5, 4)))
    refuses(r"batch sizes 2 and 3", Dev((2, 4, 3)), Dev((3, 3, 4)))
    refuses("2-d or 3-d", Dev((2, 2, 4, 3)), Dev((3, 4)))


def test_bias_and_out_are_checked_against_the_result():
    a, b = Dev((2, 3)), Dev((3, 4))
    refuses(r"bias must be \(4,\) float32", a, b, bias=Dev((2,)))
    refuses(r"bias must be \(4,\) float32", a, b, bias=Dev((4,), "float64"))
    refuses(r"out must be \(2, 4\) float32", a, b, out=Dev((2, 3)))      # undersized
    refuses(r"out must be \(2, 4\) float32", a, b, out=Dev((2, 4), "float64"))
    refuses("C-contiguous", a, b, out=Dev((4, 2)).transpose())
    refuses("pass out=", a, b, beta=1.0)
    # out must not share memory with what the product reads (cuBLASLt reads a, b and bias while
    # it writes out; out as C, blended by beta, is its own)
    a, b = Dev((2, 3), ptr=1 << 22), Dev((3, 4), ptr=1 << 23)
    refuses("out shares memory with a", a, b, out=Dev((2, 4), ptr=(1 << 22) + 16))
    refuses("out shares memory with b", a, b, out=Dev((2, 4), ptr=1 << 23))
    refuses("out shares memory with bias", a, b, bias=Dev((4,), ptr=(1 << 24) + 16),
            out=Dev((2, 4), ptr=1 << 24))


def test_unsupported_dtypes_and_host_arrays_are_refused():
    with pytest.raises(blas.NotSupported, match="no cuBLASLt data type for int32"):
        blas.matmul(Dev((2, 3), "int32"), Dev((3, 4), "int32"))
    refuses("must be a CuPy array", np.zeros((2, 3), np.float32), Dev((3, 4)))


def test_a_valid_call_reaches_the_handle_which_needs_a_gpu():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount():
            pytest.skip("a GPU is visible: the handle is created")
    except cupy.cuda.runtime.CUDARuntimeError:
        pass
    with pytest.raises(blas.NotInitialized, match="cublasLtCreate"):
        blas.matmul(Dev((2, 3)), Dev((3, 4)), bias=Dev((4,)))
    bf = L.backend.bfloat16                  # CuPy 14's bfloat16 arrays: R_16BF, no dtype=
    with pytest.raises(blas.NotInitialized, match="cublasLtCreate"):
        blas.matmul(Dev((2, 3), bf), Dev((3, 4), bf), bias=Dev((4,), bf))

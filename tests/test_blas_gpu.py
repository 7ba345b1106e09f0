"""cudnnlite.blas on the GPU: cublasLtMatmul against NumPy float64 for every view, batch form,
dtype, bias and beta the layers use; transposed views are read in place; a product captured in a
CUDA graph replays what eager computes."""
import itertools

import numpy as np
import pytest

from cudnnlite import blas

pytestmark = pytest.mark.gpu

# float32 without TF32: error grows like sqrt(K) rounding steps of 2^-24; fp16 data with fp32
# accumulation: the output's own rounding (2^-11) dominates
TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12),
       "float16": dict(rtol=2e-3, atol=2e-3)}


def views(rng, shape):
    *batch, R, C = shape
    yield rng.standard_normal(shape)
    yield np.swapaxes(rng.standard_normal((*batch, C, R)), -1, -2)
    yield rng.standard_normal((*batch, R, C + 3))[..., :C]


def device_view(cp, host, dtype):
    """The same view on the device: the base array copied over, then the same slicing."""
    base = host.base if host.base is not None else host
    while base.base is not None:
        base = base.base
    dev = cp.asarray(np.ascontiguousarray(base).astype(dtype))
    offset = (host.__array_interface__["data"][0] - base.__array_interface__["data"][0]) \
        // base.itemsize
    item = np.dtype(dtype).itemsize
    strides = tuple(s // host.itemsize * item for s in host.strides)
    return cp.lib.stride_tricks.as_strided(dev.ravel()[offset:], host.shape, strides)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("M,K,N,ba,bb", [(5, 7, 3, (), ()), (1, 64, 33, (), ()),
                                         (17, 9, 1, (4,), (4,)), (3, 5, 6, (4,), ()),
                                         (2, 8, 3, (), (5,)), (3, 4, 5, (1,), (3,))])
def test_matmul_equals_float64_numpy_for_every_view(dtype, M, K, N, ba, bb):
    import cupy as cp
    rng = np.random.default_rng(M + K + N)
    for a, b in itertools.product(views(rng, (*ba, M, K)), views(rng, (*bb, K, N))):
        da, db = device_view(cp, a, dtype), device_view(cp, b, dtype)
        ref = a.astype(dtype).astype(np.float64) @ b.astype(dtype).astype(np.float64)
        np.testing.assert_allclose(blas.matmul(da, db).get().astype(np.float64), ref, **TOL[dtype])


def test_a_transposed_view_is_not_copied():
    import cupy as cp
    w = cp.asarray(np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32))
    x = cp.ones((3, 4), np.float32)
    before = cp.get_default_memory_pool().used_bytes()
    y = blas.matmul(x, w.T)
    assert cp.get_default_memory_pool().used_bytes() - before <= y.nbytes + 512
    np.testing.assert_allclose(y.get(), np.ones((3, 4)) @ w.get().T.astype(np.float64), rtol=1e-6)


def test_bias_alpha_and_beta():
    import cupy as cp
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4, 3, 5)), rng.standard_normal((5, 6))
    bias, old = rng.standard_normal(6), rng.standard_normal((4, 3, 6))
    out = cp.asarray(old.astype(np.float64))
    y = blas.matmul(cp.asarray(a), cp.asarray(b), out, bias=cp.asarray(bias), alpha=0.5, beta=2.0)
    assert y is out
    np.testing.assert_allclose(y.get(), 0.5 * (a @ b) + 2.0 * old + bias, rtol=1e-12)


def test_a_view_no_layout_states_is_copied_and_computed():
    import cupy as cp
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 10))
    b = rng.standard_normal((5, 3))
    y = blas.matmul(cp.asarray(a)[:, ::2], cp.asarray(b))
    np.testing.assert_allclose(y.get(), a[:, ::2] @ b, rtol=1e-12)


def test_empty_inner_dimension_gives_bias_only():
    import cupy as cp
    y = blas.matmul(cp.ones((3, 0), np.float32), cp.ones((0, 2), np.float32),
                    bias=cp.asarray(np.array([1.5, -2], np.float32)))
    np.testing.assert_array_equal(y.get(), np.tile([1.5, -2], (3, 1)))


def test_tf32_setting_changes_the_compute_type_of_the_plan():
    import cupy as cp
    a = cp.ones((64, 64), np.float32)
    with blas.using(allow_tf32=True):
        blas.matmul(a, a)
    keys = [k for k in blas._plans._entries if k[0].m == 64 and k[0].n == 64 and k[0].k == 64
            and k[0].data_type == blas.CudaDataType.R_32F]
    assert {k[0].compute for k in keys} >= {blas.ComputeType.COMPUTE_32F_FAST_TF32}


@pytest.mark.parametrize("setting", [False, True])
def test_allow_tf32_for_one_call_overrides_the_setting(setting):
    """matmul(allow_tf32=...) decides for that call (the layers' whole-input convolutions follow
    cuDNN's TF32 setting, not cuBLAS's): its plan's compute type says so, allow_tf32=False
    stays within float32's rounding of float64, and no argument takes the setting's plan."""
    import cupy as cp
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((96, 512)), rng.standard_normal((512, 80))
    want = a @ b
    da, db = cp.asarray(a, np.float32), cp.asarray(b, np.float32)
    f32 = blas.describe(da, db, blas.CudaDataType.R_32F, allow_tf32=False).compute
    fast = blas.describe(da, db, blas.CudaDataType.R_32F, allow_tf32=True).compute
    assert (f32, fast) == (blas.ComputeType.COMPUTE_32F, blas.ComputeType.COMPUTE_32F_FAST_TF32)
    with blas.using(allow_tf32=setting):
        exact = blas.matmul(da, db, allow_tf32=False).get()
        tf32 = blas.matmul(da, db, allow_tf32=True).get()
        default = blas.matmul(da, db).get()
    keys = {k[0].compute for k in blas._plans._entries
            if (k[0].m, k[0].n, k[0].k) == (80, 96, 512)}
    assert keys >= {f32, fast}
    assert np.abs(exact - want).max() < 1e-5 * np.abs(want).max()
    np.testing.assert_array_equal(default, tf32 if setting else exact)


def test_a_captured_matmul_replays_eager_results_and_keeps_its_workspace():
    import cupy as cp
    import cudnnlite
    rng = np.random.default_rng(4)
    a = cp.asarray(rng.standard_normal((256, 512)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((512, 384)).astype(np.float32))
    bias = cp.asarray(rng.standard_normal(384).astype(np.float32))
    out = cp.empty((256, 384), np.float32)
    blas.matmul(a, b, out, bias=bias)                  # eager: plan and workspace made
    expected = out.get()
    out[...] = 0
    s = cp.cuda.Stream(non_blocking=True)
    with s, cudnnlite.capture_scope() as kept:
        s.begin_capture()
        blas.matmul(a, b, out, bias=bias)
        graph = s.end_capture()
    graph.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out.get(), expected)
    assert all(k is blas.get_handle().workspace.buffer for k in kept)


def test_matmul_on_another_stream_follows_cupy_current_stream():
    import cupy as cp
    a = cp.ones((128, 128), np.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        y = blas.matmul(a, a)
    s.synchronize()
    assert float(y[0, 0].get()) == 128.0


def test_a_bias_no_epilogue_algorithm_takes_is_added_after_the_product(monkeypatch):
    import cupy as cp
    from cudnnlite._cache import LRU
    real, asked = blas.Plan, []

    def fussy(problem, handle, limit):
        asked.append(problem.epilogue)
        if problem.epilogue != blas.Epilogue.DEFAULT:
            raise blas.NotSupported("cublasLtMatmulAlgoGetHeuristic", {}, "no algorithm (test)",
                                    blas.Status.NOT_SUPPORTED)
        return real(problem, handle, limit)
    monkeypatch.setattr(blas, "Plan", fussy)
    monkeypatch.setattr(blas, "_plans", LRU(8))
    monkeypatch.setattr(blas, "_no_epilogue", set())
    rng = np.random.default_rng(5)
    a, b, bias = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    for _ in range(2):
        y = blas.matmul(cp.asarray(a), cp.asarray(b), bias=cp.asarray(bias))
        np.testing.assert_allclose(y.get(), a @ b + bias, rtol=1e-12)
    assert asked == [blas.Epilogue.BIAS, blas.Epilogue.DEFAULT]     # asked once each

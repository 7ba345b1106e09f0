"""cuDNN batch norm against NumPy float64 and torch.nn.functional.batch_norm (running statistics
included); activations and tensor arithmetic against NumPy."""
import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import activation, batchnorm
from reference import TOLERANCE, batch_norm_backward, batch_norm_train, rel_err

pytestmark = pytest.mark.gpu

SHAPES = [(8, 4, 5, 5), (16, 3, 7), (4, 6, 2, 3, 4), (128, 64, 4, 4)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
def test_spatial_training_forward_backward_and_running_stats(shape, dtype):
    import cupy
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    C = shape[1]
    x = rng.standard_normal(shape) * 3 + 1
    gamma, beta = rng.standard_normal(C), rng.standard_normal(C)
    rm, rv = rng.standard_normal(C), rng.random(C) + 0.5
    gy = rng.standard_normal(shape)
    axes = (0,) + tuple(range(2, len(shape)))
    bshape = (1, C) + (1,) * (len(shape) - 2)
    eps = 1e-5

    d = {k: cupy.asarray(v, dtype) for k, v in dict(x=x, gamma=gamma, beta=beta, rm=rm, rv=rv,
                                                      gy=gy).items()}
    y, smean, sinvstd = batchnorm.forward_training(d["x"], d["gamma"], d["beta"], d["rm"],
                                                   d["rv"], momentum=0.1, eps=eps)
    gx, ggamma, gbeta = batchnorm.backward(d["x"], d["gy"], d["gamma"], smean, sinvstd, eps=eps)

    ref_y, mean, invstd, _, _ = batch_norm_train(x, gamma.reshape(bshape), beta.reshape(bshape),
                                                 eps, axes)
    ref_gx, ref_gg, ref_gb = batch_norm_backward(x, gy, gamma.reshape(bshape), eps, axes)
    tol = TOLERANCE[dtype] * 10
    assert rel_err(y.get(), ref_y) < tol
    assert rel_err(smean.get(), mean.ravel()) < tol
    assert rel_err(sinvstd.get(), invstd.ravel()) < tol
    assert rel_err(gx.get(), ref_gx) < tol
    assert rel_err(ggamma.get(), ref_gg.ravel()) < tol
    assert rel_err(gbeta.get(), ref_gb.ravel()) < tol

    # running statistics exactly as torch updates them (momentum 0.1, unbiased variance)
    t_rm, t_rv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    torch.nn.functional.batch_norm(torch.from_numpy(x), t_rm, t_rv, torch.from_numpy(gamma),
                                   torch.from_numpy(beta), training=True, momentum=0.1, eps=eps)
    assert rel_err(d["rm"].get(), t_rm.numpy()) < tol
    assert rel_err(d["rv"].get(), t_rv.numpy()) < tol


def test_inference_matches_torch():
    import cupy
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5, 4, 4))
    g, b, m, v = rng.standard_normal(5), rng.standard_normal(5), rng.standard_normal(5), \
        rng.random(5) + 0.1
    ref = torch.nn.functional.batch_norm(*(torch.from_numpy(a) for a in (x, m, v, g, b)),
                                         training=False, eps=1e-3).numpy()
    y = batchnorm.forward_inference(*(cupy.asarray(a, np.float32) for a in (x, g, b, m, v)),
                                    eps=1e-3)
    assert rel_err(y.get(), ref) < TOLERANCE["float32"] * 10


def test_per_activation_mode_is_batchnorm1d_over_features():
    import cupy
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((32, 3, 4, 5))
    F = 3 * 4 * 5
    g, b = rng.standard_normal(F), rng.standard_normal(F)
    rm, rv = np.zeros(F), np.ones(F)
    xd = cupy.asarray(x, np.float32)
    gd, bd, rmd, rvd = (cupy.asarray(a, np.float32) for a in (g, b, rm, rv))
    y, _, _ = batchnorm.forward_training(xd, gd, bd, rmd, rvd, mode=cl.BatchNormMode.PER_ACTIVATION)
    t_rm, t_rv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    ref = torch.nn.functional.batch_norm(torch.from_numpy(x.reshape(32, F)), t_rm, t_rv,
                                         torch.from_numpy(g), torch.from_numpy(b), training=True)
    assert rel_err(y.get().reshape(32, F), ref.numpy()) < 1e-4
    assert rel_err(rvd.get(), t_rv.numpy()) < 1e-5


def test_nhwc_layout_and_half_data():
    import cupy
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 8, 6, 6))
    g, b = rng.standard_normal(8), rng.standard_normal(8)
    xh = cupy.asarray(np.ascontiguousarray(np.moveaxis(x, 1, -1)), np.float16)
    y, _, _ = batchnorm.forward_training(xh, cupy.asarray(g, np.float32),
                                         cupy.asarray(b, np.float32), layout="NHWC")
    x16 = x.astype(np.float16).astype(np.float64)
    ref, *_ = batch_norm_train(x16, g.reshape(1, 8, 1, 1), b.reshape(1, 8, 1, 1), 1e-5, (0, 2, 3))
    assert rel_err(np.moveaxis(y.get().astype(np.float64), -1, 1), ref) < TOLERANCE["float16"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(16, 8, 6, 6), (128, 64, 32, 32), (128, 512, 4, 4)])
def test_ex_calls_in_persistent_mode_on_nhwc_data(shape, dtype):
    """forward_training_ex / backward_ex (SPATIAL_PERSISTENT, NHWC: the layers' channels-last
    training path) against NumPy float64 on the rounded input: y, saved statistics, running
    statistics as torch updates them, gx, ggamma, gbeta."""
    import cupy
    from layers.backend import bfloat16
    rng = np.random.default_rng(4)
    N, C, H, W = shape
    x = rng.standard_normal(shape) * 2 + 0.5
    gy = rng.standard_normal(shape)
    gamma, beta = rng.standard_normal(C), rng.standard_normal(C)
    rm, rv = rng.standard_normal(C), rng.random(C) + 0.5
    dt = np.dtype(bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    nhwc = lambda a: cupy.asarray(np.ascontiguousarray(np.moveaxis(a, 1, -1)).astype(dt))  # noqa
    xd, gyd = nhwc(x), nhwc(gy)
    x, gy = (np.moveaxis(a.get().astype(np.float64), -1, 1) for a in (xd, gyd))   # as rounded
    f32 = lambda a: cupy.asarray(a, np.float32)                                    # noqa: E731
    gd, bd, rmd, rvd = f32(gamma), f32(beta), f32(rm), f32(rv)
    y, smean, sinvstd, reserve = batchnorm.forward_training_ex(xd, gd, bd, rmd, rvd,
                                                               momentum=0.1, eps=1e-5)
    gx, gg, gb = batchnorm.backward_ex(xd, gyd, gd, bd, smean, sinvstd, reserve, eps=1e-5)
    axes, bshape = (0, 2, 3), (1, C, 1, 1)
    ref_y, mean, invstd, var, uvar = batch_norm_train(x, gamma.reshape(bshape),
                                                      beta.reshape(bshape), 1e-5, axes)
    ref_gx, ref_gg, ref_gb = batch_norm_backward(x, gy, gamma.reshape(bshape), 1e-5, axes)
    back = lambda a: np.moveaxis(a.get().astype(np.float64), -1, 1)                # noqa: E731
    # the outputs round to the data type once; statistics and parameter gradients are float32
    tol = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 2e-2}[dtype]
    assert rel_err(back(y), ref_y) < tol
    assert rel_err(back(gx), ref_gx) < tol
    for got, want in ((smean, mean), (sinvstd, invstd), (gg, ref_gg), (gb, ref_gb),
                      (rmd, 0.9 * rm + 0.1 * mean.ravel()), (rvd, 0.9 * rv + 0.1 * uvar.ravel())):
        assert rel_err(got.get(), want.ravel()) < 1e-5


def test_bad_parameter_shape_is_a_clear_error():
    import cupy
    x = cupy.zeros((4, 3, 2, 2), np.float32)
    p = cupy.ones(4, np.float32)
    with pytest.raises(cl.BadParamShapeMismatch, match="cudnnBatchNormalizationForwardTraining"):
        batchnorm.forward_training(x, p, p)


ACTIVATIONS = [  # mode, coef, f(x), f'(x)
    (cl.ActivationMode.RELU, 0.0, lambda x: np.maximum(x, 0), lambda x: (x > 0) * 1.0),
    (cl.ActivationMode.SIGMOID, 0.0, lambda x: 1 / (1 + np.exp(-x)),
     lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
    (cl.ActivationMode.TANH, 0.0, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    (cl.ActivationMode.ELU, 0.7, lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)),
     lambda x: np.where(x > 0, 1.0, 0.7 * np.exp(x))),
    (cl.ActivationMode.CLIPPED_RELU, 1.5, lambda x: np.clip(x, 0, 1.5),
     lambda x: ((x > 0) & (x < 1.5)) * 1.0),
]


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (7,), (2, 3, 4, 5, 6)])
@pytest.mark.parametrize("mode,coef,f,df", ACTIVATIONS, ids=lambda a: getattr(a, "name", ""))
def test_activation_forward_backward(mode, coef, f, df, shape):
    import cupy
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape) * 2
    x[np.abs(x) < 1e-3] = 0.5                      # keep clear of the kinks
    x[np.abs(x - 1.5) < 1e-3] = 0.5
    gy = rng.standard_normal(shape)
    xd, gyd = cupy.asarray(x), cupy.asarray(gy)
    y = activation.forward(xd, mode, coef)
    gx = activation.backward(y, gyd, xd, mode, coef)
    assert rel_err(y.get(), f(x)) < 1e-12
    assert rel_err(gx.get(), gy * df(x)) < 1e-12


def test_add_tensor_broadcasts_bias_and_scale_tensor():
    import cupy
    rng = np.random.default_rng(5)
    c = rng.standard_normal((4, 3, 5, 5))
    b = rng.standard_normal((1, 3, 1, 1))
    cd = cupy.asarray(c)
    activation.add_tensor(cupy.asarray(b), cd, alpha=2.0, beta=0.5)
    assert rel_err(cd.get(), 0.5 * c + 2.0 * b) < 1e-12
    activation.scale_tensor(cd, -3.0)
    assert rel_err(cd.get(), -3.0 * (0.5 * c + 2.0 * b)) < 1e-12

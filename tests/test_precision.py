"""Half precision and dtype rules, on the NumPy path (and the GPU path where marked): sums, means
and losses accumulate in float32; counts past float16's 65504 stay finite; Adam's eps survives
float16; batch norm keeps float32 parameters; a float64 constant does not promote a float32
graph; a gradient always has its tensor's dtype. References are float64 NumPy."""
import numpy as np
import pytest

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu)]
F16 = np.finfo(np.float16)


def f16_close(got, want):
    """got (float16) is want (float64) rounded to float16, give or take one float16 ulp."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    np.testing.assert_array_less(np.abs(got - want), ulp + 1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_gradient_over_more_than_65504_elements(device):
    n = 70_000                                   # float16(70000) is inf: gy / n would be 0
    x = L.tensor(np.ones(n, np.float16), device=device, requires_grad=True)
    y = x.mean()
    assert y.dtype == np.float16 and y.item() == 1.0
    y.backward()
    assert x.grad.dtype == np.float16
    f16_close(x.grad.numpy(), np.full(n, 1 / n))


@pytest.mark.parametrize("device", DEVICES)
def test_float16_sum_accumulates_in_float32(device):
    a = (np.arange(20_000) % 7 / 7 + 0.1).astype(np.float16)
    got = L.tensor(a, device=device).sum().numpy()
    assert got.dtype == np.float16
    f16_close(got, a.astype(np.float64).sum())     # float16 accumulation is off by hundreds here


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss", ["mse", "l1", "bce_logits"])
def test_float16_loss_and_its_gradient_over_many_elements(device, loss):
    rng = np.random.default_rng(0)
    n = 80_000
    a64 = rng.standard_normal(n)
    b64 = rng.uniform(0, 1, n) if loss == "bce_logits" else rng.standard_normal(n)
    a, b = a64.astype(np.float16), b64.astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    fn = {"mse": F.mse_loss, "l1": F.l1_loss, "bce_logits": F.binary_cross_entropy_with_logits}
    x = L.tensor(a, device=device, requires_grad=True)
    y = fn[loss](x, L.tensor(b, device=device))
    y.backward()
    if loss == "mse":
        ref, gref = ((a64 - b64) ** 2).mean(), 2 * (a64 - b64) / n
    elif loss == "l1":
        ref, gref = np.abs(a64 - b64).mean(), np.sign(a64 - b64) / n
    else:
        ref = (np.maximum(a64, 0) - a64 * b64 + np.log1p(np.exp(-np.abs(a64)))).mean()
        gref = (1 / (1 + np.exp(-a64)) - b64) / n
    assert y.dtype == np.float16 and x.grad.dtype == np.float16
    f16_close(y.numpy(), ref)
    assert np.count_nonzero(x.grad.numpy()) > 0.9 * n   # not flushed to 0 by an inf count
    # each element's gradient is ~1e-5: float16 subnormals there hold 3 to 4 significant digits
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), gref, rtol=2e-3,
                               atol=2 * F16.smallest_subnormal)


def _adam_reference(w, grads, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.Adam's rule computed in float64 from the float16 values the engine stores
    (parameter, m, v), each stored back rounded to float16 after the step."""
    r = lambda a: a.astype(np.float16).astype(np.float64)   # noqa: E731
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        m = m + (1 - b1) * (g - m)
        v = v * b2 + (1 - b2) * g * g
        w = r(w - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps))
        m, v = r(m), r(v)
    return w


@pytest.mark.parametrize("device", DEVICES)
def test_adam_on_float16_parameters_with_zero_gradients(device):
    w0 = np.array([1.0, -2.0, 0.5, 3.0], np.float16)
    grads = [np.array([0.0, 0.25, 0.0, -1.0], np.float16), np.array([0.0, 0.5, 1e-3, 0.0],
                                                                      np.float16)]
    p = L.nn.Parameter(L.tensor(w0.copy(), device=device))
    opt = L.optim.Adam([p], lr=1e-3)
    for g in grads:
        p.grad = L.tensor(g.copy(), device=device)
        opt.step()
    got = p.numpy()
    assert got.dtype == np.float16 and np.isfinite(got).all()     # eps is 0 in float16: 0/0
    f16_close(got, _adam_reference(w0.astype(np.float64), [g.astype(np.float64) for g in grads]))


def test_to_float16_keeps_batch_norm_parameters_float32():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(2, 2))
    m.to_dtype(np.float16)
    sd = m.state_dict()
    assert sd["0.weight"].dtype == np.float16 and sd["2.bias"].dtype == np.float16
    for k in ("weight", "bias", "running_mean", "running_var"):
        assert sd[f"1.{k}"].dtype == np.float32, k
    assert sd["1.num_batches_tracked"].dtype == np.int64
    m.to_dtype(np.float64)
    assert m.state_dict()["1.weight"].dtype == np.float64


@pytest.mark.parametrize("device", DEVICES)
def test_float16_batch_norm_against_float64(device):
    rng = np.random.default_rng(1)
    x16 = (rng.standard_normal((8, 3, 5, 5)) * 2 + 1).astype(np.float16)
    bn = nn.BatchNorm2d(3)
    bn.weight.data[...] = rng.uniform(0.5, 1.5, 3).astype(np.float32)
    bn.to(device).to_dtype(np.float16)
    x = L.tensor(x16, device=device, requires_grad=True)
    y = bn(x)
    gy = rng.standard_normal(y.shape).astype(np.float16)
    (y * L.tensor(gy, device=device)).sum().backward()
    x64, g64, w = x16.astype(np.float64), gy.astype(np.float64), bn.weight.numpy()[None, :, None, None]
    mean, var = x64.mean(axis=(0, 2, 3), keepdims=True), x64.var(axis=(0, 2, 3), keepdims=True)
    xhat = (x64 - mean) / np.sqrt(var + 1e-5)
    assert y.dtype == np.float16 and x.grad.dtype == np.float16
    assert bn.weight.grad.dtype == np.float32 and bn.running_mean.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), xhat * w, atol=4e-3, rtol=2e-3)
    n = x64.size // 3
    gx = w / np.sqrt(var + 1e-5) / n * (n * g64 - g64.sum(axis=(0, 2, 3), keepdims=True)
                                        - xhat * (g64 * xhat).sum(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), gx, atol=4e-3, rtol=5e-3)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean.ravel(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("constant", [np.float64(2.5), np.full(3, 2.5), np.full((), 2.5)],
                         ids=["np.float64", "float64 array", "0-d float64"])
def test_a_float64_constant_does_not_promote_a_float32_graph(device, constant):
    x = L.tensor(np.array([1.0, -2.0, 3.0], np.float32), device=device, requires_grad=True)
    for y in (x * constant, constant * x, x + constant, x - constant, x / constant):
        assert y.dtype == np.float32
    (x * constant).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [2.5, 2.5, 2.5])


def test_gradient_takes_its_tensor_dtype_when_two_tensors_promote():
    """float32 tensor times float64 tensor is float64 (as torch); the float32 input's gradient is
    float32 all the same."""
    a = L.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    b = L.tensor(np.array([3.0, 4.0], np.float64), requires_grad=True)
    y = a * b
    assert y.dtype == np.float64
    y.sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0])


def test_batch_norm_parameters_of_the_wrong_dtype_are_a_clear_error():
    x = L.tensor(np.ones((4, 3, 2, 2), np.float16))
    w = L.tensor(np.ones(3, np.float16))
    with pytest.raises(TypeError, match=r"weight is float16, but float16 input takes float32"):
        F.batch_norm(x, None, None, w, None, training=True)

"""F.interpolate / nn.Upsample against torch's CPU kernels: every mode here, sizes and scale
factors (up, down, uneven, recompute_scale_factor), align_corners; values and gradients on the
CPU, the GPU and the host GPU path, float64 to rounding and float32 to float32's. Then
nn.utils.clip_grad_value_, and the refusals (torch's and what is not done here)."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)

CASES_2D = [
    dict(scale_factor=2),                                  # (nearest's x2 shortcut)
    dict(scale_factor=3),
    dict(size=(4, 9)),
    dict(size=(11, 3)),
    dict(scale_factor=(1.7, 0.6)),                         # (1 / scale_factor: torch's scale)
    dict(scale_factor=(1.7, 0.6), recompute_scale_factor=True),     # (in / out instead)
    dict(scale_factor=3, mode="nearest-exact"),
    dict(size=(3, 4), mode="nearest-exact"),
    dict(scale_factor=2, mode="bilinear"),
    dict(size=(11, 3), mode="bilinear"),
    dict(scale_factor=(1.7, 0.6), mode="bilinear"),
    dict(size=(4, 9), mode="bilinear", align_corners=True),
    dict(size=(1, 1), mode="bilinear", align_corners=True),
    dict(scale_factor=0.5, mode="bilinear", align_corners=False),
    dict(scale_factor=(1.5, 1.02), mode="bilinear"),        # (W keeps its size: copied)
    dict(scale_factor=(1.0, 1.02), mode="nearest-exact"),   # (no shortcut: not a copy)
    dict(scale_factor=2.1),                                 # (2-d nearest: its shortcuts)
    dict(scale_factor=1.04),
]
CASES_1D = [
    dict(scale_factor=2.5, mode="linear"),
    dict(size=3, mode="linear", align_corners=True),
    dict(size=8),
    dict(scale_factor=0.5, mode="nearest-exact"),
    dict(scale_factor=1.1, mode="linear"),                  # (the same size: copied)
    dict(scale_factor=1.02, mode="nearest-exact"),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(CASES_2D) + len(CASES_1D)))
@pytest.mark.parametrize("device", DEVICES)
def test_interpolate_gives_torchs_values_and_gradients(where, case, dtype):
    kwargs = (CASES_2D + CASES_1D)[case]
    shape = (2, 3, 5, 7) if case < len(CASES_2D) else (2, 3, 30)
    rng = np.random.default_rng(case)
    x = rng.standard_normal(shape).astype(dtype)
    ours = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    y = F.interpolate(ours, **kwargs)
    ty = torch.nn.functional.interpolate(theirs, **kwargs)
    assert y.shape == tuple(ty.shape) and y.dtype == dtype
    g = rng.standard_normal(ty.shape).astype(dtype)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    # float64: rounding; float32: the same neighbours and weights as torch's (computed in float32
    # as its kernel does), the sums in another order
    tol = 1e-14 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=tol, atol=4 * tol)


@pytest.mark.parametrize("scale_factor", [1.04, 2.1])
def test_1d_nearest_picks_torchs_sources_and_its_gradient_sums_them(scale_factor):
    """torch's 1-d nearest forward takes floor(i / scale) where its backward takes the 2-d
    kernel's shortcuts (the same size: itself; twice: i >> 1), so its gradient is not its
    forward's; this one's is (each source's picks summed)."""
    x = L.tensor(np.arange(5.0).reshape(1, 1, 5), requires_grad=True)
    y = F.interpolate(x, scale_factor=scale_factor)
    expected = torch.nn.functional.interpolate(torch.arange(5.0).reshape(1, 1, 5),
                                               scale_factor=scale_factor)
    np.testing.assert_array_equal(y.numpy(), expected.numpy())
    y.sum().backward()
    picks = expected.numpy().ravel().astype(int)          # (the values are the sources)
    np.testing.assert_array_equal(x.grad.numpy().ravel(), np.bincount(picks, minlength=5))


@pytest.mark.parametrize("dtype", [np.float16, L.bfloat16])
def test_half_linear_modes_compute_in_float32_and_round_once(dtype):
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 6)).astype(np.float32)
    y = F.interpolate(L.tensor(x.astype(dtype)), scale_factor=1.5, mode="bilinear")
    exact = torch.nn.functional.interpolate(torch.tensor(x.astype(dtype).astype(np.float32)),
                                            scale_factor=1.5, mode="bilinear").numpy()
    assert y.dtype == dtype
    # one rounding of the float32 result: within one unit in the last place of torch's float32
    # result rounded (the two float32 results may differ in their last bit, which can decide it;
    # a rounding per pass, as the weights in half, erred by up to 1.6 units)
    ulp = 2.0 ** -10 if dtype == np.float16 else 2.0 ** -7
    np.testing.assert_allclose(y.numpy().astype(np.float32), exact.astype(dtype).astype(np.float32),
                               rtol=ulp, atol=ulp * 2.0 ** -14)


def test_integer_data_takes_the_nearest_modes():
    x = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    np.testing.assert_array_equal(F.interpolate(L.tensor(x), scale_factor=2).numpy(),
                                  torch.nn.functional.interpolate(torch.tensor(x),
                                                                  scale_factor=2).numpy())
    with pytest.raises(TypeError, match="floating dtype"):
        F.interpolate(L.tensor(x), scale_factor=2, mode="bilinear")


@pytest.mark.parametrize("device", DEVICES)
def test_upsample_modules_are_torchs(where):
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4))
    for ours, theirs in ((nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)),
                         (nn.Upsample(size=(5, 7), mode="bilinear", align_corners=False),
                          torch.nn.Upsample(size=(5, 7), mode="bilinear", align_corners=False)),
                         (nn.UpsamplingNearest2d(size=6), torch.nn.UpsamplingNearest2d(size=6)),
                         (nn.UpsamplingBilinear2d(scale_factor=2),
                          torch.nn.UpsamplingBilinear2d(scale_factor=2))):
        np.testing.assert_allclose(ours(L.tensor(x, device=where)).numpy(),
                                   theirs(torch.tensor(x)).numpy(), rtol=1e-14, atol=1e-14)


def test_interpolate_refuses_what_torch_refuses_and_what_is_not_done():
    x = L.zeros(1, 1, 4, 4)
    for kwargs, says in ((dict(), "exactly one of size and scale_factor"),
                         (dict(size=2, scale_factor=2), "exactly one"),
                         (dict(size=2, align_corners=True), "align_corners"),
                         (dict(size=2, mode="bicubic"), "not done here"),
                         (dict(size=2, mode="linear"), "not done here"),     # (4-d: bilinear)
                         (dict(size=(2, 0)), "positive"),
                         (dict(scale_factor=0.1), "empty output"),
                         (dict(size=2, antialias=True), "antialias")):
        with pytest.raises(ValueError, match=says):
            F.interpolate(x, **kwargs)
    with pytest.raises(ValueError, match="3-d .* or 4-d"):
        F.interpolate(L.zeros(1, 1, 2, 2, 2), size=3)
    with pytest.raises(TypeError, match="floating"):
        F.interpolate(L.zeros(1, 1, 4, dtype=L.int64), size=3, mode="linear")


@pytest.mark.parametrize("device", ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"])
def test_clip_grad_value_clamps_every_gradient_as_torchs(where):
    g = np.array([[-3.0, 0.5], [2.0, -0.25]])
    ours = [L.Tensor(L.tensor(np.zeros(2), device=where).data, requires_grad=True),
            L.Tensor(L.tensor(np.zeros((2, 2)), device=where).data, requires_grad=True)]
    theirs = [torch.zeros(2, dtype=torch.float64, requires_grad=True),
              torch.zeros((2, 2), dtype=torch.float64, requires_grad=True)]
    for p, t, grad in zip(ours, theirs, (g[0], g)):
        p.grad, t.grad = L.tensor(grad.copy(), device=where), torch.tensor(grad)
    assert nn.utils.clip_grad_value_(ours, 1.0) is None
    torch.nn.utils.clip_grad_value_(theirs, 1.0)
    for p, t in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
    nn.utils.clip_grad_value_(ours, -0.5)            # (min > max: every gradient -0.5, as torch)
    torch.nn.utils.clip_grad_value_(theirs, -0.5)
    for p, t in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())

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
]
CASES_1D = [
    dict(scale_factor=2.5, mode="linear"),
    dict(size=3, mode="linear", align_corners=True),
    dict(size=8),
    dict(scale_factor=0.5, mode="nearest-exact"),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(CASES_2D) + len(CASES_1D)))
@pytest.mark.parametrize("device", DEVICES)
def test_interpolate_gives_torchs_values_and_gradients(where, case, dtype):
    kwargs = (CASES_2D + CASES_1D)[case]
    shape = (2, 3, 5, 7) if case < len(CASES_2D) else (2, 3, 5)
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
        F.interpolate(L.zeros(1, 1, 4, dtype=L.int64), size=3)


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
    with pytest.raises(ValueError, match="clip_value"):
        nn.utils.clip_grad_value_(ours, -1.0)

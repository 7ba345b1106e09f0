"""Pooling as torch.nn.functional's and torch.nn's: max (ties to the first maximum in the
window, return_indices, dilation, ceil_mode), average (count_include_pad, divisor_override,
ceil_mode), adaptive average and max, their 1-d forms and unbatched inputs; values and float64
gradients against torch on the CPU, on the NumPy path and the GPU path; and torch's refusals."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
TF = torch.nn.functional
R = np.random.default_rng(5)
X = R.standard_normal((2, 3, 9, 8))
TIES = R.integers(0, 3, (2, 2, 7, 6)).astype(np.float64)    # many equal values in a window


def compare(where, ours, theirs, x, *args, rtol=1e-13, **kwargs):
    """Values (and indices) and the input's gradient for a random output gradient."""
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    y, ty = ours(ox, *args, **kwargs), theirs(tx, *args, **kwargs)
    if isinstance(ty, tuple):
        np.testing.assert_array_equal(y[1].numpy(), ty[1].numpy())
        assert y[1].dtype == np.int64
        y, ty = y[0], ty[0]
    assert y.shape == tuple(ty.shape) and y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol)
    g = np.random.default_rng(1).standard_normal(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=rtol)


MAX = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
       dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1), ceil_mode=True),
       dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True),
       dict(kernel_size=(2, 3), stride=1, dilation=2, return_indices=True),
       dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)]   # (9 rows: a window dropped)


@pytest.mark.parametrize("x", [X, TIES, X[0]], ids=["random", "ties", "unbatched"])
@pytest.mark.parametrize("kw", MAX, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("device", DEVICES)
def test_max_pool2d_is_torchs(where, kw, x):
    compare(where, F.max_pool2d, TF.max_pool2d, x, **kw)


AVG = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
       dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
       dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True),
       dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True,
            count_include_pad=False),
       dict(kernel_size=2, divisor_override=3),
       dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)]


@pytest.mark.parametrize("x", [X, X[1]], ids=["batched", "unbatched"])
@pytest.mark.parametrize("kw", AVG, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("device", DEVICES)
def test_avg_pool2d_is_torchs(where, kw, x):
    compare(where, F.avg_pool2d, TF.avg_pool2d, x, **kw)


@pytest.mark.parametrize("size", [1, (4, 3), (9, 8), (5, None), (7, 5)])
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("device", DEVICES)
def test_adaptive_pooling_is_torchs(where, kind, size):
    x = TIES if kind == "max" else X
    compare(where, getattr(F, f"adaptive_{kind}_pool2d"), getattr(TF, f"adaptive_{kind}_pool2d"),
            x, size)


@pytest.mark.parametrize("device", DEVICES)
def test_one_d_pooling_is_torchs(where):
    x = X[:, :, 0]                                           # (2, 3, 8)
    compare(where, F.max_pool1d, TF.max_pool1d, x, 3, 2, 1, 1, True)
    compare(where, F.avg_pool1d, TF.avg_pool1d, x, 3, 2, 1, False, False)
    compare(where, F.adaptive_avg_pool1d, TF.adaptive_avg_pool1d, x, 3)
    compare(where, F.max_pool1d, TF.max_pool1d, x[0], 2)     # unbatched


def test_the_modules_are_torchs():
    x = X.astype(np.float32)
    for ours, theirs in ((nn.MaxPool2d(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1)),
                         (nn.AvgPool2d(2), torch.nn.AvgPool2d(2)),
                         (nn.AdaptiveAvgPool2d((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3))),
                         (nn.AdaptiveMaxPool2d(2), torch.nn.AdaptiveMaxPool2d(2)),
                         (nn.MaxPool1d(2), torch.nn.MaxPool1d(2)),
                         (nn.AvgPool1d(3, 1, 1), torch.nn.AvgPool1d(3, 1, 1)),
                         (nn.AdaptiveAvgPool1d(4), torch.nn.AdaptiveAvgPool1d(4))):
        inp = x[:, :, 0] if "1d" in type(ours).__name__ else x
        np.testing.assert_allclose(ours(L.tensor(inp)).numpy(),
                                   theirs(torch.tensor(inp)).numpy(), rtol=1e-6, atol=1e-7)
        assert not list(ours.state_dict())


def test_refusals_are_torchs():
    x = L.tensor(X)
    for call, error, pattern in (
            (lambda: F.max_pool2d(x, 3, padding=2), ValueError,
             "pad should be at most half of effective kernel size"),
            (lambda: F.max_pool2d(L.tensor(np.zeros((1, 1, 2, 2))), 3), ValueError,
             "output size is too small"),
            (lambda: F.avg_pool2d(L.tensor(np.zeros((4, 4))), 2), ValueError,
             "expected a 3-d .* or 4-d"),
            (lambda: F.max_pool2d(L.tensor(np.zeros((1, 1, 4, 4), np.int64)), 2), TypeError,
             "expected a floating input"),
            (lambda: F.max_pool2d(x, 2, stride=0), ValueError, "must be positive")):
        with pytest.raises(error, match=pattern):
            call()

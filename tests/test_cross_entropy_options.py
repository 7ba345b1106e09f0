"""cross_entropy's class weights and label smoothing, as torch's F.cross_entropy: every reduction,
ignored targets, a spatial (N, C, d) case, loss and gradient against torch on the CPU in float64
(and float32 at its rounding), on the NumPy path and the GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)

RNG = np.random.default_rng(7)
LOGITS = RNG.normal(size=(5, 4)) * 2
TARGET = np.array([3, -100, 0, 1, 3])
WEIGHT = np.array([0.5, 2.0, 1.0, 0.25])
LOGITS_2D = RNG.normal(size=(2, 3, 4))
TARGET_2D = np.array([[0, 2, -100, 1], [2, 2, 0, -100]])
WEIGHT_2D = np.array([1.5, 0.2, 3.0])


def ours(where, logits, target, weight, dtype, **kw):
    x = L.Tensor(L.tensor(logits.astype(dtype), device=where).data, requires_grad=True)
    w = None if weight is None else L.tensor(weight.astype(dtype), device=where)
    loss = F.cross_entropy(x, L.tensor(target, device=where), weight=w, **kw)
    g = np.ones(loss.shape, dtype)
    loss.backward(L.tensor(g, device=where))
    return loss.numpy(), x.grad.numpy()


def torchs(logits, target, weight, dtype, **kw):
    x = torch.tensor(logits.astype(dtype), requires_grad=True)
    w = None if weight is None else torch.tensor(weight.astype(dtype))
    loss = torch.nn.functional.cross_entropy(x, torch.tensor(target), weight=w, **kw)
    loss.backward(torch.ones_like(loss))
    return loss.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("spatial", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_weight_and_label_smoothing_are_torchs(where, reduction, smoothing, weighted, spatial):
    logits, target, weight = ((LOGITS_2D, TARGET_2D, WEIGHT_2D) if spatial else
                              (LOGITS, TARGET, WEIGHT))
    weight = weight if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-6)):
        got, gx = ours(where, logits, target, weight, dtype, **kw)
        want, wx = torchs(logits, target, weight, dtype, **kw)
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(gx, wx, rtol=rtol, atol=rtol)


def test_the_module_keeps_its_weight_as_torchs_does():
    w = np.array([0.5, 2.0, 1.0, 0.25], np.float32)
    m = nn.CrossEntropyLoss(weight=L.tensor(w), ignore_index=3, label_smoothing=0.2)
    tm = torch.nn.CrossEntropyLoss(weight=torch.tensor(w), ignore_index=3, label_smoothing=0.2)
    assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]
    x, target = LOGITS.astype(np.float32), np.array([3, 2, 0, 1, 3])
    got = m(L.tensor(x), L.tensor(target)).item()
    assert got == pytest.approx(tm(torch.tensor(x), torch.tensor(target)).item(), rel=1e-6)


@pytest.mark.parametrize("call,error,pattern", [
    (lambda x, t: F.cross_entropy(x, t, label_smoothing=1.5), ValueError,
     r"label_smoothing must be in \[0, 1\], got 1.5"),
    (lambda x, t: F.cross_entropy(x, t, weight=L.tensor(np.ones(3, np.float32))), ValueError,
     r"weight of shape \(3,\) .* 4 classes"),
    (lambda x, t: F.cross_entropy(x, t, weight=L.tensor(np.ones(4, np.int64))), TypeError,
     r"weight must be floating, got int64"),
    (lambda x, t: F.cross_entropy(x, t, L.tensor(np.ones(4, np.float32)), -100), TypeError,
     r"positional"),
])
def test_bad_options_are_clear_errors(call, error, pattern):
    x, t = L.tensor(LOGITS.astype(np.float32)), L.tensor(TARGET)
    with pytest.raises(error, match=pattern):
        call(x, t)


def _probabilities(shape, seed):
    p = np.random.default_rng(seed).random(shape)
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("spatial", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_class_probability_targets_are_torchs(where, reduction, smoothing, weighted, spatial):
    """Loss and gradients -- to the logits and to the target -- against torch, float64 and
    float32."""
    logits = LOGITS_2D if spatial else LOGITS
    target = _probabilities(logits.shape, 3)
    weight = (WEIGHT_2D if spatial else WEIGHT) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-6)):
        x = L.Tensor(L.tensor(logits.astype(dtype), device=where).data, requires_grad=True)
        t = L.Tensor(L.tensor(target.astype(dtype), device=where).data, requires_grad=True)
        w = None if weight is None else L.tensor(weight.astype(dtype), device=where)
        loss = F.cross_entropy(x, t, weight=w, **kw)
        loss.backward(L.tensor(np.ones(loss.shape, dtype), device=where))
        tx, tt = (torch.tensor(a.astype(dtype), requires_grad=True) for a in (logits, target))
        tw = None if weight is None else torch.tensor(weight.astype(dtype))
        tl = torch.nn.functional.cross_entropy(tx, tt, weight=tw, **kw)
        tl.backward(torch.ones_like(tl))
        assert loss.dtype == dtype and loss.shape == tuple(tl.shape)
        for a, b in ((loss, tl), (x.grad, tx.grad), (t.grad, tt.grad)):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("kind", ["index", "probabilities"])
def test_one_unbatched_item_is_torchs(kind, reduction):
    x = LOGITS[0]
    target = np.array(2) if kind == "index" else _probabilities((1, 4), 5)[0]
    ours_x = L.Tensor(x, requires_grad=True)
    loss = F.cross_entropy(ours_x, L.tensor(target), reduction=reduction)
    loss.backward()
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(target), reduction=reduction)
    tl.backward()
    assert loss.shape == tuple(tl.shape) == ()
    np.testing.assert_allclose(loss.numpy(), tl.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours_x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_class_probability_targets_refuse_what_torch_refuses():
    x = L.tensor(LOGITS)
    with pytest.raises(ValueError, match="ignore_index \\(1\\) is not supported for "
                                         "class-probability"):
        F.cross_entropy(x, L.tensor(_probabilities(LOGITS.shape, 0)), ignore_index=1)
    with pytest.raises(TypeError, match="class probabilities \\(floating, the logits' shape "
                                        "\\(5, 4\\)\\); got float64 of shape \\(5, 3\\)"):
        F.cross_entropy(x, L.tensor(_probabilities((5, 3), 0)))

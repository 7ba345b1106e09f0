"""smooth_l1_loss, huber_loss and kl_div (and their modules) against torch: values and both
inputs' gradients, every reduction, on the CPU, the GPU and the host GPU path; the points where
the two pieces meet (|d| = beta, delta) and a target of 0 included."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 5)) * 2
B = RNG.standard_normal((4, 5))
B[0, :3] = A[0, :3] + [1.0, -1.0, 0.5]        # |d| = 1 (beta, delta) and 0.5 (beta 0.5)
LOGP = np.log(RNG.dirichlet(np.ones(5), 4))
P = RNG.dirichlet(np.ones(5), 4)
P[0, 1] = 0.0                                  # (a target of 0: 0 log 0 is 0, as torch)

CASES = [
    ("smooth_l1_loss", A, B, {}),
    ("smooth_l1_loss", A, B, dict(beta=0.5, reduction="sum")),
    ("smooth_l1_loss", A, B, dict(beta=0.0, reduction="none")),        # (l1_loss)
    ("huber_loss", A, B, {}),
    ("huber_loss", A, B, dict(delta=2.0, reduction="none")),
    ("kl_div", LOGP, P, dict(reduction="batchmean")),
    ("kl_div", LOGP, P, dict(reduction="none")),
    ("kl_div", LOGP, P, dict(reduction="sum")),
    ("kl_div", LOGP, np.log(P + 0.1), dict(reduction="batchmean", log_target=True)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("device", DEVICES)
def test_regression_and_divergence_losses_are_torchs(where, case):
    name, a, b, kwargs = CASES[case]
    x = L.Tensor(L.tensor(a, device=where).data, requires_grad=True)
    y = L.Tensor(L.tensor(b, device=where).data, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    loss = getattr(F, name)(x, y, **kwargs)
    expected = getattr(torch.nn.functional, name)(tx, ty, **kwargs)
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-13, atol=1e-15)
    g = RNG.standard_normal(tuple(expected.shape))
    loss.backward(L.tensor(g, device=where))
    expected.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13, atol=1e-15)
    # the target's gradient; at a target of 0 torch's is NaN (0 / 0 in xlogy's), this one's
    # is that of the target * -logp term alone (the limit of t log t has no finite slope)
    theirs = ty.grad.numpy()
    known = ~np.isnan(theirs)
    assert name == "kl_div" or known.all()
    np.testing.assert_allclose(y.grad.numpy()[known], theirs[known], rtol=1e-13, atol=1e-15)


def test_the_modules_and_refusals():
    a, b = L.tensor(A), L.tensor(B)
    for ours, theirs in ((nn.SmoothL1Loss(beta=0.5), torch.nn.SmoothL1Loss(beta=0.5)),
                         (nn.HuberLoss(reduction="sum", delta=0.5),
                          torch.nn.HuberLoss(reduction="sum", delta=0.5)),
                         (nn.KLDivLoss(reduction="batchmean"),
                          torch.nn.KLDivLoss(reduction="batchmean"))):
        np.testing.assert_allclose(ours(a, b).numpy(), theirs(torch.tensor(A), torch.tensor(B)),
                                   rtol=1e-13)
    with pytest.raises(ValueError, match="beta"):
        F.smooth_l1_loss(a, b, beta=-1.0)
    with pytest.raises(ValueError, match="delta"):
        F.huber_loss(a, b, delta=0.0)
    with pytest.raises(ValueError, match="batchmean"):
        F.kl_div(a, b, reduction="average")
    with pytest.raises(ValueError, match="shape"):
        F.huber_loss(a, L.tensor(B[:2]))
    # batchmean divides by the input's batch size, a target that broadcasts to more rows too
    logp, target = np.log(P[1]), P            # (P[0] holds a 0: an infinite divergence)
    np.testing.assert_allclose(
        F.kl_div(L.tensor(logp), L.tensor(target), reduction="batchmean").numpy(),
        torch.nn.functional.kl_div(torch.tensor(logp), torch.tensor(target),
                                   reduction="batchmean").numpy(), rtol=1e-13)

"""An array changed in place after an op saved it for backward (an optimizer step, zero_(), an
initialiser, load_state_dict, between a forward and its backward) makes that backward refuse to
run, as torch's version counter does, instead of computing the gradient from the new values;
a change to an array no backward reads is fine, as in torch. Each case runs here and in torch
on the CPU: both raise, or neither does and the gradients agree."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)

W0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
X0 = np.array([[1.0, 2.0, -3.0], [0.5, -0.5, 4.0]], np.float32)


class Ours:
    """The few calls the cases make, in this package (on `where`)..."""
    F = F

    def __init__(self, where):
        self.where = where

    def tensor(self, a, grad):
        return L.Tensor(L.tensor(a.copy(), device=self.where).data, requires_grad=grad)

    def zero_(self, t):
        t.zero_()

    def sgd_step(self, p):
        p.grad = L.tensor(np.ones(p.shape, np.float32), device=self.where)
        L.optim.SGD([p], lr=0.5).step()

    def normal_(self, p):
        L.init.normal_(p)

    def linear(self):
        return nn.Linear(3, 2).to(self.where)

    def grad(self, p):
        return p.grad.numpy()


class Torch(Ours):
    """... and in torch."""
    F = torch.nn.functional

    def tensor(self, a, grad):
        return torch.tensor(a.copy(), requires_grad=grad)

    def zero_(self, t):
        with torch.no_grad():
            t.zero_()

    def sgd_step(self, p):
        p.grad = torch.ones_like(p)
        torch.optim.SGD([p], lr=0.5).step()

    def normal_(self, p):
        with torch.no_grad():
            torch.nn.init.normal_(p)

    def linear(self):
        return torch.nn.Linear(3, 2)

    def grad(self, p):
        return p.grad.detach().numpy()


def saved_input_zeroed(api, w, x):          # a product saved x: its gradient would use zeros
    loss = (w * x).sum()
    api.zero_(x)
    return loss


def saved_input_partly_zeroed_through_a_view(api, w, x):     # one row of x: x's version too
    loss = (w * x).sum()
    api.zero_(x[1])
    return loss


def unsaved_input_zeroed(api, w, x):        # a sum saves neither input: no gradient changes
    loss = (w + x).sum()
    api.zero_(w)
    return loss


def saved_output_zeroed(api, w, x):         # a sigmoid saves its output
    s = api.F.sigmoid(w)
    loss = (s * x).sum()
    api.zero_(s)
    return loss


def saved_output_zeroed_through_a_detached_alias(api, w, x):    # (they share one version)
    s = api.F.sigmoid(w)
    loss = s.sum()
    api.zero_(s.detach())
    return loss


def optimizer_step(api, w, x):              # a GAN loop's slip: the weight stepped in between
    x.requires_grad_()                       # (x's gradient reads w.T)
    loss = (x @ w.T).sum()
    api.sgd_step(w)
    return loss


def optimizer_step_where_no_gradient_reads_the_weight(api, w, x):    # x wants no gradient:
    loss = (x @ w.T).sum()                                          # neither keeps w (torch's mm)
    api.sgd_step(w)
    return loss


def initialiser(api, w, x):
    loss = api.F.tanh(x * w).sum()
    api.normal_(x)
    return loss


def change_after_a_fresh_forward(api, w, x):    # the change came first: nothing to refuse
    api.sgd_step(w)
    api.zero_(x)
    return (x @ w.T).sum()


CASES = [saved_input_zeroed, saved_input_partly_zeroed_through_a_view, unsaved_input_zeroed, saved_output_zeroed,
         saved_output_zeroed_through_a_detached_alias, optimizer_step,
         optimizer_step_where_no_gradient_reads_the_weight, initialiser,
         change_after_a_fresh_forward]


def outcome(api, case):
    """case's w gradient, or the RuntimeError's text."""
    w, x = api.tensor(W0, True), api.tensor(X0, False)
    loss = case(api, w, x)
    w.grad = None
    try:
        loss.backward()
    except RuntimeError as e:
        return str(e)
    return api.grad(w)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("device", DEVICES)
def test_a_backward_whose_saved_array_changed_in_place_refuses_as_torchs(where, case):
    ours, theirs = outcome(Ours(where), case), outcome(Torch(where), case)
    assert isinstance(ours, str) == isinstance(theirs, str), (ours, theirs)
    if isinstance(theirs, str):
        assert "was changed in place by" in ours, ours
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_the_error_names_the_op_the_input_and_the_change(where):
    api = Ours(where)
    w, x = api.tensor(W0, True), api.tensor(X0, True)
    loss = (x @ w.T).sum()
    api.sgd_step(w)
    with pytest.raises(RuntimeError, match=r"MatMul.backward: its input 1 \(shape \(3, 2\), "
                                           r"float32\), .* changed in place by SGD.step\(\)"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_load_state_dict_between_forward_and_backward_refuses_as_torchs(where):
    for api in (Ours(where), Torch(where)):
        m = api.linear()
        x = api.tensor(X0, True)          # (x's gradient reads the weight)
        loss = m(x).sum()
        m.load_state_dict({k: np.asarray(v) * 2 for k, v in m.state_dict().items()}
                          if api.F is F else {k: v * 2 for k, v in m.state_dict().items()})
        with pytest.raises(RuntimeError):
            loss.backward()


def test_a_second_backward_after_an_optimizer_step_refuses_as_torchs():
    for api in (Ours("cpu"), Torch("cpu")):
        w, x = api.tensor(W0, True), api.tensor(X0, True)
        loss = (x @ w.T).sum()
        loss.backward(retain_graph=True)
        api.sgd_step(w)
        with pytest.raises(RuntimeError):
            loss.backward()

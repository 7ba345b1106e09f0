"""Tensor hooks and retain_grad, as torch's: a hook sees a tensor's complete gradient of one
backward (the sum over its uses), may replace it, runs on a leaf before its .grad is added to
(so an op adding straight into .grad -- Function.grad_into -- leaves a hooked leaf alone), and
retain_grad keeps a non-leaf's gradient after its hooks. Compared with torch CPU in float64,
on the CPU, the host GPU path and a GPU."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)


def _scenario(lib, leaf, const, log):
    """The same computation in both libraries: hooks on a leaf used three times, on an
    intermediate used twice (doubling its gradient), on the root; retain_grad on two
    intermediates; two backward passes into the same leaf."""
    x = leaf([0.5, -1.0, 2.0, 3.0])
    y = x * x
    y.retain_grad()
    y.register_hook(lambda g: log.append(("y", g.numpy().copy())) or g * 2)
    z = (y * const([1.0, 2.0, 3.0, 4.0])).sum() + y.sum() + (x * 3).sum()
    z.register_hook(lambda g: log.append(("z", g.numpy().copy())) or g * 0.5)
    handle = x.register_hook(lambda g: log.append(("x", g.numpy().copy())))
    w = (x ** 3).sum()
    w.retain_grad()
    z.backward(retain_graph=True)
    handle.remove()                                  # the second backward: no x hook
    z.backward()
    w.backward()
    return {"x.grad": x.grad, "y.grad": y.grad, "w.grad": w.grad}


@pytest.mark.parametrize("device", DEVICES)
def test_hooks_and_retain_grad_are_torchs(where):
    ours_log, theirs_log = [], []
    ours = _scenario(L, lambda v: L.Tensor(L.tensor(np.array(v), device=where).data,
                                           requires_grad=True),
                     lambda v: L.tensor(np.array(v), device=where), ours_log)
    theirs = _scenario(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True),
                       lambda v: torch.tensor(v, dtype=torch.float64), theirs_log)
    assert [k for k, _ in ours_log] == [k for k, _ in theirs_log]
    for (_, a), (_, b) in zip(ours_log, theirs_log):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    for k in theirs:
        np.testing.assert_allclose(ours[k].numpy(), theirs[k].numpy(), rtol=1e-14, err_msg=k)


@pytest.mark.parametrize("device", DEVICES)
def test_a_parameter_hook_sees_each_backward_alone_through_convolutions(where):
    """DCGAN's discriminator pattern: two backward passes into one model; the hook on a
    convolution's weight and a batch norm's bias sees each pass's gradient, not the sum kept in
    .grad, and its replacement is what is added (on the GPU path the ops would otherwise add
    into .grad themselves: grad_into)."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 3, 8, 8)) for _ in range(2)]

    def run(lib, nn_, make):
        m = nn_.Sequential(nn_.Conv2d(3, 4, 3, padding=1, bias=False), nn_.BatchNorm2d(4),
                           nn_.LeakyReLU(0.2), nn_.Conv2d(4, 1, 8))
        return m
    ours = run(L, nn, None).to(np.float64)
    theirs = run(torch, torch.nn, None).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    logs = {"ours": [], "theirs": []}
    for name, model, make in (("ours", ours, lambda a: L.tensor(a, device=where)),
                              ("theirs", theirs, torch.tensor)):
        log = logs[name]
        model[0].weight.register_hook(lambda g, log=log: log.append(g.numpy().copy()) or g * 3)
        model[1].bias.register_hook(lambda g, log=log: log.append(g.numpy().copy()))
        for x in xs:
            model(make(x)).sum().backward()
    for a, b in zip(logs["ours"], logs["theirs"]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert len(logs["ours"]) == len(logs["theirs"]) == 4
    for (k, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=k)


def test_hook_misuse_is_refused_as_torch():
    x = L.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        x.register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        x.retain_grad()
    w = L.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: g[:1])
    with pytest.raises(RuntimeError, match=r"returned a gradient of shape \(1,\)"):
        (w * 2).sum().backward()
    leaf = L.tensor([1.0], requires_grad=True)
    leaf.register_hook(lambda g: g * 2)               # backward() of the leaf itself (torch: 2)
    leaf.backward(L.tensor([1.0]))
    assert leaf.grad.numpy().tolist() == [2.0]
    leaf.retain_grad()                                # a leaf keeps its .grad anyway
    assert not leaf.retains_grad and leaf.is_leaf
    y = leaf * 2
    y.retain_grad()
    assert y.retains_grad


@pytest.mark.parametrize("device", DEVICES)
def test_a_hook_on_a_weight_with_deferred_gradients_sees_their_sum(where):
    """A Linear used three times: its weight's and bias's gradients come as Deferred terms (one
    product over every use, at the end of backward); a hook sees their sum once, as torch's."""
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3)) for _ in range(3)]
    theirs = torch.nn.Linear(3, 2).double()
    ours = nn.Linear(3, 2).to(np.float64)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    logs = []
    for model, make in ((ours, lambda a: L.tensor(a, device=where)), (theirs, torch.tensor)):
        log = []
        logs.append(log)
        model.weight.register_hook(lambda g, log=log: log.append(("w", g.numpy().copy())) or
                                   g * -1)
        model.bias.register_hook(lambda g, log=log: log.append(("b", g.numpy().copy())))
        h = make(np.zeros((2, 2)))
        for x in xs:
            h = F.tanh(model(make(x)) + h) if model is ours else torch.tanh(model(make(x)) + h)
        (h * h).sum().backward()
    assert len(logs[0]) == len(logs[1]) == 2          # (which of the two first: not defined)
    for (k, a), (k2, b) in zip(sorted(logs[0], key=str), sorted(logs[1], key=str)):
        assert k == k2
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-12)

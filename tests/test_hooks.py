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


# ---- autograd.grad ---------------------------------------------------------------------------

def _grad_scenarios(lib, leaf, const):
    """(outputs, inputs, kwargs) cases built the same way in both libraries."""
    x, w = leaf([1.0, -2.0, 0.5]), leaf([3.0, 4.0, -1.0])
    y = x * w
    out = {}
    out["scalar"] = ((y * y).sum(), [x, w], {})
    out["non_leaf_input"] = ((y.tanh() * 3).sum(), [y, x], {"retain_graph": True})
    out["two_outputs"] = ([(y * 2).sum(), (x * x * x).sum()], [x], {})
    out["grad_outputs"] = (y * y, [w], {"grad_outputs": const([1.0, -1.0, 0.5])})
    out["shared"] = ((x + x + w).sum(), [x, w], {})
    return out


@pytest.mark.parametrize("case", ["scalar", "non_leaf_input", "two_outputs", "grad_outputs",
                                  "shared"])
@pytest.mark.parametrize("device", DEVICES)
def test_autograd_grad_is_torchs_and_leaves_grad_alone(where, case):
    ours = _grad_scenarios(L, lambda v: L.Tensor(L.tensor(np.array(v), device=where).data,
                                                 requires_grad=True),
                           lambda v: L.tensor(np.array(v), device=where))[case]
    theirs = _grad_scenarios(torch, lambda v: torch.tensor(v, dtype=torch.float64,
                                                           requires_grad=True),
                             lambda v: torch.tensor(v, dtype=torch.float64))[case]
    got = L.autograd.grad(ours[0], ours[1], **ours[2])
    want = torch.autograd.grad(theirs[0], theirs[1], **theirs[2])
    assert len(got) == len(want)
    for a, b, t in zip(got, want, ours[1]):
        assert a.shape == t.shape and a.dtype == t.dtype and a.device == t.device
        # (tanh' = 1 - tanh^2 cancels at |y| = 8: an absolute float64 rounding there)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-15)
    for t in ours[1]:
        assert t.grad is None                        # nothing accumulated
    if case == "shared":                             # (one array handed to both: copies)
        got[0].data[...] = 0
        assert np.all(got[1].numpy() == want[1].numpy())


def test_autograd_grad_hooks_retain_grad_and_refusals_are_torchs():
    def run(lib, make):
        x, w = make([1.0, 2.0]), make([3.0, 4.0])
        seen = []
        x.register_hook(lambda g: seen.append(("x", g.numpy().copy())) or g * 10)
        y = x * w
        y.retain_grad()
        y.register_hook(lambda g: seen.append(("y", g.numpy().copy())) or g * 2)
        grads = lib.autograd.grad((y * y).sum(), [x, y])
        return [g.numpy() for g in grads], seen, y.grad.numpy(), x.grad, w.grad
    ours = run(L, lambda v: L.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours[0], theirs[0]):      # x after its hook (x10), y before its own (x2)
        np.testing.assert_array_equal(a, b)
    assert [k for k, _ in ours[1]] == [k for k, _ in theirs[1]]
    np.testing.assert_array_equal(ours[2], theirs[2])      # retain_grad: after y's hook
    assert ours[3] is None and ours[4] is None

    x, w = L.tensor([1.0], requires_grad=True), L.tensor([2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not used in the graph"):
        L.autograd.grad((x * x).sum(), [x, w])
    gx, gw = L.autograd.grad((x * x).sum(), [x, w], allow_unused=True)
    assert gw is None and gx.numpy().tolist() == [2.0]
    _, gw = L.autograd.grad((x * x).sum(), [x, w], materialize_grads=True)
    assert gw.numpy().tolist() == [0.0]
    loss = (x * x).sum()
    L.autograd.grad(loss, x)
    with pytest.raises(RuntimeError, match="a second time"):
        L.autograd.grad(loss, x)                       # the graph was freed, as torch's
    with pytest.raises(NotImplementedError, match=r"Prod: no double backward \(create_graph"):
        L.autograd.grad(x.prod(), x, create_graph=True)
    pair = L.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="give grad_outputs"):
        L.autograd.grad(pair * 2, pair)


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_grad_of_parameters_leaves_their_grad_as_it_was(where):
    """Parameters whose .grad exists already (the GPU path's ops would add into it: grad_into)
    and a Linear used three times (Deferred weight terms): autograd.grad returns torch's
    gradients and no .grad changes."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 6))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                 torch.nn.Flatten(), torch.nn.Linear(64, 5)).double()
    ours = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                         nn.Linear(64, 5)).to(np.float64)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    lin, tlin = nn.Linear(5, 5).to(np.float64), torch.nn.Linear(5, 5).double()
    lin.load_state_dict({k: v.numpy() for k, v in tlin.state_dict().items()})
    lin.to(where)
    results = []
    for model, cell, make, lib in ((ours, lin, lambda a: L.tensor(a, device=where), L),
                                   (theirs, tlin, torch.tensor, torch)):
        model(make(x)).sum().backward()               # .grad made
        before = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
        h = model(make(x))
        for _ in range(3):
            h = cell(h).tanh()
        params = [model[0].weight, model[1].weight, model[1].bias, cell.weight, cell.bias]
        grads = lib.autograd.grad((h * h).sum(), params)
        for k, p in model.named_parameters():
            np.testing.assert_array_equal(p.grad.numpy(), before[k], err_msg=k)
        assert cell.weight.grad is None
        results.append([g.numpy() for g in grads])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_autograd_grad_runs_only_what_leads_to_its_inputs_as_torch():
    """Nothing behind a non-leaf input runs (its hooks, retain_grad, the in-place check, the
    freeing: a later backward through it works); the input's gradient is taken after its own
    hooks there; a handle removes its own registration only; a leaf output asked for itself
    gets its hooks. Each case as torch does it (found by a review)."""
    def run(lib, make):
        out = {}
        x = make([1.0, 2.0])
        a = x * 3
        a.retain_grad()
        seen = []
        a.register_hook(lambda g: seen.append(1))
        h = a * 2
        z = (a * a).sum()
        out["h"] = lib.autograd.grad((h * h).sum(), h)[0].tolist()
        out["a.grad"], out["seen"] = a.grad, seen
        z.backward()                                   # (a's op was not freed)
        out["x.grad"] = x.grad.tolist()
        c = make([1.0, 2.0])
        k = (make([1.0, 1.0]) * c) * 2
        with lib.no_grad():
            c.add_(1)                                  # (behind k: never checked)
        out["k"] = lib.autograd.grad((k * k).sum(), k)[0].tolist()
        x2 = make([1.0, 2.0])
        h2 = x2 * 2
        h2.register_hook(lambda g: g * 10)
        out["after_hook"] = lib.autograd.grad((h2 * h2).sum(), h2)[0].tolist()
        x3 = make([1.0, 2.0])
        hook = lambda g: g * 2                         # noqa: E731
        first = x3.register_hook(hook)
        x3.register_hook(hook)
        first.remove()
        (x3 * 1).sum().backward()
        out["one_removed"] = x3.grad.tolist()
        x4 = make([1.0, 2.0])
        x4.register_hook(lambda g: g * 5)
        out["leaf_output"] = lib.autograd.grad(x4, x4, grad_outputs=make([1.0, 1.0]))[0].tolist()
        return out
    ours = run(L, lambda v: L.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    assert ours["a.grad"] is None and theirs["a.grad"] is None
    for k in theirs:
        if k != "a.grad":
            assert ours[k] == theirs[k], k


def test_a_root_gradient_takes_its_tensors_dtype_as_torch():
    """y.backward(a float64 gradient) on a float32 y: its hooks (and the graph) see float32."""
    for lib, make, grad in ((L, lambda: L.tensor([1.0, 2.0], requires_grad=True),
                             L.tensor(np.ones(2))),
                            (torch, lambda: torch.tensor([1.0, 2.0], requires_grad=True),
                             torch.ones(2, dtype=torch.float64))):
        x = make()
        y = x * 1
        seen = []
        y.register_hook(lambda g: seen.append(str(g.dtype)))
        y.backward(grad)
        assert seen[0].endswith("float32") and str(x.grad.dtype).endswith("float32")


def test_module_forward_hooks_are_torchs():
    """register_forward_pre_hook / register_forward_hook: seen arguments and outputs, a
    replaced input and output, removal -- as torch's, on the same weights."""
    def run(nn_, lib, make):
        net = nn_.Sequential(nn_.Linear(3, 4), nn_.Tanh(), nn_.Linear(4, 2))
        seen = []
        h1 = net[0].register_forward_hook(
            lambda m, a, out: seen.append(out.detach().numpy().copy()))
        net[1].register_forward_pre_hook(lambda m, a: (a[0] * 2,))
        net[2].register_forward_hook(lambda m, a, out: out + 1)
        return net, seen, h1
    (ours, seen, h1), (theirs, tseen, th1) = run(nn, L, None), run(torch.nn, torch, None)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)
    for _ in range(2):
        y, ty = ours(L.tensor(x)), theirs(torch.tensor(x))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
        h1.remove()
        th1.remove()
    assert len(seen) == len(tseen) == 1
    np.testing.assert_allclose(seen[0], tseen[0], rtol=1e-6)

"""layers.func.functional_call against torch.func.functional_call: the same module run with the
same given tensors gives torch's output, gradients (through non-leaf weights, to second order
in a MAML step) and buffer updates, and the module is left as it was; tie_weights, strict,
several dicts and the error cases as torch's. float64, on the CPU, a GPU and the host GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]


def _nets(where, seed=0):
    """(ours, torch's): conv, batch norm, ReLU, linear, the same weights, float64."""
    L.manual_seed(seed)
    ours = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 3)).double()
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                 torch.nn.ReLU(), torch.nn.Flatten(),
                                 torch.nn.Linear(4 * 5 * 5, 3)).double()
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    return ours.to(where), theirs


def _x(seed=1):
    return np.random.default_rng(seed).standard_normal((6, 2, 5, 5))


def _state(module):
    return module.state_dict()              # (NumPy copies)


@pytest.mark.parametrize("device", DEVICES)
def test_given_weights_and_buffers_run_and_carry_gradients_as_torchs(where):
    ours, theirs = _nets(where)
    before = _state(ours)
    # given: each parameter scaled by a leaf factor (non-leaf weights), the running statistics
    # as new tensors
    scale = L.tensor(1.5, dtype=L.float64, device=where, requires_grad=True)
    tscale = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    given = {k: v * scale for k, v in ours.named_parameters()}
    tgiven = {k: v * tscale for k, v in theirs.named_parameters()}
    for k, v in ours.named_buffers():
        given[k] = v.detach().clone()
    for k, v in theirs.named_buffers():
        tgiven[k] = v.detach().clone()
    y = L.func.functional_call(ours, given, L.tensor(_x(), device=where))
    ty = torch.func.functional_call(theirs, tgiven, torch.tensor(_x()))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(scale.grad.numpy(), tscale.grad.numpy(), rtol=1e-11)
    for k in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):   # updated: the given
        np.testing.assert_allclose(given[k].numpy(), tgiven[k].numpy(), rtol=1e-12, err_msg=k)
        assert not np.array_equal(given[k].numpy(), before[k]), k
    after = _state(ours)                       # the module as it was, its parameters without .grad
    assert after.keys() == before.keys()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    assert [type(p) for p in ours.parameters()] == [nn.Parameter] * 6
    for (k, p), tp in zip(ours.named_parameters(), theirs.parameters()):   # (made of them)
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-11, atol=1e-13,
                                   err_msg=k)         # (the conv bias before batch norm: 0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_missing_name_keeps_the_modules_own_tensor(where):
    ours, theirs = _nets(where)
    w = L.zeros(3, 4 * 5 * 5, dtype=L.float64, device=where, requires_grad=True)
    tw = torch.zeros(3, 4 * 5 * 5, dtype=torch.float64, requires_grad=True)
    ours.eval()
    theirs.eval()
    y = L.func.functional_call(ours, {"4.weight": w + 0.01}, (L.tensor(_x(), device=where),))
    ty = torch.func.functional_call(theirs, {"4.weight": tw + 0.01}, (torch.tensor(_x()),))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours[0].weight.grad.numpy(), theirs[0].weight.grad.numpy(),
                               rtol=1e-11)          # (the module's own conv weight took part)


@pytest.mark.parametrize("device", DEVICES)
def test_a_maml_step_through_functional_call_is_torchs_to_second_order(where):
    """The inner step's fast weights are w - lr * grad(loss, w, create_graph=True); the outer
    loss through them; the meta-gradient of the module's own weights, as torch's."""
    def meta_grads(lib, net, x, target, device):
        F = L.nn.functional if lib is L else torch.nn.functional
        fc = L.func.functional_call if lib is L else torch.func.functional_call
        names, params = zip(*net.named_parameters())
        loss = F.mse_loss(fc(net, dict(zip(names, params)), (x,)), target)
        grads = lib.autograd.grad(loss, params, create_graph=True)
        fast = {n: p - 0.1 * g for n, p, g in zip(names, params, grads)}
        outer = F.mse_loss(fc(net, fast, (x,)), target)
        return [g.detach().cpu().numpy() if lib is torch else g.numpy()
                for g in lib.autograd.grad(outer, params)]

    ours, theirs = _nets(where)
    target = np.random.default_rng(3).standard_normal((6, 3))
    got = meta_grads(L, ours, L.tensor(_x(), device=where), L.tensor(target, device=where),
                     where)
    want = meta_grads(torch, theirs, torch.tensor(_x()), torch.tensor(target), None)
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-9, atol=1e-12)


def _tied(lib, weight):
    """Two Linears sharing one weight Parameter (a shared embedding's pattern); forward returns
    what each reads as its weight."""
    class Tied(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lib.nn.Linear(2, 2, bias=False)
            self.b = lib.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self):
            return self.a.weight.detach().clone(), self.b.weight.detach().clone()
    net = Tied()
    with lib.no_grad():
        net.a.weight.copy_(lib.tensor(weight))
    return net


@pytest.mark.parametrize("tie_weights", [True, False])
def test_tied_weights_take_a_value_given_for_either_name_as_torchs(tie_weights):
    own, value = np.ones((2, 2), np.float32), np.arange(4.0, dtype=np.float32).reshape(2, 2)
    ours, theirs = _tied(L, own), _tied(torch, own)
    for name in ("a.weight", "b.weight"):
        got = L.func.functional_call(ours, {name: L.tensor(value)}, tie_weights=tie_weights)
        want = torch.func.functional_call(theirs, {name: torch.tensor(value)},
                                          tie_weights=tie_weights)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=name)
        assert sum(np.array_equal(g.numpy(), value) for g in got) == (2 if tie_weights else 1)
    np.testing.assert_array_equal(ours.b.weight.detach().numpy(), own)
    with pytest.raises(ValueError, match=r"functional_call got multiple values for keys "
                                         r"\['a.weight', 'b.weight'\], which are tied"):
        L.func.functional_call(ours, {"a.weight": L.zeros(2, 2), "b.weight": L.ones(2, 2)})
    with pytest.raises(ValueError, match="which are tied"):
        torch.func.functional_call(theirs, {"a.weight": torch.zeros(2, 2),
                                            "b.weight": torch.ones(2, 2)})
    same = L.zeros(2, 2)                      # one value under both names: taken
    got = L.func.functional_call(ours, {"a.weight": same, "b.weight": same})
    assert all(np.array_equal(g.numpy(), np.zeros((2, 2))) for g in got)


def test_strict_several_dicts_and_bad_arguments_are_refused_as_torchs():
    ours, theirs = _nets("cpu")
    x = L.tensor(_x())
    weights = {k: v for k, v in ours.named_parameters()}
    with pytest.raises(RuntimeError) as ours_error:
        L.func.functional_call(ours, {**weights, "zzz": L.ones(1)}, (x,), strict=True)
    with pytest.raises(RuntimeError) as torch_error:
        torch.func.functional_call(theirs, {**dict(theirs.named_parameters()),
                                            "zzz": torch.ones(1)}, (torch.tensor(_x()),),
                                   strict=True)
    assert str(ours_error.value) == str(torch_error.value)
    assert "Missing key(s): '1.num_batches_tracked', '1.running_mean', '1.running_var'." in \
        str(ours_error.value) and "Unexpected key(s): 'zzz'." in str(ours_error.value)
    # several dicts: the union, a repeated name refused
    first = dict(list(weights.items())[:3])
    rest = dict(list(weights.items())[3:])
    ours.eval()
    np.testing.assert_array_equal(L.func.functional_call(ours, (first, rest), x).numpy(),
                                  ours(x).detach().numpy())
    with pytest.raises(ValueError, match=r"\['0.weight'\] appeared in multiple dictionaries"):
        L.func.functional_call(ours, (first, {"0.weight": weights["0.weight"]}), x)
    with pytest.raises(ValueError, match="to be a dict, or a list/tuple of dicts"):
        L.func.functional_call(ours, weights.items(), x)
    with pytest.raises(TypeError, match="'0.weight' must be a Tensor, got ndarray"):
        L.func.functional_call(ours, {"0.weight": np.ones((4, 2, 3, 3))}, x)
    with pytest.raises(AttributeError, match="no submodule 'nine'"):
        L.func.functional_call(ours, {"nine.weight": L.ones(1)}, x)
    with pytest.raises(TypeError, match="attribute '0' of Sequential is not a Tensor"):
        L.func.functional_call(ours, {"0": L.ones(1)}, x)
    assert _state(ours).keys() == {k for k, _ in ours.state_dict().items()}


def test_the_module_is_restored_when_the_call_fails_and_an_extra_name_is_removed():
    ours, _ = _nets("cpu")
    own = dict(ours.named_parameters())
    with pytest.raises(ValueError, match="conv2d: input has 2 channels"):   # (a wrong weight)
        L.func.functional_call(ours, {"0.weight": L.ones(4, 3, 3, 3, dtype=L.float64),
                                      "0.extra": L.ones(1)}, L.tensor(_x()))
    assert dict(ours.named_parameters()) == own
    assert all(a is b for a, b in zip(dict(ours.named_parameters()).values(), own.values()))
    assert not hasattr(ours[0], "extra")
    seen = {}
    ours[3].forward = lambda x: (seen.setdefault("extra", ours[3].extra), x.flatten(1))[1]
    L.func.functional_call(ours, {"3.extra": L.ones(2)}, L.tensor(_x()))
    assert seen["extra"].shape == (2,) and not hasattr(ours[3], "extra")


def test_a_buffer_the_forward_reassigns_is_written_back_to_the_dict_as_torchs():
    for lib, fc in ((L, L.func.functional_call), (torch, torch.func.functional_call)):
        m = lib.nn.Module()
        m.register_buffer("count", lib.zeros(1))

        def forward(x, m=m, lib=lib):
            m.count = m.count + 1                # (a new tensor, not an in-place change)
            return x
        m.forward = forward
        given = {"count": lib.ones(1)}
        fc(m, given, lib.ones(1))
        assert float(given["count"][0]) == 2.0 and float(m.count[0]) == 0.0, lib.__name__


def test_torchs_import_paths():
    from layers.nn.utils.stateless import functional_call
    import layers.func
    ours, _ = _nets("cpu")
    ours.eval()
    x = L.tensor(_x())
    weights = {k: v * 2 for k, v in ours.named_parameters()}
    np.testing.assert_array_equal(functional_call(ours, weights, (x,)).detach().numpy(),
                                  layers.func.functional_call(ours, weights, x).detach().numpy())

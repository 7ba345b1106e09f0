"""nn.utils.parametrize and nn.utils.parametrizations (weight_norm, spectral_norm in torch's
newer form) against torch's: state_dict keys, shapes and order, repr, outputs, gradients and Adam
steps from the same state, the power iteration's buffers (registration's steps too), assignment
through right_inverse, removal, the cache, older checkpoints, and torch's errors. float64; on the
CPU, a GPU and the host GPU path."""
import copy

import numpy as np
import pytest
import torch

import layers as L
from layers import nn
from test_weight_norms import (LAYERS, _steps, gradient_penalty, iterates_in_training_only,
                               same_state, three_forwards_one_backward)

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]
P = nn.utils.parametrize
TP = torch.nn.utils.parametrize


def _both(make, wrap, **kw):
    """(ours, torch's) made by make(lib) with the same weights, then wrapped by
    lib.nn.utils.parametrizations.<wrap>: the same originals (not spectral norm's random _u / _v:
    torch's are then loaded into ours)."""
    torch.manual_seed(0)
    ours, theirs = make(L).double(), make(torch).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours = getattr(nn.utils.parametrizations, wrap)(ours, **kw)
    theirs = getattr(torch.nn.utils.parametrizations, wrap)(theirs, **kw)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [v.shape for v in ours.state_dict().values()] == \
        [tuple(v.shape) for v in theirs.state_dict().values()]
    for (k, v), tv in zip(ours.state_dict().items(), theirs.state_dict().values()):
        if not k.endswith(("._u", "._v")):
            np.testing.assert_allclose(v, tv.numpy(), rtol=1e-14, atol=1e-15, err_msg=k)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    return ours, theirs


@pytest.mark.parametrize("dim", [0, 1, None, -2])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("device", DEVICES)
def test_weight_norm_trains_as_torchs(layer, dim, where):
    make, shape = LAYERS[layer]
    ours, theirs = _both(make, "weight_norm", dim=dim)
    _steps(ours, theirs, shape, where)
    P.remove_parametrizations(ours, "weight")
    TP.remove_parametrizations(theirs, "weight")
    assert type(ours) is getattr(nn, layer) and isinstance(ours.weight, nn.Parameter)
    same_state(ours, theirs)


@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("device", DEVICES)
def test_spectral_norm_trains_as_torchs(layer, iterations, where):
    make, shape = LAYERS[layer]
    ours, theirs = _both(make, "spectral_norm", n_power_iterations=iterations)
    sn = ours.parametrizations.weight[0]
    iterates_in_training_only(ours, theirs, shape, where, lambda: (sn._u, sn._v))
    P.remove_parametrizations(ours, "weight")
    TP.remove_parametrizations(theirs, "weight")
    same_state(ours, theirs)


def test_spectral_norm_starts_with_torchs_power_iteration(monkeypatch):
    """From the same random vectors, registration leaves _u and _v where torch's does (15 steps,
    then one more when the parametrization is checked); a weight whose two largest singular
    values are close converges slowly, so a step more or less shows."""
    w = np.linalg.qr(np.random.default_rng(0).standard_normal((5, 5)))[0][:3] * \
        np.array([[1.0], [0.9], [0.5]])
    torch.manual_seed(0)
    theirs = torch.nn.Linear(5, 3).double()
    ours = nn.Linear(5, 3).double()
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(w))
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    state = torch.get_rng_state()
    starts = iter([torch.empty(n, dtype=torch.float64).normal_(0, 1).numpy() for n in (3, 5)])
    torch.set_rng_state(state)
    torch.nn.utils.parametrizations.spectral_norm(theirs)
    monkeypatch.setattr(nn.utils.parametrizations, "randn",
                        lambda n, dtype, device: L.tensor(next(starts), dtype=dtype))
    nn.utils.parametrizations.spectral_norm(ours)
    same_state(ours, theirs, rtol=1e-11)
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(),
                               rtol=1e-11)


@pytest.mark.parametrize("device", DEVICES)
def test_two_forwards_then_one_backward_as_torchs(where):
    """WGAN-GP's pattern with the newer spectral_norm: three critic forwards, one backward."""
    three_forwards_one_backward(*_both(LAYERS["Conv2d"][0], "spectral_norm"), where)


@pytest.mark.parametrize("wrap", ["weight_norm", "spectral_norm"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_gradient_penalty_through_them_is_torchs(wrap, where):
    gradient_penalty(*_both(LAYERS["Conv2d"][0], wrap), where)


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
def test_weight_norm_loads_the_older_forms_checkpoint():
    """A state dict of the forward-hook form (weight_g / weight_v) loads into the parametrized
    form, under a prefix too, as torch's does (its load_state_dict pre-hook)."""
    torch.manual_seed(1)
    old = torch.nn.Sequential(torch.nn.utils.weight_norm(torch.nn.Conv1d(3, 4, 3).double()))
    ours = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 4, 3).double()))
    theirs = torch.nn.Sequential(
        torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(3, 4, 3).double()))
    sd = {k: v.detach().numpy() for k, v in old.state_dict().items()}
    assert sorted(sd) == ["0.bias", "0.weight_g", "0.weight_v"]
    assert ours.load_state_dict(sd) == theirs.load_state_dict(old.state_dict())
    same_state(ours, theirs)
    np.testing.assert_allclose(ours[0].weight.detach().numpy(), old[0].weight.detach().numpy(),
                               rtol=1e-13)


def _kinds(lib):
    """(Symmetric, Scale, Plus) parametrizations, as `lib`'s modules (the same class names, so
    the reprs compare): Scale splits the weight into two originals, weight = s * d."""
    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

        def right_inverse(self, A):
            return A.triu()

    class Scale(lib.nn.Module):
        def forward(self, s, d):
            return s * d

        def right_inverse(self, w):
            s = w.abs().max()
            return s.reshape(1, 1), w / s

    class Plus(lib.nn.Module):
        def forward(self, X):
            return X + 1

        def right_inverse(self, X):
            return X - 1
    return Symmetric, Scale, Plus


@pytest.mark.parametrize("device", DEVICES)
def test_custom_parametrizations_as_torchs(where):
    """A chain (Symmetric, then Plus) and a split into two originals (Scale): the same names,
    weights, assignment through right_inverse, gradients and removal as torch's."""
    rng = np.random.default_rng(3)
    w0, x = rng.standard_normal((4, 4)), rng.standard_normal((2, 4))
    pair = []
    for lib in (L, torch):
        m = lib.nn.Linear(4, 4).double()
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w0))
            m.bias.zero_()
        weight = m.weight
        Symmetric, _, Plus = _kinds(lib)
        for p in (Symmetric(), Plus()):
            lib.nn.utils.parametrize.register_parametrization(m, "weight", p)
        assert m.parametrizations.weight.original is weight      # (the same Parameter)
        pair.append(m)
    ours, theirs = pair
    assert repr(ours) == repr(theirs) and type(ours).__name__ == "ParametrizedLinear"
    same_state(ours, theirs)
    ours.to(where)
    w = ours.weight.detach().numpy()
    np.testing.assert_allclose(w, w.T)
    np.testing.assert_allclose(w, theirs.weight.detach().numpy(), rtol=1e-14)
    a = rng.standard_normal((4, 4))
    a = a + a.T
    ours.weight = L.tensor(a, device=where)
    theirs.weight = torch.tensor(a)
    np.testing.assert_allclose(ours.weight.detach().numpy(), a, rtol=1e-14)
    same_state(ours, theirs)
    ours(L.tensor(x, device=where)).square().sum().backward()
    theirs(torch.tensor(x)).square().sum().backward()
    np.testing.assert_allclose(ours.parametrizations.weight.original.grad.numpy(),
                               theirs.parametrizations.weight.original.grad.numpy(), rtol=1e-12)
    P.remove_parametrizations(ours, "weight", leave_parametrized=False)
    TP.remove_parametrizations(theirs, "weight", leave_parametrized=False)
    assert not P.is_parametrized(ours) and type(ours) is nn.Linear
    same_state(ours, theirs)

    ours, theirs = nn.Linear(3, 2).double(), torch.nn.Linear(3, 2).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    P.register_parametrization(ours, "weight", _kinds(L)[1]())
    TP.register_parametrization(theirs, "weight", _kinds(torch)[1]())
    assert P.is_parametrized(ours, "weight") and not P.is_parametrized(ours, "bias")
    assert P.type_before_parametrizations(ours) is nn.Linear
    same_state(ours, theirs)
    ours.weight = L.tensor(2 * w0[:2, :3])
    theirs.weight = torch.tensor(2 * w0[:2, :3])
    same_state(ours, theirs)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        P.remove_parametrizations(ours, "weight", leave_parametrized=False)
    P.remove_parametrizations(ours, "weight")
    TP.remove_parametrizations(theirs, "weight")
    same_state(ours, theirs)


def test_cached_computes_each_once():
    calls = []

    class Counted(nn.Module):
        def forward(self, X):
            calls.append(1)
            return X * 2
    m = P.register_parametrization(nn.Linear(2, 2), "weight", Counted())
    calls.clear()
    m.weight, m.weight
    assert len(calls) == 2
    with P.cached():
        a = m.weight
        with P.cached():
            assert m.weight is a
        assert m.weight is a
    assert len(calls) == 3
    m.weight
    assert len(calls) == 4                  # (the cache ends with the outermost block)


def test_removing_keeps_the_parameter_and_a_copy_is_apart():
    m = nn.Linear(3, 3)
    weight = m.weight
    opt = L.optim.SGD(m.parameters(), lr=0.1)
    nn.utils.parametrizations.spectral_norm(m)
    assert m.parametrizations.weight.original is weight
    twin = copy.deepcopy(m)
    assert type(twin) is type(m) and twin.parametrizations.weight.original is not weight
    np.testing.assert_array_equal(twin.weight.detach().numpy(), m.weight.detach().numpy())
    m(L.ones(1, 3)).sum().backward()
    opt.step()                                 # (the optimizer made before still trains it)
    P.remove_parametrizations(m, "weight")
    assert m.weight is weight and type(m) is nn.Linear


def test_errors_are_torchs():
    Plus = _kinds(L)[2]
    m = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a "
                                         "parametrized element with name 'nope'"):
        P.register_parametrization(m, "nope", Plus())
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        P.remove_parametrizations(m, "weight")

    class Shrink(nn.Module):
        def forward(self, X):
            return X[:1]

    class Cast(nn.Module):
        def forward(self, X):
            return X.double()

    class NoInverse(nn.Module):
        def forward(self, X):
            return X
    with pytest.raises(ValueError, match="may not change the shape"):
        P.register_parametrization(nn.Linear(2, 2), "weight", Shrink())
    with pytest.raises(ValueError, match="may not change the dtype"):
        P.register_parametrization(nn.Linear(2, 2), "weight", Cast())
    twice = P.register_parametrization(nn.Linear(2, 2), "weight", Plus())
    with pytest.raises(ValueError, match=r"may not change the shape of the tensor, unless the "
                                         r"`unsafe` flag is enabled.\nmodule.weight.shape: "
                                         r"\(2, 2\)\nparametrization\(module.weight\).shape: "
                                         r"\(1, 2\)"):
        P.register_parametrization(twice, "weight", Shrink())

    class BadInverse(nn.Module):
        def forward(self, X):
            return X

        def right_inverse(self, X):
            return X.double()
    with pytest.raises(ValueError, match="The tensor returned by parametrization.right_inverse "
                                         "must have the same dtype as module.weight"):
        P.register_parametrization(twice, "weight", BadInverse())
    assert len(twice.parametrizations.weight) == 1 and not twice.parametrizations.weight.unsafe
    P.register_parametrization(twice, "weight", Shrink(), unsafe=True)      # (allowed)
    assert twice.parametrizations.weight.unsafe          # (from then on, as torch's)
    P.register_parametrization(twice, "weight", Plus())
    assert twice.parametrizations.weight.unsafe and twice.weight.shape == (1, 2)
    m = P.register_parametrization(nn.Linear(2, 2), "weight", NoInverse())
    with pytest.raises(RuntimeError, match="NoInverse does not implement right_inverse"):
        m.weight = L.zeros(2, 2)
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        m.weight = nn.Parameter(L.zeros(2, 2))
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        import pickle
        pickle.dumps(m)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\] but got 2\)"):
        nn.utils.parametrizations.spectral_norm(nn.Linear(2, 2), dim=2)
    with pytest.raises(ValueError, match="n_power_iterations=0"):
        nn.utils.parametrizations.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'bias'"):
        nn.utils.parametrizations.spectral_norm(nn.Linear(2, 2, bias=False), name="bias")
    untouched = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="weight_norm: dim 2 is out of range"):
        nn.utils.parametrizations.weight_norm(untouched, dim=2)
    assert type(untouched) is nn.Linear and "weight" in untouched._parameters
    with pytest.raises(AttributeError, match="orthogonal is not done here"):
        nn.utils.parametrizations.orthogonal

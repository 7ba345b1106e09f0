"""nn.utils.weight_norm / spectral_norm (and their remove_*) as torch's older forward-pre-hook
form: the same state_dict names, shapes and order, the same outputs and gradients from the same
state, the power iteration's u and v buffers updated as torch's in training and left alone in
evaluation, steps of Adam that stay with torch's, a gradient penalty through them (second
order), and the errors torch gives. float64; on the CPU, a GPU and the host GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]
pytestmark = pytest.mark.filterwarnings(             # (torch's: its newer form is parametrize's)
    "ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")


def _both(make, wrap, **kw):
    """(ours, torch's) made by make(lib) and wrapped by lib.nn.utils.<wrap>, torch's state
    loaded into ours (its random u / v too)."""
    torch.manual_seed(0)
    ours = getattr(nn.utils, wrap)(make(L).double(), **kw)
    theirs = getattr(torch.nn.utils, wrap)(make(torch).double(), **kw)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [v.shape for v in ours.state_dict().values()] == \
        [tuple(v.shape) for v in theirs.state_dict().values()]
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


LAYERS = {
    "Linear": (lambda lib: lib.nn.Linear(5, 3), (4, 5)),
    "Conv1d": (lambda lib: lib.nn.Conv1d(3, 4, 3, padding=1), (2, 3, 7)),
    "Conv2d": (lambda lib: lib.nn.Conv2d(3, 4, 3, stride=2), (2, 3, 7, 7)),
    "ConvTranspose1d": (lambda lib: lib.nn.ConvTranspose1d(3, 4, 4, stride=2), (2, 3, 5)),
    "ConvTranspose2d": (lambda lib: lib.nn.ConvTranspose2d(3, 2, 4, 2, 1, bias=False),
                        (2, 3, 4, 4)),
}


def _steps(ours, theirs, shape, where, steps=3, train=True):
    """Adam steps on sum(y^2) of both, from the same input; each step's output compared, then
    every parameter, buffer and the weight the hook made."""
    ours.to(where).train(train)
    theirs.train(train)
    opt = L.optim.Adam(ours.parameters(), lr=0.05)
    topt = torch.optim.Adam(theirs.parameters(), lr=0.05)
    x = np.random.default_rng(1).standard_normal(shape)
    for _ in range(steps):
        opt.zero_grad()
        topt.zero_grad()
        y, ty = ours(L.tensor(x, device=where)), theirs(torch.tensor(x))
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-11,
                                   atol=1e-12)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        opt.step()
        topt.step()
    for (k, v), tv in zip(ours.state_dict().items(), theirs.state_dict().values()):
        np.testing.assert_allclose(v, tv.numpy(), rtol=1e-10, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim", [0, 1, None, -2])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("device", DEVICES)
def test_weight_norm_trains_as_torchs(layer, dim, where):
    make, shape = LAYERS[layer]
    ours, theirs = _both(make, "weight_norm", dim=dim)
    _steps(ours, theirs, shape, where)
    nn.utils.remove_weight_norm(ours)
    torch.nn.utils.remove_weight_norm(theirs)
    assert isinstance(ours.weight, nn.Parameter)
    same_state(ours, theirs)


def same_state(ours, theirs, rtol=1e-12):
    """The same state_dict keys, in order, and values."""
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (k, v), tv in zip(ours.state_dict().items(), theirs.state_dict().values()):
        np.testing.assert_allclose(v, tv.numpy(), rtol=rtol, atol=1e-14, err_msg=k)


@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("device", DEVICES)
def test_spectral_norm_trains_as_torchs(layer, iterations, where):
    make, shape = LAYERS[layer]
    ours, theirs = _both(make, "spectral_norm", n_power_iterations=iterations)
    iterates_in_training_only(ours, theirs, shape, where, lambda: (ours.weight_u, ours.weight_v))
    nn.utils.remove_spectral_norm(ours)
    torch.nn.utils.remove_spectral_norm(theirs)
    same_state(ours, theirs)


def iterates_in_training_only(ours, theirs, shape, where, vectors):
    """Steps as torch's (_steps): in training the power iteration moves u; in evaluation u and v
    (`vectors()`, ours) are left as they are."""
    u0 = vectors()[0].numpy().copy()
    _steps(ours, theirs, shape, where)
    assert not np.allclose(vectors()[0].numpy(), u0)          # (training moved u)
    u, v = (t.numpy().copy() for t in vectors())
    _steps(ours, theirs, shape, where, steps=1, train=False)
    np.testing.assert_array_equal(vectors()[0].numpy(), u)
    np.testing.assert_array_equal(vectors()[1].numpy(), v)


@pytest.mark.parametrize("device", DEVICES)
def test_two_forwards_then_one_backward_as_torchs(where):
    """WGAN-GP's pattern: the critic on real, fake and mixed data, one backward for all three;
    each forward's power iteration changes u and v in place, which a graph of an earlier
    forward must not read (it reads its own copies, as torch's)."""
    three_forwards_one_backward(*_both(LAYERS["Conv2d"][0], "spectral_norm"), where)


def three_forwards_one_backward(ours, theirs, where):
    """(ours, torch's) critic on three inputs, one backward: the same gradients."""
    ours.to(where)
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((2, 3, 7, 7)) for _ in range(3)]
    loss = sum((ours(L.tensor(x, device=where)) ** 2).mean() for x in xs)
    tloss = sum((theirs(torch.tensor(x)) ** 2).mean() for x in xs)
    loss.backward()
    tloss.backward()
    for (k, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-11, err_msg=k)


@pytest.mark.parametrize("device", DEVICES)
def test_weight_norm_of_a_vector_keeps_each_elements_length_as_torchs(where):
    """A 1-d parameter (a bias) has no axis but dim 0: name_g is each element's magnitude."""
    ours, theirs = _both(LAYERS["Linear"][0], "weight_norm", name="bias")
    assert ours.state_dict()["bias_g"].shape == (3,)
    ours.to(where)
    x = np.random.default_rng(5).standard_normal(LAYERS["Linear"][1])
    y, ty = ours(L.tensor(x, device=where)), theirs(torch.tensor(x))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-13)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for (k, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        # (bias_v's true gradient is 0: g * v / |v| is g * sign(v))
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=k)


def test_the_largest_singular_value_is_divided_out():
    """After enough power iterations the weight's matrix has spectral norm 1 (NumPy's SVD)."""
    L.manual_seed(3)
    conv = nn.utils.spectral_norm(nn.Conv2d(4, 6, 3).double(), n_power_iterations=50)
    conv(L.zeros(1, 4, 3, 3, dtype=L.float64))
    matrix = conv.weight.detach().numpy().reshape(6, -1)
    assert abs(np.linalg.svd(matrix, compute_uv=False)[0] - 1) < 1e-9


@pytest.mark.parametrize("wrap", ["weight_norm", "spectral_norm"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_gradient_penalty_through_them_is_torchs(wrap, where):
    gradient_penalty(*_both(LAYERS["Conv2d"][0], wrap), where)


def gradient_penalty(ours, theirs, where):
    """(ours, torch's) through a second-order loss: the same parameter gradients."""
    ours.to(where)
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 7))
    for lib, m, xs in ((L, ours, L.tensor(x, device=where, requires_grad=True)),
                       (torch, theirs, torch.tensor(x, requires_grad=True))):
        y = m(xs)
        gx, = lib.autograd.grad((y * y * y).sum(), xs, create_graph=True)
        ((gx * gx).sum() + y.sum()).backward()
    for (k, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-10, err_msg=k)


def test_errors_are_torchs():
    m = nn.utils.weight_norm(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks on the same "
                                           "parameter weight"):
        nn.utils.weight_norm(m)
    with pytest.raises(ValueError, match="spectral_norm of 'weight' not found in Linear"):
        nn.utils.remove_spectral_norm(m)
    with pytest.raises(ValueError, match="weight_norm of 'bias' not found"):
        nn.utils.remove_weight_norm(m, "bias")
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive, but got "
                                         "n_power_iterations=0"):
        nn.utils.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="spectral_norm: Linear has no parameter 'bias' \\(it "
                                         "is None\\)"):
        nn.utils.spectral_norm(nn.Linear(2, 2, bias=False), name="bias")
    with pytest.raises(ValueError, match="weight_norm: dim 2 is out of range"):
        nn.utils.weight_norm(nn.Linear(2, 2), dim=2)
    s = nn.utils.spectral_norm(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm hooks"):
        nn.utils.spectral_norm(s)

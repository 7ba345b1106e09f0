"""layers.autograd.functional against torch.autograd.functional (float64): vjp, jvp, vhp, hvp,
jacobian and hessian -- values, shapes and tuple structure, create_graph (the results
differentiated again), strict refusals -- on the NumPy path and the GPU path run on the host."""
import numpy as np
import pytest
import torch
import torch.autograd.functional as TAF

import layers as L
import layers.autograd.functional as AF
from reference import rel_err

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
RNG = np.random.default_rng(0)
X, W, VX, VY = (RNG.standard_normal(s) for s in ((3,), (2, 3), (3,), (2,)))


def _f(lib, x, w):                     # two inputs, one (2,) output
    return lib.tanh(lib.matmul(w, x * x)) * x[:2]


def _scalar(lib, x, w):                # two inputs, a one-element output
    return (lib.tanh(lib.matmul(w, x * x)) ** 2).sum() + (x ** 3).sum() * w[:1, :1].sum()


def _pair(lib, x):                     # one input, two outputs
    return lib.sin(x) * x, (x ** 3).sum()


def _args(lib, where, *arrays):
    if lib is torch:
        return tuple(torch.tensor(a) for a in arrays)
    return tuple(L.tensor(a, device=where) for a in arrays)


CALLS = {   # name -> fn(af, lib, where): the call of each library's autograd.functional
    "vjp": lambda af, lib, where: af.vjp(lambda x, w: _f(lib, x, w), _args(lib, where, X, W),
                                          _args(lib, where, VY)[0]),
    "jvp": lambda af, lib, where: af.jvp(lambda x, w: _f(lib, x, w), _args(lib, where, X, W),
                                          _args(lib, where, VX, W)),
    "vhp": lambda af, lib, where: af.vhp(lambda x, w: _scalar(lib, x, w),
                                          _args(lib, where, X, W), _args(lib, where, VX, W)),
    "hvp": lambda af, lib, where: af.hvp(lambda x, w: _scalar(lib, x, w),
                                          _args(lib, where, X, W), _args(lib, where, VX, W)),
    "jacobian": lambda af, lib, where: af.jacobian(lambda x, w: _f(lib, x, w),
                                                   _args(lib, where, X, W)),
    "jacobian, two outputs": lambda af, lib, where: af.jacobian(
        lambda x: _pair(lib, x), _args(lib, where, X)[0]),
    "jacobian, forward mode": lambda af, lib, where: af.jacobian(
        lambda x, w: _f(lib, x, w), _args(lib, where, X, W), vectorize=True,
        strategy="forward-mode"),
    "jacobian, forward mode, two outputs, unused input": lambda af, lib, where: af.jacobian(
        lambda x, w: _pair(lib, x), _args(lib, where, X, W), vectorize=True,
        strategy="forward-mode"),
    "hessian": lambda af, lib, where: af.hessian(lambda x, w: _scalar(lib, x, w),
                                                 _args(lib, where, X, W)),
    "hessian, forward-over-reverse": lambda af, lib, where: af.hessian(
        lambda x, w: _scalar(lib, x, w), _args(lib, where, X, W), vectorize=True,
        outer_jacobian_strategy="forward-mode"),
    "hessian, one input": lambda af, lib, where: af.hessian(
        lambda x: _scalar(lib, x, _args(lib, where, W)[0]), _args(lib, where, X)[0]),
    "vjp, scalar output, v None": lambda af, lib, where: af.vjp(
        lambda x, w: _scalar(lib, x, w), _args(lib, where, X, W)),
}


def _leaves(result):
    """The nested tuples of a result flattened, each Tensor as float64 NumPy."""
    if isinstance(result, (tuple, list)):
        return [type(result).__name__ + str(len(result))] + \
            [x for r in result for x in _leaves(r)]
    return [result.detach().numpy()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CALLS))
def test_autograd_functional_is_torchs(name, device, where):
    ours = _leaves(CALLS[name](AF, L.functional, where))
    theirs = _leaves(CALLS[name](TAF, torch, None))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, str):                   # (the tuple structure)
            assert a == b, name
        else:
            assert a.shape == b.shape and rel_err(a, b) < 1e-13, name


def test_create_graph_results_can_be_differentiated_again():
    """With create_graph=True the Hessian-vector product keeps its graph back to the inputs: its
    gradient (a third derivative) is torch's; without it, results are detached."""
    def third(af, lib, make):
        x, w = make(X), make(W)
        _, hv = af.hvp(lambda a, b: _scalar(lib, a, b), (x, w), (make(VX), make(W)),
                       create_graph=True)
        assert hv[0].requires_grad
        ((hv[0] * hv[0]).sum() + (hv[1] * hv[1]).sum()).backward()
        return x.grad.numpy(), w.grad.numpy()
    ours = third(AF, L.functional, lambda a: L.tensor(a, requires_grad=True))
    theirs = third(TAF, torch, lambda a: torch.tensor(a, requires_grad=True))
    for a, b in zip(ours, theirs):
        assert rel_err(a, b) < 1e-13
    _, g = AF.vjp(lambda x: x * x, L.tensor(X, requires_grad=True), L.tensor(VX))
    assert not g.requires_grad


def test_strict_and_bad_arguments_are_refused():
    x, y = L.tensor(X), L.tensor(VX)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, (x, y), strict=True)
    zeros = AF.jacobian(lambda a, b: a * 2, (x, y))[1]         # (not strict: zeros, as torch)
    assert zeros.shape == (3, 3) and not np.any(zeros.numpy())
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda a: a * 2, x)
    with pytest.raises(TypeError, match="must be a Tensor or a tuple of Tensors"):
        AF.jacobian(lambda a: a, X)
    for kw in (dict(), dict(vectorize=True, create_graph=True), dict(vectorize=True, strict=True),
               dict(strategy="sideways")):
        kw = {"strategy": "forward-mode", **kw}
        with pytest.raises(Exception) as want:
            TAF.jacobian(lambda a: a, torch.tensor(X), **kw)
        kind = ValueError if type(want.value) is AssertionError else type(want.value)
        with pytest.raises(kind) as got:          # (torch's AssertionError for a bad strategy:
            AF.jacobian(lambda a: a, x, **kw)    # a ValueError here)
        assert str(got.value).replace(" ", "") == str(want.value).replace(" ", "")  # (torch's
        # "isonly": its words, spaced)

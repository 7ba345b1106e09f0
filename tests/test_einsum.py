"""L.einsum against torch.einsum: values and every operand's gradient, on the NumPy path, the GPU
path run on the host and the GPU; torch's implicit output, ellipses that broadcast, diagonals,
size-1 labels that broadcast, three operands; and its refusals."""
import numpy as np
import pytest
import torch

import layers as L
from reference import rel_err

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
CASES = [  # (equation, operand shapes)
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
    ("i,i->", [(3,), (3,)]), ("i,j->ij", [(3,), (2,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 5),
                                                                           (5, 6)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,jk", [(2, 3), (3, 4)]), ("ba,ca", [(2, 3), (4, 3)]),
    ("Ab,bC", [(2, 3), (3, 4)]), ("i,i", [(3,), (1,)]), ("ij,ij->i", [(3, 1), (1, 4)]),
    ("...ij->ij", [(2, 3, 4)]), ("...", [(2, 3)]), ("bi,bi->b", [(3, 2), (1, 2)]),
    ("iij->j", [(3, 3, 2)]), ("a...b,b...c->a...c", [(2, 3, 4), (4, 3, 5)]),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]), ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("iji->j", [(2, 3, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("kj,ji", [(2, 3), (3, 4)]), ("bA", [(2, 3)]),
    ("eee,dBe,b", [(4, 4, 4), (2, 2, 4), (2,)]),             # (implicit: A-Z before a-z)
    ("ij,ij,ij->", [(2, 3), (2, 3), (2, 3)]), ("bi,bi,bj->j", [(2, 3), (2, 3), (2, 4)]),
    (" b i , b j -> b i j ", [(2, 3), (2, 4)]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0].replace(" ", "") for c in CASES])
def test_einsum_is_torchs(equation, shapes, device, where):
    rng = np.random.default_rng(len(equation))
    arrays = [rng.standard_normal(s) for s in shapes]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours = [L.tensor(a, device=where, requires_grad=True) for a in arrays]
    ty = torch.einsum(equation, *theirs)
    y = L.einsum(equation, ours)                      # (the list form too)
    assert y.shape == tuple(ty.shape) and y.dtype == np.float64
    assert rel_err(y.numpy(), ty.detach().numpy()) < 1e-12
    w = rng.standard_normal(ty.shape)
    (ty * torch.tensor(w)).sum().backward()
    (y * L.tensor(w, device=where)).sum().backward()
    for a, b in zip(ours, theirs):
        assert rel_err(a.grad.numpy(), b.grad.numpy()) < 1e-12


def test_einsum_in_float32_rounds_as_float32():
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((2, 3, 8, 16)).astype(np.float32) for _ in range(2))
    y = L.einsum("bhqd,bhkd->bhqk", L.tensor(q), L.tensor(k))
    assert y.dtype == np.float32
    exact = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    assert rel_err(y.numpy(), exact) < 1e-6


def test_einsum_refuses_what_torch_refuses():
    a, b = L.tensor(np.zeros((2, 3))), L.tensor(np.zeros((4, 5)))
    for equation, operands, match in [
            ("ij,jk->ik", [a], "has 2 operand term"),
            ("ij,jk->ik", [a, b], "subscript 'j' has sizes 3 and 4"),
            ("i2,jk", [a, b], "invalid subscript '2'"),
            ("ijk", [a], "does not match its 2 dimensions"),
            ("ij->ik", [a], "output label 'k' appears in no operand"),
            ("ij->ii", [a], "repeats a label"),
            ("ii", [a], "repeated for an operand but the sizes don't match, 2 != 3"),
            ("...i...", [a], "more than one ellipsis")]:
        with pytest.raises(ValueError, match=match):
            L.einsum(equation, *operands)
    with pytest.raises(TypeError, match="einsum: inputs must share one floating dtype"):
        L.einsum("ij,jk", a, L.tensor(np.zeros((3, 4), np.float32)))
    with pytest.raises(TypeError, match="expected Tensor operands"):
        L.einsum("ij", np.zeros((2, 3)))

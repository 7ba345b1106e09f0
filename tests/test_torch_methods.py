"""Tensor methods and functions a PyTorch user reaches for, against torch: size() / numel() /
dim(), np.asarray / float / int, comparison methods, any / all, abs and sqrt (gradients at 0),
min / amin / argmin, var / std (correction, unbiased), expand / repeat / split / chunk, cat /
stack with dim=, ReLU(inplace=True), `from layers.optim.lr_scheduler import ...`, and load()
refusing a torch.save file. Values and float64 gradients on the CPU and the host GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
A = np.array([[0.0, -2.0, 3.0, -2.0], [1.5, 1.5, -0.5, 0.0], [2.0, -1.0, 2.0, 4.0]])

CASES = {
    "abs": lambda v: v.abs(),
    "sqrt": lambda v: (v * v + 1).sqrt(),
    "amin": lambda v: v.amin(),
    "amin_dim": lambda v: v.amin(dim=1, keepdim=True),
    "min_all": lambda v: v.min(),
    "min_dim_ties": lambda v: v.min(dim=1).values,     # (-2.0 twice: the first takes it)
    "var": lambda v: v.var(),
    "var_dim": lambda v: v.var(dim=1, keepdim=True),
    "var_biased": lambda v: v.var(0, unbiased=False),
    "std_correction": lambda v: v.std(dim=0, correction=0),
    "std": lambda v: v.std(1),
    "expand": lambda v: v[:, :1].expand(3, 5),
    "expand_new_axis": lambda v: v.expand(2, -1, 4),
    "expand_as": lambda v: v[:1].expand_as(v),
    "repeat": lambda v: v.repeat(2, 3),
    "repeat_more_dims": lambda v: v.repeat(2, 1, 2),
    "split": lambda v: v.split(3, dim=1)[1],
    "split_sizes": lambda v: v.split([1, 2], dim=0)[1],
    "chunk": lambda v: v.chunk(2, dim=1)[0],
    "view_as": lambda v: v.view_as(v.T),
    "pow_method": lambda v: v.pow(2),
    "cat_dim": lambda v: (F.cat if hasattr(v, "_ctx") else torch.cat)([v, v], dim=1),
    "stack_dim": lambda v: (F.stack if hasattr(v, "_ctx") else torch.stack)([v, v], dim=1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_a_torch_method_gives_torchs_values_and_gradients(where, case):
    x = L.Tensor(L.tensor(A, device=where).data, requires_grad=True)
    tx = torch.tensor(A, requires_grad=True)
    y, ty = CASES[case](x), CASES[case](tx)
    assert y.shape == tuple(ty.shape) and y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-13, atol=1e-13)
    g = np.linspace(-1, 2, ty.numel()).reshape(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("device", DEVICES)
def test_shape_counts_conversions_and_truth_are_torchs(where):
    x, tx = L.tensor(A, device=where), torch.tensor(A)
    assert x.size() == tuple(tx.size()) and x.size(0) == tx.size(0) and x.size(-1) == 4
    assert x.numel() == tx.numel() == x.size == 12 and x.dim() == tx.dim() == 2
    np.testing.assert_array_equal(np.asarray(x), A)
    assert float(x[2, 3]) == 4.0 and int(x[1, 0]) == 1
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        np.testing.assert_array_equal(getattr(x, name)(1.5).numpy(),
                                      getattr(tx, name)(1.5).numpy())
    np.testing.assert_array_equal((x > 0).any(dim=1).numpy(), (tx > 0).any(dim=1).numpy())
    np.testing.assert_array_equal((x > -3).all(dim=0, keepdim=True).numpy(),
                                  (tx > -3).all(dim=0, keepdim=True).numpy())
    assert (x > 3).any().item() is True and (x > 3).all().item() is False
    np.testing.assert_array_equal(x.argmin(1).numpy(), tx.argmin(1).numpy())
    np.testing.assert_array_equal(x.min(dim=1).indices.numpy(), tx.min(dim=1).indices.numpy())


def test_torch_spellings_of_modules_imports_and_files(tmp_path):
    x = L.tensor(A)
    np.testing.assert_array_equal(nn.ReLU(inplace=True)(x).numpy(), np.maximum(A, 0))
    np.testing.assert_array_equal(F.relu(x, inplace=True).numpy(), np.maximum(A, 0))
    from layers.optim.lr_scheduler import StepLR        # (as from torch.optim.lr_scheduler)
    assert StepLR is L.optim.lr_scheduler.StepLR
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "m.pt")
    with pytest.raises(ValueError, match="a file torch.save wrote .* read it with torch.load"):
        L.load(tmp_path / "m.pt")                       # (it gave the zip's raw bytes back)
    with pytest.raises(ValueError, match="split: sizes \\[1, 1\\] sum to 2, not dim 0's size 3"):
        x.split([1, 1])
    with pytest.raises(ValueError, match="repeat: 1 sizes for 2 dimensions"):
        x.repeat(2)

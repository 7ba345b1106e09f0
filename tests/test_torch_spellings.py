"""torch's spellings of the reductions and shape helpers a PyTorch user reaches for: dim= and
keepdim= (NumPy's axis= / keepdims= stay), amax / max / argmax, flatten / unsqueeze / squeeze;
values and gradients against torch on the CPU, on the NumPy path and the GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

from like_torch import assert_like_torch

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)

# ties on purpose: amax shares a tie's gradient, max(dim) gives it to the first maximum
A = np.array([[[1.0, 5.0, 5.0, -2.0], [7.0, 2.0, 7.0, 7.0], [0.5, -1.0, 3.0, 3.0]],
              [[4.0, 4.0, 1.0, 0.0], [-3.0, 8.0, 2.0, 8.0], [6.0, 6.0, 6.0, 6.0]]], np.float32)

CASES = {
    "sum_dim": lambda v: v.sum(dim=1),
    "sum_dims_keepdim": lambda v: v.sum(dim=(0, 2), keepdim=True),
    "mean_dim": lambda v: v.mean(dim=-1),
    "softmax_dim": lambda v: v.softmax(dim=1),
    "log_softmax_dim": lambda v: v.log_softmax(dim=0),
    "amax_all": lambda v: v.amax(),
    "amax_dim_ties": lambda v: v.amax(dim=2),
    "amax_dims_keepdim": lambda v: v.amax(dim=(0, 1), keepdim=True),
    "max_all_ties": lambda v: v.max(),
    "max_dim_values": lambda v: v.max(dim=2).values,
    "max_dim_keepdim": lambda v: v.max(1, keepdim=True)[0],
    "flatten": lambda v: v.flatten(),
    "flatten_1": lambda v: v.flatten(1),
    "flatten_0_1": lambda v: v.flatten(0, 1),
    "unsqueeze": lambda v: v.unsqueeze(1),
    "unsqueeze_neg": lambda v: v.unsqueeze(-1),
    "squeeze_dim": lambda v: v.unsqueeze(2).squeeze(2),
    "squeeze_all": lambda v: v[:1].unsqueeze(-1).squeeze(),
    "squeeze_not_one": lambda v: v.squeeze(1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_a_torch_spelling_gives_torchs_values_and_gradients(where, case):
    assert_like_torch(CASES[case], A, where, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_argmax_and_max_indices_are_torchs(where):
    x, t = L.tensor(A, device=where), torch.tensor(A)
    for ours, theirs in ((x.argmax(), t.argmax()), (x.argmax(dim=2), t.argmax(dim=2)),
                         (x.argmax(1, keepdim=True), t.argmax(1, keepdim=True)),
                         (x.max(dim=2).indices, t.max(dim=2).indices),
                         (x.max(0, keepdim=True)[1], t.max(0, keepdim=True)[1])):
        assert ours.dtype == np.int64 and ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_one_argument_named_twice_is_refused():
    x = L.tensor(A)
    with pytest.raises(TypeError, match=r"sum: got both axis=0 and dim=1"):
        x.sum(0, dim=1)
    with pytest.raises(TypeError, match=r"mean: got both keepdims and keepdim"):
        x.mean(keepdims=True, keepdim=True)
    with pytest.raises(RuntimeError, match=r"amax: a maximum over axis 0 of size 0"):
        L.tensor(np.zeros((0, 3), np.float32)).amax()


def test_edge_dims_are_torchs():
    """dim=() is every axis (NumPy's axis=() none), a 0-d tensor takes dim 0, an empty tensor's
    maximum over a non-empty axis is empty (over its empty axis: an error), a NumPy integer is a
    dim, and a dim out of range is torch's IndexError."""
    x, t = L.tensor(A), torch.tensor(A)
    for ours, theirs in ((x.sum(dim=()), t.sum(dim=())), (x.amax(dim=()), t.amax(dim=())),
                         (L.tensor(np.float32(3)).sum(dim=0), torch.tensor(3.0).sum(dim=0)),
                         (L.tensor(np.float32(3)).amax(dim=-1), torch.tensor(3.0).amax(dim=-1)),
                         (L.tensor(np.zeros((0, 3), np.float32)).amax(dim=1),
                          torch.zeros(0, 3).amax(dim=1)),
                         (x.unsqueeze(2).squeeze(np.int64(2)), t.unsqueeze(2).squeeze(2))):
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())
    with pytest.raises(RuntimeError, match=r"amax: a maximum over axis 0 of size 0"):
        L.tensor(np.zeros((0, 3), np.float32)).amax(dim=0)
    for call in (lambda v: v.flatten(5), lambda v: v.unsqueeze(-5), lambda v: v.squeeze(3),
                 lambda v: v.sum(dim=3), lambda v: v.amax(dim=(0, -4))):
        with pytest.raises(IndexError, match=r"dimension out of range \(expected to be in range "
                                             r"of \[-\d, \d\], but got -?\d\)"):
            call(x)
        with pytest.raises(IndexError):
            call(t)
    with pytest.raises(TypeError, match=r"max: axis is an axis, got a Tensor"):
        x.max(x)
    with pytest.raises(TypeError, match=r"softmax: takes one axis \(an int, as torch's dim\), "
                                        r"got \(0, 1\)"):
        x.softmax(dim=(0, 1))
    with pytest.raises(TypeError):
        t.softmax(dim=(0, 1))


@pytest.mark.parametrize("data", [
    1, [1, 2], [[1], [2]], 1.0, [1, 2.5], True, [True, False], [True, 2], 1 + 2j, [],
    np.int32(3), np.float64(2.0), np.float16(1.0), np.bool_(True), np.array([1, 2], np.int16),
    np.array([0.5], np.float64)], ids=repr)
def test_tensor_of_python_data_takes_torchs_dtype(data):
    """L.tensor's dtype where none is given is torch.tensor's: Python ints int64 (so class
    targets written as a list are indices), floats float32, NumPy data its own; the values too."""
    got, want = L.tensor(data), torch.tensor(data)
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_list_of_class_indices_is_a_cross_entropy_target_as_in_torch():
    logits = np.array([[0.1, 2.0, -1.0], [0.3, 0.2, 0.1]], np.float32)
    got = F.cross_entropy(L.tensor(logits), L.tensor([1, 0]))
    want = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor([1, 0]))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_module_forwards_take_torchs_argument_names():
    """Every module's forward names its arguments as torch's does (input, target, hx, ...), so
    m(input=x) and functional_call(m, params, (), {"input": x}) run as there."""
    import inspect
    checked = 0
    for name in nn.__all__:
        ours, theirs = getattr(nn, name, None), getattr(torch.nn, name, None)
        if not (inspect.isclass(ours) and theirs is not None and hasattr(ours, "forward")):
            continue
        po = list(inspect.signature(ours.forward).parameters)[1:]
        pt = list(inspect.signature(theirs.forward).parameters)[1:]
        assert po[:len(pt)] == pt[:len(po)], (name, po, pt)
        checked += 1
    assert checked > 50
    x = L.ones(2, 3)
    lin = nn.Linear(3, 1)
    np.testing.assert_array_equal(lin(input=x).detach().numpy(), lin(x).detach().numpy())
    assert float(nn.MSELoss()(input=x, target=L.zeros(2, 3))) == 1.0
    assert L.func.functional_call(nn.ReLU(), {}, (), {"input": -x}).numpy().max() == 0

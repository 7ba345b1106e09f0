"""The engine's grad-mode and Tensor semantics as torch's: .to(device) in the graph, only
floating tensors requiring grad, NumPy scalars as weak constants, elementwise comparisons and
truth values, integer casts, and no_grad / enable_grad / set_grad_enabled as blocks and
decorators (generator functions too). Compared with torch CPU, on the CPU and the host GPU path."""
import numpy as np
import pytest
import torch

import layers as L

DEVICES = [pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)


@pytest.mark.parametrize("device", DEVICES)
def test_to_device_is_in_the_graph_both_ways(where):
    """torch: w.grad = [8, 16] and [3, 3]; a copy made without a graph kept none before."""
    w = L.tensor([1.0, 2.0], requires_grad=True)
    moved = (w * 2).to(where)
    assert not moved.is_leaf and moved.device == where
    (moved * moved).sum().backward()
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    ((tw * 2) * (tw * 2)).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    wg = L.Tensor(L.tensor([1.0, 2.0], device=where).data, requires_grad=True)
    (wg * 3).cpu().sum().backward()
    assert wg.grad.device == where
    np.testing.assert_array_equal(wg.grad.numpy(), [3.0, 3.0])
    with L.no_grad():
        assert (w * 2).to(where).is_leaf            # (no graph recorded)


def test_only_floating_tensors_require_grad():
    for make in (lambda: L.tensor([1, 2], requires_grad=True),
                 lambda: L.tensor([1, 2]).requires_grad_(),
                 lambda: setattr(L.tensor([True]), "requires_grad", True)):
        with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can "
                                               "require gradients, got (int64|bool)"):
            make()
    x = L.tensor([1.0, 2.0])
    x.requires_grad = True
    assert x.requires_grad


@pytest.mark.parametrize("value", [np.float64(2), np.int64(2), np.float32(0.5)], ids=repr)
def test_numpy_scalars_are_weak_constants_as_torchs(value):
    """A NumPy scalar exponent or bound keeps a float32 graph float32 (NumPy 2 would promote)."""
    x, tx = L.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0])
    for ours, theirs in ((x ** value, tx ** value),
                         (x.clamp(min=value), tx.clamp(min=float(value)))):
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.") == "float32"
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("device", ["cpu"] + DEVICES)
def test_comparisons_are_elementwise_as_torchs(where):
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    b = np.array([3.0, 2.0, 1.0], np.float32)
    x, y = L.tensor(a, device=where), L.tensor(b, device=where)
    tx, ty = torch.tensor(a), torch.tensor(b)
    for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        for ours, theirs in ((getattr(x, op)(y), getattr(tx, op)(ty)),
                             (getattr(x, op)(2), getattr(tx, op)(2)),
                             (getattr(x, op)(np.float64(2.0)), getattr(tx, op)(2.0)),
                             (getattr(x, op)(b), getattr(tx, op)(ty))):
            assert ours.dtype == np.bool_ and not ours.requires_grad
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    labels = L.tensor(np.array([2, 0, 1]), device=where)        # an accuracy line
    assert (L.tensor(np.array([2, 1, 1]), device=where) == labels).sum().item() == 2


def test_truth_values_iteration_and_hashing_are_torchs():
    assert bool(L.tensor([0.0])) is False and bool(L.tensor(3.0)) is True
    for empty_or_many in (L.tensor([1.0, 2.0]), L.tensor(np.zeros(0, np.float32))):
        with pytest.raises(RuntimeError, match="Boolean value of Tensor with .* is ambiguous"):
            bool(empty_or_many)
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        list(L.tensor(3.0))
    assert [t.item() for t in L.tensor([1.0, 2.0])] == [1.0, 2.0]
    a, b = L.tensor([1.0]), L.tensor([1.0])
    assert {a: "a", b: "b"}[b] == "b"                # (by identity: __eq__ is elementwise)


@pytest.mark.parametrize("method,dtype", [("long", np.int64), ("int", np.int32),
                                          ("double", np.float64), ("bool", np.bool_),
                                          ("float", np.float32)])
def test_casts_are_torchs(method, dtype):
    data = np.array([-1.7, 0.0, 2.5], np.float32)
    for source in (data, data.astype(np.int64)):
        ours, theirs = getattr(L.tensor(source), method)(), getattr(torch.tensor(source), method)()
        assert ours.dtype == dtype
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    x = L.tensor(data, requires_grad=True)
    assert x.to(np.int64).dtype == np.int64 and not x.to(np.int64).requires_grad
    assert x.to(dtype=np.dtype("int64")).dtype == np.int64


def test_grad_mode_blocks_and_decorators_are_torchs():
    def gen():
        yield L.is_grad_enabled()
        yield L.is_grad_enabled()
        return "done"

    assert list(L.no_grad()(gen)()) == [False, False]       # (each resume, as torch's)
    assert list(L.no_grad(gen)()) == [False, False]         # (bare @no_grad)
    assert L.is_grad_enabled()
    with L.no_grad():
        with L.enable_grad():
            assert L.is_grad_enabled()
        assert not L.is_grad_enabled()
        assert list(L.enable_grad()(gen)()) == [True, True]
    L.set_grad_enabled(False)
    assert not L.is_grad_enabled()
    L.set_grad_enabled(True)
    with L.set_grad_enabled(False):
        assert not L.is_grad_enabled()
    assert L.is_grad_enabled()

    @L.set_grad_enabled(False)
    def off():
        return L.is_grad_enabled()
    assert L.is_grad_enabled() and off() is False and L.is_grad_enabled()
    with L.inference_mode():
        assert not L.is_grad_enabled()
    with L.no_grad(), L.inference_mode(False):
        assert L.is_grad_enabled()                          # (torch's: grad mode is not mode)
    assert list(L.inference_mode(gen)()) == [False, False] and L.is_grad_enabled()


@pytest.mark.parametrize("device", ["cpu"] + DEVICES)
def test_tensor_copies_and_as_tensor_shares_as_torchs(where):
    """torch.tensor copies its data (a later change to the source is not the tensor's; a tensor
    of a leaf is not a way to change the leaf); torch.as_tensor shares it where it can."""
    source = L.tensor([1.0, 2.0], device=where).data
    copied, shared = L.tensor(source), L.as_tensor(source)
    source[0] = 7.0
    assert copied.tolist() == [1.0, 2.0] and shared.tolist() == [7.0, 2.0]
    leaf = L.tensor([1.0, 2.0], device=where, requires_grad=True)
    other = L.tensor(leaf)
    other += 1
    assert leaf.tolist() == [1.0, 2.0] and not other.requires_grad
    t = torch.zeros(2)
    from_torch = L.tensor(t)
    t[0] = 5.0
    assert from_torch.tolist() == [0.0, 0.0]
    assert L.as_tensor(shared) is shared


@pytest.mark.parametrize("device", ["cpu"] + DEVICES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gradients_add_up_in_torchs_order(where, dtype):
    """A tensor read by three ops gets its gradient's parts in the order torch adds them: the op
    recorded last first. In half precision the order shows: 1 + 1e-4 - 1 is 0 there and
    1e-4 as (1 - 1) + 1e-4, so each of the six orders of recording gives torch's bits."""
    import itertools
    scales = {"one": 1.0, "small": 1e-4 if dtype == "float16" else 1e-3, "minus": -1.0}
    seen = set()
    for order in itertools.permutations(scales):
        x = L.ones(3, dtype=getattr(L, dtype), device=where, requires_grad=True)
        tx = torch.ones(3, dtype=getattr(torch, dtype), requires_grad=True)
        ys = {name: x * scales[name] for name in order}
        tys = {name: tx * scales[name] for name in order}
        (ys["one"].sum() + ys["small"].sum() + ys["minus"].sum()).backward()
        (tys["one"].sum() + tys["small"].sum() + tys["minus"].sum()).backward()
        np.testing.assert_array_equal(x.grad.float().numpy(), tx.grad.float().numpy(),
                                      err_msg=f"recorded in the order {order}")
        seen.add(float(tx.grad[0]))
    assert seen == {0.0, float(torch.tensor(scales["small"], dtype=getattr(torch, dtype)))}


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("device", ["cpu"] + DEVICES)
def test_a_leafs_gradient_parts_are_summed_before_they_meet_its_grad(where, create_graph):
    """torch sums a leaf's parts first and adds the sum into an existing .grad once: in float16
    1 + (6e-4 + 6e-4) is 1.00098 where (1 + 6e-4) + 6e-4 is 1.00195 (create_graph too)."""
    x = L.ones(2, dtype=L.float16, device=where, requires_grad=True)
    tx = torch.ones(2, dtype=torch.float16, requires_grad=True)
    for t, lib in ((x, L), (tx, torch)):
        t.grad = lib.ones(2, dtype=t.dtype, device=where if lib is L else None)
        (t * 6e-4 + t * 6e-4).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.float().numpy(), tx.grad.float().numpy())
    assert float(tx.grad[0]) == float(np.float16(1) + np.float16(np.float16(6e-4) * 2))

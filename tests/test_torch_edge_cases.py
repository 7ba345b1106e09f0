"""Where a fuzz against torch found this engine's answer wrong, each case against torch CPU:
ints mixed with index arrays (torch selects the ints first), permute of an identity order, std's
gradient where the deviation is 0, the divisor's gradient at float32's range, a float divided by
an integer 0, dim=[], requires_grad turned off on a non-leaf, comparisons in torch's promoted
dtype, the other augmented assignments in place, max / min of a 0-d tensor along its axis,
nll_loss with -inf in classes not picked, clip_grad_norm_'s other norm types, a module used in
two places, and smaller spellings (nn.Linear(0, n), Dropout's checks, LSTM.flatten_parameters)."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

from like_torch import assert_like_torch

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
A = np.arange(24.0).reshape(2, 3, 4)

INDEXES = {
    "int_slice_list": lambda v: v[0, :, [1, 2, 2]],       # (NumPy: the list's axis first)
    "ellipsis_int_list": lambda v: v[..., 1, [0, 2]],
    "list_slice_int": lambda v: v[[0, 1], :, 0],
    "int_newaxis_list": lambda v: v[1, None, :, [0, 3]],
    "list_int_list": lambda v: v[[1, 0], 0, [1, 2]],
    "int_mask": lambda v: v[0, [True, False, True]],
    "negative_int_2d_array": lambda v: v[-1, :, np.array([[0, 1], [2, 3]])],
    "0d_tensor_slice_list": lambda v: v[(L if isinstance(v, L.Tensor) else torch).tensor(1), :,
                                        [3, 0]],
    "0d_tensor_where_the_data_is": lambda v: v[
        L.tensor(1, device=v.device) if isinstance(v, L.Tensor) else torch.tensor(1), :, [3, 0]],
    "bool_scalar_int_list": lambda v: v[True, 0, [1, 2]],        # (True: an axis, none taken)
    "nested_bool_list_int": lambda v: v[[[True, False, True], [False, True, False]], 0],
    "int_slice_tuple": lambda v: v[0, :, (1, 2)],               # (a tuple inside: a sequence)
}


@pytest.mark.parametrize("case", list(INDEXES))
@pytest.mark.parametrize("device", DEVICES)
def test_ints_mixed_with_index_arrays_select_first_as_torchs(where, case):
    assert_like_torch(INDEXES[case], A, where, rtol=1e-15)


@pytest.mark.parametrize("device", DEVICES)
def test_assignment_through_ints_mixed_with_an_index_array_is_torchs(where):
    x, tx = L.tensor(A.copy(), device=where), torch.tensor(A.copy())
    value = np.arange(6.0).reshape(3, 2) + 100
    x[0, :, [1, 2]] = L.tensor(value, device=where)
    tx[0, :, [1, 2]] = torch.tensor(value)
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    x[True, 1, [0, 2]] = -1.0
    tx[True, 1, [0, 2]] = -1.0
    x[L.tensor(1, device=where), :, [2]] = -2.0
    tx[torch.tensor(1), :, [2]] = -2.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_permute_is_always_a_permutation():
    x, tx = L.tensor(A[0]), torch.tensor(A[0])
    for dims in ((0, 1), (-2, -1), (1, 0), ((1, 0),)):
        np.testing.assert_array_equal(x.permute(*dims).numpy(), tx.permute(*dims).numpy())
    with pytest.raises(TypeError, match="dims"):
        x.permute()                                  # (torch: dims required, not a reversal)


@pytest.mark.parametrize("device", DEVICES)
def test_std_of_constant_data_has_a_zero_gradient_as_torchs(where):
    data = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    x = L.Tensor(L.tensor(data, device=where).data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    x.std(dim=1).sum().backward()
    tx.std(dim=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_the_divisors_gradient_stays_in_float32s_range(where):
    a, b = np.array([1e20, 1e-25, 3.0], np.float32), np.array([1e20, 1e-25, 1e-20], np.float32)
    x = L.Tensor(L.tensor(a, device=where).data, requires_grad=True)
    y = L.Tensor(L.tensor(b, device=where).data, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (x / y).sum().backward()
    (tx / ty).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-6)  # (-1e-20, -1e25, -inf)


def test_a_float_divided_by_an_integer_zero_is_inf_or_nan_and_integers_still_refuse():
    x, tx = L.tensor([3.0, -1.0]), torch.tensor([3.0, -1.0])
    np.testing.assert_array_equal((x % 0).numpy(), (tx % 0).numpy())
    np.testing.assert_array_equal((x // 0).numpy(), (tx // 0).numpy())
    np.testing.assert_array_equal((5.0 // L.tensor([0, 2])).numpy(),
                                  (5.0 // torch.tensor([0, 2])).numpy())
    with pytest.raises(ZeroDivisionError):
        L.tensor([3, -1]) % 0
    with pytest.raises(ZeroDivisionError):
        L.tensor([3, -1]) // L.tensor([1, 0])


def test_dim_as_an_empty_list_reduces_every_axis_as_torch():
    data = np.array([[1.0, 2.0], [3.0, 5.0]])
    x, tx = L.tensor(data), torch.tensor(data, dtype=torch.float32)
    for name in ("sum", "mean", "amax", "var", "std"):
        np.testing.assert_allclose(getattr(x, name)(dim=[]).numpy(),
                                   getattr(tx, name)(dim=[]).numpy(), rtol=1e-6)


def test_requires_grad_is_only_turned_off_on_a_leaf():
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)          # (the gradient through y would be dropped)
    x.requires_grad_(False)
    assert not x.requires_grad


def test_comparisons_and_bitwise_ops_take_torchs_promoted_dtype():
    pairs = [(lambda m: m.tensor([16777217]) == m.tensor([16777216.0])),     # (in float32)
             (lambda m: m.tensor([0.1]) == m.tensor(0.1, dtype=m.float64)),  # (0-d: no widening)
             (lambda m: m.tensor([1, 2], dtype=m.int8) < m.tensor(2.5)),
             (lambda m: m.tensor([1, 6], dtype=m.int8) & m.tensor(3)),
             (lambda m: m.tensor([1, 6], dtype=m.uint8) | m.tensor(1, dtype=m.int8))]
    for pair in pairs:
        ours, theirs = pair(L), pair(torch)
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_other_augmented_assignments_change_the_tensor_in_place():
    results = []
    for lib in (L, torch):
        x = lib.tensor([1, 5, 7])
        alias = x
        x //= 2
        x %= 2
        b = lib.tensor([1.0, 2.0])
        b_alias = b
        b **= 2
        m = lib.tensor([True, False])
        m_alias = m
        m |= lib.tensor([False, True])
        m ^= lib.tensor([True, True])
        m &= lib.tensor([True, False])
        results.append([np.asarray(t.numpy()).tolist() for t in (alias, b_alias, m_alias)])
    assert results[0] == results[1]
    with pytest.raises(ZeroDivisionError):
        y = L.tensor([1, 2])
        y //= 0


def test_max_and_min_of_a_0d_tensor_along_its_axis_as_torch():
    for name, dim in (("max", 0), ("min", -1)):
        values, indices = getattr(L.tensor(3.0), name)(dim)
        tv, ti = getattr(torch.tensor(3.0), name)(dim)
        assert (values.item(), indices.item(), indices.dtype) == (tv.item(), ti.item(), np.int64)


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_reads_only_each_items_class_as_torch(where):
    logp = np.array([[0.0, -np.inf, -np.inf], [np.log(0.5), np.log(0.5), -np.inf],
                     [-np.inf, -1.0, -2.0]])
    target = np.array([0, 1, 0])
    for kwargs in (dict(reduction="none"), dict(), dict(ignore_index=0),
                   dict(ignore_index=0, reduction="none")):
        x = L.Tensor(L.tensor(logp, device=where).data, requires_grad=True)
        tx = torch.tensor(logp, requires_grad=True)
        loss = F.nll_loss(x, L.tensor(target, device=where), **kwargs)
        tl = torch.nn.functional.nll_loss(tx, torch.tensor(target), **kwargs)
        np.testing.assert_array_equal(loss.numpy(), tl.detach().numpy())
        if kwargs.get("ignore_index") == 0:
            loss.sum().backward()
            tl.sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("norm_type", [0, -float("inf"), "inf", np.float64(2.0), 1, 3, 0.5,
                                       float("inf")])
def test_clip_grad_norm_takes_every_norm_type_as_torch(norm_type):
    grads = (np.array([0.0, 2.0, -3.0], np.float32), np.array([0.5, -1.0], np.float32))
    ours = [L.tensor(np.ones_like(g), requires_grad=True) for g in grads]
    theirs = [torch.ones(len(g), requires_grad=True) for g in grads]
    for p, t, g in zip(ours, theirs, grads):
        p.grad, t.grad = L.tensor(g.copy()), torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, 1.0, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type=norm_type)
    assert total.dtype == np.float32
    np.testing.assert_allclose(total.numpy(), expected.numpy(), rtol=1e-6)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_a_module_used_twice_is_listed_once_as_torchs():
    def build(lib):
        bn = lib.BatchNorm1d(2)
        return lib.Sequential(lib.Linear(2, 2), bn, lib.ReLU(), bn)
    ours, theirs = build(nn), build(torch.nn)

    def names(pairs):
        return [name for name, _ in pairs]
    assert names(ours.named_modules()) == names(theirs.named_modules()) == ["", "0", "1", "2"]
    assert names(ours.named_modules(remove_duplicate=False)) == \
        names(theirs.named_modules(remove_duplicate=False))
    assert names(ours.named_buffers()) == names(theirs.named_buffers())
    assert names(ours.named_parameters(remove_duplicate=False)) == \
        names(theirs.named_parameters(remove_duplicate=False))
    assert names(ours[0].named_parameters(recurse=False)) == \
        names(theirs[0].named_parameters(recurse=False))
    assert len(list(ours.children())) == len(list(theirs.children())) == 3
    assert list(ours.state_dict()) == list(theirs.state_dict())     # (repeats kept there)
    visited, theirs_visited = [], []
    ours.apply(lambda m: visited.append(type(m).__name__))
    theirs.apply(lambda m: theirs_visited.append(type(m).__name__))
    assert visited == theirs_visited


def test_smaller_spellings_torch_code_uses():
    linear = nn.Linear(0, 3)                       # (torch: a no-op initialisation)
    assert linear.weight.shape == (3, 0) and np.all(linear.bias.numpy() == 0)
    assert nn.Dropout(0.2, inplace=False).p == 0.2
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    lstm = nn.LSTM(3, 4)
    assert lstm.flatten_parameters() is None


# ---- found by a review of the new math ----------------------------------------------------------

def test_a_negative_norm_of_a_slice_holding_a_zero_has_a_zero_gradient():
    for p in (-1.0, -2.0, -0.5):
        x = L.tensor([[0.0, 2.0, 3.0], [1.0, 2.0, 4.0]], requires_grad=True)
        tx = torch.tensor([[0.0, 2.0, 3.0], [1.0, 2.0, 4.0]], requires_grad=True)
        x.norm(p, dim=1).sum().backward()
        tx.norm(p, dim=1).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_empty_dims_and_empty_axes_reduce_as_torch():
    data = np.arange(6.0).reshape(2, 3)
    x, tx = L.tensor(data), torch.tensor(data)
    for dim in ((), []):
        assert x.norm(1, dim=dim).item() == tx.norm(1, dim=dim).item() == 15.0
        np.testing.assert_allclose(x.logsumexp(dim, keepdim=True).numpy(),
                                   torch.logsumexp(tx, (0, 1), keepdim=True).numpy())
    for shape, dim in (((2, 0), 1), ((0, 3), 0)):
        np.testing.assert_array_equal(L.zeros(*shape).logsumexp(dim).numpy(),
                                      torch.zeros(*shape).logsumexp(dim).numpy())   # (-inf)


def test_dtype_given_to_cumsum_and_prod_is_the_results_and_square_of_bool_is_int64():
    data = np.arange(1, 7).reshape(2, 3)
    x, tx = L.tensor(data), torch.tensor(data)
    for dtype, tdtype in ((L.int32, torch.int32), (L.int16, torch.int16),
                          (L.float64, torch.float64)):
        for ours, theirs in ((x.cumsum(0, dtype=dtype), tx.cumsum(0, dtype=tdtype)),
                             (x.prod(1, dtype=dtype), tx.prod(1, dtype=tdtype))):
            assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    square = L.tensor([True, False]).square()
    assert square.dtype == np.int64 and square.numpy().tolist() == [1, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_products_over_an_empty_inner_or_outer_axis(where):
    linear = nn.Linear(0, 3).to(where)
    x = L.Tensor(L.zeros(2, 0, device=where).data, requires_grad=True)
    y = linear(x)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(linear.bias.numpy(), (2, 3)))
    assert linear.weight.grad.shape == (3, 0) and np.all(linear.bias.grad.numpy() == 2)
    for a, b in (((2, 3, 0), (2, 0, 3)), ((2, 0, 3), (2, 3, 4))):
        out = L.bmm(L.zeros(*a, device=where), L.zeros(*b, device=where))
        assert out.shape == (a[0], a[1], b[2]) and not np.any(out.numpy())


@pytest.mark.parametrize("dtype, tdtype", [(np.float16, torch.float16),
                                            (L.bfloat16, torch.bfloat16)])
def test_clip_grad_norm_gives_the_norm_in_the_gradients_dtype(dtype, tdtype):
    p = L.Tensor(np.ones(3).astype(dtype), requires_grad=True)
    p.grad = L.Tensor(np.array([0.0, 2.0, -3.0]).astype(dtype))
    t = torch.ones(3, dtype=tdtype, requires_grad=True)
    t.grad = torch.tensor([0.0, 2.0, -3.0], dtype=tdtype)
    total, expected = nn.utils.clip_grad_norm_([p], 1.0), torch.nn.utils.clip_grad_norm_([t], 1.0)
    assert total.dtype == dtype and float(total.item()) == expected.item()


def test_clip_grad_norm_refuses_a_non_finite_norm_when_asked_before_changing_anything():
    p = L.tensor(np.ones(2), requires_grad=True)
    p.grad = L.tensor([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, 2.0, True)      # (torch's fourth: error_if_nonfinite)
    assert p.grad.numpy().tolist() == [np.inf, 1.0]


def test_running_sums_and_products_refuse_dtype_bool_as_torch():
    for name in ("cumsum", "cumprod"):
        with pytest.raises(NotImplementedError):
            getattr(torch, name)(torch.tensor([True, False]), 0, dtype=torch.bool)
        with pytest.raises(NotImplementedError, match=f"{name}: not implemented for dtype bool"):
            getattr(L, name)(L.tensor(np.array([True, False])), 0, dtype=bool)


def test_cumsum_of_a_0d_tensor_keeps_dtype_and_clip_grad_norm_of_mixed_dtypes_is_torchs():
    assert L.cumsum(L.tensor(np.int32(5)), 0, dtype=np.int32).dtype == np.int32
    assert L.cumsum(L.tensor(True), 0, dtype=np.int16).dtype == np.int16
    ours = [L.tensor(np.ones(2, np.float32), requires_grad=True),
            L.tensor(np.ones(2), requires_grad=True)]
    theirs = [torch.ones(2, requires_grad=True),
              torch.ones(2, dtype=torch.float64, requires_grad=True)]
    for p, t, g in zip(ours, theirs, ([3.0, 4.0], [1.0, 1e-9])):
        p.grad = L.tensor(np.array(g, dtype=p.dtype))
        t.grad = torch.tensor(g, dtype=t.dtype)
    total = nn.utils.clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert total.dtype == np.float64 and total.item() == expected.item()   # (the widest)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-7)


@pytest.mark.parametrize("device", ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"])
def test_atan2_and_bincount_are_torchs(where):
    """atan2 of every quadrant, the axes and broadcasting, values and both gradients (integers
    as float32); bincount with and without weights, minlength, and its refusals."""
    import torch
    a = np.array([[1.0, -1.0, 0.0, 2.5], [-3.0, 0.5, -0.0, 1e-3]])
    b = np.array([0.7, -2.0, 1.5, -0.25])
    x, y = L.tensor(a, device=where, requires_grad=True), L.tensor(b, device=where,
                                                                 requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    z, tz = L.atan2(x, y), torch.atan2(tx, ty)
    np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-15, atol=0)
    z.sum().backward()
    tz.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-14)
    ints = L.tensor(np.array([1, -2]), device=where).atan2(L.tensor(np.array([3, 4]),
                                                                   device=where))
    assert ints.dtype == np.float32
    idx = np.array([1, 3, 1, 0, 3, 3])
    w = np.array([0.5, 1.0, 2.0, -1.0, 0.25, 4.0])
    for kw, tkw in (({}, {}), ({"minlength": 7}, {"minlength": 7}),
                    ({"weights": L.tensor(w, device=where)}, {"weights": torch.tensor(w)})):
        ours = L.tensor(idx, device=where).bincount(**kw)
        theirs = torch.bincount(torch.tensor(idx), **tkw)
        assert ours.dtype == theirs.numpy().dtype
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-15)
    with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral"):
        L.bincount(L.tensor(np.array([1, -1]), device=where))
    with pytest.raises(RuntimeError, match="no gradient for weights"):
        L.bincount(L.tensor(idx, device=where), L.tensor(w, device=where, requires_grad=True))

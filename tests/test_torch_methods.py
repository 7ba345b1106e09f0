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

from gpu_util import strided_like
from like_torch import assert_like_torch

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
    "var_positional": lambda v: v.var(1, False, True),        # (dim, unbiased, keepdim)
    "std_positional": lambda v: v.std(0, False),
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
    "mT": lambda v: v.reshape(3, 2, 2).mT,
    "mT_matrix": lambda v: v.mT,
    "pow_method": lambda v: v.pow(2),
    "cat_dim": lambda v: (F.cat if hasattr(v, "_ctx") else torch.cat)([v, v], dim=1),
    "stack_dim": lambda v: (F.stack if hasattr(v, "_ctx") else torch.stack)([v, v], dim=1),
    # torch's elementwise math (positive arguments for the logarithms and roots)
    **{name: (lambda v, name=name: getattr(v, name)())
       for name in ("sin", "cos", "tan", "sinh", "cosh", "atan", "expm1", "square")},
    **{name: (lambda v, name=name: getattr(v.abs() + 0.5, name)())
       for name in ("log1p", "log2", "log10", "reciprocal", "rsqrt")},
    # the inverse functions, inside their domains
    **{name: (lambda v, name=name: getattr(v / 4.5, name)()) for name in ("asin", "acos", "atanh")},
    "asinh": lambda v: _lib(v).asinh(v),
    "erf": lambda v: v.erf(),
    "erf_function": lambda v: _lib(v).erf(v * 3),
    "acosh": lambda v: (v.abs() + 1.25).acosh(),
    "logsumexp": lambda v: v.logsumexp(1),
    "logsumexp_dims_keepdim": lambda v: v.logsumexp((0, 1), keepdim=True),
    "logsumexp_function": lambda v: _lib(v).logsumexp(v * 300, dim=0),   # (exp overflows)
    "cumsum": lambda v: v.cumsum(1),
    "cumsum_first_axis": lambda v: _lib(v).cumsum(v, dim=-2),
    "cumprod": lambda v: v.cumprod(1),                    # (a 0 in rows 0 and 1: exact)
    "cumprod_first_axis": lambda v: _lib(v).cumprod(v, dim=-2),
    "cumprod_two_zeros": lambda v: v[:2, ::3].reshape(-1).cumprod(0),
    "cumprod_zero_first": lambda v: v[:2, ::3].flip(0).cumprod(0),
    "cumprod_inf_past_zeros": lambda v: _lib(v).cat(                 # (1.5, 1.5, 0, 2, 0, inf:
        [v[1, :2], v[0, :1], v[2, :1], v[1, 3:], 1 / v[1, 3:]]).cumprod(0),  # 0 * inf unseen)
    "cumprod_empty_axis": lambda v: v[:, :0].cumprod(1),
    "cumprod_one_inf": lambda v: (1 / v[1, 3:]).cumprod(0),          # (length 1: gy, as torch)
    "prod": lambda v: v.prod(),
    "prod_dim_zeros": lambda v: v.prod(1),                # (a 0 in rows 0 and 1: exact)
    "prod_dim_keepdim": lambda v: v.prod(0, keepdim=True),
    "prod_two_zeros": lambda v: v[:2, ::3].prod(),        # (0 twice: every gradient 0)
    "norm": lambda v: v.norm(),
    "norm_dim": lambda v: v.norm(dim=1),
    "norm_p1": lambda v: v.norm(p=1, dim=0, keepdim=True),
    "norm_p3": lambda v: v.norm(p=3, dim=1),
    "norm_p_half_zeros": lambda v: v.norm(p=0.5, dim=1),  # (|x|^-0.5 at 0: masked, as torch)
    "norm_inf_ties": lambda v: v.norm(p=float("inf"), dim=1),    # (4.0, 1.5 twice, ...)
    "norm_minus_inf": lambda v: v.norm(p=-float("inf"), dim=0),
    "norm_of_zeros": lambda v: (v * 0).norm(dim=0),       # (0: gradient 0, as torch)
    "normalize": lambda v: _lib(v, F, torch.nn.functional).normalize(v, dim=0),
    "tril": lambda v: v.tril(),
    "triu_offset": lambda v: v.triu(-1),
    "roll": lambda v: v.roll(1, 1),
    "roll_dims": lambda v: v.roll((2, -5), (0, 1)),
    "roll_flat": lambda v: v.roll(5),
    "bmm": lambda v: v.reshape(2, 3, 2).bmm(v.reshape(2, 2, 3)),
    # torch's composite spellings (layers.functional's, made of the ops above)
    "addcmul": lambda v: v.addcmul(v * 2, v.flip(0), value=0.5),
    "addcmul_function": lambda v: _lib(v).addcmul(v, v, v + 1),
    "addcdiv": lambda v: v.addcdiv(v, v * v + 1, value=-2),
    "lerp": lambda v: v.lerp(v.flip(1), 0.3),
    "lerp_numpy_weight": lambda v: _lib(v).lerp(v, v.flip(0), np.float32(0.75)),
    "lerp_tensor_weight": lambda v: _lib(v).lerp(v, v * 3, (v.abs() + 1).reciprocal()),
    "hypot": lambda v: v.hypot(v + 0.25),
    "clip": lambda v: v.clip(-1, 2),
    "swapaxes": lambda v: v.reshape(3, 2, 2).swapaxes(0, 2),
    "swapdims_function": lambda v: _lib(v).swapdims(v, 1, 0),
    "movedim": lambda v: v.reshape(3, 2, 2).movedim(0, -1),
    "moveaxis_many": lambda v: _lib(v).moveaxis(v.reshape(3, 2, 2), (0, 1), (2, 0)),
    "tile": lambda v: v.tile((2,)),
    "tile_more_dims": lambda v: _lib(v).tile(v, (2, 1, 2)),
    "nansum": lambda v: (v - 0.1).log().nansum(1),          # (NaN where v < 0.1: gradient 0)
    "nanmean": lambda v: _lib(v).nanmean((v - 0.1).log(), 0),
    "dot": lambda v: v[0].dot(v[1]),
    "addmm": lambda v: _lib(v).addmm(v[0, :3], v[:, :3].T, v[:, 1:], beta=0.5, alpha=2),
    "addmm_beta_0": lambda v: v[:, :2].addmm(v[:, :3], v[:, 2:], beta=0),
    "addmm_beta_0_nan_input": lambda v: _lib(v).full(          # (beta 0: input's NaN unseen)
        (3, 2), float("nan"), dtype=v.dtype, device=v.device).addmm(v[:, :3], v[:, 2:], beta=0),
    "addmv": lambda v: _lib(v).addmv(v[:, 0], v[:, 1:], v[0, 1:], alpha=-1),
    "baddbmm": lambda v: _lib(v).baddbmm(v[:1, :3], v.reshape(2, 3, 2), v.reshape(2, 2, 3),
                                         beta=2),
    "addbmm": lambda v: v[:3, :3].addbmm(v.reshape(2, 3, 2), v.reshape(2, 2, 3), alpha=0.5),
    "exp2": lambda v: v.exp2(),
    "frac": lambda v: (v * 1.3).frac(),
    "var_mean": lambda v: (lambda r: r[0] * 2 + r[1])(_lib(v).var_mean(v, 1)),
    "std_mean": lambda v: (lambda r: r[0] * 2 + r[1])(_lib(v).std_mean(v, 0, keepdim=True)),
    "unflatten": lambda v: v.unflatten(1, (2, 2)),
    "diff": lambda v: v.diff(),
    "diff_twice_prepended": lambda v: _lib(v).diff(v, n=2, dim=0, prepend=v[:1] * 3),
    "masked_select": lambda v: v.masked_select(v > 0),
    "masked_select_broadcast": lambda v: v.masked_select((v > 0)[:1]),
    "index_fill": lambda v: v.index_fill(1, _index(v, [0, 2]), -1.5),
    "index_fill_0d_value": lambda v: v.index_fill(0, _index(v, [1]), _lib(v).tensor(
        2.5, dtype=v.dtype, device=v.device)),
    "index_add": lambda v: v.index_add(0, _index(v, [2, 0, 2]), v.flip(1) * 2, alpha=0.5),
    "index_copy": lambda v: v.index_copy(1, _index(v, [3, 0]), v[:, 1:3] * 2),
    "select": lambda v: v.select(1, -1),
    "where_method": lambda v: v.where(v > 0, v * 2),
    # order statistics and selections (distinct values where a tie would pick an index)
    "median": lambda v: _distinct(v).median(),
    "median_ties_share_the_gradient": lambda v: (v * 2).median(),       # (0 twice: half each)
    "median_nan_ties": lambda v: (v + _lib(v).where(v > 2.5, float("nan"), 0.0)).median(),
    "median_dim": lambda v: _distinct(v).median(1).values,
    "median_dim_keepdim_function": lambda v: _lib(v).median(_distinct(v), 0, keepdim=True)[0],
    "median_with_nan": lambda v: _lib(v).where(v > 3.5, v / 0 * 0, v).median(1).values,
    "kthvalue": lambda v: _distinct(v).kthvalue(2, 0).values,
    "kthvalue_keepdim": lambda v: _lib(v).kthvalue(_distinct(v), 4, dim=1, keepdim=True)[0],
    "aminmax": lambda v: (lambda r: r.min * 2 + r.max)(_lib(v).aminmax(_distinct(v), dim=1)),
    "fmax": lambda v: v.fmax(v.flip(0)),
    "fmin_function": lambda v: _lib(v).fmin(v, v.flip(1) * 0.5),
    "fmax_nan": lambda v: _lib(v).fmax(_lib(v).where(v > 2.5, v / 0 * 0, v),
                                       _lib(v).where(v < -1.5, v / 0 * 0, v.flip(0))),
    "take_along_dim": lambda v: _lib(v).take_along_dim(v, _index(v, [[0], [3], [1]]), 1),
    "take_along_dim_broadcast": lambda v: v.take_along_dim(_index(v, [[2, 0, 1, 1]]), 0),
    "take_along_dim_broadcast_input": lambda v: _lib(v).take_along_dim(
        v[:1], _index(v, [[0, 3], [1, 1], [2, 0]]), 1),
    "take_along_dim_flat": lambda v: _lib(v).take_along_dim(v, _index(v, [11, 0, 5])),
    "diag_of_matrix": lambda v: v.diag(),
    "diag_offsets": lambda v: v.diag(1) * 2 + v.diag(-1).sum(),
    "diag_of_vector": lambda v: v[0].diag(),
    "diag_of_vector_offset": lambda v: _lib(v).diag(v[1], -2),
    # more top-level spellings
    "subtract_alpha": lambda v: _lib(v).subtract(v, v.flip(0), alpha=2),
    "rsub": lambda v: _lib(v).rsub(v, v * 3, alpha=0.5),
    "rsub_number": lambda v: _lib(v).rsub(v, 2.0),
    "multiply_divide": lambda v: v.multiply(v).divide(v.abs() + 1) - v.true_divide(3),
    "negative_positive": lambda v: _lib(v).negative(v) * 2 + _lib(v).positive(v),
    "clamp_min_max": lambda v: v.clamp_min(-1) * 2 + _lib(v).clamp_max(v, 1.5),
    "deg2rad_rad2deg": lambda v: v.deg2rad() + _lib(v).rad2deg(v) / 100,
    "ravel_msort": lambda v: v.ravel() * 2 + _lib(v).msort(_distinct(v)).ravel(),
    "atleast": lambda v: _lib(v).atleast_2d(v[0])[0] + _lib(v).atleast_3d(v)[..., 0].sum(0)
    + _lib(v).atleast_1d(v[0, 0]),
    "hstack": lambda v: _lib(v).hstack([v, v * 2]),
    "hstack_vectors": lambda v: _lib(v).hstack((v[0], v[1])),
    "vstack": lambda v: _lib(v).vstack([v[0], v]),
    "row_stack": lambda v: _lib(v).row_stack([v[1], v[2] * 3]),
    "dstack": lambda v: _lib(v).dstack([v, v.flip(1)]),
    "column_stack": lambda v: _lib(v).column_stack([v[0], v.T]),
    "broadcast_to": lambda v: v[:1].broadcast_to((2, 3, 4)),
    "broadcast_tensors": lambda v: (lambda a, b: a * b)(*_lib(v).broadcast_tensors(v[:, :1], v[0])),
    "meshgrid_ij": lambda v: (lambda a, b: a * b + a)(*_lib(v).meshgrid(v[0], v[1, :3], indexing="ij")),
    "meshgrid_xy": lambda v: (lambda a, b, c: a * b * c)(*_lib(v).meshgrid(
        v[0], v[1, :3], v[2, :2], indexing="xy")),
    "kron": lambda v: _lib(v).kron(v[:2, :2], v[1:, 1:]),
    "kron_ranks": lambda v: v[0].kron(v[:2]),
    "tensordot": lambda v: _lib(v).tensordot(v.reshape(3, 2, 2), v.reshape(2, 2, 3), dims=2),
    "tensordot_lists": lambda v: _lib(v).tensordot(v, v.reshape(4, 3), dims=([1, 0], [0, 1])),
    "rot90": lambda v: v.rot90() * 2 + v.rot90(2).sum() + v.rot90(3, (1, 0)).sum(0)[0],
    "rot90_3d": lambda v: _lib(v).rot90(v.reshape(3, 2, 2), -1, (0, 2)),
    "logaddexp": lambda v: v.logaddexp(v.flip(0) * 300),
    "logaddexp2": lambda v: _lib(v).logaddexp2(v, v.flip(1) * 2),
    "xlogy": lambda v: _lib(v).xlogy(v, v.abs() + 0.5),
    "xlogy_zeros": lambda v: (v * 0).xlogy(v.abs() + 1) + _lib(v).xlogy(2.0, v.abs() + 1)
    + (v * 0).xlogy(v.detach() * 0),
    "sinc": lambda v: v.sinc(),
    "nan_to_num": lambda v: (v / (v * 0)).nan_to_num(1.5, 3.0, -4.0) + v,
    "nan_to_num_defaults": lambda v: _lib(v).nan_to_num(_lib(v).where(v > 2.5, v / 0, v)),
    "dist": lambda v: v.dist(v.flip(0), 3) + _lib(v).dist(v, v * 2),
    "trace": lambda v: v[:, :3].trace(),
    "permute_function": lambda v: _lib(v).permute(v.reshape(3, 2, 2), (2, 0, 1)),
    # more top-level spellings and methods
    "mm": lambda v: _lib(v).mm(v[:, :3].T, v[:, 1:]),
    "mv": lambda v: _lib(v).mv(v, v[0]) + v[:, :3].mv(v[1, 1:]),
    "inner": lambda v: _lib(v).inner(v, v[:2]),
    "inner_vectors_and_0d": lambda v: v[0].inner(v[1]) + _lib(v).inner(v[0, 2], v).sum(),
    "vdot": lambda v: v[0].vdot(v[2]),
    "inner_nothing_contracted": lambda v: _lib(v).inner(v[:2, :0], v[:, :0]) + v[:2, :3],
    "cross": lambda v: _lib(v).cross(v[:, :3], v[:, 1:], dim=1),
    "cross_dim0_broadcast": lambda v: v[:, :2].cross(v[:, 2:], dim=0) + _lib(v).cross(
        v[:, 1:], v[:1, :3], dim=-1)[:, :2],
    "fliplr_flipud": lambda v: v.fliplr() * 2 + _lib(v).flipud(v),
    "tensor_split": lambda v: _lib(v).cat([p * (i + 1) for i, p in
                                          enumerate(v.tensor_split(3, dim=1))], 1),
    "tensor_split_indices": lambda v: _lib(v).stack(   # (3 then 1: an empty piece, overlaps)
        [p.sum() * (i + 1) for i, p in enumerate(_lib(v).tensor_split(v, [3, 1, -1], 1))]),
    "hsplit_vsplit_dsplit": lambda v: (lambda a, b: a * 2 + b)(*v.hsplit(2)).sum(1) + _lib(
        v).vsplit(v, [1])[1].sum(0)[:3] + v.reshape(3, 2, 2).dsplit(2)[1].sum((1, 2)),
    "take": lambda v: _lib(v).take(v, _index(v, [[0, -1], [5, 5], [11, -12]])),
    "logit": lambda v: ((v.abs() + 0.5) / 6).logit(),
    "logit_eps": lambda v: _lib(v).logit(v / 4 + 0.5, eps=0.2),
    "logit_eps_past_half": lambda v: _lib(v).logit((v.abs() + 0.5) / 6, eps=0.6),
    "logit_at_0_and_1": lambda v: (v / 4 + 0.5)[:, :2].logit(),   # (0 and 1: infinite gradients)
    "fix_sgn_absolute": lambda v: v.fix() + _lib(v).sgn(v) * 2 + v + _lib(v).absolute(v),
    "float_power": lambda v: (v.abs() + 0.5).float_power(1.5) + _lib(v).float_power(2.0, v),
    "copysign": lambda v: v.copysign(v.flip(0)) + _lib(v).copysign(v, -0.0) * 3,
    "trapezoid": lambda v: _lib(v).trapezoid(v) + _lib(v).trapezoid(v, dx=0.5, dim=0)[:3],
    "trapezoid_x": lambda v: _lib(v).trapezoid(v, v[0] * v[0] + 1) + _lib(v).trapezoid(
        v, v.flip(0) * 2, dim=0)[:3],
    "trapezoid_x_fewer_axes": lambda v: _lib(v).trapezoid(v.reshape(2, 3, 2), v[0, :3] * 3,
                                                          dim=1).sum(1)[:1]
    + _lib(v).trapezoid(v.reshape(2, 3, 2), (v * v)[:, :2], dim=1)[0],
    "cartesian_prod": lambda v: _lib(v).cartesian_prod(v[0, :2], v[1, :3], v[2, 2:]),
    "block_diag": lambda v: _lib(v).block_diag(v[:2, :2], v[2, :3], v[0, 2]),
    "cdist": lambda v: _lib(v).cdist(v[:2], v[1:]),            # (row 1 twice: distance 0)
    "cdist_p1_batched": lambda v: _lib(v).cdist(v.reshape(2, 3, 2), v.reshape(2, 3, 2).flip(1),
                                                p=1),
}


def _distinct(v):
    """v with its ties broken (A's values plus a distinct small offset each)."""
    return v + _lib(v).arange(12, dtype=v.dtype, device=v.device).reshape(3, 4) * 1e-3


def _index(v, values):
    """An int64 index on v's device, of v's library."""
    return _lib(v).tensor(values, device=v.device)


def _lib(v, ours=L, theirs=torch):
    """The module of v's library: layers (or F) for a layers Tensor, torch's for torch's."""
    return ours if isinstance(v, L.Tensor) else theirs


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_a_torch_method_gives_torchs_values_and_gradients(where, case):
    y = assert_like_torch(CASES[case], A, where, rtol=1e-13, atol=1e-13)
    assert y.dtype == np.float64


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


@pytest.mark.parametrize("device", DEVICES)
def test_counts_comparisons_casts_and_attributes_are_torchs(where):
    """The composite spellings that give integers, bools or numbers, and the attribute methods,
    as torch's; their refusals with torch's kind of error."""
    x, tx = L.tensor(A, device=where), torch.tensor(A)
    for ours, theirs in ((x.count_nonzero(), tx.count_nonzero()),
                         (x.count_nonzero(1), tx.count_nonzero(1)),
                         (L.count_nonzero(x, dim=0), torch.count_nonzero(tx, dim=0)),
                         (x.isclose(x + 1e-9), tx.isclose(tx + 1e-9)),
                         (L.isclose(x, x * 1.1, rtol=0.05), torch.isclose(tx, tx * 1.1, rtol=0.05)),
                         (x.argwhere(), tx.argwhere()), (L.argwhere(x > 1), torch.argwhere(tx > 1)),
                         (x.short(), tx.short()), (x.byte(), tx.byte()), (x.char(), tx.char()),
                         ((x > 0).bitwise_and(x < 3), (tx > 0).bitwise_and(tx < 3)),
                         ((x > 0).bitwise_not(), (tx > 0).bitwise_not())):
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert x.equal(x.clone()) and not x.equal(x[:2]) and not L.equal(x, x + 1)
    assert x.element_size() == tx.element_size() and x.nelement() == tx.nelement()
    assert x.ndimension() == 2 and x.nbytes == tx.nbytes and x.itemsize == tx.itemsize
    t = x.reshape(3, 2, 2).transpose(0, 2)
    assert t.stride() == tx.reshape(3, 2, 2).transpose(0, 2).stride() and t.stride(-1) == 4
    assert x.data_ptr() == x.data_ptr() and x[1].data_ptr() - x.data_ptr() == 32
    for call in (lambda m, v: v.dot(v), lambda m, v: v[0].dot(v[1].float()),
                 lambda m, v: v[0].dot(v[1, :3]), lambda m, v: v.movedim((0, 1), (1, 1)),
                 lambda m, v: v.addmm(v, v.T), lambda m, v: v.masked_select(v),
                 lambda m, v: v.long().addcdiv(v.long(), v.long()),
                 lambda m, v: v.index_add(0, m.tensor([0]), v)):
        with pytest.raises(RuntimeError):
            call(torch, tx)
        with pytest.raises(RuntimeError):
            call(L, x)


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


NLL_TARGET = np.array([[1, 0, 4], [2, 2, -100], [0, 3, 1], [4, 4, 4]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_is_torchs(where, reduction, weighted):
    logp = np.random.default_rng(2).standard_normal((4, 5, 3))
    weight = np.linspace(0.5, 2.0, 5) if weighted else None
    x = L.Tensor(L.tensor(logp, device=where).data, requires_grad=True)
    tx = torch.tensor(logp, requires_grad=True)
    y = F.nll_loss(x, L.tensor(NLL_TARGET, device=where),
                   None if weight is None else L.tensor(weight, device=where),
                   reduction=reduction)
    ty = TF_nll(tx, torch.tensor(NLL_TARGET),
                None if weight is None else torch.tensor(weight), reduction=reduction)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-13)
    y.backward(L.tensor(np.ones(y.shape), device=where))
    ty.backward(torch.ones_like(ty))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13)


def TF_nll(*args, **kwargs):
    return torch.nn.functional.nll_loss(*args, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_and_the_small_modules_are_torchs(where):
    torch.manual_seed(0)
    x = np.random.default_rng(3).standard_normal((2, 4, 3))
    tln = torch.nn.LayerNorm((4, 3), dtype=torch.float64)
    with torch.no_grad():
        tln.weight.uniform_(0.5, 1.5)
        tln.bias.uniform_(-1, 1)
    ln = nn.LayerNorm((4, 3))
    assert list(ln.state_dict()) == list(tln.state_dict())
    ln.to(dtype=np.float64)
    ln.load_state_dict(tln.state_dict())
    ln.to(where)
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    y, ty = ln(ox), tln(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.linspace(-1, 1, y.size).reshape(y.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ln.weight.grad.numpy(), tln.weight.grad.numpy(), rtol=1e-12)
    for ours, theirs in ((nn.Identity(3, k=1), torch.nn.Identity(3, k=1)),
                         (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
                         (nn.LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1))):
        np.testing.assert_allclose(ours(L.tensor(x, device=where)).numpy(),
                                   theirs(torch.tensor(x)).numpy(), rtol=1e-13)


def test_one_hot_adamw_nn_utils_and_module_spellings_are_torchs():
    t = np.array([[0, 2], [1, 3]])
    np.testing.assert_array_equal(F.one_hot(L.tensor(t)).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor(t)).numpy())
    assert F.one_hot(L.tensor(t), 6).shape == (2, 2, 6)
    rng = np.random.default_rng(4)
    a = rng.standard_normal(6).astype(np.float32)
    p, tp = nn.Parameter(a.copy()), torch.nn.Parameter(torch.tensor(a))
    opt = L.optim.AdamW([p], lr=0.1, weight_decay=0.05)
    topt = torch.optim.AdamW([tp], lr=0.1, weight_decay=0.05)
    for _ in range(5):
        g = rng.standard_normal(6).astype(np.float32)
        p.grad, tp.grad = L.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)
    resumed = L.optim.AdamW([nn.Parameter(a.copy())])
    resumed.load_state_dict(topt.state_dict())              # (torch's decoupled_weight_decay)
    assert resumed.param_groups[0]["weight_decay"] == 0.05
    m = nn.Linear(3, 2)
    m.weight.grad = L.tensor(np.full((2, 3), 10.0, np.float32))
    norm = nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    assert norm.item() == pytest.approx(np.sqrt(6) * 10)
    assert m.requires_grad_(False) is m and not any(q.requires_grad for q in m.parameters())
    assert m.cpu() is m


@pytest.mark.parametrize("data", [np.array([3, 1, 0, 7], np.uint8), np.array([5, -128, 3, -128],
                                  np.int8), np.array([2, np.iinfo(np.int64).min, 9], np.int64)],
                         ids=lambda a: a.dtype.name)
@pytest.mark.parametrize("device", DEVICES)
def test_integer_minima_are_torchs(where, data):
    """(a minimum through -x wraps: uint8 0 and int8 -128 are their own negatives)"""
    x, tx = L.tensor(data, device=where), torch.tensor(data)
    for ours, theirs in ((x.min(), tx.min()), (x.amin(), tx.amin()), (x.argmin(), tx.argmin()),
                         (x.min(0).values, tx.min(0).values),
                         (x.min(0).indices, tx.min(0).indices)):
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_with_nothing_counted_is_nan_with_a_zero_gradient(where):
    x = L.Tensor(L.tensor(np.ones((2, 3)), device=where).data, requires_grad=True)
    loss = F.nll_loss(x, L.tensor(np.array([-100, -100]), device=where))
    loss.backward()
    tx = torch.ones((2, 3), dtype=torch.float64, requires_grad=True)
    tl = torch.nn.functional.nll_loss(tx, torch.tensor([-100, -100]))
    tl.backward()
    assert np.isnan(loss.item()) and np.isnan(tl.item())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())      # (zeros, not NaN)


def test_edge_spellings_are_torchs():
    import copy
    import pickle
    import warnings
    x = np.random.default_rng(6).standard_normal((2, 3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # (torch's implicit-dim deprecation warning)
        for shape in ((3,), (2, 3), (2, 3, 4), (1, 2, 3, 4)):
            a = x.reshape(-1)[:int(np.prod(shape))].reshape(shape)
            for ours, theirs in ((nn.Softmax(), torch.nn.Softmax()),
                                 (nn.LogSoftmax(), torch.nn.LogSoftmax())):
                np.testing.assert_allclose(ours(L.tensor(a)).numpy(),
                                           theirs(torch.tensor(a)).numpy(), rtol=1e-13)
    t = L.tensor(x)
    np.testing.assert_array_equal(t.var(0, correction=4).numpy(),      # (n - c < 0: inf)
                                  torch.tensor(x).var(0, correction=4).numpy())
    assert copy.deepcopy({"n": t.size}) == {"n": 24} and pickle.loads(pickle.dumps(t.size)) == 24
    for size in (2, 0, [0, 0], [0]):                          # (an empty dim takes 0, as torch)
        assert [p.shape for p in L.tensor(np.zeros((0, 3))).split(size)] == \
            [tuple(p.shape) for p in torch.zeros((0, 3)).split(size)]
    for size in (0, -1, [4, -1, 0]):                  # (torch refuses each; -1 made odd pieces)
        with pytest.raises(ValueError, match="split: .*(positive|negative)"):
            L.tensor(np.zeros(3)).split(size)
        with pytest.raises(RuntimeError):
            torch.zeros(3).split(size)
    with pytest.raises(ValueError, match="chunks must be positive"):
        t.chunk(0)
    with pytest.raises(RuntimeError, match="requires grad to a NumPy array"):
        np.exp(L.tensor(x, requires_grad=True))      # (it would cut the graph, silently)


GATHER = np.array([[0, 3, 3], [1, 1, 2], [2, 0, 1]])      # (repeats: gradients add)
SELECTING = {
    "gather": (lambda v: v.gather(1, L.tensor(GATHER, device=v.device)),
               lambda v: v.gather(1, torch.tensor(GATHER))),
    "gather_smaller": (lambda v: v.gather(1, L.tensor(GATHER[:2, :2], device=v.device)),
                       lambda v: v.gather(1, torch.tensor(GATHER[:2, :2]))),
    "gather_dim0": (lambda v: v.gather(0, L.tensor(GATHER[:, :2] % 3, device=v.device)),
                    lambda v: v.gather(0, torch.tensor(GATHER[:, :2] % 3))),
    "index_select": (lambda v: v.index_select(1, L.tensor([3, 0, 3], device=v.device)),
                     lambda v: v.index_select(1, torch.tensor([3, 0, 3]))),
    "sort": (lambda v: v.sort(1)[0], lambda v: v.sort(1)[0]),
    "sort_descending": (lambda v: v.sort(0, descending=True).values,
                        lambda v: v.sort(0, descending=True).values),
    "topk": (lambda v: v.topk(2, dim=1).values, lambda v: v.topk(2, dim=1).values),
    "topk_smallest": (lambda v: v.topk(2, 0, largest=False)[0],
                      lambda v: v.topk(2, 0, largest=False)[0]),
}
DISTINCT = np.array([[0.5, -2.0, 3.0, -1.0], [1.5, 2.5, -0.5, 0.0], [2.0, -1.5, 2.25, 4.0]])


@pytest.mark.parametrize("case", list(SELECTING))
@pytest.mark.parametrize("device", DEVICES)
def test_selections_and_sorts_are_torchs(where, case):
    x = L.Tensor(L.tensor(DISTINCT, device=where).data, requires_grad=True)
    tx = torch.tensor(DISTINCT, requires_grad=True)
    ours, theirs = SELECTING[case]
    y, ty = ours(x), theirs(tx)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    g = np.linspace(-1, 2, ty.numel()).reshape(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13)
    for name, kw in (("sort", dict(dim=1)), ("argsort", dict(dim=0, descending=True)),
                     ("topk", dict(k=3, dim=1))):
        got, want = getattr(x, name)(**kw), getattr(tx, name)(**kw)
        got_i = got if name == "argsort" else got[1]
        want_i = want if name == "argsort" else want[1]
        np.testing.assert_array_equal(got_i.numpy(), want_i.numpy())


def test_selection_refusals():
    x = L.tensor(DISTINCT)
    with pytest.raises(IndexError, match="gather: index 4 is out of range for 4"):
        x.gather(1, L.tensor([[4]]))
    with pytest.raises(RuntimeError, match="no larger off dim 1"):
        x.gather(1, L.tensor(np.zeros((4, 1), np.int64)))
    with pytest.raises(RuntimeError, match="topk: k \\(5\\) out of range"):
        x.topk(5)


def test_half_sorts_nan_and_empty_chunks_as_torch():
    a = np.array([3.0, np.nan, 1.0, 2.0, -1.0])
    for dtype, tdtype in ((L.backend.bfloat16, torch.bfloat16), (np.float16, torch.float16)):
        x, tx = L.tensor(a.astype(dtype)), torch.tensor(a).to(tdtype)
        for ours, theirs in ((x.sort()[1], tx.sort()[1]), (x.topk(2)[1], tx.topk(2)[1]),
                             (x.argsort(descending=True), tx.argsort(descending=True))):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert [p.shape for p in L.tensor(np.zeros((0, 3))).chunk(3)] == \
        [tuple(p.shape) for p in torch.zeros(0, 3).chunk(3)]
    leaf = L.tensor(np.arange(3.0), requires_grad=True)
    moved = L.as_tensor(leaf, dtype=np.float32)            # (in the graph, as torch's .to())
    moved.sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [1.0, 1.0, 1.0])


LAYOUTS = {
    "contiguous": lambda t: t,
    "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
    "channels_last_c1": lambda t: torch.empty(t[:, :1].shape, dtype=t.dtype,
                                              memory_format=torch.channels_last).copy_(t[:, :1]),
    "contiguous_c1": lambda t: t[:, :1].contiguous(),
    "one_by_one_channels_last": lambda t: t[:, :, :1, :1].contiguous(
        memory_format=torch.channels_last),
    "n111": lambda t: t[:, :1, :1, :1].contiguous(),         # (N and C not told apart)
    "transposed": lambda t: t.transpose(2, 3),
    "sliced": lambda t: t[:, :, ::2],
}
FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("device", DEVICES)
def test_memory_formats_are_torchs(where, layout):
    """x.contiguous(memory_format), x.to(memory_format=...), x.is_contiguous(...) and
    clone(memory_format=...): torch's strides, self where nothing changes, in the graph."""
    tx = LAYOUTS[layout](torch.arange(2 * 3 * 4 * 5, dtype=torch.float64).reshape(2, 3, 4, 5))
    base = strided_like(tx, where)
    for name, fmt in FORMATS.items():
        assert base.is_contiguous(name) == tx.is_contiguous(memory_format=fmt), name
        for make, tmake in ((lambda x: x.contiguous(name), lambda t: t.contiguous(memory_format=fmt)),
                            (lambda x: x.to(memory_format=name), lambda t: t.to(memory_format=fmt)),
                            (lambda x: x.clone(memory_format=name), lambda t: t.clone(memory_format=fmt))):
            x = L.Tensor(base.data, requires_grad=True)
            t = tx.detach().requires_grad_(True)
            y, ty = make(x), tmake(t)
            assert y.data.strides == tuple(s * 8 for s in ty.stride()), (name, layout)
            assert (y is x) == (ty is t), (name, layout)
            np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
            g = np.arange(ty.numel(), dtype=np.float64).reshape(ty.shape)
            (y * L.tensor(g, device=where)).sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), g)
    with pytest.raises(ValueError, match="memory_format must be"):
        base.contiguous("nchw")
    if tx.is_contiguous():                                               # (as torch)
        assert base.contiguous(torch.preserve_format) is base
    else:
        with pytest.raises(RuntimeError, match="preserve"):
            tx.contiguous(memory_format=torch.preserve_format)
        with pytest.raises(RuntimeError, match="preserve_format"):
            base.contiguous(torch.preserve_format)
    with pytest.raises(RuntimeError, match="4-d"):
        base[0].contiguous("channels_last")


def test_module_dict_and_module_list_are_torchs():
    """ModuleDict's and ModuleList's state_dict names, order and container methods against
    torch's; weights load both ways."""
    def build(nn_):
        d = nn_.ModuleDict({"enc": nn_.Linear(3, 4), "dec": nn_.Linear(4, 2)})
        d["act"] = nn_.Tanh()
        d.update([("extra", nn_.Linear(2, 2))])
        del d["act"]
        blocks = nn_.ModuleList([nn_.Linear(2, 2)])
        blocks.extend([nn_.Linear(2, 3), nn_.Linear(3, 2)])
        blocks[1] = nn_.Linear(2, 3, bias=False)
        root = nn_.Module()
        root.d, root.blocks = d, blocks
        return root
    ours, theirs = build(nn), build(torch.nn)
    sd = theirs.state_dict()
    assert list(ours.state_dict()) == list(sd)
    assert [tuple(v.shape) for v in ours.state_dict().values()] == [tuple(v.shape) for v in sd.values()]
    ours.load_state_dict({k: v.numpy() for k, v in sd.items()})
    assert list(ours.d) == list(theirs.d) and len(ours.d) == 3 and "enc" in ours.d
    assert [k for k, _ in ours.d.items()] == list(theirs.d.keys())
    x = np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)
    y, ty = L.tensor(x), torch.tensor(x)
    for key in ("enc", "dec", "extra"):
        y, ty = ours.d[key](y), theirs.d[key](ty)
    for m, tm in zip(ours.blocks[1:], theirs.blocks[1:]):
        y, ty = m(y), tm(ty)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert type(ours.blocks[1:]) is nn.ModuleList and len(ours.blocks[:2]) == 2
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3))
    tseq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 3))
    assert type(seq[:2]) is nn.Sequential and len(seq[1:]) == 2
    assert list(seq[1:].state_dict()) == list(tseq[1:].state_dict())    # (names kept)
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict([("conv", nn.Conv2d(1, 2, 3)), ("act", nn.ReLU())]))
    tnamed = torch.nn.Sequential(OrderedDict([("conv", torch.nn.Conv2d(1, 2, 3)),
                                              ("act", torch.nn.ReLU())]))
    assert list(named.state_dict()) == list(tnamed.state_dict())
    assert ours.d.pop("extra") is not None and list(ours.d) == ["enc", "dec"]
    for bad, err in ((lambda: ours.d.__setitem__("a.b", nn.ReLU()), KeyError),
                     (lambda: ours.d.__setitem__("a", np.ones(2)), TypeError),
                     (lambda: ours.blocks.append(3), TypeError)):
        with pytest.raises(err):
            bad()


TOP_LEVEL = {
    "cat": lambda m, v: m.cat([v, v], 1), "stack": lambda m, v: m.stack([v, v], 0),
    "where": lambda m, v: m.where(v > 0, v, v * 2),
    "matmul": lambda m, v: m.matmul(v, v.transpose(1, 2)),
    "exp": lambda m, v: m.exp(v), "log": lambda m, v: m.log(v * v + 1),
    "sqrt": lambda m, v: m.sqrt(v * v), "abs": lambda m, v: m.abs(v),
    "sigmoid": lambda m, v: m.sigmoid(v), "tanh": lambda m, v: m.tanh(v),
    "relu": lambda m, v: m.relu(v), "softmax": lambda m, v: m.softmax(v, 1),
    "log_softmax": lambda m, v: m.log_softmax(v, -1), "sum": lambda m, v: m.sum(v, 1),
    "sum_keepdim": lambda m, v: m.sum(v, (0, 2), keepdim=True),
    "mean": lambda m, v: m.mean(v, dim=2), "max": lambda m, v: m.max(v),
    "max_dim": lambda m, v: m.max(v, 1)[0], "min_dim": lambda m, v: m.min(v, dim=2).indices,
    "amax": lambda m, v: m.amax(v, 1), "amin": lambda m, v: m.amin(v, 0),
    "argmax": lambda m, v: m.argmax(v, 2), "argmin": lambda m, v: m.argmin(v),
    "clamp": lambda m, v: m.clamp(v, -0.5, 0.5), "clamp_min": lambda m, v: m.clamp(v, min=0.1),
    "flatten": lambda m, v: m.flatten(v, 1), "reshape": lambda m, v: m.reshape(v, (4, 6)),
    "transpose": lambda m, v: m.transpose(v, 0, 2),
    "squeeze": lambda m, v: m.squeeze(m.unsqueeze(v, 1), 1),
    "split": lambda m, v: m.split(v, 2, 2)[1], "chunk": lambda m, v: m.chunk(v, 3, 1)[2],
    "sort": lambda m, v: m.sort(v, 1)[0], "argsort": lambda m, v: m.argsort(v, 2),
    "topk": lambda m, v: m.topk(v, 2)[0], "pow": lambda m, v: m.pow(v, 2),
    "std": lambda m, v: m.std(v, 1), "var": lambda m, v: m.var(v),
    "masked_fill": lambda m, v: m.masked_fill(v, v > 0, 0.0), "clone": lambda m, v: m.clone(v),
    "mul": lambda m, v: m.mul(v, 2.0), "add": lambda m, v: m.add(v, v),
    "sub": lambda m, v: m.sub(v, 1.0), "div": lambda m, v: m.div(v, 3.0),
    "neg": lambda m, v: m.neg(v),
    "gather": lambda m, v: m.gather(v, 1, m.argmax(v, 1, keepdim=True)),
    "index_select": lambda m, v: m.index_select(v, 2, m.argmax(v[0, 0], 0, keepdim=True)),
}


@pytest.mark.parametrize("case", list(TOP_LEVEL))
@pytest.mark.parametrize("device", DEVICES)
def test_torchs_top_level_functions_are_layers_top_level_functions(where, case):
    """L.cat, L.where, L.max ... with torch.cat's, torch.where's ... arguments give torch's
    values (a torch user's `torch.` prefix becomes `L.`)."""
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7 - 1
    ours, theirs = TOP_LEVEL[case](L, L.tensor(a, device=where)), TOP_LEVEL[case](torch,
                                                                                   torch.tensor(a))
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_gelu_is_torchs(where, dtype, approximate):
    """F.gelu / nn.GELU and their gradient against torch's in float64, each of ours within one
    rounding (two for bfloat16's NumPy path, which rounds through float32) of it, on the
    kernel's A type (float for float32 on a GPU: a few units of float32 there)."""
    x = np.concatenate([np.linspace(-8, 8, 161), [-0.0, 1e-30, 40.0, -40.0]])
    g = np.cos(np.arange(x.size))
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    ty.backward(torch.tensor(g))
    xd = L.tensor(x, device=where).astype(dtype)
    xv = L.Tensor(xd.data, requires_grad=True)
    y = nn.GELU(approximate)(xv)
    y.backward(L.tensor(g, device=where).astype(dtype))
    assert y.dtype == xv.dtype and xv.grad.dtype == xv.dtype
    # torch's float64 values at our (rounded) inputs, the reference
    xr = torch.tensor(xv.numpy().astype(np.float64), requires_grad=True)
    yr = torch.nn.functional.gelu(xr, approximate=approximate)
    yr.backward(torch.tensor(L.tensor(g).astype(dtype).numpy().astype(np.float64)))
    eps = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "bfloat16": 2.0 ** -7}[dtype]
    ulps = {"float64": 4, "float32": 4 if where != "cpu" else 1, "bfloat16": 2}[dtype]
    # (the gradient cancels terms of size |x| where it is small: rounding scales with |x|)
    scale = np.maximum(np.abs(yr.detach().numpy()), 1 + np.abs(xr.detach().numpy()))
    for ours, ref in ((y.numpy(), yr.detach().numpy()), (xv.grad.numpy(), xr.grad.numpy())):
        ours = ours.astype(np.float64)
        np.testing.assert_array_less(np.abs(ours - ref), ulps * eps * scale)


SCATTERS = {
    "scatter": lambda x, i, s: x.scatter(1, i, s),
    "scatter_value": lambda x, i, s: x.scatter(1, i, 2.5),
    "scatter_add": lambda x, i, s: x.scatter_add(1, i, s),
    "scatter_add_dim0": lambda x, i, s: x.scatter_add(0, i[:2, :3], s[:2, :3]),
}


@pytest.mark.parametrize("case", list(SCATTERS))
@pytest.mark.parametrize("device", DEVICES)
def test_scatter_and_scatter_add_are_torchs_values_and_gradients(where, case):
    """Repeated indices add up in scatter_add (and in src's gradient: each src entry gets the
    gradient where it went); scatter overwrites, so x's gradient is 0 there."""
    rng = np.random.default_rng(3)
    xa, sa = rng.standard_normal((3, 5)), rng.standard_normal((3, 4))
    ia = np.array([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 4]])    # (no repeat in a row for
    if case.startswith("scatter") and "add" not in case:         # scatter: which write wins
        ia = np.array([[0, 4, 2, 1], [2, 3, 1, 0], [3, 0, 1, 4]])   # is not defined)
    x, s = (L.Tensor(L.tensor(a, device=where).data, requires_grad=True) for a in (xa, sa))
    tx, ts = (torch.tensor(a, requires_grad=True) for a in (xa, sa))
    if case == "scatter_add_dim0":
        ia = ia % 3                          # (rows of x: 0..2)
    y = SCATTERS[case](x, L.tensor(ia, device=where), s)
    ty = SCATTERS[case](tx, torch.tensor(ia), ts)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-15)
    g = np.cos(np.arange(ty.numel())).reshape(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15)
    if ts.grad is not None:
        np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-15)
    else:
        assert s.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_scatter_and_its_refusals_are_torchs(where):
    z, tz = L.zeros(2, 4, device=where), torch.zeros(2, 4)
    idx = np.array([[1], [3]])
    z.scatter_(1, L.tensor(idx, device=where), 1.0)
    tz.scatter_(1, torch.tensor(idx), 1.0)
    np.testing.assert_array_equal(z.numpy(), tz.numpy())
    z.scatter_add_(0, L.tensor(np.array([[1, 1, 0, 0]]), device=where), L.ones(1, 4, device=where))
    tz.scatter_add_(0, torch.tensor([[1, 1, 0, 0]]), torch.ones(1, 4))
    np.testing.assert_array_equal(z.numpy(), tz.numpy())
    w = L.Tensor(L.zeros(2, 4, device=where).data, requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        (w * 1).scatter_(1, L.tensor(idx, device=where), 1.0)
    with pytest.raises(TypeError, match="dtype"):
        L.zeros(2, 4, device=where).scatter(1, L.tensor(idx, device=where),
                                            L.ones(2, 1, dtype=np.float64, device=where))
    with pytest.raises(RuntimeError, match="no larger than src"):
        L.zeros(2, 4, device=where).scatter_add(1, L.tensor(np.zeros((2, 3), np.int64),
                                                            device=where),
                                                L.ones(2, 2, device=where))
    if where == "cpu":
        with pytest.raises(IndexError, match="out of range"):
            L.zeros(2, 4).scatter(1, L.tensor(np.array([[4], [0]])), 1.0)
    # an index smaller than src: src's other entries are not read, their gradient is 0 (torch's
    # own backward refuses this case: its gradient has the index's shape)
    src = L.Tensor(L.ones(2, 3, device=where).data, requires_grad=True)
    out = L.zeros(2, 4, device=where).scatter_add(1, L.tensor(np.array([[3], [0]]), device=where),
                                                  src)
    out.backward(L.tensor(np.arange(8.0, dtype=np.float32).reshape(2, 4), device=where))
    np.testing.assert_array_equal(src.grad.numpy(), [[3, 0, 0], [4, 0, 0]])


@pytest.mark.parametrize("device", DEVICES)
def test_remainder_floor_division_and_bitwise_operators_are_torchs(where):
    """%, // (refusing a backward, as torch's), &, |, ^, ~, unary + and ndarray @ Tensor."""
    a, b = np.array([5.0, 7.0, -3.0, 4.5]), np.array([3.0, -2.0, 2.0, 1.5])
    x, w = (L.Tensor(L.tensor(v, device=where).data, requires_grad=True) for v in (a, b))
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (a, b))
    for ours, theirs in ((x % w, tx % tw), (x % 2.5, tx % 2.5), (7.0 % w, 7.0 % tw),
                         (x // w, tx // tw), (-x // 2, -tx // 2), (+x, +tx)):
        np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    ((x % w) * L.tensor(np.arange(4.0), device=where)).sum().backward()
    ((tx % tw) * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    with pytest.raises(RuntimeError):
        (tx // 2).sum().backward()
    with pytest.raises(NotImplementedError, match="floor division"):
        (x // 2).sum().backward()
    i, ti = L.tensor(np.array([1, 5, 7, 12]), device=where), torch.tensor([1, 5, 7, 12])
    m, tm = i > 2, ti > 2
    for ours, theirs in ((m & (i < 7), tm & (ti < 7)), (m | (i < 2), tm | (ti < 2)),
                         (m ^ (i < 6), tm ^ (ti < 6)), (~m, ~tm), (i & 6, ti & 6),
                         (i | 1, ti | 1), (~i, ~ti), (i % 5, ti % 5), (i // 5, ti // 5)):
        assert ours.dtype == theirs.numpy().dtype
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    mat = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal((mat @ L.tensor(np.ones((3, 2)), device=where)).numpy(),
                                  mat @ np.ones((3, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_implicit_softmax_promotion_and_descending_ties_are_torchs(where):
    """Found porting torch programs: F.softmax with no dim on 3-d / 4-d input took the last
    axis (torch: 0 / 1); cat / stack of int64 and float32 gave float64 (torch: float32);
    descending sort / topk put equal values last-first (torch's CPU sort: first-come)."""
    rng = np.random.default_rng(4)
    for shape in ((4,), (2, 3), (2, 3, 4), (2, 3, 4, 5)):
        a = rng.standard_normal(shape)
        with pytest.warns(UserWarning):                # (torch warns about the implicit dim)
            ref = torch.nn.functional.softmax(torch.tensor(a)).numpy()
            ref_log = torch.nn.functional.log_softmax(torch.tensor(a)).numpy()
        np.testing.assert_allclose(F.softmax(L.tensor(a, device=where)).numpy(), ref, rtol=1e-13)
        np.testing.assert_allclose(F.log_softmax(L.tensor(a, device=where)).numpy(), ref_log,
                                   rtol=1e-13)
    with pytest.raises(TypeError, match="dim"):
        L.tensor(np.ones(3)).softmax()
    i, f = L.tensor(np.array([1, 2]), device=where), L.tensor(np.array([0.5], np.float32),
                                                              device=where)
    assert L.cat([i, f]).dtype == torch.cat([torch.tensor([1, 2]), torch.tensor([0.5])]).numpy().dtype
    assert L.stack([i, L.tensor(np.array([0.5, 1], np.float32), device=where)]).dtype == np.float32
    for v in ([1.0, 3.0, 3.0, 0.0], [2.0, np.nan, 5.0, np.nan, 5.0, -1.0, 2.0]):
        ours, theirs = L.tensor(v, device=where), torch.tensor(v)
        np.testing.assert_array_equal(ours.sort(descending=True)[1].numpy(),
                                      theirs.sort(descending=True, stable=True)[1].numpy())
        np.testing.assert_array_equal(ours.topk(2)[1].numpy(), theirs.topk(2)[1].numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("device", DEVICES)
def test_bce_weight_and_pos_weight_are_torchs(where, reduction):
    """BCELoss(weight), BCEWithLogitsLoss(weight, pos_weight) and the functions' torch order
    (input, target, weight, ..., reduction): values and gradients against torch."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3)) * 3
    t = (rng.random((4, 3)) > 0.5).astype(np.float64)
    w, pw = rng.random((4, 1)), np.array([0.5, 2.0, 3.0])
    p = 1 / (1 + np.exp(-x))
    for ours_loss, theirs_loss, inp in (
            (nn.BCELoss(L.tensor(w, device=where), reduction=reduction),
             torch.nn.BCELoss(torch.tensor(w), reduction=reduction), p),
            (nn.BCEWithLogitsLoss(L.tensor(w, device=where), reduction=reduction,
                                  pos_weight=L.tensor(pw, device=where)),
             torch.nn.BCEWithLogitsLoss(torch.tensor(w), reduction=reduction,
                                        pos_weight=torch.tensor(pw)), x),
            (lambda a, b: F.binary_cross_entropy_with_logits(
                a, b, pos_weight=L.tensor(pw, device=where), reduction=reduction),
             lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(
                a, b, pos_weight=torch.tensor(pw), reduction=reduction), x),
            (lambda a, b: F.binary_cross_entropy(a, b, L.tensor(w, device=where),
                                                 reduction=reduction),
             lambda a, b: torch.nn.functional.binary_cross_entropy(a, b, torch.tensor(w),
                                                                   reduction=reduction), p)):
        a = L.Tensor(L.tensor(inp, device=where).data, requires_grad=True)
        ta = torch.tensor(inp, requires_grad=True)
        y, ty = ours_loss(a, L.tensor(t, device=where)), theirs_loss(ta, torch.tensor(t))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-13, atol=1e-15)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-13, atol=1e-15)
    with pytest.raises(TypeError, match="size_average"):
        nn.MSELoss(True)


def test_where_of_two_numbers_flatten_and_load_state_dict_answers_are_torchs():
    c, tc = L.tensor([True, False, True]), torch.tensor([True, False, True])
    for a, b in ((1.0, 0.0), (1, 0), (True, False), (2, 0.5)):
        ours, theirs = L.where(c, a, b), torch.where(tc, a, b)
        assert ours.dtype == theirs.numpy().dtype
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    x, tx = L.ones(2, 3, 4, 5), torch.ones(2, 3, 4, 5)
    for args in ((), (0, 1), (2,), (1, 2)):
        assert nn.Flatten(*args)(x).shape == tuple(torch.nn.Flatten(*args)(tx).shape)
    tm = torch.nn.Linear(2, 2)
    ours = nn.Linear(2, 2).load_state_dict({"weight": np.ones((2, 2), np.float32),
                                            "extra": np.ones(1)}, strict=False)
    theirs = tm.load_state_dict({"weight": torch.ones(2, 2), "extra": torch.ones(1)},
                                strict=False)
    assert ours.missing_keys == theirs.missing_keys
    assert ours.unexpected_keys == theirs.unexpected_keys


MORE_METHODS = {
    "t": lambda v: v[0].t(), "mm": lambda v: v[0].mm(v[0].t()),
    "matmul": lambda v: v[0].matmul(v[0].t()), "add": lambda v: v[0].add(v[0]),
    "sub": lambda v: v[0].sub(2.0), "mul": lambda v: v[0].mul(v[0]), "div": lambda v: v[0].div(4.0),
    "neg": lambda v: v[0].neg(), "narrow": lambda v: v[0].narrow(1, 1, 2),
    "narrow_negative": lambda v: v[0].narrow(0, -2, 2), "flip": lambda v: v[0].flip(1),
    "flip_both": lambda v: v[0].flip((0, 1)), "unbind": lambda v: v[0].unbind(1)[2],
    "maximum": lambda v: v[0].maximum(v[1]), "minimum": lambda v: v[0].minimum(v[1]),
    "type_as": lambda v: v[0].type_as(v[1]),
}


@pytest.mark.parametrize("case", list(MORE_METHODS))
@pytest.mark.parametrize("device", DEVICES)
def test_more_torch_methods_give_torchs_values_and_gradients(where, case):
    """Methods a port of torch code met (a new-user trial); maximum / minimum at ties (half
    the gradient each) and NaN (the whole to each) as torch."""
    a = np.array([[1.0, 5.0, np.nan, 2.0], [3.0, 2.0, 4.0, -1.0], [0.0, 7.0, 1.0, 1.0]])
    b = np.array([[1.0, 2.0, 3.0, 9.0], [3.0, 8.0, np.nan, -1.0], [2.0, 7.0, 0.0, 1.0]])
    if case in ("mm", "matmul", "t", "add", "mul", "div", "sub", "neg", "narrow", "flip",
                "flip_both", "unbind", "narrow_negative", "type_as"):
        a = np.nan_to_num(a)
    xs = [L.Tensor(L.tensor(v, device=where).data, requires_grad=True) for v in (a, b)]
    ts = [torch.tensor(v, requires_grad=True) for v in (a, b)]
    y, ty = MORE_METHODS[case](xs), MORE_METHODS[case](ts)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-14)
    g = np.cos(np.arange(ty.numel())).reshape(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    for x, t in zip(xs, ts):
        if t.grad is None:
            assert x.grad is None
        else:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-14)


def test_new_factories_in_place_forms_checks_dtypes_and_module_lookups_are_torchs():
    x, tx = L.tensor([[1.0, -2.0], [3.0, np.nan]]), torch.tensor([[1.0, -2.0], [3.0, np.nan]])
    for ours, theirs in ((x.new_zeros(2, 3), tx.new_zeros(2, 3)),
                         (x.new_ones((1, 2)), tx.new_ones((1, 2))),
                         (x.new_full((2,), 7.0), tx.new_full((2,), 7.0)),
                         (x.new_tensor([1, 2]), tx.new_tensor([1, 2])),
                         (x.isnan(), tx.isnan()), (L.isfinite(x), torch.isfinite(tx)),
                         (L.isinf(x / 0), torch.isinf(tx / 0))):
        assert ours.dtype == theirs.numpy().dtype and ours.shape == tuple(theirs.shape)
        if not str(theirs.dtype).endswith("float32") or theirs.numel() < 3:
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    y, ty = L.tensor([[1.0, -2.0], [3.0, 4.0]]), torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    y.clamp_(min=0.0)
    ty.clamp_(min=0.0)
    y.masked_fill_(y > 2, -1.0)
    ty.masked_fill_(ty > 2, -1.0)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert (L.float32, L.long, L.float, L.double, L.bool) == (np.float32, np.int64, np.float32,
                                                                 np.float64, np.bool_)
    a = np.arange(3.0)
    shared = L.from_numpy(a)
    a[0] = 9
    assert shared.numpy()[0] == 9 and L.is_tensor(shared) and not L.is_tensor(a)
    net, tnet = (lib.Sequential(lib.Linear(2, 2), lib.Sequential(lib.ReLU(), lib.Linear(2, 1)))
                 for lib in (nn, torch.nn))
    assert [n for n, _ in net.named_children()] == [n for n, _ in tnet.named_children()]
    assert type(net.get_submodule("1.1")).__name__ == type(tnet.get_submodule("1.1")).__name__
    net.add_module("head", nn.Tanh())
    tnet.add_module("head", torch.nn.Tanh())
    assert [n for n, _ in net.named_children()] == [n for n, _ in tnet.named_children()]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("device", DEVICES)
def test_floor_division_and_remainder_on_a_device_are_the_numpy_paths(where, device, dtype):
    """a // b and a % b of floats on a device equal the NumPy path's (Python's rule, from fmod:
    1.0 // 0.1 is 9), a Python number taken in float for half data (float16 [1, 3] // 0.1 is
    [9, 29], as torch's), 0-d operands, signed zeros, infinities, NaN, zero divisors, and 1e-40
    (float32's subnormal: zero on a GPU, where CuPy compiles every kernel with -ftz=true)."""
    rng = np.random.default_rng(5)
    tiny = [] if dtype == "float32" and device == 0 else [1e-40, -1e-40]
    specials = [0.0, -0.0, *tiny, 0.1, -0.1, 1.0, -3.0, 7.5, np.inf, -np.inf, np.nan]
    a = np.array(specials + list(rng.standard_normal(20) * 10)).astype(dtype)
    b = np.array(specials[::-1] + list(rng.standard_normal(20))).astype(dtype)
    A, B = L.tensor(a, device=where), L.tensor(b, device=where)
    ha, hb = L.tensor(a), L.tensor(b)
    for ours, host in ((A // B, ha // hb), (A % B, ha % hb), (A // 0.1, ha // 0.1),
                       (0.1 % B, 0.1 % hb), (A.sum() // 2.0, ha.sum() // 2.0),
                       (A[3] % B[4], ha[3] % hb[4])):
        assert ours.dtype == host.dtype and ours.shape == host.shape
        o, h = np.asarray(ours.numpy(), np.float64), np.asarray(host.numpy(), np.float64)
        np.testing.assert_array_equal(o, h)
        np.testing.assert_array_equal(np.signbit(o[o == 0]), np.signbit(h[h == 0]))   # (-0.0)
    half = L.tensor(np.array([1.0, 3.0], np.float16), device=where) // 0.1
    np.testing.assert_array_equal(half.numpy(), [9.0, 29.0])
    np.testing.assert_array_equal(
        half.numpy(), (torch.tensor([1.0, 3.0], dtype=torch.float16) // 0.1).numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_second_review_findings_are_torchs(where):
    """maximum / minimum keep the operands' dtype and value at a tie (an integer stayed no
    integer, a float16 tie overflowed through (a + b) / 2); flip is a copy (it was a view);
    a % b's gradient for b is -floor_divide(a, b) (1.0 % 0.1: -9, not -10); a pos_weight BCE
    refuses a target that wants a gradient (it dropped it); autograd.grad of a tensor made
    by an op an earlier backward freed works where nothing behind it is asked for; integer
    division by zero and a BCE weight that would grow the loss are refused, as torch."""
    dev = lambda a: L.tensor(a, device=where)                               # noqa: E731
    for a, b in ((np.array([1, 5]), np.array([2, 5])), (np.array([True]), np.array([True])),
                 (np.array([40000.0], np.float16), np.array([40000.0], np.float16)),
                 (np.array([100], np.int8), np.array([100], np.int8))):
        for f, tf in ((L.maximum, torch.maximum), (L.minimum, torch.minimum)):
            ours, theirs = f(dev(a), dev(b)), tf(torch.from_numpy(a), torch.from_numpy(b))
            assert ours.dtype == theirs.numpy().dtype
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    x = dev(np.arange(3.0))
    f = x.flip(0)
    x.data[0] = 99
    np.testing.assert_array_equal(f.numpy(), [2.0, 1.0, 0.0])
    with pytest.raises(RuntimeError, match="more than once"):
        x.flip((0, 0))
    with pytest.raises(TypeError, match="dims"):
        x.flip()
    a = L.Tensor(dev(np.array([1.0])).data, requires_grad=True)
    b = L.Tensor(dev(np.array([0.1])).data, requires_grad=True)
    ta, tb = torch.tensor([1.0], dtype=torch.float64, requires_grad=True), \
        torch.tensor([0.1], dtype=torch.float64, requires_grad=True)
    (a % b).sum().backward()
    (ta % tb).sum().backward()
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())
    t = L.Tensor(dev(np.ones(3)).data, requires_grad=True)
    with pytest.raises(NotImplementedError, match="target"):
        F.binary_cross_entropy_with_logits(dev(np.zeros(3)), t, pos_weight=dev(np.array([2.0])))
    with pytest.raises(ValueError, match="does not broadcast"):
        F.binary_cross_entropy(dev(np.full(3, 0.5)), dev(np.ones(3)), dev(np.ones((2, 3))))
    w = L.Tensor(dev(np.array([1.0, 2.0])).data, requires_grad=True)
    h = (w * 2) * 3
    h.sum().backward()
    tw = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    th = (tw * 2) * 3
    th.sum().backward()
    np.testing.assert_array_equal(L.autograd.grad((h * 2).sum(), h)[0].numpy(),
                                  torch.autograd.grad((th * 2).sum(), th)[0].numpy())
    with pytest.raises(RuntimeError, match="a second time"):
        L.autograd.grad((h * 2).sum(), w)              # (behind the freed op: as torch)
    with pytest.raises(RuntimeError, match="a second time"):
        torch.autograd.grad((th * 2).sum(), tw)
    if where == "cpu":                                  # (the host refuses; a device would sync)
        for op in (lambda u, v: u % v, lambda u, v: u // v):
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                op(torch.tensor([5]), torch.tensor([0]))
            with pytest.raises(ZeroDivisionError):
                op(L.tensor([5]), L.tensor([0]))
    with pytest.raises(IndexError, match="out of range"):
        L.zeros(2, 3, dtype=np.int64, device=where).scatter(1, dev(np.array([[3], [0]])), 1)


def test_save_of_a_module_says_to_save_its_state_dict(tmp_path):
    """L.save(model, path) -- torch.save's spelling for a whole object -- names the fix (it
    failed with an AttributeError about .items)."""
    with pytest.raises(TypeError, match=r"save model.state_dict\(\)"):
        L.save(nn.Linear(2, 2), tmp_path / "m.npz")


ACTIVATIONS = {
    "softplus": (lambda m: m.Softplus(), {}), "softplus_beta": (lambda m: m.Softplus(2.0, 5.0), {}),
    "silu": (lambda m: m.SiLU(), {}), "mish": (lambda m: m.Mish(), {}),
    "elu": (lambda m: m.ELU(0.7), {}), "hardtanh": (lambda m: m.Hardtanh(-2.0, 3.0), {}),
    "relu6": (lambda m: m.ReLU6(), {}), "logsigmoid": (lambda m: m.LogSigmoid(), {}),
}


@pytest.mark.parametrize("case", list(ACTIVATIONS))
@pytest.mark.parametrize("device", DEVICES)
def test_composed_activations_are_torchs(where, case):
    """SiLU, Mish, ELU, Softplus, Hardtanh, ReLU6, LogSigmoid (composed of existing ops): values
    and float64 gradients as torch's, at the kinks (0, 6, the bounds: torch's one-sided choices)
    and far out (+-1000: no inf or NaN from an untaken branch)."""
    x = np.concatenate([np.linspace(-30, 30, 61), [0.0, 6.0, -2.0, 3.0, 5.0 / 2, 1e-9, -50, 50,
                                                   -1000, 1000]])         # (exp(1000) is inf)
    a = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    make, _ = ACTIVATIONS[case]
    y, ty = make(nn)(a), make(torch.nn)(t)
    g = np.cos(np.arange(x.size))
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    scale = np.maximum(1, np.abs(ty.detach().numpy()))
    np.testing.assert_array_less(np.abs(y.numpy() - ty.detach().numpy()), 4e-16 * scale)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-14, atol=4e-15)


def _norm_is_torchs(m, tm, x, where, rng, channels_last=False):
    """A normalization module of ours and torch's, on the same random weight and bias (where
    affine), give the same values and float64 gradients of the input and the parameters."""
    m.to(np.float64)
    tm.double()
    if tm.weight is not None:
        with torch.no_grad():
            tm.weight.copy_(torch.tensor(rng.standard_normal(tm.weight.shape)))
            tm.bias.copy_(torch.tensor(rng.standard_normal(tm.bias.shape)))
        m.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    m.to(where)
    a = L.tensor(x, device=where)
    if channels_last:
        a = a.to(memory_format="channels_last")
    a = L.Tensor(a.data, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    g = np.cos(np.arange(x.size)).reshape(x.shape)
    y, ty = m(a), tm(t)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-13)
    if tm.weight is not None:
        for p, tp in ((m.weight, tm.weight), (m.bias, tm.bias)):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((3, 4, 7), 2), ((2, 8), 4),
                                          ((1, 6, 2, 2), 6), ((2, 6, 4, 5), 1), ((0, 4, 3), 2)])
@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_is_torchs(where, shape, groups):
    """nn.GroupNorm / F.group_norm (composed of layer_norm's arithmetic): values and float64
    gradients of input, weight and bias as torch's; channels-last input too."""
    rng = np.random.default_rng(6)
    _norm_is_torchs(nn.GroupNorm(groups, shape[1]), torch.nn.GroupNorm(groups, shape[1]),
                    rng.standard_normal(shape), where, rng, channels_last=len(shape) == 4)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_instance_norm_is_torchs(where, affine):
    """nn.InstanceNorm1d / 2d (each sample's statistics per channel: group_norm of one channel
    a group): values and float64 gradients as torch's."""
    rng = np.random.default_rng(7)
    for ours_cls, theirs_cls, shape in ((nn.InstanceNorm2d, torch.nn.InstanceNorm2d, (2, 3, 4, 5)),
                                        (nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (2, 3, 6)),
                                        (nn.InstanceNorm2d, torch.nn.InstanceNorm2d, (3, 4, 5)),
                                        (nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (3, 6))):
        # (the last two unbatched: (C, ...), as torch's take it)
        _norm_is_torchs(ours_cls(3, affine=affine), theirs_cls(3, affine=affine),
                        rng.standard_normal(shape), where, rng)


@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
@pytest.mark.parametrize("device", DEVICES)
def test_instance_norm_running_statistics_are_torchs(where, momentum):
    """track_running_stats=True: two training batches move the running statistics as torch's
    (the batch's average of each sample's mean and unbiased variance; momentum None: not at
    all), evaluation normalises with them -- values and float64 gradients as torch's -- and
    num_batches_tracked stays 0, as torch's; one spatial element is refused in training."""
    rng = np.random.default_rng(8)
    for ours_cls, theirs_cls, shape in ((nn.InstanceNorm2d, torch.nn.InstanceNorm2d, (2, 3, 4, 5)),
                                        (nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (3, 6))):
        untracked, theirs_untracked = ours_cls(3), theirs_cls(3)     # (buffers None, as torch's)
        assert untracked.running_mean is theirs_untracked.running_mean is None
        assert list(untracked.state_dict()) == list(theirs_untracked.state_dict()) == []
        kw = dict(affine=True, track_running_stats=True, momentum=momentum)
        m, tm = ours_cls(3, **kw), theirs_cls(3, **kw)
        ours = repr(m) if "bias=" in repr(tm) else repr(m).replace(" bias=True,", "")
        assert ours == repr(tm) and list(m.state_dict()) == list(tm.state_dict())   # (torch < 2.13
        for train in (True, True, False):                                           # has no bias=)
            m.train(train)
            tm.train(train)
            x = rng.standard_normal(shape) * 3 + 2
            _norm_is_torchs(m, tm, x, where, rng)
            for k, v in tm.state_dict().items():
                np.testing.assert_allclose(m.state_dict()[k], v.numpy(), rtol=1e-12, err_msg=k)
        if momentum is None:
            np.testing.assert_array_equal(m.running_var.numpy(), np.ones(3))
        assert int(m.num_batches_tracked.numpy()) == 0
    m.train()
    with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
        m(L.ones(2, 3, 1, device=where))
    with pytest.raises(ValueError, match="running_mean and running_var must either both be "
                                         "None or neither"):
        F.instance_norm(L.ones(2, 3, 4), running_mean=L.zeros(3))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_instance_norm_evaluation_keeps_half_data_half(where, dtype):
    """Its float32 running statistics normalise float16 / bfloat16 data into the data's dtype,
    as torch's (a bfloat16 model's next layer takes it): the float64 result rounded once to
    the dtype (torch's own is off by one unit in the last place at some elements)."""
    x = np.random.default_rng(9).standard_normal((2, 3, 4, 4)).astype(np.float32)
    m = nn.InstanceNorm2d(3, track_running_stats=True).to(where)
    m(L.tensor(x, device=where))
    m.eval()
    xh = L.tensor(x, device=where).to(dtype=dtype)
    y = m(xh)
    assert str(y.dtype) == dtype
    shape = (1, 3, 1, 1)
    exact = (xh.float().numpy().astype(np.float64) - m.running_mean.numpy().reshape(shape)) / \
        np.sqrt(m.running_var.numpy().astype(np.float64).reshape(shape) + 1e-5)
    rounded = torch.tensor(exact).to(getattr(torch, dtype)).float().numpy()
    np.testing.assert_array_equal(y.float().numpy(), rounded)


# ---- a port of five PyTorch programs: what it met ------------------------------------------------

ROUNDING = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.49, 3.7, -0.0, np.inf, -7.25])


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "sign", "round"])
@pytest.mark.parametrize("device", DEVICES)
def test_rounding_functions_are_torchs_with_a_zero_gradient(where, name):
    x = L.Tensor(L.tensor(ROUNDING, device=where).data, requires_grad=True)
    tx = torch.tensor(ROUNDING, requires_grad=True)
    y, ty = getattr(x, name)(), getattr(tx, name)()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    ints = np.array([-3, 0, 4])
    ours, theirs = getattr(L, name)(L.tensor(ints)), getattr(torch, name)(torch.tensor(ints))
    assert ours.dtype == np.int64 == np.dtype(str(theirs.dtype).removeprefix("torch."))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_round_to_decimals_fmod_and_the_logical_functions_are_torchs():
    x, tx = L.tensor(ROUNDING * 1.234), torch.tensor(ROUNDING * 1.234)
    np.testing.assert_array_equal(L.round(x, decimals=2).numpy(),
                                  torch.round(tx, decimals=2).numpy())
    a, b = np.array([5.5, -5.5, 7.0, -7.0]), np.array([2.0, 2.0, -3.0, -3.0])
    x, y = L.tensor(a, requires_grad=True), L.tensor(b, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    r, tr = L.fmod(x, y), torch.fmod(tx, ty)               # (the dividend's sign)
    np.testing.assert_array_equal(r.numpy(), tr.detach().numpy())
    r.sum().backward()
    tr.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())      # (-trunc(a / b))
    p, q = [True, False, True, False], [True, True, False, False]
    for name in ("logical_and", "logical_or", "logical_xor"):
        np.testing.assert_array_equal(getattr(L, name)(L.tensor(p), L.tensor(q)).numpy(),
                                      getattr(torch, name)(torch.tensor(p),
                                                           torch.tensor(q)).numpy())
    np.testing.assert_array_equal(L.tensor([1, 0, 2]).logical_not().numpy(),
                                  torch.tensor([1, 0, 2]).logical_not().numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_similarity_distance_outer_and_repeat_interleave_are_torchs(where):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((1, 5))
    a[2] *= 1e-10                    # (a norm below eps: clamped, outside the gradient)
    cases = [lambda m, u, v: m.nn.functional.cosine_similarity(u, v) if m is torch else
             F.cosine_similarity(u, v),
             lambda m, u, v: m.nn.functional.pairwise_distance(u, v, p=3.0) if m is torch else
             F.pairwise_distance(u, v, p=3.0),
             lambda m, u, v: m.outer(u[0], v[0]),
             lambda m, u, v: m.repeat_interleave(u, m.tensor([1, 0, 2, 3]), dim=0) * v]
    for case in cases:
        x = L.Tensor(L.tensor(a, device=where).data, requires_grad=True)
        y = L.Tensor(L.tensor(b, device=where).data, requires_grad=True)
        tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        out, tout = case(L, x, y), case(torch, tx, ty)
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-14, atol=1e-15)
        g = np.linspace(-1, 2, tout.numel()).reshape(tout.shape)
        out.backward(L.tensor(g, device=where))
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-13, atol=1e-15)


def test_nonzero_allclose_is_floating_point_and_cuda_queries_are_torchs():
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    np.testing.assert_array_equal(L.tensor(a).nonzero().numpy(), torch.tensor(a).nonzero().numpy())
    for ours, theirs in zip(L.nonzero(L.tensor(a), as_tuple=True),
                            torch.nonzero(torch.tensor(a), as_tuple=True)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert L.nonzero(L.tensor(3.0)).shape == (1, 0) and L.nonzero(L.tensor(0.0)).shape == (0, 0)
    assert L.allclose(L.tensor(a), L.tensor(a + 1e-9)) is True
    assert L.tensor(a).allclose(L.tensor(a + 1e-3)) is False
    assert L.tensor(a).is_floating_point() and not L.is_floating_point(L.tensor([1]))
    np.testing.assert_array_equal(L.sign(L.tensor([np.nan, -2.0, 0.0, True])).numpy(),
                                  torch.sign(torch.tensor([np.nan, -2.0, 0.0, True])).numpy())
    assert L.sign(L.tensor([True, False])).dtype == np.bool_           # (torch's: itself)
    np.testing.assert_array_equal(L.repeat_interleave(L.tensor([1.0, 2.0]), L.tensor([2])).numpy(),
                                  [1.0, 1.0, 2.0, 2.0])                # (one count for all)
    np.testing.assert_allclose(L.pairwise_distance(L.tensor(a), L.tensor(a[:1])).numpy(),
                               torch.pairwise_distance(torch.tensor(a), torch.tensor(a[:1])))
    assert L.cuda.is_available() == (L.cuda.device_count() > 0)


def test_cuda_counts_the_devices_cupy_sees(monkeypatch):
    """(L.int is the int32 dtype: the count must not call it.)"""
    import types
    from layers import backend
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 2, getDevice=lambda: 1)
    monkeypatch.setattr(backend, "cupy", lambda: types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=runtime)))
    assert L.cuda.device_count() == 2 and L.cuda.is_available()
    runtime.getDeviceCount = lambda: 0
    assert L.cuda.device_count() == 0 and not L.cuda.is_available()


def test_what_a_port_met_is_refused_or_kept_as_torch():
    with pytest.raises(TypeError, match="legacy size constructor"):
        L.Tensor(3, 4)                              # (torch: an uninitialised 3x4 tensor)
    with pytest.raises(ValueError, match="suffix of torch.save's"):
        L.save({"w": np.ones(2)}, "model.pt")
    with pytest.raises(TypeError, match="weight that requires grad"):
        F.cross_entropy(L.tensor(np.ones((2, 3))), L.tensor(np.full((2, 3), 1 / 3)),
                        weight=L.tensor(np.ones(3), requires_grad=True))
    with L.no_grad():                                 # (no gradient asked: taken, as torch)
        F.cross_entropy(L.tensor(np.ones((2, 3))), L.tensor([0, 2]),
                        weight=L.tensor(np.ones(3), requires_grad=True))
    with pytest.raises(TypeError, match="L.maximum"):
        L.max(L.tensor([1.0]), L.tensor([2.0]))


def test_a_buffer_registered_not_persistent_moves_but_is_not_saved():
    class Masked(nn.Module):
        def __init__(self, lib):
            super().__init__()
            self.register_buffer("mask", lib.ones(3) if lib is torch else L.ones(3),
                                 persistent=False)
            self.register_buffer("count", lib.zeros(1) if lib is torch else L.zeros(1))

    class TorchMasked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.ones(3), persistent=False)
            self.register_buffer("count", torch.zeros(1))
    ours = Masked(L)
    assert list(ours.state_dict()) == list(TorchMasked().state_dict()) == ["count"]
    assert [name for name, _ in ours.named_buffers()] == ["mask", "count"]
    ours.load_state_dict({"count": np.ones(1, np.float32)})
    assert ours.count.numpy()[0] == 1.0 and ours.mask is not None


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_a_target_that_broadcasts_is_taken_with_torchs_warning(name):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((1, 4))
    for u, v in ((a, b), (b, a)):
        x, y = L.tensor(u, requires_grad=True), L.tensor(v, requires_grad=True)
        tx, ty = torch.tensor(u, requires_grad=True), torch.tensor(v, requires_grad=True)
        with pytest.warns(UserWarning, match="different to the input size"):
            loss = getattr(F, name)(x, y)
        with pytest.warns(UserWarning):
            expected = getattr(torch.nn.functional, name)(tx, ty)
        loss.backward()
        expected.backward()
        np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-14)
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-13, atol=1e-16)
    with pytest.raises(ValueError, match="differ"):
        getattr(F, name)(L.tensor(a), L.tensor(np.ones((3, 4))))
    with pytest.raises(ValueError, match="differ"):                # (BCE: torch refuses too)
        F.binary_cross_entropy(L.tensor(np.full((5, 4), 0.5)), L.tensor(np.ones((1, 4))))


@pytest.mark.parametrize("norm", ["layer_norm", "group_norm", "instance_norm"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_half_data_through_norms_with_float32_weights_stays_half(where, dtype, norm):
    """A float16 / bfloat16 input with float32 weight and bias (a bf16 model keeping its norms'
    parameters in float32) gives a result of the input's dtype, as torch's mixed-dtype norms,
    within two units in its last place of torch's."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    shape = (3, 3) if norm == "layer_norm" else (4,)
    w, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape) \
        .astype(np.float32)
    args = {"layer_norm": lambda lib, t, w, b: lib.nn.functional.layer_norm(t, (3, 3), w, b),
            "group_norm": lambda lib, t, w, b: lib.nn.functional.group_norm(t, 2, w, b),
            "instance_norm": lambda lib, t, w, b: lib.nn.functional.instance_norm(
                t, weight=w, bias=b)}[norm]
    y = args(L, L.tensor(x, device=where).to(dtype=dtype), L.tensor(w, device=where),
             L.tensor(b, device=where))
    ty = args(torch, torch.tensor(x).to(getattr(torch, dtype)), torch.tensor(w), torch.tensor(b))
    assert str(y.dtype) == dtype
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    np.testing.assert_allclose(y.float().numpy(), ty.float().numpy(), rtol=2 * eps,
                               atol=2 * eps * np.abs(ty.float().numpy()).max())


def test_grad_fn_is_none_where_torchs_is_and_mT_refuses_a_vector():
    for lib in (L, torch):
        x = lib.tensor(A, requires_grad=True)
        y = x * 2
        with lib.no_grad():
            z = x * 2
        assert x.grad_fn is None and y.grad_fn is not None and z.grad_fn is None
        assert y.detach().grad_fn is None and (y + 1).grad_fn is not y.grad_fn
        with pytest.raises(RuntimeError, match="tensor.mT is only supported on matrices or "
                                               "batches of matrices. Got 1-D tensor."):
            x[0].mT


EDGES = [
    # integer data: sums stay int64, float scalars truncated (0.5 scales by 0), as torch's
    "M.nansum(M.tensor([1, 2, 3]))", "M.tensor([[1, 2]], dtype=M.uint8).nansum(1)",
    "M.addmm(I[:1, :1], I[:1, :1] + 1, I[:1, :1] + 2, alpha=0.5)",
    "M.addmm(I[:1, :1], I[:1, :1] + 1, I[:1, :1] + 2, beta=0.5)",
    "M.addcmul(I, I, I, value=0.5)", "I[0].index_add(0, M.tensor([0]), I[0, :1], alpha=0.5)",
    # hypot without overflow or underflow on the way, and at infinity
    "M.hypot(M.tensor([1e200, 1e-200, 3.0]), M.tensor([1e200, 1e-200, 4.0]))",
    "M.hypot(M.tensor([1e20], dtype=M.float32), M.tensor([1e20], dtype=M.float32))",
    "M.hypot(M.tensor([float('inf')]), M.tensor([float('nan')]))",
    "M.tensor([300.0], dtype=M.float16).hypot(M.tensor([300.0], dtype=M.float16))",
    # lerp's second formula (weight >= 0.5), exact at weight 1
    "M.lerp(M.tensor([1e20]), M.tensor([1.0]), 1.0)", "M.lerp(M.tensor([1e20]), M.tensor([1.0]), 0.7)",
    "M.lerp(M.tensor([1e20, 3.0]), M.tensor([1.0, 5.0]), M.tensor([1.0, 0.25]))",
    # 0-d tensors, torch's keyword names, the index dtypes torch takes
    "M.tensor(5.0).index_add(0, M.tensor([0]), M.tensor(2.0))",
    "M.tensor(5.0).index_copy(0, M.tensor([0]), M.tensor(2.0))",
    "M.tensor(5.0).index_fill(0, M.tensor([0]), 2.0)",
    "M.movedim(input=F3, source=0, destination=2)", "M.isclose(input=F3, other=F3 + 1e-9)",
    "F3.index_fill(dim=0, index=M.tensor([1]), value=3.0)", "F3.masked_select(mask=F3 > 1)",
    "F3.tile(dims=(2,))", "M.dot(input=F3[0, 0], tensor=F3[0, 1])",
    "M.swapdims(F3, dim0=0, dim1=2)", "M.hypot(input=F3, other=F3)",
    "M.nansum(I, dtype=M.int32)", "M.addcmul(I, I, I, value=np.float32(1.5))",
    "M.greater(I, 2)", "I.less(3)", "M.greater_equal(I, 2)", "I.less_equal(I.flip(0))",
    "M.not_equal(I, 2)", "F3.heaviside(M.tensor(0.5, dtype=F3.dtype))", "M.signbit(F3 * 0 - 0.0)",
    "M.isneginf(F3 / 0)", "F3.isposinf()", "M.isin(I, M.tensor([2, 3, 9]))",
    "M.isin(I, M.tensor([2, 3]), invert=True)", "M.triu_indices(3, 4, 1)",
    "M.tril_indices(4, 3, -1)", "M.broadcast_shapes((2, 1), (3,), (1, 1, 1))",
    "M.xlogy(M.zeros(4), M.tensor([float('inf'), 0.0, -1.0, float('nan')]))",
    "M.xlogy(M.tensor([1.0, 2.0]), M.tensor([0.0, -1.0]))",
    "M.isin(2, M.tensor([1, 2]))", "M.isin(I, 2)",
    "M.tensordot(F3, F3.flip(0), dims=M.tensor(1))",
    "M.logaddexp(M.tensor([-np.inf, np.inf, 1.0]), M.tensor([-np.inf, np.inf, 1.0]))",
    "M.logaddexp2(M.tensor([-np.inf, np.inf]), M.tensor([-np.inf, np.inf]))",
    "M.subtract(M.tensor([1.0, -2.0]), M.tensor([1, 2]), alpha=0.5)",
    "M.subtract(M.tensor([1, 2, 3]), 2, alpha=2)", "M.rsub(M.tensor([1, 2]), 5, alpha=2)",
    "M.heaviside(M.tensor([-1, 0, 2]), M.tensor([7]))",
    "M.heaviside(M.tensor([np.nan, 0.0, 2.0]), M.tensor([0.5]))",
    "M.nan_to_num(M.tensor([True, False]))",
    "M.divide(M.tensor([7, -7]), 2, rounding_mode='trunc')",
    "M.divide(M.tensor([7.0, -7.0]), 2, rounding_mode='floor')",
    "M.divide(input=F3, other=F3 + 5)", "F3.multiply(other=F3)", "F3.less(other=1.0)",
    "M.zeros(3).index_fill(0, M.tensor([-1]), 1.0)",
    "M.zeros(3).index_add(0, M.tensor([0], dtype=M.int32), M.ones(1))",
    # a 0-d weight of another floating dtype: torch takes it (input's dtype)
    "M.lerp(M.tensor([1.0, 3.0]), M.tensor([5.0, -1.0]), M.tensor(0.25, dtype=M.float64))",
    "M.lerp(M.tensor([1.0, 3.0]), M.tensor([5.0, -1.0]), M.tensor(0.75, dtype=M.float16))",
    "M.addmm(M.ones(2, 2, dtype=M.int64), I, I, alpha=2)",
    "M.take(I, M.tensor([-1, 0]))", "M.float_power(I, 2)", "M.copysign(I, -1)",
    "M.copysign(M.tensor([1.0, -2.0]), M.tensor([-0.0, 0.0]))",
    "M.logit(M.tensor([0.25, 0.5]))", "M.logit(I)", "M.vander(M.tensor([1, 2, 3]))",
    "M.vander(M.tensor([True, False]), 3)", "M.vander(M.tensor([1.5, 0.0, -2.0]), 4, True)",
    "M.vander(M.tensor([1.5, 0.0, -2.0]))", "M.vander(M.tensor([2.0, 3.0]), 0)",
    "M.block_diag(M.tensor([[1, 2]]), M.tensor([3.0]))", "M.cartesian_prod(M.tensor([1, 2]))",
    "M.tensor_split(M.arange(7), M.tensor([1, 5]))[1]", "M.tensor_split(M.arange(7), M.tensor(3))[0]",
    "M.tensor_split(M.arange(7), [9, 2])[1]", "M.hsplit(M.arange(6), [2])[1]",
    "M.inner(M.tensor(2.0), M.tensor([1.0, 2.0]))", "M.fix(M.tensor([-1.5, 2.5]))",
    "M.sgn(M.tensor([-2, 0, 3]))", "M.trapezoid(M.tensor([1.0, 2.0, 4.0]), dx=2)",
    "M.cdist(M.tensor([[0.0, 0.0]]), M.tensor([[3.0, 4.0], [1.0, 1.0]]), p=float('inf'))",
    "M.mm(I, I)", "I.mv(M.tensor([1, -1]))",
    "M.cross(M.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]]), M.tensor([[2.0, 0.0], [1.0, 1.0], "
    "[0.0, 3.0]]))",                               # (no dim: the first of size 3, warned)
    "M.cross(M.ones(1, 3), M.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]]))",
    "M.cross(M.tensor([1, 2, 3]), M.tensor([4, 5, 6]), dim=0)",
    "M.copysign(M.ones(2, dtype=M.float16), M.tensor([-1.0, 1.0], dtype=M.float64))",
    "M.copysign(M.tensor([1, 2]), M.tensor([-1.0, 1.0], dtype=M.float64))",
    "M.copysign(M.ones(2, dtype=M.float16), M.tensor(-1.0, dtype=M.float64))",
    "M.copysign(M.ones(2, dtype=M.bfloat16), M.ones(2, dtype=M.float16))",
    "M.copysign(M.ones(2), M.tensor([-1, 1]))", "M.copysign(M.tensor([1, 2]), -1.0)",
    "M.logit(M.tensor([0.1, 0.5, 0.9], dtype=M.float64), eps=0.6)", "M.logit(M.tensor([0, 1]))",
    "M.block_diag(M.ones(2, 2), M.tensor(3.0, dtype=M.float64))",
    "M.block_diag(M.ones(2, 2, dtype=M.int32), M.tensor(3))",
    "M.block_diag(M.ones(2, 2), M.tensor([3.0], dtype=M.float64))",
    "M.trapezoid(M.tensor([1, 2, 4]))", "M.trapezoid(M.tensor([1, 2, 4]), M.tensor([0, 1, 3]))",
    "M.trapezoid(M.tensor([]))", "M.trapezoid(M.tensor([2.0]))",
    "M.trapezoid(M.tensor([1.0, 2.0]), M.tensor([0.0, 1.0], dtype=M.float64))",
    "M.inner(M.ones(0), M.ones(0))", "M.tensordot(M.ones(2, 0), M.ones(0, 3), dims=1)",
    "M.tensor_split(M.arange(7), sections=3)[2]", "M.tensor_split(M.arange(7), indices=[2])[1]",
    "M.tensor_split(M.arange(7), tensor_indices_or_sections=M.tensor([2]))[0]",
    "M.hsplit(M.ones(2, 4), indices=[1])[1]", "M.vsplit(M.ones(4, 2), sections=2)[0]",
    "M.sgn(M.tensor([True, False]))",
    "M.inner(M.tensor(True), M.tensor(True))", "M.inner(M.tensor([True, False]), M.tensor(2))",
    "M.trapezoid(M.tensor([1, 2, 4]), M.tensor([0.0, 1.0, 3.0], dtype=M.float16))",
    "M.trapezoid(M.tensor([], dtype=M.int64))", "M.trapezoid(M.tensor([], dtype=M.bool))",
    "M.hsplit(M.ones(2, 4), M.tensor(2))[1]", "M.vsplit(M.ones(4, 2), M.tensor(2))[1]",
    "M.trapezoid(M.tensor([1.0, 2.0]), M.tensor(1.0))",    # (torch's: a 0-d x, one pair: 0)
]
REFUSED = [
    "M.zeros(3).index_fill(0, M.tensor([3]), 1.0)", "M.zeros(3).index_fill(0, M.tensor([-4]), 1.0)",
    "M.zeros(3).index_fill(0, M.tensor([0], dtype=M.int32), 1.0)",
    "M.zeros(3).index_copy(0, M.tensor([0], dtype=M.int32), M.ones(1))",
    "M.zeros(3).index_add(0, M.tensor([0], dtype=M.int16), M.ones(1))",
    "M.zeros(3).index_add(0, M.tensor([3]), M.ones(1))",
    "M.diff(M.ones(3), -1)", "M.diff(M.tensor(1.0))", "M.equal(M.ones(2), 1)",
    "M.nanmean(M.tensor([1, 2]))", "M.nanmean(M.tensor([1, 2]), dtype=M.float32)",
    "M.fmax(M.ones(2), 1.0)", "M.fmin(1.0, M.ones(2))",
    "M.subtract(M.tensor([1, 2]), M.tensor([1, 2]), alpha=0.5)",
    "M.hstack([])", "M.vstack([])", "M.meshgrid(indexing='ij')",
    "M.addmm(M.ones(2, 2, 2), M.ones(2, 2), M.ones(2, 2))",
    "M.meshgrid(M.ones(2), M.ones(3, dtype=M.float64), indexing='ij')",
    "M.trace(M.ones(2, 2, dtype=M.bool))", "M.triu_indices(-1, 3)", "M.tril_indices(2, -3)",
    "M.heaviside(M.tensor([1.0]), M.tensor([1], dtype=M.int64))", "M.heaviside(M.ones(2), 0.5)",
    # one dtype where torch takes one (arithmetic would promote the mix)
    "M.lerp(M.ones(2), M.ones(2, dtype=M.float64), 0.5)",
    "M.lerp(M.ones(2, dtype=M.float64), M.tensor(1.0), 0.5)",
    "M.lerp(M.ones(2), M.ones(2), M.full((2,), 0.5, dtype=M.float64))",
    "M.lerp(M.ones(2, dtype=M.float16), M.ones(2), 0.5)",
    "M.lerp(M.ones(2, dtype=M.int64), M.ones(2, dtype=M.int64), 0.5)",
    "M.addmm(M.ones(2, 2), M.ones(2, 2, dtype=M.float64), M.ones(2, 2, dtype=M.float64))",
    "M.addmm(M.tensor(1.0, dtype=M.float64), M.ones(2, 2), M.ones(2, 2))",
    "M.addmv(M.ones(2, dtype=M.float64), M.ones(2, 2), M.ones(2))",
    "M.baddbmm(M.ones(1, 2, 2), M.ones(1, 2, 2, dtype=M.float64), M.ones(1, 2, 2))",
    "M.addbmm(M.ones(2, 2), M.ones(1, 2, 2), M.ones(1, 2, 2, dtype=M.float64))",
    "M.tensordot(M.ones(2, 2), M.ones(2, 2, dtype=M.float64))",
    "M.mm(M.ones(2, 2), M.ones(2, 2, dtype=M.float64))", "M.mm(M.ones(2), M.ones(2, 2))",
    "M.mv(M.ones(2, 2), M.ones(2, 2))", "M.mv(M.ones(2, 2), M.ones(2, dtype=M.float64))",
    "M.cross(M.ones(2, 3), M.ones(2, 3), dim=0)", "M.cross(M.ones(2, 2), M.ones(2, 2))",
    "M.cross(M.ones(2, 3), M.ones(3), dim=1)",
    "M.fliplr(M.ones(2))", "M.flipud(M.tensor(1.0))",
    "M.hsplit(M.ones(2, 3), 2)", "M.vsplit(M.ones(3), 1)", "M.dsplit(M.ones(2, 2), 1)",
    "M.tensor_split(M.ones(3), 0)", "M.tensor_split(M.ones(3), M.tensor([[1]]))",
    "M.take(M.ones(3), M.tensor([3]))", "M.take(M.ones(3), M.tensor([-4]))",
    "M.take(M.ones(3), M.tensor([0], dtype=M.int32))",
    "M.block_diag(M.ones(1, 1, 1))", "M.vander(M.ones(2, 2))", "M.inner(M.ones(2), M.ones(3))",
    "M.cdist(M.ones(2), M.ones(2, 2))", "M.cdist(M.ones(2, 2), M.ones(2, 3))",
    "M.cartesian_prod(M.ones(2, 2))",
    "M.cross(M.ones(1, 3), M.ones(3, 3), dim=0)",
    "M.cross(M.ones(3), M.ones(3, dtype=M.float64), dim=0)",
    "M.trapezoid(M.ones(2, 3), M.tensor([1.0, 2.0]))",
    "M.trapezoid(M.tensor([True, False]))",
    "M.trapezoid(M.tensor([1.0, 2.0]), M.tensor([0.0, 1.0]), dx=1.0)",
    "M.cdist(M.ones(1, 2), M.ones(1, 2), p=-1)", "M.cdist(M.ones(1, 2), M.ones(1, 2), p=float('nan'))",
    "M.cdist(M.ones(1, 2, dtype=M.int64), M.ones(1, 2, dtype=M.int64))",
    "M.tensor_split(M.arange(4), M.tensor([1], dtype=M.int32))", "M.tensor_split(M.arange(4), True)",
    "M.hsplit(M.arange(4), M.tensor([2]))",
    "M.inner(M.tensor([True]), M.tensor([True]))",
    "M.mm(M.ones(1, 1, dtype=M.bool), M.ones(1, 1, dtype=M.bool))", "M.fix(M.tensor([True]))",
    "M.lerp(M.ones(2), 2.0, 0.5)", "M.mm(M.ones(2, 3), M.ones(2, 3))",
    "M.mv(M.ones(2, 3), M.ones(2))",
    "M.trapezoid(M.tensor([1.0, 2.0, 4.0]), M.tensor([True, False, True]))",
    "M.trapezoid(M.tensor([1.0, 2.0, 4.0]), dx=True)",
    "M.tensor_split(M.arange(7), sections=[2])", "M.tensor_split(M.arange(7), indices=3)",
    "M.tensor_split(M.arange(7), tensor_indices_or_sections=3)",
    "M.tensor_split(M.arange(7), indices_or_sections=3)", "M.tensor_split(M.arange(7), [True])",
    "M.tensor_split(M.arange(7), [2.0])", "M.hsplit(M.ones(2, 4), indices_or_sections=2)",
    "M.hsplit(M.ones(2, 4), sections=[1])",
    "M.mm(M.ones(2, 3, dtype=M.bool), M.ones(2, 3, dtype=M.bool))",
    "M.mv(M.ones(2, 3, dtype=M.bool), M.ones(2, dtype=M.bool))",
    "M.tensordot(M.ones(2, 2, dtype=M.bool), M.ones(2, 2, dtype=M.bool))",
]


def _edge_scope(M):
    return dict(M=M, np=np, I=M.tensor([[1, 2], [3, 4]]), F3=M.tensor(A[:2].reshape(2, 2, 2)))


@pytest.mark.parametrize("expr", EDGES)
def test_the_composite_spellings_at_torchs_edges(expr):
    """Integer data, extreme values, 0-d tensors and torch's keyword names, as torch takes
    them: the same dtype and values (to float64's rounding)."""
    ours, theirs = (eval(expr, _edge_scope(M)) for M in (L, torch))
    if isinstance(theirs, torch.Size):                     # (broadcast_shapes)
        assert ours == tuple(theirs)
        return
    ours, theirs = (ours[0], theirs[0]) if isinstance(ours, tuple) else (ours, theirs)
    assert str(ours.dtype) == str(theirs.dtype).replace("torch.", ""), expr
    np.testing.assert_allclose(np.asarray(ours.numpy(), np.float64),
                               theirs.double().numpy(), rtol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_take_refuses_an_index_out_of_range_on_every_path(where):
    """(A device's gather gives NaN at an index out of range; take reads its index back and
    refuses it, as torch does.)"""
    x = L.ones(3, device=where)
    for bad in ([3], [0, -4]):
        with pytest.raises(IndexError, match="take: index out of range for a tensor of 3"):
            L.take(x, L.tensor(bad, device=where))


def test_can_cast_and_promote_types_are_torchs():
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
             "float32", "float64"]
    for a in names:
        for b in names:
            ta, tb = getattr(torch, a), getattr(torch, b)
            assert L.can_cast(getattr(L, a), getattr(L, b)) == torch.can_cast(ta, tb), (a, b)
            assert str(np.dtype(L.promote_types(getattr(L, a), getattr(L, b)))) == \
                str(torch.promote_types(ta, tb)).replace("torch.", ""), (a, b)
    assert L.promote_types(type1=L.int32, type2=L.float16) == np.float16   # (torch's keywords)


@pytest.mark.parametrize("device", DEVICES)
def test_vanders_gradient_is_the_powers_derivative_finite_at_zero(where):
    """(torch 2.13's own vander backward fails -- an in-place change it made -- so the reference
    is the closed form: d/dx sum_k g_k x^k = sum_k k g_k x^(k-1), 0 ** 0 counted as 1.)"""
    xs = np.array([1.5, 0.0, -2.0, 0.5])
    x = L.Tensor(L.tensor(xs, device=where).data, requires_grad=True)
    g = np.linspace(-1, 2, 16).reshape(4, 4)
    y = L.vander(x, increasing=True)
    np.testing.assert_allclose(y.numpy(), np.vander(xs, increasing=True), rtol=1e-15)
    y.backward(L.tensor(g, device=where))
    k = np.arange(4)
    expected = (g[:, 1:] * k[1:] * xs[:, None] ** (k[1:] - 1)).sum(1)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-13)


@pytest.mark.parametrize("expr", REFUSED)
def test_the_composite_spellings_refuse_what_torch_refuses(expr):
    with pytest.raises(Exception) as theirs:
        eval(expr, _edge_scope(torch))
    with pytest.raises(theirs.type):
        eval(expr, _edge_scope(L))


@pytest.mark.parametrize("device", DEVICES)
def test_index_fill_refuses_an_index_out_of_range_itself(where):
    """(CuPy's indexing wraps an index out of range where NumPy's raises: the check is the op's
    own, on every path.)"""
    with pytest.raises(IndexError, match="index_fill.*index 3 is out of bounds for dimension 0"):
        L.zeros(3, device=where).index_fill(0, L.tensor([1, 3], device=where), 1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_hypot_has_a_double_backward_as_torch(where):
    """(Its own op since it stopped overflowing: the gradient of its gradient, as torch's.)"""
    a0, b0 = np.array([0.3, 2.0, -1.5]), np.array([0.4, 1.0, 0.5])
    grads = []
    for M, grad in ((L, L.autograd.grad), (torch, torch.autograd.grad)):
        a, b = (M.tensor(v, requires_grad=True) for v in (a0, b0))
        if M is L:
            a, b = (L.Tensor(L.tensor(v, device=where).data, requires_grad=True) for v in (a0, b0))
        ga, gb = grad((M.hypot(a, b) * M.tensor(np.array([1.0, 2.0, 3.0])).to(a.device)).sum(),
                      [a, b], create_graph=True)
        grads.append([np.asarray(g.detach().cpu().numpy() if M is torch else g.numpy())
                      for g in grad((ga * ga + gb * gb * 3).sum(), [a, b])])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-13)

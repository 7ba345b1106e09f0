"""Tensor factories (layers.creation) against torch: zeros / ones / full / empty and their
*_like, arange, linspace, eye give torch's shapes, dtypes and values; *_like keeps the memory
format; rand / randn / randint draw from L.manual_seed's generators with the right
distribution (moments and ranges against their closed forms) on the CPU, the host GPU path
(the device generator's kernels compiled for the host) and a GPU."""
import numpy as np
import pytest
import torch

import layers as L

from gpu_util import strided_like

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
TORCH_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64,
                torch.int32: np.int32, torch.bool: np.bool_, torch.uint8: np.uint8,
                torch.float16: np.float16}


def _np(dtype):
    return TORCH_DTYPES[dtype]


# (L's call, torch's call) with the same arguments; dtype= spelled per library
FILLED = {
    "zeros_ints": (lambda m, d: m.zeros(2, 3, **d), {}),
    "zeros_tuple": (lambda m, d: m.zeros((2, 0, 4), **d), {}),
    "zeros_list_int64": (lambda m, d: m.zeros([3], **d), {"dtype": torch.int64}),
    "ones_scalar_shape": (lambda m, d: m.ones((), **d), {}),
    "ones_float64": (lambda m, d: m.ones(4, 1, **d), {"dtype": torch.float64}),
    "full_int": (lambda m, d: m.full((2, 2), 7, **d), {}),
    "full_bool": (lambda m, d: m.full((3,), True, **d), {}),
    "full_float": (lambda m, d: m.full((2,), -1.5, **d), {}),
    "full_int_as_float": (lambda m, d: m.full((2,), 3, **d), {"dtype": torch.float32}),
    "full_keyword": (lambda m, d: m.full((2,), fill_value=0.25, **d), {}),
    "arange_end": (lambda m, d: m.arange(5, **d), {}),
    "arange_neg_step": (lambda m, d: m.arange(10, 1, -3, **d), {}),
    "arange_float_step": (lambda m, d: m.arange(0, 1, 0.1, **d), {}),
    "arange_float_start": (lambda m, d: m.arange(-2.5, 3, **d), {}),
    "arange_float64": (lambda m, d: m.arange(1, 2, 0.3, **d), {"dtype": torch.float64}),
    "arange_int_as_float": (lambda m, d: m.arange(6, **d), {"dtype": torch.float32}),
    "arange_empty": (lambda m, d: m.arange(3, 3, **d), {}),
    "linspace": (lambda m, d: m.linspace(-1, 2, 7, **d), {}),
    "linspace_one": (lambda m, d: m.linspace(3, 9, 1, **d), {}),
    "linspace_zero": (lambda m, d: m.linspace(3, 9, 0, **d), {}),
    "linspace_many": (lambda m, d: m.linspace(0.1, 1000.3, 1001, **d), {}),
    "linspace_float64": (lambda m, d: m.linspace(0, 1, 11, **d), {"dtype": torch.float64}),
    "linspace_int64": (lambda m, d: m.linspace(0, 10, 4, **d), {"dtype": torch.int64}),
    "eye": (lambda m, d: m.eye(3, **d), {}),
    "eye_rect": (lambda m, d: m.eye(2, 4, **d), {"dtype": torch.int64}),
}


@pytest.mark.parametrize("case", list(FILLED))
@pytest.mark.parametrize("device", DEVICES)
def test_a_filled_factory_gives_torchs_shape_dtype_and_values(where, case):
    make, kw = FILLED[case]
    ours = make(L, {"device": where, **{k: _np(v) for k, v in kw.items()}})
    ref = make(torch, kw)
    assert ours.shape == tuple(ref.shape)
    assert ours.dtype == _np(ref.dtype)
    assert ours.device == where
    if ref.dtype.is_floating_point and ref.numel():
        # ours is the float64 value rounded once; torch's linspace computes in float32 itself,
        # so its values may be one unit in the last place off that
        ulp = np.spacing(np.abs(ref.numpy()).astype(_np(ref.dtype)))
        assert np.all(np.abs(ours.numpy() - ref.numpy()) <= ulp), case
    else:
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_empty_gives_the_shape_and_dtype_asked():
    for t in (L.empty(2, 3), L.empty((4,), dtype=np.float64), L.empty(0, dtype="bfloat16")):
        assert t.shape in ((2, 3), (4,), (0,))
    assert L.empty(2, dtype=np.int32).dtype == np.int32
    assert L.empty(2).dtype == np.float32


LIKE = {
    "zeros_like": lambda m, x, **k: m.zeros_like(x, **k),
    "ones_like": lambda m, x, **k: m.ones_like(x, **k),
    "full_like": lambda m, x, **k: m.full_like(x, 2.5, **k),
    "empty_like": lambda m, x, **k: m.empty_like(x, **k).fill_(-1.0),
}


@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last", "channels_last_c1",
                                           "transposed", "expanded", "sliced"])
@pytest.mark.parametrize("case", list(LIKE))
@pytest.mark.parametrize("device", DEVICES)
def test_a_like_factory_keeps_shape_dtype_device_and_memory_format(where, case, memory_format):
    shape = (2, 1, 3, 4) if memory_format == "channels_last_c1" else (2, 5, 3, 4)
    ref_x = torch.arange(float(np.prod(shape))).reshape(shape)
    if memory_format.startswith("channels_last"):      # (C = 1 too: strides (12, 1, 4, 1))
        ref_x = torch.empty(shape, memory_format=torch.channels_last).copy_(ref_x)
    elif memory_format == "transposed":
        ref_x = ref_x.transpose(1, 3)
    elif memory_format == "expanded":                 # (broadcast: torch's copies are C order)
        ref_x = ref_x[:1, :, :1].expand(shape)
    elif memory_format == "sliced":
        ref_x = ref_x[:, :, ::2]
    if memory_format in ("expanded", "sliced"):       # (strided views: made on the device)
        x = strided_like(ref_x, where)
    else:
        x = L.as_tensor(ref_x.numpy(), device=where)  # (torch's strides, kept)
    assert x.data.strides == tuple(s * 4 for s in ref_x.stride())
    for kw, tkw in (({}, {}), ({"dtype": np.float64}, {"dtype": torch.float64})):
        ours, ref = LIKE[case](L, x, **kw), LIKE[case](torch, ref_x, **tkw)
        assert ours.shape == tuple(ref.shape) and ours.dtype == _np(ref.dtype)
        assert ours.device == x.device
        item = ours.data.itemsize
        assert ours.data.strides == tuple(s * item for s in ref.stride()), case
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_a_like_factory_takes_a_device_and_requires_grad():
    x = L.tensor(np.ones((2, 3), np.float32))
    y = L.zeros_like(x, device="cpu", requires_grad=True)
    assert y.requires_grad and y.is_leaf and y.dtype == np.float32
    assert L.randint_like(L.tensor(np.zeros(5, np.int32)), 3).dtype == np.int32


@pytest.mark.parametrize("device", DEVICES)
def test_randn_and_rand_follow_the_seed_and_their_distributions(where):
    n = 200_000
    L.manual_seed(11)
    a = L.randn(n, device=where).numpy()
    L.manual_seed(11)
    b = L.randn(n, device=where).numpy()
    c = L.randn(n, device=where).numpy()
    np.testing.assert_array_equal(a, b)               # the seed decides the draws
    assert not np.array_equal(a, c)                   # and the next draw is new
    assert a.dtype == np.float32
    # N(0, 1): the sample mean within 5 standard errors (1 / sqrt(n)), the variance within 5
    # of its standard error (sqrt(2 / n)), the fourth moment near 3
    assert abs(a.mean()) < 5 / np.sqrt(n)
    assert abs(a.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs((a ** 4).mean() - 3) < 0.1
    u = L.rand(n, dtype=np.float64, device=where).numpy()
    assert u.dtype == np.float64 and u.min() >= 0 and u.max() < 1
    # U(0, 1): mean 1/2 (standard error sqrt(1/12 / n)), variance 1/12, each tenth ~n/10
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - n / 10) < 5 * np.sqrt(n / 10))


@pytest.mark.parametrize("device", DEVICES)
def test_random_like_and_shapes(where):
    x = L.tensor(np.zeros((3, 2, 4, 4), np.float32), device=where)
    y = L.randn_like(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert np.unique(y.numpy()).size == y.numpy().size        # drawn, not filled
    h = L.rand(2, 3, dtype="bfloat16", device=where)
    assert h.dtype == L.backend.bfloat16 and h.shape == (2, 3)
    for dtype in ("bfloat16", np.float16, np.float32):     # [0, 1) after the rounding too
        u = L.rand(100_000, dtype=dtype, device=where).numpy().astype(np.float64)
        assert u.min() >= 0 and u.max() < 1 and u.max() > 0.99, dtype
    g = L.randn(4, requires_grad=True, device=where)
    assert g.requires_grad and g.is_leaf


@pytest.mark.parametrize("device", DEVICES)
def test_randint_draws_every_value_of_its_range_and_nothing_else(where):
    L.manual_seed(2)
    a = L.randint(-3, 4, (20_000,), device=where)
    assert a.dtype == np.int64 and a.shape == (20_000,)
    values, counts = np.unique(a.numpy(), return_counts=True)
    np.testing.assert_array_equal(values, np.arange(-3, 4))
    assert np.all(np.abs(counts - 20_000 / 7) < 5 * np.sqrt(20_000 / 7))
    b = L.randint(5, size=(2, 3), dtype=np.uint8, device=where)
    assert b.dtype == np.uint8 and b.shape == (2, 3) and b.numpy().max() < 5


@pytest.mark.parametrize("device", DEVICES)
def test_randperm_is_a_uniform_permutation(where):
    L.manual_seed(4)
    p = L.randperm(10, device=where)
    assert p.dtype == np.int64 and p.device == L.tensor(np.zeros(1), device=where).device
    np.testing.assert_array_equal(np.sort(p.numpy()), np.arange(10))
    # uniform: where element 0 lands, over 5,000 draws of n = 5, each place ~1/5
    lands = np.array([np.argmax(L.randperm(5).numpy() == 0) for _ in range(5000)])
    assert np.all(np.abs(np.bincount(lands, minlength=5) - 1000) < 5 * np.sqrt(800))
    assert L.randperm(0).shape == (0,) and L.randperm(3, dtype=np.int32).dtype == np.int32
    with pytest.raises(RuntimeError, match="n must be non-negative"):
        L.randperm(-1)


@pytest.mark.parametrize("device", DEVICES)
def test_normal_and_uniform_in_place_draw_their_distributions_where_torch_allows(where):
    n = 100_000
    w = L.tensor(np.zeros(n, np.float32), device=where, requires_grad=True)      # (a leaf)
    with pytest.raises(RuntimeError, match="normal_\\(\\): a leaf tensor that requires grad"):
        w.normal_()                                           # (torch's refusal too)
    with L.no_grad():
        assert w.normal_(1.5, 0.02) is w
    a = w.numpy().astype(np.float64)
    assert abs(a.mean() - 1.5) < 5 * 0.02 / np.sqrt(n) and abs(a.std() - 0.02) < 0.02 * 0.02
    with L.no_grad():
        w.uniform_(-3, -1)
    u = w.numpy().astype(np.float64)
    assert u.min() >= -3 and u.max() < -1 and abs(u.mean() + 2) < 5 * np.sqrt(4 / 12 / n)
    with L.no_grad():
        w.uniform_(**{"from": 2.0, "to": 2.5})             # (torch's keyword names)
    assert 2.0 <= w.numpy().min() and w.numpy().max() < 2.5
    for name in ("normal_", "uniform_"):
        with pytest.raises(NotImplementedError, match=f"{name}\\(\\): draws floating values"):
            getattr(L.tensor(np.array([1, 2]), device=where), name)()


def test_unique_is_torchs():
    for a in (np.array([[3, 1, 3], [2, 1, 0], [3, 1, 3]]),
              np.array([[1, np.nan, 2], [np.nan, 1, 1]])):        # (each NaN its own value)
        _unique_is_torchs(a)


def _unique_is_torchs(a):
    # (rows holding NaN, dim=: torch sorts them as if NaN were smallest; NumPy's order here)
    for kw in [{}, dict(return_inverse=True), dict(return_counts=True),
               dict(return_inverse=True, return_counts=True), dict(dim=0, return_inverse=True,
                                                                   return_counts=True),
               dict(dim=1, return_inverse=True)]:
        if "dim" in kw and np.isnan(a).any():
            continue
        ours, theirs = L.tensor(a).unique(**kw), torch.unique(torch.tensor(a), **kw)
        ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            assert o.dtype == t.numpy().dtype
            np.testing.assert_array_equal(o.numpy(), t.numpy())


def test_bad_arguments_are_refused_with_torchs_kind_of_error():
    for call, err, match in (
            (lambda: L.zeros(2, -1), ValueError, "negative dimension"),
            (lambda: L.ones(2.5), TypeError, "size must be ints"),
            (lambda: L.zeros(2, dtype="nonsense"), TypeError, "dtype must name"),
            (lambda: L.randn(3, dtype=np.int64), TypeError, "not floating"),
            (lambda: L.rand(3, dtype=np.int32), TypeError, "not floating"),
            (lambda: L.randint(4, 4, (2,)), ValueError, "low >= high"),
            (lambda: L.randint(0, 300, (2,), dtype=np.uint8), ValueError, "does not fit"),
            (lambda: L.arange(0, 3, 0), ValueError, "step must be nonzero"),
            (lambda: L.linspace(0, 1, -1), ValueError, "non-negative"),
            (lambda: L.eye(-1), ValueError, "non-negative"),
            (lambda: L.arange(3, 1), ValueError, "inconsistent with the step"),
            (lambda: L.full(2, 3), TypeError, "size must be a tuple"),
            (lambda: L.zeros(2, dtype=np.int64, requires_grad=True), RuntimeError,
             "only Tensors of floating point dtype")):
        with pytest.raises(err, match=match):
            call()
    # torch refuses the same calls
    for call in (lambda: torch.arange(3, 1), lambda: torch.full(2, 3)):
        with pytest.raises((RuntimeError, TypeError)):
            call()
    np.testing.assert_array_equal(L.arange(3, 1, -1).numpy(), torch.arange(3, 1, -1).numpy())
    for call in (lambda: torch.zeros(2, -1), lambda: torch.randn(3, dtype=torch.int64),
                 lambda: torch.randint(4, 4, (2,)), lambda: torch.arange(0, 3, 0),
                 lambda: torch.zeros(2, dtype=torch.int64, requires_grad=True)):
        with pytest.raises(RuntimeError):
            call()

"""nn.init's trunc_normal_, eye_, dirac_ and sparse_, and generator= on the drawing
initialisers, against torch: eye_ / dirac_ equal torch's; trunc_normal_'s draws lie in [a, b]
and follow the truncated normal's distribution (its closed-form CDF, by a Kolmogorov-Smirnov
distance) in both of its rejection schemes, with torch's warning; sparse_'s zeros per column are
torch's count; a generator gives the same draws again and leaves manual_seed's alone."""
import math
import warnings

import numpy as np
import pytest
import torch

import layers as L


def _truncated_cdf(x, mean, std, a, b):
    phi = lambda v: (1.0 + math.erf((v - mean) / std / math.sqrt(2.0))) / 2.0    # noqa: E731
    return (np.vectorize(phi)(x) - phi(a)) / (phi(b) - phi(a))


@pytest.mark.parametrize("mean,std,a,b", [
    (0.0, 1.0, -2.0, 2.0),          # (most normal draws land inside: normal rejection)
    (0.0, 0.02, -2.0, 2.0),         # (timm's ViT init: every draw inside)
    (0.0, 1.0, 1.0, 3.0),           # (probability 0.16: uniform draws, kept by the pdf)
    (0.5, 2.0, -0.25, 0.0)])        # (a narrow range beside the mean)
def test_trunc_normal_follows_the_truncated_distribution(mean, std, a, b):
    L.manual_seed(0)
    n = 20000
    x = np.sort(L.init.trunc_normal_(L.empty(n, dtype=L.float64), mean, std, a, b).numpy())
    assert a <= x.min() and x.max() <= b
    ks = np.max(np.abs(_truncated_cdf(x, mean, std, a, b) - np.arange(1, n + 1) / n))
    assert ks < 1.63 / math.sqrt(n)               # (the 1 % critical value)


def test_trunc_normal_far_from_the_mean_warns_as_torch_and_stays_inside():
    L.manual_seed(0)
    n = 20000
    for lib in (torch, L):
        with pytest.warns(UserWarning, match="mean is more than 2 std from \\[a, b\\]"):
            t = lib.nn.init.trunc_normal_(lib.empty(n, dtype=lib.float64), 0.0, 1.0, 3.0, 4.0)
        assert 3.0 <= float(t.min()) and float(t.max()) <= 4.0
    x = np.sort(t.numpy())
    ks = np.max(np.abs(_truncated_cdf(x, 0.0, 1.0, 3.0, 4.0) - np.arange(1, n + 1) / n))
    assert ks < 1.63 / math.sqrt(n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L.nn.init.trunc_normal_(L.empty(4))          # (no warning at the defaults)


@pytest.mark.parametrize("shape,groups", [((3, 5), None), ((5, 3), None), ((4, 2, 3), 1),
                                          ((4, 2, 3, 3), 2), ((6, 4, 3, 2, 3), 3),
                                          ((2, 4, 5, 5), 1)])
def test_eye_and_dirac_are_torchs(shape, groups):
    fn = "eye_" if groups is None else "dirac_"
    args = () if groups is None else (groups,)
    ours = getattr(L.nn.init, fn)(L.ones(*shape), *args)
    theirs = getattr(torch.nn.init, fn)(torch.ones(*shape), *args)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_eye_dirac_and_sparse_refuse_as_torch():
    for ours, theirs in ((lambda m: m.nn.init.eye_(m.ones(2, 2, 2)), None),
                         (lambda m: m.nn.init.dirac_(m.ones(2, 2)), None),
                         (lambda m: m.nn.init.dirac_(m.ones(3, 2, 3), groups=2), None),
                         (lambda m: m.nn.init.sparse_(m.ones(3), 0.5), None)):
        with pytest.raises(ValueError) as want:
            ours(torch)
        with pytest.raises(ValueError, match=str(want.value)):
            ours(L)


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.5, 0.95])
def test_sparse_zeroes_torchs_count_in_each_column(sparsity):
    L.manual_seed(1)
    ours = L.nn.init.sparse_(L.empty(45, 30, dtype=L.float64), sparsity, std=0.5).numpy()
    theirs = torch.nn.init.sparse_(torch.empty(45, 30, dtype=torch.float64), sparsity, std=0.5)
    np.testing.assert_array_equal((ours == 0).sum(0), (theirs == 0).sum(0).numpy())
    kept = ours[ours != 0]                        # (Normal(0, 0.5): within 4 standard errors)
    assert abs(kept.std() - 0.5) < 4 * 0.5 / math.sqrt(2 * kept.size) and \
        abs(kept.mean()) < 4 * 0.5 / math.sqrt(kept.size)


DRAWING = {
    "uniform_": lambda t, g: L.init.uniform_(t, -1, 2, generator=g),
    "normal_": lambda t, g: L.init.normal_(t, 1, 2, generator=g),
    "trunc_normal_": lambda t, g: L.init.trunc_normal_(t, generator=g),
    "xavier_uniform_": lambda t, g: L.init.xavier_uniform_(t, generator=g),
    "xavier_normal_": lambda t, g: L.init.xavier_normal_(t, generator=g),
    "kaiming_uniform_": lambda t, g: L.init.kaiming_uniform_(t, generator=g),
    "kaiming_normal_": lambda t, g: L.init.kaiming_normal_(t, generator=g),
    "orthogonal_": lambda t, g: L.init.orthogonal_(t, generator=g),
    "sparse_": lambda t, g: L.init.sparse_(t, 0.3, generator=g),
}


@pytest.mark.parametrize("fn", list(DRAWING))
def test_a_generator_gives_the_same_draws_and_leaves_manual_seeds_alone(fn):
    L.manual_seed(2)
    host = L.get_rng_state().numpy()
    a = DRAWING[fn](L.empty(6, 5), L.Generator().manual_seed(7)).numpy()
    b = DRAWING[fn](L.empty(6, 5), L.Generator().manual_seed(7)).numpy()
    c = DRAWING[fn](L.empty(6, 5), L.Generator().manual_seed(8)).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(L.get_rng_state().numpy(), host)
    with pytest.raises(TypeError, match="generator= takes an L.Generator"):
        DRAWING[fn](L.empty(6, 5), torch.Generator())

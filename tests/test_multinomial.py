"""L.multinomial / Tensor.multinomial: the draws follow the closed-form distributions -- with
replacement each category's frequency is its weight's share; without, an ordered pair (i, j)
comes first with probability p_i p_j / (1 - p_i) -- within five standard errors over many
rows drawn at once; categories of weight 0 are never drawn (with replacement) or come last
(without); shapes, dtype, device and the errors are torch's. On the CPU, a GPU and the host GPU
path."""
import itertools

import numpy as np
import pytest
import torch

import layers as L

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]
P = np.array([0.1, 0.0, 0.45, 0.3, 0.15])


def _within(counts, expected, total):
    """Each count within five binomial standard errors of its expectation."""
    sigma = np.sqrt(total * expected * (1 - expected))
    assert np.all(np.abs(counts - total * expected) <= 5 * sigma + 1e-9), \
        (counts / total, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_with_replacement_each_category_comes_in_its_share(where):
    L.manual_seed(0)
    weights = np.stack([P * 7, P[::-1]])                 # two rows, unnormalised
    drawn = L.multinomial(L.tensor(weights, device=where), 40000, replacement=True)
    assert drawn.shape == (2, 40000) and drawn.dtype == np.int64 and drawn.device == where
    for row, w in zip(drawn.numpy(), weights):
        counts = np.bincount(row, minlength=5)
        assert counts[w == 0].sum() == 0                 # (weight 0: never)
        _within(counts, w / w.sum(), row.size)


@pytest.mark.parametrize("device", DEVICES)
def test_without_replacement_ordered_pairs_come_as_sequential_draws(where):
    L.manual_seed(1)
    rows = 60000
    drawn = L.multinomial(L.tensor(np.tile(P, (rows, 1)), device=where), 2).numpy()
    assert drawn.shape == (rows, 2) and np.all(drawn[:, 0] != drawn[:, 1])
    pairs = {(i, j): P[i] * P[j] / (1 - P[i]) for i, j in itertools.permutations(range(5), 2)}
    seen = {pair: np.sum((drawn[:, 0] == pair[0]) & (drawn[:, 1] == pair[1])) for pair in pairs}
    for pair, p in pairs.items():
        _within(np.array([seen[pair]]), np.array([p]), rows)


@pytest.mark.parametrize("device", DEVICES)
def test_all_categories_without_replacement_is_a_permutation_zero_weights_last(where):
    L.manual_seed(2)
    drawn = L.tensor(P, device=where).multinomial(5).numpy()
    assert sorted(drawn.tolist()) == list(range(5)) and drawn[-1] == 1    # (P[1] = 0)
    L.manual_seed(2)
    np.testing.assert_array_equal(L.multinomial(L.tensor(P, device=where), 5).numpy(), drawn)


@pytest.mark.parametrize("args", [([1.0, 2.0], 3, False), ([0.0, 0.0], 1, True),
                                  ([-1.0, 2.0], 1, True), ([np.nan, 2.0], 1, True),
                                  ([np.inf, 1.0], 1, True), ([1.0, 2.0], 0, True),
                                  ([[1.0, 2.0], [0.0, 0.0]], 1, True),
                                  ([[[1.0]]], 1, True)], ids=str)
def test_bad_weights_are_refused_as_torchs(args):
    data, k, replacement = args
    with pytest.raises(RuntimeError) as theirs:
        torch.multinomial(torch.tensor(data), k, replacement)
    with pytest.raises(RuntimeError) as ours:
        L.multinomial(L.tensor(np.asarray(data, np.float32)), k, replacement)
    assert str(ours.value).startswith(str(theirs.value))
    with pytest.raises(RuntimeError, match="only supports floating-point dtypes"):
        L.multinomial(L.tensor([1, 2]), 1)


@pytest.mark.parametrize("device", DEVICES)
def test_a_draw_of_zero_does_not_put_its_category_first(where, monkeypatch):
    """Every uniform drawn as exactly 0 (a GPU's 24-bit draws give one in 2^24): the race times
    are then all alike, so the largest weight comes first -- never the category whose draw it
    was (a race time of 0 would put a weight of 1e-30 first)."""
    from layers import creation
    real = creation._draw
    monkeypatch.setattr(creation, "_draw", lambda size, dtype, device, kind, *rest:
                        real(size, dtype, device, kind, *rest) * 0)
    w = np.array([[1e-30, 1.0, 0.5], [0.25, 1e-30, 1.0]], np.float32)
    np.testing.assert_array_equal(L.multinomial(L.tensor(w, device=where), 2).numpy(),
                                  [[1, 2], [2, 0]])


def test_a_tiny_positive_weight_comes_before_a_zero_one():
    """Weights of 1e-310 (subnormal): their race times do not overflow into weight 0's."""
    for _ in range(5):
        assert L.multinomial(L.tensor([0.0, 1e-310, 1.0], dtype=L.float64), 2).tolist() == [2, 1]


def test_weights_at_the_ends_of_the_range_draw_as_their_ratios():
    """Weights whose sum overflows float64, and weights of 1e-310, drawn as their ratios."""
    L.manual_seed(4)
    for scale in (1e308, 1e-310):                   # (1e308 + 1.5e308 is inf)
        w = L.tensor([[1.0, 1.5, 0.0]], dtype=L.float64) * scale
        counts = np.bincount(L.multinomial(w, 20000, replacement=True).numpy()[0], minlength=3)
        assert counts[2] == 0
        _within(counts[:2], np.array([0.4, 0.6]), 20000)

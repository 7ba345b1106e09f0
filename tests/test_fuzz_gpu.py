"""Hypothesis fuzz of the GPU path against the NumPy path through random views -- transposed,
sliced with steps, reversed (negative strides), broadcast (zero strides), offset starts -- and
dtypes: conv, transposed conv, batch norm, activations, LSTM and LSTMCell, forward and backward.
The NumPy path reads any view as NumPy does; the GPU path must give the same numbers."""
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import layers as L
from cudnnlite import conv
from layers import F, nn
from reference import rel_err

pytestmark = pytest.mark.gpu
EXAMPLES = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TOL = {"float32": 1e-4, "float64": 1e-10}


@pytest.fixture(autouse=True)
def _fp32():
    with conv.using(allow_tf32=False):
        yield


@st.composite
def views(draw, shape, broadcast=True):
    """A recipe for a view of logical `shape`: the axes permuted in memory, each sliced with a
    step of 1 or 2 from an offset, maybe reversed, maybe one axis broadcast (stride 0)."""
    nd = len(shape)
    perm = draw(st.permutations(range(nd)))
    steps = [draw(st.sampled_from([1, 1, 2, -1, -2])) for _ in range(nd)]
    offsets = [draw(st.integers(0, 2)) for _ in range(nd)]
    zero = draw(st.sampled_from([None] * 3 + list(range(nd)))) if broadcast else None
    return perm, steps, offsets, zero


def strided_input(t, recipe):
    """A Tensor that is a strided view of a larger buffer, made from t by differentiable ops (so
    gradients reach t): t is stored with its axes permuted, spread by |step| and offset inside a
    bigger buffer, which is then sliced, transposed back, flipped (negative steps) and maybe
    broadcast along one axis. The op under test receives that view's array; its values are t's,
    reversed / broadcast as the recipe says, on both paths alike."""
    perm, steps, offsets, zero = recipe
    nd = t.ndim
    # store t permuted in memory, spread by |step| with an offset, then view it back
    stored = F.transpose(t, *perm)
    spread = stored
    for j in range(nd):
        a = perm[j]
        k, off = abs(steps[a]), offsets[a]
        if k > 1:       # interleave zeros: (n,) -> (n, k) -> (n*k,)
            sh = spread.shape
            z = F.stack([spread] + [spread * 0.0] * (k - 1), axis=j + 1)
            spread = F.reshape(z, *(sh[:j] + (sh[j] * k,) + sh[j + 1:]))
        if off:
            pad = [0] * (2 * nd)
            pad[2 * (nd - 1 - j)] = off
            spread = F.pad(spread, tuple(pad))
    index = tuple(slice(offsets[perm[j]], None, abs(steps[perm[j]])) for j in range(nd))
    v = F.transpose(spread[index], *np.argsort(perm))
    flip = tuple(slice(None, None, -1) if steps[i] < 0 else slice(None) for i in range(nd))
    if any(s < 0 for s in steps):
        v = v[flip]
    if zero is not None:   # every index along axis `zero` reads its first entry: stride 0
        v = F.broadcast_to(v[(slice(None),) * zero + (slice(0, 1),)], t.shape)
    return v


def cases(fn, shapes, dtype, recipes, tol=None):
    """Run fn on strided views of random inputs of `shapes` on both paths (the inputs seeded by
    the shapes, so a failing example repeats)."""
    rng = np.random.default_rng(zlib.crc32(repr((shapes, dtype)).encode()))
    inputs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    results = []
    for device in ("cpu", 0):
        L.manual_seed(0)
        leaves = [L.tensor(a.copy(), device=device, requires_grad=True) for a in inputs]
        vs = [t if r is None else strided_input(t, r) for t, r in zip(leaves, recipes)]
        outs = fn(*vs)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        loss = None
        for k, o in enumerate(outs):
            w = np.random.default_rng(k).standard_normal(o.shape).astype(dtype)
            term = (o * L.tensor(w, device=device)).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        results.append([o.numpy() for o in outs] + [t.grad.numpy() for t in leaves])
    for i, (a, b) in enumerate(zip(*results)):
        assert rel_err(b, a) < (tol or TOL[dtype]), i


dtypes = st.sampled_from(["float32", "float64"])


@EXAMPLES
@given(data=st.data(), dtype=dtypes)
def test_conv2d(data, dtype):
    N, C, K = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    G = data.draw(st.sampled_from([g for g in (1, 2) if C % g == 0 and K % g == 0]))
    H, W_ = data.draw(st.integers(3, 7)), data.draw(st.integers(3, 7))
    R, S = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    stride, pad, dil = data.draw(st.integers(1, 2)), data.draw(st.integers(0, 1)), 1
    x_shape, w_shape = (N, C, H, W_), (K, C // G, R, S)
    recipe = data.draw(views(x_shape))
    cases(lambda x, w: F.conv2d(x, w, None, stride, pad, dil, G), [x_shape, w_shape], dtype,
          [recipe, None])


@EXAMPLES
@given(data=st.data(), dtype=dtypes)
def test_conv_transpose2d(data, dtype):
    N, Cin, Cout = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    H, W_ = data.draw(st.integers(2, 5)), data.draw(st.integers(2, 5))
    k, s = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    p = data.draw(st.integers(0, (k - 1) // 2)) if k > 1 else 0
    op = data.draw(st.integers(0, s - 1))
    x_shape, w_shape = (N, Cin, H, W_), (Cin, Cout, k, k)
    recipe = data.draw(views(x_shape))
    cases(lambda x, w: F.conv_transpose2d(x, w, None, s, p, op), [x_shape, w_shape], dtype,
          [recipe, None])


@EXAMPLES
@given(data=st.data(), dtype=dtypes, train=st.booleans())
def test_batch_norm(data, dtype, train):
    shape = (data.draw(st.integers(2, 5)), data.draw(st.integers(1, 4)),
             data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5)))
    recipe = data.draw(views(shape))
    # In training mode a channel of one distinct value (broadcast over the only axis that varies)
    # has variance 0, and one of two values normalises to exactly +-d / sqrt(d^2 + eps) whatever
    # d is: either way x's gradient is ~eps / d^2 of its terms (0 in exact arithmetic up to eps),
    # and each path's rounding residue is all there is to compare (seen on the H100: 2e-3
    # "relative error" between two gradients of size 2e-6 made of terms of size 1).
    assume(not train or np.prod([n for i, n in enumerate(shape) if i not in (1, recipe[3])]) > 2)
    C = shape[1]
    rm = np.linspace(-0.5, 0.5, C)
    rv = np.linspace(0.5, 1.5, C)
    pdt = np.float64 if dtype == "float64" else np.float32

    def fn(x, g, b):
        return F.batch_norm(x, L.tensor(rm.astype(pdt), device=x.device),
                            L.tensor(rv.astype(pdt), device=x.device), g, b, training=train)
    cases(fn, [shape, (C,), (C,)], dtype, [recipe, None, None],
          tol=1e-3 if dtype == "float32" else 1e-9)


@EXAMPLES
@given(data=st.data(), dtype=dtypes, act=st.sampled_from(["relu", "sigmoid", "tanh", "leaky"]))
def test_activations(data, dtype, act):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    recipe = data.draw(views(shape))
    fn = {"relu": F.relu, "sigmoid": F.sigmoid, "tanh": F.tanh,
          "leaky": lambda x: F.leaky_relu(x, 0.2)}[act]
    cases(fn, [shape], dtype, [recipe])


@EXAMPLES
@given(data=st.data())
def test_lstm(data):
    I, H = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    layers, bi, bf = data.draw(st.integers(1, 2)), data.draw(st.booleans()), data.draw(st.booleans())
    T, B = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    lengths = data.draw(st.none() | st.lists(st.integers(1, T), min_size=B, max_size=B))
    x_shape = (B, T, I) if bf else (T, B, I)
    D = 2 if bi else 1
    s_shape = (layers * D, B, H)
    rx, rh, rc = (data.draw(views(s, broadcast=False)) for s in (x_shape, s_shape, s_shape))
    L.manual_seed(0)
    ref = nn.LSTM(I, H, layers, batch_first=bf, bidirectional=bi)
    sd = ref.state_dict()

    def fn(x, h0, c0):
        m = nn.LSTM(I, H, layers, batch_first=bf, bidirectional=bi)
        m.load_state_dict(sd)
        m.to(x.device)
        y, (hn, cn) = m(x, (h0, c0), lengths=lengths)
        return [y, hn, cn]
    cases(fn, [x_shape, s_shape, s_shape], "float32", [rx, rh, rc])


@EXAMPLES
@given(data=st.data())
def test_lstm_cell(data):
    I, H, B = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    recipes = [data.draw(views(s)) for s in ((B, I), (B, H), (B, H))]
    L.manual_seed(0)
    sd = nn.LSTMCell(I, H).state_dict()

    def fn(x, h, c):
        cell = nn.LSTMCell(I, H)
        cell.load_state_dict(sd)
        cell.to(x.device)
        return list(cell(x, (h, c)))
    cases(fn, [(B, I), (B, H), (B, H)], "float32", recipes)


@EXAMPLES
@given(a=dtypes, b=dtypes)
def test_dtype_mixes_are_refused_or_exact(a, b):
    """conv with x and W of different dtypes is a TypeError naming both; the same dtype runs."""
    x = L.tensor(np.ones((1, 2, 4, 4), a), device=0)
    w = L.tensor(np.ones((3, 2, 3, 3), b), device=0)
    if a != b:
        with pytest.raises(TypeError, match=f"{a}.*{b}|{b}.*{a}"):
            F.conv2d(x, w)
    else:
        np.testing.assert_array_equal(F.conv2d(x, w).numpy(), np.full((1, 3, 2, 2), 18.0, a))

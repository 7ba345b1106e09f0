"""The boundary's steady-state path (boundary.CallCache, kept by cudnnlite.conv, .batchnorm and
.activation): a call repeated with arrays of one boundary.signature skips the checks -- and any
property that differs takes them again, so nothing a check would refuse or copy gets through.
Run with the GPU path on the host (tests/host_kernels.py): cuDNN's calls answered from the
memory the pointers name."""
import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import activation, api, batchnorm, boundary, conv

from host_kernels import CXX, HostArray

pytest.importorskip("cupy")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


@pytest.fixture
def counted(request, monkeypatch):
    """The GPU path on the host, each module's first check counted (calls of the checked path),
    and every pointer cuDNN's stand-ins are given checked for 16-byte alignment."""
    from conftest import gpu_path_on_host
    gpu_path_on_host(request, monkeypatch)
    counts = {"conv": 0, "bn": 0, "act": 0, "misaligned": []}
    boundary.device_array("cudnnFoo", "x", dev(np.zeros(1)))   # (a type it accepts: see signature)

    def counting(module, name, key):
        real = getattr(module, name)

        def f(*a, **k):
            counts[key] += 1
            return real(*a, **k)
        monkeypatch.setattr(module, name, f)
    counting(conv, "common_dtype", "conv")
    counting(batchnorm, "_setup", "bn")
    counting(activation, "_checked", "act")
    for name in ("cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                 "cudnnConvolutionBackwardFilter", "cudnnBatchNormalizationForwardTrainingEx",
                 "cudnnBatchNormalizationBackwardEx", "cudnnActivationForward",
                 "cudnnActivationBackward"):
        real = getattr(api, name)

        def aligned(*args, _real=real, _name=name):
            for a in args:
                if isinstance(a, int) and a > 1 << 16 and a % boundary.ALIGNMENT:
                    counts["misaligned"].append(_name)
            return _real(*args)
        monkeypatch.setattr(api, name, aligned)
    return counts


def dev(a):
    return np.ascontiguousarray(a).view(HostArray)


def _conv_ref(x, W, pad):
    """float64 cross-correlation, NCHW."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    K, C, R, S = W.shape
    P, Q = x.shape[2] - R + 1, x.shape[3] - S + 1
    y = np.zeros((x.shape[0], K, P, Q))
    for r in range(R):
        for s in range(S):
            y += np.einsum("nchw,kc->nkhw", x[:, :, r:r + P, s:s + Q], W[:, :, r, s])
    return y


rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
WT = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)


def test_a_repeated_conv_call_takes_the_checks_once_and_gives_the_same_result(counted):
    x, W = dev(X), dev(WT)
    ref = _conv_ref(X, WT, 1)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(conv.forward(x, W, pad=1)), ref, rtol=1e-5, atol=1e-5)
    assert counted["conv"] == 1
    gy = dev(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
    gx = [conv.backward_data(W, gy, X.shape, pad=1) for _ in range(2)]
    gW = [conv.backward_filter(x, gy, WT.shape, pad=1) for _ in range(2)]
    assert counted["conv"] == 3                      # once per direction
    np.testing.assert_array_equal(gx[0], gx[1])
    np.testing.assert_array_equal(gW[0], gW[1])
    assert not counted["misaligned"]


def test_a_view_the_checks_would_copy_is_copied_after_a_hit(counted):
    """A misaligned and a strided view of the same shape follow a packed call: each has its
    own signature, is checked, copied, and gives the same result."""
    x, W = dev(X), dev(WT)
    conv.forward(x, W, pad=1)
    conv.forward(x, W, pad=1)
    assert counted["conv"] == 1
    ref = _conv_ref(X, WT, 1)
    buf = np.zeros(X.size + 1, np.float32).view(HostArray)
    buf[1:] = X.ravel()
    misaligned = buf[1:].reshape(X.shape)            # 4 bytes past a 16-byte boundary
    assert misaligned.data.ptr % boundary.ALIGNMENT
    wide = dev(np.zeros((2, 3, 6, 12), np.float32))
    wide[..., ::2] = X
    for view in (misaligned, wide[..., ::2], misaligned):
        y = np.asarray(conv.forward(view, W, pad=1))
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert counted["conv"] == 4                      # each a miss: never kept (a copy was made)
    assert not counted["misaligned"]


@pytest.mark.parametrize("direction", ["backward_data", "backward_filter"])
def test_a_float_shape_equal_to_a_kept_int_one_is_refused_as_on_a_first_call(counted,
                                                                              direction):
    """(2.0, 3, 6, 6) == (2, 3, 6, 6) in a key: the shape is made ints, or refused, before the
    call's key is made, so the float one is refused after a hit as before any; NumPy integers
    are sizes like ints."""
    x, W = dev(X), dev(WT)
    gy = dev(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
    call = (lambda shape: conv.backward_data(W, gy, shape, pad=1)) if direction == \
        "backward_data" else (lambda shape: conv.backward_filter(x, gy, shape, pad=1))
    shape = X.shape if direction == "backward_data" else WT.shape
    name = "x_shape" if direction == "backward_data" else "w_shape"
    floats = (float(shape[0]),) + shape[1:]
    with pytest.raises(cl.BadParam, match=rf"{name} must be a sequence of integers"):
        call(floats)
    first = call(shape)
    np.testing.assert_array_equal(call(tuple(np.int64(n) for n in shape)), first)
    assert counted["conv"] == 1                     # the NumPy sizes: the kept call's key
    with pytest.raises(cl.BadParam, match=rf"{name} must be a sequence of integers, got "
                                          rf"\({floats[0]}, "):
        call(floats)


@pytest.mark.parametrize("name", ["stride", "pad", "dilation", "groups"])
def test_a_float_geometry_equal_to_a_kept_int_one_is_refused_as_on_a_first_call(counted, name):
    """stride=1.0 == 1 in a key: the geometry is made ints, or refused, before the call's key
    is made."""
    x, W = dev(X), dev(WT)
    good = dict(stride=1, pad=1, dilation=1, groups=1)
    conv.forward(x, W, **good)
    conv.forward(x, W, **{**good, name: np.int64(good[name])})     # NumPy ints: the same call
    assert counted["conv"] == 1
    with pytest.raises(cl.BadParam, match=rf"{name} must be an integer"):
        conv.forward(x, W, **{**good, name: float(good[name])})


@pytest.mark.parametrize("bad", ["W dtype", "W int32", "out shape", "out dtype", "device",
                                 "settings"])
def test_a_changed_property_after_a_hit_is_checked(counted, monkeypatch, bad):
    x, W = dev(X), dev(WT)
    out = dev(np.zeros((2, 4, 6, 6), np.float32))
    for _ in range(2):
        conv.forward(x, W, pad=1, out=out)
    assert counted["conv"] == 1
    if bad == "W dtype":
        with pytest.raises(cl.BadParam, match="x and W must have one dtype"):
            conv.forward(x, dev(WT.astype(np.float64)), pad=1, out=out)
    elif bad == "W int32":                           # (the same strides as float32's)
        with pytest.raises(cl.BadParam, match="x and W must have one dtype, got float32 and int32"):
            conv.forward(x, dev(WT.astype(np.int32)), pad=1, out=out)
    elif bad == "out shape":
        with pytest.raises(cl.BadParamShapeMismatch, match="out has shape"):
            conv.forward(x, W, pad=1, out=dev(np.zeros((2, 4, 6, 5), np.float32)))
    elif bad == "out dtype":
        with pytest.raises(cl.BadParam, match="x and out must have one dtype"):
            conv.forward(x, W, pad=1, out=dev(np.zeros((2, 4, 6, 6), np.float64)))
    elif bad == "device":                            # the current device is now another one
        from types import SimpleNamespace
        monkeypatch.setattr(boundary, "get_handle",
                            lambda: SimpleNamespace(device_id=1, workspace=lambda size: 0))
        with pytest.raises(cl.BadParam, match="x is on device 0 but the current device is 1"):
            conv.forward(x, W, pad=1, out=out)
    else:
        with conv.using(allow_tf32=False):
            conv.forward(x, W, pad=1, out=out)
        conv.forward(x, W, pad=1, out=out)           # (the old settings again: still kept)
        assert counted["conv"] == 2
        return
    assert counted["conv"] == 2


def test_batch_norm_ex_calls_take_the_checks_once_and_a_changed_property_again(counted):
    """forward_training_ex / backward_ex as the conv calls: the checked set-up once per
    signature, the same results on a hit, and a float64 gamma or a short reserve refused
    after hits."""
    x = dev(rng.standard_normal((4, 5, 3, 3)).astype(np.float32).transpose(0, 2, 3, 1))
    g, b = dev(np.linspace(0.5, 1.5, 5, dtype=np.float32)), dev(np.zeros(5, np.float32))
    rm, rv = dev(np.zeros(5, np.float32)), dev(np.ones(5, np.float32))
    outs = [batchnorm.forward_training_ex(x, g, b, rm, rv) for _ in range(3)]
    assert counted["bn"] == 1
    for y, mean, invstd, _ in outs[1:]:
        np.testing.assert_array_equal(y, outs[0][0])
        np.testing.assert_array_equal(mean, outs[0][1])
    xs = np.asarray(x, np.float64)
    mu, var = xs.mean((0, 1, 2)), xs.var((0, 1, 2))
    want = (xs - mu) / np.sqrt(var + 1e-5) * np.asarray(g)
    np.testing.assert_allclose(np.asarray(outs[0][0]), want, rtol=1e-4, atol=1e-4)
    y, mean, invstd, reserve = outs[0]
    gy = dev(rng.standard_normal(x.shape).astype(np.float32))
    grads = [batchnorm.backward_ex(x, gy, g, b, mean, invstd, reserve) for _ in range(2)]
    assert counted["bn"] == 2
    for a, c in zip(*grads):
        np.testing.assert_array_equal(a, c)
    with pytest.raises(cl.BadParam, match="gamma must be float32"):
        batchnorm.forward_training_ex(x, dev(np.asarray(g, np.float64)), b, rm, rv)
    if reserve.size:
        with pytest.raises(cl.BadParam, match="reserve must be"):
            batchnorm.backward_ex(x, gy, g, b, mean, invstd, reserve[:-1])
    assert not counted["misaligned"]


def test_with_the_call_cache_off_every_call_is_checked(counted, monkeypatch):
    monkeypatch.setattr(boundary, "CALL_CACHE", False)
    x, W = dev(X), dev(WT)
    for _ in range(3):
        conv.forward(x, W, pad=1)
    assert counted["conv"] == 3


def test_a_repeated_graph_api_call_runs_the_plan_it_ran_before(counted, monkeypatch):
    """With api='graph', a call seen before keeps the execution plan it ran (no plan lookup on
    the next calls), and runs it on each call's own arrays; other settings make another."""
    built, ran = [], []

    class FakePlan:                                  # (an ExecutionPlan's run, recorded)
        workspace = 0

        def execute(self, h, uids, ptrs, ws):
            ran.append((self, uids, ptrs))

    def new_plan(p, d, handle, alpha, beta, arrays=None):
        built.append(FakePlan())
        return built[-1]
    monkeypatch.setattr(conv, "_new_graph_plan", new_plan)
    from cudnnlite._cache import LRU
    monkeypatch.setattr(conv, "_plans", LRU(16))       # (no plan, nor refusal, of earlier tests)
    lookups = []
    real_lookup = conv.Plan.graph_plan_or_refusal
    monkeypatch.setattr(conv.Plan, "graph_plan_or_refusal",
                        lambda *a, **k: lookups.append(1) or real_lookup(*a, **k))
    x, W = dev(X), dev(WT)
    with conv.using(api="graph"):
        ys = [conv.forward(x, W, pad=1) for _ in range(4)]
    assert len(built) == 1 and len(lookups) == 2      # the checked call, then the first hit
    assert [r[0] for r in ran] == built * 4
    for y, (_, uids, ptrs) in zip(ys, ran):
        assert uids == (1, 2, 3) and ptrs == (x.data.ptr, W.data.ptr, y.data.ptr)
    with conv.using(api="graph", algo_mode="benchmark"):
        conv.forward(x, W, pad=1)
    assert len(built) == 2


def test_activation_calls_take_the_checks_once_and_a_changed_property_again(counted):
    """cudnnlite.activation's forward / backward as the conv calls: checked once per signature,
    the same results (against NumPy's tanh) on a hit, a float64 gy refused and a misaligned x
    copied after hits."""
    x = dev(rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    ys = [activation.forward(x, cl.ActivationMode.TANH) for _ in range(3)]
    assert counted["act"] == 1
    for y in ys:
        np.testing.assert_allclose(np.asarray(y), np.tanh(np.asarray(x)), rtol=1e-6, atol=1e-6)
    gy = dev(np.ones(x.shape, np.float32))
    gxs = [activation.backward(ys[0], gy, x, cl.ActivationMode.TANH) for _ in range(3)]
    assert counted["act"] == 2
    for gx in gxs:
        np.testing.assert_allclose(np.asarray(gx), 1 - np.asarray(ys[0]) ** 2, rtol=1e-5, atol=1e-6)
    with pytest.raises(cl.BadParam, match="must have one dtype"):
        activation.backward(ys[0], dev(np.ones(x.shape)), x, cl.ActivationMode.TANH)
    buf = np.zeros(x.size + 1, np.float32).view(HostArray)
    buf[1:] = np.asarray(x).ravel()
    misaligned = buf[1:].reshape(x.shape)
    np.testing.assert_allclose(activation.forward(misaligned, cl.ActivationMode.TANH), ys[0],
                               rtol=1e-6, atol=1e-6)
    assert counted["act"] == 4 and not counted["misaligned"]


def test_a_problem_its_cache_dropped_is_not_kept_alive_by_the_calls_kept(counted, monkeypatch):
    """The calls kept hold their Plans (and graph plans) weakly: with room for 2 problems, 5
    problems leave at most 2 Plans alive, and a call whose Plan is gone takes the checks again
    and gives the right result."""
    import gc
    import weakref
    from cudnnlite._cache import LRU
    monkeypatch.setattr(conv, "_plans", LRU(2))
    W = dev(WT)
    xs = [dev(rng.standard_normal((2, 3, 5 + i, 6)).astype(np.float32)) for i in range(5)]
    plans = []
    real_new_plan = conv._new_plan
    monkeypatch.setattr(conv, "_new_plan", lambda *a: plans.append(real_new_plan(*a)) or
                        plans[-1])
    for x in xs:
        conv.forward(x, W, pad=1)
    refs = [weakref.ref(p) for p in plans]
    del plans[:]
    gc.collect()
    assert sum(r() is not None for r in refs) <= 2
    n = counted["conv"]
    np.testing.assert_allclose(np.asarray(conv.forward(xs[0], W, pad=1)),
                               _conv_ref(np.asarray(xs[0]), WT, 1), rtol=1e-5, atol=1e-5)
    assert counted["conv"] == n + 1                  # checked again: its Plan was gone


def test_settings_hash_once_and_do_not_carry_the_hash_when_pickled():
    import dataclasses
    import pickle
    s = dataclasses.replace(conv.settings, workspace_limit=123)
    assert hash(s) == hash(dataclasses.replace(conv.settings, workspace_limit=123))
    assert hash(s) != hash(dataclasses.replace(s, api="graph"))
    t = pickle.loads(pickle.dumps(s))
    assert t == s and "_hash" not in t.__dict__ and hash(t) == hash(s)


def test_an_entry_put_again_is_the_most_recent():
    from cudnnlite._cache import LRU
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 3)                                    # "b" is now the oldest
    c.put("c", 4)
    assert "b" not in c and c.peek("a") == 3 and c.peek("c") == 4


def _aligned(n, dtype=np.float32):
    """n items of a fresh host "device" buffer whose first is 16-byte aligned."""
    buf = np.zeros(n + 16, dtype).view(HostArray)
    off = (-buf.data.ptr % 16) // buf.itemsize
    return buf[off:off + n]


def _call_twice(first, second):
    """first() kept by the call cache, then second() with arrays of the same signature."""
    first()
    return second()


@pytest.mark.parametrize("case", ["conv out is x", "wgrad out over gy", "activation out over x",
                                  "bn add_to overlapping", "bn add_to over gamma"])
def test_an_out_sharing_memory_with_an_input_is_refused_on_a_hit_too(counted, case):
    """A relation between two arrays is not in the call's key (each array's own signature is):
    checked on every call, so a hit cannot let through what the checks refuse."""
    rng = np.random.default_rng(0)
    if case.startswith("bn"):
        x = dev(rng.standard_normal((4, 3, 3, 8)).astype(np.float32))      # NHWC, C = 8
        g, b = dev(np.linspace(0.5, 1.5, 8, dtype=np.float32)), dev(np.zeros(8, np.float32))
        y, mean, invstd, reserve = batchnorm.forward_training_ex(
            x, g, b, dev(np.zeros(8, np.float32)), dev(np.ones(8, np.float32)))
        gy = dev(rng.standard_normal(x.shape).astype(np.float32))
        buf = _aligned(16)
        bad = (buf[0:8], buf[4:12]) if case == "bn add_to overlapping" else (g, _aligned(8))
        calls = [lambda add_to=add_to: batchnorm.backward_ex(x, gy, g, b, mean, invstd, reserve,
                                                             add_to=add_to)
                 for add_to in ((_aligned(8), _aligned(8)), bad)]
        pattern = "overlap" if case == "bn add_to overlapping" else "shares memory with gamma"
    elif case == "activation out over x":
        buf = _aligned(32)
        calls = [lambda: activation.forward(buf[:12], cl.ActivationMode.TANH, out=buf[16:28]),
                 lambda: activation.forward(buf[:12], cl.ActivationMode.TANH, out=buf[4:16])]
        pattern = "out shares memory with x"
    else:
        x = dev(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
        W = dev(rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
        if case == "conv out is x":
            calls = [lambda: conv.forward(x, W, pad=1, out=dev(np.zeros_like(x))),
                     lambda: conv.forward(x, W, pad=1, out=x)]
            pattern = "out shares memory with x"
        else:
            gy = dev(rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
            calls = [lambda: conv.backward_filter(x, gy, W.shape, pad=1,
                                                  out=dev(np.zeros_like(W))),
                     lambda: conv.backward_filter(x, gy, W.shape, pad=1,
                                                  out=gy.reshape(-1)[:144].reshape(W.shape))]
            pattern = "out shares memory with gy"
    with pytest.raises(cl.BadParam, match=pattern):       # refused on a first call
        calls[1]()
    for module in (conv, batchnorm, activation):
        module.clear_cache()
    with pytest.raises(cl.BadParam, match=pattern):       # and after a hit
        _call_twice(*calls)


def test_an_activation_in_place_is_taken_as_cudnn_documents(counted):
    x = dev(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    want = np.tanh(np.asarray(x).copy())
    assert activation.forward(x, cl.ActivationMode.TANH, out=x) is x
    np.testing.assert_allclose(np.asarray(x), want, rtol=1e-6)

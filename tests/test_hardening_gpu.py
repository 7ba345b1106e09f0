"""Each silent corruption issue 9's review found, on the GPU, against the NumPy path or an exact
expectation: (1) cuDNN LSTM on strided views, (2) batch norm on a strided view, (3) the raw API
trusting its caller, (4) captured graphs and memory they do not own or settings they ignore,
(5) half precision, (6) caches. (7, grad mode per thread, needs no GPU: test_boundary.py.)"""
import numpy as np
import pytest

import cudnnlite as cl
import layers as L
from cudnnlite import batchnorm, conv
from fake_device import FakeDeviceArray
from layers import F, nn
from reference import rel_err

pytestmark = pytest.mark.gpu
TOL = 1e-4          # float32 with FMA convolutions: conv sums differ in order from NumPy's


@pytest.fixture(autouse=True)
def _fp32():
    with conv.using(allow_tf32=False):
        yield


def _both(run):
    """run(device) -> list of Tensors/arrays, on the NumPy path and on the GPU."""
    L.manual_seed(0)
    cpu = [np.asarray(a.numpy() if isinstance(a, L.Tensor) else a) for a in run("cpu")]
    L.manual_seed(0)
    gpu = [a.numpy() if isinstance(a, L.Tensor) else a.get() for a in run(0)]
    return cpu, gpu


def _assert_same(run, tol=TOL):
    cpu, gpu = _both(run)
    for i, (a, b) in enumerate(zip(gpu, cpu)):
        assert rel_err(a, b) < tol, i


# ---- (1) cuDNN LSTM on strided views ----------------------------------------------------------

def _lstm(I, H, batch_first, bidirectional=False, layers=1):
    L.manual_seed(0)
    m = nn.LSTM(I, H, layers, batch_first=batch_first, bidirectional=bidirectional)
    return m


def test_lstm_fed_a_transposed_conv_output_and_a_loss_on_transposed_states():
    """Tacotron 2's encoder pattern: Conv1d (B, C, T) -> transpose -> batch_first LSTM; the
    review measured a weight_ih gradient 0.76 off and an x gradient 1.34 off."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 9)).astype(np.float32)
    wc = (rng.standard_normal((5, 6, 3)) * 0.3).astype(np.float32)
    m0 = _lstm(5, 7, batch_first=True, bidirectional=True)
    wy = rng.standard_normal((4, 9, 14)).astype(np.float32)
    wh = rng.standard_normal((4, 2, 7)).astype(np.float32)

    def run(device):
        m = _lstm(5, 7, batch_first=True, bidirectional=True)
        m.load_state_dict(m0.state_dict())
        m.to(device)
        xt = L.tensor(x, device=device, requires_grad=True)
        w = L.tensor(wc, device=device, requires_grad=True)
        h = F.conv1d(xt, w, padding=1)                           # (B, 5, T)
        y, (hn, cn) = m(F.transpose(h, 0, 2, 1))                # a (B, T, 5) strided view
        loss = (y * L.tensor(wy, device=device)).sum() \
            + (F.transpose(hn, 1, 0, 2) * L.tensor(wh, device=device)).sum()
        loss.backward()
        return [y, hn, cn, xt.grad, w.grad] + [p.grad for p in m.parameters()]
    _assert_same(run)


def test_lstm_initial_state_given_as_views():
    """h0 / c0 as transposed views (review: output 0.75 off)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    h0 = rng.standard_normal((3, 2, 5)).astype(np.float32)      # (B, L*D, H): transposed below
    c0 = rng.standard_normal((3, 2, 5)).astype(np.float32)
    m0 = _lstm(4, 5, batch_first=False, layers=2)

    def run(device):
        m = _lstm(4, 5, batch_first=False, layers=2)
        m.load_state_dict(m0.state_dict())
        m.to(device)
        ts = [L.tensor(a, device=device, requires_grad=True) for a in (x, h0, c0)]
        y, (hn, cn) = m(ts[0], (F.transpose(ts[1], 1, 0, 2), F.transpose(ts[2], 1, 0, 2)))
        (y.sum() + (hn * hn).sum() + cn.sum()).backward()
        return [y, hn, cn] + [t.grad for t in ts] + [p.grad for p in m.parameters()]
    _assert_same(run)


# ---- (2) batch norm on a strided view ---------------------------------------------------------

@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_of_a_strided_view(train):
    """F.batch_norm(x[..., ::2]): the review measured 1.24 off and writes past the output."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((8, 3, 5, 10)) * 2 + 1).astype(np.float32)
    gy = rng.standard_normal((8, 3, 5, 5)).astype(np.float32)

    def run(device):
        bn = nn.BatchNorm2d(3).to(device).train(train)
        xt = L.tensor(x, device=device, requires_grad=True)
        y = bn(xt[..., ::2])
        (y * L.tensor(gy, device=device)).sum().backward()
        return [y, xt.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var]
    _assert_same(run)


def test_raw_batch_norm_output_is_packed_whatever_the_view():
    import cupy
    rng = np.random.default_rng(3)
    base = cupy.asarray(rng.standard_normal((4, 3, 6, 8)).astype(np.float32))
    x = base[:, :, :, ::2]
    g, b = cupy.ones(3, np.float32), cupy.zeros(3, np.float32)
    y, mean, invstd = batchnorm.forward_training(x, g, b)
    assert y.flags.c_contiguous and y.shape == x.shape
    h = x.get().astype(np.float64)
    ref = (h - h.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(h.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    assert rel_err(y.get(), ref) < 1e-5


# ---- (3) the raw API checks its caller ----------------------------------------------------------

def test_conv_refuses_a_float64_filter_with_float32_data():
    import cupy
    x = cupy.ones((2, 3, 8, 8), np.float32)
    W = cupy.ones((4, 3, 3, 3), np.float64)                   # review: a result of ~1e33
    with pytest.raises(cl.BadParam, match="x and W must have one dtype, got float32 and float64"):
        conv.forward(x, W)


def test_an_undersized_out_is_refused_and_nothing_past_it_is_written():
    import cupy
    x = cupy.ones((2, 3, 8, 8), np.float32)
    W = cupy.ones((4, 3, 3, 3), np.float32)
    buf = cupy.full(2 * 4 * 6 * 6 + 300, 7.0, np.float32)
    out = buf[:2 * 4 * 6 * 5].reshape(2, 4, 6, 5)              # review: written 278 elements past
    with pytest.raises(cl.BadParamShapeMismatch, match=r"out has shape \(2, 4, 6, 5\)"):
        conv.forward(x, W, out=out)
    assert bool((buf == 7.0).all())


def test_batch_norm_refuses_parameters_of_the_wrong_dtype():
    import cupy
    x = cupy.ones((4, 3, 2, 2), np.float16)
    with pytest.raises(cl.BadParam, match="gamma must be float32 for HALF data"):
        batchnorm.forward_training(x, cupy.ones(3, np.float16), cupy.zeros(3, np.float32))


def test_lstm_with_input_size_1():
    """The weight space's (4H, 1) matrices: a size-1 axis is real (review: backward failed)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 3, 1)).astype(np.float32)
    m0 = _lstm(1, 4, batch_first=False, bidirectional=True)

    def run(device):
        m = _lstm(1, 4, batch_first=False, bidirectional=True)
        m.load_state_dict(m0.state_dict())
        m.to(device)
        xt = L.tensor(x, device=device, requires_grad=True)
        y, _ = m(xt, lengths=[7, 5, 2])
        (y * y).sum().backward()
        return [y, xt.grad] + [p.grad for p in m.parameters()]
    _assert_same(run)


def test_arrays_on_another_device_than_the_current_one_are_refused():
    """(A second GPU's array, as metadata: the check reads only its device id.)"""
    import cupy
    x = cupy.ones((2, 3, 8, 8), np.float32)
    W = FakeDeviceArray((4, 3, 3, 3), device=1, ptr=x.data.ptr)
    with pytest.raises(cl.BadParam, match="W is on device 1 but the current device is 0"):
        conv.forward(x, W)


# ---- (4) captured graphs --------------------------------------------------------------------

def test_a_graph_keeps_its_workspace_when_the_handle_grows():
    """Review: growing the handle's workspace freed the buffer a graph still wrote into, and one
    replay overwrote 13.7 million elements of a new array."""
    import cupy
    rng = np.random.default_rng(5)
    x = cupy.asarray(rng.standard_normal((8, 16, 32, 32)).astype(np.float32))
    W = cupy.asarray(rng.standard_normal((16, 16, 5, 5)).astype(np.float32) * 0.05)
    h = cl.get_handle()
    p = conv.plan(x.shape, conv.c_strides(x.shape), W.shape, "float32", pad=2)
    algo = max((c for c in p.candidates(conv.FWD, h) if c.status == 0 and c.memory < 1 << 28),
               key=lambda c: c.memory)
    assert algo.memory > 0, "no listed algorithm uses a workspace"
    # size the workspace here, on the default stream: the pool hands a freed block back only to
    # the stream it was allocated on, and the sentinel below is allocated on this one
    h.workspace(algo.memory + h._workspace.nbytes)
    step = L.graph.CapturedStep(lambda x: conv.forward(x, W, pad=2, algo=algo.algo))
    expected = conv.forward(x, W, pad=2, algo=algo.algo).get()
    step(x)
    step(x)                                     # captured (and replayed once)
    held = h._workspace.nbytes
    h.workspace(held * 4)                       # what conv does for a bigger problem
    sentinel = cupy.full(held // 4, 7.0, np.float32)
    y = step(x)
    cupy.cuda.get_current_stream().synchronize()
    assert bool((sentinel == 7.0).all())
    np.testing.assert_array_equal(y.get(), expected)


def test_workspace_growth_during_capture_is_refused():
    import cupy
    h = cl.get_handle()
    need = h._workspace.nbytes + (1 << 20)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            with pytest.raises(cl.BadParam, match="workspace would grow .* during CUDA-graph capture"):
                h.workspace(need)
        finally:
            s.end_capture()


def test_manual_seed_after_capture_reseeds_the_replays():
    import cupy
    x = L.tensor(cupy.ones(4096, np.float32))
    L.manual_seed(3)
    a, b = F.dropout(x, 0.5).numpy(), F.dropout(x, 0.5).numpy()
    step = L.graph.CapturedStep(lambda x: F.dropout(x, 0.5).data)
    L.manual_seed(9)
    step(x)
    step(x)                                     # captured
    L.manual_seed(3)                            # review: the graph kept the old generator's state
    np.testing.assert_array_equal(step(x).get(), a)
    np.testing.assert_array_equal(step(x).get(), b)


def _conv_model():
    L.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU()).to(0)
    return m, L.optim.Adam(m.parameters(), lr=0.05)


def _train_step(m, opt):
    def step(x):
        opt.zero_grad()
        loss = (m(x) * m(x)).mean()
        loss.backward()
        opt.step()
        return loss.data
    return step


def test_optimizer_load_state_dict_after_capture_is_what_the_replays_use():
    x = L.tensor(np.random.default_rng(6).standard_normal((4, 2, 6, 6)).astype(np.float32),
                 device=0)
    with conv.using(deterministic=True):
        m0, o0 = _conv_model()
        _train_step(m0, o0)(x)
        snap_m, snap_o = m0.state_dict(), o0.state_dict()
        _train_step(m0, o0)(x)
        _train_step(m0, o0)(x)
        m1, o1 = _conv_model()
        step = L.graph.CapturedStep(_train_step(m1, o1), modules=(m1,), optimizers=(o1,))
        for _ in range(4):
            step(x)                             # warm-up, capture, replays: diverged from m0
        m1.load_state_dict(snap_m)
        o1.load_state_dict(snap_o)              # review: Adam's state was replaced, not rewritten
        step(x)
        step(x)
    ref, got = m0.state_dict(), m1.state_dict()
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_eval_after_capture_is_captured_anew():
    m, _ = _conv_model()
    x = L.tensor(np.random.default_rng(7).standard_normal((4, 2, 6, 6)).astype(np.float32),
                 device=0)
    step = L.graph.CapturedStep(lambda x: m(x).data, modules=(m,))
    for _ in range(3):
        step(x)
    m.eval()
    expected = m(x).numpy()
    for _ in range(3):                          # warm-up, capture, replay in eval mode
        got = step(x).get()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert len(step._graphs) == 2


def test_conv_settings_after_capture_are_captured_anew():
    import cupy
    rng = np.random.default_rng(8)
    x = cupy.asarray(rng.standard_normal((8, 64, 16, 16)).astype(np.float32))
    W = cupy.asarray(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) / 24)
    step = L.graph.CapturedStep(lambda x: conv.forward(x, W, pad=1))
    for _ in range(3):
        fp32 = step(x).get()
    with conv.using(allow_tf32=True):
        tf32_eager = conv.forward(x, W, pad=1).get()
        for _ in range(3):
            got = step(x).get()
    assert not np.array_equal(tf32_eager, fp32)          # the settings do change the result
    np.testing.assert_array_equal(got, tf32_eager)
    assert len(step._graphs) == 2


# ---- (6) caches -------------------------------------------------------------------------------

def test_algorithm_choices_are_per_device():
    import cupy
    x, W = cupy.ones((2, 3, 8, 8), np.float32), cupy.ones((4, 3, 3, 3), np.float32)
    conv.forward(x, W)
    p = conv.plan(x.shape, conv.c_strides(x.shape), W.shape, "float32")
    assert p._choices and all(key[1] == 0 for key in p._choices)

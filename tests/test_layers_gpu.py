"""Every op's GPU path (cuDNN / CuPy) against its NumPy path; layers, optimizers, dropout's
device generator (also inside a captured CUDA graph), device-mix errors."""
import numpy as np
import pytest

import layers as L
from layers import F
from cudnnlite import conv as cudnn_conv
from reference import TOLERANCE, rel_err
from test_torch_parity import LAYERS, OPS, f32

pytestmark = pytest.mark.gpu


def _run(fn, arrays, grad_inputs, device, w):
    idx = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grad_inputs is None \
        else grad_inputs
    ts = [L.tensor(a.copy(), device=device, requires_grad=i in idx) for i, a in enumerate(arrays)]
    y = fn(*ts)
    if idx:
        (y * L.tensor(w, device=device)).sum().backward()
    return y.numpy(), [ts[i].grad.numpy() for i in idx]


@pytest.fixture(params=[False, True], ids=["fp32", "tf32"])
def tf32(request):
    with cudnn_conv.using(allow_tf32=request.param):
        yield request.param


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_gpu_matches_numpy(name, tf32):
    ours, _, arrays, tol, grad_inputs = OPS[name]
    if tf32 and not name.startswith("conv"):
        pytest.skip("TF32 only changes convolutions")
    if tf32:
        tol = TOLERANCE["tf32"]
    L.manual_seed(0)
    y_cpu = ours(*[L.tensor(a) for a in arrays])
    w = f32(*y_cpu.shape)
    y, g = _run(ours, arrays, grad_inputs, "cpu", w)
    yd, gd = _run(ours, arrays, grad_inputs, 0, w)
    assert rel_err(yd, y) < tol
    for a, b in zip(gd, g):
        assert rel_err(a, b) < tol


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_gpu_matches_numpy(name, train):
    make = LAYERS[name][0]
    shape = LAYERS[name][2]
    L.manual_seed(0)
    m_cpu = make().train(train)
    m_gpu = make().train(train)
    m_gpu.load_state_dict(m_cpu.state_dict())
    m_gpu.to(0)
    with cudnn_conv.using(allow_tf32=False):
        for _ in range(2):
            x = f32(*shape)
            w = None
            outs = []
            for m, dev in ((m_cpu, "cpu"), (m_gpu, 0)):
                xt = L.tensor(x, device=dev, requires_grad=True)
                y = m(xt)
                w = f32(*y.shape) if w is None else w
                (y * L.tensor(w, device=dev)).sum().backward()
                outs.append((y.numpy(), xt.grad.numpy()))
            assert rel_err(outs[1][0], outs[0][0]) < 1e-4
            assert rel_err(outs[1][1], outs[0][1]) < 1e-4
    for (k, p), (_, q) in zip(m_cpu.named_parameters(), m_gpu.named_parameters()):
        assert rel_err(q.grad.numpy(), p.grad.numpy()) < 1e-4, k
    sd_cpu, sd_gpu = m_cpu.state_dict(), m_gpu.state_dict()
    for k in sd_cpu:
        assert rel_err(sd_gpu[k], sd_cpu[k]) < 1e-5, k


@pytest.mark.parametrize("make", [
    lambda p: L.optim.Adam(p, lr=2e-3, betas=(0.5, 0.999)),
    lambda p: L.optim.Adam(p, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1),
    lambda p: L.optim.Adam(p, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, foreach=True),
    lambda p: L.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
])
def test_optimizer_gpu_matches_numpy(make):
    w0 = [f32(64, 33), f32(7)]
    cpu = [L.nn.Parameter(w.copy()) for w in w0]
    gpu = [L.nn.Parameter(L.tensor(w.copy(), device=0)) for w in w0]
    oc, og = make(cpu), make(gpu)
    for _ in range(5):
        for pc, pg in zip(cpu, gpu):
            g = f32(*pc.shape)
            pc.grad, pg.grad = L.Tensor(g.copy()), L.tensor(g.copy(), device=0)
        oc.step(), og.step()
    for pc, pg in zip(cpu, gpu):
        assert rel_err(pg.numpy(), pc.numpy()) < 1e-6


def test_dropout_device_generator_statistics_and_seeding():
    import cupy
    L.manual_seed(5)
    x = L.tensor(np.ones(200_000, np.float32), device=0)
    y1 = F.dropout(x, 0.3).numpy()
    y2 = F.dropout(x, 0.3).numpy()
    assert set(np.unique(y1)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((y1 == 0).mean() - 0.3) < 0.005
    assert (y1 != y2).any()                      # the offset advanced on the device
    L.manual_seed(5)
    np.testing.assert_array_equal(F.dropout(x, 0.3).numpy(), y1)
    assert cupy.cuda.runtime.getDevice() == 0


def test_device_generator_state_round_trip():
    """What a checkpoint saves (seed, offset) restores the exact sequence."""
    gen = L.random.device_generator()
    gen.normal((10,))
    state = gen.get_state()
    a = gen.normal((1000,)).get()
    gen.set_state(state)
    np.testing.assert_array_equal(gen.normal((1000,)).get(), a)
    assert abs(a.mean()) < 0.15 and abs(a.std() - 1) < 0.1


def test_dropout_in_a_captured_cuda_graph_draws_new_masks():
    import cupy
    L.manual_seed(7)
    x = L.tensor(np.ones(4096, np.float32), device=0)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        F.dropout(x, 0.5)                         # compile and warm the pool outside capture
        stream.synchronize()
        stream.begin_capture()
        y = F.dropout(x, 0.5)
        graph = stream.end_capture()
        graph.launch()
        stream.synchronize()
        first = y.numpy().copy()
        graph.launch()
        stream.synchronize()
        second = y.numpy()
    assert (first != second).any()
    assert abs((second == 0).mean() - 0.5) < 0.05


def test_device_mix_is_a_clear_error():
    a = L.tensor(np.ones((2, 3), np.float32))
    b = L.tensor(np.ones((2, 3), np.float32), device=0)
    with pytest.raises(RuntimeError, match=r"different devices: cpu \(shape \(2, 3\)\) and 0"):
        a + b
    with pytest.raises(RuntimeError, match="indices/target are on cpu"):
        F.cross_entropy(L.tensor(np.ones((2, 3), np.float32), device=0),
                        L.tensor(np.zeros(2, np.int64)))


def test_cudnn_errors_surface_through_layers():
    """A set-up the layers accept but cuDNN cannot run (it has no float64 NHWC backward-data
    algorithm) reaches cuDNN and comes back as its error, naming the heuristics call and every
    candidate's status."""
    import cudnnlite as cl
    x = L.tensor(np.ones((1, 4, 4, 2)), device=0, requires_grad=True)      # float64, NHWC
    w = L.tensor(np.ones((3, 3, 3, 2)), device=0, requires_grad=True)
    y = F.conv2d(x, w, layout="NHWC")
    np.testing.assert_array_equal(y.numpy(), np.full((1, 2, 2, 3), 18.0))
    with pytest.raises(cl.NotSupported,
                       match=r"cudnnGetConvolutionBackwardDataAlgorithm_v7(.|\n)*NOT_SUPPORTED"):
        y.sum().backward()


@pytest.mark.gpu
def test_bce_keeps_a_nan_prediction_nan():
    """The -100 clamp of log(p) must not swallow a NaN (CUDA's max / fmax return the other
    operand, which made a NaN prediction a loss of 100); the gradient stays NaN too, as on the
    NumPy path (torch refuses p outside [0, 1] outright). Other values against the closed form."""
    p = np.array([0.3, np.nan, 0.0, 1.0], np.float32)
    t = np.array([1.0, 1.0, 1.0, 0.0], np.float32)
    results = []
    for device in ("cpu", 0):
        x = L.tensor(p, device=device, requires_grad=True)
        loss = F.binary_cross_entropy(x, L.tensor(t, device=device), reduction="none")
        loss.backward(L.tensor(np.ones(4, np.float32), device=device))
        results.append((loss.numpy(), x.grad.numpy()))
    (l_cpu, g_cpu), (l_gpu, g_gpu) = results
    np.testing.assert_array_equal(np.isnan(l_gpu), [False, True, False, False])
    np.testing.assert_array_equal(np.isnan(g_gpu), [False, True, False, False])
    np.testing.assert_allclose(l_gpu, l_cpu, rtol=1e-6)      # NaN == NaN here
    np.testing.assert_allclose(l_gpu[[0, 2, 3]], [-np.log(0.3), 100.0, 100.0], rtol=1e-6)


def test_foreach_adam_is_the_per_parameter_adam_element_for_element():
    """One launch per dtype over a table of pointers: bitwise the per-parameter kernel's result,
    for float32 and float64 parameters in two groups (a float16 one takes the per-parameter
    path), eagerly and replayed from a captured CUDA graph."""
    import cupy
    rng = np.random.default_rng(3)
    shapes = [((64, 33), np.float32), ((7,), np.float32), ((5, 5), np.float64),
              ((3, 2), np.float16), ((1,), np.float32)]
    w0 = [rng.standard_normal(s).astype(d) for s, d in shapes]
    grads = [[rng.standard_normal(s).astype(d) for s, d in shapes] for _ in range(4)]

    def run(foreach, captured):
        ps = [L.nn.Parameter(L.tensor(w.copy(), device=0)) for w in w0]
        opt = L.optim.Adam([{"params": ps[:3]}, {"params": ps[3:], "lr": 3e-2}], lr=1e-2,
                           weight_decay=0.05, foreach=foreach)
        gs = [cupy.asarray(g) for g in grads[0]]
        for p, g in zip(ps, gs):
            p.grad = L.Tensor(g)
        step = L.graph.CapturedStep(lambda: opt.step(), optimizers=(opt,)) if captured \
            else None
        for k in range(4):
            for g, new in zip(gs, grads[k]):
                g[...] = cupy.asarray(new)
            opt.step() if step is None else step()
        return [p.numpy() for p in ps], opt.state_dict()

    reference, ref_state = run(False, False)
    for captured in (False, True):
        got, state = run(True, captured)
        for a, b in zip(got, reference):
            np.testing.assert_array_equal(a, b)
        assert [s["step"] for s in state["state"].values()] == [4] * 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])          # clipped, and left alone
def test_foreach_clip_grad_norm_matches_the_per_tensor_one(dtype, max_norm):
    import cupy
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal(s).astype(dtype) for s in ((64, 33), (7,), (1,), (300, 5))]

    def run(foreach):
        ps = [L.nn.Parameter(L.tensor(np.zeros_like(g), device=0)) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = L.Tensor(cupy.asarray(g))
        norm = L.optim.clip_grad_norm_(ps, max_norm, foreach=foreach)
        return norm.numpy(), [p.grad.numpy() for p in ps]

    (n0, g0), (n1, g1) = run(False), run(True)
    eps = np.finfo(dtype).eps
    assert n1.dtype == n0.dtype and abs(float(n1) - float(n0)) <= 8 * eps * float(n0)
    expected = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    assert abs(float(n1) - expected) <= 2 * eps * expected
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=8 * eps, atol=0)


def test_device_tables_made_in_a_capture_are_the_graphs_own():
    """A pointer table uploaded while capturing lives in the graph's pool: it must not be shared
    with later calls (the graph may be dropped and its pool freed); an eager table is shared."""
    import cupy
    from layers.backend import device_table
    rows = [(123, 0), (456, 7)]
    eager = device_table(rows)
    assert device_table(rows) is eager
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            captured = device_table([(789, 0)])
            again = device_table([(789, 0)])
        finally:                        # (a capture left open breaks every later test's work)
            graph = s.end_capture()
        captured[...] = -1
        graph.launch(s)                 # the replay's copy fills the table
        s.synchronize()
    assert captured is not again
    np.testing.assert_array_equal(captured.get(), [789, 0])
    np.testing.assert_array_equal(eager.get(), [123, 0, 456, 7])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_vector_relu_kernels_equal_the_elementwise_ones(dtype, layout, monkeypatch):
    """kernels.VECTOR_POINTWISE on a GPU: ReLU / LeakyReLU forward and backward over 16-byte
    vectors equal CuPy's elementwise kernels bit for bit where those give a number (NaN where
    they give NaN), on DCGAN's largest activation (8 M elements), and run as the vector
    kernels. At a subnormal input each may flush to zero (on an H100, 2026-11-23, CuPy's
    bfloat16 kernels did where the vector ones kept the subnormal, and in other ops both
    flushed): there each gives NumPy's float32 result rounded to the dtype, or zero."""
    import cupy as cp
    from layers import kernels
    from layers.backend import bfloat16, is_channels_last, to_channels_last
    dt = bfloat16 if dtype == "bfloat16" else np.float32
    rng = np.random.default_rng(4)
    store = to_channels_last if layout == "channels_last" else (lambda a: a)

    def make():
        v = rng.standard_normal((128, 64, 32, 32)).astype(np.float32) * 3
        v.flat[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40]
        return L.tensor(store(v.astype(dt)), device=0).data       # (a transfer keeps the layout)
    x, gy = make(), make()
    hx, hg = (cp.asnumpy(a).astype(np.float32) for a in (x, gy))
    tiny = np.finfo(np.float32).tiny
    sub = ((hx != 0) & (np.abs(hx) < tiny)) | ((hg != 0) & (np.abs(hg) < tiny))
    s = np.float32(0.2)
    numpy_ref = [np.where(hx > 0, hx, hx * s), np.where(hx > 0, hg, hg * s),
                 np.where(hx > 0, hx, 0), np.where(hx > 0, hg, 0), np.where(hx > 0, hg, 0)]
    assert x.strides == gy.strides and is_channels_last(x) == (layout == "channels_last")
    bits = np.uint32 if dtype == "float32" else np.uint16
    launched = []
    real = kernels._vector_kernel
    monkeypatch.setattr(kernels, "_vector_kernel",
                        lambda op, d: launched.append(op) or real(op, d))
    runs = (lambda: kernels.leaky_relu(x, 0.2), lambda: kernels.leaky_relu_grad(x, gy, 0.2),
            lambda: kernels.activation("relu", x),
            lambda: kernels.activation_grad("relu", x, gy),
            lambda: kernels.activation_grad_from_x("relu", x, gy))
    for ref, run in zip(numpy_ref, runs):
        monkeypatch.setattr(kernels, "VECTOR_POINTWISE", False)
        want = cp.asnumpy(run())
        monkeypatch.setattr(kernels, "VECTOR_POINTWISE", True)
        got = run()
        assert got.strides == x.strides
        got = cp.asnumpy(got)
        nan = np.isnan(want.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
        np.testing.assert_array_equal(got.view(bits)[~nan & ~sub], want.view(bits)[~nan & ~sub])
        assert sub.reshape(-1)[5] and sub.sum() == 1
        for result in (got, want):
            exact = result.view(bits)[sub] == ref.astype(dt).view(bits)[sub]
            assert (exact | (result[sub].astype(np.float32) == 0)).all()
    assert launched == ["leaky_relu_fwd", "leaky_relu_bwd", "relu_fwd", "relu_grad", "relu_grad"]

"""A captured CUDA-graph step computes what the eager step computes."""
import numpy as np
import pytest

import layers as L
from layers import F, nn
from cudnnlite import conv

pytestmark = pytest.mark.gpu


def _train(captured, steps=4):
    L.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 4, 4, 2, 1), nn.Dropout(0.2), nn.LeakyReLU(0.2),
                      nn.Conv2d(4, 1, 4, 1, 0), nn.Flatten())
    m.to(0)
    opt = L.optim.Adam(m.parameters(), lr=1e-2)
    target = L.tensor(np.ones((8, 1), np.float32), device=0)   # made outside: no copy in capture

    def step(x):
        opt.zero_grad()
        loss = F.mse_loss(m(x), target)
        loss.backward()
        opt.step()
        return loss.data

    run = L.graph.CapturedStep(step) if captured else step
    rng = np.random.default_rng(0)
    losses = [float(run(L.tensor(rng.standard_normal((8, 3, 8, 8)).astype(np.float32),
                                 device=0)).get()) for _ in range(steps)]
    return losses, m.state_dict()


def test_captured_step_matches_eager():
    with conv.using(deterministic=True):
        eager, sd_eager = _train(False)
        graph, sd_graph = _train(True)
    np.testing.assert_allclose(graph, eager, rtol=1e-6)
    for k in sd_eager:
        np.testing.assert_allclose(sd_graph[k], sd_eager[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_dcgan_captured_step_matches_eager():
    from train import dcgan
    results = []
    with conv.using(deterministic=True):
        for cuda_graph in (False, True):
            L.manual_seed(0)
            G, D = dcgan.Generator(ngf=16).to(0), dcgan.Discriminator(ndf=16).to(0)
            oG, oD = dcgan.make_optimizers(G, D)
            step = dcgan.make_step(G, D, oG, oD, 100, 0, None, cuda_graph=cuda_graph)
            rng = np.random.default_rng(1)
            stats = [step(L.tensor(rng.uniform(-1, 1, (16, 1, 64, 64)).astype(np.float32),
                                   device=0)) for _ in range(4)]
            results.append((stats, G.state_dict(), D.state_dict()))
    (s0, g0, d0), (s1, g1, d1) = results
    for a, b in zip(s0, s1):
        for k in a:
            assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]) + 1e-7, (k, a[k], b[k])
    for ref, got in ((g0, g1), (d0, d1)):
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_uncapturable_step_is_a_clear_error():
    lin = nn.Linear(4, 2).to(0)
    step = L.graph.CapturedStep(lambda x: float(lin(x).data.sum().get()), warmup=1)
    x = L.tensor(np.ones((3, 4), np.float32), device=0)
    step(x)                                   # the eager warm-up call works
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph.*host read"):
        step(x)                               # a device-to-host copy inside a capture


def test_a_step_with_linear_and_matmul_is_captured_and_replays_as_eager():
    """cuBLASLt (cudnnlite.blas) captures, where CuPy's own cuBLAS calls did not."""
    rng = np.random.default_rng(0)
    lin = nn.Linear(6, 5).to(0)
    w = L.tensor(rng.standard_normal((3, 5, 4)).astype(np.float32), device=0, requires_grad=True)

    def fn(x):
        y = F.matmul(F.reshape(lin(x), 3, 2, 5), w)          # (3, 2, 5) @ (3, 5, 4)
        loss = F.sum(F.tanh(y))
        loss.backward()
        return loss.data, lin.weight.grad.data, w.grad.data

    def eager(x):
        lin.zero_grad()
        w.grad = None
        return [a.get() for a in fn(L.tensor(x, device=0))]

    step = L.graph.CapturedStep(lambda x: fn(x), modules=(lin,), warmup=1)
    xs = [rng.standard_normal((6, 6)).astype(np.float32) for _ in range(3)]
    for x in xs:
        lin.zero_grad()
        w.grad = None
        got = [a.get() for a in step(L.tensor(x, device=0))]
        ref = eager(x)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)
    assert len(step._graphs) == 1


def test_host_keyword_arguments_join_the_key():
    """A host value the step bakes in (here a scale) is passed as a keyword: one graph per
    value, each replaying its own."""
    import cupy
    step = L.graph.CapturedStep(lambda x, *, scale: x * scale, warmup=1)
    x = cupy.arange(4, dtype=np.float32)
    for scale in (2.0, 2.0, 3.0, 3.0, 2.0, 3.0):
        np.testing.assert_array_equal(step(x, scale=scale).get(), np.arange(4) * scale)
    assert len(step._graphs) == 2
    with pytest.raises(TypeError, match="host keyword arguments must be hashable"):
        step(x, scale=[1.0])


def test_a_captured_join_of_many_arrays_reads_no_host_table():
    """F.stack of more than 8 arrays inside a capture: CuPy's single-kernel join would copy a
    table of addresses from a pinned staging buffer the graph does not keep; the capture-safe
    join copies array by array, so replays stay right after the pinned pool is reused."""
    import cupy
    xs = [cupy.full((3,), float(i), np.float32) for i in range(20)]

    def fn(*arrays):
        return F.stack([L.Tensor(a) for a in arrays], 1).data * 2

    step = L.graph.CapturedStep(fn, warmup=1)
    expected = np.stack([np.full(3, 2.0 * i) for i in range(20)], 1)
    for _ in range(3):
        np.testing.assert_array_equal(step(*xs).get(), expected)
        junk = cupy.cuda.alloc_pinned_memory(1 << 16)       # reuse the pinned pool
        np.frombuffer(junk, np.uint8)[:] = 0xFF
    assert len(step._graphs) == 1


def test_join_helpers_match_numpy_on_the_device_eagerly_and_in_capture():
    import cupy
    from layers.backend import concatenate, stack
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(12)]
    dev = [cupy.asarray(h) for h in host]
    np.testing.assert_array_equal(concatenate(dev, 1).get(), np.concatenate(host, 1))
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        out = stack(dev, -1)
        graph = s.end_capture()
    graph.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out.get(), np.stack(host, -1))


def test_a_byte_budget_keeps_only_the_graphs_that_fit():
    """Two shapes captured under a budget smaller than both pools: the older graph is dropped
    (its pool freed), the newer replays; the older shape is captured again when it comes back."""
    lin = nn.Linear(64, 64)
    lin.to(0)
    step = L.graph.CapturedStep(lambda x: lin(x).data, warmup=0, max_bytes=1)
    a = L.tensor(np.ones((32, 64), np.float32), device=0)
    b = L.tensor(np.ones((16, 64), np.float32), device=0)
    expect_a, expect_b = lin(a).data.get(), lin(b).data.get()
    np.testing.assert_allclose(step(a).get(), expect_a, rtol=1e-6)
    np.testing.assert_allclose(step(b).get(), expect_b, rtol=1e-6)
    assert len(step._graphs) == 1
    np.testing.assert_allclose(step(a).get(), expect_a, rtol=1e-6)
    assert len(step._graphs) == 1

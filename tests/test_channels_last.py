"""PyTorch's channels_last memory format: (N, C, H, W) tensors stored as (N, H, W, C).

A convolution, transposed convolution or batch norm with a channels-last operand runs as the NHWC
problem on views of its operands (cuDNN's NHWC kernels on the GPU), its result channels-last too.
Each is checked against the same op on ordinary (NCHW-stored) arrays -- outputs and gradients, in
float64 -- and against PyTorch's channels_last where the layout of the result matters."""
import numpy as np
import pytest

import layers as L
from layers import F, nn
from cudnnlite import conv
from layers.backend import is_channels_last, to_channels_last
from conftest import gpu_path_on_host

torch = pytest.importorskip("torch")
DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]


def _dtype(device):
    """float64 on the CPU; float32 on the GPU, where cuDNN has no float64 NHWC convolution."""
    return np.float64 if device == "cpu" else np.float32


def _pair(rng, shape, device, channels_last):
    a = rng.standard_normal(shape).astype(_dtype(device))
    t = L.tensor(to_channels_last(a) if channels_last else a, device=device, requires_grad=True)
    assert is_channels_last(t.data) == channels_last
    return t


def _run(fn, shapes, device, which):
    rng = np.random.default_rng(0)
    xs = [_pair(rng, s, device, i in which) for i, s in enumerate(shapes)]
    y = fn(*xs)
    gy = np.random.default_rng(1).standard_normal(y.shape).astype(_dtype(device))
    y.backward(L.tensor(gy, device=device))
    for i, x in enumerate(xs):      # each gradient laid out as its leaf is, as torch does
        assert x.grad.data.strides == x.data.strides, (i, x.grad.data.strides, x.data.strides)
    return y, [x.grad for x in xs]


CASES = {
    "conv2d": (lambda x, w: F.conv2d(x, w, None, 2, 1), [(2, 6, 9, 9), (5, 6, 3, 3)]),
    "conv2d_bias_relu": (lambda x, w, b: F.conv2d(x, w, b, 1, 1, activation="relu"),
                         [(2, 6, 7, 7), (5, 6, 3, 3), (5,)]),
    "conv2d_groups": (lambda x, w: F.conv2d(x, w, None, 1, 0, groups=2),
                      [(2, 6, 5, 5), (4, 3, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, None, 2, 1),
                         [(2, 6, 5, 5), (6, 3, 4, 4)]),
    "conv_transpose2d_cropped": (lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1),
                                 [(2, 4, 5, 5), (4, 3, 3, 3)]),
    "batch_norm": (lambda x: F.batch_norm(x, None, None, None, None, training=True),
                   [(4, 5, 3, 3)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,which", [
    (name, which) for name in sorted(CASES)
    for which in ([(0,)] if name == "batch_norm" else [(0,), (1,), (0, 1)])])
def test_channels_last_equals_the_ordinary_layout(name, which, device, where):
    """which: the operands stored channels-last (0: x, 1: the weight)."""
    device = where
    fn, shapes = CASES[name]
    with conv.using(allow_tf32=False):
        ref, ref_grads = _run(fn, shapes, device, which=())
        y, grads = _run(fn, shapes, device, which=which)
    assert is_channels_last(y.data)                 # the result is stored channels-last too
    for i in which:                                 # and so is a channels-last leaf's gradient
        assert is_channels_last(grads[i].data), i
    # float64: the two layouts sum in different orders; float32 (the GPU, other cuDNN kernels):
    # rounding of sums of at most 54 products, relative to the tensor's largest entry
    rtol, atol = (1e-10, 1e-12) if device == "cpu" else (1e-5, 1e-5)
    for got, want in zip([y] + grads, [ref] + ref_grads):
        want = want.numpy()
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol,
                                   atol=atol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_channels_last_op_is_one_node_of_the_graph(name):
    """The NHWC views are taken inside the op: its result's node is the op itself, fed by the
    caller's tensors (not a transpose of them), and backward runs that one node. Each view of the
    four-node form (a transpose of x, of the weight, the op, a transpose back) cost the host a
    graph node each way."""
    fn, shapes = CASES[name]
    rng = np.random.default_rng(0)
    xs = [_pair(rng, s, "cpu", len(s) == 4) for s in shapes]
    y = fn(*xs)
    assert type(y._ctx).__name__ in ("Conv2d", "ConvTranspose2d", "BatchNorm"), type(y._ctx)
    assert all(a is b for a, b in zip(y._ctx.inputs, xs))
    assert y._ctx.layout == "NHWC" and y._ctx.nchw


def test_running_statistics_follow_the_ordinary_layout():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 5, 5)) * 2 + 1
    a, b = nn.BatchNorm2d(3).double(), nn.BatchNorm2d(3).double()
    a(L.tensor(x))
    b(L.tensor(to_channels_last(x)))
    np.testing.assert_allclose(b.running_mean.numpy(), a.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.running_var.numpy(), a.running_var.numpy(), rtol=1e-12)


def test_module_to_channels_last_matches_torch_strides_and_keeps_state_dict_shapes():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ConvTranspose2d(4, 2, 4))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.ConvTranspose2d(4, 2, 4))
    before = {k: v.copy() for k, v in m.state_dict().items()}
    m.to(memory_format="channels_last")
    t.to(memory_format=torch.channels_last)
    for (k, v), (tk, tv) in zip(m.state_dict().items(), t.state_dict().items()):
        assert k == tk and v.shape == tuple(tv.shape)
        if v.ndim == 4:                 # the same element strides as torch's channels_last
            assert tuple(s // v.itemsize for s in v.strides) == tv.stride(), k
        np.testing.assert_array_equal(v, before[k])
    m.to(memory_format="contiguous")
    assert all(v.flags.c_contiguous and not is_channels_last(v) for v in m.state_dict().values())
    thin = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 8, 1))     # C = 1, and H = W = 1:
    thin.to(memory_format="channels_last").to(memory_format="contiguous")   # NumPy calls both
    assert not any(is_channels_last(p.data) for p in thin.parameters())     # C-contiguous
    with pytest.raises(ValueError, match="memory_format must be"):
        m.to(memory_format="nhwc")


@pytest.mark.parametrize("device", DEVICES)
def test_dcgan_steps_in_channels_last_equal_the_ordinary_ones(device, where):
    """Two DCGAN iterations (float64 on the CPU): the channels-last models' losses and weights
    equal the ordinary models', and their weights stay channels-last through Adam's updates
    (and in their state_dict's NumPy copies, as torch's .cpu().numpy() keeps them)."""
    device = where
    from train import dcgan
    dtype = np.float64 if device == "cpu" else np.float32
    tol = 1e-10 if device == "cpu" else 1e-4

    def run(channels_last):
        L.manual_seed(0)
        G, D = dcgan.Generator(8, 4, 1).to(device), dcgan.Discriminator(4, 1).to(device)
        G.to_dtype(dtype), D.to_dtype(dtype)
        if channels_last:
            G.to(memory_format="channels_last"), D.to(memory_format="channels_last")
        oG, oD = dcgan.make_optimizers(G, D)
        rng = np.random.default_rng(1)
        stats = [dcgan.train_step(G, D, oG, oD, rng.uniform(-1, 1, (4, 1, 64, 64)).astype(dtype),
                                  rng.standard_normal((4, 8, 1, 1)).astype(dtype))
                 for _ in range(2)]
        return stats, G, D

    with conv.using(allow_tf32=False):   # (TF32 rounds differently in the two layouts' kernels)
        ref, G0, D0 = run(False)
        got, G1, D1 = run(True)
    for a, b in zip(got, ref):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=tol), k
    for m0, m1 in ((G0, G1), (D0, D1)):
        for (k, v0), v1 in zip(m0.state_dict().items(), m1.state_dict().values()):
            if v1.ndim == 4 and v1.shape[1] > 1:
                assert is_channels_last(v1), k
            np.testing.assert_allclose(L.backend.to_device(v1, "cpu"),
                                       L.backend.to_device(v0, "cpu"), rtol=tol, atol=tol,
                                       err_msg=k)


def test_channels_last_operands_reach_cudnn_as_an_nhwc_problem(no_device):
    """No GPU needed: with device-array stand-ins, a channels-last conv gets as far as
    cudnnCreate, and the plan it made is cuDNN's NHWC problem on views of the same memory."""
    import cudnnlite as cl
    from cudnnlite import conv
    from fake_device import FakeDeviceArray as Dev
    from layers.backend import channels_last_strides
    conv.clear_cache()
    x = Dev((2, 6, 9, 9), strides=channels_last_strides((2, 6, 9, 9), 4))
    w = Dev((5, 6, 3, 3), strides=channels_last_strides((5, 6, 3, 3), 4), ptr=1 << 24)
    with pytest.raises(cl.NotInitialized, match="cudnnCreate"):
        F.conv2d(L.Tensor(x), L.Tensor(w), None, 2, 1)
    (plan,) = {id(p): p for p in conv._plans.values()}.values()     # (cached under two keys)
    assert plan.layout == "NHWC"
    assert plan.x.setup()[1:3] == ((2, 6, 9, 9), (486, 1, 54, 6))    # N, C, H, W; NHWC strides
    assert plan.w.setup()[:2] == (cl.DataType.FLOAT, cl.TensorFormat.NHWC)
    conv.clear_cache()


def test_which_parameters_the_multi_tensor_adam_takes():
    """The pointer-table Adam pairs the k-th stored element of p, g, m and v: all C-ordered (a
    channels-last array with C = 1 counts, NumPy and CuPy call it C-contiguous), or all four
    channels-last with one set of strides. Anything else takes the per-tensor kernel."""
    from fake_device import FakeDeviceArray as Dev
    from layers.backend import channels_last_strides
    from layers.optim import _batchable
    step = Dev((), "int64")

    def cl(shape):
        return Dev(shape, strides=channels_last_strides(shape, 4))
    assert _batchable((cl((64, 1, 4, 4)), cl((64, 1, 4, 4)), Dev((64, 1, 4, 4)),
                       Dev((64, 1, 4, 4)), step))
    assert _batchable((cl((8, 3, 4, 4)),) * 4 + (step,))
    assert not _batchable((cl((8, 3, 4, 4)), Dev((8, 3, 4, 4)), Dev((8, 3, 4, 4)),
                           Dev((8, 3, 4, 4)), step))
    assert not _batchable((Dev((8, 3, 4, 4)),) * 3 + (Dev((8, 3, 4, 4), "float64"), step))


def test_channels_last_batch_norm_reaches_cudnn_as_nhwc(no_device):
    """No GPU needed: a channels-last batch norm's x descriptor, made on the way to cudnnCreate,
    is the (N, C, H, W) tensor with NHWC strides -- the packed NHWC view, not a copy."""
    import cudnnlite as cl
    from cudnnlite import descriptors
    from fake_device import FakeDeviceArray as Dev
    from layers.backend import channels_last_strides
    descriptors._tensor_cache.clear()
    x = Dev((4, 6, 5, 5), strides=channels_last_strides((4, 6, 5, 5), 4))
    params = [L.Tensor(Dev((6,), ptr=(1 << 24) + 4096 * i)) for i in range(4)]
    with pytest.raises(cl.NotInitialized, match="cudnnCreate"):
        F.batch_norm(L.Tensor(x), params[0], params[1], params[2], params[3], training=True)
    setups = [d.setup() for d in descriptors._tensor_cache.values()]
    assert (cl.DataType.FLOAT, (4, 6, 5, 5), (150, 1, 30, 6)) in setups
    descriptors._tensor_cache.clear()


@pytest.mark.parametrize("channels_last", [True, False])
def test_channels_last_training_batch_norm_takes_the_ex_calls(channels_last, monkeypatch,
                                                               request):
    """The GPU path on the host: a channels-last training batch norm goes through
    cudnnBatchNormalizationForwardTrainingEx / BackwardEx (cuDNN's NHWC kernels; backward given
    the reserve space its forward filled -- the stand-in checks), an NCHW one through the plain
    calls; both equal NumPy float64."""
    import host_kernels
    gpu_path_on_host(request, monkeypatch)
    rng = np.random.default_rng(5)
    x, gy = rng.standard_normal((2, 3, 4, 4)) * 2 + 1, rng.standard_normal((2, 3, 4, 4))
    ref = [L.tensor(x, requires_grad=True)]
    F.batch_norm(ref[0], None, None, None, None, training=True).backward(L.tensor(gy))
    store = to_channels_last if channels_last else (lambda a: a)
    t = L.Tensor(host_kernels.host(store(x.astype(np.float32))), requires_grad=True)
    host_kernels.CALLS.clear()
    y = F.batch_norm(t, None, None, None, None, training=True)
    y.backward(L.Tensor(host_kernels.host(store(gy.astype(np.float32)))))
    ex = "Ex" if channels_last else ""
    assert host_kernels.CALLS[f"cudnnBatchNormalizationForwardTraining{ex}"] == 1
    assert host_kernels.CALLS[f"cudnnBatchNormalizationBackward{ex}"] == 1
    assert sum(host_kernels.CALLS[k] for k in host_kernels.CALLS if "BatchNorm" in k) == 2
    assert is_channels_last(y.data) == channels_last
    want = F.batch_norm(L.tensor(x), None, None, None, None, training=True).numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.grad.numpy(), ref[0].grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_transfer_keeps_a_dense_layout_and_makes_the_rest_c_ordered():
    """layers.backend._keeping_layout with a C-ordering copy (what CuPy's transfers do): as
    torch's preserve_format, a channels-last or transposed array keeps its layout, a broadcast
    or strided view (not a permutation of a dense array) comes C-ordered."""
    from layers.backend import _keeping_layout, is_channels_last
    c_copy = lambda a: np.array(a, order="C")               # noqa: E731
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 4, 5, 3).transpose(0, 3, 1, 2)
    t = np.arange(12.0).reshape(3, 4).T
    views = {"channels-last": x, "transposed": t, "broadcast": np.broadcast_to(np.arange(4.0), (3, 4)),
             "strided": np.arange(24.0).reshape(4, 6)[:, ::2], "transposed strided": t[::2]}
    for name, a in views.items():
        b = _keeping_layout(a, c_copy)
        np.testing.assert_array_equal(b, a, err_msg=name)
        if name == "channels-last":
            assert is_channels_last(b), name
        elif name == "transposed":
            assert b.strides == a.strides, name
        else:
            assert b.flags.c_contiguous, name


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_float32_batch_norm_on_the_cpu_is_as_accurate_in_either_layout(channels_last):
    """The NumPy path's batch statistics and parameter gradients are float64 sums: NumPy adds up
    an axis that is not the fastest one element after another, which over a channels-last batch
    of 16,384 values a channel lost ~5 digits' worth (y off by 2e-5, gx by 8e-6; torch's own
    float32 channels-last batch norm: 1e-5 and 3e-6). Each result within a few float32 roundings
    of float64, its scale taken from the float64 result."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 8, 16, 16)) + 3).astype(np.float32)     # (a mean to subtract)
    gy = rng.standard_normal(x.shape).astype(np.float32)
    want = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    w64 = torch.linspace(0.5, 2, 8, dtype=torch.float64, requires_grad=True)
    b64 = torch.zeros(8, dtype=torch.float64, requires_grad=True)
    y64 = torch.nn.functional.batch_norm(want, None, None, w64, b64, training=True)
    y64.backward(torch.tensor(gy, dtype=torch.float64))
    bn = nn.BatchNorm2d(8)
    with L.no_grad():
        bn.weight.copy_(L.tensor(w64.detach().numpy().astype(np.float32)))
    xt = L.tensor(to_channels_last(x) if channels_last else x, requires_grad=True)
    if channels_last:
        bn.to(memory_format=L.channels_last)
    y = bn(xt)
    y.backward(L.tensor(gy))
    eps = np.finfo(np.float32).eps
    for name, ours, ref in (("y", y, y64), ("gx", xt.grad, want.grad), ("gweight", bn.weight.grad,
                            w64.grad), ("gbias", bn.bias.grad, b64.grad),
                            ("running_mean", L.tensor(bn.running_mean), want.detach().mean((0, 2, 3))
                             * 0.1)):
        ref = ref.detach().numpy()
        np.testing.assert_allclose(ours.detach().numpy(), ref, rtol=0,
                                   atol=8 * eps * np.abs(ref).max(), err_msg=name)

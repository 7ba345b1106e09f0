"""bfloat16 on the NumPy path, against PyTorch CPU in float64 on the same bfloat16 values.

An op on half-precision data computes in float32 and rounds its result once, as cuDNN and cuBLAS
do: so every op's output, and every gradient its backward returns, is the float64 result
rounded to bfloat16 -- within one bfloat16 ulp (8 significant bits), give or take float32's own
accumulation error. NumPy alone would not get there: it sums bfloat16 in bfloat16 (10000 ones
make 256), and ml_dtypes' matmul and bfloat16 * 2.5 come out float32."""
import numpy as np
import pytest

import layers as L
from layers import F, nn
from layers.backend import bfloat16 as BF16

torch = pytest.importorskip("torch")
tF = torch.nn.functional
DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu)]


def ulp(values):
    """The bfloat16 ulp at each of `values` (float64): 2^(exponent - 7); 0 at 0."""
    mag = np.abs(np.asarray(values, np.float64))
    return np.where(mag > 0, 2.0 ** (np.floor(np.log2(np.where(mag > 0, mag, 1))) - 7), 0)


def bf16_close(got, want, atol=0.0):
    """got (bfloat16) is within one bfloat16 ulp of want (float64), plus atol (a number, or one
    per element)."""
    got = np.asarray(got)
    assert got.dtype == BF16, got.dtype
    got, want = got.astype(np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_less(np.abs(got - want), ulp(want) + atol + 1e-30)


def _values(rng, shape, kind="normal"):
    a = {"normal": lambda: rng.standard_normal(shape),
         "positive": lambda: rng.uniform(0.2, 2.0, shape),
         "unit": lambda: rng.uniform(0.05, 0.95, shape),
         "target": lambda: rng.uniform(0, 1, shape),
         # |x| in [8, 20]: the sigmoid's and tanh's gradients from x, near saturation
         "saturating": lambda: rng.uniform(8, 20, shape) * rng.choice([-1, 1], shape)}[kind]()
    return a.astype(BF16)


# name: (engine function, torch function, input shapes and kinds, {argument: value})
CASES = {
    "add": (F.add, torch.add, [(3, 4), (4,)]),
    "mul": (F.mul, torch.mul, [(3, 4), (3, 1)]),
    "mul_float": (lambda x: x * 0.3, lambda x: x * 0.3, [(5, 7)]),
    "div": (F.div, torch.div, [(3, 4), ((3, 4), "positive")]),
    "div_float": (lambda x: x / 0.3, lambda x: x / 0.3, [(5, 7)]),
    "rdiv_float": (lambda x: 0.7 / x, lambda x: 0.7 / x, [((5, 7), "positive")]),
    "exp": (F.exp, torch.exp, [(3, 4)]),
    "log": (F.log, torch.log, [((3, 4), "positive")]),
    "pow": (lambda x: F.pow(x, 3), lambda x: x ** 3, [(3, 4)]),
    "relu": (F.relu, torch.relu, [(3, 4)]),
    "sigmoid": (F.sigmoid, torch.sigmoid, [(3, 4)]),
    "tanh": (F.tanh, torch.tanh, [(3, 4)]),
    "sigmoid_saturating": (F.sigmoid, torch.sigmoid, [((3, 4), "saturating")]),
    "tanh_saturating": (F.tanh, torch.tanh, [((3, 4), "saturating")]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: tF.leaky_relu(x, 0.2), [(3, 4)]),
    "clamp": (lambda x: F.clamp(x, -0.5, 0.7), lambda x: x.clamp(-0.5, 0.7), [(3, 4)]),
    "matmul": (F.matmul, torch.matmul, [(6, 300), (300, 5)]),
    "bmm": (F.matmul, torch.matmul, [(2, 6, 200), (2, 200, 5)]),
    "linear": (F.linear, tF.linear, [(8, 300), (5, 300), (5,)]),
    "softmax": (lambda x: F.softmax(x, -1), lambda x: torch.softmax(x, -1), [(4, 300)]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1),
                    [(4, 300)]),
    "sum_20000": (lambda x: F.sum(x), torch.sum, [((20000,), "positive")]),
    "sum_axis0": (lambda x: F.sum(x, 0), lambda x: x.sum(0), [((3000, 3), "positive")]),
    "mean": (lambda x: F.mean(x, 1), lambda x: x.mean(1), [(3, 5000)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
               lambda x, w, b: tF.conv2d(x, w, b, padding=1), [(2, 16, 6, 6), (4, 16, 3, 3), (4,)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, None, 2, 1),
                         lambda x, w: tF.conv_transpose2d(x, w, None, 2, 1),
                         [(2, 16, 5, 5), (16, 4, 4, 4)]),
    "conv1d": (lambda x, w: F.conv1d(x, w, None, padding=2),
               lambda x, w: tF.conv1d(x, w, None, padding=2), [(2, 32, 9), (4, 32, 5)]),
    "bce": (F.binary_cross_entropy, tF.binary_cross_entropy,
            [((64,), "unit"), ((64,), "target")]),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, tF.binary_cross_entropy_with_logits,
                        [(64,), ((64,), "target")]),
    "mse": (F.mse_loss, tF.mse_loss, [(500,), (500,)]),
    "l1": (F.l1_loss, tF.l1_loss, [(500,), (500,)]),
}


@pytest.mark.parametrize("device", DEVICES + ["host"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_rounds_the_float64_result_once(name, device, where):
    """(The GPU path -- CuPy 14's ml_dtypes arrays, cuDNN and cuBLAS accumulating in float -- is
    held to the NumPy path's bound; "host" is that path run on the CPU: its CuPy kernels compiled
    for the host with CuPy's bfloat16 arithmetic, cuDNN's calls answered there.)"""
    device = where
    ours, theirs, shapes = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    shapes = [s if isinstance(s[0], tuple) else (s, "normal") for s in shapes]
    arrays = [_values(rng, *s) for s in shapes]
    grad = [kind != "target" for _, kind in shapes]       # (losses: no gradient for targets)
    xs = [L.tensor(a, device=device, requires_grad=g) for a, g in zip(arrays, grad)]
    y = ours(*xs)
    ts = [torch.tensor(a.astype(np.float64), requires_grad=g) for a, g in zip(arrays, grad)]
    ty = theirs(*ts)
    gy = _values(rng, tuple(ty.shape))
    assert y.dtype == BF16
    atol = 1e-5 * float(ty.detach().abs().max())
    if name == "conv2d" and device != "cpu":
        # the GPU path rounds the convolution to bfloat16, then adds the bias and rounds again
        # (as PyTorch's cuDNN path does; with beta = 1 in place of the add, the H100's cuDNN
        # rounded the convolution before the blend too): half an ulp of the bias-free result more
        atol = atol + ulp(theirs(*ts[:2], None).detach().numpy()) / 2
    bf16_close(y.numpy(), ty.detach().numpy(), atol=atol)
    y.backward(L.tensor(gy, device=device))
    ty.backward(torch.tensor(gy.astype(np.float64)))
    for x, t in zip(xs, ts):
        if x.requires_grad:
            assert x.grad.dtype == BF16
            bf16_close(x.grad.numpy(), t.grad.numpy(), atol=1e-5 * float(t.grad.abs().max()))


@pytest.mark.parametrize("device", DEVICES + ["host"])
@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_a_convolutions_saturating_activation_takes_its_gradient_from_its_input(
        activation, device, where):
    """conv2d(activation='tanh' / 'sigmoid') on bfloat16 data: the gradient within one ulp of
    float64's near saturation, as the activation ops' own (from the input: from an output
    rounded to bfloat16, 1 - y^2 at |x| = 3 keeps ~80 % error). A 1x1 convolution with weight 1
    and bias 0 makes the pre-activation x itself, exactly, on every engine."""
    device = where
    rng = np.random.default_rng(7)
    a = (rng.uniform(2, 5, (2, 1, 4, 4)) * rng.choice([-1, 1], (2, 1, 4, 4))).astype(BF16)
    gy = _values(rng, a.shape)
    x = L.tensor(a, device=device, requires_grad=True)
    w = L.tensor(np.ones((1, 1, 1, 1), BF16), device=device)
    b = L.tensor(np.zeros(1, BF16), device=device)
    y = F.conv2d(x, w, b, activation=activation)
    t = torch.tensor(a.astype(np.float64), requires_grad=True)
    ty = getattr(torch, activation)(t)
    bf16_close(y.numpy(), ty.detach().numpy())
    y.backward(L.tensor(gy, device=device))
    ty.backward(torch.tensor(gy.astype(np.float64)))
    bf16_close(x.grad.numpy(), t.grad.numpy())


def test_cross_entropy_and_embedding():
    rng = np.random.default_rng(7)
    logits, table = _values(rng, (6, 40)), _values(rng, (10, 8))
    target, idx = rng.integers(0, 40, 6), np.array([3, 1, 3, 9])
    x, w = L.tensor(logits, requires_grad=True), L.tensor(table, requires_grad=True)
    tx, tw = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (logits, table))
    loss = F.cross_entropy(x, L.tensor(target)) + F.embedding(L.tensor(idx), w).sum()
    tloss = tF.cross_entropy(tx, torch.tensor(target)) + tF.embedding(torch.tensor(idx), tw).sum()
    loss.backward()
    tloss.backward()
    # two ops' results, each rounded to bfloat16, then added (a third rounding)
    np.testing.assert_allclose(float(loss.item()), float(tloss.detach()), rtol=3 * 2 ** -8)
    bf16_close(x.grad.numpy(), tx.grad.numpy(), atol=1e-6)
    bf16_close(w.grad.numpy(), tw.grad.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_keeps_float32_parameters_and_rounds_once(device):
    rng = np.random.default_rng(3)
    x = _values(rng, (16, 4, 5, 5)) * BF16.type(3) + BF16.type(1)
    bn = nn.BatchNorm2d(4)
    bn.weight.data[...] = rng.uniform(0.5, 1.5, 4)
    bn.to(device).to_dtype(BF16)
    assert bn.weight.dtype == np.float32 and bn.running_var.dtype == np.float32
    tbn = torch.nn.BatchNorm2d(4).double()
    with torch.no_grad():
        tbn.weight.copy_(torch.tensor(bn.weight.numpy().astype(np.float64)))
    xt = L.tensor(x, device=device, requires_grad=True)
    tt = torch.tensor(x.astype(np.float64), requires_grad=True)
    y, ty = bn(xt), tbn(tt)
    gy = _values(rng, y.shape)
    y.backward(L.tensor(gy, device=device))
    ty.backward(torch.tensor(gy.astype(np.float64)))
    bf16_close(y.numpy(), ty.detach().numpy(), atol=1e-5)
    bf16_close(xt.grad.numpy(), tt.grad.numpy(), atol=1e-5 * float(tt.grad.abs().max()))
    np.testing.assert_allclose(bn.weight.grad.numpy(), tbn.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_lstm_cell_in_bfloat16_stays_near_float64(device):
    """A cell is a chain of ops, each rounded: within a few bfloat16 ulps of float64."""
    rng = np.random.default_rng(5)
    cell = L.rnn.LSTMCell(12, 8)
    tcell = torch.nn.LSTMCell(12, 8).double()
    cell.to(device).to_dtype(BF16)
    with torch.no_grad():
        for name, p in tcell.named_parameters():
            value = L.backend.to_device(cell.state_dict()[name], "cpu")
            p.copy_(torch.tensor(value.astype(np.float64)))
    x = _values(rng, (5, 12))
    h, c = cell(L.tensor(x, device=device))
    th, tc = tcell(torch.tensor(x.astype(np.float64)))
    assert h.dtype == BF16 and c.dtype == BF16
    np.testing.assert_allclose(h.numpy().astype(np.float64), th.detach().numpy(), atol=4 * 2 ** -8)
    np.testing.assert_allclose(c.numpy().astype(np.float64), tc.detach().numpy(), atol=8 * 2 ** -8)


@pytest.mark.parametrize("device", DEVICES)
def test_cast_is_differentiable_and_a_float32_loss_of_bfloat16_outputs(device):
    rng = np.random.default_rng(2)
    a = _values(rng, (4000,))
    x = L.tensor(a, device=device, requires_grad=True)
    loss = (x.astype(np.float32) ** 2).mean()
    assert loss.dtype == np.float32
    loss.backward()
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(loss.item(), (a64 ** 2).mean(), rtol=1e-6)
    assert x.grad.dtype == BF16
    bf16_close(x.grad.numpy(), 2 * a64 / a64.size, atol=1e-12)
    assert x.astype(BF16) is x
    ints = x.astype(np.int32)               # (to integers: a constant, as torch's x.int())
    assert ints.dtype == np.int32 and not ints.requires_grad


def test_a_float64_tensor_still_promotes_a_bfloat16_one():
    """The round-once rule is for ops whose floating inputs all are bfloat16: bfloat16 times a
    float64 Tensor is float64, as in torch."""
    a = L.tensor(np.array([1.5, -2.0], BF16), requires_grad=True)
    b = L.tensor(np.array([1 / 3, 0.25]), requires_grad=True)
    y = a * b
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), [0.5, -0.5])
    y.sum().backward()
    assert a.grad.dtype == BF16 and b.grad.dtype == np.float64


# ---- master weights ---------------------------------------------------------------------------

def test_master_weights_keep_updates_bfloat16_would_round_away():
    """Adam's first steps move a weight by ~lr: 1e-3 is under half a bfloat16 ulp of 1.0
    (2**-8), so a bfloat16 parameter updated in place never moves; its float32 master does."""
    for masters, want in ((False, 1.0), (True, 1.0 - 10 * 1e-3)):
        p = nn.Parameter(L.tensor(np.ones(4, BF16)))
        opt = L.optim.Adam([p], lr=1e-3, master_weights=masters)
        for _ in range(10):
            p.grad = L.tensor(np.ones(4, BF16))
            opt.step()
        assert p.dtype == BF16
        np.testing.assert_allclose(p.numpy().astype(np.float64), want, atol=2 ** -9)
        if masters:
            master = opt.state_dict()["state"][0]["master_param"]
            assert master.dtype == np.float32
            np.testing.assert_allclose(master, want, rtol=1e-6)
            np.testing.assert_array_equal(p.numpy(), master.astype(BF16))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt_name", ["Adam", "SGD"])
def test_master_weights_follow_torch_float32_on_the_master(opt_name, device):
    """The master follows torch's optimizer on a float32 parameter given the bfloat16 gradients
    cast to float32; the bfloat16 parameter is the master rounded. (On the GPU, Adam does it in
    one kernel, kernels.adam_master; weights are then loaded into the model, which the next step
    must start from.)"""
    rng = np.random.default_rng(11)
    w0 = _values(rng, (3, 5))
    make = {"Adam": (lambda ps: L.optim.Adam(ps, lr=1e-2, weight_decay=0.1, master_weights=True),
                     lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1)),
            "SGD": (lambda ps: L.optim.SGD(ps, lr=1e-2, momentum=0.9, master_weights=True),
                    lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9))}[opt_name]
    p = nn.Parameter(L.tensor(w0.copy(), device=device))
    tp = torch.nn.Parameter(torch.tensor(w0.astype(np.float32)))
    opt, topt = make[0]([p]), make[1]([tp])
    host = lambda a: L.backend.to_device(a, "cpu")      # noqa: E731
    for k in range(6):
        if k == 4:                                      # new weights, loaded into both
            w = _values(rng, (3, 5))
            p.data[...] = L.backend.to_device(w, device)
            with torch.no_grad():
                tp.copy_(torch.tensor(w.astype(np.float32)))
        g = _values(rng, (3, 5))
        p.grad, tp.grad = L.tensor(g, device=device), torch.tensor(g.astype(np.float32))
        opt.step()
        topt.step()
        master = host(opt.state[p]["master_param"])
        assert master.dtype == np.float32 and host(opt.state[p]["exp_avg" if opt_name ==
                                                   "Adam" else "momentum_buffer"]).dtype == \
            np.float32
        np.testing.assert_allclose(master, tp.detach().numpy(), rtol=2e-6, atol=1e-7)
        np.testing.assert_array_equal(p.numpy(), master.astype(BF16))
        assert p.grad.dtype == BF16             # the gradient is the caller's again


def test_master_weights_resume_exactly_from_the_state_dict():
    rng = np.random.default_rng(4)
    grads = [_values(rng, (6,)) for _ in range(5)]

    def run(steps, start=None):
        p = nn.Parameter(L.tensor(np.linspace(-1, 1, 6).astype(BF16)))
        opt = L.optim.Adam([p], lr=3e-3, master_weights=True)
        if start is not None:
            p.data[...] = start[0]
            opt.load_state_dict(start[1])
        for g in steps:
            p.grad = L.tensor(g)
            opt.step()
        return p, opt

    p, _ = run(grads)
    p3, opt3 = run(grads[:3])
    saved = (p3.numpy().copy(), opt3.state_dict())
    p_resumed, _ = run(grads[3:], saved)
    np.testing.assert_array_equal(p_resumed.numpy(), p.numpy())


@pytest.mark.parametrize("masters", [False, True])
def test_state_saved_to_a_file_and_loaded_into_a_new_optimizer_resumes_exactly(masters,
                                                                                tmp_path):
    """Files keep bfloat16 as float32: a new optimizer takes each state array back in the dtype
    its update makes (bfloat16 moments without master weights, float32 with them)."""
    from train.common import load_checkpoint, save_checkpoint
    rng = np.random.default_rng(8)
    grads = [_values(rng, (500,)) for _ in range(12)]

    def model_and_opt():
        m = nn.Linear(500, 1, bias=False).to_dtype(BF16)
        m.weight.data[...] = np.linspace(-1, 1, 500).astype(BF16)
        return m, L.optim.Adam(m.parameters(), lr=1e-2, master_weights=masters)

    def steps(m, opt, gs):
        for g in gs:
            m.weight.grad = L.tensor(g.reshape(1, 500))
            opt.step()

    straight, opt = model_and_opt()
    steps(straight, opt, grads)
    first, opt = model_and_opt()
    steps(first, opt, grads[:6])
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"m": first}, {"o": opt}, {}, np.random.default_rng(0), {})
    second, opt2 = model_and_opt()
    load_checkpoint(path, {"m": second}, {"o": opt2}, np.random.default_rng(0), "cpu")
    assert opt2.state[second.weight]["exp_avg"].dtype == (np.float32 if masters else BF16)
    steps(second, opt2, grads[6:])
    np.testing.assert_array_equal(second.weight.numpy(), straight.weight.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_weights_loaded_after_steps_replace_their_stale_masters(device):
    """Loading weights into the model after the masters exist: the next step starts from the
    loaded weights, not from the old masters; untouched elements keep their masters' bits."""
    lin = nn.Linear(4, 3, bias=False).to(device).to_dtype(BF16)
    opt = L.optim.SGD(lin.parameters(), lr=1e-3, master_weights=True)
    g = L.tensor(np.ones((3, 4), BF16), device=device)
    for _ in range(3):
        lin.weight.grad = g
        opt.step()
    master = L.backend.to_device(opt.state[lin.weight]["master_param"], "cpu").copy()
    new = L.backend.to_device(lin.weight.data, "cpu").copy()
    new[0] = np.array([0.5, -0.25, 2.0, 1.0], BF16)            # row 0 replaced, the rest kept
    lin.load_state_dict({"weight": new})
    lin.weight.grad = g
    opt.step()
    got = L.backend.to_device(opt.state[lin.weight]["master_param"], "cpu")
    np.testing.assert_allclose(got[0], np.array([0.5, -0.25, 2.0, 1.0]) - 1e-3, rtol=1e-6)
    np.testing.assert_allclose(got[1:], master[1:] - 1e-3, rtol=1e-6)


def test_float32_parameters_ignore_master_weights():
    p = nn.Parameter(L.tensor(np.ones(3, np.float32)))
    opt = L.optim.Adam([p], lr=1e-3, master_weights=True)
    p.grad = L.tensor(np.ones(3, np.float32))
    opt.step()
    assert "master_param" not in opt.state[p]
    np.testing.assert_allclose(p.numpy(), 1 - 1e-3, rtol=1e-6)


# ---- training in bfloat16 (train.dcgan --precision bf16) --------------------------------------


def _dcgan_losses(precision, device, steps=8, cuda_graph=False):
    from train import dcgan
    from train.common import set_precision
    L.manual_seed(0)
    G, D = dcgan.Generator(16, 8, 1).to(device), dcgan.Discriminator(8, 1).to(device)
    set_precision((G, D), precision)
    oG, oD = dcgan.make_optimizers(G, D, master_weights=precision != "fp32")
    rng = np.random.default_rng(1)
    data = rng.uniform(-1, 1, (steps, 16, 1, 64, 64)).astype(np.float32)
    noise = rng.standard_normal((steps, 16, 16, 1, 1)).astype(np.float32)
    step = (lambda real, z: dcgan.train_step_device(G, D, oG, oD, real, z))
    if cuda_graph:
        step = L.graph.CapturedStep(step, modules=(G, D), optimizers=(oG, oD))
    # each step's statistics read back before the next: a captured step returns the same static
    # buffer every replay (the first version of this test kept them all and compared the last
    # replay's values six times over against the eager steps)
    out = [L.backend.to_device(step(L.tensor(data[s], device=device),
                                    L.tensor(noise[s], device=device)), "cpu")
           for s in range(steps)]
    return np.array(out, np.float64)


@pytest.mark.parametrize("device", DEVICES)
def test_dcgan_in_bfloat16_tracks_float32(device):
    """Eight DCGAN steps from the same weights and data: bfloat16 (8 significant bits, float32
    masters) keeps errD, errG and the D outputs within 4% of float32 -- about ten bfloat16 ulps
    after eight updates of a GAN."""
    a, b = _dcgan_losses("fp32", device), _dcgan_losses("bf16", device)
    assert np.isfinite(b).all()
    np.testing.assert_allclose(b, a, rtol=0.04)


@pytest.mark.parametrize("device", DEVICES + ["host"])
def test_a_bf16_models_sigmoid_keeps_the_gradient_of_a_sure_discriminator(device, where):
    """set_precision('bf16') computes a model's Sigmoid in float32: at logit 8 bfloat16 rounds
    sigmoid to exactly 1, where BCE's gradient toward the label 0 is its clamp's 1 / 1e-12; in
    float32 the gradient is sigmoid(x) / n, as torch gives in float64. Other modules stay
    bfloat16."""
    from train.common import set_precision
    model = nn.Sequential(nn.Linear(3, 1), nn.Sigmoid())
    assert set_precision([model], "bf16") == BF16 and model[1].float32
    assert repr(model[1]) == "Sigmoid(float32=True)"
    x = L.tensor(np.array([[8.0], [6.0], [-3.0]], BF16), device=where, requires_grad=True)
    zeros = L.tensor(np.zeros((3, 1), BF16), device=where)
    p = model[1](x)
    assert p.dtype == np.float32 and model[0].weight.dtype == BF16
    loss = F.binary_cross_entropy(p, zeros)
    loss.backward()
    t = torch.tensor([[8.0], [6.0], [-3.0]], dtype=torch.float64, requires_grad=True)
    tF.binary_cross_entropy(torch.sigmoid(t), torch.zeros(3, 1, dtype=torch.float64)).backward()
    assert x.grad.dtype == BF16
    bf16_close(x.grad.numpy(), t.grad.numpy())
    # float32's p near 1 is good to 6e-8, 2e-4 of 1 - p at logit 8: the loss to ~1e-4 / 3
    want = tF.binary_cross_entropy(torch.sigmoid(t), torch.zeros(3, 1, dtype=torch.float64))
    assert abs(float(loss.numpy()) - want.item()) < 1e-4
    plain = nn.Sigmoid()                    # why: in bfloat16 the sigmoid of 8 rounds to 1
    assert plain(L.tensor(np.array([[8.0]], BF16), device=where)).numpy().item() == 1.0


@pytest.mark.gpu
def test_dcgan_in_bfloat16_captured_equals_eager():
    # deterministic algorithms: cuDNN's fastest bfloat16 weight gradients add with atomics, and
    # Adam's first steps turn any difference into one of a whole learning rate
    from cudnnlite import conv
    with conv.using(deterministic=True):
        eager = _dcgan_losses("bf16", 0)
        captured = _dcgan_losses("bf16", 0, cuda_graph=True)
    np.testing.assert_array_equal(captured, eager)


# ---- interop and promotion ---------------------------------------------------------------------

def test_a_torch_bfloat16_state_dict_loads_and_torch_tensors_are_taken_as_they_are():
    t = torch.nn.Linear(5, 3).bfloat16()
    ours = nn.Linear(5, 3).to_dtype(BF16)
    ours.load_state_dict(t.state_dict())                 # torch's bfloat16: no NumPy dtype
    assert ours.weight.dtype == BF16
    np.testing.assert_array_equal(ours.weight.numpy().astype(np.float32),
                                  t.weight.detach().float().numpy())
    x = L.tensor(torch.arange(6, dtype=torch.bfloat16).reshape(2, 3))
    assert x.device == "cpu" and x.dtype == BF16 and x.numpy().astype(int).tolist() == \
        [[0, 1, 2], [3, 4, 5]]
    assert L.tensor(torch.ones(2)).dtype == np.float32

    class Sub(torch.Tensor):                    # a subclass from outside the torch package
        pass
    assert L.tensor(torch.ones(3).as_subclass(Sub)).device == "cpu"


def test_torch_tensors_save_as_the_arrays_they_hold(tmp_path):
    L.save({"w": torch.ones(2, dtype=torch.bfloat16), "p": torch.nn.Parameter(torch.ones(2))},
           tmp_path / "t.npz")
    back = L.load(tmp_path / "t.npz")
    assert back["w"].dtype == np.float32 and back["p"].tolist() == [1.0, 1.0]


def test_a_loss_of_float16_and_bfloat16_is_float32():
    y = F.mse_loss(L.tensor(np.ones(3, np.float16)), L.tensor(np.zeros(3, BF16)))
    assert y.dtype == np.float32 and y.item() == 1.0


@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "binary_cross_entropy",
                                  "binary_cross_entropy_with_logits"])
def test_a_loss_of_bfloat16_and_float32_is_float32_whichever_comes_first(loss):
    """As torch promotes (mse_loss / l1_loss: float32 both ways); the bfloat16 operand's
    gradient comes back bfloat16."""
    rng = np.random.default_rng(6)
    a, b = _values(rng, (50,), "unit"), rng.uniform(0.05, 0.95, 50).astype(np.float32)
    ref = getattr(tF, loss)(torch.tensor(a.astype(np.float64)), torch.tensor(b.astype(np.float64)))
    for first_half in (True, False):
        x = L.tensor(a, requires_grad=True)
        args = (x, L.tensor(b)) if first_half else (L.tensor(b), x)
        if loss.startswith("binary") and not first_half:
            continue                                      # (the target is not the bf16 one)
        y = getattr(F, loss)(*args)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.item(), float(ref), rtol=1e-6)
        y.backward()
        assert x.grad.dtype == BF16


def test_save_keeps_bfloat16_exactly_as_float32_and_refuses_nested_dicts(tmp_path):
    m = nn.Linear(4, 3).to_dtype(BF16)
    L.save(m.state_dict(), tmp_path / "w.npz")
    back = L.load(tmp_path / "w.npz")
    assert back["weight"].dtype == np.float32                # npz has no bfloat16
    fresh = nn.Linear(4, 3).to_dtype(BF16)
    fresh.load_state_dict(back)
    np.testing.assert_array_equal(fresh.weight.numpy(), m.weight.numpy())
    opt = L.optim.Adam(m.parameters(), master_weights=True)
    with pytest.raises(TypeError, match="'state' is a dict, not an array"):
        L.save(opt.state_dict(), tmp_path / "o.npz")


def test_pytorch_spellings_of_a_cast():
    """module.to(torch.bfloat16)-style casts: to(dtype), to(dtype=...), .bfloat16(), .half()
    (batch norm keeps float32 throughout, as to_dtype); a device stays a device."""
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    for cast in (lambda m: m.to(BF16), lambda m: m.to(dtype="bfloat16"), lambda m: m.bfloat16()):
        sd = cast(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))).state_dict()
        assert sd["0.weight"].dtype == BF16 and sd["1.weight"].dtype == np.float32
    assert net.half().state_dict()["0.bias"].dtype == np.float16
    assert net.to("cpu") is net and net.state_dict()["0.bias"].dtype == np.float16
    x = L.tensor(np.ones(3), requires_grad=True)
    y = x.to(BF16)
    assert y.dtype == BF16 and x.bfloat16().dtype == BF16 and y.float().dtype == np.float32
    assert x.to("cpu") is x and x.half().dtype == np.float16
    y.float().sum().backward()                     # the cast is differentiable
    assert x.grad.dtype == np.float64 and x.grad.numpy().tolist() == [1.0, 1.0, 1.0]


def test_a_cast_to_a_non_floating_dtype_is_refused_and_to_a_tensor_takes_its_dtype():
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        nn.Linear(3, 2).to(dtype=np.int64)
    x = L.tensor(np.ones(3))
    assert x.to(L.tensor(np.zeros(2, BF16))).dtype == BF16
    assert "dtype=bfloat16" in repr(x.bfloat16()) and "1." in repr(x.bfloat16())

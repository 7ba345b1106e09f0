"""create_graph=True (double backward) against torch CPU in float64: for each op, the gradient
g = d(sum w * f(x))/dx made with create_graph, the Hessian-vector product h = d(sum u * g)/dx
(made with create_graph too) and the next derivative d(sum u * h)/dx -- each compared with
torch's, on the NumPy path, the GPU path run on the host (tests/host_kernels.py) and a GPU.
Then WGAN-GP's gradient penalty through DCGAN's discriminator (batch norm and channels-last
included), the engine's semantics (Tensor.backward(create_graph=True), hooks, grad_outputs
with a graph, freeing) and the ops that refuse it by name."""
import numpy as np
import pytest
import torch

import layers as L
from layers import autograd
from reference import rel_err

F = L.functional
TF = torch.nn.functional
DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)


class _Torch:
    """torch's spelling of what a case calls: torch.nn.functional's, else torch's."""

    def __getattr__(self, name):
        return getattr(TF, name, None) or getattr(torch, name)


T = _Torch()
POS = "positive"            # inputs drawn in (0.5, 2)
ZEROS = "zeros"             # standard normal with every third entry exactly 0 (the kinks)
UNIT = "unit"               # inputs drawn in (-0.9, 0.9)

# (name, input shapes, draw, f(m, *inputs) with m = layers.functional or torch's spelling)
CASES = [
    ("exp", [(3, 4)], None, lambda m, x: m.exp(x)),
    ("log", [(3, 4)], POS, lambda m, x: m.log(x)),
    ("log1p", [(3, 4)], POS, lambda m, x: m.log1p(x)),
    ("sin cos", [(3, 4)], None, lambda m, x: m.sin(x) * m.cos(x)),
    ("tan", [(3, 4)], UNIT, lambda m, x: m.tan(x)),
    ("sinh cosh", [(3, 4)], None, lambda m, x: m.sinh(x) + m.cosh(x)),
    ("atan asinh", [(3, 4)], None, lambda m, x: m.atan(x) * m.asinh(x)),
    ("asin acos atanh", [(3, 4)], UNIT, lambda m, x: m.asin(x) * m.acos(x) + m.atanh(x)),
    ("acosh", [(3, 4)], POS, lambda m, x: m.acosh(x + 1.5)),
    ("reciprocal rsqrt", [(3, 4)], POS, lambda m, x: m.reciprocal(x) + m.rsqrt(x)),
    ("expm1 log2 log10", [(3, 4)], POS, lambda m, x: m.expm1(x) * m.log2(x) + m.log10(x)),
    ("sqrt", [(3, 4)], POS, lambda m, x: m.sqrt(x)),
    ("pow", [(3, 4)], POS, lambda m, x: x ** 3 + x ** 0.5 + x ** 1 + x ** 0),
    ("abs neg", [(3, 4)], None, lambda m, x: -m.absolute(x) * x),
    ("sigmoid tanh", [(3, 4)], None, lambda m, x: m.sigmoid(x) * m.tanh(x)),
    ("erf gelu", [(3, 4)], None,
     lambda m, x: m.erf(x) * m.gelu(x) + m.gelu(x, approximate="tanh") ** 2),
    ("relu leaky_relu", [(3, 4)], None, lambda m, x: m.relu(x) * x + m.leaky_relu(x, 0.2) ** 2),
    ("softplus elu", [(3, 4)], None, lambda m, x: m.softplus(x) * m.elu(x)),
    ("clamp", [(3, 4)], None, lambda m, x: m.clamp(x, -0.5, 0.7) * x),
    ("round", [(3, 4)], None, lambda m, x: m.round(x) * x),
    ("add sub broadcast", [(3, 4), (4,)], None, lambda m, a, b: (a + b) * (a - b)),
    ("mul div broadcast", [(3, 1), (1, 4)], POS, lambda m, a, b: a * b / (a + b)),
    ("maximum minimum", [(3, 4), (3, 4)], None,
     lambda m, a, b: m.maximum(a, b) * m.minimum(a, b) * a),
    ("maximum minimum, ties", [(3, 4)], None,
     lambda m, a: m.maximum(a, m.clamp(a, -0.3, 0.3)) * m.minimum(m.clamp(a, 0, 1), a) * a),
    ("atan2", [(3, 4), (3, 4)], None, lambda m, a, b: m.atan2(a, b) * a),
    ("where", [(3, 4), (4,)], None,
     lambda m, a, b: m.where(_mask(m, (3, 4)), a * a, b * a)),
    ("sum mean", [(2, 3, 4)], None,
     lambda m, x: m.sum(x * x, dim=(0, 2), keepdim=True) * m.mean(x, 1, keepdim=True)),
    ("amax", [(3, 5)], None, lambda m, x: m.amax(x * x, 1) * m.sum(x, 1)),
    ("softmax log_softmax", [(3, 5)], None,
     lambda m, x: m.softmax(x * x, dim=1) + m.log_softmax(x, dim=0)),
    ("logsumexp", [(3, 5)], None, lambda m, x: m.logsumexp(x * x, 1)),
    ("cumsum", [(3, 5)], None, lambda m, x: m.cumsum(x * x, 1)),
    ("var std", [(3, 5)], None, lambda m, x: m.var(x, 1) * m.std(x, 0).sum()),
    ("norm p=2, p=1", [(3, 5)], None,
     lambda m, x: m.norm(x, 2, dim=1) * m.norm(x, 1, dim=1)),
    ("reshape permute expand", [(2, 3, 4)], None,
     lambda m, x: (x.reshape(6, 4).permute(1, 0) * x.sum(0).reshape(1, 12)[:, :6]).expand(
         2, 4, 6)),
    ("permute 3-d", [(2, 3, 4)], None, lambda m, x: (x * x).permute(2, 0, 1) * x[:1, :1, :1]),
    ("split chunk", [(5, 3)], None,       # (one op each, some pieces unused: zeros)
     lambda m, a: (a.split([2, 0, 3])[2] * a.chunk(2, 1)[1][2:].sin()).sum(0) * a[0, :1]),
    ("cat stack unbind", [(2, 3), (4, 3)], None,
     lambda m, a, b: m.stack([m.cat([a, b * b], 0), m.cat([b, a], 0)], 1).unbind(1)[0] * b[0]),
    ("getitem, repeated index", [(5, 3)], None,
     lambda m, x: x[[0, 2, 2, 4]] * x[1:3].sum() + x[[4, 4, 0, 1], 1:2] ** 2),
    ("pad tril", [(3, 4)], None, lambda m, x: m.tril(m.pad(x * x, (1, 2, 0, 1)), 1)),
    ("gather, smaller index", [(3, 5)], None,
     lambda m, x: m.gather(x * x, 1, _index(m, [[0, 4], [2, 2]])) * x[:2, :2]),
    ("max min along dim -1", [(3, 5)], None,
     lambda m, x: m.max(x * x, -1)[0] * m.min(x, dim=-1)[0]),
    ("max along dim, max_pool2d", [(2, 2, 4, 4)], None,
     lambda m, x: m.max(x * x, 3)[0].sum() * m.max_pool2d(x, 2)),
    ("interpolate nearest bilinear", [(1, 2, 3, 3)], None,
     lambda m, x: m.interpolate(x * x, scale_factor=2) * m.interpolate(
         x, scale_factor=2, mode="bilinear", align_corners=False)),
    ("avg_pool2d instance_norm", [(2, 2, 4, 4)], None,
     lambda m, x: m.avg_pool2d(m.instance_norm(x * x), 2) ** 2),
    ("scaled_dot_product_attention", [(2, 3, 4), (2, 5, 4), (2, 5, 3)], None,
     lambda m, q, k, v: m.scaled_dot_product_attention(q, k * k, v)),
    ("matmul 1-d and batched", [(3,), (2, 3, 4), (4,)], None,
     lambda m, a, b, c: m.matmul(m.matmul(a, b * b), c) * m.matmul(a, b).sum()),
    ("matmul broadcast batch", [(2, 1, 3, 5), (5, 4)], None,
     lambda m, a, b: m.matmul(m.tanh(a), b * b)),
    ("linear", [(2, 3, 5), (4, 5), (4,)], None,
     lambda m, x, w, b: m.linear(m.tanh(x), w, b) ** 2),
    ("conv2d stride padding bias", [(2, 3, 7, 7), (4, 3, 3, 3), (4,)], None,
     lambda m, x, w, b: m.tanh(m.conv2d(x, w, b, stride=2, padding=1))),
    ("conv2d dilation groups", [(2, 4, 7, 6), (6, 2, 3, 2), (6,)], None,
     lambda m, x, w, b: m.conv2d(x, w, b, stride=(2, 1), padding=2, dilation=2, groups=2) ** 2),
    ("conv2d channels-last", [(2, 3, 8, 8), (4, 3, 4, 4)], None,
     lambda m, x, w: m.leaky_relu(m.conv2d(_channels_last(m, x), _channels_last(m, w),
                                           stride=2, padding=1), 0.2) ** 2),
    ("conv_transpose2d", [(2, 3, 4, 4), (3, 5, 4, 4), (5,)], None,
     lambda m, x, w, b: m.tanh(m.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                  output_padding=1))),
    ("conv_transpose2d groups channels-last", [(2, 4, 3, 3), (4, 3, 3, 3)], None,
     lambda m, x, w: m.conv_transpose2d(_channels_last(m, x), _channels_last(m, w), stride=2,
                                        groups=2) ** 2),
    ("conv1d", [(2, 3, 9), (4, 3, 3)], None,
     lambda m, x, w: m.conv1d(x, w, stride=2, padding=1) ** 2),
    ("batch_norm training", [(4, 3, 5, 5), (3,), (3,)], None,
     lambda m, x, w, b: m.batch_norm(x * x, None, None, w, b, training=True) ** 2),
    ("batch_norm training channels-last", [(4, 3, 5, 5), (3,), (3,)], None,
     lambda m, x, w, b: m.batch_norm(_channels_last(m, x) ** 2, None, None, w, b,
                                     training=True) ** 2),
    ("batch_norm evaluation", [(4, 3, 5), (3,), (3,)], None,
     lambda m, x, w, b: m.batch_norm(x, _stat(m, 0), _stat(m, 1), w, b, training=False) ** 2),
    ("batch_norm, weight is bias", [(4, 3, 5), (3,)], None,
     lambda m, x, w: m.batch_norm(x, None, None, w, w, training=True) ** 2),
    ("layer_norm group_norm", [(2, 4, 3), (3,), (3,)], None,
     lambda m, x, w, b: m.layer_norm(x, (3,), w, b) * m.group_norm(x, 2)),
    ("mse_loss l1_loss", [(3, 4), (3, 4)], None,
     lambda m, a, b: m.mse_loss(a * a, b) + m.l1_loss(a * b, b, reduction="sum")),
    ("binary_cross_entropy", [(3, 4)], None,
     lambda m, x: m.binary_cross_entropy(m.sigmoid(x), _target(m, (3, 4)), reduction="sum")),
    ("binary_cross_entropy_with_logits", [(3, 4)], None,
     lambda m, x: m.binary_cross_entropy_with_logits(x * x, _target(m, (3, 4)),
                                                     pos_weight=_target(m, (4,)) + 0.5)),
    ("nll_loss kl_div", [(5, 4)], None,
     lambda m, x: m.nll_loss(m.log_softmax(x * x, 1), _classes(m)) * m.kl_div(
         m.log_softmax(x, 1), m.softmax(x * x, 1), reduction="batchmean")),
    ("binary_cross_entropy_with_logits at 0", [(3, 4)], ZEROS,
     lambda m, x: m.binary_cross_entropy_with_logits(x, _target(m, (3, 4)), reduction="none")
     * x),
    ("clamp, Tensor bounds", [(3, 4), (4,), (3, 1)], None,
     lambda m, x, lo, hi: m.clamp(x * x, min=lo, max=hi + 1) * x),
    ("cross_entropy", [(5, 4)], None,
     lambda m, x: m.cross_entropy(x * x, _classes(m), weight=_target(m, (4,)) + 0.5,
                                  ignore_index=1, label_smoothing=0.1)),
]


# Cases whose third derivative torch 2.13 does not give right, compared to the second only:
# its native batch / layer / group / instance norm's third derivatives differ from those of
# the same formulas spelled in elementary torch ops (by 15-45 %; ours equal the latter:
# test_norms_third_derivative_is_their_formulas), and conv_transpose2d with output_padding
# refuses a third derivative ("output_padding is not supported for non-transposed
# convolutions").
THIRD_NOT_TORCHS = {"avg_pool2d instance_norm", "conv_transpose2d", "batch_norm training",
                    "batch_norm training channels-last", "batch_norm, weight is bias",
                    "layer_norm group_norm"}


def _mask(m, shape):
    mask = np.random.default_rng(7).random(shape) > 0.5
    return torch.tensor(mask) if m is T else mask


def _target(m, shape):
    t = np.random.default_rng(8).random(shape)
    return torch.tensor(t) if m is T else L.tensor(t, device=_DEVICE[0])


def _classes(m):
    c = np.array([0, 1, 3, 2, 1])
    return torch.tensor(c) if m is T else L.tensor(c, device=_DEVICE[0])


def _index(m, rows):
    return torch.tensor(rows) if m is T else L.tensor(np.array(rows), device=_DEVICE[0])


def _stat(m, i):
    s = np.array([[0.1, -0.2, 0.3], [0.5, 1.5, 2.0]])[i]
    return torch.tensor(s) if m is T else L.tensor(s, device=_DEVICE[0])


def _channels_last(m, x):
    return x.contiguous(memory_format=torch.channels_last) if m is T else \
        x.contiguous(memory_format="channels_last")


_DEVICE = [None]           # the device a case's constants go to (set by the test)


def _draw(rng, shape, draw):
    if draw == POS:
        return rng.uniform(0.5, 2.0, shape)
    if draw == UNIT:
        return rng.uniform(-0.9, 0.9, shape)
    a = rng.standard_normal(shape)
    if draw == ZEROS:
        a.reshape(-1)[::3] = 0
    return a


def _derivatives(m, inputs, fn, w, u, third=True):
    """g = d(sum w f)/dx, h = d(sum u g)/dx, k = d(sum u h)/dx of one library, each but the last
    made with create_graph (h and k: None for an input they do not reach; k not taken unless
    third)."""
    y = fn(m, *inputs)
    const = (lambda a: torch.tensor(a)) if m is T else (lambda a: L.tensor(a, device=_DEVICE[0]))
    grad = torch.autograd.grad if m is T else autograd.grad
    g = grad((y * const(w)).sum(), inputs, create_graph=True)
    h = grad(sum((gi * const(ui)).sum() for gi, ui in zip(g, u)), inputs, allow_unused=True,
             create_graph=True)
    reached = [(hi, ui) for hi, ui in zip(h, u) if hi is not None and hi.requires_grad]
    k = grad(sum((hi * const(ui)).sum() for hi, ui in reached), inputs, allow_unused=True) \
        if reached and third else [None] * len(inputs)
    return [[None if t is None else t.detach().numpy(force=True) if m is T else t.numpy()
             for t in ts] for ts in (g, h, k)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, shapes, draw, fn", CASES, ids=[c[0] for c in CASES])
def test_double_backward_is_torchs(name, shapes, draw, fn, device, where):
    rng = np.random.default_rng(len(name))
    data = [_draw(rng, s, draw) for s in shapes]
    _DEVICE[0] = where
    ours = [L.tensor(a, device=where, requires_grad=True) for a in data]
    theirs = [torch.tensor(a, requires_grad=True) for a in data]
    ty = fn(T, *theirs)
    w = rng.standard_normal(tuple(ty.shape))
    u = [rng.standard_normal(s) for s in shapes]
    third = name not in THIRD_NOT_TORCHS
    g, h, k = _derivatives(F, ours, fn, w, u, third)
    tg, th, tk = _derivatives(T, theirs, fn, w, u, third)
    for a, b in zip(g, tg):
        assert rel_err(a, b) < 1e-11, name
    for order, ours_, theirs_ in (("second", h, th), ("third", k, tk)):
        for a, b in zip(ours_, theirs_):
            if b is None or not np.any(b):          # (none: ours None or zeros)
                assert a is None or not np.any(a), (name, order)
            else:
                assert a is not None and rel_err(a, b) < 1e-10, (name, order)


def _normalized(x, axes, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over `axes`, in elementary torch ops."""
    d = x - x.mean(axes, keepdim=True)
    return d * ((d * d).mean(axes, keepdim=True) + eps) ** -0.5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ours, formula", [
    (lambda x: F.batch_norm(x, None, None, training=True), lambda x: _normalized(x, (0, 2, 3))),
    (lambda x: F.batch_norm(x.contiguous(memory_format="channels_last"), None, None,
                            training=True), lambda x: _normalized(x, (0, 2, 3))),
    (lambda x: F.instance_norm(x), lambda x: _normalized(x, (2, 3))),
    (lambda x: F.layer_norm(x, (3, 4)), lambda x: _normalized(x, (2, 3))),
    (lambda x: F.group_norm(x, 2), lambda x: _normalized(x.reshape(4, 2, -1), (2,)).reshape(
        4, 4, 3, 4)),
], ids=["batch_norm", "batch_norm channels-last", "instance_norm", "layer_norm", "group_norm"])
def test_norms_third_derivative_is_their_formulas(ours, formula, device, where):
    """The norms' first three derivatives equal those of their formulas spelled in elementary
    torch ops (torch's native norms agree to the second only: THIRD_NOT_TORCHS)."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 4, 3, 4))
    w, u = rng.standard_normal(data.shape), [rng.standard_normal(data.shape)]
    _DEVICE[0] = where
    mine = _derivatives(F, [L.tensor(data, device=where, requires_grad=True)],
                        lambda m, x: ours(x), w, u)
    theirs = _derivatives(T, [torch.tensor(data, requires_grad=True)],
                          lambda m, x: formula(x), w, u)
    for a, b in zip(mine, theirs):
        assert rel_err(a[0], b[0]) < 1e-10


def _discriminators(where, dtype, channels_last):
    """DCGAN's netD here and pytorch/examples' (float64), with the same weights."""
    from tools.dcgan_torch import Discriminator as TorchD
    from train import dcgan
    torch.manual_seed(0)
    theirs = TorchD(ndf=4, nc=2).double()
    ours = dcgan.Discriminator(ndf=4, nc=2)
    if dtype == np.float64:
        ours = ours.double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    if channels_last:
        ours.to(memory_format="channels_last")
        theirs.to(memory_format=torch.channels_last)
    return ours, theirs


def _penalty(lib, D, x):
    """WGAN-GP's gradient penalty, mean over the batch of (|dD(x)/dx| - 1)^2."""
    grad = torch.autograd.grad if lib is torch else autograd.grad
    (g,) = grad(D(x).sum(), x, create_graph=True)
    n = g.reshape(g.shape[0], -1).norm(2, dim=1)
    return ((n - 1) ** 2).mean()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, channels_last", [
    (np.float64, False), (np.float64, True),
    (np.float32, True)])
def test_wgan_gp_penalty_through_dcgans_discriminator_is_torchs(device, where, dtype,
                                                                 channels_last):
    """The penalty and its gradient in every weight of netD (batch norm, leaky ReLU, sigmoid,
    strided convolutions) equal torch's: float64 to rounding; float32 (the NumPy path and the
    host GPU path, no TF32 there) to float32's rounding through two passes of five layers."""
    if dtype == np.float32 and device == 0:
        pytest.skip("float32 on a GPU takes TF32 convolutions (another tolerance)")
    ours, theirs = _discriminators(where, dtype, channels_last)
    rng = np.random.default_rng(0)
    real, fake = rng.standard_normal((2, 3, 2, 64, 64))
    a = rng.random((3, 1, 1, 1))
    mix = a * real + (1 - a) * fake
    x = L.tensor(mix.astype(dtype), device=where, requires_grad=True)
    tx = torch.tensor(mix, requires_grad=True)
    if channels_last:
        x = x.contiguous(memory_format="channels_last")
        tx = tx.contiguous(memory_format=torch.channels_last)
    p, tp = _penalty(L, ours, x), _penalty(torch, theirs, tx)
    p.backward()
    tp.backward()
    tol = 1e-12 if dtype == np.float64 else 2e-5
    assert rel_err(p.numpy(), tp.detach().numpy()) < tol
    for (name, w), tw in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_err(w.grad.numpy(), tw.grad.numpy()) < tol, name


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")  # (torch's)
def test_backward_with_create_graph_leaves_grads_that_have_a_graph():
    """Tensor.backward(create_graph=True): .grad is a Tensor with a graph (added out of place
    on a second backward), differentiable again; as torch's."""
    def run(lib, make):
        x = make([0.5, -1.0, 2.0])
        (x ** 3 + x * x.sin()).sum().backward(create_graph=True)   # (x reached three times)
        (x ** 2).sum().backward(create_graph=True)                 # (added to the first)
        first = x.grad.detach().numpy().copy()
        assert x.grad.requires_grad
        g = x.grad
        (g * g).sum().backward()               # adds d(sum g^2)/dx into .grad
        return first, x.grad.detach().numpy()
    ours = run(L, lambda v: L.tensor(np.array(v), requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-15)


def test_create_graph_hooks_grad_outputs_and_non_leaf_inputs_are_torchs():
    """A tensor hook's replacement is part of the graph; a grad_outputs Tensor that requires
    grad is differentiated through; a non-leaf input's gradient is taken where it is made."""
    def run(lib, make):
        grad = torch.autograd.grad if lib is torch else autograd.grad
        x, v = make([0.5, -1.0, 2.0]), make([1.0, 2.0, -3.0])
        h = x * x
        h.register_hook(lambda g: g * h)         # (a hook whose result depends on x)
        y = h.sin()
        gx, gh = grad(y, [x, h], grad_outputs=v, create_graph=True)
        out = grad((gx * gx).sum() + gh.sum(), [x, v])
        return [t.detach().numpy() for t in (gx, gh, *out)]
    ours = run(L, lambda a: L.tensor(np.array(a), requires_grad=True))
    theirs = run(torch, lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_create_graph_frees_the_graph_only_when_asked():
    """As torch's: create_graph keeps the graph unless retain_graph=False; a gradient's graph
    runs through the first graph's ops, so freeing those ends it too."""
    x = L.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (x * x.exp()).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x, retain_graph=True)
    np.testing.assert_allclose(h.numpy(), (2 + x.data) * np.exp(x.data), rtol=1e-15)
    (g2,) = autograd.grad(y, x, create_graph=True, retain_graph=False)
    np.testing.assert_array_equal(g.numpy(), g2.numpy())
    with pytest.raises(RuntimeError, match="a second time"):
        autograd.grad(y, x, create_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        autograd.grad(g2.sum(), x)


@pytest.mark.parametrize("make, op", [
    (lambda x: x.reshape(1, 4).cumsum(1).prod(), "Prod"),
    (lambda x: F.pad(x.reshape(1, 4), (1, 1), mode="reflect"), "Pad"),
    (lambda x: F.norm(x, 3, dim=0), "VectorNorm"),
    (lambda x: 2.0 ** x, "PowTensor"),
    (lambda x: F.conv2d(x.reshape(1, 1, 2, 2), x.reshape(1, 1, 2, 2) * 1, activation="relu"),
     "Conv2d"),
    (lambda x: F.cumprod(x, 0), "Cumprod"),
])
def test_ops_without_a_double_backward_refuse_it_by_name(make, op):
    x = L.tensor(np.array([0.5, -1.0, 2.0, 1.5]), requires_grad=True)
    y = make(x).sum()
    with pytest.raises(NotImplementedError, match=f"{op}: no double backward"):
        autograd.grad(y, x, create_graph=True)
    (g,) = autograd.grad(make(x).sum(), x)            # the first derivative is there
    assert g.shape == x.shape


def test_create_graph_refuses_a_backward_whose_saved_input_changed_in_place():
    """As the first-order engine (layers.changes): a backward_graph reads the op's inputs, so a
    change made to one in place since the forward refuses it, naming the op."""
    x = L.tensor(np.array([1.0, 2.0]), requires_grad=True)
    w = L.tensor(np.array([3.0, 4.0]), requires_grad=True)
    y = (x * w).sum()
    with L.no_grad():
        w += 1
    with pytest.raises(RuntimeError, match=r"Mul.backward: its input 1 .* changed in place"):
        autograd.grad(y, x, create_graph=True)


def _recurrent(kind, where, **kw):
    """torch's recurrent module and ours (float64), the same weights."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(3, 4, **kw).double()
    ours = getattr(L.nn, kind)(3, 4, **kw).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    return ours, theirs


def _input_gradient_penalty(lib, run, x, params):
    """d(sum of squares of the outputs)/dx with create_graph, then the gradient of its squared
    norm in the parameters: (penalty, x's gradient, each parameter's gradient)."""
    grad = torch.autograd.grad if lib is torch else autograd.grad
    (gx,) = grad(run(x), x, create_graph=True)
    penalty = (gx * gx).sum()
    return [t.detach().numpy() for t in (penalty, gx, *grad(penalty, params))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
def test_recurrent_cells_double_backward_is_torchs(kind, device, where):
    """Two steps of a cell (its composite: the gates in other ops), on both paths."""
    ours, theirs = _recurrent(kind, where)
    data = np.random.default_rng(4).standard_normal((5, 3))

    def run(lib, cell):
        def steps(x):
            state = None
            for _ in range(2):
                state = cell(x, state)
            h = state[0] if isinstance(state, tuple) else state
            return (h * h).sum()
        return steps
    x = L.tensor(data, device=where, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    mine = _input_gradient_penalty(L, run(L, ours), x, list(ours.parameters()))
    reference = _input_gradient_penalty(torch, run(torch, theirs), tx, list(theirs.parameters()))
    for a, b in zip(mine, reference):
        assert rel_err(a, b) < 1e-12


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_double_backward_on_the_cpu_is_torchs(kind):
    """The layers run their cells on the CPU (two layers, bidirectional); on a GPU they are one
    cuDNN call, which refuses double backward by name."""
    ours, theirs = _recurrent(kind, "cpu", num_layers=2, bidirectional=True)
    data = np.random.default_rng(5).standard_normal((6, 2, 3))
    mine = _input_gradient_penalty(L, lambda x: (ours(x)[0] ** 2).sum(),
                                   L.tensor(data, requires_grad=True), list(ours.parameters()))
    reference = _input_gradient_penalty(torch, lambda x: (theirs(x)[0] ** 2).sum(),
                                        torch.tensor(data, requires_grad=True),
                                        list(theirs.parameters()))
    for a, b in zip(mine, reference):
        assert rel_err(a, b) < 1e-12


def test_saturated_binary_cross_entropy_has_a_finite_double_backward():
    """A float32 sigmoid of 20 is exactly 1: backward's max((1 - p) p, 1e-12) keeps 0 / 0 out
    of the gradient and of its own gradient, as torch's."""
    def run(lib, make, F_):
        x = make([20.0, -2.0, 0.0])
        t = make([1.0, 0.0, 1.0]).detach()
        loss = F_.binary_cross_entropy(F_.sigmoid(x), t, reduction="sum")
        grad = torch.autograd.grad if lib is torch else autograd.grad
        (g,) = grad(loss, x, create_graph=True)
        (h,) = grad((g * g).sum(), x)
        return g.detach().numpy(), h.detach().numpy()
    ours = run(L, lambda v: L.tensor(np.array(v, np.float32), requires_grad=True), F)
    theirs = run(torch, lambda v: torch.tensor(v, requires_grad=True), TF)
    for a, b in zip(ours, theirs):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_cumsums_double_backward_sums_from_the_end_exactly():
    """d(sum w cumsum(x))/dx is w's running sum from the end: 1e17 + 1 + 1 beside two 1s loses
    nothing (a whole sum less a running one would)."""
    x = L.tensor(np.zeros(3), requires_grad=True)
    w = L.tensor(np.array([1e17, 1.0, 1.0]))
    (g,) = autograd.grad((F.cumsum(x * x + x, 0) * w).sum(), x, create_graph=True)
    assert g.numpy().tolist() == [1e17 + 2, 2.0, 1.0]


@pytest.mark.parametrize("make, op", [
    (lambda x: F.exp(x), "Exp"),
    (lambda x: F.softmax(x, 0), "Softmax"),
    (lambda x: F.mse_loss(x, x.detach() * 0), "MSELoss"),
])
def test_create_graph_refuses_when_an_input_it_reads_was_changed_in_place(make, op):
    """backward_graph reads the op's inputs themselves (not only what forward saved): one
    changed in place since is refused, not read."""
    x = L.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    y = make(x)
    with L.no_grad():
        x.mul_(2)
    with pytest.raises(RuntimeError, match=rf"{op}.backward: its input 0 .* changed in place"):
        autograd.grad((y * L.tensor(np.array([1.0, 2.0, 3.0]))).sum() if y.ndim else y, x,
                      create_graph=True)


@pytest.mark.parametrize("device", DEVICES)
def test_grads_made_with_create_graph_are_their_own_arrays(device, where):
    """As torch's AccumulateGrad: a leaf's first .grad is a copy laid out as the leaf (never the
    gradient handed to another leaf, nor the user's grad argument, nor a read-only broadcast
    view), so a plain backward can add into it afterwards."""
    x, y = (L.tensor(np.array(v), device=where, requires_grad=True) for v in ([1.0, 2.0],
                                                                              [3.0, 4.0]))
    ((x + y) * L.tensor(np.array([2.0, 5.0]), device=where)).sum().backward(create_graph=True)
    assert not np.shares_memory(x.grad.numpy(), y.grad.numpy())
    assert x.grad.data.data.ptr != y.grad.data.data.ptr if device != "cpu" else \
        not np.shares_memory(x.grad.data, y.grad.data)
    v = L.tensor(np.array([1.0, 1.0]), device=where)
    z = L.tensor(np.array([1.0, 2.0]), device=where, requires_grad=True)
    z.backward(v, create_graph=True)
    assert z.grad.data is not v.data
    s = L.tensor(np.array([1.0, 2.0]), device=where, requires_grad=True)
    s.sum().backward(create_graph=True)                  # (a broadcast of one gradient)
    (s * 2).sum().backward()
    assert s.grad.numpy().tolist() == [3.0, 3.0]
    w = L.tensor(np.ones((4, 3, 2, 2)), device=where, requires_grad=True)
    w = L.Tensor(w.contiguous(memory_format="channels_last").data, requires_grad=True)
    F.conv2d(L.tensor(np.ones((1, 3, 2, 2)), device=where).contiguous(
        memory_format="channels_last"), w).sum().backward(create_graph=True)
    assert w.grad.is_contiguous(memory_format="channels_last")


@pytest.mark.parametrize("device", DEVICES)
def test_a_plain_backward_into_a_grad_with_a_graph_refuses_that_graph_later(device, where):
    """torch's version counter: a plain backward adds into a .grad made with create_graph in
    place (on the GPU path not through cuDNN's or cuBLAS's beta = 1, which would not say so); a
    graph that read that .grad then refuses its backward."""
    x = L.tensor(np.array([1.0, 2.0]), device=where, requires_grad=True)
    w = L.tensor(np.ones((2, 1, 2, 2)), device=where, requires_grad=True)
    image = L.tensor(np.arange(8.0).reshape(2, 1, 2, 2), device=where)     # (one GEMM on a GPU)
    ((x ** 3).sum() + (F.conv2d(image, w) ** 2).sum()).backward(create_graph=True)
    p, q = (x.grad * x.grad).sum(), (w.grad * w.grad).sum()
    ((x * 10).sum() + F.conv2d(image, w).sum()).backward()
    for penalty, leaf in ((p, x), (q, w)):
        with pytest.raises(RuntimeError, match=r"changed in place by backward\(\) adding into"):
            autograd.grad(penalty, leaf)


def test_grad_outputs_of_another_dtype_stay_in_the_graph():
    """A grad_outputs Tensor is cast to its output's dtype by a differentiable cast: the second
    derivative reaches it, as torch's (in grad and in Tensor.backward)."""
    def run(lib, make):
        x = make([1.0, 2.0], "float64")
        v = make([1.0, 3.0], "float32")
        grad = torch.autograd.grad if lib is torch else autograd.grad
        (g,) = grad(x * x, x, grad_outputs=v, create_graph=True)
        (gv,) = grad(g.sum(), v)
        (x * x).backward(v, create_graph=True)
        (gv2,) = grad(x.grad.sum(), v)
        return gv.numpy(), gv2.numpy()
    ours = run(L, lambda a, d: L.tensor(np.array(a, d), requires_grad=True))
    theirs = run(torch, lambda a, d: torch.tensor(a, dtype=getattr(torch, d), requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_materialized_zeros_require_grad_with_create_graph():
    x, w = (L.tensor(np.array([1.0, 2.0]), requires_grad=True) for _ in range(2))
    _, gw = autograd.grad((x * x).sum(), [x, w], create_graph=True, materialize_grads=True)
    assert gw.requires_grad and not np.any(gw.numpy())
    _, gw = autograd.grad((x * x).sum(), [x, w], materialize_grads=True)
    assert not gw.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_a_gradient_penalty_step_under_the_non_finite_check(device, where):
    """layers.finite.FiniteCheck over a step whose backward runs with create_graph: its queued
    checks run before the engine frees anything, and it names the first non-finite output."""
    from layers.finite import FiniteCheck
    L.manual_seed(0)
    net = L.nn.Sequential(L.nn.Linear(3, 4), L.nn.Tanh(), L.nn.Linear(4, 1)).double().to(where)
    check = FiniteCheck({"net": net})
    for bad in (None, np.inf):
        data = np.ones((2, 3))
        if bad is not None:
            with L.no_grad():
                net[2].bias.fill_(bad)
        x = L.tensor(data, device=where, requires_grad=True)
        with check:
            (g,) = autograd.grad(net(x).sum(), x, create_graph=True)
            ((g * g).sum() + net(x).mean()).backward(retain_graph=False)
        assert check.first() == (None if bad is None else "output of net.2 (Linear)")


@pytest.mark.parametrize("device", DEVICES)
def test_relu_and_clamp_select_their_gradient_as_torch(device, where):
    """Where relu / clamp pass nothing, a NaN or inf coming from above (sqrt's at 0) is not
    multiplied by 0 but left out, in both engines, as torch's. (Not on the host harness, whose
    stand-in for cuDNN's ReLU backward multiplies by the mask: whether cuDNN selects is this
    test's question on a GPU.)"""
    if device == "host":
        pytest.skip("the host harness models cuDNN's ReLU backward; a GPU answers for cuDNN")
    def run(lib, make, f, create_graph):
        x = make([-1.0, 0.0, 2.0])
        grad = torch.autograd.grad if lib is torch else autograd.grad
        out = []
        for y in (f.relu(x), lib.clamp(x, min=0), lib.clamp(x, max=-0.5)):
            (g,) = grad(lib.sqrt(y - y.detach() + 1).sum() + lib.sqrt(y).sum(), x,
                        create_graph=create_graph)
            out.append(g.detach().numpy())
        return out
    for create_graph in (False, True):
        ours = run(L, lambda v: L.tensor(np.array(v), device=where, requires_grad=True), F,
                   create_graph)
        theirs = run(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True),
                     TF, create_graph)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)


def test_conv_transpose2d_with_output_padding_past_the_stride_has_a_double_backward():
    """output_padding may reach a stride where it stays under the dilation: the window is then
    not backward-data's own; its double backward differentiates the full transposed convolution
    cut to the window (its second derivatives are torch's)."""
    rng = np.random.default_rng(9)
    data = [rng.standard_normal(s) for s in ((2, 2, 3, 3), (2, 3, 2, 2), (3,))]
    kw = dict(stride=2, dilation=3, output_padding=2, padding=1)

    def run(lib, make, f):
        x, w, b = (make(a) for a in data)
        y = f.conv_transpose2d(x, w, b, **kw)
        grad = torch.autograd.grad if lib is torch else autograd.grad
        g = grad((y * y).sum(), [x, w, b], create_graph=True)
        return [t.detach().numpy() for t in (*g, *grad(sum((t * t).sum() for t in g), [x, w]))]
    ours = run(L, lambda a: L.tensor(a, requires_grad=True), F)
    theirs = run(torch, lambda a: torch.tensor(a, requires_grad=True), TF)
    for a, b in zip(ours, theirs):
        assert rel_err(a, b) < 1e-13


def test_what_second_order_code_spells_around_it():
    """torch spellings second-order programs use (a new-user port found them missing): the
    deprecated only_inputs=, autograd.backward, del module.weight, the parameters-as-a-vector
    utilities, L.channels_last; and the error of a backward through a gradient taken without
    create_graph says why."""
    x = L.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (g,) = autograd.grad((x ** 3).sum(), x, only_inputs=True)
    np.testing.assert_array_equal(g.numpy(), [3.0, 12.0])
    with pytest.raises(RuntimeError, match="graph only with create_graph=True"):
        (g * g).sum().backward()
    y = L.tensor(np.array([3.0]), requires_grad=True)
    autograd.backward([(x * x).sum(), (x * y).sum()], create_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 7.0])
    assert x.grad.requires_grad and y.grad.numpy().tolist() == [3.0]
    net = L.nn.Linear(2, 3).double()
    theirs = torch.nn.Linear(2, 3).double()
    net.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    vec = L.nn.utils.parameters_to_vector(net.parameters())
    np.testing.assert_array_equal(
        vec.numpy(), torch.nn.utils.parameters_to_vector(theirs.parameters()).detach().numpy())
    L.nn.utils.vector_to_parameters(vec * 2, net.parameters())
    np.testing.assert_array_equal(net.weight.numpy(), 2 * theirs.weight.detach().numpy())
    del net.weight
    assert "weight" not in dict(net.named_parameters())
    net.weight = L.tensor(np.ones((3, 2)))               # (MAML's fast weights: a plain Tensor)
    np.testing.assert_array_equal(net(L.tensor(np.ones((1, 2)))).numpy(),
                                  2 + net.bias.numpy()[None])
    assert L.tensor(np.ones((1, 2, 3, 3))).contiguous(memory_format=L.channels_last) \
        .is_contiguous(memory_format=L.channels_last)


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_is_grads_batched_gives_torchs_jacobian_rows(device, where, create_graph):
    """grad(is_grads_batched=True): a batch of grad_outputs, one gradient each, stacked -- the
    rows of a Jacobian from the identity; with create_graph a graph through them to a second
    backward (and an unused input None, or zeros with materialize_grads), as torch's."""
    rng = np.random.default_rng(8)
    x, y, w = rng.standard_normal(3), rng.standard_normal(2), rng.standard_normal((4, 3))
    got = []
    for lib, dev in ((L, where), (torch, "cpu")):
        t = lambda a, **kw: (lib.tensor(a, device=where, **kw) if lib is L   # noqa: E731
                             else torch.tensor(a, **kw))
        tx, ty, tw = t(x, requires_grad=True), t(y, requires_grad=True), t(w)
        out = [lib.tanh(lib.matmul(tw, tx)), (tx * tx)[:2]]      # (no 0-d output: the host
        gos = [t(np.eye(4)), t(np.arange(1.0, 9.0).reshape(4, 2))]  # harness's device has none)
        jx, jy = lib.autograd.grad(out, [tx, ty], gos, is_grads_batched=True, allow_unused=True,
                                   create_graph=create_graph)
        assert jy is None and jx.shape == (4, 3)
        row = [jx.detach().numpy()]
        if create_graph:
            assert jx.requires_grad
            (jx * jx).sum().backward()
            row.append(tx.grad.numpy())
        else:
            _, zeros = lib.autograd.grad(lib.tanh(lib.matmul(tw, tx)), [tx, ty], t(np.eye(4)),
                                         is_grads_batched=True, materialize_grads=True)
            assert zeros.shape == (2,) and not zeros.numpy().any()   # (torch's: no batch axis)
        got.append(row)
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_is_grads_batched_refuses_what_torch_refuses():
    x = L.tensor(np.ones(3), requires_grad=True)
    for bad in (None, L.ones(3), L.ones(2, 2)):
        with pytest.raises(RuntimeError, match="we interpret the first dimension of each "
                                               "grad_output as the batch dimension"):
            L.autograd.grad(x * 2, x, bad, is_grads_batched=True)
    with pytest.raises(ValueError, match=r"batch sizes are \[3, 2\]"):
        L.autograd.grad([x * 2, x.sum()], x, [L.ones(3, 3), L.ones(2)], is_grads_batched=True)

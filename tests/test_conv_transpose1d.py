"""ConvTranspose1d / F.conv_transpose1d (a transposed convolution over one axis: a vocoder's
upsampling layer), the transposed convolutions' forward(x, output_size=) and the convolutions'
unbatched input (one item without its batch axis) as torch's: the same weights give torch's outputs
and gradients (to second order), state_dict and repr; output_size picks torch's output_padding, and
a size out of reach is refused with torch's ranges. float64, on the CPU, a GPU (cuDNN's
backward-data) and the host GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]
CONFIGS = [dict(), dict(stride=2, padding=1, output_padding=1),
           dict(stride=3, padding=2, dilation=2, groups=2, bias=False),
           dict(stride=(4,), padding=(3,), output_padding=(2,))]


def _pair(config, ours_on="cpu"):
    m = nn.ConvTranspose1d(4, 6, 5, **config).double()
    t = torch.nn.ConvTranspose1d(4, 6, 5, **config).double()
    t.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
    return m.to(ours_on), t


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_conv_transpose1d_module_is_torchs(config, where):
    m, t = _pair(config, where)
    assert repr(m) == repr(t)
    assert {k: v.shape for k, v in m.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in t.state_dict().items()}
    x = np.random.default_rng(0).standard_normal((3, 4, 9))
    xt, tx = L.tensor(x, device=where, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = m(xt), t(tx)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-13)
    g = np.linspace(-1, 2, ty.numel()).reshape(ty.shape)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    for (k, p), tp in zip(m.named_parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, err_msg=k)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_transpose1d_second_order_is_torchs(where):
    """d/dw of |dL/dx|^2 (a gradient penalty through the layer), against torch's."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 4, 6)), rng.standard_normal((4, 3, 3))

    def penalty(lib, fn, x, w):
        y = fn(x, w, None, 2, 1, 1)
        gx, = lib.autograd.grad((y * y * y).sum(), x, create_graph=True)
        return (gx * gx).sum()

    xs = L.tensor(x, device=where, requires_grad=True)
    ws = L.tensor(w, device=where, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    penalty(L, F.conv_transpose1d, xs, ws).backward()
    penalty(torch, torch.nn.functional.conv_transpose1d, xt, wt).backward()
    np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), rtol=1e-11)
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-11)


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_output_size_picks_torchs_output_padding(dims, where):
    stride, kernel = (3, 2)[:dims], (4, 3)[:dims]
    make = (nn.ConvTranspose1d, nn.ConvTranspose2d)[dims - 1]
    tmake = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)[dims - 1]
    m = make(2, 3, kernel, stride=stride, padding=1).double()
    t = tmake(2, 3, kernel, stride=stride, padding=1).double()
    t.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
    m.to(where)
    x = np.random.default_rng(2).standard_normal((2, 2) + (4, 5)[:dims])
    smallest = [(n - 1) * s - 2 + k for n, s, k in zip(x.shape[2:], stride, kernel)]
    for extra in range(max(stride)):
        size = [lo + min(extra, s - 1) for lo, s in zip(smallest, stride)]
        for given in (size, [2, 3] + size):                     # (or the whole shape)
            y, ty = m(L.tensor(x, device=where), output_size=given), \
                t(torch.tensor(x), output_size=given)
            assert y.shape[2:] == tuple(size) == tuple(ty.shape[2:])
            np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12,
                                       atol=1e-13)
    too_big = [lo + s for lo, s in zip(smallest, stride)]
    largest = [lo + s - 1 for lo, s in zip(smallest, stride)]
    with pytest.raises(ValueError, match=rf"requested an output size of {too_big}, but valid "
                                         rf"sizes range from {smallest} to {largest}".replace(
                                             "[", r"\[").replace("]", r"\]")):
        m(L.tensor(x, device=where), output_size=too_big)
    with pytest.raises(ValueError, match=f"output_size must have {dims} or {dims + 2} "
                                         f"elements"):
        m(L.tensor(x, device=where), output_size=[5] * (dims + 1))


def test_conv_transpose1d_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="only the 'zeros' padding mode"):
        nn.ConvTranspose1d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="conv_transpose1d: expected 3-d input and weight"):
        F.conv_transpose1d(L.ones(1, 2, 3, 3), L.ones(2, 2, 3))
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose1d(L.ones(1, 2, 3), L.ones(2, 2, 3), stride=2, output_padding=2)


UNBATCHED = {
    "Conv1d": (lambda lib: lib.nn.Conv1d(4, 6, 3, padding=1, groups=2), (4, 9)),
    "Conv1d_reflect": (lambda lib: lib.nn.Conv1d(4, 2, 3, padding=1, padding_mode="reflect"),
                       (4, 9)),
    "Conv2d": (lambda lib: lib.nn.Conv2d(4, 3, 3, stride=2, padding="valid"), (4, 7, 6)),
    "Conv2d_same": (lambda lib: lib.nn.Conv2d(4, 3, 4, padding="same"), (4, 7, 6)),
    "ConvTranspose1d": (lambda lib: lib.nn.ConvTranspose1d(4, 2, 3, stride=2), (4, 5)),
    "ConvTranspose2d": (lambda lib: lib.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1),
                        (4, 5, 3)),
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")  # (torch's)
@pytest.mark.parametrize("name", sorted(UNBATCHED))
@pytest.mark.parametrize("device", DEVICES)
def test_unbatched_input_is_a_batch_of_one_as_torchs(name, where):
    make, shape = UNBATCHED[name]
    L.manual_seed(0)
    m = make(L).double()
    t = make(torch).double()
    t.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
    m.to(where)
    x = np.random.default_rng(3).standard_normal(shape)
    xs, tx = L.tensor(x, device=where, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = m(xs), t(tx)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-13)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    if "Transpose" in name:                  # output_size of an unbatched input: (C, *sizes) too
        size = [n + 1 for n in ty.shape[1:]]
        for given in (size, [ty.shape[0]] + size):
            got = m(L.tensor(x, device=where), output_size=given)
            want = t(torch.tensor(x), output_size=given)
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12,
                                       atol=1e-13)

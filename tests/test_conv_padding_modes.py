"""torch's padding='same' / 'valid' for conv2d and conv1d: an even kernel's odd total padding
(its extra at the end, as torch pads it), dilation, channels-last (NHWC) layout; F.pad's modes
(constant, reflect, replicate, circular; negative widths crop) and the convolution modules'
padding_mode; outputs and gradients against torch on the CPU, on the NumPy path and the GPU
path; and the refusals."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
R = np.random.default_rng(3)


def grads_of(y, *xs, nhwc=False):
    """The inputs' gradients for the output gradient linspace(-1, 1) laid out as NCHW (float64
    for float64 outputs, else float32)."""
    shape = (y.shape[0], y.shape[3], y.shape[1], y.shape[2]) if nhwc else y.shape
    dtype = np.float64 if "float64" in str(y.dtype) else np.float32
    g = np.linspace(-1, 1, int(np.prod(shape)), dtype=dtype).reshape(shape)
    if nhwc:
        g = g.transpose(0, 2, 3, 1).copy()
    if isinstance(y, torch.Tensor):
        y.backward(torch.tensor(g))
        return [x.grad.numpy() for x in xs]
    y.backward(L.tensor(g, device=y.device))
    return [x.grad.numpy() for x in xs]


@pytest.mark.parametrize("kernel,dilation", [((3, 3), (1, 1)), ((4, 2), (1, 1)),
                                             ((3, 4), (2, 3)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("device", DEVICES)
def test_string_padding_is_torchs(where, kernel, dilation, padding, layout):
    x = R.standard_normal((2, 3, 11, 12)).astype(np.float32)
    w = R.standard_normal((4, 3) + kernel).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, None, 1, padding, dilation)
    want = [ty.detach().numpy()] + grads_of(ty, tx, tw)
    nhwc = (0, 2, 3, 1)
    if layout == "NHWC":
        x, w = x.transpose(nhwc).copy(), w.transpose(nhwc).copy()
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    ow = L.Tensor(L.tensor(w, device=where).data, requires_grad=True)
    y = F.conv2d(ox, ow, None, 1, padding, dilation, layout=layout)
    got = [y.numpy()] + grads_of(y, ox, ow, nhwc=layout == "NHWC")
    if layout == "NHWC":
        got = [a.transpose(0, 3, 1, 2) for a in got]
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("device", DEVICES)
def test_conv1d_same_is_torchs(where, k):
    x = R.standard_normal((2, 3, 10)).astype(np.float32)
    w = R.standard_normal((5, 3, k)).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv1d(tx, tw, None, 1, "same", 2)
    want = [ty.detach().numpy()] + grads_of(ty, tx, tw)
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    ow = L.Tensor(L.tensor(w, device=where).data, requires_grad=True)
    y = F.conv1d(ox, ow, None, 1, "same", 2)
    for a, b in zip([y.numpy()] + grads_of(y, ox, ow), want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call,pattern", [
    (lambda x, w: F.conv2d(x, w, None, 2, "same"), r"conv2d: padding='same' needs stride 1"),
    (lambda x, w: F.conv2d(x, w, None, 1, "full"), r"conv2d: padding 'full' is neither"),
    (lambda x, w: F.conv1d(x[0], w[:, :, 0], None, 2, "same"),
     r"conv1d: padding='same' needs stride 1 \(as torch\), got stride 2$"),
    (lambda x, w: nn.Conv2d(3, 4, 3, stride=2, padding="same"),
     r"Conv2d: padding='same' needs stride 1"),
    (lambda x, w: nn.Conv1d(3, 4, 3, padding="causal"), r"Conv1d: padding 'causal' is neither"),
])
def test_a_padding_torch_refuses_is_refused_by_name(call, pattern):
    x = L.tensor(np.zeros((1, 3, 5, 5), np.float32))
    w = L.tensor(np.zeros((4, 3, 3, 3), np.float32))
    with pytest.raises(ValueError, match=pattern):
        call(x, w)


def test_a_transposed_convolution_takes_no_padding_string():
    with pytest.raises(TypeError, match="expected an int or a pair of ints, got 'same'"):
        nn.ConvTranspose2d(3, 4, 3, padding="same")


@pytest.mark.parametrize("widths", [(1, -2), (-1, 0, 2, -3), (-2, -2, 0, 1, 1, 0), (0, -5)])
@pytest.mark.parametrize("device", DEVICES)
def test_a_negative_pad_crops_as_torchs(where, widths):
    x = R.standard_normal((2, 4, 5)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.pad(tx, widths, value=0.5)
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    y = F.pad(ox, widths, value=0.5)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    if y.size:
        np.testing.assert_array_equal(grads_of(y, ox)[0], grads_of(ty, tx)[0])


def test_a_pad_cropping_past_the_size_is_refused():
    with pytest.raises(ValueError, match=r"pad: \(-3, -3\) crops more than axis 1's size 5 "
                                         r"\(3 before, 3 after\)"):
        F.pad(L.tensor(np.zeros((2, 5), np.float32)), (-3, -3))
    with pytest.raises(ValueError, match=r"crops more than axis 1's size 5 \(0 before, 6 after"):
        F.pad(L.tensor(np.zeros((2, 5), np.float32)), (1, -6))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,widths", [((2, 5), (2, 3)), ((2, 3, 5), (4, 1)),
                                          ((2, 3, 4, 5), (1, 2, 3, 0)),
                                          ((1, 2, 3, 4, 5), (1, 1, 2, 0, 2, 1)),
                                          ((2, 3, 6), (-2, 3)), ((2, 3, 4, 5), (2, -1, 0, 3))])
@pytest.mark.parametrize("device", DEVICES)
def test_padding_modes_are_torchs(where, mode, shape, widths):
    """Values and gradients (a copied element's gradient added to its source) in float64."""
    x = R.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.pad(tx, widths, mode=mode)
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    y = F.pad(ox, widths, mode=mode)
    assert y.shape == tuple(ty.shape) and y.dtype == np.float64
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(grads_of(y, ox)[0], grads_of(ty, tx)[0], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("device", DEVICES)
def test_a_channels_last_tensor_is_padded_channels_last(where):
    x = R.standard_normal((2, 3, 4, 5)).astype(np.float32)
    nhwc = L.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), device=where)
    ox = nhwc.permute(0, 3, 1, 2)                      # NCHW-shaped, stored NHWC
    assert ox.data.transpose(0, 2, 3, 1).flags.c_contiguous
    for mode in ("constant", "reflect"):
        y = F.pad(ox, (1, 2, 2, 1), mode=mode)
        want = torch.nn.functional.pad(torch.tensor(x), (1, 2, 2, 1), mode=mode)
        np.testing.assert_array_equal(y.numpy(), want.numpy())
        assert y.data.transpose(0, 2, 3, 1).flags.c_contiguous     # (stored NHWC too)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding,kernel,dilation", [(1, 3, 1), ((2, 1), 3, 1), ("same", 4, 1),
                                                     ("same", (3, 2), (2, 1)), ("valid", 3, 1)])
@pytest.mark.parametrize("device", DEVICES)
def test_conv_padding_mode_is_torchs(where, mode, padding, kernel, dilation):
    torch.manual_seed(0)
    tm = torch.nn.Conv2d(3, 4, kernel, padding=padding, dilation=dilation, padding_mode=mode,
                         dtype=torch.float64)
    m = nn.Conv2d(3, 4, kernel, padding=padding, dilation=dilation, padding_mode=mode)
    m.to(dtype=np.float64)
    m.load_state_dict(tm.state_dict())
    m.to(where)
    x = R.standard_normal((2, 3, 7, 6))
    tx = torch.tensor(x, requires_grad=True)
    ox = L.Tensor(L.tensor(x, device=where).data, requires_grad=True)
    y, ty = m(ox), tm(tx)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for a, b in zip(grads_of(y, ox, m.weight), grads_of(ty, tx, tm.weight)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert repr(m) == repr(tm)                             # (padding_mode unquoted, as torch)


def test_conv1d_padding_mode_is_torchs():
    torch.manual_seed(1)
    tm = torch.nn.Conv1d(2, 3, 3, padding=2, padding_mode="circular", dtype=torch.float64)
    m = nn.Conv1d(2, 3, 3, padding=2, padding_mode="circular")
    m.to(dtype=np.float64)
    m.load_state_dict(tm.state_dict())
    x = R.standard_normal((2, 2, 5))
    np.testing.assert_allclose(m(L.tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(),
                               rtol=1e-12)


def test_bad_padding_modes_are_torchs_errors():
    x = L.tensor(np.zeros((1, 3, 4), np.float32))
    for call, error, pattern in (
            (lambda: F.pad(x, (1, 1), mode="bogus"), NotImplementedError,
             "unrecognised padding mode 'bogus'"),
            (lambda: F.pad(x, (1, 1), mode="reflect", value=1.0), RuntimeError,
             "doesn't take in value argument"),
            (lambda: F.pad(x, (4, 0), mode="reflect"), RuntimeError,
             r"reflect padding \(4, 0\) of axis 2 must be less than its size 4"),
            (lambda: F.pad(x, (5, 0), mode="circular"), RuntimeError, "more than once"),
            (lambda: F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate"), NotImplementedError,
             "padding size 6 is not supported for 3D input"),
            (lambda: nn.Conv2d(1, 1, 3, padding_mode="bogus"), ValueError,
             "padding_mode must be one of"),
            (lambda: nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect"), ValueError,
             "only the 'zeros' padding mode")):
        with pytest.raises(error, match=pattern):
            call()
    assert F.pad(x, (1, 1), mode="reflect", value=0.0).shape == (1, 3, 6)   # (torch takes 0)

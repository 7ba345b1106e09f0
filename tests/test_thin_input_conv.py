"""A channels-last convolution whose input has fewer channels than one 16-byte vector (C = 1,
DCGAN on MNIST; C = 3, RGB) runs on the GPU path as explicit im2col + one cuBLASLt product per
direction (layers.ops.conv.thin_input / _as_im2col_gemm), not as cuDNN's call with its layout
conversions. Checked against PyTorch CPU in float64 -- every direction, with padding, strides,
dilation, and a transposed convolution's output padding -- on the GPU path run on the host
(tests/host_kernels.py: the im2col / col2im kernels compiled for the CPU) and on a GPU; the
calls made are counted, and with THIN_INPUT_AS_GEMM off the same problems go to cuDNN."""
import collections

import numpy as np
import pytest

import layers as L
from layers import F, kernels
from layers.backend import to_channels_last
from layers.ops import conv as ops_conv

torch = pytest.importorskip("torch")

# name: (ours, torch's, x shape, w shape)
CASES = {
    # netD's first convolution, smaller: 1 channel in, 4 x 4, stride 2, padding 1
    "dcgan_first_conv": (lambda x, w: F.conv2d(x, w, stride=2, padding=1),
                         lambda x, w: torch.conv2d(x, w, stride=2, padding=1),
                         (3, 1, 12, 10), (16, 1, 4, 4)),
    "rgb_dilated": (lambda x, w: F.conv2d(x, w, padding=(2, 1), dilation=(2, 3)),
                    lambda x, w: torch.conv2d(x, w, padding=(2, 1), dilation=(2, 3)),
                    (2, 3, 7, 9), (27, 3, 3, 3)),
    "stride3_no_padding": (lambda x, w: F.conv2d(x, w, stride=(3, 2)),
                           lambda x, w: torch.conv2d(x, w, stride=(3, 2)),
                           (2, 2, 11, 8), (10, 2, 2, 2)),
    # netG's last transposed convolution, smaller: to 1 channel, 4 x 4, stride 2, padding 1
    "dcgan_last_conv_transpose": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
                                  lambda x, w: torch.conv_transpose2d(x, w, stride=2, padding=1),
                                  (3, 16, 5, 6), (16, 1, 4, 4)),
    "conv_transpose_output_padding": (
        lambda x, w: F.conv_transpose2d(x, w, stride=3, padding=1, output_padding=2),
        lambda x, w: torch.conv_transpose2d(x, w, stride=3, padding=1, output_padding=2),
        (2, 30, 4, 3), (30, 3, 3, 3)),
}


@pytest.fixture(params=["host", pytest.param(0, marks=pytest.mark.gpu)])
def device(request):
    return request.param


@pytest.fixture
def calls(where, monkeypatch):
    """The products, im2col / col2im kernels and cuDNN convolution calls made on device 0."""
    from cudnnlite import blas
    from cudnnlite import conv as cconv
    calls = collections.Counter()

    def counted(name, module, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            if name == "matmul":
                calls[f"allow_tf32={kwargs.get('allow_tf32')}"] += 1
            return fn(*args, **kwargs)
        monkeypatch.setattr(module, name, call)
    counted("matmul", blas, blas.matmul)
    for name in ("im2col_nhwc", "col2im_nhwc"):
        counted(name, kernels, getattr(kernels, name))
    for name in ("forward", "backward_data", "backward_filter"):
        counted(name, cconv, getattr(cconv, name))
    return calls


def _run(name, device, channels_last=True, dtype=np.float32):
    """Forward and backward of CASES[name] on `device` against PyTorch in float64 on the same
    (dtype-rounded) values. The tolerance: float32 sums of at most 27 products, or bfloat16
    results (8 significant bits) rounded twice at most, against the largest entry."""
    ours, theirs, xs, ws = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    rounded = lambda v: v.astype(dtype).astype(np.float64)         # noqa: E731
    a, b = rounded(rng.standard_normal(xs)), rounded(rng.standard_normal(ws))
    gy_shape = tuple(theirs(torch.tensor(a), torch.tensor(b)).shape)
    g = rounded(rng.standard_normal(gy_shape))
    lay = to_channels_last if channels_last else (lambda v: v)
    x = L.tensor(lay(a.astype(dtype)), device=device, requires_grad=True)
    w = L.tensor(lay(b.astype(dtype)), device=device, requires_grad=True)
    y = ours(x, w)
    y.backward(L.tensor(lay(g.astype(dtype)), device=device))
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = theirs(tx, tw)
    ty.backward(torch.tensor(g))
    rel = 1e-5 if dtype == np.float32 else 2 * 2.0 ** -8
    for what, got, want in (("y", y, ty), ("gx", x.grad, tx.grad), ("gW", w.grad, tw.grad)):
        want = want.detach().numpy()
        assert got.shape == want.shape, (what, got.shape, want.shape)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=0,
                                   atol=rel * max(1.0, np.abs(want).max()), err_msg=what)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_thin_input_convolution_is_im2col_and_one_product_per_direction(name, calls):
    from cudnnlite import conv
    with conv.using(allow_tf32=False):
        _run(name, 0)
    assert calls["matmul"] == 3 and calls["allow_tf32=False"] == 3, calls
    # forward and backward-filter read the columns of the convolution's input; backward-data
    # folds them back (a transposed convolution's forward is the backward-data)
    assert calls["im2col_nhwc"] == 2 and calls["col2im_nhwc"] == 1, calls
    assert not calls["forward"] + calls["backward_data"] + calls["backward_filter"], calls


@pytest.mark.parametrize("name", ["dcgan_first_conv", "dcgan_last_conv_transpose"])
def test_bfloat16_thin_input_convolutions_round_as_bfloat16(name, calls):
    _run(name, 0, dtype=L.backend.bfloat16)
    assert calls["matmul"] == 3 and calls["col2im_nhwc"] == 1, calls


@pytest.mark.parametrize("name", ["dcgan_first_conv", "dcgan_last_conv_transpose"])
def test_with_the_route_off_or_in_nchw_the_same_problems_go_to_cudnn(name, calls, monkeypatch):
    from cudnnlite import conv
    with conv.using(allow_tf32=False):
        _run(name, 0, channels_last=False)
    assert calls["matmul"] == 0 and calls["forward"] + calls["backward_data"] + \
        calls["backward_filter"] == 3, calls
    monkeypatch.setattr(ops_conv, "THIN_INPUT_AS_GEMM", False)
    with conv.using(allow_tf32=False):
        _run(name, 0)
    assert calls["matmul"] == 0 and calls["forward"] + calls["backward_data"] + \
        calls["backward_filter"] == 6, calls


def test_the_products_use_tf32_exactly_when_the_convolutions_may(calls):
    from cudnnlite import conv
    x = L.tensor(to_channels_last(np.ones((2, 1, 8, 8), np.float32)), device=0)
    w = L.tensor(to_channels_last(np.ones((16, 1, 4, 4), np.float32)), device=0)
    assert conv.Settings().allow_tf32           # (the default; conftest.where turns it off)
    with conv.using(allow_tf32=True):
        F.conv2d(x, w)
    with conv.using(allow_tf32=False):
        F.conv2d(x, w)
    assert calls["allow_tf32=True"] == 1 and calls["allow_tf32=False"] == 1, calls


@pytest.mark.parametrize("x_shape,w_shape,layout,groups,itemsize,expected", [
    ((2, 64, 64, 1), (64, 4, 4, 1), "NHWC", 1, 4, True),       # DCGAN, float32
    ((2, 64, 64, 3), (64, 4, 4, 3), "NHWC", 1, 4, True),       # RGB: 12 bytes of channels
    ((2, 64, 64, 4), (64, 4, 4, 4), "NHWC", 1, 4, False),      # 16 bytes: cuDNN reads it as is
    ((2, 64, 64, 4), (64, 4, 4, 4), "NHWC", 1, 2, True),       # 4 bfloat16s: 8 bytes
    ((2, 64, 64, 1), (64, 4, 4, 1), "NHWC", 1, 8, True),       # one float64: 8 bytes
    ((2, 64, 64, 2), (64, 4, 4, 2), "NHWC", 1, 8, False),      # two float64s: 16 bytes
    ((2, 64, 64, 1), (8, 4, 4, 1), "NHWC", 1, 4, False),       # window 16 > K 8
    ((2, 1, 64, 64), (64, 1, 4, 4), "NCHW", 1, 4, False),      # NCHW: cuDNN's own kernels
    ((2, 64, 64, 2), (64, 4, 4, 1), "NHWC", 2, 4, False),      # grouped
    ((0, 64, 64, 1), (64, 4, 4, 1), "NHWC", 1, 4, False),      # empty batch
])
def test_which_problems_are_thin_input(x_shape, w_shape, layout, groups, itemsize, expected):
    assert ops_conv.thin_input(x_shape, w_shape, layout, groups, itemsize) is expected



@pytest.mark.gpu
@pytest.mark.parametrize("transposed", [False, True])
def test_dcgan_one_channel_layers_at_full_size_on_the_gpu(transposed, monkeypatch):
    """netD's first convolution and netG's last transposed one, batch 128 at 64 x 64, as
    train.dcgan runs them (channels-last, float32, TF32 off here), against PyTorch CPU float64."""
    from cudnnlite import conv
    rng = np.random.default_rng(11)
    a = rng.standard_normal((128, 64, 32, 32) if transposed else (128, 1, 64, 64))
    b = rng.standard_normal((64, 1, 4, 4)) * 0.02
    ours = (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1)) if transposed else \
        (lambda x, w: F.conv2d(x, w, stride=2, padding=1))
    theirs = (lambda x, w: torch.conv_transpose2d(x, w, stride=2, padding=1)) if transposed \
        else (lambda x, w: torch.conv2d(x, w, stride=2, padding=1))
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = theirs(tx, tw)
    g = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(g))
    x = L.tensor(to_channels_last(a.astype(np.float32)), device=0, requires_grad=True)
    w = L.tensor(to_channels_last(b.astype(np.float32)), device=0, requires_grad=True)
    with conv.using(allow_tf32=False):
        y = ours(x, w)
        y.backward(L.tensor(to_channels_last(g.astype(np.float32)), device=0))
    for what, got, want in (("y", y, ty), ("gx", x.grad, tx.grad), ("gW", w.grad, tw.grad)):
        want = want.detach().numpy()
        # float32 sums of 16 (y), 256 (gx) and 131,072 (gW) products, rounding errors that
        # grow as the square root of the count: 1e-5 of the largest entry holds all three
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5 * np.abs(want).max(),
                                   err_msg=what)


@pytest.mark.parametrize("view", ["rows", "columns", "batch"])
def test_a_strided_channels_last_view_through_the_thin_input_route(view, calls):
    """The input a view of a larger channels-last array (every other row, a column crop, a batch
    slice: strides the route's im2col must follow, or a copy it must make) against PyTorch CPU
    in float64, forward and backward; the route, not cuDNN, ran it."""
    from cudnnlite import conv
    rng = np.random.default_rng(5)
    big = rng.standard_normal((3, 1, 22, 12)).astype(np.float32)
    cut = {"rows": (slice(None), slice(None), slice(None, None, 2), slice(None)),
           "columns": (slice(None), slice(None), slice(0, 11), slice(1, 11)),
           "batch": (slice(1, 3), slice(None), slice(0, 11), slice(None))}[view]
    b = rng.standard_normal((16, 1, 4, 4)).astype(np.float32)
    xb = L.tensor(to_channels_last(big), device=0)
    x = xb[cut]
    x.requires_grad_()
    assert not x.data.flags.c_contiguous and not L.backend.is_channels_last(x.data) or \
        view == "batch"
    w = L.tensor(to_channels_last(b), device=0, requires_grad=True)
    with conv.using(allow_tf32=False):
        y = F.conv2d(x, w, stride=2, padding=1)
        g = rng.standard_normal(y.shape).astype(np.float32)
        y.backward(L.tensor(to_channels_last(g), device=0))
    tx = torch.tensor(big[cut].astype(np.float64), requires_grad=True)
    tw = torch.tensor(b.astype(np.float64), requires_grad=True)
    ty = torch.conv2d(tx, tw, stride=2, padding=1)
    ty.backward(torch.tensor(g.astype(np.float64)))
    for what, got, want in (("y", y, ty), ("gx", x.grad, tx.grad), ("gW", w.grad, tw.grad)):
        want = want.detach().numpy()
        np.testing.assert_allclose(got.numpy(), want, rtol=0,
                                   atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=what)
    assert calls["matmul"] == 3 and calls["im2col_nhwc"] == 2, calls

"""A convolution whose filter covers its whole input (R x S = H x W, no padding or dilation, one
group) is a matrix product, and the layers' GPU path runs it as one cuBLASLt call per direction
(layers.ops.conv.whole_input / on_gpu): DCGAN's last discriminator convolution and its
generator's first transposed one. Checked against PyTorch CPU in float64, in both layouts, on
the GPU path run on the host (tests/host_kernels.py) and on a GPU; the calls made are counted,
and with WHOLE_INPUT_AS_GEMM off the same problems go to cuDNN."""
import collections

import numpy as np
import pytest

import layers as L
from layers import F
from layers.backend import to_channels_last
from layers.ops import conv as ops_conv

torch = pytest.importorskip("torch")

# name: (ours, torch's, x shape, w shape)
CASES = {
    "conv2d": (lambda x, w: F.conv2d(x, w), lambda x, w: torch.conv2d(x, w),
               (6, 8, 4, 4), (3, 8, 4, 4)),
    "conv2d_stride2": (lambda x, w: F.conv2d(x, w, stride=2),
                       lambda x, w: torch.conv2d(x, w, stride=2), (6, 8, 4, 4), (3, 8, 4, 4)),
    "conv2d_one_output_channel": (lambda x, w: F.conv2d(x, w), lambda x, w: torch.conv2d(x, w),
                                  (5, 16, 4, 4), (1, 16, 4, 4)),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w),
                         lambda x, w: torch.conv_transpose2d(x, w), (6, 10, 1, 1), (10, 7, 4, 4)),
}


@pytest.fixture(params=["host", pytest.param(0, marks=pytest.mark.gpu)])
def device(request):
    return request.param


@pytest.fixture
def calls(where, monkeypatch):
    """The products and cuDNN convolution calls made on device 0 -- the GPU path run on the
    host ("host", conftest.where) or a GPU."""
    from cudnnlite import blas
    from cudnnlite import conv as cconv
    calls = collections.Counter()

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            if name == "matmul":
                calls[f"allow_tf32={kwargs.get('allow_tf32')}"] += 1
            return fn(*args, **kwargs)
        return call
    monkeypatch.setattr(blas, "matmul", counted("matmul", blas.matmul))
    for name in ("forward", "backward_data", "backward_filter"):
        monkeypatch.setattr(cconv, name, counted(name, getattr(cconv, name)))
    return calls


def _run(name, device, channels_last):
    ours, theirs, xs, ws = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    a, b = rng.standard_normal(xs), rng.standard_normal(ws)
    gy_shape = tuple(theirs(torch.tensor(a), torch.tensor(b)).shape)
    g = rng.standard_normal(gy_shape)
    lay = to_channels_last if channels_last else (lambda v: v)
    x = L.tensor(lay(a.astype(np.float32)), device=device, requires_grad=True)
    w = L.tensor(lay(b.astype(np.float32)), device=device, requires_grad=True)
    y = ours(x, w)
    y.backward(L.tensor(lay(g.astype(np.float32)), device=device))
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = theirs(tx, tw)
    ty.backward(torch.tensor(g))
    for got, want in ((y, ty), (x.grad, tx.grad), (w.grad, tw.grad)):
        want = want.detach().numpy()
        # float32 sums of at most 128 products, against the largest entry
        np.testing.assert_allclose(got.numpy(), want, rtol=0,
                                   atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_whole_input_convolution_is_one_product_per_direction(name, channels_last, calls):
    from cudnnlite import conv
    with conv.using(allow_tf32=False):
        _run(name, 0, channels_last)
    assert calls["matmul"] == 3 and calls["allow_tf32=False"] == 3, calls
    assert not calls["forward"] + calls["backward_data"] + calls["backward_filter"], calls


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_the_gemm_route_off_the_same_problems_go_to_cudnn(name, calls, monkeypatch):
    from cudnnlite import conv
    monkeypatch.setattr(ops_conv, "WHOLE_INPUT_AS_GEMM", False)
    with conv.using(allow_tf32=False):
        _run(name, 0, False)
    assert calls["matmul"] == 0, calls
    assert calls["forward"] + calls["backward_data"] + calls["backward_filter"] == 3, calls


def test_the_products_use_tf32_exactly_when_the_convolutions_may(calls):
    """float32: cuDNN's convolutions may use TF32 by default (conv.settings.allow_tf32, as
    PyTorch's cudnn.allow_tf32); the product standing in for one follows that setting, not
    cuBLAS's own (off by default)."""
    from cudnnlite import conv
    x = L.tensor(np.ones((2, 3, 4, 4), np.float32), device=0)
    w = L.tensor(np.ones((5, 3, 4, 4), np.float32), device=0)
    assert conv.Settings().allow_tf32           # (the default; conftest.where turns it off)
    with conv.using(allow_tf32=True):
        F.conv2d(x, w)
    with conv.using(allow_tf32=False):
        F.conv2d(x, w)
    assert calls["allow_tf32=True"] == 1 and calls["allow_tf32=False"] == 1, calls


@pytest.mark.parametrize("x_shape,w_shape,pad,dilation,groups,expected", [
    ((2, 8, 4, 4), (3, 8, 4, 4), (0, 0), (1, 1), 1, True),      # NCHW
    ((2, 4, 4, 8), (3, 4, 4, 8), (0, 0), (1, 1), 1, True),      # NHWC: (H, W, C) = (R, S, C)
    ((2, 8, 5, 5), (3, 8, 4, 4), (0, 0), (1, 1), 1, False),     # 1 x 1 out, stride 2: a corner
    ((2, 8, 2, 2), (3, 8, 4, 4), (1, 1), (1, 1), 1, False),     # padded
    ((2, 8, 4, 4), (3, 8, 2, 2), (0, 0), (3, 3), 1, False),     # dilated
    ((2, 8, 4, 4), (4, 4, 4, 4), (0, 0), (1, 1), 2, False),     # grouped
    ((2, 4, 4, 8), (3, 8, 4, 4), (0, 0), (1, 1), 1, False),     # NHWC x, NCHW-ordered filter
    ((2, 6, 4, 4), (3, 8, 4, 4), (0, 0), (1, 1), 1, False),     # channels differ
])
def test_which_problems_are_whole_input(x_shape, w_shape, pad, dilation, groups, expected):
    assert ops_conv.whole_input(x_shape, w_shape, pad, dilation, groups) is expected


def test_a_one_by_one_output_that_misses_part_of_the_input_stays_on_cudnn(calls):
    """5 x 5 input, 4 x 4 filter, stride 2: one output position, reading rows and columns 0-3
    only -- not a product over the whole input."""
    from cudnnlite import conv
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((4, 3, 4, 4))
    x = L.tensor(a.astype(np.float32), device=0, requires_grad=True)
    with conv.using(allow_tf32=False):
        y = F.conv2d(x, L.tensor(b.astype(np.float32), device=0), stride=2)
    want = torch.conv2d(torch.tensor(a), torch.tensor(b), stride=2).numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert calls["matmul"] == 0 and calls["forward"] == 1, calls


def test_a_product_cublaslt_refuses_goes_to_cudnn(calls, monkeypatch):
    """Where cuBLASLt has no algorithm for the product (blas.NotSupported), the convolution
    still runs, through cuDNN."""
    from cudnnlite import blas, conv

    def refuse(*args, **kwargs):
        calls["refused"] += 1
        raise blas.NotSupported("cublasLtMatmulAlgoGetHeuristic", {}, "no algorithm (test)")
    monkeypatch.setattr(blas, "matmul", refuse)
    with conv.using(allow_tf32=False):
        _run("conv2d", 0, True)
    assert calls["refused"] == 3 and calls["forward"] + calls["backward_data"] + \
        calls["backward_filter"] == 3, calls

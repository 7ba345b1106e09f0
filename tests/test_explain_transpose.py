"""tools.explain_transpose against Keras' Conv2DTranspose (Keras 3, torch backend) and PyTorch's
ConvTranspose2d and backward-data (torch.nn.grad.conv2d_input): output shapes, the cuDNN problem it
claims (pad, dx, window) and values, for the forum case and a spread of other set-ups."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

import cudnnlite as cl  # noqa: E402
from reference import rel_err  # noqa: E402
from tools import explain_transpose as ex  # noqa: E402

if keras.backend.backend() != "torch":
    pytest.skip("these tests drive Keras on its torch backend", allow_module_level=True)

TOL = {"float64": 1e-12, "float32": 1e-5}   # ||y - ref|| / ||ref||, per dtype of the reference

# (Conv2DTranspose arguments, the cuDNN pad and dx spatial size worked out by hand)
KERAS = [
    (ex.FORUM, (0, 0), (16, 16)),
    (dict(input_shape=(5, 4, 3), filters=4, kernel_size=3, strides=2, padding="same"),
     (0, 0), (11, 9)),                       # 'same' pads (0, 1): full result, cropped
    (dict(input_shape=(5, 4, 3), filters=4, kernel_size=3, strides=1, padding="same"),
     (1, 1), (5, 4)),
    (dict(input_shape=(5, 4, 3), filters=2, kernel_size=2, strides=1, padding="same"),
     (0, 0), (6, 5)),                        # (0, 1) at stride 1: cropped
    (dict(input_shape=(4, 5, 3), filters=4, kernel_size=4, strides=2, padding="same"),
     (1, 1), (8, 10)),
    (dict(input_shape=(4, 5, 3), filters=4, kernel_size=4, strides=2, padding="valid"),
     (0, 0), (10, 12)),
    (dict(input_shape=(4, 5, 3), filters=4, kernel_size=3, strides=2, padding="valid",
          output_padding=1), (0, 0), (10, 12)),
    (dict(input_shape=(4, 5, 3), filters=4, kernel_size=3, strides=3, padding="same",
          output_padding=1), (0, 0), (12, 15)),
    (dict(input_shape=(5, 5, 2), filters=3, kernel_size=3, strides=1, padding="same",
          dilation_rate=2), (2, 2), (5, 5)),
    (dict(input_shape=(3, 4, 5), filters=2, kernel_size=3, strides=2, padding="valid",
          data_format="channels_first"), (0, 0), (9, 11)),
    (dict(input_shape=(3, 4, 5), filters=2, kernel_size=(2, 3), strides=(2, 1), padding="same",
          data_format="channels_first"), (0, 1), (8, 5)),
    (dict(input_shape=(4, 4, 2), filters=3, kernel_size=1, strides=3, padding="same"),
     (0, 0), (12, 12)),                      # kernel < stride: zeros past the full result
    (dict(input_shape=(4, 4, 2), filters=3, kernel_size=2, strides=3, padding="valid"),
     (0, 0), (12, 12)),                      # output_padding defaults to stride - kernel
]

TORCH = [
    (dict(in_channels=4, out_channels=6, kernel_size=3, input_size=(5, 5), stride=2, padding=1,
          output_padding=1), (1, 1), (10, 10)),
    (dict(in_channels=4, out_channels=6, kernel_size=3, input_size=(5, 4), padding=1, groups=2),
     (1, 1), (5, 4)),
    (dict(in_channels=3, out_channels=2, kernel_size=3, input_size=(6, 6), padding=2, dilation=2),
     (2, 2), (6, 6)),                        # flipped-conv pad d(k-1) - p = 2, not (k-1-p)d = 0
    (dict(in_channels=3, out_channels=2, kernel_size=3, input_size=(6, 5), output_padding=1,
          dilation=2), (0, 0), (10, 9)),     # output_padding >= stride: cropped, zero-extended
    (dict(in_channels=4, out_channels=4, kernel_size=(2, 4), input_size=(3, 5), stride=(2, 1),
          padding=(0, 1), groups=4, layout="NHWC"), (0, 1), (6, 6)),
    (dict(in_channels=2, out_channels=3, kernel_size=2, input_size=(5, 5), padding=1),
     (1, 1), (4, 4)),
    (dict(in_channels=2, out_channels=3, kernel_size=3, input_size=(7, 7), padding=3),
     (3, 3), (3, 3)),                        # padding > k-1: the flipped conv crops x
    (dict(in_channels=6, out_channels=4, kernel_size=3, input_size=(4, 4), stride=2, padding=1,
          output_padding=1, groups=2, layout="NHWC"), (1, 1), (8, 8)),
    (dict(in_channels=2, out_channels=2, kernel_size=3, input_size=(4, 4), stride=3, padding=2,
          dilation=2), (2, 2), (10, 10)),
]


def _nchw(a, t):
    return np.moveaxis(a, -1, 1) if t.style == "keras" and t.layout == "NHWC" else a


def _window(a, begin, out):
    """a[..., begin:begin + out] per spatial dim, zeros past a's end."""
    y = np.zeros(a.shape[:2] + tuple(out))
    part = a[:, :, begin[0]:begin[0] + out[0], begin[1]:begin[1] + out[1]]
    y[:, :, :part.shape[2], :part.shape[3]] = part
    return y


def _cudnn_problem_by_torch(e):
    """The cuDNN problem the explanation claims, run by PyTorch: the forward conv of dx's shape with
    pad gives dy's shape, backward-data (conv2d_input) into dx, then the window."""
    t = e.t
    x = torch.tensor(_nchw(e.x, t))
    W = torch.tensor(ex.to_pytorch_weight(e.kernel, t).copy())
    dx_dims = (t.N, t.Cout, *t.dx_size)
    conv = dict(stride=t.stride, padding=t.cudnn_pad, dilation=t.dilation, groups=t.groups)
    assert torch.nn.functional.conv2d(torch.zeros(dx_dims, dtype=x.dtype), W, **conv).shape \
        == x.shape
    dx = torch.nn.grad.conv2d_input(dx_dims, W, x, **conv).numpy()
    return _window(dx, (0, 0) if t.direct else t.begin, t.out)


def _flat(text):
    """The text with line wrapping undone."""
    return " ".join(text.split())


def _keras(kw, x, kernel, dtype):
    layer = keras.layers.Conv2DTranspose(**{k: v for k, v in kw.items() if k != "input_shape"},
                                         use_bias=False, dtype=dtype)
    layer.build(x.shape)
    layer.set_weights([kernel.astype(dtype)])
    return layer(torch.tensor(x.astype(dtype))).detach().numpy()


def _check_explanation(e, pad, dx):
    t = e.t
    assert (t.cudnn_pad, t.dx_size) == (pad, dx)
    assert e.cudnn_dy == (t.N, t.Cin, *t.in_size)               # cuDNN's forward output = dy
    assert rel_err(_cudnn_problem_by_torch(e), _nchw(e.y, t)) < TOL["float64"]
    assert all(c.ok for c in e.checks), e.checks
    assert e.ok


@pytest.mark.parametrize("kw,pad,dx", KERAS)
def test_keras_cases(kw, pad, dx):
    e = ex.explain(ex.keras(**kw))
    y = _keras(kw, e.x, e.kernel, "float64")
    assert e.y.shape == y.shape
    assert rel_err(e.y, y) < TOL["float64"]
    _check_explanation(e, pad, dx)


@pytest.mark.parametrize("kw,pad,dx", TORCH)
def test_torch_cases(kw, pad, dx):
    e = ex.explain(ex.torch(**kw))
    t = e.t
    y = torch.nn.functional.conv_transpose2d(
        torch.tensor(e.x), torch.tensor(e.kernel), stride=t.stride, padding=t.padding,
        output_padding=t.output_padding, groups=t.groups, dilation=t.dilation).numpy()
    assert e.y.shape == y.shape
    assert rel_err(e.y, y) < TOL["float64"]
    _check_explanation(e, pad, dx)


def test_forum_case_against_float32_keras():
    e = ex.explain(ex.keras(**ex.FORUM))
    assert e.y.shape == (2, 16, 16, 128)
    assert rel_err(e.y, _keras(ex.FORUM, e.x, e.kernel, "float32")) < TOL["float32"]


def test_forum_case_descriptors_read_back():
    d = ex.explain(ex.keras(**ex.FORUM)).descriptors
    assert d.conv.setup() == ((0, 0), (2, 2), (1, 1), cl.ConvMode.CROSS_CORRELATION,
                              cl.DataType.FLOAT, 1, cl.MathType.DEFAULT)
    assert d.w.setup() == (cl.DataType.FLOAT, cl.TensorFormat.NHWC, (256, 128, 2, 2))
    assert d.y.setup() == (cl.DataType.FLOAT, (2, 256, 8, 8), (16384, 1, 2048, 256))     # dy
    assert d.x.setup() == (cl.DataType.FLOAT, (2, 128, 16, 16), (32768, 1, 2048, 128))  # dx


def test_keras_kernel_to_krsc_is_a_transpose():
    t = ex.keras(**ex.FORUM)
    kernel = np.arange(2 * 2 * 128 * 256).reshape(2, 2, 128, 256)    # (R, S, Cout, Cin)
    W = ex.cudnn_filter(kernel, t)                                      # (K=Cin, R, S, C=Cout)
    assert W.shape == (256, 2, 2, 128) and W.flags.c_contiguous
    assert W[7, 1, 0, 5] == kernel[1, 0, 5, 7]


UNIT_STRIDE = [("keras", kw) for kw, _, _ in KERAS if kw.get("strides", 1) == 1] + \
              [("torch", kw) for kw, _, _ in TORCH if kw.get("stride", 1) == 1]


@pytest.mark.parametrize("style,kw", UNIT_STRIDE)
def test_unit_stride_is_a_forward_conv_with_flipped_swapped_kernel(style, kw):
    e = ex.explain(getattr(ex, style)(**kw))
    t = e.t
    u = e.unit_stride_forward
    if u is None:          # pads asymmetric or negative: no single cuDNN pad, says the text
        assert "not the same pad >= 0 on both sides" in _flat(ex.render(e))
        return
    W = ex.to_pytorch_weight(e.kernel, t)                  # (Cin, Cout/G, R, S)
    G = t.groups
    Wf = np.concatenate([np.flip(Wg.transpose(1, 0, 2, 3), (2, 3))
                         for Wg in np.split(W, G)])        # (Cout, Cin/G, R, S), taps reversed
    y = torch.nn.functional.conv2d(torch.tensor(_nchw(e.x, t)), torch.tensor(Wf.copy()),
                                   padding=u.pad, dilation=t.dilation, groups=G).numpy()
    assert e.unit_stride_dims == y.shape
    assert rel_err(y, _nchw(e.y, t)) < TOL["float64"]


def test_forum_case_text(capsys):
    assert ex.main([]) == 0
    text = _flat(capsys.readouterr().out)
    for line in ["-> y of shape (2, 16, 16, 128); cuDNN layout NHWC",
                 "W = np.ascontiguousarray(kernel.transpose(3, 0, 1, 2))",
                 "FilterDescriptor(FLOAT, NHWC, dims=(256, 128, 2, 2))",
                 "cudnnGetConvolutionNdForwardOutputDim(conv, dx, W) = (2, 256, 8, 8) = dy's dims",
                 "no crop"]:
        assert line in text
    for step in "abcdef":
        assert f" ({step}) " in text


def test_text_of_a_cropped_case():
    e = ex.explain(ex.keras(**KERAS[1][0]))
    text = _flat(ex.render(e))
    assert "y = dx[:, 0:10, 0:8, :]" in text
    assert "Here it does not (H (0, 1), W (0, 1))" in text


def test_torch_cli(capsys):
    argv = ["--torch", "--input", "5", "5", "--in-channels", "4", "--out-channels", "6",
            "--kernel", "3", "--stride", "2", "--padding", "1", "--output-padding", "1"]
    assert ex.main(argv) == 0
    assert "Here it does: pad (1, 1), dx = y (2, 6, 10, 10), no crop." \
        in _flat(capsys.readouterr().out)


@pytest.mark.parametrize("argv,message", [
    (["--torch", "--input", "5", "5"], "--torch needs --input H W"),
    (["--keras", "--input", "8", "8", "--filters", "2", "--kernel", "3"],
     "--keras needs --input H W C"),
    (["--torch", "--input", "5", "5", "--in-channels", "2", "--out-channels", "2", "--kernel", "3",
      "--padding", "same"], "--padding takes ints, got same"),
    (["--keras", "--input", "8", "8", "3", "--filters", "2", "--kernel", "3", "--padding", "full"],
     "padding must be 'same' or 'valid', got 'full'"),
    (["--input", "8", "8", "3", "--filters", "2", "--kernel", "3", "--groups", "2"],
     "--groups: PyTorch (--torch) argument, which --keras (the default) does not take"),
    (["--torch", "--input", "5", "5", "--in-channels", "2", "--out-channels", "2", "--kernel", "3",
      "--filters", "2", "--data-format", "channels_first"],
     "--filters, --data-format: Keras arguments, which --torch does not take"),
])
def test_cli_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        ex.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("call,match", [
    (lambda: ex.keras((4, 4, 3), 2, 3, padding="full"), "padding must be 'same' or 'valid'"),
    (lambda: ex.keras((4, 4, 3), 2, 3, strides=2, output_padding=2), "must be smaller than"),
    (lambda: ex.torch(4, 6, 3, (5, 5), groups=4), "divisible by groups"),
    (lambda: ex.torch(4, 6, 3, (5, 5), stride=2, output_padding=2), "smaller than either"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cudnn_check_says_why_it_was_skipped(monkeypatch):
    monkeypatch.setattr(ex, "_gpu_reason", lambda: "CUDARuntimeError: no driver")
    e = ex.explain(ex.keras(**KERAS[2][0]))
    assert e.checks[-1].error is None
    assert "cuDNN backward-data: skipped: no CUDA device (CUDARuntimeError: no driver)" \
        in _flat(ex.render(e))


@pytest.mark.gpu
@pytest.mark.parametrize("style,kw", [("keras", KERAS[0][0]), ("keras", KERAS[1][0]),
                                      ("torch", TORCH[3][0]), ("torch", TORCH[4][0])])
def test_cudnn_check_on_the_gpu(style, kw):
    e = ex.explain(getattr(ex, style)(**kw))
    cudnn = e.checks[-1]
    assert cudnn.error is not None and cudnn.error < TOL["float32"], cudnn

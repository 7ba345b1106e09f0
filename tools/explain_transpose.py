"""How a transposed convolution (Keras Conv2DTranspose, PyTorch ConvTranspose2d) is cuDNN's
backward-data of a forward convolution, step by step, with the descriptors read back from cuDNN and
the claim checked in numbers (through cuDNN too when a GPU is present). No GPU needed.

    python -m tools.explain_transpose          # the forum case: Keras NHWC 8x8x256 -> 16x16x128
    python -m tools.explain_transpose --keras --input 8 8 256 --filters 128 --kernel 2 \
        --strides 2 --padding same [--output-padding 1] [--dilation 1] [--data-format ...]
    python -m tools.explain_transpose --torch --input 5 5 --in-channels 4 --out-channels 6 \
        --kernel 3 --stride 2 --padding 1 --output-padding 1 [--groups 2] [--layout NHWC]
"""
from __future__ import annotations     # (the dataclass below names cudnnlite.testing's types)

import sys
import textwrap
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

import layers as L
from layers import F
from layers.functional import pair
from train import cli


def _testing():
    """cudnnlite.testing, imported on first use (so --help needs no cuDNN); where libcudnn
    cannot be loaded, the loader's one line -- where it looked, what to install -- and exit 2."""
    try:
        from cudnnlite import testing
    except OSError as e:
        cli.fail(e)
    return testing

TOL = {"float64": 1e-12, "float32": 1e-5}   # ||y - ref|| / ||ref|| per dtype of the computation
FORUM = dict(input_shape=(8, 8, 256), filters=128, kernel_size=2, strides=2, padding="same")


@dataclass(frozen=True)
class Transpose:
    """A 2-d transposed convolution, x (N, Cin, H, W) -> y (N, Cout, *out), in neutral terms: y is
    the window [begin, begin + out) of the full (pad 0) transposed convolution, zeros past its end.
    style / padding / output_padding keep the user's own arguments for the explanation."""
    style: str                  # 'keras' or 'torch'
    layout: str                 # how cuDNN stores the data: 'NHWC' or 'NCHW'
    N: int
    Cin: int
    Cout: int
    groups: int
    in_size: tuple
    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: object             # Keras: 'same' / 'valid'; PyTorch: (ph, pw)
    output_padding: Optional[tuple]
    begin: tuple
    out: tuple
    call: str                   # the layer as the user writes it

    @property
    def full(self):
        """Spatial size of the full (pad 0) transposed convolution: (in-1)*s + d*(k-1) + 1."""
        return tuple((n - 1) * s + d * (k - 1) + 1
                     for n, k, s, d in zip(self.in_size, self.kernel, self.stride, self.dilation))

    @property
    def after(self):
        """How far the window ends before the full result's end (negative: zeros past it)."""
        return tuple(f - b - o for f, b, o in zip(self.full, self.begin, self.out))

    @property
    def direct(self):
        """cuDNN's one symmetric pad expresses the window: backward-data with pad = begin takes
        any dx whose forward output is dy, i.e. 0 <= before - after < stride."""
        return all(0 <= b - a < s for b, a, s in zip(self.begin, self.after, self.stride))

    @property
    def cudnn_pad(self):
        return self.begin if self.direct else (0, 0)

    @property
    def dx_size(self):
        """dx's spatial size in the cuDNN problem: the output itself, or the full result to crop."""
        return self.out if self.direct else self.full


def keras(input_shape, filters, kernel_size, strides=1, padding="valid", output_padding=None,
          dilation_rate=1, data_format="channels_last", batch=2):
    """keras.layers.Conv2DTranspose(filters, kernel_size, ...) on x of shape (batch, *input_shape).
    Keras' rules (as TensorFlow's conv2d_backprop_input): 'valid' begins the window at 0 and has
    out = full + output_padding (default max(stride - k_eff, 0)); 'same' has out = in * stride
    (or (in-1)*stride + k_eff % 2 + output_padding) and pads the forward conv by total =
    full - out, before = total // 2, the odd one after."""
    if padding not in ("same", "valid"):
        raise ValueError(f"Conv2DTranspose: padding must be 'same' or 'valid', got {padding!r}")
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"Conv2DTranspose: data_format must be 'channels_last' or "
                         f"'channels_first', got {data_format!r}")
    last = data_format == "channels_last"
    H, W, Cin = input_shape if last else (*input_shape[1:], input_shape[0])
    kernel, stride, dilation = pair(kernel_size), pair(strides), pair(dilation_rate)
    ops = None if output_padding is None else pair(output_padding)
    begin, out = [], []
    for i, n in enumerate((H, W)):
        k_eff = dilation[i] * (kernel[i] - 1) + 1
        full = (n - 1) * stride[i] + k_eff
        if ops is not None and ops[i] >= stride[i]:
            raise ValueError(f"Conv2DTranspose: output_padding {ops} must be smaller than strides "
                             f"{stride}")
        if padding == "valid":
            op = max(stride[i] - k_eff, 0) if ops is None else ops[i]
            out.append(full + op)
            begin.append(0)
        else:
            out.append(n * stride[i] if ops is None else (n - 1) * stride[i] + k_eff % 2 + ops[i])
            begin.append(max(full - out[i], 0) // 2)
    args = [f"{filters}", f"kernel_size={kernel}", f"strides={stride}", f"padding={padding!r}"]
    if ops is not None:
        args.append(f"output_padding={ops}")
    if dilation != (1, 1):
        args.append(f"dilation_rate={dilation}")
    if not last:
        args.append("data_format='channels_first'")
    call = (f"keras.layers.Conv2DTranspose({', '.join(args)}) on x of shape "
            f"{(batch, *input_shape)}")
    return Transpose("keras", "NHWC" if last else "NCHW", batch, Cin, filters, 1, (H, W), kernel,
                     stride, dilation, padding, ops, tuple(begin), tuple(out), call)


def torch(in_channels, out_channels, kernel_size, input_size, stride=1, padding=0,
          output_padding=0, dilation=1, groups=1, batch=2, layout="NCHW"):
    """torch.nn.ConvTranspose2d(in_channels, out_channels, kernel_size, ...) on x of shape
    (batch, in_channels, *input_size): out = (in-1)*s - 2p + d(k-1) + output_padding + 1, the
    window beginning at p. layout: how cuDNN stores the data (NHWC = channels_last)."""
    kernel, stride, pad, ops, dilation = (pair(v) for v in (kernel_size, stride, padding,
                                                            output_padding, dilation))
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"ConvTranspose2d: in_channels {in_channels} and out_channels "
                         f"{out_channels} must be divisible by groups {groups}")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"ConvTranspose2d: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    out = []
    for i in range(2):
        if min(pad[i], ops[i]) < 0:
            raise ValueError(f"ConvTranspose2d: padding {pad} and output_padding {ops} must be "
                             f">= 0")
        if not (ops[i] < stride[i] or ops[i] < dilation[i]):
            raise ValueError(f"ConvTranspose2d: output_padding {ops} must be smaller than either "
                             f"stride {stride} or dilation {dilation}")
        out.append((input_size[i] - 1) * stride[i] - 2 * pad[i] + dilation[i] * (kernel[i] - 1)
                   + ops[i] + 1)
        if out[i] < 1:
            raise ValueError(f"ConvTranspose2d: output size {out} is not positive")
    call = (f"torch.nn.ConvTranspose2d({in_channels}, {out_channels}, kernel_size={kernel}, "
            f"stride={stride}, padding={pad}, output_padding={ops}, groups={groups}, "
            f"dilation={dilation}) on x of shape {(batch, in_channels, *input_size)}")
    return Transpose("torch", layout, batch, in_channels, out_channels, groups,
                     tuple(input_size), kernel, stride, dilation, pad, ops, pad, tuple(out), call)


# ---- the transposed convolution three ways, all x (N, Cin, H, W), W (Cin, Cout/G, R, S) -------

def scatter_add(x, W, t):
    """From the definition: every input pixel x[n, ci, i, j] adds x[n, ci, i, j] * W[ci, co, r, s]
    to the full output at (i*sh + r*dh, j*sw + s*dw) (ci, co in the same group); y is the window
    [begin, begin + out) of it."""
    N, Cin, H, Wd = x.shape
    Cg, R, S = W.shape[1:]
    (sh, sw), (dh, dw), (bh, bw), (oh, ow) = t.stride, t.dilation, t.begin, t.out
    G, Cig = t.groups, Cin // t.groups
    y = np.zeros((N, G * Cg, max(t.full[0], bh + oh), max(t.full[1], bw + ow)))
    for i in range(H):
        for j in range(Wd):
            for g in range(G):
                ci, co = slice(g * Cig, (g + 1) * Cig), slice(g * Cg, (g + 1) * Cg)
                # (N, Cin/G) . (Cin/G, Cout/G, R, S) -> (N, Cout/G, R, S): this pixel's taps
                y[:, co, i * sh:i * sh + dh * (R - 1) + 1:dh,
                  j * sw:j * sw + dw * (S - 1) + 1:dw] += np.tensordot(x[:, ci, i, j], W[ci], 1)
    return y[:, :, bh:bh + oh, bw:bw + ow]


def flipped_kernel(W, groups):
    """W (Cin, Cout/G, R, S) -> the forward conv's (Cout, Cin/G, R, S): each group's channel roles
    swapped, taps reversed in R and S."""
    Cin, Cg, R, S = W.shape
    Wg = W.reshape(groups, Cin // groups, Cg, R, S).transpose(0, 2, 1, 3, 4)
    return Wg.reshape(groups * Cg, Cin // groups, R, S)[:, :, ::-1, ::-1]


def flipped_pads(t):
    """(before, after) per dim of the stride-1 forward conv over x with stride-1 zeros between
    pixels: before = d(k-1) - begin, after = out - ((in-1)*s + 1) + begin (negative: crop)."""
    return tuple((d * (k - 1) - b, o - ((n - 1) * s + 1) + b) for n, k, s, d, b, o in
                 zip(t.in_size, t.kernel, t.stride, t.dilation, t.begin, t.out))


def flipped_forward(x, W, t):
    """The same by a forward convolution (the engine's NumPy conv2d): x with stride-1 zeros
    between pixels, padded by flipped_pads, cross-correlated with flipped_kernel at stride 1."""
    N, Cin, H, Wd = x.shape
    sh, sw = t.stride
    xs = np.zeros((N, Cin, (H - 1) * sh + 1, (Wd - 1) * sw + 1))
    xs[:, :, ::sh, ::sw] = x
    (bh, ah), (bw, aw) = flipped_pads(t)
    xs = np.pad(xs, ((0, 0), (0, 0), (max(bh, 0), max(ah, 0)), (max(bw, 0), max(aw, 0))))
    xs = xs[:, :, max(-bh, 0):xs.shape[2] - max(-ah, 0), max(-bw, 0):xs.shape[3] - max(-aw, 0)]
    Wf = np.ascontiguousarray(flipped_kernel(W, t.groups))
    return F.conv2d(L.Tensor(xs), L.Tensor(Wf), stride=1, padding=0, dilation=t.dilation,
                    groups=t.groups).numpy()


# ---- layouts -----------------------------------------------------------------------------------

def to_pytorch_weight(kernel, t):
    """The user's kernel as PyTorch's (Cin, Cout/G, R, S) = cuDNN's KCRS filter of the forward conv.
    Keras (R, S, Cout, Cin) -> transpose(3, 2, 0, 1)."""
    return kernel.transpose(3, 2, 0, 1) if t.style == "keras" else kernel


def cudnn_filter(kernel, t):
    """The user's kernel as cuDNN's filter array: KCRS (NCHW) or KRSC (NHWC), K = Cin."""
    if t.style == "keras":
        order = (3, 0, 1, 2) if t.layout == "NHWC" else (3, 2, 0, 1)
    else:
        order = (0, 2, 3, 1) if t.layout == "NHWC" else (0, 1, 2, 3)
    return np.ascontiguousarray(kernel.transpose(order))


def _from_nchw(y, t):
    """(N, C, H, W) -> as the user stores it (Keras channels_last: N, H, W, C)."""
    return np.moveaxis(y, 1, -1) if t.style == "keras" and t.layout == "NHWC" else y


# ---- the explanation -------------------------------------------------------------------------

class Check(NamedTuple):
    name: str
    error: Optional[float]      # ||y - reference|| / ||reference||; None when skipped
    tol: float
    note: str = ""              # why it was skipped

    @property
    def ok(self):
        return self.error is None or self.error <= self.tol


@dataclass
class Explanation:
    """What explain() found; render() turns it into text."""
    t: Transpose
    forward: testing.ConvSpec       # the forward conv: x = dx, W = the filter, y = dy
    descriptors: testing.Descriptors
    cudnn_dy: tuple                 # cudnnGetConvolutionNdForwardOutputDim(conv, dx, W)
    unit_stride_forward: Optional[testing.ConvSpec]    # stride 1, pads symmetric and >= 0
    unit_stride_dims: Optional[tuple]                  # cuDNN's output dims for it
    x: np.ndarray                   # the user's input, as the user stores it (float64)
    kernel: np.ndarray              # the user's kernel, in the user's layout
    y: np.ndarray                   # the scatter-add reference, as the user stores it
    checks: list
    reshape_errors: Optional[tuple]  # Keras kernel reshaped, not transposed: (random, constant)

    @property
    def forward_dy(self):
        return (self.t.N, self.t.Cin, *self.t.in_size)

    @property
    def ok(self):
        return all(c.ok for c in self.checks) and self.cudnn_dy == self.forward_dy


def _rel(a, ref):
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-300))


def _gpu_reason():
    """None when CuPy sees a CUDA device, else why not."""
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
    except ImportError as e:   # no CuPy
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    except Exception as e:     # no driver
        from cudnnlite.handle import why_no_device
        return why_no_device(e)
    return None if n > 0 else "0 devices visible"


def _engine(x, kernel, t):
    """The engine's NumPy path (layers) on the user's own arrays and arguments -> (N, C, H, W)."""
    if t.style == "torch":
        xs, Ws = x, kernel
        if t.layout == "NHWC":
            xs, Ws = np.moveaxis(x, 1, -1), cudnn_filter(kernel, t)
        y = F.conv_transpose2d(L.Tensor(np.ascontiguousarray(xs)), L.Tensor(Ws), None, t.stride,
                               t.padding, t.output_padding, t.groups, t.dilation, t.layout).numpy()
        return np.moveaxis(y, -1, 1) if t.layout == "NHWC" else y
    xs = x if t.layout == "NHWC" else np.moveaxis(x, 1, -1)
    y = L.keras.conv2d_transpose(np.ascontiguousarray(xs), kernel, None, t.stride, t.padding,
                                 t.output_padding, t.dilation).numpy()
    return np.moveaxis(y, -1, 1)


def _cudnn(x, kernel, t):
    """cudnnConvolutionBackwardData with the explained descriptors (float32, no TF32), then the
    window on the host. x (N, Cin, H, W) -> (N, Cout, *out)."""
    import cupy
    from cudnnlite import conv
    x_stored = np.moveaxis(x, 1, -1) if t.layout == "NHWC" else x
    dx_shape = (t.N, *t.dx_size, t.Cout) if t.layout == "NHWC" else (t.N, t.Cout, *t.dx_size)
    with conv.using(allow_tf32=False):
        dx = conv.backward_data(cupy.asarray(cudnn_filter(kernel, t).astype(np.float32)),
                                cupy.asarray(np.ascontiguousarray(x_stored, np.float32)),
                                dx_shape, stride=t.stride, pad=t.cudnn_pad,
                                dilation=t.dilation, groups=t.groups, layout=t.layout).get()
    dx = np.moveaxis(dx, -1, 1) if t.layout == "NHWC" else dx
    (bh, bw), (oh, ow) = (0, 0) if t.direct else t.begin, t.out
    y = np.zeros((t.N, t.Cout, oh, ow))
    part = dx[:, :, bh:bh + oh, bw:bw + ow]
    y[:, :, :part.shape[2], :part.shape[3]] = part
    return y


def explain(t, seed=0):
    """The explanation of `t`: the forward conv, its descriptors read back from cuDNN, and the
    numerical checks (x and kernel: random float32 values, held in float64)."""
    testing = _testing()
    spec = testing.ConvSpec(x=(t.N, t.Cout, *t.dx_size), w=(t.Cin, t.Cout // t.groups, *t.kernel),
                            pad=t.cudnn_pad, stride=t.stride, dilation=t.dilation,
                            groups=t.groups, layout=t.layout)
    descs = testing.build(spec)
    unit, unit_dims = None, None
    pads = flipped_pads(t)
    if t.stride == (1, 1) and all(b == a >= 0 for b, a in pads):
        unit = testing.ConvSpec(x=(t.N, t.Cin, *t.in_size),
                                w=(t.Cout, t.Cin // t.groups, *t.kernel),
                                pad=tuple(b for b, _ in pads), dilation=t.dilation,
                                groups=t.groups, layout=t.layout)
        unit_dims = testing.cudnn_output_shape(unit)

    rng = np.random.default_rng(seed)
    R, S = t.kernel
    x_nchw = rng.standard_normal((t.N, t.Cin, *t.in_size)).astype(np.float32).astype(np.float64)
    kernel = (R, S, t.Cout, t.Cin) if t.style == "keras" else (t.Cin, t.Cout // t.groups, R, S)
    kernel = rng.standard_normal(kernel).astype(np.float32).astype(np.float64)
    x, Wt = _from_nchw(x_nchw, t), to_pytorch_weight(kernel, t)
    ref = scatter_add(x_nchw, Wt, t)
    engine = "layers.keras.conv2d_transpose" if t.style == "keras" else "layers.F.conv_transpose2d"
    checks = [Check(f"engine NumPy path ({engine})", _rel(_engine(x, kernel, t), ref),
                    TOL["float64"]),
              Check("forward conv, flipped channel-swapped kernel"
                    + (" (x with stride-1 zeros between pixels)" if t.stride != (1, 1) else ""),
                    _rel(flipped_forward(x_nchw, Wt, t), ref), TOL["float64"])]
    reason = _gpu_reason()
    if reason is None:
        checks.append(Check("cuDNN backward-data (float32, no TF32)",
                            _rel(_cudnn(x_nchw, kernel, t), ref), TOL["float32"]))
    else:
        checks.append(Check("cuDNN backward-data", None, TOL["float32"],
                            f"skipped: no CUDA device ({reason})"))
    reshape = None
    if t.style == "keras":
        def wrong(k):     # Keras' buffer read as cuDNN's filter without transposing
            if t.layout == "NCHW":
                return k.reshape(t.Cin, t.Cout, R, S)
            return k.reshape(t.Cin, R, S, t.Cout).transpose(0, 3, 1, 2)
        ones = np.ones_like(kernel)
        reshape = (_rel(scatter_add(x_nchw, wrong(kernel), t), ref),
                   _rel(scatter_add(x_nchw, wrong(ones), t),
                        scatter_add(x_nchw, to_pytorch_weight(ones, t), t)))
    return Explanation(t, spec, descs, descs.y.dims, unit, unit_dims, x, kernel,
                       _from_nchw(ref, t), checks, reshape)


# ---- the text ----------------------------------------------------------------------------------

def _para(text, indent="    "):
    return textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)


def _shape(N, C, hw, t):
    """A shape as the user's arrays hold it (Keras channels_last: N, H, W, C)."""
    return (N, *hw, C) if t.style == "keras" and t.layout == "NHWC" else (N, C, *hw)


def _window(begin, out, t):
    rows, cols = (f"{b}:{b + o}" for b, o in zip(begin, out))
    return f"[:, {rows}, {cols}, :]" if t.style == "keras" and t.layout == "NHWC" \
        else f"[:, :, {rows}, {cols}]"


def _dim_text(t, i):
    """How the user's arguments give out and (before, after) along spatial dim i."""
    n, k, s, d = t.in_size[i], t.kernel[i], t.stride[i], t.dilation[i]
    k_eff, full, out, b, a = d * (k - 1) + 1, t.full[i], t.out[i], t.begin[i], t.after[i]
    op = None if t.output_padding is None else t.output_padding[i]
    if t.style == "torch":
        text = (f"out = (in-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1 = "
                f"({n}-1)*{s} - 2*{t.padding[i]} + {d}*({k}-1) + {op} + 1 = {out}. The window "
                f"starts at padding and ends padding - output_padding before the end of the full "
                f"result ((in-1)*stride + dilation*(k-1) + 1 = {full}): (before, after) = "
                f"({b}, {a}).")
    elif t.padding == "valid":
        op = max(s - k_eff, 0) if op is None else op
        text = (f"'valid': out = (in-1)*stride + k_eff + output_padding = ({n}-1)*{s} + {k_eff} + "
                f"{op} = {out} (k_eff = dilation*(k-1) + 1; output_padding defaults to "
                f"max(stride - k_eff, 0)). The window starts at 0 of the full (pad 0) result "
                f"((in-1)*stride + k_eff = {full}): (before, after) = ({b}, {a}).")
    else:
        text = (f"'same': out = in*stride = {n}*{s} = {out}. " if op is None else
                f"'same' with output_padding: out = (in-1)*stride + k_eff % 2 + output_padding = "
                f"({n}-1)*{s} + {k_eff % 2} + {op} = {out}. ")
        text += (f"The full (pad 0) result has (in-1)*stride + k_eff = {full} (k_eff = "
                 f"dilation*(k-1) + 1 = {k_eff}). The forward conv {out} -> {n} with SAME padding "
                 f"pads total = max(full - out, 0) = {max(full - out, 0)}: before = total // 2 = "
                 f"{b}, after = full - out - before = {a} (TensorFlow's rule: the odd one after).")
    if a < 0:
        text += (f" after < 0: the last {-a} output position(s) lie past the full result; "
                 f"nothing lands there (zeros).")
    return text


def _kernel_text(e):
    """Paragraphs; lines starting with four spaces are code."""
    t = e.t
    K, C, (R, S) = t.Cin, t.Cout // t.groups, t.kernel
    fmt = "KRSC" if t.layout == "NHWC" else "KCRS"
    lines = [(f"Keras kernel (R, S, Cout, Cin) = {e.kernel.shape}." if t.style == "keras" else
              f"PyTorch weight (Cin, Cout/groups, R, S) = {e.kernel.shape}.")
             + f" cuDNN's filter is the forward conv's: K = its output channels = the layer's "
             f"INPUT channels = {K}; C = the layer's output channels / groups = {C}; R, S = {R}, "
             f"{S}."]
    if t.style == "keras":
        order = "3, 0, 1, 2" if t.layout == "NHWC" else "3, 2, 0, 1"
        shape = (K, R, S, C) if t.layout == "NHWC" else (K, C, R, S)
        lines.append(f"{t.layout} filter format = {fmt}, the array {shape}:")
        lines.append(f"    W = np.ascontiguousarray(kernel.transpose({order}))")
        lines.append("(KCRS = kernel.transpose(3, 2, 0, 1) is also PyTorch's ConvTranspose2d "
                     "weight layout (Cin, Cout/groups, R, S).)")
        random, constant = e.reshape_errors
        lines.append(f"A reshape is not a transpose: kernel.reshape{shape} keeps Keras' element "
                     f"order and mixes taps and channels. With a constant kernel that is invisible "
                     f"(rel err {constant:.1g}); with this random one the result is off by rel err "
                     f"{random:.2f}.")
    elif t.layout == "NHWC":
        lines.append(f"NHWC filter format = KRSC, the array ({K}, {R}, {S}, {C}):")
        lines.append("    W = np.ascontiguousarray(weight.transpose(0, 2, 3, 1))")
    else:
        lines.append("It is cuDNN's KCRS filter as is: no copy, no transpose.")
    return lines


def _forward_text(e):
    t = e.t
    pads = flipped_pads(t)
    flip = ("W'[co, ci, r, s] = W[ci, co, R-1-r, S-1-s]" + (" within each group" if t.groups > 1
                                                              else "")
            + " (W as (Cin, Cout/groups, R, S))")
    if t.stride != (1, 1):
        stuffed = tuple((n - 1) * s + 1 for n, s in zip(t.in_size, t.stride))
        return [f"With stride {t.stride} it is not a forward convolution of x, but one of x with "
                f"stride-1 zeros between pixels ({t.in_size} -> {stuffed}), padded (before, after) "
                f"= {pads}, at stride 1, with the kernel flipped and channel-swapped: {flip}. Most "
                f"of its multiplies are by those zeros; backward-data never forms them. (f) checks "
                f"this form too."]
    lines = [f"With stride 1, y[o] = sum_r x[o + begin - r*d] W[r] = sum_r' x_pad[o + r'*d] "
             f"W[k-1-r']: a forward cross-correlation of x padded d*(k-1) - begin before, with the "
             f"kernel flipped and channel-swapped: {flip}. For PyTorch's padding p that pad is "
             f"d*(k-1) - p (k-1-p when d = 1), the same both sides when output_padding = 0."]
    if e.unit_stride_forward is None:
        lines.append(f"Here (before, after) = {pads}: not the same pad >= 0 on both sides, so "
                     f"x is padded / cropped by hand first ((f) does).")
    else:
        u = e.unit_stride_forward
        lines.append(f"Here: cudnnConvolutionForward with x {_shape(t.N, t.Cin, t.in_size, t)}, W' "
                     f"{u.w} ({'KRSC' if t.layout == 'NHWC' else 'KCRS'}), pad "
                     f"{u.pad}, dilation {t.dilation}, groups {t.groups}; cuDNN computes its "
                     f"output dims {e.unit_stride_dims}, y's (N, C, H, W).")
    lines.append("Or keep W's taps and set mode CUDNN_CONVOLUTION, which flips them; the channel "
                 "swap stays yours.")
    return lines


def render(e):
    """The explanation as text."""
    t, descs = e.t, e.descriptors
    y_shape = _shape(t.N, t.Cout, t.out, t)
    dx_shape = _shape(t.N, t.Cout, t.dx_size, t)
    out = [t.call, f"  -> y of shape {y_shape}; cuDNN layout {t.layout}", ""]

    out.append("(a) The forward convolution whose data-gradient this is")
    out.append(_para(
        f"Conv2D from x {dx_shape} to y {_shape(t.N, t.Cin, t.in_size, t)}: kernel "
        f"{t.kernel[0]}x{t.kernel[1]}, stride {t.stride}, pad {t.cudnn_pad}, dilation "
        f"{t.dilation}, groups {t.groups}. Its y is the layer's input (dy); its x has the layer's "
        f"output shape (dx)" + ("" if t.direct else ", before the crop in (d)") + ". The layer "
        "computes dx = cudnnConvolutionBackwardData(W, dy), in CROSS_CORRELATION mode with no "
        "flip: backward-data is the exact adjoint of the forward cross-correlation, which is what "
        "both frameworks compute."))
    out.append("")

    out.append("(b) The kernel layout")
    out += ["    " + text if text.startswith("    ") else _para(text) for text in _kernel_text(e)]
    out.append("")

    out.append("(c) The descriptors as cuDNN holds them (read back with cudnnGet*Descriptor)")
    out.append(f"    conv  {descs.conv!r}")
    out.append(f"    W     {descs.w!r}")
    out.append(f"    dy    {descs.y!r}")
    out.append(f"    dx    {descs.x!r}")
    verdict = "= dy's dims" if e.cudnn_dy == e.forward_dy else f"!= dy's {e.forward_dy}: WRONG"
    out.append(_para("Dims are always (N, C, H, W) / (K, C, R, S); the layout shows in the "
                     "strides and the filter format. cudnnGetConvolutionNdForwardOutputDim(conv, "
                     f"dx, W) = {e.cudnn_dy} {verdict}."))
    out.append("")

    out.append("(d) Output size, padding and the window")
    texts = [_dim_text(t, 0), _dim_text(t, 1)]
    if texts[0] == texts[1]:
        out.append(_para("H and W: " + texts[0]))
    else:
        out += [_para(f"{name}: {text}") for name, text in zip("HW", texts)]
    text = ("cuDNN has one pad per dim, the same on both sides, and backward-data takes any dx "
            "whose forward output is dy, so it expresses (before, after) exactly when 0 <= before "
            "- after < stride. ")
    if t.direct:
        text += f"Here it does: pad {t.cudnn_pad}, dx = y {y_shape}, no crop."
    else:
        bad = ", ".join(f"{n} ({b}, {a})" for n, b, a, s in zip("HW", t.begin, t.after, t.stride)
                        if not 0 <= b - a < s)
        text += (f"Here it does not ({bad}), so: backward-data with pad (0, 0) into the full dx "
                 f"{dx_shape}, then y = dx{_window(t.begin, t.out, t)}, the window [begin, begin + "
                 f"out) of the full transposed conv" + (", zeros past its end." if min(t.after) < 0
                                                        else "."))
    out.append(_para(text))
    out.append("")

    out.append("(e) " + ("Unit stride: a forward convolution" if t.stride == (1, 1)
                         else "Why backward-data and not a forward convolution"))
    out += [_para(text) for text in _forward_text(e)]
    out.append("")

    out.append("(f) Numbers: x and kernel random (float32 values), reference in float64 from the "
               "scatter-add")
    out.append("    definition (every input pixel adds kernel-weighted copies of itself to the "
               "output)")
    for c in e.checks:
        result = c.note if c.error is None else \
            f"rel err {c.error:.1e} (tol {c.tol:.0e}) {'OK' if c.ok else 'FAILED'}"
        out.append(_para(f"{c.name}: {result}", "    ").replace("\n    ", "\n      "))
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    style = ap.add_mutually_exclusive_group()
    style.add_argument("--keras", action="store_true", help="Keras Conv2DTranspose arguments")
    style.add_argument("--torch", action="store_true", help="PyTorch ConvTranspose2d arguments")
    ap.add_argument("--input", type=cli.positive_int, nargs="+",
                    help="Keras: H W C (channels_first: C H W); PyTorch: H W")
    ap.add_argument("--kernel", "--kernel-size", type=cli.positive_int, nargs="+")
    ap.add_argument("--strides", "--stride", dest="stride", type=cli.positive_int, nargs="+",
                    default=[1])
    ap.add_argument("--padding", nargs="+", help="Keras: same | valid; PyTorch: ints")
    ap.add_argument("--output-padding", type=cli.nonnegative_int, nargs="+")
    ap.add_argument("--dilation", "--dilation-rate", type=cli.positive_int, nargs="+",
                    default=[1])
    ap.add_argument("--filters", type=cli.positive_int, help="Keras")
    ap.add_argument("--data-format", default="channels_last",
                    choices=["channels_last", "channels_first"], help="Keras")
    ap.add_argument("--in-channels", type=cli.positive_int, help="PyTorch")
    ap.add_argument("--out-channels", type=cli.positive_int, help="PyTorch")
    ap.add_argument("--groups", type=cli.positive_int, help="PyTorch [1]")
    ap.add_argument("--layout", choices=["NCHW", "NHWC"],
                    help="PyTorch: how cuDNN stores the data (NHWC = channels_last) [NCHW]")
    ap.add_argument("--batch", type=cli.positive_int, default=2)
    ap.add_argument("--seed", type=cli.seed, default=0)
    args = ap.parse_args(argv)

    def value(v):
        return v[0] if len(v) == 1 else tuple(v)

    torch_only = {"--in-channels": args.in_channels, "--out-channels": args.out_channels,
                  "--groups": args.groups, "--layout": args.layout}
    keras_only = {"--filters": args.filters,
                  "--data-format": None if args.data_format == "channels_last" else
                  args.data_format}
    wrong = [flag for flag, v in (keras_only if args.torch else torch_only).items()
             if v is not None]
    if argv and wrong:                   # (not silently dropped)
        ap.error(f"{', '.join(wrong)}: {'Keras' if args.torch else 'PyTorch (--torch)'} "
                 f"argument{'' if len(wrong) == 1 else 's'}, which "
                 f"{'--torch' if args.torch else '--keras (the default)'} does not take")
    if not argv:
        t = keras(**FORUM)
    elif args.torch:
        if None in (args.input, args.in_channels, args.out_channels, args.kernel) \
                or len(args.input) != 2:
            ap.error("--torch needs --input H W, --in-channels, --out-channels and --kernel")
        if not all(p.isdigit() for p in args.padding or []):
            ap.error(f"--torch --padding takes ints, got {' '.join(args.padding)}")
        try:
            t = torch(args.in_channels, args.out_channels, value(args.kernel), tuple(args.input),
                      value(args.stride), value([int(p) for p in args.padding or ["0"]]),
                      value(args.output_padding or [0]), value(args.dilation),
                      args.groups or 1, args.batch, args.layout or "NCHW")
        except ValueError as e:
            ap.error(str(e))
    else:
        if None in (args.input, args.filters, args.kernel) or len(args.input) != 3:
            ap.error("--keras needs --input H W C (channels_first: C H W), --filters and --kernel")
        try:
            t = keras(tuple(args.input), args.filters, value(args.kernel), value(args.stride),
                      value(args.padding or ["valid"]),
                      args.output_padding and value(args.output_padding), value(args.dilation),
                      args.data_format, args.batch)
        except ValueError as e:
            ap.error(str(e))
    e = explain(t, args.seed)
    print(render(e))
    return 0 if e.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Convolution and transposed convolution (2-d; 1-d is 2-d with H = 1).

Shape legend: x (N, C, H, W), W (K, C/G, R, S), y (N, K, P, Q), G groups; layout 'NHWC' stores
x/y channels-last and W as (K, R, S, C/G). The GPU path is cuDNN; the NumPy path is im2col +
tensordot (Chainer's convolution_2d). Three array functions do all the work, and each op's
backward is built from the other two: conv's gx is the transposed conv (backward-data), the
transposed conv's gx is conv forward, and both take gW from backward-filter.
"""
import numpy as np

from .. import kernels
from ..tensor import ADDED, Function, fresh
from ..backend import addable
from . import nchw_views


# ---- the three array functions (NCHW or NHWC, NumPy or CuPy) ---------------------------------

def _nchw(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _from_nchw(a, layout):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a


def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def im2col(x, R, S, stride, pad, dilation):
    """x (N, C, H, W) -> cols (N, C, R, S, P, Q): cols[..., r, s, p, q] = x_pad[..., p*sh + r*dh,
    q*sw + s*dw]."""
    N, C, H, W = x.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    P, Q = _out_size(H, R, sh, ph, dh), _out_size(W, S, sw, pw, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((N, C, R, S, P, Q), dtype=x.dtype)
    for r in range(R):
        for s in range(S):
            cols[:, :, r, s] = xp[:, :, r * dh:r * dh + sh * (P - 1) + 1:sh,
                                  s * dw:s * dw + sw * (Q - 1) + 1:sw]
    return cols


def col2im(cols, H, W, stride, pad, dilation):
    """The adjoint of im2col: add each column entry back where it was read from."""
    N, C, R, S, P, Q = cols.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=cols.dtype)
    for r in range(R):
        for s in range(S):
            xp[:, :, r * dh:r * dh + sh * (P - 1) + 1:sh,
               s * dw:s * dw + sw * (Q - 1) + 1:sw] += cols[:, :, r, s]
    return xp[:, :, ph:ph + H, pw:pw + W]


def _groups(K, C, G):
    return [(slice(g * K // G, (g + 1) * K // G), slice(g * C // G, (g + 1) * C // G))
            for g in range(G)]


def conv_forward(x, W, stride, pad, dilation, groups, layout="NCHW"):
    """y = conv(x, W) (cross-correlation, as every framework)."""
    if not isinstance(x, np.ndarray):
        return on_gpu("conv_forward", x, W, stride, pad, dilation, groups, layout)
    x, W = _nchw(x, layout), _nchw(W, layout)
    K, Cg, R, S = W.shape
    cols = im2col(x, R, S, stride, pad, dilation)
    y = np.empty((x.shape[0], K) + cols.shape[4:], dtype=x.dtype)
    for ks, cs in _groups(K, x.shape[1], groups):
        # (N, Cg, R, S, P, Q) . (Kg, Cg, R, S) -> (N, P, Q, Kg)
        y[:, ks] = np.tensordot(cols[:, cs], W[ks], ((1, 2, 3), (1, 2, 3))).transpose(0, 3, 1, 2)
    return _from_nchw(y, layout)


def conv_backward_data(W, gy, x_shape, stride, pad, dilation, groups, layout="NCHW"):
    """gx = conv^T(gy, W): the transposed convolution of gy, of shape x_shape."""
    if not isinstance(gy, np.ndarray):
        return on_gpu("conv_backward_data", W, gy, x_shape, stride, pad, dilation, groups, layout)
    W, gy = _nchw(W, layout), _nchw(gy, layout)
    N, C, H, Wd = (x_shape[0], x_shape[-1], x_shape[1], x_shape[2]) if layout == "NHWC" \
        else x_shape
    K, Cg, R, S = W.shape
    cols = np.empty((N, C, R, S) + gy.shape[2:], dtype=gy.dtype)
    for ks, cs in _groups(K, C, groups):
        # (Kg, Cg, R, S) . (N, Kg, P, Q) -> (Cg, R, S, N, P, Q)
        cols[:, cs] = np.tensordot(W[ks], gy[:, ks], (0, 1)).transpose(3, 0, 1, 2, 4, 5)
    return _from_nchw(col2im(cols, H, Wd, stride, pad, dilation), layout)


def conv_backward_filter(x, gy, w_shape, stride, pad, dilation, groups, layout="NCHW",
                         into=None):
    """gW[k, c, r, s] = sum over n, p, q of gy[n, k, p, q] * x_pad[n, c, p*sh + r*dh, q*sw + s*dw].
    `into`: an existing gradient gW may be added into (on the GPU's cuBLASLt routes, whose
    beta = 1 adds it; ADDED is then returned); the NumPy path and cuDNN's call return gW."""
    if not isinstance(x, np.ndarray):
        return on_gpu("conv_backward_filter", x, gy, w_shape, stride, pad, dilation, groups,
                      layout, into=into)
    x, gy = _nchw(x, layout), _nchw(gy, layout)
    K, R, S = w_shape[0], (w_shape[1] if layout == "NHWC" else w_shape[2]), \
        (w_shape[2] if layout == "NHWC" else w_shape[3])
    cols = im2col(x, R, S, stride, pad, dilation)
    gW = np.empty((K, x.shape[1] // groups, R, S), dtype=x.dtype)
    for ks, cs in _groups(K, x.shape[1], groups):
        # (N, Kg, P, Q) . (N, Cg, R, S, P, Q) -> (Kg, Cg, R, S)
        gW[ks] = np.tensordot(gy[:, ks], cols[:, cs], ((0, 2, 3), (0, 4, 5)))
    return _from_nchw(gW, layout)


# ---- the GPU branch of the three: cuDNN, or cuBLAS for a filter that covers its whole input --

WHOLE_INPUT_AS_GEMM = True      # False: every convolution goes to cuDNN
THIN_INPUT_AS_GEMM = True       # False: thin-input convolutions go to cuDNN too


def on_gpu(name, a, b, *args, into=None):
    """The GPU branch of conv_forward (a, b = x, W), conv_backward_data (W, gy, x_shape) and
    conv_backward_filter (x, gy, w_shape): cudnnlite.conv's call, or one cuBLASLt product when
    the filter covers its whole input (whole_input) or the input is thin (thin_input). With
    `into` (backward-filter), a cuBLASLt product adds its gW into it and ADDED is returned.
    cuDNN's backward-filter is not asked to (its graph API would build and benchmark plans for
    beta = 1, a narrower set of engines than beta = 0's): it returns gW."""
    from cudnnlite import conv
    stride, pad, dilation, groups, layout = args[-5:]
    if name == "conv_forward":
        x_shape, w_shape, call = a.shape, b.shape, conv.forward
    elif name == "conv_backward_data":
        x_shape, w_shape, call = args[0], a.shape, conv.backward_data
    else:
        x_shape, w_shape, call = a.shape, args[0], conv.backward_filter
    if x_shape[0] == 0:                   # an empty batch: cuDNN takes no empty tensor
        return _empty_batch(name, a, x_shape, w_shape, stride, pad, dilation, layout, into)
    route = None
    if WHOLE_INPUT_AS_GEMM and whole_input(x_shape, w_shape, pad, dilation, groups):
        route = _as_gemm, (name, a, b, x_shape, w_shape, layout)
    elif THIN_INPUT_AS_GEMM and thin_input(x_shape, w_shape, layout, groups, a.dtype.itemsize):
        route = _as_im2col_gemm, (name, a, b, x_shape, w_shape, stride, pad, dilation)
    if route is not None:
        from cudnnlite import blas
        if not addable(into, w_shape, a.dtype):
            into = None
        try:
            out = route[0](*route[1], into=into)
            if out is not None:
                return out
        except blas.NotSupported:       # no cuBLASLt algorithm for the product: cuDNN's call
            pass
    return call(a, b, *args[:-5], stride=stride, pad=pad, dilation=dilation, groups=groups,
                layout=layout)


def _empty_batch(name, a, x_shape, w_shape, stride, pad, dilation, layout, into):
    """on_gpu's answer for N = 0, as torch's: an empty output, an empty gx, a zero gW (a sum
    over no sample; nothing to add where `into` is given)."""
    from ..backend import xp_of
    xp = xp_of(a)
    if name == "conv_backward_data":
        return xp.zeros(tuple(x_shape), a.dtype)
    if name == "conv_backward_filter":
        return ADDED if into is not None and addable(into, w_shape, a.dtype) else \
            xp.zeros(tuple(w_shape), a.dtype)
    nhwc = layout == "NHWC"
    H, W = x_shape[1:3] if nhwc else x_shape[2:4]
    R, S = w_shape[1:3] if nhwc else w_shape[2:4]
    P, Q = (_out_size(n, k, s, p, d) for n, k, s, p, d in zip((H, W), (R, S), stride, pad,
                                                              dilation))
    K = w_shape[0]
    return xp.zeros((0, P, Q, K) if nhwc else (0, K, P, Q), a.dtype)


def whole_input(x_shape, w_shape, pad, dilation, groups):
    """True when each output position's window is the whole unpadded input: one group, no
    padding or dilation, and x's (C, H, W) equal to the filter's (C, R, S) -- (H, W, C) and
    (R, S, C) in NHWC, so one test serves both layouts. The output is then 1 x 1 and the
    convolution the matrix product y (N, K) = x (N, C*H*W) @ W (K, C*R*S)^T, x and W flattened
    in the same order. DCGAN's last discriminator convolution (512 -> 1 over 4 x 4) and its
    generator's first transposed one are this; cuDNN's heuristic algorithm took 151 us on the
    H100 for the first, a 4 MB matrix-vector product."""
    return groups == 1 and tuple(pad) == (0, 0) and tuple(dilation) == (1, 1) and \
        len(x_shape) == 4 and tuple(x_shape[1:]) == tuple(w_shape[1:])


def _filter_product(gy_t, cols, w_shape, into, tf32):
    """gW = gy^T @ cols as w_shape, or added into `into` (beta = 1; ADDED returned)."""
    from cudnnlite import blas
    if into is None:
        return blas.matmul(gy_t, cols, allow_tf32=tf32).reshape(w_shape)
    blas.matmul(gy_t, cols, out=into.reshape(gy_t.shape[0], cols.shape[1]), beta=1.0,
                allow_tf32=tf32)
    return ADDED


def _as_gemm(name, a, b, x_shape, w_shape, layout, into=None):
    """on_gpu's product for a whole_input problem: the two operands as matrices (views where
    their strides allow, else copies), one cudnnlite.blas.matmul (TF32 for float32 exactly when
    cuDNN's convolutions may use it: conv.settings.allow_tf32), the result in the shape the
    cuDNN call would give."""
    from cudnnlite import blas, conv
    N, K = x_shape[0], w_shape[0]
    chw = int(np.prod(x_shape[1:]))                  # = C*R*S (sizes, not -1: N may be 0)
    tf32 = conv.settings.allow_tf32
    if name == "conv_forward":                       # y (N, K) = x . W^T
        y = blas.matmul(a.reshape(N, chw), b.reshape(K, chw).T, allow_tf32=tf32)
        return y.reshape((N, 1, 1, K) if layout == "NHWC" else (N, K, 1, 1))
    if name == "conv_backward_data":                 # gx (N, CHW) = gy (N, K) . W
        return blas.matmul(b.reshape(N, K), a.reshape(K, chw), allow_tf32=tf32).reshape(x_shape)
    # gW (K, CRS) = gy^T . x
    return _filter_product(b.reshape(N, K).T, a.reshape(N, chw), w_shape, into, tf32)


def thin_input(x_shape, w_shape, layout, groups, itemsize):
    """True for a channels-last convolution (NHWC x, (K, R, S, C) filter, one group) whose input
    channels are narrower than one 16-byte vector (C * itemsize < 16: 1-3 float32 channels, 1-7
    bfloat16) and whose window R*S*C is no longer than its K outputs. cuDNN's NHWC tensor-core
    kernels read channels 16 bytes at a time, so for such an input they convert or pad the
    tensors around the convolution: on the H100, DCGAN's one-channel layers (netD's first
    convolution, netG's last transposed one: C = 1, K = 64, 4 x 4) spent ~680 us a step in
    fp32 (of 5.16 ms), more in bf16, mostly in nchwToNhwc / tensorTransformGeneric /
    convertTensor kernels and a generic backward-filter. Here the problem is instead explicit
    im2col + one cuBLASLt product (_as_im2col_gemm): the columns are R*S*C / K of the output's
    size at most, so building them costs less than writing the output."""
    if layout != "NHWC" or groups != 1 or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    K, R, S, C = w_shape
    return x_shape[-1] == C and C * itemsize < 16 and R * S * C <= K and min(x_shape) > 0


def _as_im2col_gemm(name, a, b, x_shape, w_shape, stride, pad, dilation, into=None):
    """on_gpu's route for a thin_input problem, NHWC throughout (the product's (N*P*Q, K)
    result is the NHWC output itself):
        forward          y  = im2col(x) @ W^T            (N*P*Q, R*S*C) . (R*S*C, K)
        backward-data    gx = col2im(gy @ W)             (N*P*Q, K) . (K, R*S*C)
        backward-filter  gW = gy^T @ im2col(x)           (K, N*P*Q) . (N*P*Q, R*S*C)
    TF32 for float32 exactly when cuDNN's convolutions may (conv.settings.allow_tf32). None
    where the output would be empty (cuDNN's call then says why)."""
    from cudnnlite import blas, conv
    K, R, S, C = w_shape
    tf32 = conv.settings.allow_tf32
    if name == "conv_forward":                       # a, b = x, W
        P, Q = (_out_size(x_shape[1 + i], w_shape[1 + i], stride[i], pad[i], dilation[i])
                for i in range(2))
        if P <= 0 or Q <= 0:
            return None
        cols = kernels.im2col_nhwc(a, R, S, stride, pad, dilation, P, Q)
        y = blas.matmul(cols, b.reshape(K, R * S * C).T, allow_tf32=tf32)
        return y.reshape(x_shape[0], P, Q, K)
    N, P, Q = b.shape[:3]                            # b = gy (N, P, Q, K)
    gy = b.reshape(N * P * Q, K)
    if name == "conv_backward_data":                 # a = W
        gcols = blas.matmul(gy, a.reshape(K, R * S * C), allow_tf32=tf32)
        return kernels.col2im_nhwc(gcols, tuple(x_shape), R, S, stride, pad, dilation, P, Q)
    cols = kernels.im2col_nhwc(a, R, S, stride, pad, dilation, P, Q)
    return _filter_product(gy.T, cols, w_shape, into, tf32)


def _bias_shape(K, ndim, layout):
    return (1,) * (ndim - 1) + (K,) if layout == "NHWC" else (1, K) + (1,) * (ndim - 2)


def _sum_bias(gy, layout, gpu):
    """gb[k] = sum of gy over every axis but the channel one. cuDNN's backward-bias takes float,
    double and half (it answers bfloat16 with NOT_SUPPORTED); bfloat16 and the NumPy path sum with
    a float32 accumulator for half data, rounded once."""
    from ..backend import bfloat16, sum_rounded_once
    if gpu and gy.dtype != bfloat16 and gy.size:           # (cuDNN takes no empty tensor)
        from cudnnlite import conv
        return conv.backward_bias(gy, layout=layout)
    axes = tuple(range(gy.ndim - 1)) if layout == "NHWC" else (0,) + tuple(range(2, gy.ndim))
    return sum_rounded_once(gy, axes)


def _as_cudnn_reads(x, gpu, packed_only):
    """On the GPU, the array cuDNN will read for x -- x itself, or the one copy the boundary makes
    of a view a descriptor cannot state -- so forward and backward read the same memory."""
    if not gpu:
        return x
    from cudnnlite import boundary
    make = boundary.packed if packed_only else boundary.strided
    return make("cudnnConvolutionForward", "x", x)


_NP_ACT = {"relu": lambda x: np.where((x > 0) | np.isnan(x), x, 0).astype(x.dtype),
           "tanh": np.tanh, "sigmoid": lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype)}
_NP_ACT_GRAD = {"relu": lambda y, gy: np.where(y <= 0, 0, gy).astype(gy.dtype),   # as torch
                "tanh": lambda y, gy: gy * (1 - y * y),
                "sigmoid": lambda y, gy: gy * y * (1 - y)}


_UNFUSED = []         # [LRU of the problems no cuDNN engine fuses], made on the first GPU call


class _AddsIntoGrad(Function):
    """A convolution whose backward may add the filter's gradient into the weight's existing
    .grad (Function.grad_into; conv_backward_filter's `into`)."""
    adds_into_grad = True

    def _reads(self, x, packed_only):
        """_as_cudnn_reads; where that is a copy, x itself is kept too (`kept`), so an in-place
        change of x after the forward still refuses the backward (layers.changes), as on the
        NumPy path."""
        read = _as_cudnn_reads(x, self.gpu, packed_only)
        if read is not x:
            self.given, self.kept = x, ("given",)
        return read

    def _into(self, i):
        return None if self.grad_into is None else self.grad_into[i]


@nchw_views
class Conv2d(_AddsIntoGrad):
    """y = activation(conv(x, W) + b). Params: stride, pad, dilation (pairs), groups, layout,
    activation (None, 'relu', 'tanh', 'sigmoid'). With a bias and an activation on the GPU, the
    three are one cuDNN operation graph (cudnnlite.conv.forward_fused, the seed's Conv-Bias-ReLU
    fusion) where an engine fuses them, else three calls. Backward needs only x, W and y: the
    activation's gradient is taken from its output."""
    activation = None

    def forward(self, x, W, b=None):
        fuse = self.gpu and self.activation is not None and b is not None and \
            self.groups == 1 and x.dtype == W.dtype == b.dtype
        x = self._reads(x, packed_only=fuse)
        y = self._fused(x, W, b) if fuse else None
        if y is None:
            y = conv_forward(x, W, self.stride, self.pad, self.dilation, self.groups, self.layout)
            if b is not None:
                y += b.reshape(_bias_shape(b.shape[0], y.ndim, self.layout))
            if self.activation is not None:
                y = kernels.activation(self.activation, y) if self.gpu \
                    else _NP_ACT[self.activation](y)
        self.saved = x, W, (y if self.activation is not None else None)
        return y

    def _fused(self, x, W, b):
        """The fused forward, or None where no engine fuses the problem (remembered, so such a
        problem costs one set lookup per call)."""
        from cudnnlite import NotSupported, conv
        from cudnnlite._cache import LRU
        if not _UNFUSED:
            _UNFUSED.append(LRU(1024))
        unfused = _UNFUSED[0]
        key = (x.shape, x.strides, W.shape, x.dtype.str, x.device.id, self.layout, self.stride,
               self.pad, self.dilation, self.activation, conv.settings)
        if key in unfused:
            return None
        try:
            return conv.forward_fused(x, W, b, self.activation, stride=self.stride, pad=self.pad,
                                      dilation=self.dilation, layout=self.layout)
        except NotSupported:
            unfused.get(key, lambda: True)
            return None

    def backward(self, gy):
        x, W, y = self.saved
        if self.activation is not None:
            gy = kernels.activation_grad(self.activation, y, gy) if self.gpu \
                else _NP_ACT_GRAD[self.activation](y, gy)
        gy = self.xp.ascontiguousarray(gy)
        args = self.stride, self.pad, self.dilation, self.groups, self.layout
        gx = conv_backward_data(W, gy, x.shape, *args) if self.needs_input_grad[0] else None
        gW = conv_backward_filter(x, gy, W.shape, *args, into=self._into(1)) \
            if self.needs_input_grad[1] else None
        gb = None
        if len(self.needs_input_grad) > 2 and self.needs_input_grad[2]:
            gb = _sum_bias(gy, self.layout, self.gpu)
        return fresh(gx), fresh(gW), fresh(gb)      # each made here (see tensor.Fresh)

    def backward_graph(self, gy):
        """create_graph: gx the transposed convolution of gy (ConvTranspose2d, whose forward is
        this backward-data), gW a ConvFilterGrad, gb gy's channel sums -- ops on Tensors."""
        if self.activation is not None:
            raise NotImplementedError(f"Conv2d: no double backward (create_graph=True) is "
                                      f"written for a fused activation ({self.activation!r}); "
                                      f"apply the activation as its own op")
        x, W = self.inputs[:2]
        need = self.needs_input_grad
        gx = ConvTranspose2d.apply(gy, W, None, stride=self.stride, dilation=self.dilation,
                                   groups=self.groups, begin=self.pad, size=_spatial(self, x),
                                   layout=self.layout, nchw=self.nchw) if need[0] else None
        gW = ConvFilterGrad.apply(x, gy, w_shape=_op_shape(self, W), stride=self.stride,
                                  pad=self.pad, dilation=self.dilation, groups=self.groups,
                                  layout=self.layout, nchw=self.nchw) if need[1] else None
        return gx, gW, _bias_grad_graph(self, gy)


def _given_axes(fn):
    """(channel axis, (H, W) axes) of the 4-d Tensors an op of fn's layout was given: NHWC ones
    for layout 'NHWC', else NCHW-shaped (nchw: stored channels-last, viewed NHWC inside)."""
    return (3, (1, 2)) if fn.layout == "NHWC" and not fn.nchw else (1, (2, 3))


def _spatial(fn, t):
    """The (H, W) of a Tensor as an op of fn's layout takes it."""
    return tuple(t.shape[a] for a in _given_axes(fn)[1])


def _op_shape(fn, t):
    """A 4-d Tensor's shape as the op sees it inside its NHWC views (ops.nchw_views)."""
    n, c, h, w = t.shape
    return (n, h, w, c) if fn.nchw else tuple(t.shape)


def _bias_grad_graph(fn, gy):
    """A bias's gradient as a Tensor (create_graph): gy summed over all but the channel axis."""
    from .. import functional as F
    if len(fn.needs_input_grad) < 3 or not fn.needs_input_grad[2]:
        return None
    channel = _given_axes(fn)[0]
    return F.sum(gy, tuple(a for a in range(4) if a != channel))


@nchw_views
class ConvFilterGrad(Function):
    """A convolution's filter gradient as an op of its own (create_graph): y = gW, backward-filter
    of x and gy for a filter of shape w_shape (as the op sees it: NHWC views inside), the other
    parameters Conv2d's. Linear in each input, so its own gradients are the other two array
    functions: gx = backward-data of g (a filter) and gy, ggy = the convolution of x with g."""

    def forward(self, x, gy):
        x, gy = _as_cudnn_reads(x, self.gpu, False), self.xp.ascontiguousarray(gy)
        self.saved = x, gy
        return conv_backward_filter(x, gy, self.w_shape, *self._args())

    def _args(self):
        return self.stride, self.pad, self.dilation, self.groups, self.layout

    def backward(self, g):
        x, gy = self.saved
        g = self.xp.ascontiguousarray(g)
        need = self.needs_input_grad
        return (fresh(conv_backward_data(g, gy, x.shape, *self._args())) if need[0] else None,
                fresh(conv_forward(x, g, *self._args())) if need[1] else None)

    def backward_graph(self, g):
        x, gy = self.inputs
        need = self.needs_input_grad
        gx = ConvTranspose2d.apply(gy, g, None, stride=self.stride, dilation=self.dilation,
                                   groups=self.groups, begin=self.pad, size=_spatial(self, x),
                                   layout=self.layout, nchw=self.nchw) if need[0] else None
        ggy = Conv2d.apply(x, g, None, stride=self.stride, pad=self.pad, dilation=self.dilation,
                           groups=self.groups, layout=self.layout, nchw=self.nchw) \
            if need[1] else None
        return gx, ggy


def transposed_size(in_size, k, stride, padding, output_padding, dilation):
    return (in_size - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1


@nchw_views
class ConvTranspose2d(_AddsIntoGrad):
    """y = conv^T(x, W) + b, the window [begin, begin + size) of the full (unpadded) transposed
    convolution, zeros past its end. W is (Cin, Cout/G, R, S) as PyTorch keeps it -- which is
    the conv filter (K = Cin, C = Cout/G) whose backward-data this is.

    PyTorch's (padding p, output_padding op) is begin = p, size = full - 2p + op; when op < stride
    that window is exactly cuDNN's backward-data with pad p, so no crop is needed.
    Keras' asymmetric 'same' padding is a window too."""

    def forward(self, x, W, b=None):
        self.spatial = (1, 2) if self.layout == "NHWC" else (2, 3)
        self.full = [(x.shape[a] - 1) * self.stride[i] + self.dilation[i] * (W.shape[a] - 1) + 1
                     for i, a in enumerate(self.spatial)]
        # a plain padded backward-data when the window ends `begin` short of the full end, give
        # or take less than one stride of output padding (backward-data's own geometry)
        self.direct = all(0 <= self.size[i] - (self.full[i] - 2 * self.begin[i]) < self.stride[i]
                          for i in range(2))
        N, Cout = x.shape[0], W.shape[-1 if self.layout == "NHWC" else 1] * self.groups
        self.y_shape = self._shape(N, Cout, self.size)
        x = self._reads(x, packed_only=True)      # backward-data's dy is packed
        self.saved = x, W
        if self.direct:
            y = conv_backward_data(W, x, self.y_shape, self.stride, tuple(self.begin),
                                   self.dilation, self.groups, self.layout)
        else:
            y = self._window(conv_backward_data(W, x, self._shape(N, Cout, self.full),
                                                self.stride, (0, 0), self.dilation, self.groups,
                                                self.layout))
        if b is not None:
            y += b.reshape(_bias_shape(b.shape[0], y.ndim, self.layout))
        return y

    def composite(self, x, W, b=None):
        """The full transposed convolution (a direct one) cut / zero-extended to the window, in
        differentiable ops: create_graph's backward where the window is not direct (an
        output_padding of a stride or more, Keras' 'same')."""
        from .shape import GetItem, Pad
        channel, axes = _given_axes(self)
        y = ConvTranspose2d.apply(x, W, None, stride=self.stride, dilation=self.dilation,
                                  groups=self.groups, begin=(0, 0), size=tuple(self.full),
                                  layout=self.layout, nchw=self.nchw)
        window, full = self._slices()
        cut = [slice(None)] * 4
        widths = [(0, 0)] * 4
        for i, (a, op_axis) in enumerate(zip(axes, self.spatial)):
            cut[a] = full[op_axis]
            kept = window[op_axis].stop
            widths[a] = (0, self.size[i] - kept)
        y = Pad.apply(GetItem.apply(y, index=tuple(cut)), pad_width=tuple(widths),
                      mode="constant", value=0)
        if b is not None:
            y = y + b.reshape(tuple(-1 if d == channel else 1 for d in range(4)))
        return y

    def _shape(self, N, C, spatial):
        return (N, *spatial, C) if self.layout == "NHWC" else (N, C, *spatial)

    def _slices(self):
        """(window slices, full slices) of the part of the window the full result covers."""
        window, full = [slice(None)] * 4, [slice(None)] * 4
        for i, axis in enumerate(self.spatial):
            lo, hi = self.begin[i], min(self.begin[i] + self.size[i], self.full[i])
            window[axis], full[axis] = slice(0, max(0, hi - lo)), slice(lo, max(lo, hi))
        return tuple(window), tuple(full)

    def _window(self, y_full):
        """Crop / zero-extend the full result to [begin, begin + size)."""
        y = self.xp.zeros(self.y_shape, dtype=y_full.dtype)
        window, full = self._slices()
        y[window] = y_full[full]
        return y

    def _unwindow(self, gy):
        """The adjoint of _window: gy put back in the full extent."""
        shape = list(gy.shape)
        for i, axis in enumerate(self.spatial):
            shape[axis] = self.full[i]
        g = self.xp.zeros(shape, dtype=gy.dtype)
        window, full = self._slices()
        g[full] = gy[window]
        return g

    def backward(self, gy):
        x, W = self.saved
        gy = self.xp.ascontiguousarray(gy)
        gb = None
        if len(self.needs_input_grad) > 2 and self.needs_input_grad[2]:
            gb = _sum_bias(gy, self.layout, self.gpu)
        if self.direct:
            pad = tuple(self.begin)
        else:
            gy, pad = self._unwindow(gy), (0, 0)
        args = self.stride, pad, self.dilation, self.groups, self.layout
        # the forward was backward-data with filter W, so gx is conv forward of gy, and gW is
        # backward-filter with the roles of input (gy) and output gradient (x) swapped
        gx = conv_forward(gy, W, *args) if self.needs_input_grad[0] else None
        gW = conv_backward_filter(gy, x, W.shape, *args, into=self._into(1)) \
            if self.needs_input_grad[1] else None
        return fresh(gx), fresh(gW), fresh(gb)      # each made here (see tensor.Fresh)

    def backward_graph(self, gy):
        """create_graph: gx the convolution of gy (Conv2d), gW a ConvFilterGrad with the roles
        of input (gy) and output gradient (x) swapped, gb gy's channel sums. Only the direct
        window (PyTorch's padding and output_padding; not a cropped Keras 'same')."""
        if not self.direct:
            from ..autograd import composite_grads
            return composite_grads(self, (gy,))
        x, W = self.inputs[:2]
        need = self.needs_input_grad
        gx = Conv2d.apply(gy, W, None, stride=self.stride, pad=tuple(self.begin),
                          dilation=self.dilation, groups=self.groups, layout=self.layout,
                          nchw=self.nchw) if need[0] else None
        gW = ConvFilterGrad.apply(gy, x, w_shape=_op_shape(self, W), stride=self.stride,
                                  pad=tuple(self.begin), dilation=self.dilation,
                                  groups=self.groups, layout=self.layout, nchw=self.nchw) \
            if need[1] else None
        return gx, gW, _bias_grad_graph(self, gy)

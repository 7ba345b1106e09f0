"""Recurrent ops. `LSTMCell` and `GRUCell`: one step, two cuBLASLt / NumPy products (the biases
folded into them) and one fused elementwise kernel each way on the GPU. `CudnnRNN`: a whole
(multi-layer, bidirectional, variable-length) LSTM, GRU or Elman RNN as cuDNN's RNN forward /
backward. (The Elman cell, tanh / relu of two Linear products, is composed of other ops in
layers.rnn.)

LSTM, gate order in the 4H rows: i, f, g, o (PyTorch's and cuDNN's).
    gates = x W_ih^T + b_ih + h W_hh^T + b_hh
    c' = f * c + i * g,   h' = o * tanh(c')
GRU, gate order in the 3H rows: r, z, n (PyTorch's and cuDNN's). The input's and the state's
products stay apart, as r multiplies the state's part of n, its bias included:
    a = x W_ih^T + b_ih,   s = h W_hh^T + b_hh
    r = sigmoid(a_r + s_r),  z = sigmoid(a_z + s_z),  n = tanh(a_n + r * s_n)
    h' = (h - n) * z + n     (= (1 - z) * n + z * h)
"""
import numpy as np

from ..backend import cupy
from ..tensor import Deferred, Function
from .linalg import mm

# F: the type the cell computes in -- float for float16 / bfloat16 / float32 data, double for
# float64 -- so gates and the new cell state are rounded to T only where they are stored (as
# torch's fused cell, and as the NumPy path, which computes half data in float32)
_CELL_FWD = r"""
    const long long b = i / H, j = i % H, row = b * 4 * H;
    F gi = 1 / (1 + exp(-(F)A[row + j]));
    F gf = 1 / (1 + exp(-(F)A[row + H + j]));
    F gg = tanh((F)A[row + 2 * H + j]);
    F go = 1 / (1 + exp(-(F)A[row + 3 * H + j]));
    F cn = gf * (F)c + gi * gg;
    F tcn = tanh(cn);
    c_new = (T)cn;
    tc = (T)tcn;
    h_new = (T)(go * tcn);
    G[row + j] = (T)gi; G[row + H + j] = (T)gf; G[row + 2 * H + j] = (T)gg;
    G[row + 3 * H + j] = (T)go;
"""

_CELL_BWD = r"""
    const long long b = i / H, j = i % H, row = b * 4 * H;
    F gi = (F)G[row + j], gf = (F)G[row + H + j], gg = (F)G[row + 2 * H + j],
      go = (F)G[row + 3 * H + j], t = (F)tc, h_ = (F)dh;
    F dct = (F)dc + h_ * go * (1 - t * t);
    dA[row + j] = (T)(dct * gg * gi * (1 - gi));
    dA[row + H + j] = (T)(dct * (F)c * gf * (1 - gf));
    dA[row + 2 * H + j] = (T)(dct * gi * (1 - gg * gg));
    dA[row + 3 * H + j] = (T)(h_ * t * go * (1 - go));
    dc_prev = (T)(dct * gf);
"""

# GRU: G (B, 4H) keeps r, z, n and s_n (the state's part of n, bias included) for backward
_GRU_FWD = r"""
    const long long b = i / H, j = i % H, row = b * 3 * H, g = b * 4 * H;
    F sn = (F)S[row + 2 * H + j];
    F r = 1 / (1 + exp(-((F)S[row + j] + (F)A[row + j])));
    F z = 1 / (1 + exp(-((F)S[row + H + j] + (F)A[row + H + j])));
    F n = tanh((F)A[row + 2 * H + j] + sn * r);
    h_new = (T)(((F)h - n) * z + n);
    G[g + j] = (T)r; G[g + H + j] = (T)z; G[g + 2 * H + j] = (T)n; G[g + 3 * H + j] = (T)sn;
"""

_GRU_BWD = r"""
    const long long b = i / H, j = i % H, row = b * 3 * H, g = b * 4 * H;
    F r = (F)G[g + j], z = (F)G[g + H + j], n = (F)G[g + 2 * H + j], sn = (F)G[g + 3 * H + j],
      d = (F)dh;
    F dn = d * (1 - z) * (1 - n * n);
    F dr = dn * sn * (1 - r) * r;
    F dz = d * ((F)h - n) * (1 - z) * z;
    dA[row + j] = (T)dr; dA[row + H + j] = (T)dz; dA[row + 2 * H + j] = (T)dn;
    dS[row + j] = (T)dr; dS[row + H + j] = (T)dz; dS[row + 2 * H + j] = (T)(dn * r);
    dh_prev = (T)(d * z);
"""


def _compute_type(dtype):
    return "double" if dtype == np.float64 else "float"


def _kernel(name, in_params, out_params, body, dtype):
    """The cell's kernel for data of `dtype` (its compute type F fixed in the source)."""
    F = _compute_type(dtype)
    key = f"{name}_{F}"
    cache = _kernel.__dict__.setdefault("cache", {})
    if key not in cache:
        cache[key] = cupy().ElementwiseKernel(in_params, out_params, body, key,
                                              preamble=f"typedef {F} F;")
    return cache[key]


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


class LSTMCell(Function):
    """inputs x (B, I), h (B, P), c (B, H), W_ih (4H, I), W_hh (4H, P), b_ih, b_hh (4H,) or None
    (P = H, or an LSTM's projection size); outputs h' (B, H), c' (B, H)."""
    n_outputs = 2

    def forward(self, x, h, c, W_ih, W_hh, b_ih=None, b_hh=None):
        A = mm(h, W_hh.T, b_hh, out=mm(x, W_ih.T, b_ih))      # two products, biases folded in
        H = c.shape[1]          # (h may be narrower: an LSTM's projection)
        if self.gpu:
            cp = cupy()
            G = cp.empty_like(A)
            h_new, c_new, tc, _ = _kernel("lstm_cell_fwd", "raw T A, T c, int64 H",
                                          "T h_new, T c_new, T tc, raw T G", _CELL_FWD,
                                          A.dtype)(
                A, c, np.int64(H), cp.empty_like(c), cp.empty_like(c), cp.empty_like(c), G)
        else:
            gi, gf, go = (_sigmoid(A[:, k * H:(k + 1) * H]) for k in (0, 1, 3))
            gg = np.tanh(A[:, 2 * H:3 * H])
            c_new = gf * c + gi * gg
            tc = np.tanh(c_new)
            h_new = go * tc
            G = np.concatenate([gi, gf, gg, go], axis=1)
        self.saved = x, h, c, W_ih, W_hh, G, tc
        return h_new, c_new

    def composite(self, x, h, c, W_ih, W_hh, b_ih=None, b_hh=None):
        """The cell in other ops (create_graph), the module docstring's formulas."""
        from .. import functional as F
        A = F.linear(x, W_ih, b_ih) + F.linear(h, W_hh, b_hh)
        i, f, g, o = (A[:, k * c.shape[1]:(k + 1) * c.shape[1]] for k in range(4))
        c_new = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
        return F.sigmoid(o) * F.tanh(c_new), c_new

    def backward(self, dh, dc):
        x, h, c, W_ih, W_hh, G, tc = self.saved
        xp = self.xp
        dh = xp.zeros_like(tc) if dh is None else dh
        dc = xp.zeros_like(tc) if dc is None else dc
        H = c.shape[1]          # (h may be narrower: an LSTM's projection)
        if self.gpu:
            dA = xp.empty_like(G)
            _, dc_prev = _kernel("lstm_cell_bwd", "raw T G, T tc, T c, T dh, T dc, int64 H",
                                 "raw T dA, T dc_prev", _CELL_BWD, G.dtype)(
                G, tc, c, dh, dc, np.int64(H), dA, xp.empty_like(c))
        else:
            gi, gf, gg, go = (G[:, k * H:(k + 1) * H] for k in range(4))
            dct = dc + dh * go * (1 - tc * tc)
            dA = np.concatenate([dct * gg * gi * (1 - gi), dct * c * gf * (1 - gf),
                                 dct * gi * (1 - gg * gg), dh * tc * go * (1 - go)], axis=1)
            dc_prev = dct * gf
        need = self.needs_input_grad              # always 7 inputs; absent biases are None
        # the weights' and biases' gradients are Deferred: summed over every step the cell ran
        # by one GEMM (one column sum) at the end of backward
        return (mm(dA, W_ih) if need[0] else None, mm(dA, W_hh) if need[1] else None,
                dc_prev if need[2] else None, Deferred(dA, x) if need[3] else None,
                Deferred(dA, h) if need[4] else None, Deferred(dA) if need[5] else None,
                Deferred(dA) if need[6] else None)


class GRUCell(Function):
    """inputs x (B, I), h (B, H), W_ih (3H, I), W_hh (3H, H), b_ih, b_hh (3H,) or None; output h'.
    Formulas and the order of the products' sums as torch's GRU cell (the module docstring)."""

    def forward(self, x, h, W_ih, W_hh, b_ih=None, b_hh=None):
        A, S = mm(x, W_ih.T, b_ih), mm(h, W_hh.T, b_hh)
        H = h.shape[1]
        if self.gpu:
            cp = cupy()
            G = cp.empty((h.shape[0], 4 * H), dtype=A.dtype)
            # (outputs C-ordered whatever h's layout: dh_prev takes a product with out=, which
            # cuBLASLt writes C-ordered, and h_new is the next step's h)
            h_new, _ = _kernel("gru_cell_fwd", "raw T A, raw T S, T h, int64 H",
                               "T h_new, raw T G", _GRU_FWD, A.dtype)(
                A, S, h, np.int64(H), cp.empty(h.shape, h.dtype), G)
        else:
            r = _sigmoid(S[:, :H] + A[:, :H])
            z = _sigmoid(S[:, H:2 * H] + A[:, H:2 * H])
            sn = S[:, 2 * H:]
            n = np.tanh(A[:, 2 * H:] + sn * r)
            h_new = (h - n) * z + n
            G = np.concatenate([r, z, n, sn], axis=1)
        self.saved = x, h, W_ih, W_hh, G
        return h_new

    def composite(self, x, h, W_ih, W_hh, b_ih=None, b_hh=None):
        """The cell in other ops (create_graph), the module docstring's formulas."""
        from .. import functional as F
        a, s = F.linear(x, W_ih, b_ih), F.linear(h, W_hh, b_hh)
        H = h.shape[1]
        r = F.sigmoid(a[:, :H] + s[:, :H])
        z = F.sigmoid(a[:, H:2 * H] + s[:, H:2 * H])
        n = F.tanh(a[:, 2 * H:] + r * s[:, 2 * H:])
        return (h - n) * z + n

    def backward(self, dh):
        x, h, W_ih, W_hh, G = self.saved
        H = h.shape[1]
        if self.gpu:
            xp = self.xp
            dA, dS = xp.empty((h.shape[0], 3 * H), G.dtype), xp.empty((h.shape[0], 3 * H), G.dtype)
            _, _, dh_prev = _kernel("gru_cell_bwd", "raw T G, T h, T dh, int64 H",
                                    "raw T dA, raw T dS, T dh_prev", _GRU_BWD, G.dtype)(
                G, h, dh, np.int64(H), dA, dS, xp.empty(h.shape, h.dtype))
        else:
            r, z, n, sn = (G[:, k * H:(k + 1) * H] for k in range(4))
            dn = dh * (1 - z) * (1 - n * n)
            dr = dn * sn * (1 - r) * r
            dz = dh * (h - n) * (1 - z) * z
            dA = np.concatenate([dr, dz, dn], axis=1)
            dS = np.concatenate([dr, dz, dn * r], axis=1)
            dh_prev = dh * z
        need = self.needs_input_grad              # always 6 inputs; absent biases are None
        return (mm(dA, W_ih) if need[0] else None,
                mm(dS, W_hh, out=dh_prev) if need[1] else None,
                Deferred(dA, x) if need[2] else None, Deferred(dS, h) if need[3] else None,
                Deferred(dA) if need[4] else None, Deferred(dS) if need[5] else None)


class CudnnRNN(Function):
    """A whole LSTM, GRU or Elman RNN in cuDNN. Params: rnn (cudnnlite.rnn.RNNDescriptor, whose
    mode says which), names (one pseudo-layer's parameter names, in the order they come),
    lengths (host ints or None), batch_first, training. Inputs: x, hx, cx (None: zeros; cx None
    for all but an LSTM), then for every pseudo-layer (layer * D + direction) its parameters
    (weight_ih, weight_hh[, bias_ih, bias_hh][, weight_hr]). Outputs: y, hy, and cy for an
    LSTM."""

    def forward_gpu(self, x, hx, cx, *weights):
        from cudnnlite import rnn as crnn
        cp = cupy()
        layout = crnn.weight_layout(self.rnn)
        names = self.names
        if len(weights) != len(names) * len(layout):
            raise ValueError(f"CudnnRNN: {len(weights)} parameters for {len(layout)} "
                             f"pseudo-layers of {names}")
        space = cp.empty(crnn.weight_space_size(self.rnn) // x.itemsize, dtype=x.dtype)
        self.slots = []
        for p, entries in enumerate(layout):
            for k, name in enumerate(names):
                start, shape = entries[name]
                w = weights[p * len(names) + k]
                if tuple(w.shape) != tuple(shape):     # (never copied in by element count)
                    raise ValueError(f"CudnnRNN: pseudo-layer {p}'s {name} is {w.shape}; "
                                     f"cuDNN's weight space holds it as {tuple(shape)}")
                n = int(np.prod(shape))
                space[start:start + n] = w.reshape(-1)
                self.slots.append((start, n, shape))
        # cuDNN's backward needs a training-mode forward (its reserve space): take one whenever
        # a gradient will be asked for, in eval mode too (dropout is off there anyway)
        needs_grad = getattr(self, "needs_input_grad", None) is not None
        y, hy, cy, self.saved = crnn.forward(self.rnn, x, space, hx, cx, self.lengths,
                                             training=self.training or needs_grad,
                                             batch_first=self.batch_first)
        return (y, hy) if cy is None else (y, hy, cy)

    def backward_graph(self, *grads):
        raise NotImplementedError(
            "CudnnRNN: no double backward (create_graph=True) is written for cuDNN's RNN (the "
            "GPU path of nn.LSTM / GRU / RNN); the cells (nn.LSTMCell, GRUCell, RNNCell) have "
            "one on both paths, the layers on the CPU")

    def backward(self, gy, ghy, gcy=None):
        from cudnnlite import rnn as crnn
        # backward reads the very arrays the forward handed to cuDNN (packed copies of strided
        # inputs included): cudnnlite keeps them in its `saved` record
        gy = cupy().zeros_like(self.saved.y) if gy is None else gy
        dx, dhx, dcx, dw = crnn.backward(self.saved, gy, ghy, gcy)
        grads = [dw[start:start + n].reshape(shape) for start, n, shape in self.slots]
        need = self.needs_input_grad
        return (dx if need[0] else None, dhx if need[1] else None, dcx if need[2] else None,
                *grads)

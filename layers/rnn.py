"""LSTM and LSTMCell with PyTorch's parameter names, shapes, gate order (i, f, g, o) and init.

The GPU path of LSTM is cuDNN's RNN (one call each way for the whole stack); its NumPy path is
the textbook recurrence, written with the LSTMCell op one step at a time -- the reference the
cuDNN path is tested against. Variable lengths (`lengths`, like a packed sequence): outputs past
a sequence's length are zero and the final states are taken at each sequence's own end.
"""
import math
import operator

import numpy as np

from . import functional as F
from . import init
from .backend import cupy, is_gpu, to_device, xp_of
from .module import Module, Parameter
from .ops import rnn as _rnn
from .tensor import Tensor


def lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One LSTM step: (h', c')."""
    return _rnn.LSTMCell.apply(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh)


class LSTMCell(Module):
    """torch.nn.LSTMCell: forward(x (B, I), (h, c) or None) -> (h', c'). On the GPU: two cuBLAS
    matmuls and one fused elementwise kernel each way (faster than cuDNN's RNN with T = 1:
    tools/bench_lstm.py)."""

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = Parameter(np.empty((4 * hidden_size, input_size), np.float32))
        self.weight_hh = Parameter(np.empty((4 * hidden_size, hidden_size), np.float32))
        if bias:
            self.bias_ih = Parameter(np.empty(4 * hidden_size, np.float32))
            self.bias_hh = Parameter(np.empty(4 * hidden_size, np.float32))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        stdv = 1 / math.sqrt(hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def forward(self, x, hx=None):
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"LSTMCell: expected input (B, {self.input_size}), got {x.shape}")
        if hx is None:
            z = _zeros(x, (x.shape[0], self.hidden_size))
            hx = (z, z)
        return lstm_cell(x, hx[0], hx[1], self.weight_ih, self.weight_hh, self.bias_ih,
                         self.bias_hh)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


def _zeros(like, shape):
    xp = np if like.device == "cpu" else cupy()
    return Tensor(xp.zeros(shape, dtype=like.dtype))


class LSTM(Module):
    """torch.nn.LSTM (no proj_size): forward(x, hx=None, lengths=None) -> (y, (h_n, c_n)).
    x (T, B, I), or (B, T, I) with batch_first; lengths: one int per batch item (a packed
    sequence's lengths), y zero past them. h_n, c_n (num_layers * D, B, H).

    lengths as host ints (a list, a NumPy array) run cuDNN's variable-length RNN, which takes
    them on the host. lengths as a Tensor stay where they are, nothing is read back (so a
    training step with them can be captured in a CUDA graph for any lengths of a shape): each
    direction runs over the whole padded length -- the forward one is causal, so its outputs
    before each length do not see the padding after; the reverse one runs on each sequence
    reversed within its length (F.reverse_padded) and is reversed back -- and y is zeroed past
    the lengths: the same y as the packed sequence's. The final states then are not computed
    (they would need each sequence's own last step): forward returns (y, None). Device lengths
    are not checked (that would read them back): each must be in 1..T."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        D = 2 if bidirectional else 1
        stdv = 1 / math.sqrt(hidden_size)
        self._flat_names = []
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else hidden_size * D
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                shapes = [("weight_ih", (4 * hidden_size, in_size)),
                          ("weight_hh", (4 * hidden_size, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (4 * hidden_size,)), ("bias_hh", (4 * hidden_size,))]
                for name, shape in shapes:
                    p = Parameter(np.empty(shape, np.float32))
                    init.uniform_(p, -stdv, stdv)
                    setattr(self, name + sfx, p)
                    self._flat_names.append(name + sfx)
        self._rnn_descs = {}

    @property
    def all_weights(self):
        """Parameters in cuDNN pseudo-layer order (layer, direction), each (W_ih, W_hh[, b, b])."""
        return [getattr(self, n) for n in self._flat_names]

    def flatten_parameters(self):
        """torch's: gathers the weights into cuDNN's one weight buffer. Here each forward on a
        GPU copies them into cuDNN's weight space itself, so there is nothing to do; kept so
        torch code that calls it (NVIDIA's Tacotron 2 does) runs unchanged."""

    def forward(self, x, hx=None, lengths=None):
        T_axis, B_axis = (1, 0) if self.batch_first else (0, 1)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"LSTM: expected input (T, B, {self.input_size}) "
                             f"{'(batch_first: B, T, I)' if self.batch_first else ''}, "
                             f"got {x.shape}")
        T, B = x.shape[T_axis], x.shape[B_axis]
        on_device = isinstance(lengths, Tensor)
        if on_device:
            if lengths.device != x.device or lengths.shape != (B,) or \
                    lengths.dtype.kind not in "iu":
                raise ValueError(f"LSTM: Tensor lengths must be {B} integers on {x.device}, got "
                                 f"{lengths.dtype} {lengths.shape} on {lengths.device}")
            # their values are checked where that reads nothing back: on the host. On a GPU
            # they are the caller's promise (1..T each), as CUDA-graph capture needs
            if not is_gpu(lengths.data) and (lengths.data.min() < 1 or lengths.data.max() > T):
                raise ValueError(f"LSTM: lengths {lengths.data.tolist()} must hold one value in "
                                 f"1..{T} for each of the {B} sequences")
        elif lengths is not None:
            try:        # (a float length is refused, not truncated)
                lengths = [operator.index(n) for n in lengths]
            except TypeError:
                raise TypeError(f"LSTM: lengths must be integers, got {list(lengths)}") from None
            if len(lengths) != B or max(lengths) > T or min(lengths) < 1:
                raise ValueError(f"LSTM: lengths {lengths} must hold one value in 1..{T} for "
                                 f"each of the {B} sequences")
        D = 2 if self.bidirectional else 1
        state_shape = (self.num_layers * D, B, self.hidden_size)
        h0, c0 = (None, None) if hx is None else hx
        for name, s in (("h0", h0), ("c0", c0)):
            if s is not None and tuple(s.shape) != state_shape:
                raise ValueError(f"LSTM: {name} has shape {tuple(s.shape)}, expected {state_shape}")
        if on_device:
            return self._forward_lengths_on_device(x, h0, c0, lengths), None
        if x.device != "cpu":
            return self._forward_cudnn(x, h0, c0, lengths)
        return self._forward_reference(x, h0, c0, lengths)

    def _forward_lengths_on_device(self, x, h0, c0, lengths):
        """y of the packed sequence with lengths a Tensor (see the class docstring)."""
        if self.batch_first:
            x = F.transpose(x, 1, 0, 2)                  # (T, B, I)
        T = x.shape[0]
        n = lengths.data
        xp = xp_of(n)
        valid = Tensor((xp.arange(T)[:, None] < n[None, :]).astype(x.dtype)[:, :, None])
        D = 2 if self.bidirectional else 1
        h0s = F.unstack(h0, 0) if h0 is not None else None
        c0s = F.unstack(c0, 0) if c0 is not None else None
        names = iter(self._flat_names)
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                w = [getattr(self, next(names)) for _ in range(4 if self.bias else 2)]
                k = layer * D + d
                h = h0s[k] if h0s is not None else None
                c = c0s[k] if c0s is not None else None
                inp = F.reverse_padded(layer_in, n) if d else layer_in
                y = self._one_direction(inp, h, c, w)
                outs.append(F.reverse_padded(y, n) if d else y)
            layer_in = (outs[0] if D == 1 else F.concat(outs, axis=2)) * valid
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout)
        return F.transpose(layer_in, 1, 0, 2) if self.batch_first else layer_in

    def _one_direction(self, x, h, c, w):
        """(T, B, H) outputs of one unidirectional layer over the whole of x (T, B, I), from
        states h, c (B, H) or zeros; w = W_ih, W_hh[, b_ih, b_hh]. cuDNN's RNN on a device,
        LSTMCell steps on the CPU."""
        if x.device != "cpu":
            return self._one_direction_cudnn(x, h, c, w)
        return self._one_direction_cells(x, h, c, w)

    def _one_direction_cudnn(self, x, h, c, w):
        state = [None if s is None else F.reshape(s, 1, *s.shape) for s in (h, c)]
        rnn = self._descriptor(x.dtype, input_size=x.shape[2], num_layers=1,
                               bidirectional=False)
        y, _, _ = _rnn.CudnnLSTM.apply(x, *state, *w, rnn=rnn, lengths=None,
                                       batch_first=False, training=self.training)
        return y

    def _one_direction_cells(self, x, h, c, w):
        zero = _zeros(x, (x.shape[1], self.hidden_size))
        h = zero if h is None else h
        c = zero if c is None else c
        w = w + [None] * (4 - len(w))
        ys = []
        for xt in F.unstack(x, 0):
            h, c = lstm_cell(xt, h, c, *w)
            ys.append(h)
        return F.stack(ys, 0)

    # ---- GPU: cuDNN ---------------------------------------------------------------------------
    def _descriptor(self, dtype, input_size=None, num_layers=None, bidirectional=None):
        """The cuDNN RNN descriptor of this LSTM (or of one layer / direction of it)."""
        from cudnnlite import conv, rnn
        from cudnnlite.enums import MathType, RNNBiasMode, RNNMode
        input_size = self.input_size if input_size is None else input_size
        num_layers = self.num_layers if num_layers is None else num_layers
        bidirectional = self.bidirectional if bidirectional is None else bidirectional
        use_dropout = self.training and self.dropout > 0 and num_layers > 1
        key = (cupy().cuda.runtime.getDevice(), str(dtype), conv.settings.allow_tf32, use_dropout,
               input_size, num_layers, bidirectional)
        desc = self._rnn_descs.get(key)
        if desc is None:
            float32 = str(dtype) == "float32"
            math = MathType.FMA if float32 and not conv.settings.allow_tf32 else MathType.DEFAULT
            drop = rnn.DropoutDescriptor(self.dropout, seed=0) if use_dropout else None
            desc = self._rnn_descs[key] = rnn.RNNDescriptor(
                RNNMode.LSTM, input_size, self.hidden_size, num_layers,
                bidirectional=bidirectional,
                bias_mode=RNNBiasMode.DOUBLE_BIAS if self.bias else RNNBiasMode.NO_BIAS,
                dtype=dtype, math_type=math, dropout=drop)
        return desc

    def _forward_cudnn(self, x, h0, c0, lengths):
        y, hy, cy = _rnn.CudnnLSTM.apply(x, h0, c0, *self.all_weights,
                                         rnn=self._descriptor(x.dtype), lengths=lengths,
                                         batch_first=self.batch_first, training=self.training)
        return y, (hy, cy)

    # ---- CPU: the recurrence, one LSTMCell op per step ----------------------------------------
    def _forward_reference(self, x, h0, c0, lengths):
        if self.batch_first:
            x = F.transpose(x, 1, 0, 2)                  # (T, B, I)
        T, B = x.shape[0], x.shape[1]
        D = 2 if self.bidirectional else 1
        masks = None
        if lengths is not None and min(lengths) < T:
            steps = np.arange(T)[:, None] < np.asarray(lengths)[None, :]      # (T, B)
            masks = [(Tensor(to_device(m[:, None].astype(x.dtype), x.device)),
                      Tensor(to_device(1 - m[:, None].astype(x.dtype), x.device))) for m in steps]
        h0s = F.unstack(h0, 0) if h0 is not None else None
        c0s = F.unstack(c0, 0) if c0 is not None else None
        zero = _zeros(x, (B, self.hidden_size))
        layer_in = x
        h_n, c_n = [], []
        names = iter(self._flat_names)
        for layer in range(self.num_layers):
            xs = F.unstack(layer_in, 0)
            outs = []
            for d in range(D):
                w = [getattr(self, next(names)) for _ in range(4 if self.bias else 2)]
                w += [None] * (4 - len(w))
                k = layer * D + d
                h = h0s[k] if h0s is not None else zero
                c = c0s[k] if c0s is not None else zero
                ys = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    h_new, c_new = lstm_cell(xs[t], h, c, *w)
                    if masks is None:
                        h, c, ys[t] = h_new, c_new, h_new
                    else:           # past a sequence's end: keep its state, output zero
                        m, keep = masks[t]
                        h, c, ys[t] = h_new * m + h * keep, c_new * m + c * keep, h_new * m
                outs.append(F.stack(ys, 0))
                h_n.append(h)
                c_n.append(c)
            layer_in = outs[0] if D == 1 else F.concat(outs, axis=2)
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout)
        y = F.transpose(layer_in, 1, 0, 2) if self.batch_first else layer_in
        return y, (F.stack(h_n, 0), F.stack(c_n, 0))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

"""The recurrent layers -- LSTM, GRU, RNN (Elman, tanh or relu) and their cells -- with
PyTorch's parameter names, shapes, gate orders (LSTM i, f, g, o; GRU r, z, n) and init.

The GPU path of LSTM / GRU / RNN is cuDNN's RNN (one call each way for the whole stack); their
NumPy path is the textbook recurrence, written with the cell ops one step at a time -- the
reference the cuDNN path is tested against. Variable lengths (`lengths`, like a packed
sequence): outputs past a sequence's length are zero and the final states are taken at each
sequence's own end.
"""
import math
import numbers
import operator
import warnings

import numpy as np

from . import functional as F
from . import init
from .backend import cupy, default_float, is_gpu, to_device, xp_of
from .module import Module, Parameter, options_repr
from .ops import rnn as _rnn
from .rnn_utils import PackedSequence
from .tensor import Tensor

NONLINEARITIES = ("tanh", "relu")
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One LSTM step: (h', c')."""
    F._check_float("lstm_cell", x, h, c, weight_ih, weight_hh, bias_ih, bias_hh)
    return _rnn.LSTMCell.apply(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh)


def gru_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One GRU step: h'."""
    F._check_float("gru_cell", x, h, weight_ih, weight_hh, bias_ih, bias_hh)
    return _rnn.GRUCell.apply(x, h, weight_ih, weight_hh, bias_ih, bias_hh)


def rnn_tanh_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One Elman step: tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    return F.tanh(F.linear(x, weight_ih, bias_ih) + F.linear(h, weight_hh, bias_hh))


def rnn_relu_cell(x, h, weight_ih, weight_hh, bias_ih=None, bias_hh=None):
    """One Elman step: relu(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    return F.relu(F.linear(x, weight_ih, bias_ih) + F.linear(h, weight_hh, bias_hh))


_CELLS = {"GRU": gru_cell, "RNN_TANH": rnn_tanh_cell, "RNN_RELU": rnn_relu_cell}


def _step(mode, x, states, w):
    """One step of a mode's cell: the new states, (h, c) for an LSTM, (h,) otherwise; w = W_ih,
    W_hh, b_ih, b_hh, W_hr (None where absent; W_hr: an LSTM's projection, h = h W_hr^T)."""
    if mode == "LSTM":
        h, c = lstm_cell(x, *states, *w[:4])
        return (h if w[4] is None else F.linear(h, w[4])), c
    return (_CELLS[mode](x, states[0], *w[:4]),)


def _sizes(kind, input_size, hidden_size):
    for name, n in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool):
            raise TypeError(f"{kind}: {name} should be of type int, got: {type(n).__name__}")
    if hidden_size <= 0 or input_size < 0:
        raise ValueError(f"{kind}: hidden_size must be greater than zero and input_size not "
                         f"negative, got input_size={input_size}, hidden_size={hidden_size}")


def _nonlinearity_mode(kind, nonlinearity):
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"{kind}: unknown nonlinearity {nonlinearity!r}. Select from 'tanh' or "
                         f"'relu'.")
    return "RNN_" + nonlinearity.upper()


class RNNCellBase(Module):
    """torch.nn's cells: weight_ih (gH, I), weight_hh (gH, H), bias_ih, bias_hh (gH,), every one
    uniform in +-1/sqrt(H); forward(x (B, I), state or None (zeros))."""

    def __init__(self, mode, input_size, hidden_size, bias):
        super().__init__()
        _sizes(type(self).__name__, input_size, hidden_size)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = GATES[mode]
        self.weight_ih = Parameter(np.empty((g * hidden_size, input_size), default_float()))
        self.weight_hh = Parameter(np.empty((g * hidden_size, hidden_size), default_float()))
        if bias:
            self.bias_ih = Parameter(np.empty(g * hidden_size, default_float()))
            self.bias_hh = Parameter(np.empty(g * hidden_size, default_float()))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        stdv = 1 / math.sqrt(hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _checked(self, x, states):
        """The state arrays, zeros for None, after checking shapes against x (B, I)."""
        kind = type(self).__name__
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"{kind}: expected input (B, {self.input_size}), got {x.shape}")
        want = (x.shape[0], self.hidden_size)
        out = []
        for name, s in states:
            if s is None:
                s = _zeros(x, want)
            elif tuple(s.shape) != want:
                raise ValueError(f"{kind}: {name} has shape {tuple(s.shape)}, expected {want} "
                                 f"for input {x.shape}")
            out.append(s)
        return out

    def _weights(self):
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


def _cell_unbatched(cell, x, hx):
    """A cell's forward of one input x (I,) and state(s) (H,) or None: the same for a batch of
    one, squeezed back, as torch's cells take unbatched input."""
    kind = type(cell).__name__
    states = (hx,) if isinstance(hx, Tensor) else tuple(hx or ())
    for s in states:
        if s is not None and s.ndim != 1:
            raise ValueError(f"{kind}: for 1-D input, hx should also be 1-D but got "
                             f"{s.ndim}-D tensor")
    batched = [None if s is None else F.unsqueeze(s, 0) for s in states]
    if hx is not None:
        hx = batched[0] if isinstance(hx, Tensor) else tuple(batched)
    out = cell(F.unsqueeze(x, 0), hx)
    return tuple(F.squeeze(o, 0) for o in out) if isinstance(out, tuple) else F.squeeze(out, 0)


class LSTMCell(RNNCellBase):
    """torch.nn.LSTMCell: forward(x (B, I), (h, c) or None) -> (h', c'). On the GPU: two cuBLAS
    matmuls and one fused elementwise kernel each way (faster than cuDNN's RNN with T = 1:
    tools/bench_lstm.py)."""

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__("LSTM", input_size, hidden_size, bias)

    def forward(self, input, hx=None):
        if input.ndim == 1:
            return _cell_unbatched(self, input, hx)
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        h, c = self._checked(input, zip(("h", "c"), (None, None) if hx is None else hx))
        return lstm_cell(input, h, c, *self._weights())


class GRUCell(RNNCellBase):
    """torch.nn.GRUCell: forward(x (B, I), h or None) -> h'. On the GPU: two cuBLAS matmuls and
    one fused elementwise kernel each way."""

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__("GRU", input_size, hidden_size, bias)

    def forward(self, input, hx=None):
        if input.ndim == 1:
            return _cell_unbatched(self, input, hx)
        (h,) = self._checked(input, [("hx", hx)])
        return gru_cell(input, h, *self._weights())


class RNNCell(RNNCellBase):
    """torch.nn.RNNCell: h' = tanh or relu of x W_ih^T + b_ih + h W_hh^T + b_hh."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        mode = _nonlinearity_mode("RNNCell", nonlinearity)
        super().__init__(mode, input_size, hidden_size, bias)
        self._mode, self.nonlinearity = mode, nonlinearity

    def forward(self, input, hx=None):
        if input.ndim == 1:
            return _cell_unbatched(self, input, hx)
        (h,) = self._checked(input, [("hx", hx)])
        return _CELLS[self._mode](input, h, *self._weights())


def _zeros(like, shape):
    xp = np if like.device == "cpu" else cupy()
    return Tensor(xp.zeros(shape, dtype=like.dtype))


class RNNBase(Module):
    """The stacked recurrent layers (torch.nn.RNNBase, no proj_size):
    forward(x, hx=None, lengths=None) -> (y, h_n), an LSTM's (y, (h_n, c_n)).
    x (T, B, I), or (B, T, I) with batch_first; lengths: one int per batch item (a packed
    sequence's lengths), y zero past them; or x a PackedSequence (nn.utils.rnn), y then one
    too. States (num_layers * D, B, H).

    lengths as host ints (a list, a NumPy array) run cuDNN's variable-length RNN, which takes
    them on the host. lengths as a Tensor stay where they are, nothing is read back (so a
    training step with them can be captured in a CUDA graph for any lengths of a shape): each
    direction runs over the whole padded length -- the forward one is causal, so its outputs
    before each length do not see the padding after; the reverse one runs on each sequence
    reversed within its length (F.reverse_padded) and is reversed back -- and y is zeroed past
    the lengths: the same y as the packed sequence's. The final states then are not computed
    (they would need each sequence's own last step): forward returns (y, None). Device lengths
    are not checked (that would read them back): each must be in 1..T."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0):
        super().__init__()
        kind = type(self).__name__
        _sizes(kind, input_size, hidden_size)
        if not isinstance(proj_size, numbers.Integral) or proj_size < 0:
            raise ValueError(f"{kind}: proj_size should be a positive integer or zero to disable "
                             f"projections, got {proj_size!r}")
        if proj_size >= hidden_size:
            raise ValueError(f"{kind}: proj_size has to be smaller than hidden_size, got "
                             f"proj_size={proj_size}, hidden_size={hidden_size}")
        if not isinstance(num_layers, numbers.Integral) or num_layers <= 0:
            raise ValueError(f"{kind}: num_layers must be greater than zero, got {num_layers!r}")
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or \
                not 0 <= dropout <= 1:
            raise ValueError(f"{kind}: dropout should be a number in range [0, 1] representing "
                             f"the probability of an element being zeroed, got {dropout!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{kind}: dropout option adds dropout after all but last recurrent "
                          f"layer, so non-zero dropout expects num_layers greater than 1, but "
                          f"got dropout={dropout} and num_layers={num_layers}", stacklevel=3)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        out = proj_size or hidden_size         # the size of h, and of y per direction
        D = 2 if bidirectional else 1
        g = GATES[mode]
        stdv = 1 / math.sqrt(hidden_size)
        self._flat_names = []
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else out * D
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                shapes = [("weight_ih", (g * hidden_size, in_size)),
                          ("weight_hh", (g * hidden_size, out))]
                if bias:
                    shapes += [("bias_ih", (g * hidden_size,)), ("bias_hh", (g * hidden_size,))]
                if proj_size:
                    shapes += [("weight_hr", (proj_size, hidden_size))]
                for name, shape in shapes:
                    p = Parameter(np.empty(shape, default_float()))
                    init.uniform_(p, -stdv, stdv)
                    setattr(self, name + sfx, p)
                    self._flat_names.append(name + sfx)
        self._rnn_descs = {}

    @property
    def all_weights(self):
        """Parameters in cuDNN pseudo-layer order (layer, direction), each (W_ih, W_hh[, b_ih,
        b_hh][, W_hr]), torch's order."""
        return [getattr(self, n) for n in self._flat_names]

    def _names(self):
        """The parameter names of one pseudo-layer, without their suffix."""
        return ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ()) + \
            (("weight_hr",) if self.proj_size else ())

    def _directions(self):
        """For each pseudo-layer (layer, direction), its parameters as the cells take them: W_ih,
        W_hh, b_ih, b_hh, W_hr, None where absent."""
        params = iter(self.all_weights)
        per = len(self._names())
        for _ in range(self.num_layers * (2 if self.bidirectional else 1)):
            w = dict(zip(self._names(), [next(params) for _ in range(per)]))
            yield [w.get(n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                      "weight_hr")]

    def flatten_parameters(self):
        """torch's: gathers the weights into cuDNN's one weight buffer. Here each forward on a
        GPU copies them into cuDNN's weight space itself, so there is nothing to do; kept so
        torch code that calls it (NVIDIA's Tacotron 2 does) runs unchanged."""

    def _state_names(self):
        return ("h0", "c0") if self.mode == "LSTM" else ("h0",)

    def forward(self, input, hx=None, lengths=None):
        kind = type(self).__name__
        if isinstance(input, PackedSequence):    # (nn.utils.rnn.pack_padded_sequence's)
            if lengths is not None:
                raise TypeError(f"{kind}: a PackedSequence carries its own lengths; got "
                                f"lengths= as well")
            padded = input.padded if input.batch_first == self.batch_first else \
                F.transpose(input.padded, 1, 0, *range(2, input.padded.ndim))
            y, finals = self.forward(padded, hx, input.lengths)
            return PackedSequence.of(y, input.lengths, self.batch_first,
                                     input.sorted_indices), finals
        if input.ndim == 2:                      # unbatched (T, I), as torch's: a batch of one
            return self._unbatched(kind, input, hx, lengths)
        T_axis, B_axis = (1, 0) if self.batch_first else (0, 1)
        if input.ndim != 3 or input.shape[2] != self.input_size:
            raise ValueError(f"{kind}: expected input (T, B, {self.input_size})"
                             f"{' (batch_first: B, T, I)' if self.batch_first else ''}, "
                             f"got {input.shape}")
        T, B = input.shape[T_axis], input.shape[B_axis]
        if T == 0:
            raise ValueError(f"{kind}: Expected sequence length to be larger than 0 in RNN, "
                             f"got input {input.shape} (as torch)")
        on_device = isinstance(lengths, Tensor)
        if on_device:
            if lengths.device != input.device or lengths.shape != (B,) or \
                    lengths.dtype.kind not in "iu":
                raise ValueError(f"{kind}: Tensor lengths must be {B} integers on {input.device}, "
                                 f"got {lengths.dtype} {lengths.shape} on {lengths.device}")
            # their values are checked where that reads nothing back: on the host. On a GPU
            # they are the caller's promise (1..T each), as CUDA-graph capture needs
            if not is_gpu(lengths.data) and (lengths.data.min() < 1 or lengths.data.max() > T):
                raise ValueError(f"{kind}: lengths {lengths.data.tolist()} must hold one value "
                                 f"in 1..{T} for each of the {B} sequences")
        elif lengths is not None:
            try:        # (a float length is refused, not truncated)
                lengths = [operator.index(n) for n in lengths]
            except TypeError:
                raise TypeError(f"{kind}: lengths must be integers, got {list(lengths)}") \
                    from None
            if len(lengths) != B or max(lengths) > T or min(lengths) < 1:
                raise ValueError(f"{kind}: lengths {lengths} must hold one value in 1..{T} for "
                                 f"each of the {B} sequences")
        states = self._initial_states(kind, hx, B)
        F._check_float(kind, input, *states, *self.all_weights)  # (as cuDNN's RNN: one dtype)
        if on_device:
            return self._forward_lengths_on_device(input, states, lengths), None
        if input.device != "cpu":
            y, finals = self._forward_cudnn(input, states, lengths)
        else:
            y, finals = self._forward_reference(input, states, lengths)
        return y, (finals if self.mode == "LSTM" else finals[0])

    def _unbatched(self, kind, x, hx, lengths):
        """forward of one sequence x (T, I) and states (L * D, H): y (T, D * H), states
        (L * D, H), as torch's (batch_first does not apply)."""
        if lengths is not None:
            raise ValueError(f"{kind}: lengths= needs batched input, got unbatched {x.shape}")
        if hx is not None and self.mode != "LSTM" and not isinstance(hx, Tensor):
            raise TypeError(f"{kind}: hx must be a Tensor h0 (only an LSTM takes a tuple "
                            f"(h0, c0)), got {type(hx).__name__}")
        states = [hx] if isinstance(hx, Tensor) else list(hx or ())
        for name, s in zip(self._state_names(), states):
            if s is not None and s.ndim != 2:
                raise ValueError(f"{kind}: For unbatched 2-D input, {name} should also be 2-D "
                                 f"but got {s.ndim}-D tensor")
        B_axis = 0 if self.batch_first else 1
        batched = [None if s is None else F.unsqueeze(s, 1) for s in states]
        if hx is not None:
            hx = tuple(batched) if self.mode == "LSTM" else batched[0]
        y, finals = self.forward(F.unsqueeze(x, B_axis), hx)
        y = F.squeeze(y, B_axis)
        if self.mode == "LSTM":
            return y, tuple(F.squeeze(f, 1) for f in finals)
        return y, F.squeeze(finals, 1)

    def _initial_states(self, kind, hx, B):
        """hx as a list of one state (h0) or two (an LSTM's h0, c0), None for zeros, shapes
        checked."""
        names = self._state_names()
        if hx is None:
            states = [None] * len(names)
        elif self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError(f"{kind}: hx must be a tuple (h0, c0), got {type(hx).__name__}")
            states = list(hx)
        else:
            if not isinstance(hx, Tensor):
                raise TypeError(f"{kind}: hx must be a Tensor h0 (only an LSTM takes a tuple "
                                f"(h0, c0)), got {type(hx).__name__}")
            states = [hx]
        D = 2 if self.bidirectional else 1
        for name, s, size in zip(names, states, (self.proj_size or self.hidden_size,
                                                 self.hidden_size)):
            state_shape = (self.num_layers * D, B, size)
            if s is not None and tuple(s.shape) != state_shape:
                raise ValueError(f"{kind}: {name} has shape {tuple(s.shape)}, expected "
                                 f"{state_shape}")
        return states

    def _forward_lengths_on_device(self, x, states, lengths):
        """y of the packed sequence with lengths a Tensor (see the class docstring)."""
        if self.batch_first:
            x = F.transpose(x, 1, 0, 2)                  # (T, B, I)
        T = x.shape[0]
        n = lengths.data
        xp = xp_of(n)
        valid = Tensor((xp.arange(T)[:, None] < n[None, :]).astype(x.dtype)[:, :, None])
        D = 2 if self.bidirectional else 1
        per_layer = [None if s is None else F.unstack(s, 0) for s in states]
        directions = iter(self._directions())
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                w = next(directions)
                k = layer * D + d
                start = [None if s is None else s[k] for s in per_layer]
                inp = F.reverse_padded(layer_in, n) if d else layer_in
                y = self._one_direction(inp, start, w)
                outs.append(F.reverse_padded(y, n) if d else y)
            layer_in = (outs[0] if D == 1 else F.concat(outs, axis=2)) * valid
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout)
        return F.transpose(layer_in, 1, 0, 2) if self.batch_first else layer_in

    def _one_direction(self, x, states, w):
        """(T, B, H) outputs of one unidirectional layer over the whole of x (T, B, I), from
        states (B, H) each or None (zeros); w = W_ih, W_hh, b_ih, b_hh, W_hr (None where absent).
        cuDNN's RNN on a device, cell steps on the CPU."""
        if x.device != "cpu":
            return self._one_direction_cudnn(x, states, w)
        return self._one_direction_cells(x, states, w)

    def _one_direction_cudnn(self, x, states, w):
        state = [None if s is None else F.reshape(s, 1, *s.shape) for s in states]
        rnn = self._descriptor(x.dtype, input_size=x.shape[2], num_layers=1,
                               bidirectional=False)
        hx, cx = state + [None] * (2 - len(state))
        return _rnn.CudnnRNN.apply(x, hx, cx, *(p for p in w if p is not None), rnn=rnn,
                                   names=self._names(), lengths=None, batch_first=False,
                                   training=self.training)[0]

    def _one_direction_cells(self, x, states, w):
        states = [s if s is not None else _zeros(x, (x.shape[1], size))
                  for s, size in zip(states, (self.proj_size or self.hidden_size,
                                              self.hidden_size))]
        ys = []
        for xt in F.unstack(x, 0):
            states = _step(self.mode, xt, states, w)
            ys.append(states[0])
        return F.stack(ys, 0)

    # ---- GPU: cuDNN ---------------------------------------------------------------------------
    def _descriptor(self, dtype, input_size=None, num_layers=None, bidirectional=None):
        """The cuDNN RNN descriptor of this layer (or of one layer / direction of it)."""
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
                RNNMode[self.mode], input_size, self.hidden_size, num_layers,
                bidirectional=bidirectional,
                bias_mode=RNNBiasMode.DOUBLE_BIAS if self.bias else RNNBiasMode.NO_BIAS,
                dtype=dtype, math_type=math, proj_size=self.proj_size or None, dropout=drop)
        return desc

    def _forward_cudnn(self, x, states, lengths):
        hx, cx = states + [None] * (2 - len(states))
        out = _rnn.CudnnRNN.apply(x, hx, cx, *self.all_weights, rnn=self._descriptor(x.dtype),
                                  names=self._names(), lengths=lengths,
                                  batch_first=self.batch_first, training=self.training)
        return out[0], out[1:]

    # ---- CPU: the recurrence, one cell op per step --------------------------------------------
    def _forward_reference(self, x, states, lengths):
        if self.batch_first:
            x = F.transpose(x, 1, 0, 2)                  # (T, B, I)
        T, B = x.shape[0], x.shape[1]
        D = 2 if self.bidirectional else 1
        masks = None
        if lengths is not None and min(lengths) < T:
            steps = np.arange(T)[:, None] < np.asarray(lengths)[None, :]      # (T, B)
            masks = [Tensor(to_device(m[:, None], x.device)) for m in steps]
            # the steps past each length zeroed (not multiplied: NaN there must reach nothing,
            # gradients of the weights included), as cuDNN's padded I/O never reads them
            x = F.where(Tensor(to_device(steps[:, :, None], x.device)), x, _zeros(x, x.shape))
        per_layer = [None if s is None else F.unstack(s, 0) for s in states]
        zeros = [_zeros(x, (B, size)) for size in (self.proj_size or self.hidden_size,
                                                   self.hidden_size)]
        layer_in = x
        finals = [[] for _ in states]
        directions = iter(self._directions())
        for layer in range(self.num_layers):
            xs = F.unstack(layer_in, 0)
            outs = []
            for d in range(D):
                w = next(directions)
                k = layer * D + d
                now = [zero if s is None else s[k] for s, zero in zip(per_layer, zeros)]
                ys = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    new = _step(self.mode, xs[t], now, w)
                    if masks is None:
                        now, ys[t] = new, new[0]
                    else:           # past a sequence's end: keep its state, output zero
                        m = masks[t]    # (chosen, not multiplied: NaN in the padding stays out)
                        now = [F.where(m, a, b) for a, b in zip(new, now)]
                        ys[t] = F.where(m, new[0], _zeros(x, new[0].shape))
                outs.append(F.stack(ys, 0))
                for f, s in zip(finals, now):
                    f.append(s)
            layer_in = outs[0] if D == 1 else F.concat(outs, axis=2)
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout)
        y = F.transpose(layer_in, 1, 0, 2) if self.batch_first else layer_in
        return y, tuple(F.stack(f, 0) for f in finals)

    def extra_repr(self):
        return options_repr(f"{self.input_size}, {self.hidden_size}",
                            ("proj_size", self.proj_size, bool(self.proj_size)),
                            ("num_layers", self.num_layers, self.num_layers != 1),
                            ("bias", self.bias, self.bias is not True),
                            ("batch_first", self.batch_first, self.batch_first is not False),
                            ("dropout", self.dropout, self.dropout != 0),
                            ("bidirectional", self.bidirectional,
                             self.bidirectional is not False))


class LSTM(RNNBase):
    """torch.nn.LSTM: forward(x, (h0, c0) or None, lengths=None) -> (y, (h_n, c_n)); see
    RNNBase. proj_size P > 0: h = h W_hr^T each step (weight_hr_l* (P, H)), so h0, h_n and y
    per direction have P features, c0 and c_n H (cuDNN's LSTM projection on the GPU)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size)


class GRU(RNNBase):
    """torch.nn.GRU: forward(x, h0 or None, lengths=None) -> (y, h_n); see RNNBase."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional)


class RNN(RNNBase):
    """torch.nn.RNN, the Elman RNN: h' = tanh or relu of x W_ih^T + b_ih + h W_hh^T + b_hh.
    forward(x, h0 or None, lengths=None) -> (y, h_n); see RNNBase. nonlinearity is the fourth
    positional argument, as torch's."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False):
        super().__init__(_nonlinearity_mode("RNN", nonlinearity), input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional)
        self.nonlinearity = nonlinearity

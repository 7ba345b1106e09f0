"""cuDNN 9's RNN API -- the v8 entry points; the v6 ones are gone -- on CuPy arrays: dropout,
RNN and RNN-data descriptors, the weight space and where each gate's matrix and bias lie in it,
forward (training / inference), and backward (data, then weights).

Shape legend: T time steps, B batch, I input size, H hidden size, L layers, D directions.
x (T, B, I) time-major or (B, T, I) batch-major, padded past each sequence's length;
y (..., D*H), zero past each length; h, c (L*D, B, H), the state at each sequence's own end.
Pseudo-layer p = layer * D + direction. The gates, by cuDNN's linLayerID, are in PyTorch's row
order of weight_ih / weight_hh -- LSTM (i, f, g, o), GRU (r, z, n), Elman RNN one:

    LSTM  linLayerID  0 1 2 3  -> input weights  W_i W_f W_g W_o  (H, I) each; biases b_ih
          linLayerID  4 5 6 7  -> recurrent ones R_i R_f R_g R_o  (H, H) each; biases b_hh
    GRU   linLayerID  0 1 2    -> input weights  W_r W_z W_n; 3 4 5 -> recurrent R_r R_z R_n
    RNN   linLayerID  0        -> input weights; 1 -> recurrent
    LSTM with a projection (projSize P < H): linLayerID 8 -> weight_hr (P, H), no bias
"""
import ctypes
import operator
from ctypes import byref, c_float, c_int, c_size_t, c_void_p

import numpy as np

from . import api
from ._cache import LRU
from .descriptors import Descriptor, TensorDescriptor, data_type
from .enums import (DataType, DirectionMode, ForwardMode, MathType, RNNAlgo, RNNBiasMode,
                    RNNDataLayout, RNNInputMode, RNNMode, WgradMode)
from .boundary import check_shape, common_dtype, packed
from .boundary import handle as boundary_handle
from .errors import BadParam, BadParamShapeMismatch
from .handle import get_handle, keep_alive

MAX_PROBLEMS = 256             # cached (lengths, T, B, layout) set-ups per RNN descriptor
PADDED_IO_ENABLED = 1          # CUDNN_RNN_PADDED_IO_ENABLED: padded x / y with per-item lengths
GATES = {RNNMode.LSTM: 4, RNNMode.GRU: 3, RNNMode.RNN_RELU: 1, RNNMode.RNN_TANH: 1}


class DropoutDescriptor(Descriptor):
    """cudnnDropoutDescriptor_t with its random-state buffer (needs a GPU: the states live there)."""
    _create = api.cudnnCreateDropoutDescriptor
    _destroy = api.cudnnDestroyDropoutDescriptor

    def __init__(self, dropout=0.0, seed=0):
        import cupy
        super().__init__()
        self._handle = get_handle()
        size = c_size_t()
        api.cudnnDropoutGetStatesSize(self._handle, byref(size))
        self.states = cupy.empty(max(size.value, 1), dtype=cupy.uint8)
        api.cudnnSetDropoutDescriptor(self, self._handle, float(dropout), self.states.data.ptr,
                                      size.value, int(seed))
        self.dropout, self.seed = float(dropout), int(seed)
        self._ready = True

    def setup(self):
        p, states, seed = c_float(), c_void_p(), ctypes.c_ulonglong()
        api.cudnnGetDropoutDescriptor(self, self._handle, byref(p), byref(states), byref(seed))
        return round(p.value, 6), seed.value

    def _describe(self):
        p, seed = self.setup()
        return f"dropout={p}, seed={seed}"


class RNNDescriptor(Descriptor):
    """cudnnRNNDescriptor_t set by cudnnSetRNNDescriptor_v8 (no GPU needed unless dropout)."""
    _create = api.cudnnCreateRNNDescriptor
    _destroy = api.cudnnDestroyRNNDescriptor

    def __init__(self, mode, input_size, hidden_size, num_layers=1, *, bidirectional=False,
                 bias_mode=RNNBiasMode.DOUBLE_BIAS, input_mode=RNNInputMode.LINEAR_INPUT,
                 dtype="float32", math_precision=None, math_type=MathType.DEFAULT,
                 proj_size=None, dropout=None, algo=RNNAlgo.STANDARD, padded_io=True):
        super().__init__()
        self.mode = RNNMode(mode)
        self.data_type = data_type(dtype, "cudnnSetRNNDescriptor_v8")
        if math_precision is None:     # half data computes in float, as PyTorch does
            math_precision = DataType.DOUBLE if self.data_type == DataType.DOUBLE else DataType.FLOAT
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.proj_size = hidden_size if proj_size is None else proj_size
        self.directions = 2 if bidirectional else 1
        self.dropout = dropout                      # keep the DropoutDescriptor alive
        api.cudnnSetRNNDescriptor_v8(
            self, RNNAlgo(algo), self.mode, RNNBiasMode(bias_mode),
            DirectionMode(int(bidirectional)), RNNInputMode(input_mode), self.data_type,
            data_type(math_precision), MathType(math_type), input_size, hidden_size,
            self.proj_size, num_layers, dropout, PADDED_IO_ENABLED if padded_io else 0)
        self._ready = True

    def setup(self):
        enums = [c_int() for _ in range(8)]
        sizes = [ctypes.c_int32() for _ in range(4)]
        dropout, aux = c_void_p(), ctypes.c_uint32()
        api.cudnnGetRNNDescriptor_v8(self, *(byref(e) for e in enums), *(byref(s) for s in sizes),
                                     byref(dropout), byref(aux))
        algo, mode, bias, direction, inp, dt, prec, math = (e.value for e in enums)
        return (RNNAlgo(algo), RNNMode(mode), RNNBiasMode(bias), DirectionMode(direction),
                RNNInputMode(inp), DataType(dt), DataType(prec), MathType(math),
                *(s.value for s in sizes), dropout.value is not None, aux.value)

    def _describe(self):
        (algo, mode, bias, direction, inp, dt, prec, math, i, h, p, layers, drop,
         aux) = self.setup()
        return (f"{mode.name}, {algo.name}, {bias.name}, {direction.name}, {inp.name}, "
                f"data={dt.name}, math={prec.name}/{math.name}, input={i}, hidden={h}, "
                f"proj={p}, layers={layers}, dropout={'yes' if drop else 'no'}, aux={aux}")


class RNNDataDescriptor(Descriptor):
    """cudnnRNNDataDescriptor_t: padded sequences with one length per batch item."""
    _create = api.cudnnCreateRNNDataDescriptor
    _destroy = api.cudnnDestroyRNNDataDescriptor

    def __init__(self, seq_lengths, max_seq_length, vector_size, dtype="float32",
                 layout=RNNDataLayout.SEQ_MAJOR_UNPACKED, padding_fill=0.0):
        super().__init__()
        self.data_type = data_type(dtype, "cudnnSetRNNDataDescriptor")
        lengths = [int(n) for n in seq_lengths]
        self.seq_lengths, self.max_seq_length, self.vector_size = tuple(lengths), \
            int(max_seq_length), int(vector_size)
        fill = ctypes.c_double(padding_fill) if self.data_type == DataType.DOUBLE \
            else c_float(padding_fill)
        api.cudnnSetRNNDataDescriptor(self, self.data_type, RNNDataLayout(layout),
                                      self.max_seq_length, len(lengths), self.vector_size,
                                      (c_int * len(lengths))(*lengths), byref(fill))
        self.layout = RNNDataLayout(layout)
        self._ready = True

    def setup(self):
        dt, layout, T, B, V = (c_int() for _ in range(5))
        lengths = (c_int * len(self.seq_lengths))()
        fill = ctypes.c_double() if self.data_type == DataType.DOUBLE else c_float()
        api.cudnnGetRNNDataDescriptor(self, byref(dt), byref(layout), byref(T), byref(B), byref(V),
                                      len(lengths), lengths, byref(fill))
        return (DataType(dt.value), RNNDataLayout(layout.value), T.value, B.value, V.value,
                tuple(lengths), fill.value)

    def _describe(self):
        dt, layout, T, B, V, lengths, fill = self.setup()
        shown = lengths if len(lengths) <= 8 else lengths[:8] + ("...",)
        return (f"{dt.name}, {layout.name}, max_len={T}, batch={B}, vector={V}, "
                f"lengths={shown}, fill={fill}")


# ---- weight space -----------------------------------------------------------------------------

def weight_space_size(rnn):
    """Bytes of the weight space of this RNN (asked once per descriptor)."""
    size = rnn.__dict__.get("_weight_space_size")
    if size is None:
        out = c_size_t()
        api.cudnnGetRNNWeightSpaceSize(get_handle(), rnn, byref(out))
        size = rnn._weight_space_size = out.value
    return size


def weight_params(rnn, weight_space, pseudo_layer, lin_layer_id):
    """(matrix, bias) as views into weight_space (a CuPy array of the data type) for one gate
    of one pseudo-layer; bias is None without one. Matrix (rows, cols), bias (rows,)."""
    mdesc, bdesc = TensorDescriptor((1, 1, 1)), TensorDescriptor((1, 1, 1))
    m_addr, b_addr = c_void_p(), c_void_p()
    api.cudnnGetRNNWeightParams(get_handle(), rnn, pseudo_layer, weight_space.nbytes,
                                weight_space.data.ptr, lin_layer_id, mdesc, byref(m_addr), bdesc,
                                byref(b_addr))
    return (_view(weight_space, m_addr.value, mdesc, matrix=True),
            _view(weight_space, b_addr.value, bdesc, matrix=False))


def _view(space, address, desc, matrix):
    """The weight-space view cuDNN describes as dims (1, rows, cols) for a matrix or (1, rows, 1)
    for a bias. Size-1 rows or cols are real (input_size 1 gives (4H, 1) matrices)."""
    if not address:
        return None
    dims = desc.setup()[1]
    shape = (dims[1], dims[2]) if matrix else (dims[1],)
    start = (address - space.data.ptr) // space.itemsize
    return space[start:start + int(np.prod(shape))].reshape(shape)


def weight_views(rnn, weight_space):
    """PyTorch's RNN parameters as views into cuDNN's weight space: for each pseudo-layer
    {'weight_ih': (gH, I), 'weight_hh': (gH, H), 'bias_ih': (gH,), 'bias_hh': (gH,)}, g the
    mode's gates (LSTM 4, GRU 3, RNN 1), when the gates of each lie back to back in the space
    (they do: PyTorch relies on it too); an LSTM with a projection also 'weight_hr' (P, H)."""
    g = GATES[rnn.mode]
    out = []
    for p in range(rnn.num_layers * rnn.directions):
        views = {}
        for name, bias_name, ids in (("weight_ih", "bias_ih", range(g)),
                                     ("weight_hh", "bias_hh", range(g, 2 * g))):
            gates = [weight_params(rnn, weight_space, p, i) for i in ids]
            views[name] = _concatenated_view(weight_space, [m for m, _ in gates], rnn, p, name)
            biases = [b for _, b in gates]
            views[bias_name] = None if biases[0] is None else \
                _concatenated_view(weight_space, biases, rnn, p, bias_name)
        if rnn.mode == RNNMode.LSTM and rnn.proj_size != rnn.hidden_size:
            views["weight_hr"] = weight_params(rnn, weight_space, p, 8)[0]
        out.append(views)
    return out


def weight_layout(rnn):
    """Where each PyTorch-named parameter lies in the weight space, for every pseudo-layer:
    [{name: (start element, shape)}], computed once per descriptor (it depends on the
    descriptor, not on the buffer's address)."""
    layout = rnn.__dict__.get("_weight_layout")
    if layout is None:
        import cupy
        itemsize = np.dtype({DataType.FLOAT: "float32", DataType.DOUBLE: "float64"}.get(
            rnn.data_type, "float16")).itemsize
        space = cupy.empty(weight_space_size(rnn) // itemsize,
                           dtype={2: cupy.float16, 8: cupy.float64}.get(itemsize, cupy.float32))
        layout = [{name: ((v.data.ptr - space.data.ptr) // space.itemsize, v.shape)
                   for name, v in views.items() if v is not None}
                  for views in weight_views(rnn, space)]
        rnn._weight_layout = layout
    return layout


def _concatenated_view(space, parts, rnn, pseudo_layer, name):
    first = parts[0]
    start = (first.data.ptr - space.data.ptr) // space.itemsize
    step = first.size
    for k, part in enumerate(parts):
        if part.shape != first.shape or part.data.ptr != first.data.ptr + k * step * space.itemsize:
            raise BadParam("cudnnGetRNNWeightParams",
                           {"rnn": rnn, "pseudoLayer": pseudo_layer, "parameter": name},
                           "the gates of this parameter are not back to back in the weight space")
    return space[start:start + step * len(parts)].reshape((len(parts) * first.shape[0],)
                                                          + first.shape[1:])


# ---- forward and backward ---------------------------------------------------------------------

class _Problem:
    """Descriptors and buffers for one (lengths, T, B, layout) of one RNN, made once."""

    def __init__(self, rnn, lengths, T, B, layout):
        import cupy
        self.x = RNNDataDescriptor(lengths, T, rnn.input_size, rnn.data_type, layout)
        self.y = RNNDataDescriptor(lengths, T, rnn.proj_size * rnn.directions, rnn.data_type,
                                   layout)
        self.h = TensorDescriptor((rnn.num_layers * rnn.directions, B, rnn.proj_size),
                                  rnn.data_type)
        self.c = TensorDescriptor((rnn.num_layers * rnn.directions, B, rnn.hidden_size),
                                  rnn.data_type)
        self.dev_lengths = cupy.asarray(np.asarray(lengths, np.int32))
        self.sizes = {}
        for mode in ForwardMode:
            ws, rs = c_size_t(), c_size_t()
            api.cudnnGetRNNTempSpaceSizes(get_handle(), rnn, mode, self.x, byref(ws), byref(rs))
            self.sizes[mode] = ws.value, rs.value


def _problem(rnn, x, lengths, batch_first):
    T, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    try:          # (NumPy integers taken; a float length is refused, not truncated)
        lengths = (T,) * B if lengths is None else tuple(operator.index(n) for n in lengths)
    except TypeError:
        raise BadParam("cudnnSetRNNDataDescriptor", {"lengths": tuple(lengths)},
                       "lengths must be integers") from None
    if len(lengths) != B or (lengths and (max(lengths) > T or min(lengths) < 1)):
        raise BadParam("cudnnSetRNNDataDescriptor", {"x.shape": x.shape, "lengths": lengths},
                       f"need one length in 1..{T} per batch item ({B})")
    layout = RNNDataLayout.BATCH_MAJOR_UNPACKED if batch_first \
        else RNNDataLayout.SEQ_MAJOR_UNPACKED
    key = (lengths, T, B, layout)
    cache = rnn.__dict__.get("_problems")
    if cache is None:
        cache = rnn._problems = LRU(MAX_PROBLEMS)     # variable-length batches: the recent ones
    return cache.get(key, lambda: _Problem(rnn, lengths, T, B, layout))


def _ptr(a):
    return None if a is None else a.data.ptr


class Saved:
    """What a forward handed to cuDNN and got back, for backward(): the packed x / hx / cx cuDNN
    read, y, the weight space and the reserve space (None after an inference forward). Backward
    passes exactly these arrays again, so what it differentiates is what the forward computed."""
    __slots__ = ("rnn", "problem", "x", "hx", "cx", "y", "weight_space", "reserve")

    def __init__(self, **fields):
        for k, v in fields.items():
            setattr(self, k, v)


def forward(rnn, x, weight_space, hx=None, cx=None, lengths=None, *, training=True,
            batch_first=False):
    """(y, hy, cy, saved); hx / cx None mean zeros; `saved` feeds backward() (a training forward).
    x, hx, cx may be strided views: cuDNN's RNN data is packed, so they are copied once, and the
    copies are what `saved` holds."""
    import cupy
    fn = "cudnnRNNForward"
    _no_cell_state(fn, rnn, cx=cx)
    dt = common_dtype(fn, None, x=x, weight_space=weight_space, hx=hx, cx=cx)
    if dt != rnn.data_type:
        raise BadParam(fn, {"x.dtype": x.dtype.name, "rnn": rnn},
                       f"x has dtype {x.dtype.name}, the RNN descriptor {rnn.data_type.name}")
    if x.ndim != 3 or x.shape[-1] != rnn.input_size:
        raise BadParamShapeMismatch(fn, {"x.shape": x.shape, "rnn": rnn},
                                    f"x must be (T, B, {rnn.input_size}) (batch_first: (B, T, "
                                    f"{rnn.input_size})), got {x.shape}")
    if weight_space.nbytes != weight_space_size(rnn) or not weight_space.flags.c_contiguous:
        raise BadParamShapeMismatch(fn, {"weight_space.nbytes": weight_space.nbytes, "rnn": rnn},
                                    f"the weight space must be a contiguous array of "
                                    f"{weight_space_size(rnn)} bytes, got {weight_space.nbytes}")
    p = _problem(rnn, x, lengths, batch_first)
    x = packed(fn, "x", x)
    hx = _state(fn, "hx", hx, p.h.dims, "the RNN's hidden state is")
    cx = _state(fn, "cx", cx, p.c.dims, "the RNN's cell state is")
    handle = boundary_handle(fn, x=x, weight_space=weight_space, hx=hx, cx=cx)
    mode = ForwardMode.TRAINING if training else ForwardMode.INFERENCE
    ws, rs = p.sizes[mode]
    y = cupy.empty(x.shape[:2] + (rnn.proj_size * rnn.directions,), dtype=x.dtype)
    hy = cupy.empty(p.h.dims, dtype=x.dtype)
    cy = cupy.empty(p.c.dims, dtype=x.dtype) if rnn.mode == RNNMode.LSTM else None
    reserve = cupy.empty(rs, dtype=cupy.uint8) if rs else None
    _keep(rnn, p)
    api.cudnnRNNForward(handle, rnn, mode, p.dev_lengths.data.ptr, p.x, x.data.ptr, p.y,
                        y.data.ptr, p.h, _ptr(hx), hy.data.ptr, p.c, _ptr(cx), _ptr(cy),
                        weight_space.nbytes, weight_space.data.ptr, ws, handle.workspace(ws),
                        rs, _ptr(reserve))
    saved = Saved(rnn=rnn, problem=p, x=x, hx=hx, cx=cx, y=y, weight_space=weight_space,
                  reserve=reserve if training else None)
    return y, hy, cy, saved


def _no_cell_state(function, rnn, **arrays):
    """Only an LSTM has a cell state: one handed to a GRU / Elman RNN would be ignored."""
    for name, a in arrays.items():
        if a is not None and rnn.mode != RNNMode.LSTM:
            raise BadParam(function, {name + ".shape": a.shape, "rnn": rnn},
                           f"{name}: only an LSTM has a cell state, this RNN is {rnn.mode.name}")


def _state(function, name, a, dims, what):
    """A state (or state gradient) array, None passing: shape checked, one packed copy if
    strided."""
    if a is None:
        return None
    check_shape(function, name, a, dims, what)
    return packed(function, name, a)


def _keep(rnn, p):
    """Device memory cudnnlite owns that the call reads: a captured graph must keep it."""
    keep_alive(p.dev_lengths)
    if rnn.dropout is not None:
        keep_alive(rnn.dropout.states)


def backward(saved, dy, dhy=None, dcy=None):
    """(dx, dhx, dcx, dweight_space) of a training forward, from its `saved` record and the
    gradients of y, hy, cy (dhy / dcy None mean zeros): cudnnRNNBackwardData_v8, then
    cudnnRNNBackwardWeights_v8 (which only adds into the weight gradient: it starts zeroed)."""
    import cupy
    fn = "cudnnRNNBackwardData_v8"
    s = saved
    if not isinstance(s, Saved) or s.reserve is None:
        raise BadParam(fn, {"saved": type(saved).__name__},
                       "backward needs the `saved` record of a training-mode forward")
    rnn, p = s.rnn, s.problem
    _no_cell_state(fn, rnn, dcy=dcy)
    common_dtype(fn, None, y=s.y, dy=dy, dhy=dhy, dcy=dcy)
    check_shape(fn, "dy", dy, s.y.shape, "y has")
    dy = packed(fn, "dy", dy)
    dhy = _state(fn, "dhy", dhy, p.h.dims, "hy has")
    dcy = _state(fn, "dcy", dcy, p.c.dims, "cy has")
    handle = boundary_handle(fn, x=s.x, dy=dy, dhy=dhy, dcy=dcy)
    ws, rs = p.sizes[ForwardMode.TRAINING]
    dx = cupy.empty(s.x.shape, dtype=s.x.dtype)
    dhx = cupy.empty(p.h.dims, dtype=s.x.dtype)
    dcx = cupy.empty(p.c.dims, dtype=s.x.dtype) if rnn.mode == RNNMode.LSTM else None
    workspace = handle.workspace(ws)
    _keep(rnn, p)
    api.cudnnRNNBackwardData_v8(handle, rnn, p.dev_lengths.data.ptr, p.y, s.y.data.ptr,
                                dy.data.ptr, p.x, dx.data.ptr, p.h, _ptr(s.hx), _ptr(dhy),
                                dhx.data.ptr, p.c, _ptr(s.cx), _ptr(dcy), _ptr(dcx),
                                s.weight_space.nbytes, s.weight_space.data.ptr, ws, workspace, rs,
                                _ptr(s.reserve))
    dw = cupy.zeros_like(s.weight_space)
    api.cudnnRNNBackwardWeights_v8(handle, rnn, WgradMode.ADD, p.dev_lengths.data.ptr, p.x,
                                   s.x.data.ptr, p.h, _ptr(s.hx), p.y, s.y.data.ptr, dw.nbytes,
                                   dw.data.ptr, ws, workspace, rs, _ptr(s.reserve))
    return dx, dhx, dcx, dw

"""LSTM, GRU, RNN and their cells against torch.nn's (packed variable lengths included), gradient
checks of the cell ops, and the RNN descriptors (which need no GPU)."""
import numpy as np
import pytest
import torch

import cudnnlite as cl
import layers as L
from cudnnlite import rnn as crnn
from gradcheck import check_backward
from reference import rel_err

TOL = 1e-5
CONFIGS = [  # (bidirectional, num_layers, batch_first, lengths or None, with initial state)
    (False, 1, False, None, False),
    (False, 2, True, None, True),
    (True, 1, False, [5, 2, 4], True),
    (True, 2, True, [3, 5, 1], False),
    (False, 2, False, [1, 5, 5], True),
]


KINDS = {  # kind -> torch's module, ours, their extra arguments
    "LSTM": (torch.nn.LSTM, L.nn.LSTM, {}), "GRU": (torch.nn.GRU, L.nn.GRU, {}),
    "RNN_TANH": (torch.nn.RNN, L.nn.RNN, {"nonlinearity": "tanh"}),
    "RNN_RELU": (torch.nn.RNN, L.nn.RNN, {"nonlinearity": "relu"}),
    "LSTM_PROJ": (torch.nn.LSTM, L.nn.LSTM, {"proj_size": 3})}   # (h: 3 features, c: H)


def torch_rnn_run(t, x, lengths, hx, batch_first):
    """torch's RNN on a padded batch, through pack_padded_sequence when lengths are given."""
    if lengths is None:
        return t(x, hx)
    T = x.shape[1] if batch_first else x.shape[0]
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths),
                                                     batch_first=batch_first, enforce_sorted=False)
    out, finals = t(packed, hx)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first, total_length=T)
    return out, finals


def make_pair(bi, layers, batch_first, I=6, H=7, device="cpu", kind="LSTM"):
    theirs, ours, kw = KINDS[kind]
    torch.manual_seed(0)
    t = theirs(I, H, layers, batch_first=batch_first, bidirectional=bi, **kw)
    m = ours(I, H, layers, batch_first=batch_first, bidirectional=bi, **kw)
    assert list(m.state_dict()) == list(t.state_dict()) and repr(m) == repr(t)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    if device != "cpu":
        t.to(f"cuda:{device}"), m.to(device)
    return m, t


def _states(m, values, device, make):
    """hx as the module takes it: (h0, c0) for an LSTM, h0 otherwise."""
    states = tuple(make(v) for v in values[:2 if m.mode == "LSTM" else 1])
    return states if m.mode == "LSTM" else states[0]


def _finals(m, finals):
    return list(finals) if m.mode == "LSTM" else [finals]


def run_pair(m, t, bi, layers, batch_first, lengths, with_state, device="cpu", T=5, B=3, I=6,
             H=7):
    rng = np.random.default_rng(1)
    shape = (B, T, I) if batch_first else (T, B, I)
    x = rng.standard_normal(shape).astype(np.float32)
    D = 2 if bi else 1
    h0 = rng.standard_normal((layers * D, B, m.proj_size or H)).astype(np.float32)
    c0 = rng.standard_normal((layers * D, B, H)).astype(np.float32)
    tdev = "cpu" if device == "cpu" else f"cuda:{device}"
    xt = torch.tensor(x, device=tdev, requires_grad=True)
    tstate = _states(m, (h0, c0), device, lambda v: torch.tensor(v, device=tdev,
                                                                 requires_grad=True))
    out, finals = torch_rnn_run(t, xt, lengths, tstate if with_state else None, batch_first)
    xs = L.tensor(x, device=device, requires_grad=True)
    state = _states(m, (h0, c0), device, lambda v: L.tensor(v, device=device,
                                                            requires_grad=True))
    y, ours = m(xs, state if with_state else None, lengths=lengths)
    theirs, ours = [out] + _finals(m, finals), [y] + _finals(m, ours)
    w = [rng.standard_normal(a.shape).astype(np.float32) for a in ours]
    sum(((a * torch.tensor(b, device=tdev)).sum() for a, b in zip(theirs, w))).backward()
    loss = None
    for a, b in zip(ours, w):
        term = (a * L.tensor(b, device=device)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    checks = list(zip(ours, theirs)) + [(xs.grad, xt.grad)]
    if with_state:
        checks += [(a.grad, b.grad) for a, b in zip(_finals(m, state), _finals(m, tstate))]
    checks += [(p.grad, q.grad) for p, q in zip(m.parameters(), t.parameters())]
    return [(a.numpy(), b.detach().cpu().numpy()) for a, b in checks]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bi,layers,batch_first,lengths,with_state", CONFIGS)
def test_rnn_matches_torch_on_cpu(kind, bi, layers, batch_first, lengths, with_state):
    m, t = make_pair(bi, layers, batch_first, kind=kind)
    for i, (ours, theirs) in enumerate(run_pair(m, t, bi, layers, batch_first, lengths,
                                                with_state)):
        assert rel_err(ours, theirs) < TOL, i


CELLS = {"LSTMCell": {}, "GRUCell": {}, "RNNCell": {"nonlinearity": "tanh"},
         "RNNCell-relu": {"nonlinearity": "relu"}, "GRUCell-nobias": {"bias": False}}


@pytest.mark.parametrize("name", list(CELLS))
def test_cells_match_torch(name):
    cls, kw = name.split("-")[0], CELLS[name]
    lstm = cls == "LSTMCell"
    torch.manual_seed(0)
    t, m = getattr(torch.nn, cls)(5, 4, **kw), getattr(L.nn, cls)(5, 4, **kw)
    assert list(m.state_dict()) == list(t.state_dict()) and repr(m) == repr(t)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    rng = np.random.default_rng(0)
    x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (3, 4), (3, 4)))
    theirs = [torch.tensor(a, requires_grad=True) for a in ((x, h, c) if lstm else (x, h))]
    ours = [L.Tensor(a, requires_grad=True) for a in ((x, h, c) if lstm else (x, h))]
    results = []
    for mod, ins in ((t, theirs), (m, ours)):
        out = mod(ins[0], tuple(ins[1:])) if lstm else (mod(ins[0], ins[1]),)
        (out[0].sum() * 2 + (out[-1] * out[-1]).sum()).backward()
        zero_state = mod(ins[0])                         # no state: zeros
        results.append([*out, zero_state[0] if lstm else zero_state]
                       + [a.grad for a in ins] + [p.grad for p in mod.parameters()])
    for i, (a, b) in enumerate(zip(*results)):
        assert rel_err(b.numpy(), a.detach().numpy()) < TOL, i


def test_lstm_cell_backward_central_differences():
    rng = np.random.default_rng(2)
    B, I, H = 3, 4, 5
    arrays = [rng.standard_normal(s) for s in ((B, I), (B, H), (B, H), (4 * H, I), (4 * H, H),
                                                (4 * H,), (4 * H,))]
    check_backward(lambda *a: L.rnn.lstm_cell(*a), *arrays)


@pytest.mark.parametrize("device", ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"])
def test_a_gru_cell_takes_a_state_of_any_layout_as_torch(device, where):
    """A transposed (F-ordered) h0: two steps and backward, against torch (the GPU path's outputs
    are C-ordered whatever h's layout: its backward adds a product into dh with out=)."""
    torch.manual_seed(0)
    t, m = torch.nn.GRUCell(4, 5), L.nn.GRUCell(4, 5)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    m.to(where)
    rng = np.random.default_rng(6)
    x, h0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 3))
    h0 = h0.astype(np.float32)
    tx, th = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    ox, oh = L.tensor(x, device=where, requires_grad=True), L.tensor(h0, device=where,
                                                                     requires_grad=True)
    results = []
    for cell, a, h in ((t, tx, th), (m, ox, oh)):
        y = cell(a, cell(a, h.T))
        (y * y).sum().backward()
        results.append([y, a.grad, h.grad] + [p.grad for p in cell.parameters()])
    for i, (theirs, ours) in enumerate(zip(*results)):
        assert rel_err(ours.numpy(), theirs.detach().numpy()) < TOL, i


def test_nan_in_the_padding_past_the_lengths_reaches_nothing():
    """As cuDNN's padded I/O, the reference recurrence does not read past a sequence's length:
    NaN there changes no output, final state or gradient."""
    m = L.nn.GRU(3, 4, 2, bidirectional=True)
    a = np.random.default_rng(7).standard_normal((5, 2, 3)).astype(np.float32)
    results = []
    for fill in (0.0, np.nan):
        b = a.copy()
        b[3:, 1] = fill
        x = L.tensor(b, requires_grad=True)
        y, h = m(x, lengths=[5, 3])
        m.zero_grad()
        ((y * y).sum() + (h * h).sum()).backward()
        results.append([y.numpy(), h.numpy(), x.grad.numpy()[:, 0], x.grad.numpy()[:3, 1]]
                       + [p.grad.numpy() for p in m.parameters()])
    for zero, nan in zip(*results):
        np.testing.assert_array_equal(nan, zero)


def test_gru_cell_backward_central_differences():
    rng = np.random.default_rng(2)
    B, I, H = 3, 4, 5
    arrays = [rng.standard_normal(s) for s in ((B, I), (B, H), (3 * H, I), (3 * H, H),
                                                (3 * H,), (3 * H,))]
    check_backward(lambda *a: L.rnn.gru_cell(*a), *arrays)


def test_lstm_backward_central_differences_variable_lengths():
    m = L.nn.LSTM(3, 4, 2, bidirectional=True).double()
    rng = np.random.default_rng(3)

    def f(x):
        y, (h, c) = m(x, lengths=[4, 1, 3])
        return y, h, c
    check_backward(f, rng.standard_normal((4, 3, 3)))


def test_lstm_misuse():
    m = L.nn.LSTM(3, 4)
    with pytest.raises(ValueError, match=r"expected input \(T, B, 3\).*\(2, 2, 5\)"):
        m(L.Tensor(np.zeros((2, 2, 5), np.float32)))
    with pytest.raises(ValueError, match=r"lengths \[3, 9\].*1..4"):
        m(L.Tensor(np.zeros((4, 2, 3), np.float32)), lengths=[3, 9])
    with pytest.raises(TypeError, match=r"lengths must be integers, got \[2.9, 1.5\]"):
        m(L.Tensor(np.zeros((4, 2, 3), np.float32)), lengths=[2.9, 1.5])     # (not truncated)
    with pytest.raises(ValueError, match=r"h0 has shape \(2, 2, 4\), expected \(1, 2, 4\)"):
        z = L.Tensor(np.zeros((2, 2, 4), np.float32))
        m(L.Tensor(np.zeros((4, 2, 3), np.float32)), (z, z))


def test_gru_and_rnn_misuse():
    x = L.Tensor(np.zeros((4, 2, 3), np.float32))
    h0 = L.Tensor(np.zeros((1, 2, 5), np.float32))
    for m in (L.nn.GRU(3, 5), L.nn.RNN(3, 5)):
        with pytest.raises(TypeError, match=r"hx must be a Tensor h0 \(only an LSTM"):
            m(x, (h0, h0))
        with pytest.raises(ValueError, match=r"h0 has shape \(2, 2, 5\), expected \(1, 2, 5\)"):
            m(x, L.Tensor(np.zeros((2, 2, 5), np.float32)))
    with pytest.raises(TypeError, match=r"LSTM: hx must be a tuple \(h0, c0\)"):
        L.nn.LSTM(3, 5)(x, h0)
    with pytest.raises(ValueError, match="RNN: unknown nonlinearity 'sigmoid'"):
        L.nn.RNN(3, 5, 1, "sigmoid")
    with pytest.raises(ValueError, match="RNNCell: unknown nonlinearity 'gelu'"):
        L.nn.RNNCell(3, 5, nonlinearity="gelu")
    assert L.nn.RNN(3, 5, 2, "relu").mode == "RNN_RELU"       # torch's fourth positional
    with pytest.raises(ValueError, match=r"GRU: dropout should be a number in range \[0, 1\]"):
        L.nn.GRU(3, 5, 2, dropout=1.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        L.nn.GRU(3, 5, dropout=0.5)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        L.nn.LSTM(3, 5, proj_size=5)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        L.nn.LSTM(3, 5, proj_size=-1)
    with pytest.raises(ValueError, match=r"LSTM: h0 has shape \(1, 2, 5\), expected \(1, 2, 2\)"):
        L.nn.LSTM(3, 5, proj_size=2)(L.Tensor(np.zeros((4, 2, 3), np.float32)),
                                     (h0, L.Tensor(np.zeros((1, 2, 5), np.float32))))
    with pytest.raises(ValueError, match="Expected sequence length to be larger than 0"):
        L.nn.LSTM(3, 5)(L.Tensor(np.zeros((0, 2, 3), np.float32)))
    with pytest.raises(ValueError, match="num_layers must be greater than zero, got 0"):
        L.nn.LSTM(3, 5, 0)
    with pytest.raises(TypeError, match="hidden_size should be of type int, got: float"):
        L.nn.GRU(3, 5.0)
    with pytest.raises(ValueError, match=r"GRUCell: hx has shape \(2, 4\), expected \(2, 5\)"):
        L.nn.GRUCell(3, 5)(L.Tensor(np.zeros((2, 3), np.float32)),
                           L.Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(TypeError, match=r"LSTMCell: hx must be a tuple \(h, c\)"):
        L.nn.LSTMCell(3, 5)(L.Tensor(np.zeros((2, 3), np.float32)),
                            L.Tensor(np.zeros((2, 5), np.float32)))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("with_state,batch_first", [(False, False), (True, True)])
def test_unbatched_input_is_a_batch_of_one_as_torchs(kind, with_state, batch_first):
    m, t = make_pair(True, 2, batch_first, kind=kind)
    rng = np.random.default_rng(8)
    x, h0, c0 = (rng.standard_normal(s).astype(np.float32)
                 for s in ((5, 6), (4, m.proj_size or 7), (4, 7)))
    results = []
    for mod, make in ((t, lambda v: torch.tensor(v, requires_grad=True)),
                      (m, lambda v: L.tensor(v, requires_grad=True))):
        lstm = m.mode == "LSTM"
        xs, hs = make(x), [make(h0), make(c0)][:2 if lstm else 1]
        hx = None if not with_state else tuple(hs) if lstm else hs[0]
        y, finals = mod(xs, hx)
        finals = list(finals) if lstm else [finals]
        ((y * y).sum() + sum((f * f).sum() for f in finals)).backward()
        results.append([y] + finals + [xs.grad] + ([h.grad for h in hs] if with_state else []))
    for i, (theirs, ours) in enumerate(zip(*results)):
        assert ours.shape == tuple(theirs.shape), i
        assert rel_err(ours.numpy(), theirs.detach().numpy()) < TOL, i


@pytest.mark.parametrize("name", list(CELLS))
def test_cells_take_unbatched_input_as_torchs(name):
    cls, kw = name.split("-")[0], CELLS[name]
    torch.manual_seed(0)
    t, m = getattr(torch.nn, cls)(5, 4, **kw), getattr(L.nn, cls)(5, 4, **kw)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    rng = np.random.default_rng(9)
    x, h, c = (rng.standard_normal(n).astype(np.float32) for n in (5, 4, 4))
    for hx in ("none", "given"):
        outs = []
        for mod, make in ((t, torch.tensor), (m, L.tensor)):
            state = None if hx == "none" else (make(h), make(c)) if cls == "LSTMCell" \
                else make(h)
            out = mod(make(x), state)
            outs.append(list(out) if cls == "LSTMCell" else [out])
        for theirs, ours in zip(*outs):
            assert ours.shape == tuple(theirs.shape) == (4,)
            assert rel_err(ours.numpy(), theirs.detach().numpy()) < TOL


def test_unbatched_misuse():
    x = L.tensor(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="For unbatched 2-D input, h0 should also be 2-D but got "
                                         "3-D"):
        L.nn.GRU(3, 5)(x, L.tensor(np.zeros((1, 1, 5), np.float32)))
    with pytest.raises(ValueError, match="lengths= needs batched input"):
        L.nn.LSTM(3, 5)(x, lengths=[4])
    with pytest.raises(ValueError, match="for 1-D input, hx should also be 1-D but got 2-D"):
        L.nn.GRUCell(3, 5)(L.tensor(np.zeros(3, np.float32)),
                           L.tensor(np.zeros((1, 5), np.float32)))


def test_mixed_dtypes_are_refused_on_every_path_as_cudnn_and_torch_do():
    x64 = L.tensor(np.zeros((4, 2, 3)))
    for m in (L.nn.GRU(3, 5), L.nn.LSTM(3, 5), L.nn.RNN(3, 5)):
        with pytest.raises(TypeError, match="inputs must share one floating dtype, got float64"):
            m(x64)
    h64 = L.tensor(np.zeros((1, 2, 5)))
    with pytest.raises(TypeError, match="GRU: inputs must share one floating dtype"):
        L.nn.GRU(3, 5)(L.tensor(np.zeros((4, 2, 3), np.float32)), h64)
    for cell, name in ((L.nn.GRUCell(3, 5), "gru_cell"), (L.nn.LSTMCell(3, 5), "lstm_cell"),
                       (L.nn.RNNCell(3, 5), "linear")):
        with pytest.raises(TypeError, match=f"{name}: inputs must share one floating dtype"):
            cell(L.tensor(np.zeros((2, 3))))


def test_cudnn_refuses_a_cell_state_for_a_gru():
    """Only an LSTM has a cell state: cuDNN would ignore one given to a GRU (checked before any
    GPU call, so no GPU needed)."""
    d = crnn.RNNDescriptor(cl.RNNMode.GRU, 3, 5)
    x, h = np.zeros((4, 2, 3), np.float32), np.zeros((1, 2, 5), np.float32)
    with pytest.raises(cl.BadParam, match="cx: only an LSTM has a cell state, this RNN is GRU"):
        crnn.forward(d, x, np.zeros(10, np.float32), h, h)


# ---- descriptors (no GPU needed) ------------------------------------------------------------

@pytest.mark.parametrize("mode,bi,layers,dtype", [
    (cl.RNNMode.LSTM, False, 1, "float32"), (cl.RNNMode.LSTM, True, 3, "float16"),
    (cl.RNNMode.GRU, True, 2, "float64"), (cl.RNNMode.RNN_TANH, False, 1, "float32")])
def test_rnn_descriptor_round_trip(mode, bi, layers, dtype):
    d = crnn.RNNDescriptor(mode, 16, 32, layers, bidirectional=bi, dtype=dtype)
    dt = cl.data_type(dtype)
    prec = cl.DataType.DOUBLE if dt == cl.DataType.DOUBLE else cl.DataType.FLOAT
    assert d.setup() == (cl.RNNAlgo.STANDARD, mode, cl.RNNBiasMode.DOUBLE_BIAS,
                         cl.DirectionMode(int(bi)), cl.RNNInputMode.LINEAR_INPUT, dt, prec,
                         cl.MathType.DEFAULT, 16, 32, 32, layers, False, 1)
    assert f"{mode.name}, STANDARD" in repr(d)


def test_rnn_data_descriptor_round_trip():
    d = crnn.RNNDataDescriptor([5, 3, 1, 5], 5, 12, "float32",
                               cl.RNNDataLayout.BATCH_MAJOR_UNPACKED, padding_fill=-1.0)
    assert d.setup() == (cl.DataType.FLOAT, cl.RNNDataLayout.BATCH_MAJOR_UNPACKED, 5, 4, 12,
                         (5, 3, 1, 5), -1.0)


def test_rnn_bad_setups_name_the_function():
    with pytest.raises(cl.BadParam) as e:
        crnn.RNNDataDescriptor([5, 7], 5, 12)
    assert e.value.function == "cudnnSetRNNDataDescriptor" and "seqLengthArray = [5, 7]" in str(e.value)
    with pytest.raises(cl.NotSupported, match="cudnnSetRNNDescriptor_v8(.|\n)*projSize = 64"):
        crnn.RNNDescriptor(cl.RNNMode.LSTM, 16, 32, proj_size=64)


def run_device_lengths(bi, layers, batch_first, lengths, with_state, device="cpu", dtype=np.float32,
                       T=5, B=3, I=6, H=7, kind="LSTM"):
    """y and every gradient of a loss on y, with lengths as a Tensor (nothing read back), against
    torch's packed sequence."""
    m, t = make_pair(bi, layers, batch_first, I, H, kind=kind)
    if device != "cpu":
        t.to(f"cuda:{device}"), m.to(device)
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    t.to(tdtype)
    m.to_dtype(dtype)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((B, T, I) if batch_first else (T, B, I)).astype(dtype)
    D = 2 if bi else 1
    P = m.proj_size or H
    h0, c0 = (rng.standard_normal((layers * D, B, n)).astype(dtype) for n in (P, H))
    w = rng.standard_normal((B, T, D * P) if batch_first else (T, B, D * P)).astype(dtype)
    tdev = "cpu" if device == "cpu" else f"cuda:{device}"
    xt = torch.tensor(x, device=tdev, requires_grad=True)
    ts = _states(m, (h0, c0), device, lambda v: torch.tensor(v, device=tdev, requires_grad=True))
    out, _ = torch_rnn_run(t, xt, lengths, ts if with_state else None, batch_first)
    (out * torch.tensor(w, device=tdev)).sum().backward()
    xs = L.tensor(x, device=device, requires_grad=True)
    ss = _states(m, (h0, c0), device, lambda v: L.tensor(v, device=device, requires_grad=True))
    y, states = m(xs, ss if with_state else None,
                  lengths=L.tensor(np.array(lengths, np.int64), device=device))
    assert states is None
    (y * L.tensor(w, device=device)).sum().backward()
    checks = [(y, out), (xs.grad, xt.grad)]
    if with_state:
        checks += [(a.grad, b.grad) for a, b in zip(_finals(m, ss), _finals(m, ts))]
    checks += [(p.grad, q.grad) for p, q in zip(m.parameters(), t.parameters())]
    return [(a.numpy(), b.detach().cpu().numpy()) for a, b in checks]


DEVICE_LENGTH_CONFIGS = [(True, 1, True, [5, 2, 4], False), (True, 2, False, [3, 5, 1], True),
                         (False, 2, True, [1, 5, 5], True)]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bi,layers,batch_first,lengths,with_state", DEVICE_LENGTH_CONFIGS)
def test_tensor_lengths_give_the_packed_sequence_output_and_gradients(kind, bi, layers,
                                                                      batch_first, lengths,
                                                                      with_state):
    for i, (ours, theirs) in enumerate(run_device_lengths(bi, layers, batch_first, lengths,
                                                          with_state, dtype=np.float64,
                                                          kind=kind)):
        assert rel_err(ours, theirs) < 1e-12, i


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bi,layers,batch_first,lengths,with_state", DEVICE_LENGTH_CONFIGS)
def test_tensor_lengths_on_the_gpu_give_the_packed_sequence(kind, bi, layers, batch_first,
                                                           lengths, with_state):
    for i, (ours, theirs) in enumerate(run_device_lengths(bi, layers, batch_first, lengths,
                                                          with_state, device=0,
                                                          dtype=np.float64, kind=kind)):
        assert rel_err(ours, theirs) < 1e-10, i


def test_tensor_lengths_are_checked():
    m = L.nn.LSTM(3, 4)
    x = L.Tensor(np.zeros((4, 2, 3), np.float32))
    with pytest.raises(ValueError, match="Tensor lengths must be 2 integers"):
        m(x, lengths=L.tensor(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match="Tensor lengths must be 2 integers"):
        m(x, lengths=L.tensor(np.array([1, 2, 3])))
    for bad in ([0, 2], [1, 5]):
        with pytest.raises(ValueError, match=r"must hold one value in 1\.\.4"):
            m(x, lengths=L.tensor(np.array(bad)))

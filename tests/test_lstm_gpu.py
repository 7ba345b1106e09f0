"""The cuDNN LSTM, GRU and RNN against the NumPy path and against torch CUDA; the fused LSTMCell
and GRUCell kernels; where cuDNN's weight space puts each parameter, against PyTorch's own
flattened weights."""
import numpy as np
import pytest
import torch

import cudnnlite as cl
import layers as L
from cudnnlite import conv
from cudnnlite import rnn as crnn
from reference import rel_err
from test_lstm import CONFIGS, KINDS, make_pair, run_pair

pytestmark = pytest.mark.gpu
TOL = 1e-5


@pytest.fixture(autouse=True)
def _fp32():
    torch.backends.cudnn.allow_tf32 = False
    with conv.using(allow_tf32=False):
        yield
    torch.backends.cudnn.allow_tf32 = True


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bi,layers,batch_first,lengths,with_state", CONFIGS)
def test_cudnn_rnn_matches_torch_cuda(kind, bi, layers, batch_first, lengths, with_state):
    m, t = make_pair(bi, layers, batch_first, device=0, kind=kind)
    for i, (ours, theirs) in enumerate(run_pair(m, t, bi, layers, batch_first, lengths,
                                                with_state, device=0)):
        assert rel_err(ours, theirs) < TOL, i


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bi,layers,batch_first,lengths,with_state", CONFIGS)
def test_cudnn_rnn_matches_numpy_path(kind, bi, layers, batch_first, lengths, with_state):
    m_cpu, t = make_pair(bi, layers, batch_first, kind=kind)
    m_gpu, t_gpu = make_pair(bi, layers, batch_first, device=0, kind=kind)
    cpu = run_pair(m_cpu, t, bi, layers, batch_first, lengths, with_state)
    gpu = run_pair(m_gpu, t_gpu, bi, layers, batch_first, lengths, with_state, device=0)
    for i, ((a, _), (b, _)) in enumerate(zip(gpu, cpu)):
        assert rel_err(a, b) < TOL, i


@pytest.mark.parametrize("make", [lambda: L.nn.LSTMCell(6, 5), lambda: L.nn.GRUCell(6, 5),
                                  lambda: L.nn.RNNCell(6, 5, nonlinearity="relu")])
def test_cells_gpu_match_numpy(make):
    L.manual_seed(0)
    cell = make()
    lstm = isinstance(cell, L.nn.LSTMCell)
    rng = np.random.default_rng(0)
    x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (4, 5), (4, 5)))
    results = []
    for device in ("cpu", 0):
        cell.to(device).zero_grad()
        ts = [L.tensor(a, device=device, requires_grad=True) for a in ((x, h, c) if lstm
                                                                        else (x, h))]
        outs = cell(ts[0], tuple(ts[1:])) if lstm else (cell(ts[0], ts[1]),)
        (outs[0] * 3.0 + outs[-1] * outs[-1]).sum().backward()
        results.append([o.numpy() for o in outs] + [t.grad.numpy() for t in ts]
                       + [p.grad.numpy() for p in cell.parameters()])
    for a, b in zip(*results):
        assert rel_err(b, a) < TOL


@pytest.mark.parametrize("kind", list(KINDS))
def test_weight_space_layout_is_where_pytorch_puts_its_parameters(kind):
    theirs_cls, _, kw = KINDS[kind]
    for bi, layers in ((False, 1), (True, 2)):
        t = theirs_cls(6, 8, layers, bidirectional=bi, **kw).to("cuda:0")
        t.flatten_parameters()
        base = t._flat_weights[0].data_ptr()
        theirs = {name: (p.data_ptr() - base) // 4 for name, p in
                  zip(t._flat_weights_names, t._flat_weights)}
        desc = crnn.RNNDescriptor(cl.RNNMode[kind.split("_PROJ")[0]], 6, 8, layers,
                                  bidirectional=bi, proj_size=kw.get("proj_size"))
        ours = {}
        for p, entries in enumerate(crnn.weight_layout(desc)):
            sfx = f"_l{p // (2 if bi else 1)}" + ("_reverse" if bi and p % 2 else "")
            for name, (start, shape) in entries.items():
                ours[name + sfx] = start
                assert tuple(shape) == tuple(getattr(t, name + sfx).shape)
        assert ours == theirs


def test_dropout_descriptor_round_trip():
    d = crnn.DropoutDescriptor(0.25, seed=7)
    assert d.setup() == (0.25, 7)
    assert "dropout=0.25, seed=7" in repr(d)


def test_cudnn_lstm_dropout_between_layers_is_inverted_dropout_in_training_only():
    """Layer 2 is set up so its output is a closed form of each input element alone, 0 exactly
    when that element is 0: W_hh = 0, gates i = o = sigmoid(0) = 1/2, forget gate closed
    (bias -1000), cell input g = tanh(a * x). So h2 = tanh(tanh(a * x) / 2) / 2 for a kept element
    of layer 1's output x (scaled by 1 / (1 - p) in training) and 0 for a dropped one."""
    H, p, a = 16, 0.5, 0.7
    m = L.nn.LSTM(4, H, 2, dropout=p)
    one_layer = L.nn.LSTM(4, H, 1)
    one_layer.load_state_dict({k: v for k, v in m.state_dict().items() if k.endswith("_l0")})
    w_ih = np.zeros((4 * H, H), np.float32)
    w_ih[2 * H:3 * H] = a * np.eye(H)
    b_ih = np.zeros(4 * H, np.float32)
    b_ih[H:2 * H] = -1000.0                # sigmoid(-1000) is exactly 0 in float32
    m.load_state_dict(dict(m.state_dict(), weight_ih_l1=w_ih, bias_ih_l1=b_ih,
                           weight_hh_l1=np.zeros((4 * H, H), np.float32),
                           bias_hh_l1=np.zeros(4 * H, np.float32)))
    m.to(0)
    x = np.random.default_rng(0).standard_normal((50, 8, 4)).astype(np.float32)
    x1 = one_layer(L.tensor(x))[0].numpy()               # layer 1's output, on the NumPy path
    closed = lambda s: np.tanh(np.tanh(a * x1 * s) / 2) / 2            # noqa: E731
    m.eval()
    assert rel_err(m(L.tensor(x, device=0))[0].numpy(), closed(1.0)) < TOL
    m.train()
    y = m(L.tensor(x, device=0))[0].numpy()
    dropped = y == 0
    np.testing.assert_allclose(y[~dropped], closed(1 / (1 - p))[~dropped], rtol=1e-4, atol=1e-6)
    assert abs(dropped.mean() - p) < 5 * np.sqrt(p * (1 - p) / y.size)
    y2 = m(L.tensor(x, device=0))[0].numpy()
    assert (dropped != (y2 == 0)).any()                   # a new mask each call


def test_eval_mode_forward_still_differentiates():
    m_cpu, _ = make_pair(True, 1, False)
    m_gpu, _ = make_pair(True, 1, False, device=0)
    grads = []
    for m, device in ((m_cpu, "cpu"), (m_gpu, 0)):
        m.eval()
        x = L.tensor(np.ones((4, 2, 6), np.float32), device=device, requires_grad=True)
        y, _ = m(x)
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    assert rel_err(grads[1], grads[0]) < TOL

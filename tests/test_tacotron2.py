"""Tacotron 2 on the engine against the PyTorch reference written from NVIDIA's structure
(tools/tacotron2_torch.py), with the same weights: state_dict names and shapes, teacher-forced
outputs, alignments, losses and every gradient, Adam + clip steps, variable lengths, greedy
inference -- in float64 (strict) and float32, on the NumPy path (CUDA in -m gpu)."""
import numpy as np
import pytest
import torch

import layers as L
from reference import before_batch_norm, rel_err
from tools import tacotron2_torch as ref
from train.tacotron2 import HParams, Tacotron2, make_optimizer, set_dropout, train_step

HP = HParams.small()
TOL = {np.float64: (1e-9, 1e-9), np.float32: (1e-5, 1e-4)}      # (outputs, gradients)
EPS = {np.float64: 1e-16, np.float32: 1e-7}


def assert_gradients_match(grads, dtype, train, tol):
    scale = max(np.linalg.norm(b) for _, b, _ in grads)
    for a, b, k in grads:
        if train and before_batch_norm(k):
            assert np.linalg.norm(a) < 100 * EPS[dtype] * scale, k
            assert np.linalg.norm(b) < 100 * EPS[dtype] * scale, k
        else:
            assert rel_err(a, b) < tol, k


def pair(hp=HP, dtype=np.float64, device="cpu", seed=0):
    torch.manual_seed(seed)
    t = ref.Tacotron2(hp)
    m = Tacotron2(hp)
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    t.to("cpu" if device == "cpu" else f"cuda:{device}", tdtype)
    m.to(device).to_dtype(dtype)
    ref.set_dropout(t, False)
    set_dropout(m, False)
    return m, t


def test_state_dict_is_nvidias_at_full_size():
    torch.manual_seed(0)
    sd, tsd = Tacotron2().state_dict(), ref.Tacotron2().state_dict()
    assert list(sd) == list(tsd) and len(sd) == 84
    for k, v in tsd.items():
        assert sd[k].shape == tuple(v.shape) and sd[k].dtype == v.numpy().dtype, k
    n = sum(int(np.prod(p.shape)) for p in Tacotron2().parameters())
    assert n == 28_193_153


def test_initialisation_is_nvidias():
    """xavier_uniform with NVIDIA's gains: each weight's bound, the embedding's uniform bound."""
    L.manual_seed(0)
    m = Tacotron2(HP)
    torch.manual_seed(0)
    t = ref.Tacotron2(HP)
    for (k, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        if k.endswith("weight") and ".1." not in k:      # not batch norm
            bound = float(q.detach().abs().max())
            assert abs(float(np.abs(p.numpy()).max()) - bound) < 0.25 * bound, k


def _run(m, t, batch, device="cpu"):
    """Forward both on the batch, backprop NVIDIA's loss; -> (ours, theirs) pairs of outputs,
    loss parts and every parameter gradient."""
    dtype = m.embedding.weight.dtype
    tb = ref.batch_to_torch(batch, t)
    out_t = t(tb.text_padded, tb.input_lengths, tb.mel_padded, tb.output_lengths)
    loss_t = ref.Tacotron2Loss()(out_t, (tb.mel_padded, tb.gate_padded))
    loss_t["loss"].backward()
    from train.tacotron2.model import loss_parts
    mels = L.tensor(batch.mel_padded.astype(dtype), device=device)
    out_m = m(batch.text_padded, batch.input_lengths, mels, batch.output_lengths)
    loss_m = loss_parts(out_m, mels, L.tensor(batch.gate_padded.astype(dtype), device=device))
    loss_m["loss"].backward()
    pairs = [(a.numpy(), b.detach().cpu().numpy()) for a, b in zip(out_m, out_t)]
    pairs += [(loss_m[k].numpy(), loss_t[k].detach().cpu().numpy()) for k in loss_t]
    grads = [(p.grad.numpy(), q.grad.cpu().numpy(), k) for (k, p), q in
             zip(m.named_parameters(), t.parameters())]
    return pairs, grads


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("train", [True, False])
def test_teacher_forced_forward_and_backward_match(dtype, train):
    m, t = pair(dtype=dtype)
    m.train(train), t.train(train)
    batch = ref.make_batch(HP, 4, [9, 7, 7, 3], [12, 5, 9, 10], seed=1)   # variable lengths
    pairs, grads = _run(m, t, batch)
    tol_out, tol_grad = TOL[dtype]
    for i, (a, b) in enumerate(pairs):
        assert rel_err(a, b) < tol_out, i
    assert_gradients_match(grads, dtype, train, tol_grad)


def test_padding_is_masked_as_nvidia_and_alignments_ignore_padded_characters():
    m, _ = pair()
    batch = ref.make_batch(HP, 3, [8, 5, 2], [6, 11, 4], seed=2)
    mel, post, gate, align = (o.numpy() for o in m(batch.text_padded, batch.input_lengths,
                                                   batch.mel_padded.astype(np.float64),
                                                   batch.output_lengths))
    for i, (n, T) in enumerate(zip(batch.input_lengths, batch.output_lengths)):
        assert not mel[i, :, T:].any() and not post[i, :, T:].any()
        assert (gate[i, T:] == 1e3).all() and (gate[i, :T] != 1e3).all()
        assert not align[i, :, n:].any()
        np.testing.assert_allclose(align[i].sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_three_adam_and_clip_steps_match(dtype):
    m, t = pair(dtype=dtype)
    om, ot = make_optimizer(m), ref.make_optimizer(t)
    for step in range(3):
        batch = ref.make_batch(HP, 3, [6, 6, 4], [7, 9, 8], seed=10 + step)
        ours, theirs = train_step(m, om, batch), ref.train_step(t, ot, batch)
        for k in theirs:
            assert abs(ours[k] - theirs[k]) <= (1e-9 if dtype == np.float64 else 1e-5) \
                * abs(theirs[k]), (step, k)
    assert ours["grad_norm"] > HP.grad_clip_thresh          # clipping was exercised
    tol = 1e-7 if dtype == np.float64 else 1e-4
    sd, tsd = m.state_dict(), t.state_dict()
    for k, v in tsd.items():
        if before_batch_norm(k) or (k.endswith(".1.running_mean") and "convolutions" in k):
            # driven by rounding noise alone (see before_batch_norm): Adam moves such a bias by
            # about lr * sign(noise) a step, either way on either engine, and the running mean
            # of the norm after it follows the bias
            assert np.abs(sd[k] - v.numpy()).max() <= 2 * 3 * HP.learning_rate, k
        else:
            assert rel_err(sd[k], v.numpy()) < tol, k


@pytest.mark.parametrize("stop_on_gate", [False, True])
def test_greedy_inference_matches_the_reference(stop_on_gate):
    """24 frames decoded greedily (each predicted frame fed back) agree; with the gate on and its
    bias at +50, both stop after the first frame."""
    m, t = pair()
    m.eval(), t.eval()
    if stop_on_gate:
        m.decoder.gate_layer.linear_layer.bias.data[...] = 50.0
        t.decoder.gate_layer.linear_layer.bias.data[...] = 50.0
    text = ref.make_batch(HP, 1, 6, 5, seed=3).text_padded
    with torch.no_grad():
        theirs = t.inference(torch.from_numpy(text), max_steps=24, stop_on_gate=stop_on_gate)
    with L.no_grad():
        ours = m.inference(text, max_steps=24, stop_on_gate=stop_on_gate)
    assert ours[0].shape[2] == theirs[0].shape[2] == (1 if stop_on_gate else 24)
    for a, b in zip(ours, theirs):
        assert rel_err(a.numpy(), b.numpy()) < 1e-9


def test_gate_reports_whether_it_fired():
    m, _ = pair()
    m.eval()
    m.decoder.gate_layer.linear_layer.bias.data[...] = 50.0      # sigmoid = 1 from frame 1
    m.inference(np.array([[3, 4, 5]]))
    assert m.gate_fired
    m.decoder.gate_layer.linear_layer.bias.data[...] = -50.0
    mel = m.inference(np.array([[3, 4, 5]]), max_steps=7)[0]
    assert not m.gate_fired and mel.shape[2] == 7


def test_inference_between_steps_leaves_the_captured_step_key_alone():
    """A captured training step is keyed on every module's plain settings (layers.graph): the
    report's inference between steps must not change them (it left `gate_fired` and the decoder's
    `mask = None` behind, so every report cost each batch shape two eager steps and a capture)."""
    from layers.graph import _settings
    m, _ = pair()
    opt = make_optimizer(m)
    batch = ref.make_batch(HP, 3, [6, 6, 4], [7, 9, 8], seed=11)

    def settings():
        return [(type(sub).__name__, sub.training, _settings(sub)) for sub in m.modules()]

    train_step(m, opt, batch)
    before = settings()
    m.eval()
    with L.no_grad():
        m.inference(np.array([[3, 4, 5]]), max_steps=4)
    m.train()
    assert settings() == before
    train_step(m, opt, batch)
    assert settings() == before


def test_dropout_switch_and_prenet_dropout_at_inference():
    """NVIDIA's prenet dropout stays on in eval mode; set_dropout(model, False) turns every
    dropout off."""
    m, _ = pair()
    m.eval()
    set_dropout(m, True)
    text = np.array([[3, 4, 5, 6]])
    a = m.inference(text, max_steps=5, stop_on_gate=False)[0].numpy()
    b = m.inference(text, max_steps=5, stop_on_gate=False)[0].numpy()
    assert not np.array_equal(a, b)
    set_dropout(m, False)
    a = m.inference(text, max_steps=5, stop_on_gate=False)[0].numpy()
    b = m.inference(text, max_steps=5, stop_on_gate=False)[0].numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_teacher_forced_step_matches_torch_cuda_at_full_size(dtype):
    from cudnnlite import conv
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with conv.using(allow_tf32=False):
            hp = HParams()
            m, t = pair(hp, dtype, device=0)
            m.train(), t.train()
            batch = ref.make_batch(hp, 4, [15, 13, 12, 9], [40, 33, 38, 20], seed=4)
            pairs, grads = _run(m, t, batch, device=0)
    finally:
        torch.backends.cudnn.allow_tf32 = True
    tol_out, tol_grad = (1e-9, 1e-8) if dtype == np.float64 else (1e-4, 1e-3)
    for i, (a, b) in enumerate(pairs):
        assert rel_err(a, b) < tol_out, i
    assert_gradients_match(grads, dtype, True, tol_grad)


@pytest.mark.gpu
def test_teacher_forced_step_matches_torchaudio(monkeypatch):
    """torchaudio's Tacotron 2 is an independent implementation; its dropouts are switched off by
    patching the F.dropout its module calls, and mask_padding is off (its in-place fill does not
    backpropagate)."""
    pytest.importorskip("torchaudio")
    import torchaudio.models.tacotron2 as ta_module
    from tools.bench_tacotron2 import torchaudio_model
    monkeypatch.setattr(ta_module.F, "dropout", lambda x, *args, **kwargs: x)
    hp = HParams(mask_padding=False)
    m, _ = pair(hp, np.float64, device=0)
    ta = torchaudio_model(hp, list(m.state_dict().values())).double().to("cuda:0").train()
    m.train()
    batch = ref.make_batch(hp, 3, [12, 10, 7], [30, 22, 26], seed=5)
    tb = [torch.as_tensor(a, device="cuda:0") for a in batch]
    out_ta = ta(tb[0], tb[1], tb[2].double(), tb[4])
    loss_ta = ref.Tacotron2Loss()(out_ta, (tb[2].double(), tb[3].double()))
    loss_ta["loss"].backward()
    from train.tacotron2.model import loss_parts
    mels = L.tensor(batch.mel_padded.astype(np.float64), device=0)
    out_m = m(batch.text_padded, batch.input_lengths, mels, batch.output_lengths)
    loss_m = loss_parts(out_m, mels, L.tensor(batch.gate_padded.astype(np.float64), device=0))
    loss_m["loss"].backward()
    for a, b in zip(out_m, out_ta):
        assert rel_err(a.numpy(), b.detach().cpu().numpy()) < 1e-9
    grads = [(p.grad.numpy(), q.grad.cpu().numpy(), k)
             for (k, p), q in zip(m.named_parameters(), ta.parameters())]
    assert_gradients_match(grads, np.float64, True, 1e-8)


def _tensor_vs_host_lengths(device):
    """Outputs and gradients of one teacher-forced step with lengths as host ints and as integer
    Tensors (the capturable path), same weights, float64."""
    from train.tacotron2.model import loss_parts
    hp = HParams.small()
    L.manual_seed(0)
    a = set_dropout(Tacotron2(hp), False)
    b = set_dropout(Tacotron2(hp), False)
    b.load_state_dict(a.state_dict())
    for m in (a, b):
        m.to(device).to_dtype(np.float64)
    batch = ref.make_batch(hp, 3, [9, 7, 4], [20, 24, 11], seed=8)
    results = []
    for m, lengths in ((a, lambda v: v),
                       (b, lambda v: L.tensor(np.asarray(v, np.int64), device=device))):
        mels = L.tensor(batch.mel_padded.astype(np.float64), device=device)
        out = m(batch.text_padded, lengths(batch.input_lengths), mels,
                lengths(batch.output_lengths))
        parts = loss_parts(out, mels, L.tensor(batch.gate_padded.astype(np.float64),
                                               device=device))
        parts["loss"].backward()
        results.append([o.numpy() for o in out] + [p.grad.numpy() for p in m.parameters()])
    return results


def test_tensor_lengths_give_the_host_lengths_outputs_and_gradients():
    host, tensor = _tensor_vs_host_lengths("cpu")
    for i, (x, y) in enumerate(zip(host, tensor)):
        np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-13, err_msg=str(i))


@pytest.mark.gpu
def test_tensor_lengths_give_the_host_lengths_outputs_and_gradients_on_the_gpu():
    host, tensor = _tensor_vs_host_lengths(0)
    for i, (x, y) in enumerate(zip(host, tensor)):
        np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-12, err_msg=str(i))


@pytest.mark.gpu
def test_captured_training_steps_equal_eager_ones():
    """make_step(cuda_graph=True): the first batch of a shape runs eagerly, the second is
    captured, later ones -- other lengths of the same shape included -- replay the graph;
    statistics and weights follow the eager model's (host lengths, cuDNN's packed LSTM)."""
    from train.tacotron2.model import make_step, train_step_device
    hp = HParams.small()
    L.manual_seed(0)
    eager = set_dropout(Tacotron2(hp), False).to(0).to_dtype(np.float64)
    graph = set_dropout(Tacotron2(hp), False)
    graph.load_state_dict(eager.state_dict())
    graph.to(0).to_dtype(np.float64)
    opt_e, opt_g = make_optimizer(eager), make_optimizer(graph)
    step = make_step(graph, opt_g, cuda_graph=True)
    batch = ref.make_batch(hp, 3, [9, 7, 5], [24, 20, 16], seed=6)
    other = ref.make_batch(hp, 3, [9, 8, 4], [20, 24, 12], seed=7)      # same shape
    longer = ref.make_batch(hp, 3, [11, 8, 4], [20, 24, 12], seed=7)    # a new shape
    for b in (batch, batch, other, batch, longer, other):
        se = train_step_device(eager, opt_e, b).get()
        sg = step(b).get()
        np.testing.assert_allclose(sg, se, rtol=1e-9, atol=1e-12)
    assert len(step.captured._graphs) == 1           # `longer` was new: run eagerly
    # the weights after six Adam steps: atol 1e-9 (a wrong update is off by ~lr = 1e-3) because
    # a convolution's bias before batch norm has a gradient that is zero but for rounding (batch
    # norm removes the mean), and Adam divides it by its own size: a few ulps' difference in two
    # runs' reduction orders moved such a bias by 4e-12 on an H100 (2026-11-23)
    for (k, a), b in zip(eager.state_dict().items(), graph.state_dict().values()):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-9, atol=1e-9,
                                   err_msg=k)


def _torch_guided_attention(att, n_chars, n_frames, sigma):
    """ESPnet's GuidedAttentionLoss, written out: the mean over the valid (frame, character)
    cells of att * (1 - exp(-(n/N - t/T)^2 / (2 sigma^2)))."""
    B, T, Lc = att.shape
    w = torch.zeros(B, T, Lc, dtype=torch.float64)
    valid = torch.zeros(B, T, Lc, dtype=torch.bool)
    for b in range(B):
        t = torch.arange(n_frames[b], dtype=torch.float64)[:, None] / n_frames[b]
        n = torch.arange(n_chars[b], dtype=torch.float64)[None, :] / n_chars[b]
        w[b, :n_frames[b], :n_chars[b]] = 1 - torch.exp(-(n - t) ** 2 / (2 * sigma ** 2))
        valid[b, :n_frames[b], :n_chars[b]] = True
    return (att * w)[valid].mean()


@pytest.mark.parametrize("device_lengths", [False, True])
def test_guided_attention_loss_and_its_gradient(device_lengths):
    from train.tacotron2.model import guided_attention_loss
    rng = np.random.default_rng(12)
    a = rng.uniform(0, 1, (3, 11, 7))
    n_chars, n_frames = [7, 4, 5], [11, 9, 6]
    att = L.Tensor(a.astype(np.float32), requires_grad=True)
    lengths = (L.Tensor(np.array(n_chars)), L.Tensor(np.array(n_frames))) if device_lengths \
        else (n_chars, n_frames)
    loss = guided_attention_loss(att, *lengths, 0.3)
    loss.backward()
    t = torch.tensor(a, requires_grad=True)
    ref_loss = _torch_guided_attention(t, n_chars, n_frames, 0.3)
    ref_loss.backward()
    assert loss.dtype == np.float32
    assert abs(float(loss.numpy()) - ref_loss.item()) < 1e-6 * ref_loss.item()
    np.testing.assert_allclose(att.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-9)


def test_guided_attention_prefers_the_diagonal_and_joins_the_step():
    from train.tacotron2.model import guided_attention_loss
    T, Lc = 12, 12
    diagonal, anti = np.eye(T, Lc)[None], np.eye(T, Lc)[::-1][None]
    cost = [float(guided_attention_loss(L.Tensor(a.astype(np.float32)), [Lc], [T], 0.2).numpy())
            for a in (diagonal, anti)]
    t = np.arange(T)
    anti_cost = np.sum(1 - np.exp(-((T - 1 - t) / Lc - t / T) ** 2 / (2 * 0.2 ** 2))) / (T * Lc)
    assert cost[0] == 0 and abs(cost[1] - anti_cost) < 1e-6 and anti_cost > 0.05
    hp = HP.replace(guided_attention_sigma=0.2, guided_attention_weight=2.0)
    m, _ = pair(hp, np.float32)
    batch = ref.make_batch(hp, 3, [6, 6, 4], [7, 9, 8], seed=13)
    r = train_step(m, make_optimizer(m), batch)
    assert set(r) == {"loss", "mel", "postnet", "gate", "grad_norm", "attention"}
    assert r["attention"] > 0
    assert abs(r["loss"] - (r["mel"] + r["postnet"] + r["gate"] + r["attention"])) < 1e-5 * r["loss"]


def test_the_fused_and_the_composed_location_layer_give_one_step():
    """Attention.fuse_location (the location conv and dense layer composed into the fused
    attention op) against NVIDIA's conv and dense followed by the rest fused: same losses and
    gradients, float64."""
    from tools import tacotron2_torch as ref_model
    from train.tacotron2 import HParams, Tacotron2, make_optimizer, set_dropout, train_step
    from train.tacotron2.model import Attention
    hp = HParams.small()
    batch = ref_model.make_batch(hp, 3, [9, 7, 4], [12, 9, 11], seed=3)
    results, default = [], Attention.fuse_location
    for fused in (True, False):
        L.manual_seed(2)
        m = Tacotron2(hp)
        m.to_dtype(np.float64)
        set_dropout(m, False)
        Attention.fuse_location = fused
        try:
            losses = train_step(m, make_optimizer(m), batch)
        finally:
            Attention.fuse_location = default
        results.append((losses, {n: p.grad.numpy() for n, p in m.named_parameters()
                                 if p.grad is not None}))
    (a, ga), (b, gb) = results
    for k in a:
        assert abs(a[k] - b[k]) <= 1e-10 * abs(b[k]), k
    for n in gb:
        np.testing.assert_allclose(ga[n], gb[n], rtol=1e-8, atol=1e-12, err_msg=n)

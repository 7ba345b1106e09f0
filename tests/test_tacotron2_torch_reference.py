"""tools/tacotron2_torch.py, the PyTorch reference of NVIDIA tacotron2 that the engine's Tacotron 2
is tested against: NVIDIA's state_dict and init, the dropout switch, teacher forcing and masking,
inference stopping, the loss in closed form, one training step, the batch maker."""
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from tools import tacotron2_torch as ref
from train.tacotron2.hparams import HParams

HP = HParams.small()
TEXT_LENGTHS, MEL_LENGTHS = [9, 7, 12, 5], [20, 14, 17, 11]  # make_batch sorts by text length


@pytest.fixture(scope="module")
def default_model():
    torch.manual_seed(0)
    return ref.Tacotron2()


def small_model(seed=0):
    torch.manual_seed(seed)
    return ref.Tacotron2(HP).double()


def small_batch(seed=1):
    return ref.make_batch(HP, 4, TEXT_LENGTHS, MEL_LENGTHS, seed)


def forward(model, batch):
    t = ref.batch_to_torch(batch, model)
    return model(t.text_padded, t.input_lengths, t.mel_padded, t.output_lengths)


def test_state_dict_is_nvidias(default_model):
    sd = default_model.state_dict()
    assert len(sd) == 84
    assert sum(p.numel() for p in default_model.parameters()) == 28_193_153
    shapes = {
        "embedding.weight": (148, 512),
        "encoder.convolutions.0.0.conv.weight": (512, 512, 5),
        "encoder.convolutions.0.1.running_mean": (512,),
        "encoder.lstm.weight_ih_l0_reverse": (1024, 512),
        "decoder.prenet.layers.0.linear_layer.weight": (256, 80),
        "decoder.attention_rnn.weight_hh": (4096, 1024),
        "decoder.attention_rnn.weight_ih": (4096, 256 + 512),
        "decoder.decoder_rnn.weight_ih": (4096, 1024 + 512),
        "decoder.attention_layer.location_layer.location_conv.conv.weight": (32, 2, 31),
        "decoder.attention_layer.location_layer.location_dense.linear_layer.weight": (128, 32),
        "decoder.attention_layer.v.linear_layer.weight": (1, 128),
        "decoder.linear_projection.linear_layer.weight": (80, 1536),
        "decoder.gate_layer.linear_layer.bias": (1,),
        "postnet.convolutions.0.0.conv.weight": (512, 80, 5),
        "postnet.convolutions.4.1.num_batches_tracked": (),
    }
    for name, shape in shapes.items():
        assert tuple(sd[name].shape) == shape, name
    for no_bias in ("decoder.prenet.layers.0.linear_layer", "decoder.prenet.layers.1.linear_layer",
                    "decoder.attention_layer.query_layer.linear_layer",
                    "decoder.attention_layer.memory_layer.linear_layer",
                    "decoder.attention_layer.v.linear_layer",
                    "decoder.attention_layer.location_layer.location_conv.conv",
                    "decoder.attention_layer.location_layer.location_dense.linear_layer"):
        assert no_bias + ".bias" not in sd


def test_init_bounds_are_nvidias(default_model):
    """xavier_uniform with calculate_gain(...): bound = gain * sqrt(6 / (fan_in + fan_out))."""
    sd = default_model.state_dict()
    val = math.sqrt(3.0) * math.sqrt(2.0 / (148 + 512))
    cases = {
        "embedding.weight": val,
        "encoder.convolutions.0.0.conv.weight": math.sqrt(2) * math.sqrt(6 / (2 * 512 * 5)),
        "decoder.attention_layer.query_layer.linear_layer.weight": 5 / 3 * math.sqrt(6 / 1152),
        "decoder.gate_layer.linear_layer.weight": 1.0 * math.sqrt(6 / 1537),
        "decoder.linear_projection.linear_layer.weight": 1.0 * math.sqrt(6 / (1536 + 80)),
        "postnet.convolutions.4.0.conv.weight": 1.0 * math.sqrt(6 / ((512 + 80) * 5)),
    }
    for name, bound in cases.items():
        w = sd[name].abs().max().item()
        assert 0.98 * bound < w <= bound, (name, w, bound)


def test_dropout_switch():
    model, batch = small_model(), small_batch()

    def run(seed):
        torch.manual_seed(seed)
        return forward(model, batch)

    for mode in (model.train, model.eval):  # the prenet's dropout is on in eval mode too
        mode()
        assert not torch.equal(run(1)[0], run(2)[0])
        ref.set_dropout(model, False)
        assert all(torch.equal(x, y) for x, y in zip(run(1), run(2)))
        ref.set_dropout(model, True)


def test_teacher_forced_shapes_and_masking():
    model, batch = small_model(), small_batch()
    ref.set_dropout(model, False)
    mel, mel_postnet, gate, alignments = forward(model, batch)
    B, L, T = 4, max(TEXT_LENGTHS), max(MEL_LENGTHS)
    assert mel.shape == mel_postnet.shape == (B, HP.n_mel_channels, T)
    assert gate.shape == (B, T) and alignments.shape == (B, T, L)
    assert list(batch.input_lengths) == sorted(TEXT_LENGTHS, reverse=True)
    for i, (n, t) in enumerate(zip(batch.input_lengths, batch.output_lengths)):
        assert (mel[i, :, t:] == 0).all() and (mel_postnet[i, :, t:] == 0).all()
        assert (gate[i, t:] == 1e3).all() and (gate[i, :t].abs() < 1e3).all()
        assert (mel[i, :, :t] != 0).all() and (mel_postnet[i, :, :t] != 0).all()
        assert (alignments[i, :, n:] == 0).all() and (alignments[i, :, :n] > 0).all()
    torch.testing.assert_close(alignments.sum(2), torch.ones(B, T, dtype=torch.float64))


def test_teacher_forcing_step_t_reads_target_frame_t_minus_1():
    model, batch = small_model(), small_batch()
    ref.set_dropout(model, False)
    mel, _, gate, alignments = forward(model, batch)
    changed = batch.mel_padded.copy()
    changed[:, :, 5] += 1.0
    mel2, _, gate2, alignments2 = forward(model, batch._replace(mel_padded=changed))
    assert torch.equal(mel[..., :6], mel2[..., :6]) and torch.equal(gate[:, :6], gate2[:, :6])
    assert torch.equal(alignments[:, :6], alignments2[:, :6])
    assert not torch.equal(mel[..., 6], mel2[..., 6])


def test_inference_stops_at_the_gate():
    model, text = small_model().eval(), torch.randint(1, HP.n_symbols, (1, 10))
    ref.set_dropout(model, False)
    model.decoder.gate_layer.linear_layer.bias.data.fill_(50.0)  # sigmoid(gate) > 0.5 at once
    with torch.no_grad():
        mel, mel_postnet, gate, alignments = model.inference(text)
        assert mel.shape == mel_postnet.shape == (1, HP.n_mel_channels, 1)
        assert gate.shape == (1, 1) and alignments.shape == (1, 1, 10)
        assert model.inference(text, max_steps=25, stop_on_gate=False)[0].shape[2] == 25


def test_inference_stops_at_max_decoder_steps():
    model, text = small_model().eval(), torch.randint(1, HP.n_symbols, (1, 10))
    model.decoder.gate_layer.linear_layer.bias.data.fill_(-50.0)
    with torch.no_grad(), pytest.warns(UserWarning, match="max decoder steps"):
        mel = model.inference(text)[0]
    assert mel.shape[2] == HP.max_decoder_steps


def test_inference_equals_teacher_forcing_on_its_own_frames():
    model, text = small_model().eval(), torch.randint(1, HP.n_symbols, (1, 10))
    ref.set_dropout(model, False)
    with torch.no_grad():
        mel, mel_postnet, gate, alignments = model.inference(text, max_steps=24,
                                                             stop_on_gate=False)
        forced = model(text, torch.tensor([10]), mel, torch.tensor([24]))
    for x, y in zip((mel, mel_postnet, gate, alignments), forced):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_loss_in_closed_form():
    """Zero projection and gate weights: each real frame is the bias b (mel) and g (gate
    energy); the postnet's last BatchNorm zeroed makes mel_postnet = mel."""
    model, batch = small_model(), small_batch()
    rng = np.random.default_rng(0)
    b, g = rng.standard_normal(HP.n_mel_channels), 0.7
    with torch.no_grad():
        model.decoder.linear_projection.linear_layer.weight.zero_()
        model.decoder.linear_projection.linear_layer.bias.copy_(torch.from_numpy(b))
        model.decoder.gate_layer.linear_layer.weight.zero_()
        model.decoder.gate_layer.linear_layer.bias.fill_(g)
        model.postnet.convolutions[-1][1].weight.zero_()
        model.postnet.convolutions[-1][1].bias.zero_()
    mel, mel_postnet, _, _ = forward(model, batch)
    t = batch.output_lengths
    real = np.arange(mel.shape[2]) < t[:, None]  # (B, T)
    expected = np.where(real[:, None, :], b[:, None], 0.0)
    np.testing.assert_array_equal(mel.detach().numpy(), expected)
    np.testing.assert_array_equal(mel_postnet.detach().numpy(), expected)

    B, T = real.shape
    mse = ((expected - batch.mel_padded) ** 2).mean()
    softplus = lambda x: math.log1p(math.exp(x))
    bce = sum((n - 1) * softplus(g) + softplus(-g) for n in t) / (B * T)  # 1e3 vs 1: ~0
    losses = ref.train_step(model, ref.make_optimizer(model), batch)
    assert losses["mel"] == pytest.approx(mse, rel=1e-12)
    assert losses["postnet"] == pytest.approx(mse, rel=1e-12)
    assert losses["gate"] == pytest.approx(bce, rel=1e-12)
    assert losses["loss"] == pytest.approx(2 * mse + bce, rel=1e-12)


def test_train_step_clips_and_steps_adam():
    model, batch = small_model(), small_batch()
    ref.set_dropout(model, False)
    optimizer = ref.make_optimizer(model)
    assert optimizer.defaults["lr"] == 1e-3 and optimizer.defaults["weight_decay"] == 1e-6
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    steps = [ref.train_step(model, optimizer, batch) for _ in range(3)]
    assert set(steps[0]) == {"loss", "mel", "postnet", "gate", "grad_norm"}
    assert all(isinstance(v, float) for v in steps[0].values())
    assert steps[0]["grad_norm"] > HP.grad_clip_thresh  # so clipping was exercised
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    assert norm == pytest.approx(HP.grad_clip_thresh, rel=1e-6)  # grads are left clipped
    assert steps[2]["loss"] < steps[0]["loss"]
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_make_batch_is_nvidias_collate():
    batch = small_batch()
    assert batch == tuple(batch) and len(batch) == 5
    text, input_lengths, mel, gate, output_lengths = batch
    assert text.dtype == input_lengths.dtype == output_lengths.dtype == np.int64
    assert mel.dtype == gate.dtype == np.float32
    assert list(input_lengths) == [12, 9, 7, 5] and list(output_lengths) == [17, 20, 14, 11]
    assert text.shape == (4, 12) and mel.shape == (4, HP.n_mel_channels, 20)
    for i, (n, t) in enumerate(zip(input_lengths, output_lengths)):
        assert (text[i, :n] > 0).all() and (text[i, n:] == 0).all()
        assert (mel[i, :, t:] == 0).all() and (mel[i, :, :t] != 0).all()
        assert (gate[i, :t - 1] == 0).all() and (gate[i, t - 1:] == 1).all()
    again = small_batch()
    assert all(np.array_equal(x, y) for x, y in zip(batch, again))
    assert not np.array_equal(batch.mel_padded, small_batch(seed=2).mel_padded)


def test_hparams_are_nvidias_and_pure_data():
    hp = HParams()
    assert (hp.n_symbols, hp.symbols_embedding_dim, hp.n_mel_channels, hp.max_decoder_steps,
            hp.gate_threshold, hp.learning_rate, hp.weight_decay, hp.grad_clip_thresh) \
        == (148, 512, 80, 1000, 0.5, 1e-3, 1e-6, 1.0)
    assert hp.text_cleaners == ["english_cleaners"] and hp.mask_padding
    assert hp.replace(prenet_dim=7).prenet_dim == 7 and hp.prenet_dim == 256
    assert HParams.small(max_decoder_steps=3).max_decoder_steps == 3
    code = "import sys, train.tacotron2.hparams; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

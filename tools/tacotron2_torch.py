"""NVIDIA tacotron2 (model.py, layers.py, loss_function.py, train.py's step) in plain PyTorch: the
reference the engine's Tacotron 2 is tested against. Module and attribute names are NVIDIA's, so
state_dict keys and shapes are too; `set_dropout(model, False)` makes it deterministic."""
import warnings
from math import sqrt
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from train.tacotron2.hparams import HParams


class LinearNorm(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain="linear"):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)
        nn.init.xavier_uniform_(self.linear_layer.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=1, padding=None, bias=True,
                 w_init_gain="linear"):
        super().__init__()
        if padding is None:
            assert kernel_size % 2 == 1
            padding = (kernel_size - 1) // 2
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding, bias=bias)
        nn.init.xavier_uniform_(self.conv.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, signal):
        return self.conv(signal)


def get_mask_from_lengths(lengths, max_len):
    """(B,) lengths -> (B, max_len) bool, True at real (not padded) positions."""
    return torch.arange(max_len, device=lengths.device) < lengths.unsqueeze(1)


def set_dropout(model, enabled):
    """Turn every dropout of the model on or off, the prenet's included (NVIDIA keeps that one on
    even in eval mode). Off, the model is deterministic, for step-for-step comparisons."""
    for m in model.modules():
        if hasattr(m, "dropout_on"):
            m.dropout_on = enabled


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super().__init__()
        self.location_conv = ConvNorm(2, attention_n_filters, attention_kernel_size,
                                      padding=(attention_kernel_size - 1) // 2, bias=False)
        self.location_dense = LinearNorm(attention_n_filters, attention_dim, bias=False,
                                         w_init_gain="tanh")

    def forward(self, attention_weights_cat):
        """(B, 2, L) previous and cumulative weights -> (B, L, attention_dim)."""
        return self.location_dense(self.location_conv(attention_weights_cat).transpose(1, 2))


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim,
                 attention_location_n_filters, attention_location_kernel_size):
        super().__init__()
        self.query_layer = LinearNorm(attention_rnn_dim, attention_dim, bias=False,
                                      w_init_gain="tanh")
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False,
                                       w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(attention_location_n_filters,
                                            attention_location_kernel_size, attention_dim)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        """query (B, attention_rnn_dim), processed_memory (B, L, attention_dim) -> (B, L)."""
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights
                                     + processed_memory))
        return energies.squeeze(-1)

    def forward(self, attention_hidden_state, memory, processed_memory, attention_weights_cat,
                mask):
        """-> context (B, encoder_dim), weights (B, L); mask (B, L) is True at padded characters."""
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory,
                                                attention_weights_cat)
        if mask is not None:
            alignment = alignment.masked_fill(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
        return attention_context, attention_weights


class Prenet(nn.Module):
    def __init__(self, in_dim, sizes):
        super().__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList([LinearNorm(in_size, out_size, bias=False)
                                     for in_size, out_size in zip(in_sizes, sizes)])
        self.dropout_on = True

    def forward(self, x):
        for linear in self.layers:
            # NVIDIA: training=True, so the prenet stays stochastic at inference too.
            x = F.dropout(F.relu(linear(x)), p=0.5, training=self.dropout_on)
        return x


class Postnet(nn.Module):
    """Five Conv1d (kernel 5) + BatchNorm1d: n_mels -> 512 -> ... -> n_mels; tanh on all but the
    last."""

    def __init__(self, hparams):
        super().__init__()
        n = hparams.postnet_n_convolutions
        dims = [hparams.n_mel_channels] + [hparams.postnet_embedding_dim] * (n - 1) \
            + [hparams.n_mel_channels]
        self.convolutions = nn.ModuleList(
            nn.Sequential(ConvNorm(dims[i], dims[i + 1], hparams.postnet_kernel_size,
                                   w_init_gain="tanh" if i < n - 1 else "linear"),
                          nn.BatchNorm1d(dims[i + 1]))
            for i in range(n))
        self.dropout_on = True

    def forward(self, x):
        training = self.training and self.dropout_on
        for conv in self.convolutions[:-1]:
            x = F.dropout(torch.tanh(conv(x)), 0.5, training)
        return F.dropout(self.convolutions[-1](x), 0.5, training)


class Encoder(nn.Module):
    """Three Conv1d (kernel 5) + BatchNorm1d + ReLU, then a bidirectional LSTM."""

    def __init__(self, hparams):
        super().__init__()
        dim = hparams.encoder_embedding_dim
        self.convolutions = nn.ModuleList(
            nn.Sequential(ConvNorm(dim, dim, hparams.encoder_kernel_size, w_init_gain="relu"),
                          nn.BatchNorm1d(dim))
            for _ in range(hparams.encoder_n_convolutions))
        self.lstm = nn.LSTM(dim, dim // 2, 1, batch_first=True, bidirectional=True)
        self.dropout_on = True

    def convolve(self, x):
        """(B, encoder_dim, L) -> (B, L, encoder_dim)."""
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training and self.dropout_on)
        return x.transpose(1, 2)

    def forward(self, x, input_lengths):
        """Over the true lengths (sorted descending, as NVIDIA's collate sorts them); outputs at
        padded characters are 0."""
        x = self.convolve(x)
        packed = nn.utils.rnn.pack_padded_sequence(x, input_lengths.cpu(), batch_first=True)
        outputs, _ = self.lstm(packed)
        # total_length keeps L = the padded width, which is NVIDIA's max(input_lengths) for
        # collated batches.
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True,
                                                      total_length=x.size(1))
        return outputs

    def inference(self, x):
        outputs, _ = self.lstm(self.convolve(x))
        return outputs


class Decoder(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.n_mel_channels = hparams.n_mel_channels
        self.n_frames_per_step = hparams.n_frames_per_step
        self.encoder_embedding_dim = hparams.encoder_embedding_dim
        self.attention_rnn_dim = hparams.attention_rnn_dim
        self.decoder_rnn_dim = hparams.decoder_rnn_dim
        self.prenet_dim = hparams.prenet_dim
        self.max_decoder_steps = hparams.max_decoder_steps
        self.gate_threshold = hparams.gate_threshold
        self.p_attention_dropout = hparams.p_attention_dropout
        self.p_decoder_dropout = hparams.p_decoder_dropout
        self.dropout_on = True
        frame_dim = hparams.n_mel_channels * hparams.n_frames_per_step
        context_dim = hparams.encoder_embedding_dim

        self.prenet = Prenet(frame_dim, [hparams.prenet_dim, hparams.prenet_dim])
        self.attention_rnn = nn.LSTMCell(hparams.prenet_dim + context_dim,
                                         hparams.attention_rnn_dim)
        self.attention_layer = Attention(hparams.attention_rnn_dim, context_dim,
                                         hparams.attention_dim,
                                         hparams.attention_location_n_filters,
                                         hparams.attention_location_kernel_size)
        self.decoder_rnn = nn.LSTMCell(hparams.attention_rnn_dim + context_dim,
                                       hparams.decoder_rnn_dim)
        self.linear_projection = LinearNorm(hparams.decoder_rnn_dim + context_dim, frame_dim)
        self.gate_layer = LinearNorm(hparams.decoder_rnn_dim + context_dim, 1,
                                     w_init_gain="sigmoid")

    def get_go_frame(self, memory):
        """The all-zero frame the decoder starts from: (B, n_mels * n_frames_per_step)."""
        return memory.new_zeros(memory.size(0), self.n_mel_channels * self.n_frames_per_step)

    def initialize_decoder_states(self, memory, mask):
        """Zero LSTM states, attention weights and context; mask is None at inference."""
        B, L = memory.size(0), memory.size(1)
        self.attention_hidden = memory.new_zeros(B, self.attention_rnn_dim)
        self.attention_cell = memory.new_zeros(B, self.attention_rnn_dim)
        self.decoder_hidden = memory.new_zeros(B, self.decoder_rnn_dim)
        self.decoder_cell = memory.new_zeros(B, self.decoder_rnn_dim)
        self.attention_weights = memory.new_zeros(B, L)
        self.attention_weights_cum = memory.new_zeros(B, L)
        self.attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        self.memory = memory
        self.processed_memory = self.attention_layer.memory_layer(memory)
        self.mask = mask

    def parse_decoder_inputs(self, decoder_inputs):
        """(B, n_mels, T) -> (T / n_frames_per_step, B, n_mels * n_frames_per_step)."""
        decoder_inputs = decoder_inputs.transpose(1, 2)
        decoder_inputs = decoder_inputs.reshape(
            decoder_inputs.size(0), decoder_inputs.size(1) // self.n_frames_per_step, -1)
        return decoder_inputs.transpose(0, 1)

    def parse_decoder_outputs(self, mel_outputs, gate_outputs, alignments):
        """Lists over steps -> mel (B, n_mels, T), gate (B, T), alignments (B, T, L)."""
        alignments = torch.stack(alignments).transpose(0, 1)
        gate_outputs = torch.stack(gate_outputs).transpose(0, 1).contiguous()
        mel_outputs = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        mel_outputs = mel_outputs.view(mel_outputs.size(0), -1, self.n_mel_channels)
        return mel_outputs.transpose(1, 2), gate_outputs, alignments

    def decode(self, decoder_input):
        """One step from the prenet output (B, prenet_dim) -> mel frame (B, n_mels * r),
        gate energy (B, 1), attention weights (B, L)."""
        training = self.training and self.dropout_on
        cell_input = torch.cat((decoder_input, self.attention_context), -1)
        self.attention_hidden, self.attention_cell = self.attention_rnn(
            cell_input, (self.attention_hidden, self.attention_cell))
        self.attention_hidden = F.dropout(self.attention_hidden, self.p_attention_dropout,
                                          training)

        attention_weights_cat = torch.cat((self.attention_weights.unsqueeze(1),
                                           self.attention_weights_cum.unsqueeze(1)), dim=1)
        self.attention_context, self.attention_weights = self.attention_layer(
            self.attention_hidden, self.memory, self.processed_memory, attention_weights_cat,
            self.mask)
        self.attention_weights_cum = self.attention_weights_cum + self.attention_weights

        decoder_input = torch.cat((self.attention_hidden, self.attention_context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(
            decoder_input, (self.decoder_hidden, self.decoder_cell))
        self.decoder_hidden = F.dropout(self.decoder_hidden, self.p_decoder_dropout, training)

        decoder_hidden_attention_context = torch.cat((self.decoder_hidden,
                                                      self.attention_context), dim=1)
        decoder_output = self.linear_projection(decoder_hidden_attention_context)
        gate_prediction = self.gate_layer(decoder_hidden_attention_context)
        return decoder_output, gate_prediction, self.attention_weights

    def forward(self, memory, decoder_inputs, memory_lengths):
        """Teacher forcing: step t reads target frame t - 1 (the go frame at t = 0)."""
        decoder_inputs = torch.cat((self.get_go_frame(memory).unsqueeze(0),
                                    self.parse_decoder_inputs(decoder_inputs)), dim=0)
        # As NVIDIA: the prenet also sees the last target frame, which no step reads (this only
        # matters for the dropout RNG stream).
        decoder_inputs = self.prenet(decoder_inputs)
        self.initialize_decoder_states(
            memory, mask=~get_mask_from_lengths(memory_lengths, memory.size(1)))

        mel_outputs, gate_outputs, alignments = [], [], []
        for t in range(decoder_inputs.size(0) - 1):
            mel_output, gate_output, attention_weights = self.decode(decoder_inputs[t])
            mel_outputs.append(mel_output)
            gate_outputs.append(gate_output.squeeze(1))
            alignments.append(attention_weights)
        return self.parse_decoder_outputs(mel_outputs, gate_outputs, alignments)

    def inference(self, memory, max_steps, stop_on_gate=True):
        """Greedy decode from the go frame, feeding back each predicted frame; stops after the
        step where sigmoid(gate) > gate_threshold (for every item) or after max_steps."""
        decoder_input = self.get_go_frame(memory)
        self.initialize_decoder_states(memory, mask=None)

        mel_outputs, gate_outputs, alignments = [], [], []
        for _ in range(max_steps):
            mel_output, gate_output, alignment = self.decode(self.prenet(decoder_input))
            mel_outputs.append(mel_output)
            gate_outputs.append(gate_output.squeeze(1))
            alignments.append(alignment)
            if stop_on_gate and bool((torch.sigmoid(gate_output) > self.gate_threshold).all()):
                break
            decoder_input = mel_output
        else:
            if stop_on_gate:
                warnings.warn(f"reached max decoder steps ({max_steps}) before the gate fired")
        return self.parse_decoder_outputs(mel_outputs, gate_outputs, alignments)


class Tacotron2(nn.Module):
    def __init__(self, hparams=None):
        super().__init__()
        hparams = hparams or HParams()
        self.hparams = hparams
        self.mask_padding = hparams.mask_padding
        self.n_mel_channels = hparams.n_mel_channels
        self.n_frames_per_step = hparams.n_frames_per_step
        # Built in NVIDIA's order, so one seed gives NVIDIA's initial weights.
        self.embedding = nn.Embedding(hparams.n_symbols, hparams.symbols_embedding_dim)
        std = sqrt(2.0 / (hparams.n_symbols + hparams.symbols_embedding_dim))
        val = sqrt(3.0) * std  # uniform bounds for std
        nn.init.uniform_(self.embedding.weight, -val, val)
        self.encoder = Encoder(hparams)
        self.decoder = Decoder(hparams)
        self.postnet = Postnet(hparams)

    def parse_output(self, outputs, output_lengths=None):
        """With mask_padding, padded frames get mel 0, postnet mel 0 and gate energy 1e3.

        NVIDIA fills `.data` in place, hidden from autograd, so the postnet's first conv takes
        its weight gradient from the already masked mel (torchaudio's tracked in-place fill makes
        backward raise instead). Here the fill is out of place: the outputs are NVIDIA's, and
        every gradient is that of the forward as computed."""
        mel_outputs, mel_outputs_postnet, gate_outputs, alignments = outputs
        if self.mask_padding and output_lengths is not None:
            mask = ~get_mask_from_lengths(output_lengths, mel_outputs.size(2))
            mel_outputs = mel_outputs.masked_fill(mask.unsqueeze(1), 0.0)
            mel_outputs_postnet = mel_outputs_postnet.masked_fill(mask.unsqueeze(1), 0.0)
            gate_outputs = gate_outputs.masked_fill(mask, 1e3)
        return mel_outputs, mel_outputs_postnet, gate_outputs, alignments

    def forward(self, text, text_lengths, mels, mel_lengths):
        """text (B, L) long, text_lengths (B,) sorted descending, mels (B, n_mels, T),
        mel_lengths (B,) -> mel (B, n_mels, T), mel_postnet (B, n_mels, T), gate (B, T),
        alignments (B, T, L)."""
        embedded_inputs = self.embedding(text).transpose(1, 2)
        encoder_outputs = self.encoder(embedded_inputs, text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder(encoder_outputs, mels,
                                                             memory_lengths=text_lengths)
        mel_outputs_postnet = mel_outputs + self.postnet(mel_outputs)
        return self.parse_output([mel_outputs, mel_outputs_postnet, gate_outputs, alignments],
                                 mel_lengths)

    def inference(self, text, max_steps=None, stop_on_gate=True):
        """text (B, L) with no padding (NVIDIA decodes one sentence) -> mel, mel_postnet
        (B, n_mels, T), gate (B, T), alignments (B, T, L). max_steps defaults to
        max_decoder_steps; stop_on_gate=False runs exactly max_steps steps."""
        embedded_inputs = self.embedding(text).transpose(1, 2)
        encoder_outputs = self.encoder.inference(embedded_inputs)
        mel_outputs, gate_outputs, alignments = self.decoder.inference(
            encoder_outputs, max_steps or self.decoder.max_decoder_steps, stop_on_gate)
        mel_outputs_postnet = mel_outputs + self.postnet(mel_outputs)
        return mel_outputs, mel_outputs_postnet, gate_outputs, alignments


class Tacotron2Loss(nn.Module):
    """MSE(mel) + MSE(postnet mel) + BCE-with-logits(gate), each a mean over all (padded)
    elements, as NVIDIA's loss_function.py."""

    def forward(self, model_output, targets):
        """-> dict of tensors: 'loss' (the sum, to backpropagate), 'mel', 'postnet', 'gate'."""
        mel_target, gate_target = (t.detach() for t in targets)  # targets are constants
        mel_out, mel_out_postnet, gate_out, _ = model_output
        mel = F.mse_loss(mel_out, mel_target)
        postnet = F.mse_loss(mel_out_postnet, mel_target)
        gate = F.binary_cross_entropy_with_logits(gate_out, gate_target)
        return dict(loss=mel + postnet + gate, mel=mel, postnet=postnet, gate=gate)


class Batch(NamedTuple):
    """NVIDIA's TextMelCollate output, as NumPy arrays, sorted by text length descending."""
    text_padded: np.ndarray     # (B, L) int64, 0 (the pad symbol) after each text
    input_lengths: np.ndarray   # (B,) int64
    mel_padded: np.ndarray      # (B, n_mels, T) float32, 0 after each mel
    gate_padded: np.ndarray     # (B, T) float32, 1 from each mel's last frame on
    output_lengths: np.ndarray  # (B,) int64


def make_batch(hparams, batch_size, text_lengths, mel_lengths, seed=0):
    """A deterministic random batch: text_lengths and mel_lengths are one int each or one per
    item; symbols are drawn from 1..n_symbols-1, mel values from N(0, 1)."""
    rng = np.random.default_rng(seed)
    text_lengths = np.broadcast_to(np.asarray(text_lengths, np.int64), (batch_size,))
    mel_lengths = np.broadcast_to(np.asarray(mel_lengths, np.int64), (batch_size,))
    order = np.argsort(-text_lengths, kind="stable")
    text_lengths, mel_lengths = text_lengths[order], mel_lengths[order]

    r = hparams.n_frames_per_step
    T = -(-int(mel_lengths.max()) // r) * r  # rounded up to whole decoder steps, as the collate
    text_padded = np.zeros((batch_size, int(text_lengths.max())), np.int64)
    mel_padded = np.zeros((batch_size, hparams.n_mel_channels, T), np.float32)
    gate_padded = np.zeros((batch_size, T), np.float32)
    for i, (n, t) in enumerate(zip(text_lengths, mel_lengths)):
        text_padded[i, :n] = rng.integers(1, hparams.n_symbols, n)
        mel_padded[i, :, :t] = rng.standard_normal((hparams.n_mel_channels, t))
        gate_padded[i, t - 1:] = 1
    return Batch(text_padded, text_lengths, mel_padded, gate_padded, mel_lengths)


def make_optimizer(model, hparams=None):
    hparams = hparams or model.hparams
    return torch.optim.Adam(model.parameters(), lr=hparams.learning_rate,
                            weight_decay=hparams.weight_decay)


def batch_to_torch(batch, model):
    """Batch of NumPy arrays -> tensors on the model's device, floats in its dtype."""
    weight = model.embedding.weight
    return Batch(*(torch.as_tensor(a, device=weight.device,
                                   dtype=weight.dtype if a.dtype.kind == "f" else torch.long)
                   for a in batch))


def train_step(model, optimizer, batch):
    """One step of NVIDIA's train.py loop: forward, loss, backward, clip_grad_norm_, Adam.
    -> {'loss', 'mel', 'postnet', 'gate', 'grad_norm'} as floats (grad_norm before clipping)."""
    text_padded, input_lengths, mel_padded, gate_padded, output_lengths = \
        batch_to_torch(batch, model)
    model.zero_grad()
    y_pred = model(text_padded, input_lengths, mel_padded, output_lengths)
    losses = Tacotron2Loss()(y_pred, (mel_padded, gate_padded))
    losses["loss"].backward()
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), model.hparams.grad_clip_thresh)
    optimizer.step()
    return {**{k: v.item() for k, v in losses.items()}, "grad_norm": grad_norm.item()}

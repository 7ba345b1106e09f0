"""NVIDIA tacotron2's model on the layers engine: the same modules, attribute names (so the same
state_dict keys and shapes: a converted NVIDIA checkpoint loads), initialisation, teacher-forced
forward, greedy inference, loss and training step.

Shape legend: B batch, L characters, E encoder dim (512), T mel frames, M mel channels (80),
A attention dim (128). The decoder is a Python loop of LSTMCell steps with no host sync inside a
step (masks, lengths and the go frame are made before the loop).
"""
import contextlib
import math

import numpy as np

import layers as L
from layers import F, nn

from .hparams import HParams


class LinearNorm(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain="linear"):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)
        L.init.xavier_uniform_(self.linear_layer.weight, L.init.calculate_gain(w_init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(nn.Module):
    """Conv1d with 'same' padding for an odd kernel, xavier-initialised."""

    def __init__(self, in_channels, out_channels, kernel_size=1, padding=None, bias=True,
                 w_init_gain="linear"):
        super().__init__()
        if padding is None:
            if kernel_size % 2 != 1:
                raise ValueError(f"ConvNorm: 'same' padding needs an odd kernel, got {kernel_size}")
            padding = (kernel_size - 1) // 2
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding, bias=bias)
        L.init.xavier_uniform_(self.conv.weight, L.init.calculate_gain(w_init_gain))

    def forward(self, signal):
        return self.conv(signal)


class LocationLayer(nn.Module):
    def __init__(self, n_filters, kernel_size, attention_dim):
        super().__init__()
        self.location_conv = ConvNorm(2, n_filters, kernel_size, padding=(kernel_size - 1) // 2,
                                      bias=False)
        self.location_dense = LinearNorm(n_filters, attention_dim, bias=False, w_init_gain="tanh")

    def forward(self, weights_cat):
        """(B, 2, L) previous and cumulative attention weights -> (B, L, A)."""
        return self.location_dense(F.transpose(self.location_conv(weights_cat), 0, 2, 1))

    def kernel(self):
        """The conv (F, 2, K) and the dense layer (A, F), both bias-free, composed into one
        (2 K, A) kernel over the weights' windows (F.location_attention's): the same linear
        map, computed once a step instead of a conv, a transpose and a product a frame."""
        w = self.location_conv.conv.weight
        return F.matmul(F.transpose(F.reshape(w, w.shape[0], -1)),
                        F.transpose(self.location_dense.linear_layer.weight))


class Attention(nn.Module):
    """Location-sensitive attention: e = v . tanh(W q + U m + F (f * [w_prev, w_cum])), masked
    to -inf at padded characters, softmax over characters, context = weights . memory."""

    # False: NVIDIA's location conv and dense, then the rest of the attention in one kernel each
    # way -- measured faster on an H100 (captured step 42.5 vs 55.4 ms at 15 characters, 391 vs
    # 1,470 ms at 150 characters / 600 frames, docs/performance.md): the fused kernel's location
    # work runs L K A multiply-adds per block on one block per batch item. True composes the
    # location layer into the attention kernel (F.location_attention; fewer launches).
    fuse_location = False

    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim, n_filters, kernel_size):
        super().__init__()
        self.query_layer = LinearNorm(attention_rnn_dim, attention_dim, bias=False,
                                      w_init_gain="tanh")
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False,
                                       w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(n_filters, kernel_size, attention_dim)

    def forward(self, query, memory, processed_memory, weights_prev, weights_cum, mask,
                location_kernel=None):
        """query (B, attention_rnn_dim), memory (B, L, E), processed_memory (B, L, A), the
        previous and cumulative weights (B, L), mask (B, L) True at padded characters or None,
        location_kernel: location_layer.kernel(), made once for many frames (else here) ->
        context (B, E), weights (B, L)."""
        # after the query projection, one fused op (one kernel each way on the GPU) computes
        # NVIDIA's location layer, get_alignment_energies, masked_fill, softmax and bmm
        # (fuse_location True: the location layer too, composed into one (2K, A) kernel)
        if not self.fuse_location:
            location = self.location_layer(F.stack([weights_prev, weights_cum], 1))
            return F.additive_attention(self.query_layer(query), location, processed_memory,
                                        self.v.linear_layer.weight, memory, mask)
        if location_kernel is None:
            location_kernel = self.location_layer.kernel()
        return F.location_attention(self.query_layer(query), weights_prev, weights_cum,
                                    location_kernel, processed_memory,
                                    self.v.linear_layer.weight, memory, mask)


class Prenet(nn.Module):
    """Two Linear (no bias) + ReLU + dropout 0.5 that stays on at inference (NVIDIA's choice: it
    is what makes the decoder's output vary); `dropout_on` switches it off for comparisons."""

    def __init__(self, in_dim, sizes):
        super().__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList([LinearNorm(i, o, bias=False) for i, o in zip(in_sizes, sizes)])
        self.dropout_on = True

    def forward(self, x):
        for linear in self.layers:
            x = F.dropout(F.relu(linear(x)), 0.5, self.dropout_on)
        return x


class Postnet(nn.Module):
    """Five Conv1d (kernel 5) + BatchNorm1d: M -> 512 -> ... -> M; tanh on all but the last,
    dropout 0.5 (training)."""

    def __init__(self, hp):
        super().__init__()
        n = hp.postnet_n_convolutions
        dims = [hp.n_mel_channels] + [hp.postnet_embedding_dim] * (n - 1) + [hp.n_mel_channels]
        self.convolutions = nn.ModuleList(
            nn.Sequential(ConvNorm(dims[i], dims[i + 1], hp.postnet_kernel_size,
                                   w_init_gain="tanh" if i < n - 1 else "linear"),
                          nn.BatchNorm1d(dims[i + 1]))
            for i in range(n))
        self.dropout_on = True

    def forward(self, x):
        on = self.training and self.dropout_on
        for conv in list(self.convolutions)[:-1]:
            x = F.dropout(F.tanh(conv(x)), 0.5, on)
        return F.dropout(self.convolutions[-1](x), 0.5, on)


class Encoder(nn.Module):
    """Three Conv1d (kernel 5) + BatchNorm1d + ReLU + dropout 0.5, then a bidirectional LSTM
    over each text's true length (its outputs past the length are 0, as a packed sequence's)."""

    def __init__(self, hp):
        super().__init__()
        dim = hp.encoder_embedding_dim
        self.convolutions = nn.ModuleList(
            nn.Sequential(ConvNorm(dim, dim, hp.encoder_kernel_size, w_init_gain="relu"),
                          nn.BatchNorm1d(dim))
            for _ in range(hp.encoder_n_convolutions))
        self.lstm = nn.LSTM(dim, dim // 2, 1, batch_first=True, bidirectional=True)
        self.dropout_on = True

    def forward(self, x, input_lengths=None):
        """(B, E, L) -> (B, L, E)."""
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training and self.dropout_on)
        y, _ = self.lstm(F.transpose(x, 0, 2, 1), lengths=input_lengths)
        return y


class Decoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.n_mel_channels, self.n_frames_per_step = hp.n_mel_channels, hp.n_frames_per_step
        self.encoder_embedding_dim = hp.encoder_embedding_dim
        self.attention_rnn_dim, self.decoder_rnn_dim = hp.attention_rnn_dim, hp.decoder_rnn_dim
        self.max_decoder_steps, self.gate_threshold = hp.max_decoder_steps, hp.gate_threshold
        self.p_attention_dropout = hp.p_attention_dropout
        self.p_decoder_dropout = hp.p_decoder_dropout
        self.dropout_on = True
        frame = hp.n_mel_channels * hp.n_frames_per_step
        E = hp.encoder_embedding_dim
        self.prenet = Prenet(frame, [hp.prenet_dim, hp.prenet_dim])
        self.attention_rnn = nn.LSTMCell(hp.prenet_dim + E, hp.attention_rnn_dim)
        self.attention_layer = Attention(hp.attention_rnn_dim, E, hp.attention_dim,
                                         hp.attention_location_n_filters,
                                         hp.attention_location_kernel_size)
        self.decoder_rnn = nn.LSTMCell(hp.attention_rnn_dim + E, hp.decoder_rnn_dim)
        self.linear_projection = LinearNorm(hp.decoder_rnn_dim + E, frame)
        self.gate_layer = LinearNorm(hp.decoder_rnn_dim + E, 1, w_init_gain="sigmoid")

    def _zeros(self, memory, *shape):
        xp = np if memory.device == "cpu" else L.backend.cupy()
        return L.Tensor(xp.zeros(shape, dtype=memory.dtype))

    def _start(self, memory, mask):
        """The decoder's state before the first frame: zero LSTM states, weights and context."""
        B, Lc = memory.shape[0], memory.shape[1]
        z = self._zeros
        self.state = dict(
            attention=(z(memory, B, self.attention_rnn_dim), z(memory, B, self.attention_rnn_dim)),
            decoder=(z(memory, B, self.decoder_rnn_dim), z(memory, B, self.decoder_rnn_dim)),
            weights=z(memory, B, Lc), weights_cum=z(memory, B, Lc),
            context=z(memory, B, self.encoder_embedding_dim))
        self.memory, self.mask = memory, mask
        self.processed_memory = self.attention_layer.memory_layer(memory)
        self.location_kernel = self.attention_layer.location_layer.kernel() \
            if self.attention_layer.fuse_location else None

    def decode(self, prenet_out, project=True):
        """One frame from the prenet output (B, prenet_dim) -> mel frame (B, M * r), gate energy
        (B, 1), attention weights (B, L); project=False: (the projections' input (B,
        decoder_rnn_dim + E), attention weights) -- teacher forcing projects every frame at once."""
        s = self.state
        on = self.training and self.dropout_on
        h, c = self.attention_rnn(F.concat([prenet_out, s["context"]], -1), s["attention"])
        h = F.dropout(h, self.p_attention_dropout, on)
        context, weights = self.attention_layer(h, self.memory, self.processed_memory,
                                                s["weights"], s["weights_cum"], self.mask,
                                                self.location_kernel)
        dh, dc = self.decoder_rnn(F.concat([h, context], -1), s["decoder"])
        dh = F.dropout(dh, self.p_decoder_dropout, on)
        self.state = dict(attention=(h, c), decoder=(dh, dc), weights=weights,
                          weights_cum=s["weights_cum"] + weights, context=context)
        out = F.concat([dh, context], 1)
        if not project:
            return out, weights
        return self.linear_projection(out), self.gate_layer(out), weights

    def _outputs(self, mel, gate, alignments):
        """mel (B, T/r, M r), gate (B, T/r, 1), per-frame alignments -> mel (B, M, T), gate
        (B, T/r), alignments (B, T/r, L)."""
        B = mel.shape[0]
        mel = F.reshape(mel, B, -1, self.n_mel_channels)                    # (B, T, M)
        return (F.transpose(mel, 0, 2, 1), F.reshape(gate, B, -1), F.stack(alignments, 1))

    def forward(self, memory, decoder_inputs, mask):
        """Teacher forcing: frame t reads target frame t - 1 (a zero frame at t = 0).
        memory (B, L, E), decoder_inputs (B, M, T), mask (B, L) True at padded characters."""
        B, M, T = decoder_inputs.shape
        r = self.n_frames_per_step
        frames = F.reshape(F.transpose(decoder_inputs, 0, 2, 1), B, T // r, M * r)
        go = self._zeros(memory, B, 1, M * r)
        # as NVIDIA, the prenet runs once over every frame, the last one (which no step reads)
        # included, before the loop
        prenet = self.prenet(F.concat([go, frames], 1))               # (B, T/r + 1, prenet)
        steps = F.unstack(prenet, 1)           # one op: its backward stacks the T gradients once
        self._start(memory, mask)
        outs, alignments = [], []
        for t in range(T // r):
            out, weights = self.decode(steps[t], project=False)
            outs.append(out)
            alignments.append(weights)
        # teacher-forced, the projections feed nothing back: one product each over every frame
        # (B T/r rows) in place of two small ones a frame -- NVIDIA's values, fewer launches
        out = F.stack(outs, 1)                          # (B, T/r, decoder_rnn_dim + E)
        return self._outputs(self.linear_projection(out), self.gate_layer(out), alignments)

    def inference(self, memory, max_steps, stop_on_gate=True):
        """Greedy decoding from a zero frame, each predicted frame fed back; stops after the frame
        where sigmoid(gate) > gate_threshold for every item (one host read per frame), or after
        max_steps. Returns (mel, gate, alignments, whether the gate fired)."""
        B = memory.shape[0]
        frame = self._zeros(memory, B, self.n_mel_channels * self.n_frames_per_step)
        self._start(memory, None)
        mels, gates, alignments = [], [], []
        fired = False
        for _ in range(max_steps):
            mel, gate, weights = self.decode(self.prenet(frame))
            mels.append(mel)
            gates.append(gate)
            alignments.append(weights)
            if stop_on_gate and bool((F.sigmoid(gate).numpy() > self.gate_threshold).all()):
                fired = True
                break
            frame = mel
        return (*self._outputs(F.stack(mels, 1), F.stack(gates, 1), alignments), fired)


def lengths_mask(lengths, size, device):
    """(B,) lengths -> (B, size) bool on `device`, True past each length (the padding). lengths
    as a Tensor on `device`: computed there, nothing read back (a capturable step)."""
    if isinstance(lengths, L.Tensor):
        xp = L.backend.xp_of(lengths.data)
        return xp.arange(size)[None, :] >= lengths.data[:, None]
    mask = np.arange(size)[None, :] >= np.asarray(lengths)[:, None]
    return L.backend.to_device(mask, device)


class Tacotron2(nn.Module):
    """model(text, text_lengths, mels, mel_lengths) -> (mel, mel_postnet, gate, alignments),
    teacher-forced; model.inference(text) decodes greedily. Texts sorted by length, descending,
    as NVIDIA's collate (cuDNN's RNN takes any order; the NumPy path too)."""

    def __init__(self, hparams=None):
        super().__init__()
        hp = self.hparams = hparams or HParams()
        self.mask_padding = hp.mask_padding
        self.n_mel_channels = hp.n_mel_channels
        self.embedding = nn.Embedding(hp.n_symbols, hp.symbols_embedding_dim)
        val = math.sqrt(3.0) * math.sqrt(2.0 / (hp.n_symbols + hp.symbols_embedding_dim))
        L.init.uniform_(self.embedding.weight, -val, val)
        self.encoder = Encoder(hp)
        self.decoder = Decoder(hp)
        self.postnet = Postnet(hp)

    def forward(self, text, text_lengths, mels, mel_lengths):
        """text (B, L) int, text_lengths (B,), mels (B, M, T), mel_lengths (B,) -> mel, mel_postnet
        (B, M, T), gate (B, T), alignments (B, T, L). With mask_padding, frames past each length
        are filled: mel 0, postnet mel 0, gate energy 1e3 (out of place, so every gradient is that
        of what was computed).

        Lengths as host ints (lists, NumPy arrays) run the encoder LSTM as cuDNN's packed
        sequence; as integer Tensors on the model's device they are never read back (the step
        can be captured in a CUDA graph for any lengths of a shape) and the encoder LSTM takes
        its Tensor-lengths path: the same outputs."""
        mels = mels if isinstance(mels, L.Tensor) else L.as_tensor(mels, device=self.device)
        dtype = self.embedding.weight.dtype
        if mels.dtype != dtype:       # float32 targets, teacher-forcing a bfloat16 model (no grad)
            mels = L.Tensor(mels.data.astype(dtype))
        if not isinstance(text_lengths, L.Tensor):
            text_lengths = [int(n) for n in np.asarray(_host(text_lengths))]
        embedded = F.transpose(self.embedding(_data(text)), 0, 2, 1)           # (B, E, L)
        memory = self.encoder(embedded, text_lengths)
        mask = lengths_mask(text_lengths, memory.shape[1], self.device)
        mel, gate, alignments = self.decoder(memory, mels, mask)
        mel_postnet = mel + self.postnet(mel)
        if self.mask_padding and mel_lengths is not None:
            if not isinstance(mel_lengths, L.Tensor):
                mel_lengths = np.asarray(_host(mel_lengths))
            pad = lengths_mask(mel_lengths, mel.shape[2], self.device)
            mel = F.masked_fill(mel, pad[:, None, :], 0.0)
            mel_postnet = F.masked_fill(mel_postnet, pad[:, None, :], 0.0)
            gate = F.masked_fill(gate, pad, 1e3)
        return mel, mel_postnet, gate, alignments

    def inference(self, text, max_steps=None, stop_on_gate=True):
        """text (B, L) with no padding -> mel, mel_postnet (B, M, T), gate (B, T), alignments
        (B, T, L); and `self.gate_fired` says whether the gate stopped it (else it ran
        max_steps, max_decoder_steps by default). stop_on_gate=False runs exactly max_steps."""
        embedded = F.transpose(self.embedding(_data(text)), 0, 2, 1)
        memory = self.encoder(embedded)
        mel, gate, alignments, self._gate_fired = self.decoder.inference(
            memory, max_steps or self.decoder.max_decoder_steps, stop_on_gate)
        return mel, mel + self.postnet(mel), gate, alignments

    @property
    def gate_fired(self):
        """Whether the gate stopped the last inference (None before any). Kept private: a
        plain public attribute is a module setting, part of a captured step's key
        (layers.graph), and an inference result must not make the next step recapture."""
        return getattr(self, "_gate_fired", None)

    @property
    def device(self):
        return self.embedding.weight.device


def _host(a):
    return a.numpy() if isinstance(a, L.Tensor) else (a.get() if L.backend.is_gpu(a) else a)


def _ints_on(a, device):
    """An integer array (host or device, or a Tensor) as int64 on `device`."""
    a = _data(a)
    if not L.backend.is_gpu(a):
        a = np.asarray(a)
    return L.backend.to_device(a, device).astype(np.int64, copy=False)


def _data(a):
    return a.data if isinstance(a, L.Tensor) else a


def set_dropout(model, enabled):
    """Switch every dropout of the model on or off, the prenet's included (on at inference as
    NVIDIA has it). Off, the model is deterministic, for step-for-step comparisons."""
    for m in model.modules():
        if "dropout_on" in m.__dict__:
            m.dropout_on = enabled
    return model


def loss_parts(outputs, mel_target, gate_target):
    """NVIDIA's Tacotron2Loss: MSE(mel) + MSE(postnet mel) + BCE-with-logits(gate), each a mean
    over every (padded) element. -> dict of scalar Tensors 'loss', 'mel', 'postnet', 'gate'."""
    mel, mel_postnet, gate, _ = outputs
    parts = dict(mel=F.mse_loss(mel, mel_target), postnet=F.mse_loss(mel_postnet, mel_target),
                 gate=F.binary_cross_entropy_with_logits(gate, gate_target))
    return dict(loss=parts["mel"] + parts["postnet"] + parts["gate"], **parts)


def guided_attention_loss(alignments, text_lengths, mel_lengths, sigma):
    """Tachibana et al. (2017)'s guided attention loss: the mean, over every item's real frames t
    < T_b and characters n < N_b, of A[b, t, n] * (1 - exp(-(n / N_b - t / T_b)^2 / (2 sigma^2)))
    -- attention far from the diagonal costs, on it nearly nothing. alignments (B, T, L) Tensor;
    lengths (B,) on the host or the alignments' device (device arrays: nothing read back)."""
    device = alignments.device
    xp = np if device == "cpu" else L.backend.cupy()
    B, T, Lc = alignments.shape
    n_chars = _ints_on(text_lengths, device).astype(np.float32).reshape(B, 1, 1)
    n_frames = _ints_on(mel_lengths, device).astype(np.float32).reshape(B, 1, 1)
    t = xp.arange(T, dtype=np.float32).reshape(1, T, 1)
    n = xp.arange(Lc, dtype=np.float32).reshape(1, 1, Lc)
    valid = (t < n_frames) & (n < n_chars)
    w = 1 - xp.exp(-(n / n_chars - t / n_frames) ** 2 / np.float32(2 * sigma ** 2))
    w = xp.where(valid, w, np.float32(0)) / valid.sum().astype(np.float32)
    return (alignments.astype(np.float32) * L.Tensor(w)).sum()


def stat_names(hparams):
    """What a training step reports, in order: STATS, and 'attention' (the guided attention
    loss, already in 'loss') when hparams turn it on."""
    return STATS + (("attention",) if hparams.guided_attention_sigma > 0 else ())


def targets(model, mel_padded, gate_padded):
    """The batch's mel and gate targets as Tensors on the model's device, in its dtype -- float32
    for a bfloat16 model: the targets are not rounded, and the losses (which promote the model's
    bfloat16 outputs, as torch does) are float32."""
    dtype = L.backend.accumulation_dtype(model.embedding.weight.dtype)
    return tuple(L.as_tensor(L.backend.to_device(a, model.device).astype(dtype, copy=False))
                 for a in (mel_padded, gate_padded))


def make_optimizer(model, hparams=None, master_weights=False):
    """Adam with NVIDIA's lr and L2 weight decay (torch.optim.Adam's weight_decay);
    master_weights for a bfloat16 model (float32 masters: layers.optim.Optimizer)."""
    hp = hparams or model.hparams
    return L.optim.Adam(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay,
                        master_weights=master_weights)


def train_step_device(model, optimizer, batch, finite=None):
    """One step of NVIDIA's train.py loop -- forward, loss, backward, clip_grad_norm_, Adam --
    with no host sync: returns (loss, mel, postnet, gate, grad_norm) as one device array.
    batch = (text_padded, input_lengths, mel_padded, gate_padded, output_lengths), NVIDIA's
    collate order; arrays on the host or the model's device (lengths are read on the host).
    With a layers.finite.FiniteCheck of the model as `finite`, the step also records on the
    device which layer output or gradient first went non-finite."""
    text, text_lengths, mels, gates, mel_lengths = batch
    device = model.device
    xp = np if device == "cpu" else L.backend.cupy()
    mels, gates = targets(model, mels, gates)
    with finite if finite is not None else contextlib.nullcontext():
        model.zero_grad()
        outputs = model(L.backend.to_device(text, device), text_lengths, mels, mel_lengths)
        parts = loss_parts(outputs, mels, gates)
        hp = model.hparams
        if hp.guided_attention_sigma > 0:
            parts["attention"] = hp.guided_attention_weight * guided_attention_loss(
                outputs[3], text_lengths, mel_lengths, hp.guided_attention_sigma)
            parts["loss"] = parts["loss"] + parts["attention"]
        parts["loss"].backward()
        if finite is not None:
            finite.gradients(optimizer)
        grad_norm = L.optim.clip_grad_norm_(model.parameters(), model.hparams.grad_clip_thresh)
        optimizer.step()
    names = stat_names(model.hparams)
    return xp.stack([parts[k].data.astype(grad_norm.dtype) if k != "grad_norm" else
                     grad_norm.data for k in names])


STATS = ("loss", "mel", "postnet", "gate", "grad_norm")


def make_step(model, optimizer, cuda_graph=False, finite=None, max_graphs=8):
    """batch -> the step's STATS as one device array (train_step_device: no host sync).

    With cuda_graph on a GPU, the step is a layers.graph.CapturedStep keyed by the batch's
    shapes (B, characters, frames): the lengths go in as device Tensors (the encoder LSTM's
    Tensor-lengths path, masks computed on the device), so one graph serves every batch of a
    shape whatever its lengths. The first batch of a shape runs eagerly, the next is captured,
    later ones replay it; the most recently used shapes keep their graphs, at most max_graphs and
    half the device's memory (pad batches to a few shapes, data.Batches' pad_multiple, so they
    repeat)."""
    if model.device == "cpu" or not cuda_graph:
        return lambda batch: train_step_device(model, optimizer, batch, finite)

    def device_step(text, text_lengths, mels, gates, mel_lengths):
        return train_step_device(model, optimizer, (text, text_lengths, mels, gates,
                                                    mel_lengths), finite)
    captured = L.graph.CapturedStep(device_step, modules=(model,), optimizers=(optimizer,),
                                    max_graphs=max_graphs)

    def run(batch):
        text, text_lengths, mels, gates, mel_lengths = batch
        mels, gates = targets(model, mels, gates)
        text, text_lengths, mel_lengths = (_ints_on(a, model.device)
                                           for a in (text, text_lengths, mel_lengths))
        return captured(text, L.Tensor(text_lengths), mels.data, gates.data,
                        L.Tensor(mel_lengths))
    run.captured = captured
    return run


def train_step(model, optimizer, batch, finite=None):
    """train_step_device, read back: {'loss', 'mel', 'postnet', 'gate', 'grad_norm'} as floats
    (grad_norm before clipping; and 'attention' with the guided attention loss). One host
    sync."""
    values = _host(train_step_device(model, optimizer, batch, finite))
    return dict(zip(stat_names(model.hparams), (float(v) for v in values)))

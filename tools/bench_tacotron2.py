"""One Tacotron 2 training step (NVIDIA's hparams, batch 64, 15 characters, 87 frames: the seed's
"In his defense" experiment) timed on this engine (eager, and captured in a CUDA graph) and on
torchaudio's Tacotron 2 (eager), side by side in one run on one GPU: ms/step, mel frames/s, and -- from one profiled step of each, with
torch.profiler's CUPTI trace, which sees every kernel of the process -- kernels per step and
GPU-busy time.

    python -m tools.bench_tacotron2 --device 0 [--steps 10] [--batch-size 64]
                                    [--precision fp32|bf16|both] [--allow-tf32]
                                    [--foreach off|on|both] [--location fused|unfused|both]

Both take the same weights (torchaudio's mapped from ours in state_dict order) and the same
batch; convolutions may use TF32 on both (PyTorch's default), matmuls do not (neither's default).
mask_padding is off on both: torchaudio fills padded frames in place, which autograd refuses.
"""
import itertools
import statistics

import numpy as np

from tools.timing import (ROWS, add_foreach_argument, finite_statistics,
                          kernels_and_busy_ms, ms_per_call, report_non_finite, with_foreach)
from train import cli


def batch_of(hp, batch_size, chars, frames):
    from tools.tacotron2_torch import make_batch
    return make_batch(hp, batch_size, chars, frames, seed=0)


def ours(hp, batch, device, cuda_graph=False, precision="fp32"):
    """train.tacotron2's step (eager, or captured: make_step with cuda_graph, one CUDA graph for
    this batch's shape after one eager call; the on-device non-finite check as train.tacotron2
    makes it), in train.tacotron2's --precision: (step, model, sync). The step returns its
    statistics on the device."""
    import cupy
    import layers as L
    from layers.finite import FiniteCheck
    from train.common import set_precision
    from train.tacotron2 import Tacotron2, make_optimizer, make_step
    L.manual_seed(0)
    model = Tacotron2(hp).to(device)
    set_precision([model], precision)
    opt = make_optimizer(model, master_weights=precision != "fp32")
    text, text_lengths, mels, gates, mel_lengths = batch       # lengths stay on the host
    dev_batch = (L.backend.to_device(text, device), text_lengths, L.backend.to_device(mels, device),
                 L.backend.to_device(gates, device), mel_lengths)
    finite = FiniteCheck({"model": model}, every_call=False, keep_first=True)  # as train.tacotron2
    step = make_step(model, opt, cuda_graph=cuda_graph, finite=finite)
    return lambda: step(dev_batch), model, cupy.cuda.get_current_stream().synchronize


def torchaudio_model(hp, weights):
    """torchaudio.models.Tacotron2 with hparams hp (mask_padding off) holding `weights`, NVIDIA's
    parameters and buffers in state_dict order (torchaudio's names differ, its order does not)."""
    import torch
    import torchaudio
    model = torchaudio.models.Tacotron2(
        mask_padding=False, n_mels=hp.n_mel_channels, n_symbol=hp.n_symbols,
        n_frames_per_step=hp.n_frames_per_step, symbol_embedding_dim=hp.symbols_embedding_dim,
        encoder_embedding_dim=hp.encoder_embedding_dim,
        encoder_n_convolution=hp.encoder_n_convolutions,
        encoder_kernel_size=hp.encoder_kernel_size, decoder_rnn_dim=hp.decoder_rnn_dim,
        decoder_max_step=hp.max_decoder_steps, decoder_dropout=hp.p_decoder_dropout,
        attention_rnn_dim=hp.attention_rnn_dim, attention_hidden_dim=hp.attention_dim,
        attention_location_n_filter=hp.attention_location_n_filters,
        attention_location_kernel_size=hp.attention_location_kernel_size,
        attention_dropout=hp.p_attention_dropout, prenet_dim=hp.prenet_dim,
        postnet_n_convolution=hp.postnet_n_convolutions,
        postnet_kernel_size=hp.postnet_kernel_size,
        postnet_embedding_dim=hp.postnet_embedding_dim, gate_threshold=hp.gate_threshold)
    sd = model.state_dict()
    if [tuple(v.shape) for v in sd.values()] != [w.shape for w in weights]:
        raise SystemExit("error: torchaudio's Tacotron2 parameters do not line up with NVIDIA's "
                         "in state_dict order; the weight mapping needs updating")
    model.load_state_dict({k: torch.from_numpy(w) for k, w in zip(sd, weights)})
    return model


def torchaudio_step(hp, batch, device, weights):
    import torch
    dev = f"cuda:{device}"
    model = torchaudio_model(hp, weights).to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=hp.learning_rate, weight_decay=hp.weight_decay)
    text, text_lengths, mels, gates, mel_lengths = (torch.as_tensor(a, device=dev)
                                                    for a in batch)

    def step():
        opt.zero_grad()
        mel, post, gate, _ = model(text, text_lengths, mels, mel_lengths)
        loss = torch.nn.functional.mse_loss(mel, mels) + torch.nn.functional.mse_loss(post, mels) \
            + torch.nn.functional.binary_cross_entropy_with_logits(gate, gates)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip_thresh)
        opt.step()
    return step, torch.cuda.synchronize


def main():
    ap = cli.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=64, help="[64]")
    ap.add_argument("--chars", type=cli.positive_int, default=15, help="text length [15]")
    ap.add_argument("--frames", type=cli.positive_int, default=87, help="mel frames [87]")
    ap.add_argument("--steps", type=cli.positive_int, default=10, help="timed steps per run [10]")
    ap.add_argument("--warmup", type=cli.nonnegative_int, default=3,
                    help="untimed steps before each run [3]")
    ap.add_argument("--repeats", type=cli.positive_int, default=3,
                    help="runs of each row, interleaved; the median is reported [3]")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "both"],
                    help="this engine in train.tacotron2's --precision (bf16: bfloat16 model, "
                         "float32 master weights), or rows of both; torchaudio stays float32 "
                         "[fp32]")
    ap.add_argument("--allow-tf32", action="store_true",
                    help="float32 matmuls on TF32 tensor cores on both engines "
                         "(cudnnlite.blas.configure(allow_tf32=True), "
                         "torch.backends.cuda.matmul.allow_tf32) [off: both engines' default]")
    ap.add_argument("--location", default="unfused", choices=["fused", "unfused", "both"],
                    help="this engine's attention location layer as NVIDIA's conv and dense "
                         "before the fused attention kernel (the model's default), or composed "
                         "into that kernel (Attention.fuse_location = True), or rows of both "
                         "[unfused]")
    add_foreach_argument(ap)
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times the GPU path against torchaudio's")
    import cupy
    import torch

    import layers as L
    from cudnnlite import blas, conv
    from train.tacotron2 import HParams
    conv.configure(allow_tf32=True)
    torch.backends.cudnn.allow_tf32 = True
    blas.configure(allow_tf32=args.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = args.allow_tf32
    hp = HParams(mask_padding=False)
    batch = batch_of(hp, args.batch_size, args.chars, args.frames)
    runs, weights = {}, None
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    foreachs = ROWS[args.foreach]
    locations = {"fused": [True], "unfused": [False], "both": [True, False]}[args.location]
    for precision, foreach, fused, mode in itertools.product(precisions, foreachs, locations,
                                                             ("eager", "captured")):
        step, model, sync = ours(hp, batch, args.device, mode == "captured", precision)
        model.decoder.attention_layer.fuse_location = fused
        if weights is None:
            weights = [L.backend.to_device(v, "cpu").astype(np.float32)
                       for v in model.state_dict().values()]
        runs[f"cudnnlite {mode}{'' if precision == 'fp32' else ' ' + precision}"
             f"{'' if foreach else ' per-tensor'}{' fused loc' if fused else ''}"] = \
            (with_foreach(foreach, step), sync)
    runs["torchaudio eager"] = torchaudio_step(hp, batch, args.device, weights)
    times = {name: [] for name in runs}
    for _ in range(args.repeats):                   # interleaved, so drift hits both alike
        for name, (step, sync) in runs.items():
            times[name].append(ms_per_call(step, sync, args.warmup, args.steps))
    frames = args.batch_size * args.frames
    name = cupy.cuda.runtime.getDeviceProperties(args.device)["name"].decode()
    print(f"Tacotron 2 train step, batch {args.batch_size}, {args.chars} characters, "
          f"{args.frames} frames, {name}; matmuls {'TF32' if args.allow_tf32 else 'float32'}")
    print(f"{'engine':<44} {'ms/step':>8} {'mel frames/s':>13} {'kernels':>8} {'GPU busy ms':>12}"
          f"   runs (ms/step)")
    for name, (step, sync) in runs.items():
        med = statistics.median(times[name])
        kernels, busy = kernels_and_busy_ms(step, sync)
        print(f"{name:<44} {med:8.1f} {frames / med * 1e3:13.0f} {kernels:8d} {busy:12.1f}   "
              + " ".join(f"{t:.1f}" for t in times[name]))
    bad = [name for name, (step, sync) in runs.items()
           if name.startswith("cudnnlite") and not finite_statistics(step, sync)]
    for name in runs:
        if name.startswith("cudnnlite"):
            ratio = statistics.median(times["torchaudio eager"]) / statistics.median(times[name])
            print(f"speed-up of {name} over torchaudio eager: {ratio:.2f}x")
    return report_non_finite(bad, "losses and gradient norm")


if __name__ == "__main__":
    raise SystemExit(main())

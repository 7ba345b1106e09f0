"""Train Tacotron 2, or synthesise speech with a trained one.

    python -m train.tacotron2 --device 0                      # the offline default corpus
    python -m train.tacotron2 --device 0 --dataroot LJSpeech-1.1
    python -m train.tacotron2 --device 0 --overfit "In his defense."      # the seed's experiment
    python -m train.tacotron2 synthesize --checkpoint out/tacotron2/checkpoint.npz "Some text."

Every --every epochs (and when training stops): validation loss, PNGs of the target and
predicted mel and of the attention alignment, a Griffin-Lim WAV of a fixed sentence, the loss
curve, and an atomic, exactly resumable checkpoint.
"""
import argparse
import dataclasses
import math
import os
import sys

import numpy as np

import layers as L
from layers.finite import FiniteCheck

from .. import cli
from ..common import (PRECISIONS, CheckpointError, DeviceStats, LossLog, Progress,
                      checkpoint_meta, first_non_finite, load_checkpoint, load_state, meta_of,
                      override_hyper, pyplot, rate_cell, read_arrays, resume_point,
                      save_checkpoint, set_precision, stopped_note)
from . import audio, data
from .hparams import HParams
from .model import Tacotron2, loss_parts, make_optimizer, make_step, stat_names, targets

FIXED_SENTENCE = "In his defense."      # the seed's sentence: spoken at every report


# ---- arguments ---------------------------------------------------------------------------------

# NVIDIA's hparams that this CLI takes as flags (the training loop reads the flags, not these)
BY_FLAG = {"batch_size": "--batch-size", "epochs": "--epochs", "seed": "--seed",
           "iters_per_checkpoint": "--every (epochs between checkpoints)"}


def hparams_from(text, base=None):
    """HParams with NVIDIA-style overrides 'name=value,name=value' (train.py's --hparams)."""
    hp = base or HParams()
    if not text:
        return hp
    fields = {f.name: f for f in dataclasses.fields(HParams)}
    changes = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in fields:
            cli.fail(f"--hparams {text}: {item!r} is not name=value with a name of HParams "
                     f"(e.g. decoder_rnn_dim=1024; the names: "
                     f"{', '.join(sorted(set(fields) - set(BY_FLAG)))})")
        if name in BY_FLAG:
            cli.fail(f"--hparams {text}: {name} is set by {BY_FLAG[name]}; expected it there")
        kind = type(getattr(hp, name))
        try:
            if kind is bool:
                if value.strip().lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                changes[name] = value.strip().lower() in ("true", "1")
            elif kind is list:
                changes[name] = [v for v in value.split(";") if v]
            else:
                changes[name] = kind(value)
        except ValueError:
            what = {int: "an integer", float: "a number", bool: "true or false"}.get(
                kind, kind.__name__)
            cli.fail(f"--hparams {text}: {name}={value!r}: expected {what}")
        v = changes[name]
        if kind is int and name != "seed" and v < 1:
            cli.fail(f"--hparams {text}: {name}={v}: expected a positive integer")
        if kind is float and not (math.isfinite(v) and (0 <= v < 1 if name.startswith("p_")
                                                        or name == "gate_threshold" else v >= 0)):
            cli.fail(f"--hparams {text}: {name}={v}: expected "
                     + ("a probability in [0, 1)" if name.startswith("p_") or
                        name == "gate_threshold" else "a finite number >= 0"))
    hp = hp.replace(**changes)
    from .audio import mel_filterbank
    from .text import _CLEANERS, symbols
    unknown = [c for c in hp.text_cleaners if c not in _CLEANERS]
    empty = 0 if hp.win_length > hp.filter_length or not 0 <= hp.mel_fmin < hp.mel_fmax else \
        int((mel_filterbank(hp.sampling_rate, hp.filter_length, hp.n_mel_channels, hp.mel_fmin,
                            hp.mel_fmax).max(axis=1) <= 0).sum())
    for bad, why in ((hp.n_frames_per_step != 1,
                      f"n_frames_per_step={hp.n_frames_per_step}: NVIDIA's model takes 1 only"),
                     (hp.win_length > hp.filter_length,
                      f"win_length={hp.win_length} is longer than filter_length="
                      f"{hp.filter_length}; expected a window within the FFT"),
                     (hp.hop_length > hp.win_length,
                      f"hop_length={hp.hop_length} is longer than win_length={hp.win_length}: "
                      f"the STFT would skip samples; expected a hop within the window"),
                     (empty,
                      f"n_mel_channels={hp.n_mel_channels} over filter_length="
                      f"{hp.filter_length}: {empty} mel bands get no FFT bin (they would be "
                      f"empty); expected a longer filter_length or fewer bands"),
                     (unknown,
                      f"text_cleaners: unknown cleaner(s) {unknown}; known: "
                      f"{sorted(_CLEANERS)}"),
                     (hp.n_symbols < len(symbols),
                      f"n_symbols={hp.n_symbols}: the text front end has {len(symbols)} "
                      f"symbols; expected at least that"),
                     (not 0 <= hp.mel_fmin < hp.mel_fmax <= hp.sampling_rate / 2,
                      f"mel_fmin={hp.mel_fmin}, mel_fmax={hp.mel_fmax}: expected 0 <= mel_fmin "
                      f"< mel_fmax <= sampling_rate / 2 = {hp.sampling_rate / 2:g}"),
                     # (NVIDIA's model: 'same' padding (k - 1) / 2, a bidirectional encoder LSTM
                     # of encoder_embedding_dim / 2 a direction fed by the embedding)
                     *((getattr(hp, k) % 2 == 0, f"{k}={getattr(hp, k)}: expected an odd size "
                        f"(NVIDIA's model pads (k - 1) / 2 each side)")
                       for k in ("encoder_kernel_size", "attention_location_kernel_size",
                                 "postnet_kernel_size")),
                     (hp.encoder_embedding_dim % 2,
                      f"encoder_embedding_dim={hp.encoder_embedding_dim}: expected an even size "
                      f"(the bidirectional encoder LSTM has half of it a direction)"),
                     (hp.symbols_embedding_dim != hp.encoder_embedding_dim,
                      f"symbols_embedding_dim={hp.symbols_embedding_dim}, encoder_embedding_dim="
                      f"{hp.encoder_embedding_dim}: expected them equal (the embedding feeds "
                      f"the encoder's convolutions)")):
        if bad:
            cli.fail(f"--hparams {text}: {why}")
    return hp


def train_parser():
    p = cli.ArgumentParser(prog="python -m train.tacotron2",
                           description="Train Tacotron 2 (NVIDIA's model and hparams).",
                           epilog="To speak with a trained model: python -m train.tacotron2 "
                                  "synthesize --checkpoint CKPT 'Some text.' (see synthesize "
                                  "--help).")
    p.add_argument("--device", type=cli.device, default=0,
                   help="GPU index, or 'cpu' for the NumPy path [0]")
    p.add_argument("--dataroot", default=None,
                   help="an LJSpeech-1.1 folder (metadata.csv, wavs/) [the default corpus: "
                        "sentences espeak-ng speaks on first use, kept in --data-cache; a "
                        "resumed run: its checkpoint's]")
    p.add_argument("--data-cache", default=None,
                   help=f"folder for the default corpus and for mels when --dataroot is not "
                        f"writable [{data.default_root()}]")
    p.add_argument("--overfit", default=None, metavar="TEXT",
                   help="train on this one sentence (espeak-ng's speech of it) repeated to the "
                        "batch size: the seed's experiment")
    p.add_argument("--outf", default=None, help="folder for logs, PNGs, WAVs, checkpoints "
                   "[out/tacotron2; a resumed run: its checkpoint's folder]")
    p.add_argument("--epochs", type=cli.positive_int, default=None,
                   help="[500; a resumed run: its checkpoint's, unless given (to extend it)]")
    p.add_argument("--batch-size", type=cli.positive_int, default=None,
                   help="[64; a resumed run keeps its checkpoint's]")
    p.add_argument("--lr", type=cli.positive_float, default=None,
                   help="Adam's learning rate [1e-3; given with --resume, it replaces the "
                        "checkpoint's]")
    p.add_argument("--seed", type=cli.seed, default=None,
                   help="[1234; a resumed run keeps its checkpoint's: it drew the data split]")
    p.add_argument("--val-ratio", type=float, default=None,
                   help="share of the data held out for validation; 0: none, the validation "
                        "loss and plots then use the first training utterance [0.05; a resumed "
                        "run keeps its checkpoint's]")
    p.add_argument("--every", type=cli.positive_int, default=10,
                   help="epochs between reports and checkpoints [10]")
    p.add_argument("--gl-iters", type=cli.positive_int, default=60,
                   help="Griffin-Lim iterations of the report WAV [60]")
    p.add_argument("--hparams", default="",
                   help="NVIDIA-style overrides, e.g. 'decoder_rnn_dim=512,max_decoder_steps=500'")
    p.add_argument("--resume", default="", help="a checkpoint.npz to continue exactly")
    p.add_argument("--max-steps", type=cli.nonnegative_int, default=0,
                   help="stop after this many steps [0: off]")
    p.add_argument("--log-every", type=cli.positive_int, default=10,
                   help="steps between reading the losses back from the GPU (one transfer, no "
                        "per-step wait; every step is still logged) [10]")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="fp32, or bf16: bfloat16 weights and activations with float32 master "
                        "weights in Adam [fp32; a resumed run keeps its checkpoint's]")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="GPU: capture the step in a CUDA graph per batch shape and replay it for "
                        "every later batch of that shape, whatever its lengths [on for a GPU "
                        "device (H100: 41.4 against 230.8 ms a step eagerly), except for batches "
                        "padded 1,1 (--pad-multiple 1,1, or a resumed run that padded so)]")
    p.add_argument("--allow-tf32", action="store_true",
                   help="float32 matmuls (Linear, the LSTM cells' products, the attention's) on "
                        "TF32 tensor cores, as torch.backends.cuda.matmul.allow_tf32 = True "
                        "[off, as PyTorch's default; convolutions use TF32 either way, as "
                        "PyTorch's cuDNN default]")
    p.add_argument("--pad-multiple", type=cli.positive_int_pair, default=None,
                   metavar="CHARS,FRAMES",
                   help="round each batch's padded text length and frame count up to these "
                        "multiples, so batches come in few shapes [16,64 when the step is "
                        "captured, else 1,1: NVIDIA's padding; a resumed run keeps its "
                        "checkpoint's]")
    return p


def captures_by_default(device, pad_multiple, saved_pad_multiple):
    """--cuda-graph's default: on for a GPU device, but not for batches padded 1,1 (given, or
    kept from the checkpoint resumed), which come in too many shapes to capture -- each new one
    would run eagerly, then be captured."""
    return device != "cpu" and (pad_multiple or saved_pad_multiple) != (1, 1)


def synth_parser():
    p = cli.ArgumentParser(prog="python -m train.tacotron2 synthesize",
                           description="Speak a text with a trained Tacotron 2.")
    p.add_argument("text", help="what to say")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz that training wrote")
    p.add_argument("--device", type=cli.device, default=0,
                   help="GPU index, or 'cpu' for the NumPy path [0]")
    p.add_argument("--outf", default="out/tacotron2/synthesized",
                   help="folder for mel.png, alignment.png, speech.wav "
                        "[out/tacotron2/synthesized]")
    p.add_argument("--max-decoder-steps", type=cli.positive_int, default=None,
                   help="[the checkpoint's max_decoder_steps]")
    p.add_argument("--gl-iters", type=cli.positive_int, default=60,
                   help="Griffin-Lim iterations [60]")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the prenet's dropout [0]")
    return p


# ---- reports -------------------------------------------------------------------------------

def rng_kept():
    """Run the block (validation, synthesis: dropout draws numbers) without moving the host and
    device generators, so a report changes nothing a later training step sees."""
    return L.random.fork_rng()


def validation_loss(model, batches):
    """Mean loss parts of teacher-forced eval-mode passes over the validation batches."""
    sums, n = dict.fromkeys(("loss", "mel", "postnet", "gate"), 0.0), 0
    model.eval()
    try:
        with L.no_grad():
            for b in batches:
                mels, gates = targets(model, b.mel_padded, b.gate_padded)
                out = model(b.text_padded, b.input_lengths, mels, b.output_lengths)
                for k, v in loss_parts(out, mels, gates).items():
                    sums[k] += v.item()
                n += 1
    finally:
        model.train()
    return {k: v / max(n, 1) for k, v in sums.items()}, out, b


def speak(model, text, max_steps=None, gl_iters=60, seed=0):
    """(mel_postnet (n_mels, T) NumPy, alignments (T, L) NumPy, wav, gate fired?) for `text`, the
    model in eval mode (its prenet dropout stays on, as NVIDIA's)."""
    from .text import text_to_sequence
    hp = model.hparams
    ids = np.asarray([text_to_sequence(text, hp.text_cleaners)], np.int64)
    if ids.size == 0:
        raise ValueError(f"the text {text!r} has no symbol left after the cleaners "
                         f"{list(hp.text_cleaners)}; expected something to say")
    model.eval()
    try:
        with L.no_grad():
            _, mel_postnet, _, align = model.inference(ids, max_steps=max_steps)
    finally:
        model.train()
    mel = mel_postnet.data[0].astype(np.float32, copy=False)     # (a bf16 model's outputs)
    wav = audio.griffin_lim(mel, n_iter=gl_iters, sr=hp.sampling_rate, n_fft=hp.filter_length,
                            hop=hp.hop_length, win=hp.win_length, n_mels=hp.n_mel_channels,
                            fmin=hp.mel_fmin, fmax=hp.mel_fmax, seed=seed)
    return (L.backend.to_device(mel, "cpu"), align.numpy()[0].astype(np.float32, copy=False),
            L.backend.to_device(wav, "cpu"), model.gate_fired)


def save_mel_png(path, mels, titles):
    plt = pyplot()
    fig, axes = plt.subplots(len(mels), 1, figsize=(8, 2.5 * len(mels)), squeeze=False)
    for ax, mel, title in zip(axes[:, 0], mels, titles):
        im = ax.imshow(mel, aspect="auto", origin="lower", interpolation="none")
        ax.set_title(title)
        ax.set_ylabel("mel channel")
        fig.colorbar(im, ax=ax)
    axes[-1, 0].set_xlabel("frame")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save_alignment_png(path, alignment, title):
    """alignment (T, L): decoder frame against encoder character, as NVIDIA's plots."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    im = ax.imshow(alignment.T, aspect="auto", origin="lower", interpolation="none")
    fig.colorbar(im, ax=ax)
    ax.set_xlabel("decoder frame")
    ax.set_ylabel("encoder character")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(model, val_batches, epoch, step, args, vlog):
    """Validation loss (logged), target vs predicted mel and alignment PNGs of a validation item,
    and the fixed sentence spoken: PNGs and a Griffin-Lim WAV."""
    with rng_kept():
        parts, out, b = validation_loss(model, val_batches)
        vlog.write(dict(parts, epoch=epoch, step=step))
        vlog.flush()
        T = int(b.output_lengths[0])
        n = int(b.input_lengths[0])
        pred = out[1].numpy()[0, :, :T].astype(np.float32, copy=False)
        tag = os.path.join(args.outf, f"epoch_{epoch:04d}")
        save_mel_png(tag + "_mel.png", [b.mel_padded[0, :, :T], pred],
                     ["target mel (validation)", f"predicted mel (teacher-forced), epoch {epoch}"])
        save_alignment_png(tag + "_alignment.png",
                           out[3].numpy()[0, :T, :n].astype(np.float32, copy=False),
                           f"validation alignment, epoch {epoch}, step {step}")
        sentence = args.overfit or FIXED_SENTENCE
        mel, align, wav, fired = speak(model, sentence, gl_iters=args.gl_iters)
        save_alignment_png(tag + "_inference_alignment.png", align,
                           f"{sentence!r}, epoch {epoch}" + ("" if fired else " (gate never fired)"))
        audio.save_wav(tag + ".wav", wav, sr=model.hparams.sampling_rate)
        if not fired or not np.any(wav):
            what = "the gate never fired" if not fired else \
                f"the gate fired after {mel.shape[1]} frame(s)"
            print(f"note: epoch {epoch}'s {os.path.basename(tag)}.wav: {what}"
                  f"{'' if np.any(wav) else ', so it holds no sound'} -- the model may need "
                  f"more training")
    return parts


# ---- training ----------------------------------------------------------------------------------

def load_data(args, hp):
    """(train examples, validation examples, whether those were held out), or a one-line error
    naming what is wrong. With nothing held out (--overfit, --val-ratio 0, or a corpus too small
    for one held-out utterance) the validation loss and plots use the first training example."""
    try:
        if args.overfit is not None:
            train = data.overfit_dataset(args.overfit, batch_size=args.batch_size, hparams=hp)
            return train, train[:1], False
        cache = args.data_cache or data.default_root()     # (--data-cache's default)
        root = args.dataroot or _default_corpus(args, cache)
        items = data.load_ljspeech(root, hp)
        train_items, val_items = data.split(items, args.val_ratio, args.seed)
        return (data.mels_for(train_items, hp, cache),
                data.mels_for(val_items or train_items[:1], hp, cache), bool(val_items))
    except (data.DatasetError, ValueError) as e:
        cli.fail(f"--overfit {args.overfit!r}: {e}" if args.overfit is not None else
                 f"--dataroot {args.dataroot or '(default corpus)'}: {e}")


def _default_corpus(args, cache):
    """The default corpus's folder, built under --data-cache where missing; an error names
    --data-cache (its folder is the one that failed)."""
    try:
        return data.default_corpus(cache)
    except (data.DatasetError, OSError) as e:
        cli.fail(f"--data-cache {cache}{'' if args.data_cache else ' (its default)'}: {e}")


def checkpoint_hparams(meta):
    """The HParams a train.tacotron2 checkpoint (its meta, from checkpoint_meta) was trained
    with."""
    try:
        return HParams(**meta["hparams"])
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"it is not a train.tacotron2 checkpoint ({type(e).__name__}: "
                              f"{e})") from None


def require_tts(espeak):
    """One error line naming the `tts` extra when its packages are missing (the text front end
    needs unidecode and inflect, audio soundfile, the default corpus espeakng-loader)."""
    import importlib.util
    names = ["unidecode", "inflect", "soundfile"] + (["espeakng_loader"] if espeak else [])
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        cli.fail(f"Tacotron 2 needs the tts extra (missing: {', '.join(missing)}): "
                 f"pip install -e '.[tts]'")


def train(argv):
    args = train_parser().parse_args(argv)
    if args.overfit is not None and not args.overfit.strip():
        cli.fail(f"--overfit {args.overfit!r}: expected a sentence to say")
    if args.val_ratio is not None and not 0 <= args.val_ratio < 1:
        cli.fail(f"--val-ratio {args.val_ratio}: expected a number in [0, 1)")
    if args.overfit is not None and args.dataroot:
        cli.fail(f"--overfit {args.overfit!r}: trains on espeak-ng's speech of the sentence; "
                 f"expected no --dataroot with it")
    args.outf = cli.run_outf(args.outf, args.resume, "out/tacotron2")
    cli.check_outf(args.outf)
    cli.new_run_outf(args.outf, args.resume)
    device = cli.use_device(args.device)
    if args.cuda_graph and device == "cpu":
        cli.fail("--cuda-graph: captures the step in a CUDA graph; expected a GPU --device")
    if args.allow_tf32 and device == "cpu":
        cli.fail("--allow-tf32: TF32 is a GPU's tensor-core format (the NumPy path computes in "
                 "float32); expected a GPU --device")
    # a resumed run's --hparams are read over its checkpoint's (below), a new run's over NVIDIA's
    hp = hparams_from(args.hparams) if not args.resume else None
    resume_meta = None
    if args.resume:
        try:
            resume_meta = checkpoint_meta(args.resume, ("model",))
            saved = checkpoint_hparams(resume_meta)
        except CheckpointError as e:
            cli.fail(f"--resume {args.resume}: {e}; expected the checkpoint.npz of a "
                     f"train.tacotron2 run")
        # a resumed run keeps its checkpoint's hparams: repeating them is fine, changing one is not
        given = hparams_from(args.hparams, base=saved)
        for f in dataclasses.fields(saved):
            if getattr(given, f.name) != getattr(saved, f.name):
                cli.fail(f"--hparams {f.name}={getattr(given, f.name)}: the checkpoint was trained "
                         f"with {f.name}={getattr(saved, f.name)}, which a resumed run keeps")
        hp = saved
    args.batch_size = cli.batch_size(args.batch_size, 64, resume_meta, args.resume)
    args.precision = cli.precision(args.precision, resume_meta, args.resume)
    args.epochs = cli.epochs(args.epochs, 500, resume_meta)
    if resume_meta is not None and resume_meta.get("overfit") is not None and args.dataroot:
        cli.fail(f"--dataroot {args.dataroot}: the checkpoint {args.resume} is an --overfit "
                 f"{resume_meta['overfit']!r} run, which a resumed run continues")
    if resume_meta is not None and resume_meta.get("overfit") is None and \
            args.overfit is not None:
        cli.fail(f"--overfit {args.overfit!r}: the checkpoint {args.resume} is a run on "
                 f"{resume_meta.get('dataroot') or 'the default corpus'}, which a resumed run "
                 f"continues; expected no --overfit")
    args.overfit = cli.saved_setting("--overfit", "--overfit", "overfit", args.overfit, None,
                                     resume_meta, args.resume)
    args.dataroot = cli.saved_dataroot(args.dataroot, resume_meta)
    require_tts(espeak=not args.dataroot)     # (espeak-ng: for the default corpus only)
    # the split of the data (and the order within it) a resumed run continues: drawn with these
    args.seed = cli.saved_setting("--seed", "seed", "seed", args.seed, 1234, resume_meta,
                                  args.resume)
    args.val_ratio = cli.saved_setting("--val-ratio", "val ratio", "val_ratio", args.val_ratio,
                                       0.05, resume_meta, args.resume)
    hp = hp.replace(batch_size=args.batch_size, seed=args.seed)   # (the checkpoint says so)
    if args.lr is not None:
        hp = hp.replace(learning_rate=args.lr)
    L.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_set, val_set, held_out = load_data(args, hp)
    # a resumed run pads as the run it continues did (the losses are means over the padding)
    saved = tuple(resume_meta["pad_multiple"]) if resume_meta and "pad_multiple" in resume_meta \
        else None           # (checkpoints written before --pad-multiple existed do not say)
    # ... and padded as NVIDIA's collate does, 1,1, unless told otherwise (--pad-multiple)
    padded = saved or ((1, 1) if resume_meta is not None else None)
    if args.cuda_graph is None:
        args.cuda_graph = captures_by_default(device, args.pad_multiple, padded)
    if args.pad_multiple is None:
        args.pad_multiple = padded or ((16, 64) if args.cuda_graph else (1, 1))
    elif saved is not None and args.pad_multiple != saved:
        cli.fail(f"--pad-multiple {','.join(map(str, args.pad_multiple))}: the checkpoint "
                 f"{args.resume} was trained with {','.join(map(str, saved))}; expected that "
                 f"(or no --pad-multiple)")
    batches = data.Batches(train_set, args.batch_size, rng, hp.n_frames_per_step,
                           pad_multiple=args.pad_multiple)
    val_batches = list(data.Batches(val_set, args.batch_size, np.random.default_rng(0),
                                    hp.n_frames_per_step).epoch(np.arange(len(val_set))))
    model = Tacotron2(hp).to(device)
    set_precision([model], args.precision)
    opt = make_optimizer(model, master_weights=args.precision != "fp32")
    modules, optimizers = {"model": model}, {"optimizer": opt}
    epoch, position, step, order = 0, 0, 0, None
    if args.resume:
        try:
            meta, arrays = load_checkpoint(args.resume, modules, optimizers, rng, device)
            epoch, position, step, order = resume_point(meta, arrays, len(train_set), "utterances")
        except CheckpointError as e:
            cli.fail(f"--resume {args.resume}: {e}; expected the checkpoint.npz of a "
                     f"train.tacotron2 run on this data")
        if epoch >= args.epochs:
            cli.fail(f"--epochs {args.epochs}: the checkpoint {args.resume} has finished epoch "
                     f"{epoch}; expected more epochs")
        cli.check_max_steps(args.max_steps, step, args.resume)
        print(f"resumed from {args.resume}: epoch {epoch + 1}, item {position} of its order, "
              f"step {step}")
        override_hyper(optimizers, args.resume, lr=args.lr)

    cli.make_outf(args.outf)
    resume_step = step if args.resume else None
    try:
        log = LossLog(os.path.join(args.outf, "losses.csv"),
                      ["step", "epoch"] + list(stat_names(hp)) + ["frames_per_s"], resume_step)
        vlog = LossLog(os.path.join(args.outf, "validation.csv"),
                       ["step", "epoch", "loss", "mel", "postnet", "gate"], resume_step)
    except ValueError as e:
        cli.fail(f"--resume {args.resume}: {e}")
    ckpt = os.path.join(args.outf, "checkpoint.npz")
    finite = FiniteCheck({"model": model}, every_call=False,   # not once per decoder frame
                         keep_first=True)
    if args.allow_tf32:
        from cudnnlite import blas
        blas.configure(allow_tf32=True)
    validation = f"{len(val_set)} validation" if held_out else \
        "0 held-out (validation on the first training one)"
    print(f"{len(train_set)} training / {validation} utterances, {len(batches)} "
          f"batch{'es' if len(batches) != 1 else ''} of {args.batch_size} per epoch, device {device}, precision {args.precision}"
          f", matmuls {'TF32' if args.allow_tf32 else 'float32'}")

    def save(epoch_, position_, order_):
        log.flush(), vlog.flush()       # (on disk first: a resume keeps the rows up to its step)
        save_checkpoint(ckpt, modules, optimizers,
                        {"epoch": epoch_, "position": position_, "step": step,
                         "epochs": args.epochs, "batch_size": args.batch_size,
                         "pad_multiple": list(args.pad_multiple),
                         "precision": args.precision, "overfit": args.overfit,
                         "seed": args.seed, "val_ratio": args.val_ratio,
                         "dataroot": args.dataroot and os.path.abspath(args.dataroot),
                         "hparams": dataclasses.asdict(hp)}, rng,
                        {"order": order_})

    order = batches.order_for_epoch() if order is None else order
    run_step = make_step(model, opt, cuda_graph=args.cuda_graph, finite=finite)
    stats = DeviceStats(stat_names(hp), args.log_every, finite, start_step=step)

    def record(rows, epoch_, bar):
        """Log read-back rows; False (after logging the finite ones before it and saying where)
        when one is not finite."""
        bad = first_non_finite(rows, stat_names(hp))
        for row in rows if bad is None else rows[:rows.index(bad[0])]:
            log.write(dict(row, epoch=epoch_ + 1, frames_per_s=rate_cell(row["rate"])))
        if bad is not None:
            row, k = bad
            log.flush()
            print(f"error: step {row['step']}: {k} is {row[k]}; first non-finite: "
                  f"{stats.where(row['step'], 'none found')}; {stopped_note(ckpt)}",
                  file=sys.stderr)
            return False
        if rows:
            r = rows[-1]
            bar.set_postfix(loss=f"{r['loss']:.3f}", mel=f"{r['mel']:.3f}",
                            gate=f"{r['gate']:.3f}", gnorm=f"{r['grad_norm']:.2f}",
                            frames_s=f"{r['rate']:.0f}")
        return True

    while epoch < args.epochs:
        stopped = False
        stats.restart_clock()
        # updated by hand, so it is still open for the last window's figures after the loop
        with Progress(len(batches) - position // args.batch_size,
                      f"epoch {epoch + 1}/{args.epochs}") as bar:
            for b in batches.epoch(order, position):
                values = run_step(b)
                step += 1
                position += len(b.input_lengths)
                bar.update(1)
                frames = b.mel_padded.shape[0] * b.mel_padded.shape[2]
                if not record(stats.add(step, values, frames), epoch, bar):
                    return 1
                if args.max_steps and step >= args.max_steps:
                    stopped = True
                    break
            if not record(stats.flush(), epoch, bar):
                return 1
        if stopped and position < len(train_set):
            save(epoch, position, order)       # mid-epoch: resume continues this epoch exactly
        else:
            epoch, position = epoch + 1, 0
            order = batches.order_for_epoch()
            if epoch % args.every == 0 or epoch == args.epochs or stopped:
                save(epoch, 0, order)
        if stopped or epoch % args.every == 0 or epoch == args.epochs:
            # named by the epoch the last step belongs to, as losses.csv numbers it
            shown = epoch if position == 0 else epoch + 1
            parts = report(model, val_batches, shown, step, args, vlog)
            log.plot(os.path.join(args.outf, "loss_curve.png"),
                     [k for k in stat_names(hp) if k != "grad_norm"], log_y=True)
            print(f"[epoch {shown}, step {step}] validation loss {parts['loss']:.4f} "
                  f"(mel {parts['mel']:.4f}, postnet {parts['postnet']:.4f}, gate "
                  f"{parts['gate']:.4f})")
        if stopped:
            print(cli.stop_line("python -m train.tacotron2", argv, ckpt, step,
                                "--max-steps", position == 0 and epoch == args.epochs))
            break
    log.flush()
    return 0


# ---- synthesis ---------------------------------------------------------------------------------

def synthesize(argv):
    args = synth_parser().parse_args(argv)
    require_tts(espeak=False)
    cli.check_outf(args.outf)
    if not args.text.strip():
        cli.fail("text '': expected something to say")
    device = cli.use_device(args.device)
    try:
        arrays = read_arrays(args.checkpoint)
        model = Tacotron2(checkpoint_hparams(meta_of(arrays)))
        load_state(model, {k[len("model/"):]: v for k, v in arrays.items()
                           if k.startswith("model/")})
    except (CheckpointError, KeyError, ValueError) as e:
        cli.fail(f"--checkpoint {args.checkpoint}: {e}; expected a checkpoint.npz written by "
                 f"train.tacotron2")
    model.to(device)
    L.manual_seed(args.seed)
    try:
        mel, align, wav, fired = speak(model, args.text, args.max_decoder_steps, args.gl_iters,
                                       args.seed)
    except ValueError as e:
        cli.fail(e)
    sr = model.hparams.sampling_rate
    cli.make_outf(args.outf)
    paths = [os.path.join(args.outf, n) for n in ("mel.png", "alignment.png", "speech.wav")]
    save_mel_png(paths[0], [mel], [f"{args.text!r}: predicted mel (postnet)"])
    save_alignment_png(paths[1], align, repr(args.text))
    audio.save_wav(paths[2], wav, sr=sr)
    for p in paths:
        print(f"wrote {p}")
    print(f"{mel.shape[1]} frames, {len(wav) / sr:.2f} s of audio")
    if not fired:
        print(f"note: the gate never fired; decoding stopped at max_decoder_steps "
              f"({mel.shape[1]} frames) -- the model may need more training")
    elif not np.any(wav):                   # (2-3 frames give a few hops of silence)
        print(f"note: the gate fired after {mel.shape[1]} frame(s), too few for any audio -- "
              f"the model may need more training")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "synthesize":
        return synthesize(argv[1:])
    return train(argv[1:] if argv and argv[0] == "train" else argv)


if __name__ == "__main__":
    sys.exit(main())

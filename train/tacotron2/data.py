"""Tacotron 2's speech data: LJSpeech-1.1 folders (metadata.csv, wavs/) with their mels cached
beside them, length-bucketed batches in NVIDIA's collate order, the seed's one-sentence overfit set,
and an offline default corpus that espeak-ng speaks from sentences.txt on first use."""
import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import NamedTuple

import numpy as np

from layers.serialization import write_atomically
from train.data import DatasetError

from . import audio
from .hparams import HParams
from .text import text_to_sequence

LAYOUT = "metadata.csv (id|text|normalized text, UTF-8, no header) and wavs/ID.wav"
SENTENCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sentences.txt")
MEL_CACHE_VERSION = 2    # bump when audio.mel_spectrogram's numbers change: cached mels are redone


class Item(NamedTuple):
    """One usable row of metadata.csv."""
    id: str
    text: str       # the normalized text, or the raw one where the row has none
    wav: str        # path of DATAROOT/wavs/ID.wav
    where: str      # "DATAROOT/metadata.csv line N", for messages


class Example(NamedTuple):
    text: np.ndarray    # (L,) int64 symbol ids of the cleaned text
    mel: np.ndarray     # (n_mels, T) float32 log-mel


class Batch(NamedTuple):
    """NVIDIA's TextMelCollate output, as NumPy arrays, sorted by text length descending."""
    text_padded: np.ndarray     # (B, L) int64, 0 (the pad symbol) after each text
    input_lengths: np.ndarray   # (B,) int64
    mel_padded: np.ndarray      # (B, n_mels, T) float32, 0 after each mel; T a multiple of r
    gate_padded: np.ndarray     # (B, T) float32, 1 from each mel's last frame on
    output_lengths: np.ndarray  # (B,) int64


def default_root():
    """$CUDNNLITE_TACOTRON2_DATA, else ~/.cache/cudnnlite/tacotron2: the default corpus's parent."""
    return (os.environ.get("CUDNNLITE_TACOTRON2_DATA")
            or os.path.join(os.path.expanduser("~"), ".cache", "cudnnlite", "tacotron2"))


def _stderr(message):
    print(message, file=sys.stderr)


# ---- LJSpeech layout ----

def _parse_row(raw, root, hp):
    """(Item fields, None) for a usable metadata.csv line, (None, what is wrong) for a bad one."""
    import soundfile as sf    # here, not at the top, as audio.load_wav
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 ({e.reason} at byte {e.start})"
    fields = line.split("|")
    if len(fields) not in (2, 3) or not fields[0].strip():
        return None, f"expected id|text|normalized text, got {line[:60]!r}"
    id_ = fields[0].strip()
    # NVIDIA's filelists hold the normalized text; the raw one stands in where it is missing.
    text = fields[2].strip() if len(fields) == 3 and fields[2].strip() else fields[1].strip()
    if not text:
        return None, f"{id_}: empty text"
    n = len(_sequence(text, tuple(hp.text_cleaners)))
    if n < MIN_SYMBOLS:
        return None, f"{id_}: {_too_few(text, n, hp)}"
    name = f"wavs/{id_}.wav"
    wav = os.path.join(root, "wavs", id_ + ".wav")
    if not os.path.isfile(wav):
        return None, f"{name} is missing"
    try:
        info = sf.info(wav)
    except RuntimeError as e:     # soundfile.LibsndfileError
        return None, f"{name} is not audio soundfile can read ({getattr(e, 'error_string', e)})"
    if info.samplerate != hp.sampling_rate:
        return None, f"{name} is sampled at {info.samplerate} Hz, expected {hp.sampling_rate}"
    if info.frames < hp.filter_length:
        return None, (f"{name} holds {info.frames} samples, fewer than one STFT window "
                      f"({hp.filter_length})")
    return (id_, text, wav), None


def load_ljspeech(root, hparams=None, warn=None):
    """The usable rows of ROOT/metadata.csv as Items, in file order. A bad row (malformed, empty
    text or none left after the cleaners, WAV missing, unreadable, at another sample rate than
    hparams.sampling_rate or shorter than one STFT window) is skipped with one line to warn
    (default: stderr) naming the file and line, and a summary line after them; a missing folder
    or metadata.csv, or no usable row, is a DatasetError."""
    hp = hparams or HParams()
    warn = warn or _stderr
    if not os.path.isdir(root):
        raise DatasetError(f"{root}: not a folder; expected the LJSpeech-1.1 layout: {LAYOUT}")
    metadata = os.path.join(root, "metadata.csv")
    if not os.path.isfile(metadata):
        raise DatasetError(f"{metadata}: missing; expected the LJSpeech-1.1 layout: {LAYOUT}")
    with open(metadata, "rb") as f:
        lines = f.read().removeprefix(b"\xef\xbb\xbf").splitlines()    # a UTF-8 byte-order mark
    items, skipped = [], []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{metadata} line {number}"
        fields, problem = _parse_row(raw, root, hp)
        if problem:
            skipped.append(f"{where}: {problem}")
            warn(f"{where}: {problem}; skipped")
        else:
            items.append(Item(*fields, where))
    if not items:
        why = f"{len(skipped)} bad, the first: {skipped[0]}" if skipped else "the file is empty"
        raise DatasetError(f"{metadata}: no usable rows ({why}); expected {LAYOUT}")
    if skipped:
        warn(f"{metadata}: skipped {len(skipped)} of {len(skipped) + len(items)} rows")
    return items


def _read_filelist(path, by_id, warn):
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such filelist; expected NVIDIA-style lines "
                           f"'path/ID.wav|text'")
    chosen = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            wav = line.split("|", 1)[0].strip()
            id_ = os.path.splitext(os.path.basename(wav))[0]
            if id_ in by_id:
                chosen.append(by_id[id_])
            else:
                warn(f"{path} line {number}: {wav}: no usable row with id {id_!r} in the dataset; "
                     f"skipped")
    if not chosen:
        raise DatasetError(f"{path}: lists none of the dataset's {len(by_id)} usable rows "
                           f"(matched by the file name of each line's 'path/ID.wav')")
    return chosen


def split(items, val_ratio=0.05, seed=0, filelists=None, warn=None):
    """(train, validation) lists of items. With filelists = (train list, validation list),
    NVIDIA-style files of 'path/ID.wav|text' lines, each line picks the item of that ID (a line
    naming none is reported to warn and skipped). Else round(val_ratio * n) items, at least 1 when
    val_ratio > 0 and n >= 2, drawn with the seed, go to validation. Both keep the items' order."""
    if filelists is not None:
        by_id = {item.id: item for item in items}
        train, val = (_read_filelist(path, by_id, warn or _stderr) for path in filelists)
        return train, val
    if not 0 <= val_ratio < 1:
        raise ValueError(f"val_ratio {val_ratio}: expected 0 <= val_ratio < 1")
    n = len(items)
    n_val = 0 if val_ratio == 0 or n < 2 else min(max(round(val_ratio * n), 1), n - 1)
    is_val = np.zeros(n, bool)
    is_val[np.random.default_rng(seed).permutation(n)[:n_val]] = True
    return ([item for item, v in zip(items, is_val) if not v],
            [item for item, v in zip(items, is_val) if v])


# ---- mels ----

def _mel(wav_path, hp, where):
    """audio.mel_spectrogram of the WAV at wav_path with hp's audio parameters: (n_mels, T)."""
    try:
        wav, sr = audio.load_wav(wav_path)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{where}: {e}") from None
    if sr != hp.sampling_rate:
        raise DatasetError(f"{where}: {wav_path} is sampled at {sr} Hz, "
                           f"expected {hp.sampling_rate}")
    if len(wav) < hp.filter_length:           # (load_ljspeech's rule for a row)
        raise DatasetError(f"{where}: {wav_path} holds {len(wav)} samples, fewer than one STFT "
                           f"window ({hp.filter_length})")
    return audio.mel_spectrogram(wav, sr, hp.filter_length, hp.hop_length, hp.win_length,
                                 hp.n_mel_channels, hp.mel_fmin, hp.mel_fmax)


@functools.lru_cache(maxsize=1 << 15)
def _sequence(text, cleaners):
    """text_to_sequence, kept: load_ljspeech's check of a row and mels_for's ids clean each text
    once between them (LJSpeech: 13,100 rows)."""
    return tuple(text_to_sequence(text, list(cleaners)))


# the fewest symbols a text may have: the encoder's batch norm takes more than one value per
# channel in training, and a text of one symbol alone in a batch (a last partial batch, or
# --batch-size 1) gives it one (torch's BatchNorm refuses that too)
MIN_SYMBOLS = 2


def _too_few(text, n, hp):
    if n == 0:
        return f"the text {text!r} has no symbol left after the cleaners {list(hp.text_cleaners)}"
    return (f"the text {text!r} has {n} symbol after the cleaners; expected at least "
            f"{MIN_SYMBOLS} (the encoder's batch norm needs more than one value per channel)")


def _text_ids(text, hp, where):
    ids = np.array(_sequence(text, tuple(hp.text_cleaners)), np.int64)
    if ids.size < MIN_SYMBOLS:
        raise DatasetError(f"{where}: {_too_few(text, ids.size, hp)}")
    return ids


def _writable_folder(path):
    """True when path is, or can be made, a folder where files can be created."""
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path)
        os.close(fd)
        os.remove(probe)
        return True
    except OSError:
        return False


MEL_FOLDER = "cudnnlite_mels"      # the cache's own folder: it deletes cached mels only there


class MelCache:
    """The log-mels of one LJSpeech-layout folder, each computed once and kept as
    DATAROOT/cudnnlite_mels/ID.npz (when that cannot be written, in a folder of cache_dir named
    for DATAROOT: cudnnlite_mels_HASH). The folder is the cache's own: manifest.json there records
    the audio parameters and the data folder, and when they differ from hparams', every cached mel
    in it is deleted and recomputed (never a file of another folder: DATAROOT/mels may hold another
    tool's)."""

    def __init__(self, root, hparams=None, cache_dir=None):
        hp = self.hparams = hparams or HParams()
        self.params = dict(version=MEL_CACHE_VERSION, dataroot=os.path.abspath(root),
                           sr=hp.sampling_rate, n_fft=hp.filter_length, hop=hp.hop_length,
                           win=hp.win_length, n_mels=hp.n_mel_channels, fmin=hp.mel_fmin,
                           fmax=hp.mel_fmax)
        self.folder = os.path.join(root, MEL_FOLDER)
        if not _writable_folder(self.folder):
            named = hashlib.sha256(self.params["dataroot"].encode()).hexdigest()[:12]
            fallback = None if cache_dir is None else \
                os.path.join(cache_dir, f"{MEL_FOLDER}_{named}")
            if fallback is None or not _writable_folder(fallback):
                also = f" nor in {fallback}" if fallback else "; pass a writable cache folder"
                raise DatasetError(f"{self.folder}: cannot write the mel cache there{also}")
            self.folder = fallback
        self.computed = 0    # mels this object computed rather than read back
        manifest = os.path.join(self.folder, "manifest.json")
        try:
            with open(manifest) as f:
                current = json.load(f)
        except (OSError, ValueError):
            current = None
        if current != self.params:
            # Stale mels go before the new manifest is written: a cached mel always matches it.
            for name in os.listdir(self.folder):
                if name.endswith((".npy", ".npz")):
                    os.remove(os.path.join(self.folder, name))
            text = json.dumps(self.params, indent=1).encode()
            write_atomically(manifest, lambda f: f.write(text))

    def mel(self, item):
        """(n_mels, T) float32 log-mel of item's WAV: read back, or computed and written (again
        when the WAV's size or modification time is not the one its mel was made from: a WAV
        replaced in place; no clock is compared with another)."""
        path = os.path.join(self.folder, item.id + ".npz")
        st = os.stat(item.wav)
        made_from = np.array([st.st_size, st.st_mtime_ns], np.int64)
        try:
            with np.load(path) as cached:
                if np.array_equal(cached["wav"], made_from):
                    return cached["mel"]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            pass                          # not cached yet, or unreadable: compute it again
        mel = _mel(item.wav, self.hparams, item.where)
        write_atomically(path, lambda f: np.savez(f, mel=mel, wav=made_from))
        self.computed += 1
        return mel


def mels_for(items, hparams=None, cache_dir=None):
    """[Example(text ids, mel)] of items from load_ljspeech (any iterable: wrap it in tqdm for a
    progress bar); mels through a MelCache per data folder, cache_dir its fallback. A text with no
    symbol left after the cleaners is a DatasetError naming its row."""
    hp = hparams or HParams()
    caches, examples = {}, []
    for item in items:
        root = os.path.dirname(os.path.dirname(item.wav))    # item.wav is ROOT/wavs/ID.wav
        if root not in caches:
            caches[root] = MelCache(root, hp, cache_dir)
        examples.append(Example(_text_ids(item.text, hp, item.where), caches[root].mel(item)))
    return examples


# ---- batches ----

def collate(examples, n_frames_per_step=1, pad_multiple=(1, 1)):
    """NVIDIA's TextMelCollate: examples sorted by text length, longest first, zero-padded; T
    rounded up to a multiple of n_frames_per_step; gate 1 from each mel's last real frame on.
    pad_multiple = (characters, frames): the padded text length and T are rounded up further to
    these multiples, so batches come in few shapes (each shape one captured CUDA graph). More
    padding is more of what NVIDIA's batches already hold (pad symbols, zero frames with gate 1);
    the losses, means over the padded batch as NVIDIA's, scale with it."""
    examples = sorted(examples, key=lambda ex: -len(ex.text))    # stable: ties keep their order
    input_lengths = np.array([len(ex.text) for ex in examples], np.int64)
    output_lengths = np.array([ex.mel.shape[1] for ex in examples], np.int64)
    chars, frames = pad_multiple
    r = math.lcm(n_frames_per_step, frames)
    T = -(-int(output_lengths.max()) // r) * r
    B, n_mels = len(examples), examples[0].mel.shape[0]
    text_padded = np.zeros((B, -(-int(input_lengths[0]) // chars) * chars), np.int64)
    mel_padded = np.zeros((B, n_mels, T), np.float32)
    gate_padded = np.zeros((B, T), np.float32)
    for i, ex in enumerate(examples):
        text_padded[i, :len(ex.text)] = ex.text
        mel_padded[i, :, :ex.mel.shape[1]] = ex.mel
        gate_padded[i, ex.mel.shape[1] - 1:] = 1
    return Batch(text_padded, input_lengths, mel_padded, gate_padded, output_lengths)


class Batches:
    """Length-bucketed mini-batches of a dataset (a list of Examples). An epoch's order: a shuffle
    cut into buckets of bucket_batches batches, each sorted by mel length so a batch holds similar
    lengths (little padding), then its full batches in random order and the partial one, if any,
    last. Every item once per epoch; deterministic given rng (a numpy Generator)."""

    def __init__(self, dataset, batch_size, rng, n_frames_per_step=1, bucket_batches=4,
                 pad_multiple=(1, 1)):
        if not dataset:
            raise ValueError("Batches of an empty dataset")
        if batch_size < 1 or n_frames_per_step < 1 or bucket_batches < 1 or \
                len(pad_multiple) != 2 or min(pad_multiple) < 1:
            raise ValueError(f"batch_size {batch_size}, n_frames_per_step {n_frames_per_step}, "
                             f"bucket_batches {bucket_batches}, pad_multiple {pad_multiple}: "
                             f"each must be >= 1")
        self.dataset, self.batch_size, self.rng = dataset, batch_size, rng
        self.n_frames_per_step, self.bucket_batches = n_frames_per_step, bucket_batches
        self.pad_multiple = tuple(int(v) for v in pad_multiple)
        self.n = len(dataset)
        self.mel_lengths = np.array([ex.mel.shape[1] for ex in dataset])

    def __len__(self):
        return -(-self.n // self.batch_size)

    def order_for_epoch(self):
        """A new epoch's order: a permutation of the dataset's indices, drawn from rng; batch k is
        order[k * batch_size:(k + 1) * batch_size]."""
        shuffled = self.rng.permutation(self.n)
        size = self.batch_size * self.bucket_batches
        buckets = [shuffled[i:i + size] for i in range(0, self.n, size)]
        by_length = np.concatenate([b[np.argsort(-self.mel_lengths[b], kind="stable")]
                                    for b in buckets])
        n_full = self.n // self.batch_size
        full = by_length[:n_full * self.batch_size].reshape(n_full, self.batch_size)
        return np.concatenate([full[self.rng.permutation(n_full)].reshape(-1),
                               by_length[n_full * self.batch_size:]])

    def epoch(self, order=None, start=0):
        """The Batches of one epoch in order (from order_for_epoch(); a new one when None), from
        item start of it on: a checkpoint keeps the order and the items done to resume mid-epoch."""
        if order is None:
            order = self.order_for_epoch()
        if not np.array_equal(np.sort(order), np.arange(self.n)):
            raise ValueError(f"order ({len(order)} values): not a permutation of this dataset's "
                             f"{self.n} indices; was it saved with another dataset?")
        for i in range(start, self.n, self.batch_size):
            yield collate([self.dataset[j] for j in order[i:i + self.batch_size]],
                          self.n_frames_per_step, self.pad_multiple)


# ---- espeak-ng speech ----

# espeak-ng carries state from one utterance to the next, so the same text can come out a few
# samples different later in a process; a fresh process speaks the same list the same way each time.
_SYNTHESIZE = """import json, sys
from train.tacotron2 import audio, espeak
for text, path in json.load(sys.stdin):
    audio.save_wav(path, espeak.synthesize(text))
"""


def _synthesize_wavs(texts, paths):
    """espeak-ng's speech of each text written to the matching path (16-bit WAV, 22050 Hz), in a
    fresh Python process."""
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _SYNTHESIZE], text=True, capture_output=True,
                          input=json.dumps(list(zip(texts, paths))),
                          env=dict(os.environ, PYTHONPATH=path))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise DatasetError(f"espeak-ng speech synthesis (in a subprocess) failed: {last}")


def overfit_dataset(text, wav=None, batch_size=64, hparams=None):
    """The seed's experiment: one sentence -- text and the speech in the file wav, or espeak-ng's
    speech of it when wav is None -- repeated batch_size times, as a dataset for Batches."""
    hp = hparams or HParams()
    ids = _text_ids(text, hp, "overfit sentence")
    if wav is None and "{" in text:
        raise DatasetError(f"overfit sentence {text!r}: the text reads braces as ARPAbet phones, "
                           f"espeak-ng reads them as letters, so text and speech would differ; "
                           f"expected plain text")
    if wav is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "overfit.wav")
            _synthesize_wavs([text], [path])
            mel = _mel(path, hp, "espeak-ng's speech of the overfit sentence")
    else:
        mel = _mel(wav, hp, "overfit sentence")
    return [Example(ids, mel)] * batch_size


def sentences():
    """The default corpus's sentences (sentences.txt, written for this project), in order."""
    with open(SENTENCES, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def default_corpus(root=None, n=None):
    """The folder of the offline default corpus, ROOT/default_corpus (ROOT/default_corpus_N with
    only the first n sentences; ROOT defaults to default_root()): sentences.txt spoken by espeak-ng
    in the LJSpeech layout, synthesised on first use. A marker file written last says the folder is
    complete; without it (an interrupted run), or made from other sentences, it is made again."""
    root = root or default_root()
    folder = os.path.join(root, "default_corpus" if n is None else f"default_corpus_{n}")
    texts = sentences()[:n]
    ids = [f"DC-{i:04d}" for i in range(1, len(texts) + 1)]
    metadata = "".join(f"{id_}|{text}|{text}\n" for id_, text in zip(ids, texts)).encode()
    key = hashlib.sha256(metadata).hexdigest()
    marker = os.path.join(folder, "complete")
    try:
        with open(marker) as f:
            if f.read() == key:
                return folder
    except OSError:
        pass
    try:
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(marker):
            os.remove(marker)
        for stale in ("wavs", "mels"):
            shutil.rmtree(os.path.join(folder, stale), ignore_errors=True)
        os.makedirs(os.path.join(folder, "wavs"))
    except OSError as e:
        raise DatasetError(f"{folder}: cannot write the default corpus there ({e}); "
                           f"give another data folder") from None
    _stderr(f"making the default corpus once: {len(texts)} sentences spoken by espeak-ng into "
            f"{folder}")
    _synthesize_wavs(texts, [os.path.join(folder, "wavs", id_ + ".wav") for id_ in ids])
    write_atomically(os.path.join(folder, "metadata.csv"), lambda f: f.write(metadata))
    write_atomically(marker, lambda f: f.write(key.encode()))
    return folder

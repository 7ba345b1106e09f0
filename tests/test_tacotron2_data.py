"""Tacotron 2's data: the LJSpeech reader and its bad rows, the train/validation split, the mel
cache, bucketed batches against NVIDIA's collate rules and their exact resume, the overfit set, and
the espeak-ng default corpus."""
import os

import numpy as np
import pytest
import soundfile as sf

from train.tacotron2 import audio, data
from train.tacotron2.data import DatasetError, Example, Item
from train.tacotron2.hparams import HParams
from train.tacotron2.text import text_to_sequence

HP = HParams()


def write_wav(path, seconds, sr=22050, seed=0):
    """A tone in noise, 16-bit: short, and with energy in every mel band."""
    t = np.arange(int(seconds * sr)) / sr
    noise = np.random.default_rng(seed).standard_normal(t.size)
    audio.save_wav(path, 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise, sr)


# Line by line: what load_ljspeech must make of each row of the test corpus's metadata.csv.
ROWS = [
    ("LJ001-0001|Dr. Smith paid $3.50.|Doctor Smith paid three dollars fifty.", "good"),
    ("LJ001-0002|Only the raw text.", "good"),
    ("LJ001-0003|Raw text, empty normalized.|", "good"),
    ("LJ001-0004|No wav here.|No wav here.", "wavs/LJ001-0004.wav is missing"),
    ("LJ001-0005|Sixteen kilohertz.|Sixteen kilohertz.", "sampled at 16000 Hz, expected 22050"),
    ("LJ001-0006| | ", "LJ001-0006: empty text"),
    ("a line with no separator", "expected id|text|normalized text"),
    ("LJ001-0008|Not audio.|Not audio.", "wavs/LJ001-0008.wav is not audio"),
    ("", "blank"),
    ("LJ001-0010|In his defense.|In his defense.", "good"),
    ("LJ001-0011|***|***", "'***' has no symbol left after the cleaners ['english_cleaners']"),
    ("LJ001-0012|A|a", "the text 'a' has 1 symbol after the cleaners; expected at least 2"),
]


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "LJSpeech-1.1"
    (root / "wavs").mkdir(parents=True)
    for number, (line, _) in enumerate(ROWS, 1):
        write_wav(root / "wavs" / f"LJ001-{number:04d}.wav", 0.1 + 0.03 * number, seed=number)
    os.remove(root / "wavs" / "LJ001-0004.wav")
    write_wav(root / "wavs" / "LJ001-0005.wav", 0.3, sr=16000)
    (root / "wavs" / "LJ001-0008.wav").write_bytes(b"RIFF, but not really")
    (root / "metadata.csv").write_text("".join(line + "\n" for line, _ in ROWS), encoding="utf-8")
    return str(root)


# ---- reader ----

def test_reader_keeps_good_rows_and_names_file_and_line_of_each_bad_one(corpus):
    warnings = []
    items = data.load_ljspeech(corpus, warn=warnings.append)
    assert [item.id for item in items] == ["LJ001-0001", "LJ001-0002", "LJ001-0003", "LJ001-0010"]
    assert [item.text for item in items] == ["Doctor Smith paid three dollars fifty.",
                                             "Only the raw text.", "Raw text, empty normalized.",
                                             "In his defense."]
    assert items[0].wav == os.path.join(corpus, "wavs", "LJ001-0001.wav")
    metadata = os.path.join(corpus, "metadata.csv")
    bad = [(number, why) for number, (_, why) in enumerate(ROWS, 1) if why not in ("good", "blank")]
    assert len(warnings) == len(bad) + 1
    for warning, (number, why) in zip(warnings, bad):
        assert warning.startswith(f"{metadata} line {number}: ") and why in warning, warning
    assert warnings[-1] == f"{metadata}: skipped 7 of 11 rows"


def test_missing_folder_metadata_or_usable_rows_is_an_error_naming_the_path(corpus, tmp_path):
    with pytest.raises(DatasetError, match=f"{tmp_path / 'nowhere'}: not a folder"):
        data.load_ljspeech(str(tmp_path / "nowhere"))
    os.rename(os.path.join(corpus, "metadata.csv"), os.path.join(corpus, "other.csv"))
    with pytest.raises(DatasetError, match=f"{os.path.join(corpus, 'metadata.csv')}: missing"):
        data.load_ljspeech(corpus)
    with open(os.path.join(corpus, "metadata.csv"), "w") as f:
        f.write("LJ001-0004|No wav here.|No wav here.\n")
    with pytest.raises(DatasetError, match="no usable rows .1 bad, the first: .*: wavs/LJ001-0004"):
        data.load_ljspeech(corpus, warn=lambda message: None)


# ---- split ----

def fake_items(n):
    return [Item(f"LJ{i:03d}", f"text {i}", f"/nowhere/wavs/LJ{i:03d}.wav", f"line {i + 1}")
            for i in range(n)]


def test_split_by_ratio_is_disjoint_complete_ordered_and_seeded():
    items = fake_items(20)
    train, val = data.split(items, val_ratio=0.1, seed=3)
    assert len(val) == 2 and sorted(train + val) == sorted(items)
    assert train == [i for i in items if i in train] and val == [i for i in items if i in val]
    assert data.split(items, 0.1, seed=3) == (train, val)
    assert data.split(items, 0.1, seed=4) != (train, val)
    assert len(data.split(items, val_ratio=0.01)[1]) == 1     # round(0.2) = 0, but at least 1
    assert data.split(fake_items(2), 0.5)[1] and data.split(fake_items(2), 0.99)[0]
    assert data.split(fake_items(1), 0.5) == (fake_items(1), [])
    assert data.split(items, val_ratio=0) == (items, [])


def test_split_by_nvidia_filelists(tmp_path):
    items = fake_items(5)
    train_list, val_list = tmp_path / "train.txt", tmp_path / "val.txt"
    train_list.write_text("DUMMY/LJ003.wav|text 3\nDUMMY/LJ000.wav|text 0\nDUMMY/LJ999.wav|gone\n")
    val_list.write_text("DUMMY/LJ001.wav|text 1\n")
    warnings = []
    train, val = data.split(items, filelists=(str(train_list), str(val_list)), warn=warnings.append)
    assert train == [items[3], items[0]] and val == [items[1]]
    assert len(warnings) == 1 and warnings[0].startswith(f"{train_list} line 3: DUMMY/LJ999.wav")
    with pytest.raises(DatasetError, match=f"{tmp_path / 'none.txt'}: no such filelist"):
        data.split(items, filelists=(str(train_list), str(tmp_path / "none.txt")))


# ---- mel cache ----

def test_mel_cache_computes_once_then_reads_back_the_same_mels(corpus):
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    cache = data.MelCache(corpus, HP)
    mels = [cache.mel(item) for item in items]
    assert cache.computed == len(items) and cache.folder == os.path.join(corpus, data.MEL_FOLDER)
    for item, mel in zip(items, mels):
        assert mel.dtype == np.float32
        assert np.array_equal(mel, audio.mel_spectrogram(audio.load_wav(item.wav)[0]))
    again = data.MelCache(corpus, HP)
    assert all(np.array_equal(again.mel(item), mel) for item, mel in zip(items, mels))
    assert again.computed == 0


def test_mel_cache_recomputes_a_wav_replaced_in_place(corpus):
    """Another recording under the same name -- here with an older modification time than the
    cached mel's, as a copy that keeps its times gives -- is computed again; then kept."""
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    first = data.MelCache(corpus, HP).mel(items[0])
    old = os.stat(items[0].wav).st_mtime_ns
    write_wav(items[0].wav, 0.5, seed=99)
    os.utime(items[0].wav, ns=(old - 10**10, old - 10**10))
    cache = data.MelCache(corpus, HP)
    again = cache.mel(items[0])
    assert cache.computed == 1 and again.shape != first.shape
    assert np.array_equal(again, audio.mel_spectrogram(audio.load_wav(items[0].wav)[0]))
    kept = data.MelCache(corpus, HP)
    assert np.array_equal(kept.mel(items[0]), again) and kept.computed == 0     # then kept
    # a damaged cache file (a run killed on a file system with no atomic rename) is made again
    cached = os.path.join(corpus, data.MEL_FOLDER, items[0].id + ".npz")
    with open(cached, "r+b") as f:
        f.truncate(os.path.getsize(cached) // 2)
    damaged = data.MelCache(corpus, HP)
    assert np.array_equal(damaged.mel(items[0]), again) and damaged.computed == 1


def test_mel_cache_recomputes_when_an_audio_parameter_changes(corpus):
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    n = sf.info(items[0].wav).frames
    assert data.MelCache(corpus, HP).mel(items[0]).shape[1] == 1 + n // 256
    changed = data.MelCache(corpus, HP.replace(hop_length=128))
    assert changed.mel(items[0]).shape[1] == 1 + n // 128 and changed.computed == 1
    assert not os.path.exists(os.path.join(corpus, data.MEL_FOLDER, items[1].id + ".npz"))  # stale
    back = data.MelCache(corpus, HP)
    assert back.mel(items[0]).shape[1] == 1 + n // 256 and back.computed == 1


def test_mel_cache_falls_back_to_cache_dir_when_the_data_folder_is_unusable(corpus, tmp_path):
    """In a folder of its own in cache_dir, named for the data folder: the other files there
    (a user's .npy among them) are left as they were, when it starts and when the audio
    parameters change."""
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    mine = os.path.join(corpus, data.MEL_FOLDER)
    open(mine, "w").close()     # a file where the cache folder would go
    with pytest.raises(DatasetError, match=f"{mine}: cannot write"):
        data.MelCache(corpus, HP)
    theirs = tmp_path / "cache"
    theirs.mkdir()
    np.save(theirs / "results.npy", np.arange(3))
    cache = data.MelCache(corpus, HP, cache_dir=str(theirs))
    cache.mel(items[0])
    assert os.path.dirname(cache.folder) == str(theirs)
    assert os.path.isfile(os.path.join(cache.folder, f"{items[0].id}.npz"))
    data.MelCache(corpus, HP.replace(hop_length=128), cache_dir=str(theirs))   # stale: cleared
    assert not os.path.exists(os.path.join(cache.folder, f"{items[0].id}.npz"))
    assert np.array_equal(np.load(theirs / "results.npy"), np.arange(3))


def test_mel_cache_leaves_another_tools_mels_folder_alone(corpus):
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    other = os.path.join(corpus, "mels")
    os.makedirs(other)
    np.save(os.path.join(other, f"{items[0].id}.npy"), np.zeros(2))
    cache = data.MelCache(corpus, HP)
    assert cache.mel(items[0]).shape[0] == HP.n_mel_channels
    assert np.array_equal(np.load(os.path.join(other, f"{items[0].id}.npy")), np.zeros(2))


def test_mels_for_gives_text_ids_and_mels(corpus, monkeypatch):
    cleaned = []                 # each text is cleaned once between the reader and mels_for
    monkeypatch.setattr(data, "text_to_sequence", lambda text, cleaners: cleaned.append(text) or
                        text_to_sequence(text, cleaners))
    data._sequence.cache_clear()
    items = data.load_ljspeech(corpus, warn=lambda message: None)
    examples = data.mels_for(items, HP)
    assert len(cleaned) == len(set(cleaned)) and {i.text for i in items} <= set(cleaned)
    for item, ex in zip(items, examples):
        assert ex.text.dtype == np.int64 and list(ex.text) == text_to_sequence(item.text)
        assert ex.mel.dtype == np.float32 and ex.mel.shape[0] == HP.n_mel_channels
    with pytest.raises(DatasetError, match="line 9: the text '___' has no symbol"):
        data.mels_for([items[0]._replace(text="___", where="metadata.csv line 9")], HP)


# ---- batches ----

def fake_dataset(n, n_mels=3, seed=0):
    """Examples whose first text id 1000 + i names example i; random lengths, mels nowhere zero."""
    rng = np.random.default_rng(seed)
    return [Example(np.concatenate([[1000 + i], rng.integers(1, 148, rng.integers(1, 30))]),
                    (rng.random((n_mels, rng.integers(2, 60))) + 1).astype(np.float32))
            for i in range(n)]


def test_batch_follows_nvidias_collate():
    dataset = fake_dataset(7)
    batch = data.collate(dataset)
    text, text_lengths, mel, gate, mel_lengths = batch
    assert text.dtype == text_lengths.dtype == mel_lengths.dtype == np.int64
    assert mel.dtype == gate.dtype == np.float32
    assert np.all(np.diff(text_lengths) <= 0)                       # longest text first
    assert text.shape == (7, text_lengths[0]) and mel.shape == (7, 3, mel_lengths.max())
    for i in range(7):
        ex = dataset[text[i, 0] - 1000]
        n, t = len(ex.text), ex.mel.shape[1]
        assert text_lengths[i] == n and mel_lengths[i] == t
        assert np.array_equal(text[i, :n], ex.text) and not text[i, n:].any()
        assert np.array_equal(mel[i, :, :t], ex.mel) and not mel[i, :, t:].any()
        assert not gate[i, :t - 1].any() and np.all(gate[i, t - 1:] == 1)


def test_frames_per_step_pads_T_to_a_multiple_with_the_gate_on():
    batch = data.collate(fake_dataset(5), n_frames_per_step=4)
    T = batch.mel_padded.shape[2]
    assert T % 4 == 0 and 0 <= T - batch.output_lengths.max() < 4
    assert np.all(batch.gate_padded[:, -1] == 1)


def test_pad_multiple_rounds_both_lengths_up_and_keeps_the_contents():
    plain = data.collate(fake_dataset(6))
    padded = data.collate(fake_dataset(6), n_frames_per_step=2, pad_multiple=(8, 24))
    L, T = padded.text_padded.shape[1], padded.mel_padded.shape[2]
    assert L % 8 == 0 and 0 <= L - plain.input_lengths.max() < 8
    assert T % 24 == 0 and 0 <= T - plain.output_lengths.max() < 24
    np.testing.assert_array_equal(padded.input_lengths, plain.input_lengths)
    np.testing.assert_array_equal(padded.output_lengths, plain.output_lengths)
    np.testing.assert_array_equal(padded.text_padded[:, :plain.text_padded.shape[1]],
                                  plain.text_padded)
    assert not padded.text_padded[:, plain.text_padded.shape[1]:].any()
    np.testing.assert_array_equal(padded.mel_padded[..., :plain.mel_padded.shape[2]],
                                  plain.mel_padded)
    assert not padded.mel_padded[..., plain.mel_padded.shape[2]:].any()
    assert np.all(padded.gate_padded[:, plain.mel_padded.shape[2]:] == 1)


def test_pad_multiple_gives_few_shapes_over_an_epoch():
    ds = fake_dataset(40)
    shapes = {(b.text_padded.shape, b.mel_padded.shape)
              for b in data.Batches(ds, 4, np.random.default_rng(0), pad_multiple=(32, 64)).epoch()}
    exact = {(b.text_padded.shape, b.mel_padded.shape)
             for b in data.Batches(ds, 4, np.random.default_rng(0)).epoch()}
    assert len(shapes) <= 2 < len(exact)


def item_ids(batch):
    return list(batch.text_padded[:, 0] - 1000)


def test_epoch_gives_every_item_once_in_length_buckets():
    dataset = fake_dataset(50)
    batches = data.Batches(dataset, 8, np.random.default_rng(0))
    order = batches.order_for_epoch()
    epoch = list(batches.epoch(order))
    assert len(epoch) == len(batches) == 7 and len(epoch[-1].output_lengths) == 50 - 6 * 8
    assert sorted(sum((item_ids(b) for b in epoch), [])) == list(range(50))
    for k, batch in enumerate(epoch):
        assert sorted(item_ids(batch)) == sorted(order[8 * k:8 * (k + 1)])

    def padding(bucket_batches):
        b = data.Batches(dataset, 8, np.random.default_rng(0), bucket_batches=bucket_batches)
        return sum(x.mel_padded[:, 0].size - x.output_lengths.sum() for x in b.epoch())
    assert padding(4) < padding(1) / 2
    again = data.Batches(dataset, 8, np.random.default_rng(0))
    assert np.array_equal(again.order_for_epoch(), order)
    assert not np.array_equal(again.order_for_epoch(), order)       # the next epoch: a new order


def test_resume_from_order_and_start_gives_the_remaining_batches_exactly():
    dataset = fake_dataset(30)
    batches = data.Batches(dataset, 4, np.random.default_rng(1), n_frames_per_step=2)
    order = batches.order_for_epoch()
    whole = list(batches.epoch(order))
    resumed = list(data.Batches(dataset, 4, np.random.default_rng(9), n_frames_per_step=2)
                   .epoch(order, start=3 * 4))
    assert len(resumed) == len(whole) - 3
    for a, b in zip(whole[3:], resumed):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="not a permutation of this dataset's 30"):
        next(batches.epoch(order[:-1]))


# ---- overfit set and default corpus (espeak-ng) ----

def test_overfit_repeats_one_sentence_to_the_batch_size(corpus):
    wav = os.path.join(corpus, "wavs", "LJ001-0010.wav")
    dataset = data.overfit_dataset("In his defense.", wav, batch_size=4)
    assert len(dataset) == 4
    assert list(dataset[3].text) == text_to_sequence("In his defense.")
    assert np.array_equal(dataset[3].mel, audio.mel_spectrogram(audio.load_wav(wav)[0]))
    (batch,) = data.Batches(dataset, 4, np.random.default_rng(0)).epoch()
    assert batch.mel_padded.shape == (4, 80, dataset[0].mel.shape[1])
    assert all(np.array_equal(batch.mel_padded[0], m) for m in batch.mel_padded)
    with pytest.raises(DatasetError, match="sampled at 16000 Hz"):
        data.overfit_dataset("Sixteen.", os.path.join(corpus, "wavs", "LJ001-0005.wav"), 2)


def test_overfit_speaks_the_sentence_with_espeak_when_no_wav_is_given():
    (ex,) = data.overfit_dataset("In his defense.", batch_size=1)
    assert abs(ex.mel.shape[1] * HP.hop_length / HP.sampling_rate - 1.19) < 0.05   # ~1.19 s


def test_default_corpus_is_synthesised_once_in_the_ljspeech_layout(tmp_path, monkeypatch):
    folder = data.default_corpus(str(tmp_path), n=3)
    assert folder == str(tmp_path / "default_corpus_3")
    with open(os.path.join(folder, "metadata.csv"), encoding="utf-8") as f:
        rows = f.read().splitlines()
    assert rows[0] == "DC-0001|In his defense.|In his defense." and len(rows) == 3
    items = data.load_ljspeech(folder)
    assert [item.text for item in items] == data.sentences()[:3]
    for item in items:
        info = sf.info(item.wav)
        assert info.samplerate == 22050 and info.subtype == "PCM_16" and info.frames > 22050 // 2
    first = [open(item.wav, "rb").read() for item in items]

    def no_synthesis(texts, paths):
        raise AssertionError("synthesised again")
    with monkeypatch.context() as m:
        m.setattr(data, "_synthesize_wavs", no_synthesis)
        assert data.default_corpus(str(tmp_path), n=3) == folder
    os.remove(os.path.join(folder, "complete"))          # as if the first run had been killed
    assert data.default_corpus(str(tmp_path), n=3) == folder
    assert [open(item.wav, "rb").read() for item in items] == first   # a fresh process repeats


def test_sentences_are_varied_and_include_the_seeds():
    lines = data.sentences()
    assert len(lines) >= 200 and len(set(lines)) == len(lines) and "In his defense." in lines
    assert all(2 <= len(line.split()) <= 20 and text_to_sequence(line) for line in lines)
    assert any(c.isdigit() for c in "".join(lines)) and "$" in "".join(lines)

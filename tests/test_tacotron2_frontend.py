"""Tacotron 2's front end: text against NVIDIA tacotron2's cleaners and symbols; audio against librosa
on real (espeak-ng) speech; Griffin-Lim's convergence; WAV files; the CuPy path against the NumPy one."""
import numpy as np
import pytest

from train.tacotron2 import audio, espeak
from train.tacotron2.text import (basic_cleaners, english_cleaners, sequence_to_text, symbol_to_id,
                                  symbols, text_to_sequence, transliteration_cleaners)

MEL_ATOL = 1e-4          # log-mel vs librosa (float32 inside librosa)
FILTERBANK_ATOL = 1e-6
GPU_RTOL = 1e-5          # CuPy vs NumPy path

# NVIDIA's text/cmudict.py valid_symbols, in its order.
NVIDIA_ARPABET = [
    "AA", "AA0", "AA1", "AA2", "AE", "AE0", "AE1", "AE2", "AH", "AH0", "AH1", "AH2",
    "AO", "AO0", "AO1", "AO2", "AW", "AW0", "AW1", "AW2", "AY", "AY0", "AY1", "AY2",
    "B", "CH", "D", "DH", "EH", "EH0", "EH1", "EH2", "ER", "ER0", "ER1", "ER2", "EY",
    "EY0", "EY1", "EY2", "F", "G", "HH", "IH", "IH0", "IH1", "IH2", "IY", "IY0", "IY1",
    "IY2", "JH", "K", "L", "M", "N", "NG", "OW", "OW0", "OW1", "OW2", "OY", "OY0",
    "OY1", "OY2", "P", "R", "S", "SH", "T", "TH", "UH", "UH0", "UH1", "UH2", "UW",
    "UW0", "UW1", "UW2", "V", "W", "Y", "Z", "ZH"]


@pytest.fixture(scope="module")
def librosa():
    return pytest.importorskip("librosa")


@pytest.fixture(scope="module")
def speech():
    """Real speech: espeak-ng's "In his defense.", ~1.19 s at 22050 Hz."""
    return espeak.synthesize("In his defense.")


# ---- text ----

def test_symbols_are_nvidias_148_in_order():
    assert len(symbols) == 148
    assert symbols[:12] == ["_", "-", "!", "'", "(", ")", ",", ".", ":", ";", "?", " "]
    assert "".join(symbols[12:64]) == "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    assert symbols[64:] == ["@" + p for p in NVIDIA_ARPABET]
    assert symbol_to_id["@AA"] == 64 and symbol_to_id["_"] == 0
    assert [symbol_to_id[s] for s in symbols] == list(range(148))


# Each expected string follows NVIDIA's english_cleaners: unidecode, lower, normalize_numbers (commas,
# pounds, dollars, decimals, ordinals, numbers, in that order; inflect without "and"; 1001..2999 as
# years), abbreviations, whitespace.
@pytest.mark.parametrize("text, expected", [
    ("1,000,000", "one million"),
    ("3.5", "three point five"),
    ("$3.50", "three dollars, fifty cents"),
    ("$1", "one dollar"),
    ("$1.01", "one dollar, one cent"),
    ("$0.05", "five cents"),
    # unidecode runs first and turns '£' into 'PS', so the pounds rule never sees it and the digits are
    # spelled against the letters.
    ("£20", "pstwenty"),
    ("Dr. Smith", "doctor smith"),
    ("Mrs. Jones met Mr. Smith in St. Louis", "misess jones met mister smith in saint louis"),
    ("1st", "first"),
    ("22nd", "twenty-second"),
    ("101st", "one hundred and first"),   # ordinals go to inflect as they are, "and" included
    ("1985", "nineteen eighty-five"),
    ("1906", "nineteen oh six"),
    ("1900", "nineteen hundred"),
    ("2000", "two thousand"),
    ("2005", "two thousand five"),
    ("1000", "one thousand"),             # 1000 itself is not a year
    ("123", "one hundred twenty-three"),
    ("1,234.5", "twelve thirty-four point five"),
    ("non-ASCII: Café naïve", "non-ascii: cafe naive"),
    ("extra   \t whitespace\n here", "extra whitespace here"),
    ("Dr. Smith paid $3.50 on the 1st of May, 1985.",
     "doctor smith paid three dollars, fifty cents on the first of may, nineteen eighty-five."),
    # past inflect's range (10**66: it raises, NVIDIA's pipeline with it) a digit at a time
    ("1" + "0" * 66, "one " + "zero " * 65 + "zero"),
    ("9" * 67 + "th", " ".join(["nine"] * 67)),
    ("7" * 5000, " ".join(["seven"] * 5000)),      # (past int()'s 4300 digits too)
    ("$" + "7" * 5000, " ".join(["seven"] * 5000) + " dollars"),
])
def test_english_cleaners(text, expected):
    assert english_cleaners(text) == expected


def test_basic_and_transliteration_cleaners():
    assert basic_cleaners("Café  Naïve 3") == "café naïve 3"
    assert transliteration_cleaners("Café  Naïve 3") == "cafe naive 3"


def test_braces_are_arpabet():
    ids = text_to_sequence("{HH AH0 L OW1} world")
    assert [symbols[i] for i in ids] == ["@HH", "@AH0", "@L", "@OW1", " ", "w", "o", "r", "l", "d"]
    assert sequence_to_text(ids) == "{HH AH0 L OW1} world"


def test_sequence_round_trip_and_dropped_characters():
    assert sequence_to_text(text_to_sequence("Hello, world!")) == "hello, world!"
    # '_', '"', '&' and the phone XX are not symbols: dropped.
    assert sequence_to_text(text_to_sequence('a_b "c" & {XX B}')) == "ab c  {B}"
    with pytest.raises(ValueError, match="unknown cleaner"):
        text_to_sequence("a", ["no_such_cleaners"])


# ---- audio ----

@pytest.mark.parametrize("sr, n_fft, n_mels, fmin, fmax", [
    (22050, 1024, 80, 0.0, 8000.0),
    (16000, 512, 40, 55.0, 7600.0),
])
def test_mel_filterbank_matches_librosa(librosa, sr, n_fft, n_mels, fmin, fmax):
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=False,
                              norm="slaney")
    np.testing.assert_allclose(audio.mel_filterbank(sr, n_fft, n_mels, fmin, fmax), ref, rtol=0,
                               atol=FILTERBANK_ATOL)


def test_mel_spectrogram_matches_librosa_on_speech(librosa, speech):
    # pad_mode='reflect' is passed because librosa (>= 0.10) pads with zeros by default, NVIDIA reflects.
    ref = librosa.feature.melspectrogram(
        y=speech, sr=22050, n_fft=1024, hop_length=256, win_length=1024, window="hann", center=True,
        pad_mode="reflect", power=1.0, n_mels=80, fmin=0, fmax=8000, htk=False, norm="slaney")
    ref = np.log(np.clip(ref, 1e-5, None))
    mel = audio.mel_spectrogram(speech)
    assert mel.shape == (80, 1 + len(speech) // 256) and mel.dtype == np.float32
    assert np.abs(mel - ref).max() < MEL_ATOL


def test_istft_inverts_stft(speech):
    x = speech[:256 * 40]
    np.testing.assert_allclose(audio.istft(audio.stft(x)), x[:256 * 40], rtol=0, atol=1e-6)


def test_griffin_lim_converges_monotonically(speech):
    mel = audio.mel_spectrogram(speech)
    wav, history = audio.griffin_lim(mel, n_iter=30, return_history=True)
    assert wav.dtype == np.float32 and wav.shape == (256 * (mel.shape[1] - 1),)
    assert len(history) == 30
    assert np.all(np.diff(history) <= 1e-9), history
    assert history[-1] < 0.6 * history[0], history


def test_griffin_lim_is_seeded():
    mel = np.log(np.random.default_rng(0).uniform(1e-3, 1.0, (80, 20)))
    np.testing.assert_array_equal(audio.griffin_lim(mel, n_iter=2), audio.griffin_lim(mel, n_iter=2))
    assert not np.array_equal(audio.griffin_lim(mel, n_iter=2), audio.griffin_lim(mel, n_iter=2, seed=1))


def test_wav_round_trip(tmp_path):
    every_int16 = np.arange(-32768, 32768, dtype=np.float32) / 32768
    audio.save_wav(tmp_path / "a.wav", every_int16)
    wav, sr = audio.load_wav(tmp_path / "a.wav")
    assert sr == 22050 and wav.dtype == np.float32
    np.testing.assert_array_equal(wav, every_int16)
    audio.save_wav(tmp_path / "clip.wav", np.array([1.5, -2.0], np.float32), sr=16000)
    wav, sr = audio.load_wav(tmp_path / "clip.wav")
    assert sr == 16000 and wav.tolist() == [32767 / 32768, -1.0]


def test_load_wav_names_the_bad_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        audio.load_wav(tmp_path / "missing.wav")
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(ValueError, match="text.wav"):
        audio.load_wav(tmp_path / "text.wav")


@pytest.mark.gpu
def test_gpu_path_equals_numpy_path(speech):
    import cupy
    mel = audio.mel_spectrogram(speech)
    mel_gpu = audio.mel_spectrogram(cupy.asarray(speech))
    assert isinstance(mel_gpu, cupy.ndarray) and mel_gpu.dtype == np.float32
    np.testing.assert_allclose(mel_gpu.get(), mel, rtol=GPU_RTOL, atol=0)
    wav = audio.griffin_lim(mel, n_iter=5)
    wav_gpu = audio.griffin_lim(cupy.asarray(mel), n_iter=5)
    assert isinstance(wav_gpu, cupy.ndarray)
    np.testing.assert_allclose(wav_gpu.get(), wav, rtol=GPU_RTOL, atol=GPU_RTOL * np.abs(wav).max())

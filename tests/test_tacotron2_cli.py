"""python -m train.tacotron2 on a tiny synthesised corpus with tiny hparams, on the CPU: training
writes its logs, PNGs, WAVs and checkpoint; stop + resume equals the straight run bit for bit;
`synthesize` writes its three files; bad arguments are one-line errors that write nothing."""
import csv
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

import layers as L
from train.tacotron2 import data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ("symbols_embedding_dim=16,encoder_embedding_dim=16,attention_rnn_dim=24,"
        "decoder_rnn_dim=24,prenet_dim=8,attention_dim=8,attention_location_n_filters=4,"
        "attention_location_kernel_size=5,postnet_embedding_dim=16,max_decoder_steps=12")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Five sentences of the default corpus, spoken by espeak-ng (under a second)."""
    return data.default_corpus(str(tmp_path_factory.mktemp("corpus")), n=5)


def run(*args):
    return subprocess.run([sys.executable, "-m", "train.tacotron2", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def train(corpus, outf, *extra):
    return run("--device", "cpu", "--dataroot", corpus, "--outf", str(outf), "--batch-size", "2",
               "--every", "1", "--gl-iters", "3", "--val-ratio", "0.2", "--seed", "7", *extra)


def test_training_writes_its_outputs(corpus, tmp_path):
    r = train(corpus, tmp_path / "out", "--epochs", "2", "--hparams", TINY,
              "--pad-multiple", "8,16")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for name in ("losses.csv", "validation.csv", "loss_curve.png", "checkpoint.npz",
                 "epoch_0001_mel.png", "epoch_0001_alignment.png",
                 "epoch_0002_inference_alignment.png", "epoch_0002.wav"):
        assert (out / name).stat().st_size > 0, name
    rows = list(csv.DictReader(open(out / "losses.csv")))
    assert len(rows) == 4 and [r_["step"] for r_ in rows] == ["1", "2", "3", "4"]  # 4 items / 2
    assert all(np.isfinite(float(r_["loss"])) for r_ in rows)
    assert len(list(csv.DictReader(open(out / "validation.csv")))) == 2


def _losses(path):
    return [{k: v for k, v in r.items() if k != "frames_per_s"}
            for r in csv.DictReader(open(path))]


@pytest.mark.parametrize("precision,hparams", [("fp32", TINY), ("bf16", TINY),
                                               ("fp32", TINY + ",guided_attention_sigma=0.3")])
def test_stop_mid_epoch_and_resume_equals_the_straight_run(corpus, tmp_path, precision, hparams):
    """(bf16: the resumed run takes the checkpoint's precision and float32 master weights; the
    epoch reports -- PNGs, WAV -- come from bfloat16 outputs. With the guided attention loss the
    resumed run keeps it -- it is an hparam -- and both log its 'attention' column.)"""
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train(corpus, straight, "--epochs", "2", "--hparams", hparams,
                 "--precision", precision).returncode == 0
    # losses read back 3 steps at a time: the windows straddle the stop, every step is logged
    r = train(corpus, split, "--epochs", "2", "--hparams", hparams, "--max-steps", "3",
              "--log-every", "3", "--precision", precision)
    assert r.returncode == 0, r.stderr
    ckpt = split / "checkpoint.npz"
    line = next(x for x in r.stdout.splitlines() if x.startswith("stopped after step 3"))
    command = shlex.split(line.split("; ", 1)[1].removesuffix(" continues the run"))
    assert command[:4] == ["python", "-m", "train.tacotron2", "--device"]   # (as the README)
    assert command[-2:] == ["--resume", str(ckpt)] and "--max-steps" not in command
    assert L.load(ckpt)["order"].size == 4      # stopped inside epoch 2
    r = run(*command[3:])                       # as printed
    assert r.returncode == 0, r.stderr
    a, b = L.load(straight / "checkpoint.npz"), L.load(split / "checkpoint.npz")
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert _losses(straight / "losses.csv") == _losses(split / "losses.csv")
    guided = ("attention" in _losses(split / "losses.csv")[0])
    assert guided == ("guided_attention" in hparams)
    assert any(k.endswith("/master_param") for k in a) == (precision == "bf16")
    assert (split / "epoch_0002.wav").stat().st_size > 0


def test_resume_keeps_the_batch_size_and_padding_and_counts_max_steps_over_the_run(corpus,
                                                                                   tmp_path):
    out = tmp_path / "r"
    assert train(corpus, out, "--epochs", "2", "--hparams", TINY, "--max-steps", "1",
                 "--pad-multiple", "4,8").returncode == 0
    ckpt = str(out / "checkpoint.npz")
    for args, words in ((("--batch-size", "1"), "trained with batch size 2"),
                        (("--max-steps", "1"), "--max-steps 1: the checkpoint"),
                        (("--pad-multiple", "1,1"), "was trained with 4,8; expected that")):
        r = run("--device", "cpu", "--dataroot", corpus, "--outf", str(tmp_path / "n"),
                "--epochs", "2", "--resume", ckpt, *args)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1
        assert not (tmp_path / "n").exists()
    # a run on a corpus does not go on as an --overfit run (nor the other way round)
    r = run("--device", "cpu", "--outf", str(tmp_path / "n"), "--resume", ckpt, "--overfit",
            "Something else.")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"error: --overfit 'Something else.': the checkpoint {ckpt} is a run on "
        f"{os.path.abspath(corpus)}, which a resumed run continues; expected no --overfit")
    assert not (tmp_path / "n").exists()


def test_a_checkpoint_from_before_pad_multiple_resumes_with_the_one_given(corpus, tmp_path):
    """Checkpoints written before --pad-multiple was saved do not say how they padded: the
    resumed run takes the value given (or the default)."""
    import json
    out = tmp_path / "r"
    assert train(corpus, out, "--epochs", "2", "--hparams", TINY, "--max-steps", "1",
                 "--pad-multiple", "4,8").returncode == 0
    arrays = dict(np.load(out / "checkpoint.npz", allow_pickle=False))
    meta = json.loads(str(arrays["meta"]))
    assert meta.pop("pad_multiple") == [4, 8]
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "old.npz", **arrays)
    r = run("--device", "cpu", "--dataroot", corpus, "--outf", str(tmp_path / "n"), "--epochs",
            "2", "--resume", str(tmp_path / "old.npz"), "--pad-multiple", "4,8")
    assert r.returncode == 0, r.stderr


def test_synthesize_writes_mel_alignment_and_wav(corpus, tmp_path):
    assert train(corpus, tmp_path / "t", "--epochs", "1", "--hparams", TINY).returncode == 0
    r = run("synthesize", "--device", "cpu", "--checkpoint", str(tmp_path / "t" / "checkpoint.npz"),
            "--outf", str(tmp_path / "s"), "--gl-iters", "3", "Dr. Smith paid $3.50.")
    assert r.returncode == 0, r.stderr
    for name in ("mel.png", "alignment.png", "speech.wav"):
        assert (tmp_path / "s" / name).stat().st_size > 0
    from train.tacotron2 import audio
    wav, sr = audio.load_wav(str(tmp_path / "s" / "speech.wav"))
    assert sr == 22050
    frames = int(r.stdout.split(" frames")[0].split()[-1])
    assert len(wav) == 256 * (frames - 1) or (frames < 4 and len(wav) <= 256 * 3)
    assert ("gate never fired" in r.stdout) == (frames == 12)       # max_decoder_steps
    r = run("synthesize", "--device", "cpu", "--checkpoint", str(tmp_path / "t" / "checkpoint.npz"),
            "--outf", str(tmp_path / "s2"), "***")
    assert r.returncode == 2 and "'***' has no symbol left after the cleaners" in r.stderr
    assert not (tmp_path / "s2").exists()
    # a checkpoint whose model arrays do not fit its hparams: load_state_dict's refusal, one line
    arrays = dict(np.load(tmp_path / "t" / "checkpoint.npz"))
    key = next(k for k in arrays if k.startswith("model/") and k.endswith(".weight"))
    arrays[key] = np.zeros(arrays[key].shape[:-1] + (1,), arrays[key].dtype)
    np.savez(tmp_path / "bad.npz", **arrays)
    r = run("synthesize", "--device", "cpu", "--checkpoint", str(tmp_path / "bad.npz"), "Hi.")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"does not fit the model (size mismatch for {key[len('model/'):]}: copying a param " \
           f"with shape" in r.stderr, r.stderr


def test_overfit_runs_on_one_spoken_sentence(tmp_path):
    r = run("--device", "cpu", "--overfit", "In his defense.", "--outf", str(tmp_path / "o"),
            "--batch-size", "3", "--epochs", "2", "--every", "2", "--gl-iters", "3",
            "--hparams", TINY)
    assert r.returncode == 0, r.stderr
    assert "3 training / 0 held-out (validation on the first training one)" in r.stdout
    assert (tmp_path / "o" / "epoch_0002.wav").exists()
    # the checkpoint keeps the sentence: a resume continues the overfit run without repeating it
    ckpt = str(tmp_path / "o" / "checkpoint.npz")
    r = run("--device", "cpu", "--resume", ckpt, "--outf", str(tmp_path / "o"), "--epochs", "3",
            "--every", "3", "--gl-iters", "3")
    assert r.returncode == 0, r.stderr
    assert "3 training / 0 held-out (validation on the first training one)" in r.stdout
    r = run("--device", "cpu", "--resume", ckpt, "--overfit", "Something else.", "--outf",
            str(tmp_path / "o"), "--epochs", "4")
    assert r.returncode == 2 and "was trained with --overfit In his defense." in r.stderr


@pytest.mark.parametrize("args,pattern", [
    (("--batch-size", "0"), r"--batch-size: expected a positive integer"),
    (("--seed", "-1"), r"--seed: expected a seed, an integer in \[0, 2\^63\), got '-1'"),
    (("--device", "foo"), r"--device: expected 'cpu' or a GPU index"),
    (("--hparams", "decoder_rnn_dim=big"), r"--hparams decoder_rnn_dim=big: decoder_rnn_dim='big': "
                                           r"expected an integer"),
    (("--hparams", "no_such=1"), r"--hparams no_such=1: 'no_such=1' is not name=value .*the "
                                 r"names: .*decoder_rnn_dim"),
    (("--resume", "missing.npz"), r"--resume missing.npz: no such file"),
    (("--val-ratio", "1.5"), r"--val-ratio 1.5: expected a number in \[0, 1\)"),
    (("--overfit", "Hi.", "--dataroot", "x"), r"--overfit 'Hi.': .* expected no --dataroot"),
    (("--overfit", ""), r"--overfit '': expected a sentence"),
    (("--overfit", ".."), r"--overfit '..': espeak-ng's speech .* holds \d+ samples, fewer "
                          r"than one STFT window \(1024\)"),
    (("--overfit", "a"), r"--overfit 'a': overfit sentence: the text 'a' has 1 symbol after the "
                         r"cleaners; expected at least 2 \(the encoder's batch norm"),
    (("--overfit", "{HH AH0 L OW1}"), r"--overfit '\{HH AH0 L OW1\}': .*braces as ARPAbet "
                                      r"phones, espeak-ng reads them as letters"),
    (("--hparams", "decoder_rnn_dim=0"), r"decoder_rnn_dim=0: expected a positive integer"),
    (("--hparams", "p_decoder_dropout=1.5"), r"p_decoder_dropout=1.5: expected a probability"),
    (("--lr", "abc"), r"--lr: expected a positive number \(e.g. 1e-3\), got 'abc'"),
    (("--hparams", "batch_size=2"), r"--hparams batch_size=2: batch_size is set by --batch-size"),
    (("--hparams", "seed=7"), r"--hparams seed=7: seed is set by --seed"),
    (("--hparams", "n_frames_per_step=2"), r"n_frames_per_step=2: NVIDIA's model takes 1 only"),
    (("--hparams", "win_length=2048"), r"win_length=2048 is longer than filter_length=1024"),
    (("--data-cache", os.path.join(ROOT, "README.md")),
     r"--data-cache .*README.md: .*README.md/default_corpus: cannot write the default corpus"),
    (("--hparams", "hop_length=2048"), r"hop_length=2048 is longer than win_length=1024: the "
                                       r"STFT would skip samples"),
    (("--hparams", "filter_length=64,win_length=64,hop_length=16"),
     r"n_mel_channels=80 over filter_length=64: 40 mel bands get no FFT bin"),
    (("--hparams", "text_cleaners=no_such_cleaners"),
     r"--hparams text_cleaners=no_such_cleaners: text_cleaners: unknown cleaner\(s\) "
     r"\['no_such_cleaners'\]; known: \['basic_cleaners'"),
    (("--hparams", "n_symbols=50"), r"n_symbols=50: the text front end has 148 symbols"),
    (("--hparams", "mel_fmax=0"), r"mel_fmin=0.0, mel_fmax=0.0: expected 0 <= mel_fmin < "),
    (("--hparams", "mel_fmax=12000"), r"mel_fmax=12000.0: .*<= sampling_rate / 2 = 11025"),
    (("--hparams", "attention_location_kernel_size=30"),
     r"attention_location_kernel_size=30: expected an odd size"),
    (("--hparams", "postnet_kernel_size=4"), r"postnet_kernel_size=4: expected an odd size"),
    (("--hparams", "encoder_kernel_size=2"), r"encoder_kernel_size=2: expected an odd size"),
    (("--hparams", "symbols_embedding_dim=15,encoder_embedding_dim=15"),
     r"encoder_embedding_dim=15: expected an even size"),
    (("--hparams", "symbols_embedding_dim=16"),
     r"symbols_embedding_dim=16, encoder_embedding_dim=512: expected them equal"),
    (("--pad-multiple", "0,4"), r"--pad-multiple: expected two positive integers 'A,B'"),
    (("--pad-multiple", "8"), r"--pad-multiple: expected two positive integers 'A,B'"),
    (("--cuda-graph",), r"--cuda-graph: captures the step in a CUDA graph; expected a GPU"),
    (("--allow-tf32",), r"--allow-tf32: TF32 is a GPU's tensor-core format .* expected a GPU"),
])
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path, args, pattern):
    import re
    outf = tmp_path / "never"
    r = run("--device", "cpu", "--outf", str(outf), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert not outf.exists()


@pytest.mark.parametrize("device, given, saved, captured", [
    ("cpu", None, None, False),                 # the NumPy path has no graphs
    (0, None, None, True),                      # a new GPU run: captured, padded 16,64
    (0, (8, 32), None, True),
    (0, (1, 1), None, False),                   # NVIDIA's padding asked for: too many shapes
    (0, None, (1, 1), False),                   # ... or kept from the checkpoint resumed
    (0, None, (16, 64), True),
])
def test_the_step_is_captured_by_default_on_a_gpu(device, given, saved, captured):
    from train.tacotron2.__main__ import captures_by_default
    assert captures_by_default(device, given, saved) is captured


def test_no_cuda_graph_is_accepted_on_the_cpu_and_the_matmul_precision_said(corpus, tmp_path):
    r = train(corpus, tmp_path / "t", "--epochs", "1", "--hparams", TINY, "--max-steps", "1",
              "--no-cuda-graph")
    assert r.returncode == 0 and "matmuls float32" in r.stdout, r.stderr


def test_outf_that_is_a_file_is_left_alone(tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    r = run("--device", "cpu", "--outf", str(f))
    assert r.returncode == 2 and r.stderr.startswith("error: --outf") and f.read_text() == "keep me"


def test_an_outf_under_a_file_is_one_error_line_before_any_work(tmp_path):
    """(train: before the data loads; synthesize: before the model is read)"""
    f = tmp_path / "file"
    f.write_text("keep me")
    for args in (("--device", "cpu", "--outf", str(f / "sub")),
                 ("synthesize", "--device", "cpu", "--checkpoint", str(tmp_path / "none.npz"),
                  "--outf", str(f / "sub"), "Hello.")):
        r = run(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip() == (f"error: --outf {f / 'sub'}: {f} is a file, so no folder can "
                                    f"be made under it")
    assert f.read_text() == "keep me"


def test_synthesize_from_a_weights_file_is_a_clear_error(tmp_path):
    L.save({"w": np.zeros(3, np.float32)}, tmp_path / "w.npz")
    r = run("synthesize", "--device", "cpu", "--checkpoint", str(tmp_path / "w.npz"), "Hello.")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: --checkpoint {tmp_path / 'w.npz'}: a weights file, not a "
                                f"checkpoint (it has no 'meta' entry); expected a checkpoint.npz "
                                f"written by train.tacotron2")


def test_a_missing_tts_package_is_one_error_line_naming_the_extra(monkeypatch, capsys):
    import importlib.util
    from train.tacotron2 import __main__ as cli_main
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "unidecode" else real(name, *a))
    for argv in (["--device", "cpu"], ["synthesize", "--checkpoint", "x.npz", "Hi."]):
        with pytest.raises(SystemExit) as e:
            cli_main.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.strip() == ("error: Tacotron 2 needs the tts extra (missing: unidecode): "
                               "pip install -e '.[tts]'")


def test_resume_takes_its_own_hparams_again_and_names_a_changed_one(corpus, tmp_path):
    out = tmp_path / "out"
    assert train(corpus, out, "--epochs", "1", "--hparams", TINY, "--max-steps", "1"
                 ).returncode == 0
    ckpt = str(out / "checkpoint.npz")
    r = train(corpus, out, "--epochs", "1", "--resume", ckpt, "--hparams", TINY,
              "--max-steps", "2")
    assert r.returncode == 0, r.stderr
    r = train(corpus, out, "--epochs", "1", "--resume", ckpt, "--hparams", "decoder_rnn_dim=32")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --hparams decoder_rnn_dim=32: the checkpoint was trained with decoder_rnn_dim=24, "
        "which a resumed run keeps"]
    # the seed and the held-out share drew the split the saved order indexes: kept too
    # (train() gives --seed 7 --val-ratio 0.2; run() here gives neither, which takes the saved)
    for flag, value, saved in (("--seed", "8", "seed 7"), ("--val-ratio", "0.4", "val ratio 0.2")):
        r = run("--device", "cpu", "--dataroot", corpus, "--outf", str(out), "--epochs", "1",
                "--resume", ckpt, flag, value)
        assert r.returncode == 2 and f"{flag} {value}: the checkpoint {ckpt} was trained with " \
            f"{saved}" in r.stderr, r.stderr
    r = run("--device", "cpu", "--dataroot", corpus, "--outf", str(out), "--epochs", "2",
            "--resume", ckpt, "--batch-size", "2", "--gl-iters", "3", "--max-steps", "3")
    assert r.returncode == 0, r.stderr
    import json
    meta = json.loads(str(L.load(ckpt)["meta"]))
    assert (meta["seed"], meta["val_ratio"]) == (7, 0.2)
    assert (meta["hparams"]["seed"], meta["hparams"]["batch_size"]) == (7, 2)


def test_speech_is_made_with_the_models_own_audio_parameters():
    """speak()'s Griffin-Lim takes the model's hparams (40 mel channels, hop 200, window 800,
    16 kHz here), not the module's defaults: 80 channels raised on a 40-channel mel, and a hop of
    256 made 11 frames 2816 samples where 2200 are right."""
    from train.tacotron2 import HParams, Tacotron2
    from train.tacotron2.__main__ import speak
    hp = HParams.small().replace(n_mel_channels=40, hop_length=200, win_length=800,
                                 sampling_rate=16000, mel_fmax=8000.0, max_decoder_steps=12)
    L.manual_seed(0)
    mel, align, wav, fired = speak(Tacotron2(hp), "Hello there.", gl_iters=2)
    assert mel.shape[0] == 40 and len(wav) == 200 * (mel.shape[1] - 1)
    with pytest.raises(ValueError, match="no symbol left after the cleaners"):
        speak(Tacotron2(hp), "***")


def test_a_resumed_runs_hparams_are_read_over_its_checkpoints(corpus, tmp_path):
    """Repeating one of a pair (filter_length=512 of a run trained with win_length=512 too) is
    the checkpoint's own value, not a window longer than NVIDIA's default FFT."""
    out = tmp_path / "out"
    pair = TINY + ",filter_length=512,win_length=512"
    assert train(corpus, out, "--epochs", "2", "--hparams", pair, "--max-steps", "1"
                 ).returncode == 0
    r = train(corpus, out, "--epochs", "2", "--resume", str(out / "checkpoint.npz"),
              "--hparams", "filter_length=512", "--max-steps", "2")
    assert r.returncode == 0, r.stderr


def test_a_run_stopped_on_its_last_step_says_it_is_complete(corpus, tmp_path):
    """4 training items at batch 2: step 2 ends the one epoch (the printed resume command would
    be refused: no epoch left)."""
    r = train(corpus, tmp_path / "o", "--epochs", "1", "--max-steps", "2", "--hparams", TINY)
    assert r.returncode == 0, r.stderr
    assert "stopped after step 2 (--max-steps), the run's last: the run is complete" in r.stdout
    assert "--resume" not in r.stdout


def test_a_dataroot_that_cannot_hold_the_mels_puts_them_in_the_default_data_cache(corpus,
                                                                                  tmp_path):
    """--data-cache's default ($CUDNNLITE_TACOTRON2_DATA here) takes the mels of a dataroot
    they cannot be written into (its cudnnlite_mels a file: root may write anywhere)."""
    import shutil
    root = tmp_path / "ro"
    shutil.copytree(corpus, root, ignore=shutil.ignore_patterns("cudnnlite_mels"))
    (root / "cudnnlite_mels").write_text("not a folder")
    cache = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-m", "train.tacotron2", "--device", "cpu", "--dataroot",
                        str(root), "--outf", str(tmp_path / "o"), "--batch-size", "2",
                        "--epochs", "1", "--max-steps", "1", "--hparams", TINY],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, CUDNNLITE_TACOTRON2_DATA=str(cache)))
    assert r.returncode == 0, r.stderr
    (mels,) = [p for p in cache.iterdir() if p.name.startswith("cudnnlite_mels_")]
    assert len(list(mels.glob("*.npz"))) == 5

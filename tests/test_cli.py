"""Bad input to `python -m train.dcgan` and the tools, tried as a new user on a machine with no
GPU: each is one line on stderr, `error:` naming the argument and the value, exit status 2, and
nothing written (--outf not created, or an existing file there left as it was)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import layers as L
from test_dcgan import write_idx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("--device", "cpu", "--ngf", "8", "--ndf", "8", "--batch-size", "6",
         "--dataset", "fake")


def _gpu_visible():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


no_gpu = pytest.mark.skipif(_gpu_visible(), reason="a CUDA device is visible: --device 0 runs")


def run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def assert_usage_error(r, *words):
    """Exit 2 and exactly one stderr line, `error: ...` containing every word (no traceback)."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert str(w) in lines[0], (w, lines[0])


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """A 12-image MNIST folder (IDX, uncompressed)."""
    root = tmp_path_factory.mktemp("mnist")
    images = np.random.default_rng(0).integers(0, 256, (12, 28, 28), dtype=np.uint8)
    write_idx(str(root / "train-images-idx3-ubyte"), images)
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mnist):
    """The files of a one-step run on `mnist`: checkpoint.npz, netG/netD_epoch_001.npz."""
    out = tmp_path_factory.mktemp("trained")
    r = run("train.dcgan", *SMALL, "--dataset", "mnist", "--dataroot", str(mnist), "--dry-run",
            "--outf", str(out))
    assert r.returncode == 0, r.stderr
    return out


def dcgan_fails(tmp_path, *args, words=()):
    """train.dcgan with `args` is a usage error naming `words`, and --outf was not created."""
    outf = tmp_path / "out"
    r = run("train.dcgan", *SMALL, *args, "--outf", str(outf))
    assert_usage_error(r, *words)
    assert not outf.exists()


# ---- the dataset ------------------------------------------------------------------------------

def test_truncated_gzip_names_the_file(tmp_path):
    images = np.zeros((12, 28, 28), np.uint8)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    write_idx(str(path), images)
    path.write_bytes(path.read_bytes()[:40])
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(tmp_path),
                words=("--dataroot", str(tmp_path), str(path), "gzipped IDX"))


def test_non_gzip_dot_gz_names_the_file(tmp_path):
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(b"\0\0\x08\x03 not gzip at all")
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(tmp_path),
                words=("--dataroot", str(path), "BadGzipFile"))


def test_truncated_idx_header(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\0\0\x08\x03\0\0")
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(tmp_path),
                words=("--dataroot", "train-images-idx3-ubyte", "header"))


def test_dataroot_not_a_folder(tmp_path):
    missing = tmp_path / "missing"
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(missing),
                words=("--dataroot", str(missing), "is not a folder"))


def test_dataroot_with_a_dataset_that_reads_none(tmp_path, mnist):
    dcgan_fails(tmp_path, "--dataroot", str(mnist), words=("--dataroot", str(mnist), "--dataset"))


# ---- numbers and devices ----------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--batch-size", "0"), ("--batch-size", "-3"),
                                        ("--epochs", "0"), ("--max-steps", "-1"),
                                        ("--image-size", "32"), ("--beta1", "1.5"),
                                        ("--seed", "-1")])
def test_out_of_range_numbers(tmp_path, flag, value):
    dcgan_fails(tmp_path, flag, value, words=(flag, value, "expected"))


@pytest.mark.parametrize("value", ["foo", "-1"])
def test_device_that_is_not_one(tmp_path, value):
    dcgan_fails(tmp_path, "--device", value, words=("--device", value, "'cpu' or a GPU index"))


@no_gpu
def test_gpu_device_without_a_gpu_says_use_cpu(tmp_path):
    dcgan_fails(tmp_path, "--device", "0", words=("--device 0", "no CUDA device",
                                                  "--device cpu"))


# ---- weights and checkpoints ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--netG", "--netD"])
def test_weights_that_are_a_text_file(tmp_path, flag):
    path = tmp_path / "weights.npz"
    path.write_text("these are not weights\n")
    dcgan_fails(tmp_path, flag, str(path), words=(flag, str(path), "not an .npz file"))


def test_weights_that_torch_saved(tmp_path):
    """A torch.save file is named as one (not called damaged), with what to do instead."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "netG.pth"
    torch.save({"main.0.weight": torch.zeros(2)}, path)
    r = run("train.dcgan", *SMALL, "--netG", str(path), "--outf", str(tmp_path / "out"))
    assert_usage_error(r, "--netG", str(path), "a file torch.save wrote", "torch.load")
    assert "damaged" not in r.stderr


@pytest.mark.parametrize("flag", ["--netG", "--netD"])
def test_weights_that_are_missing(tmp_path, flag):
    path = tmp_path / "nope.npz"
    dcgan_fails(tmp_path, flag, str(path), words=(flag, str(path), "no such file"))


@pytest.mark.parametrize("flag,name", [("--netG", "netG"), ("--netD", "netD")])
def test_weights_of_other_shapes(tmp_path, trained, flag, name):
    path = trained / f"{name}_epoch_001.npz"          # trained with --ngf 8 --ndf 8
    dcgan_fails(tmp_path, flag, str(path), "--ngf", "16", "--ndf", "16",
                words=(flag, str(path), "size mismatch for", "--ngf 16"))


def test_weights_that_are_a_checkpoint(tmp_path, trained):
    path = trained / "checkpoint.npz"
    dcgan_fails(tmp_path, "--netG", str(path), words=("--netG", str(path), "checkpoint"))


def test_resume_missing(tmp_path):
    path = tmp_path / "checkpoint.npz"
    dcgan_fails(tmp_path, "--resume", str(path), words=("--resume", str(path), "no such file"))


def test_resume_truncated(tmp_path, trained):
    path = tmp_path / "checkpoint.npz"
    path.write_bytes((trained / "checkpoint.npz").read_bytes()[:5000])
    dcgan_fails(tmp_path, "--resume", str(path), words=("--resume", str(path), "damaged"))


def test_resume_corrupt(tmp_path, trained):
    data = bytearray((trained / "checkpoint.npz").read_bytes())
    data[2000:2100] = b"\xff" * 100                    # inside the first arrays, CRC mismatch
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(bytes(data))
    dcgan_fails(tmp_path, "--resume", str(path), words=("--resume", str(path), "damaged"))


def test_resume_given_weights(tmp_path, trained):
    path = trained / "netG_epoch_001.npz"
    dcgan_fails(tmp_path, "--resume", str(path),
                words=("--resume", str(path), "not a checkpoint"))


def test_resume_of_another_architecture(tmp_path, trained, mnist):
    """The checkpoint says which architecture it holds: another --ngf is refused by name, and no
    --ngf at all takes the checkpoint's (SMALL's 8, not the default 64)."""
    path = trained / "checkpoint.npz"
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--resume", str(path),
                "--ngf", "16", words=("--ngf 16", str(path), "trained with --ngf 8"))
    r = run("train.dcgan", "--device", "cpu", "--batch-size", "6", "--dataset", "mnist",
            "--dataroot", str(mnist), "--resume", str(path), "--epochs", "1",
            "--outf", str(tmp_path / "again"))
    assert r.returncode == 0, r.stderr


def test_resume_of_a_checkpoint_that_does_not_say_its_architecture(tmp_path, trained, mnist):
    """Checkpoints from before the architecture was saved: the flags must repeat it, and a
    mismatch is the state dict's shape error."""
    import json
    arrays = L.load(trained / "checkpoint.npz")
    meta = json.loads(str(arrays["meta"]))
    for k in ("nz", "ngf", "ndf", "nc"):
        del meta[k]
    arrays["meta"] = np.array(json.dumps(meta))
    L.save(arrays, tmp_path / "old.npz")
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--resume",
                str(tmp_path / "old.npz"), "--ngf", "16", words=("--resume", "size mismatch for"))


def test_resume_on_another_dataset(tmp_path, trained):
    path = trained / "checkpoint.npz"
    dcgan_fails(tmp_path, "--dataset", "fake", "--resume", str(path),
                words=("--dataset fake", str(path), "trained with --dataset mnist"))
    other = tmp_path / "other_mnist"            # the same kind of data, another folder's worth
    other.mkdir()
    write_idx(str(other / "train-images-idx3-ubyte"),
              np.zeros((7, 28, 28), np.uint8))
    r = run("train.dcgan", "--device", "cpu", "--dataroot", str(other), "--resume", str(path),
            "--outf", str(tmp_path / "out"))
    assert_usage_error(r, "--resume", str(path), "12 images", "has 7", f"--dataroot {other}")


def test_resume_with_no_epochs_left(tmp_path, trained, mnist):
    path = trained / "checkpoint.npz"                  # the dry run stopped in epoch 1 of 1
    first = run("train.dcgan", *SMALL, "--dataset", "mnist", "--dataroot", str(mnist),
                "--epochs", "1", "--resume", str(path), "--outf", str(tmp_path / "done"))
    assert first.returncode == 0, first.stderr
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--epochs", "1",
                "--resume", str(tmp_path / "done" / "checkpoint.npz"),
                words=("--epochs 1", "finished 1 epochs"))


def test_resume_with_another_batch_size(tmp_path, trained, mnist):
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--batch-size", "4",
                "--resume", str(trained / "checkpoint.npz"),
                words=("--batch-size 4", "trained with batch size 6"))


def test_resume_with_a_new_learning_rate_applies_it_and_says_so(tmp_path, trained, mnist):
    import json
    out = tmp_path / "lr"
    r = run("train.dcgan", *SMALL, "--dataset", "mnist", "--dataroot", str(mnist), "--epochs",
            "1", "--resume", str(trained / "checkpoint.npz"), "--lr", "0.001", "--beta1", "0.7",
            "--outf", str(out))
    assert r.returncode == 0, r.stderr
    assert "--lr 0.001 replaces the value in" in r.stdout and "--beta1 0.7" in r.stdout
    meta = json.loads(str(L.load(out / "checkpoint.npz")["meta"]))
    for opt in ("optG", "optD"):
        assert meta["optimizers"][opt][0]["lr"] == 0.001
        assert meta["optimizers"][opt][0]["betas"] == [0.7, 0.999]


def test_resume_with_another_precision(tmp_path, trained, mnist):
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--precision", "bf16",
                "--resume", str(trained / "checkpoint.npz"),
                words=("--precision bf16", "trained with precision fp32"))


def test_a_checkpoint_from_before_precision_existed_is_float32(tmp_path, trained, mnist):
    import json
    arrays = L.load(trained / "checkpoint.npz")
    meta = json.loads(str(arrays["meta"]))
    del meta["precision"], meta["memory_format"]
    arrays["meta"] = np.array(json.dumps(meta))
    L.save(arrays, tmp_path / "old.npz")
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--precision", "bf16",
                "--resume", str(tmp_path / "old.npz"),
                words=("--precision bf16", "trained with precision fp32"))


def test_the_memory_format_is_the_flag_else_the_checkpoints_else_the_devices_default():
    """train.dcgan's default is channels_last on a GPU, contiguous on the CPU; a resumed run
    keeps its checkpoint's, and one from before the flag is contiguous."""
    from train import cli
    assert cli.memory_format(None, default="channels_last") == "channels_last"
    assert cli.memory_format(None) == "contiguous"
    assert cli.memory_format("contiguous", default="channels_last") == "contiguous"
    assert cli.memory_format(None, {"memory_format": "contiguous"}, "c.npz",
                             default="channels_last") == "contiguous"
    assert cli.memory_format(None, {}, "old.npz", default="channels_last") == "contiguous"
    with pytest.raises(SystemExit):
        cli.memory_format("channels_last", {}, "old.npz", default="channels_last")


def test_resume_with_max_steps_already_reached(tmp_path, trained, mnist):
    dcgan_fails(tmp_path, "--dataset", "mnist", "--dataroot", str(mnist), "--max-steps", "1",
                "--resume", str(trained / "checkpoint.npz"),
                words=("--max-steps 1", "at step 1 already"))


def test_learning_rate_that_is_not_a_number(tmp_path):
    dcgan_fails(tmp_path, "--lr", "abc", words=("--lr", "expected a positive number", "'abc'"))


# ---- --outf -----------------------------------------------------------------------------------

def test_outf_an_existing_file_is_left_alone(tmp_path):
    outf = tmp_path / "notes.txt"
    outf.write_bytes(b"keep me\n")
    r = run("train.dcgan", *SMALL, "--dataset", "fake", "--dry-run", "--outf", str(outf))
    assert_usage_error(r, "--outf", str(outf), "expected a folder")
    assert outf.read_bytes() == b"keep me\n"
    r = run("train.dcgan", *SMALL, "--dataset", "fake", "--dry-run", "--outf",
            str(outf / "sub"))
    assert_usage_error(r, "--outf", str(outf / "sub"), f"{outf} is a file, so no folder can be "
                                                       f"made under it")


def test_an_outf_the_file_system_refuses_is_one_error_line(tmp_path, monkeypatch, capsys):
    """(what os.access cannot tell: read-only media, an immutable folder, root's writes)"""
    from train import cli

    def refuse(**kwargs):
        raise PermissionError(13, "Operation not permitted")
    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)
    with pytest.raises(SystemExit) as e:
        cli.make_outf(str(tmp_path / "out"))
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --outf {tmp_path / 'out'}: cannot be made a folder or written in (Operation not "
        f"permitted); expected a writable folder, made if missing")


# ---- the tools --------------------------------------------------------------------------------

GPU_TOOLS = ["bench_dcgan", "bench_lstm", "bench_calls", "bench_fusions", "conv_algos",
             "profile_dcgan"]


@pytest.mark.parametrize("tool", GPU_TOOLS)
def test_gpu_tool_refuses_cpu(tool):
    r = run(f"tools.{tool}", "--device", "cpu")
    assert_usage_error(r, "--device cpu", "GPU")
    if tool in ("bench_dcgan", "profile_dcgan"):   # the DCGAN step's timers name their CPU twin
        assert "python -m tools.bench_host" in r.stderr, r.stderr


@no_gpu
@pytest.mark.parametrize("tool", GPU_TOOLS + ["bench_overhead"])
def test_tool_without_a_gpu(tool):
    r = run(f"tools.{tool}", "--device", "0")
    assert_usage_error(r, "--device 0", "no CUDA device")
    import ctypes.util
    if ctypes.util.find_library("cuda") is None:     # no driver at all: said so, not "upgrade it"
        assert "no NVIDIA driver: libcuda not found" in r.stderr, r.stderr


@pytest.mark.parametrize("tool", GPU_TOOLS + ["bench_overhead"])
def test_tool_device_that_is_not_one(tool):
    assert_usage_error(run(f"tools.{tool}", "--device", "foo"), "--device", "foo")


def test_bench_host_runs_on_the_cpu():
    r = run("tools.bench_host", "--steps", "2", "--repeats", "1")
    assert r.returncode == 0, r.stderr
    assert "engine host time:" in r.stdout and "cuDNN calls" in r.stdout


def test_bench_overhead_runs_on_the_cpu():
    r = run("tools.bench_overhead", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "add (recorded)" in r.stdout and " cpu " in r.stdout


# ---- the README's CPU-only set-up ---------------------------------------------------------------

def test_readme_cpu_example_matches_torch():
    """The README's NumPy example runs as written; its gradient is torch's for the same net."""
    import re

    import torch

    import layers as L
    from layers import nn
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"### CPU only\n.*?```python\n(.*?)```", text, re.S).group(1)
    L.manual_seed(0)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    L.manual_seed(0)                                  # the same initial weights, before Adam
    fresh = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                              torch.nn.ReLU())
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in fresh.state_dict().items()})
    loss = torch.nn.functional.mse_loss(ref(torch.from_numpy(scope["x"].numpy())),
                                        torch.zeros(8, 16, 32, 32))
    loss.backward()
    assert abs(scope["loss"].item() - loss.item()) < 1e-6
    np.testing.assert_allclose(scope["net"][0].weight.grad.numpy(), ref[0].weight.grad.numpy(),
                               rtol=1e-4, atol=1e-7)


# ---- statistics read back in windows ---------------------------------------------------------

def test_device_stats_reads_back_every_n_steps_in_order():
    from train.common import DeviceStats
    stats = DeviceStats(["a", "b"], every=3)
    got, rates = [], []
    for step in range(1, 8):
        values = np.array([step, -step], np.float32)
        rows = stats.add(step, values, items=10)
        values[:] = 99                          # a captured step rewrites its output buffer
        got.append([r["step"] for r in rows])
        rates += [r["rate"] for r in rows]
    assert got == [[], [], [1, 2, 3], [], [], [4, 5, 6], []]
    # the window's rate on its last row only: not a per-step figure repeated on each
    assert [r is None for r in rates] == [True, True, False] * 2 and min(rates[2::3]) > 0
    rows = stats.flush()
    assert [(r["step"], r["a"], r["b"]) for r in rows] == [(7, 7.0, -7.0)]
    assert rows[0]["rate"] > 0 and stats.flush() == []


def test_a_window_rate_is_written_once_in_the_csv(tmp_path):
    from train.common import DeviceStats, LossLog, rate_cell
    stats, log = DeviceStats(["a"], every=2), LossLog(tmp_path / "l.csv", ["step", "a", "per_s"])
    for step in (1, 2):
        for r in stats.add(step, np.array([step], np.float32), items=4):
            log.write(dict(r, per_s=rate_cell(r["rate"])))
    log.flush()
    rows = (tmp_path / "l.csv").read_text().splitlines()
    assert rows[:2] == ["step,a,per_s", "1,1.0,"] and float(rows[2].split(",")[2]) > 0


def test_first_non_finite_names_the_step_and_the_statistic():
    from train.common import first_non_finite
    rows = [dict(step=4, a=1.0, b=2.0), dict(step=5, a=1.0, b=float("inf")),
            dict(step=6, a=float("nan"), b=1.0)]
    row, name = first_non_finite(rows, ["a", "b"])
    assert (row["step"], name) == (5, "b")
    assert first_non_finite(rows[:1], ["a", "b"]) is None


@pytest.mark.parametrize("argv,mode,api", [
    ([], "benchmark", "graph"), (["--algo", "heuristic"], "heuristic", "graph"),
    (["--conv-api", "legacy", "--algo", "heuristic"], "heuristic", "legacy")])
def test_dcgan_chooses_cudnn_algorithms_as_its_algo_flag_says_on_a_gpu(argv, mode, api,
                                                                       monkeypatch, tmp_path):
    """The graph API by default (its eager step is the faster, docs/performance.md), and
    --algo benchmark by default for either API (pytorch/examples' DCGAN sets
    cudnn.benchmark = True): set for the process on a GPU device before anything is built
    (stopped here at the data)."""
    from cudnnlite import conv
    from train import cli as train_cli
    from train import dcgan, data
    monkeypatch.setattr(conv, "settings", conv.settings)        # restored afterwards
    monkeypatch.setattr(train_cli, "use_device", lambda device, **k: 0)

    def stop(*args, **kwargs):
        raise data.DatasetError(f"stopped with algo_mode={conv.settings.algo_mode}")
    monkeypatch.setattr(data, "load", stop)
    with pytest.raises(SystemExit):
        dcgan.main(["--device", "0", "--dataset", "fake", "--outf", str(tmp_path), *argv])
    assert (conv.settings.algo_mode, conv.settings.api) == (mode, api)


def test_dcgan_algo_flag_takes_only_the_two_modes_and_only_on_a_gpu(tmp_path):
    assert_usage_error(run("train.dcgan", "--device", "cpu", "--algo", "fastest",
                           "--outf", str(tmp_path)), "--algo", "fastest")
    assert_usage_error(run("train.dcgan", "--device", "cpu", "--algo", "heuristic",
                           "--outf", str(tmp_path)), "--algo heuristic", "GPU --device")
    assert_usage_error(run("train.dcgan", "--device", "cpu", "--conv-api", "legacy",
                           "--outf", str(tmp_path)), "--conv-api legacy", "GPU --device")


def test_resuming_another_jobs_checkpoint_says_so(tmp_path, trained):
    """A checkpoint with no netG / netD state (Tacotron 2's holds 'model/...') is named as not
    a train.dcgan checkpoint, not compared setting by setting (it had been 'trained with batch
    size 4' when --batch-size was given)."""
    import numpy as np
    arrays = dict(np.load(trained / "checkpoint.npz"))
    other = {("model/" + k.split("/", 1)[1] if k.startswith(("netG/", "netD/")) else k): v
             for k, v in arrays.items()}
    np.savez(tmp_path / "other.npz", **other)
    r = run("train.dcgan", "--device", "cpu", "--resume", str(tmp_path / "other.npz"),
            "--batch-size", "8", "--outf", str(tmp_path / "out"))
    assert_usage_error(r, "--resume", "holds no state for 'netG' or 'netD'",
                       "it holds state for: model", "train.dcgan run")
    assert "batch size" not in r.stderr


def test_a_gpu_device_without_cupy_says_cupy_is_missing(monkeypatch, capsys):
    """--device 0 where CuPy is not installed names CuPy and the extra that brings it (not "no
    CUDA device")."""
    import sys
    from train import cli as train_cli
    monkeypatch.setitem(sys.modules, "cupy", None)          # import cupy -> ImportError
    with pytest.raises(SystemExit) as e:
        train_cli.use_device(0)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: --device 0: CuPy is not installed") and ".[cuda12]" in err


# ---- an --outf that holds a run ---------------------------------------------------------------

def _steps(outf):
    return [int(row.split(",")[0]) for row in (outf / "losses.csv").read_text().splitlines()[1:]]


def test_a_new_run_refuses_an_outf_that_holds_one(tmp_path):
    """A new run would replace the earlier run's checkpoint and mix both runs' rows in one
    losses.csv: refused, pointing to --resume; nothing there changed."""
    r = run("train.dcgan", *SMALL, "--max-steps", "2", "--outf", str(tmp_path))
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    r = run("train.dcgan", *SMALL, "--max-steps", "2", "--outf", str(tmp_path))
    assert_usage_error(r, f"--outf {tmp_path}", "earlier run",
                       f"--resume {tmp_path / 'checkpoint.npz'}")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_run_resumed_from_an_earlier_checkpoint_logs_each_step_once(tmp_path):
    """Resumed from the step-2 checkpoint after the run reached step 4 (the recovery after a
    crash or a non-finite stop): steps 3 and 4 are logged once, not twice."""
    out = ("--outf", str(tmp_path))
    assert run("train.dcgan", *SMALL, "--max-steps", "2", *out).returncode == 0
    (tmp_path / "at2.npz").write_bytes((tmp_path / "checkpoint.npz").read_bytes())
    for ckpt in ("checkpoint.npz", "at2.npz"):
        r = run("train.dcgan", *SMALL, "--max-steps", "4", *out, "--resume",
                str(tmp_path / ckpt))
        assert r.returncode == 0, r.stderr
    assert _steps(tmp_path) == [1, 2, 3, 4]
    other = tmp_path / "other"                      # resumed into a folder of another run
    assert run("train.dcgan", *SMALL, "--max-steps", "1", "--outf", str(other)).returncode == 0
    r = run("train.dcgan", *SMALL, "--max-steps", "6", "--outf", str(other), "--resume",
            str(tmp_path / "checkpoint.npz"))
    assert_usage_error(r, f"--outf {other}: holds another run", "own folder")
    assert _steps(other) == [1]


def test_a_log_with_no_step_is_no_earlier_run_and_a_cut_row_is_dropped(tmp_path):
    """A run stopped before its first step leaves losses.csv with its header only: a new run
    may go there. A run killed while writing a row leaves it cut short: a resume drops it."""
    from train.common import LossLog, earlier_run
    (tmp_path / "losses.csv").write_text("step,epoch,a\n")
    assert earlier_run(str(tmp_path)) == []
    (tmp_path / "losses.csv").write_text("step,epoch,a\n1,1,0.5\n2,1\n")
    assert earlier_run(str(tmp_path)) == ["losses.csv"]
    (tmp_path / "losses.csv").write_bytes(b"step,\xff\n1,2\n")             # not UTF-8: a run
    assert earlier_run(str(tmp_path)) == ["losses.csv"]
    (tmp_path / "losses.csv").write_text("step,epoch,a\n1,1,0.5\n2,1\n")
    LossLog(str(tmp_path / "losses.csv"), ["step", "epoch", "a"], resume_step=2).flush()
    assert (tmp_path / "losses.csv").read_text() == "step,epoch,a\n1,1,0.5\n"


def test_a_resumed_log_of_other_columns_is_refused(tmp_path):
    from train.common import LossLog
    path = tmp_path / "losses.csv"
    path.write_text("step,epoch,a\n1,1,0.5\n2,1,0.25\n")
    with pytest.raises(ValueError, match=r"logs the columns \['step', 'epoch', 'a'\]"):
        LossLog(str(path), ["step", "epoch", "a", "b"], resume_step=1)
    log = LossLog(str(path), ["step", "epoch", "a"], resume_step=1)
    log.write({"step": 2, "epoch": 1, "a": 0.125})
    log.flush()
    assert path.read_text() == "step,epoch,a\n1,1,0.5\n2,1,0.125\n"


def test_a_folder_dataset_with_no_dataroot_says_it_needs_one(tmp_path):
    r = run("train.dcgan", "--device", "cpu", "--dataset", "folder", "--outf", str(tmp_path / "o"))
    assert_usage_error(r, "--dataset folder needs --dataroot", "--dataset digits")
    assert "None" not in r.stderr and not (tmp_path / "o").exists()


def test_a_run_whose_output_is_not_a_terminal_prints_plain_progress_lines(tmp_path, monkeypatch,
                                                                          capsys):
    """tqdm draws nothing into a file or a pipe: a plain line with the bar's figures then
    (at most every PLAIN_PROGRESS_EVERY seconds; every read-back window with it at 0)."""
    from train import common, dcgan
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY", 0.0)
    assert dcgan.main([*SMALL, "--max-steps", "4", "--log-every", "2",
                       "--outf", str(tmp_path / "out")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("epoch 1/25: ")]
    assert [line.split()[2] for line in lines] == ["2/342", "4/342"], lines
    assert all("Loss_D" in line and "img_s" in line for line in lines)


def test_a_resume_reading_a_moved_dataroot_says_the_checkpoint_named_it(tmp_path):
    data_dir = tmp_path / "digits_idx"
    data_dir.mkdir()
    write_idx(str(data_dir / "train-images-idx3-ubyte"),
              np.zeros((12, 28, 28), np.uint8))
    out = tmp_path / "run"
    r = run("train.dcgan", *SMALL[:-2], "--dataset", "mnist", "--dataroot", str(data_dir),
            "--dry-run", "--outf", str(out))
    assert r.returncode == 0, r.stderr
    data_dir.rename(tmp_path / "moved")
    r = run("train.dcgan", "--device", "cpu", "--resume", str(out / "checkpoint.npz"))
    assert_usage_error(r, str(data_dir), "the --dataroot of the checkpoint",
                       "expected --dataroot where that data is now")
    r = run("train.dcgan", "--device", "cpu", "--resume", str(out / "checkpoint.npz"),
            "--dataroot", str(tmp_path / "moved"), "--epochs", "1")
    assert r.returncode == 0, r.stderr


def test_a_run_stopped_on_its_last_step_says_it_is_complete(tmp_path, mnist):
    """12 images at batch 6: step 2 ends the one epoch, so no resume command is printed (it
    would be refused: no epoch left)."""
    r = run("train.dcgan", *SMALL, "--dataset", "mnist", "--dataroot", str(mnist), "--epochs",
            "1", "--max-steps", "2", "--outf", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "stopped after step 2 (--max-steps), the run's last: the run is complete" in r.stdout
    assert "--resume" not in r.stdout


def test_an_abbreviated_flag_is_refused(tmp_path):
    """(argparse takes --max-step for --max-steps; the printed resume command drops the latter
    by name, so it would keep the former)"""
    r = run("train.dcgan", *SMALL, "--max-step", "1", "--outf", str(tmp_path / "o"))
    assert_usage_error(r, "unrecognized arguments: --max-step 1")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("dataset", ["fake", "digits"])
def test_channels_other_than_grey_or_rgb_are_refused(tmp_path, dataset):
    dcgan_fails(tmp_path, "--dataset", dataset, "--nc", "2",
                words=("--nc", "expected 1 (greyscale) or 3 (RGB), got '2'"))


def test_the_resume_command_of_a_run_started_from_weights_continues_it(tmp_path, trained, mnist):
    """--netG / --netD start a run; the checkpoint then holds the weights, and --resume refuses
    them: the printed command leaves them out. Repeating the run's own --lr is no change."""
    import shlex
    out = tmp_path / "w"
    r = run("train.dcgan", *SMALL, "--dataset", "mnist", "--dataroot", str(mnist), "--netG",
            str(trained / "netG_epoch_001.npz"), "--netD", str(trained / "netD_epoch_001.npz"),
            "--lr", "0.0003", "--epochs", "2", "--max-steps", "1", "--outf", str(out))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("stopped after step 1"))
    command = shlex.split(line.split("; ", 1)[1].removesuffix(" continues the run"))
    assert "--netG" not in command and "--netD" not in command
    r = run(*command[2:])
    assert r.returncode == 0, r.stderr
    assert "replaces the value" not in r.stdout


@pytest.mark.parametrize("args,flag", [
    (("--keras", "--input", "0", "5", "3", "--filters", "4", "--kernel", "3"), "--input"),
    (("--torch", "--input", "5", "5", "--in-channels", "2", "--out-channels", "2", "--kernel",
      "3", "--groups", "0"), "--groups"),
    (("--keras", "--input", "5", "5", "3", "--filters", "4", "--kernel", "3", "--strides", "0"),
     "--strides")])
def test_explain_transpose_refuses_zero_sizes_in_one_line(args, flag):
    assert_usage_error(run("tools.explain_transpose", *args), flag,
                       "expected a positive integer")


def test_load_state_refuses_in_one_line_what_does_not_fit_or_cast():
    import layers as L
    from train.common import CheckpointError, load_state
    m = L.nn.Linear(2, 3)
    with pytest.raises(CheckpointError, match=r'^does not fit the model \(Missing key\(s\) in '
                                              r'state_dict: "bias"\.; Unexpected key\(s\) in '
                                              r'state_dict: "x"\.; size mismatch for weight: '
                                              r'[^\n]*\)$'):
        load_state(m, {"weight": np.zeros((3, 3), np.float32), "x": np.zeros(1)})
    with pytest.raises(CheckpointError, match=r"^does not fit the model \(could not convert"):
        load_state(m, {"weight": np.full((3, 2), "a"), "bias": np.zeros(3, np.float32)})


def test_a_resumed_runs_stop_line_spells_the_checkpoint_as_it_was_given(tmp_path, mnist):
    """A relative --outf (then --resume) stays relative in every stop line's command."""
    env = dict(os.environ, PYTHONPATH=ROOT)

    def stop_command(*args):
        r = subprocess.run([sys.executable, "-m", "train.dcgan", *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("stopped after step"))
    first = stop_command(*SMALL, "--dataset", "mnist", "--dataroot", str(mnist), "--epochs",
                         "3", "--max-steps", "1", "--outf", "o")
    assert first.endswith("--resume o/checkpoint.npz continues the run"), first
    again = stop_command("--device", "cpu", "--resume", "o/checkpoint.npz", "--max-steps", "2")
    assert again.endswith("--resume o/checkpoint.npz continues the run"), again

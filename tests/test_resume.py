"""Stop + resume == an uninterrupted run, bitwise, on the CPU: a checkpoint holds the epoch, the
position in it, its sample order and the RNG states, whether the stop falls at an epoch's end or
in the middle of one."""
import csv
import shlex

import numpy as np
import pytest

import layers as L
from test_cli import SMALL, run
from test_dcgan import write_idx


def summaries(stdout):
    """The epoch summary lines ("[1/2] Loss_D ... D(G(z)) a/b"), without their img/s."""
    return {line.split("]")[0]: line.rsplit(" ", 2)[0] for line in stdout.splitlines()
            if line.startswith("[") and "Loss_D" in line}


def losses(folder):
    """losses.csv without the timing column."""
    with open(folder / "losses.csv") as f:
        return [{k: v for k, v in row.items() if k != "img_per_s"} for row in csv.DictReader(f)]


@pytest.mark.parametrize("stop", [("--epochs", "1"),          # at the end of epoch 1
                                  ("--max-steps", "2")],      # 2 of epoch 1's 3 batches
                         ids=["epoch-end", "mid-epoch"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16 channels_last"])
def test_stop_and_resume_equals_the_straight_run(tmp_path, stop, precision):
    """(bf16: the resumed run takes its precision from the checkpoint, and the float32 master
    weights come back with it.)"""
    images = np.random.default_rng(0).integers(0, 256, (16, 28, 28), dtype=np.uint8)
    write_idx(str(tmp_path / "train-images-idx3-ubyte"), images)   # batches of 6, 6, 4
    common = (*SMALL, "--dataset", "mnist", "--dataroot", str(tmp_path), "--seed", "3")
    precision, *layout = precision.split()
    layout = ("--memory-format", layout[0]) if layout else ()
    straight, first = tmp_path / "straight", tmp_path / "first"
    r = run("train.dcgan", *common, "--epochs", "2", "--outf", str(straight),
            "--precision", precision, *layout)
    assert r.returncode == 0, r.stderr
    straight_summaries = summaries(r.stdout)
    # read back 2 steps at a time: windows straddle the stop; every step is still logged
    r = run("train.dcgan", *common, "--epochs", "2", *stop, "--outf", str(first),
            "--log-every", "2", "--precision", precision, *layout)
    assert r.returncode == 0, r.stderr
    assert len(losses(first)) == (3 if stop[0] == "--epochs" else 2)
    if stop[0] == "--max-steps":          # the command the stopped run prints, run as printed
        line = next(x for x in r.stdout.splitlines() if x.startswith("stopped after step 2"))
        command = shlex.split(line.split("; ", 1)[1].removesuffix(" continues the run"))
        assert command[:3] == ["python", "-m", "train.dcgan"] and "--max-steps" not in command
        i = command.index("--epochs")              # (without it: the checkpoint's 2 epochs)
        r = run("train.dcgan", *command[3:i], *command[i + 2:])
    else:                                  # only --resume: the folder, data, seed and widths
        r = run("train.dcgan", "--device", "cpu", "--epochs", "2", "--resume",   # are the
                str(first / "checkpoint.npz"))                                   # checkpoint's
    assert r.returncode == 0, r.stderr
    # the resumed run's epoch summaries: the straight run's, the epoch it resumed in included
    resumed = summaries(r.stdout)
    assert resumed == {k: straight_summaries[k] for k in resumed}
    assert len(resumed) == (1 if stop[0] == "--epochs" else 2)

    a, b = L.load(straight / "checkpoint.npz"), L.load(first / "checkpoint.npz")
    assert list(a) == list(b)
    for k in a:                    # weights, buffers, Adam's moments and steps, order, meta
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert losses(first) == losses(straight) and len(losses(straight)) == 6
    masters = [k for k in a if k.endswith("/master_param")]
    assert len(masters) == (0 if precision == "fp32" else 10)    # 5 conv weights per model
    if precision == "bf16":
        w = a["netD/main.0.weight"]               # saved as float32, holding bfloat16 values
        np.testing.assert_array_equal(w, w.astype(L.backend.bfloat16).astype(np.float32))
        assert not np.array_equal(w, a["optD/state/0/master_param"])

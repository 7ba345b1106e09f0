"""What every training job shares: image grids, loss logs and plots, per-step statistics read
back in batches, weights files, and atomic checkpoints that hold the RNG states and the position
in the epoch too."""
import csv
import io
import json
import math
import os
import sys
import time
import zipfile

import numpy as np

import layers as L
from layers.serialization import load as load_arrays
from layers.serialization import save as save_arrays
from layers.serialization import write_atomically


def save_image_grid(images, path, nrow=8, padding=2):
    """float images (N, C, H, W) in [-1, 1] -> one PNG grid (torchvision.utils.save_image with
    normalize=True, value_range=(-1, 1))."""
    from PIL import Image
    images = np.clip((np.asarray(images, np.float32) + 1) / 2, 0, 1)
    n, c, h, w = images.shape
    ncol = min(nrow, n)
    nrows = -(-n // ncol)
    grid = np.zeros((c, nrows * (h + padding) + padding, ncol * (w + padding) + padding),
                    np.float32)
    for i in range(n):
        r, col = divmod(i, ncol)
        y0, x0 = padding + r * (h + padding), padding + col * (w + padding)
        grid[:, y0:y0 + h, x0:x0 + w] = images[i]
    pixels = np.round(grid * 255).astype(np.uint8).transpose(1, 2, 0)
    Image.fromarray(pixels[..., 0] if c == 1 else pixels).save(path)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


RUN_FILES = ("checkpoint.npz", "losses.csv")     # what says a folder holds a run already


PLAIN_PROGRESS_EVERY = 30.0     # seconds between progress lines where no bar is drawn


class Progress:
    """A training loop's progress: tqdm's bar on a terminal; where tqdm draws nothing (stdout a
    file or a pipe: a log, a job's output), a plain line with the bar's figures at most every
    PLAIN_PROGRESS_EVERY seconds, so a long epoch is not silent until its end."""

    def __init__(self, total, desc, initial=0):
        from tqdm import tqdm
        self.bar = tqdm(total=total, initial=initial, desc=desc, file=sys.stdout, disable=None)
        self.n, self.total, self.desc = initial, total, desc
        self.last = time.perf_counter()

    def update(self, n=1):
        self.bar.update(n)
        self.n += n

    def set_postfix(self, **figures):
        self.bar.set_postfix(**figures)
        now = time.perf_counter()
        if self.bar.disable and now - self.last >= PLAIN_PROGRESS_EVERY:
            self.last = now
            print(f"{self.desc}: {self.n}/{self.total} "
                  + " ".join(f"{k} {v}" for k, v in figures.items()), flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()


def earlier_run(outf):
    """The files of an earlier run in `outf`: its checkpoint.npz, its losses.csv where that holds
    a step (a run stopped before its first step leaves only the header). A new run there would
    replace the checkpoint and mix its log in with the earlier one's."""
    found = []
    for name in RUN_FILES:
        path = os.path.join(outf, name)
        if name == "losses.csv" and os.path.isfile(path):
            with open(path, newline="", encoding="utf-8", errors="replace") as f:
                if sum(1 for row in csv.reader(f) if row) < 2:
                    continue
        if os.path.exists(path):
            found.append(name)
    return found


class LossLog:
    """A CSV of per-step values (a 'step' column first) and a PNG plot. A new run (`resume_step`
    None) starts the file; a resumed one keeps its rows up to `resume_step`, the checkpoint's
    step, and goes on from there (a run resumed from an earlier checkpoint logs the steps after
    it once, not twice). ValueError where the file's columns are not `fields` (one run's log)."""

    def __init__(self, path, fields, resume_step=None):
        self.path, self.fields = path, list(fields)
        kept = []
        if resume_step is not None and os.path.exists(path):
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            if rows and rows[0] != self.fields:
                raise ValueError(f"{path} logs the columns {rows[0]}; this run logs "
                                 f"{self.fields}: move it aside to resume with these settings")
            for r in rows[1:]:
                if len(r) != len(self.fields):      # (blank, or cut short by a killed run)
                    continue
                try:
                    if int(r[0]) <= resume_step:
                        kept.append(r)
                except ValueError:
                    raise ValueError(f"{path}: a row whose step is {r[0]!r}, expected an "
                                     f"integer: move the file aside to resume") from None

        def write(f):                  # the kept rows, replaced in one rename
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(self.fields)
            writer.writerows(kept)
            f.write(text.getvalue().encode())
        write_atomically(path, write)
        self.file = open(path, "a", newline="")
        self.writer = csv.writer(self.file, lineterminator="\n")

    def write(self, row):
        self.writer.writerow([row[k] for k in self.fields])

    def flush(self):
        self.file.flush()

    def plot(self, png, keys, x="step", log_y=False):
        """keys against x from the CSV; log_y for losses that fall by decades (Tacotron 2's)."""
        plt = pyplot()
        self.flush()
        with open(self.path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            return
        xs = [float(r[x]) for r in rows]
        fig, ax = plt.subplots(figsize=(8, 4))
        for k in keys:
            ax.plot(xs, [float(r[k]) for r in rows], label=k, linewidth=0.8)
        ax.set_xlabel(x)
        if log_y:
            ax.set_yscale("log")
        ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        plt.close(fig)


def rate_cell(rate):
    """A DeviceStats row's rate as a CSV cell: empty where the row is not its window's last."""
    return "" if rate is None else round(rate, 1)


class DeviceStats:
    """Per-step statistics (a device array of len(names) values per step) copied aside on the
    device and read back every `every` steps in one transfer, so the training loop does not wait
    for the GPU after each step: the host queues the next steps while the GPU works. A
    non-finite value is still caught, at most `every` steps late, with the step that made it.
    On the CPU (NumPy arrays) nothing waits anyway; the same code runs.

    `add(step, values, items)` returns the rows read back (a list of dicts with 'step' and every
    name), empty until `every` steps are pending; `flush()` reads back what is pending (call it
    before a checkpoint, a validation or the end). Each row also gets `rate`: on the window's last
    row, items per second over that window; None on the others (per-step times mean nothing once
    steps overlap, and one window's rate repeated on each of its rows reads as a per-step one).
    `rate_cell(rate)` is its CSV cell.

    With `finite`, a layers.finite.FiniteCheck made with keep_first=True, a window whose rows
    are all finite resets the check, so when a row is not, `where(step)` names the first
    non-finite layer output or gradient since the last good window, and its step (start_step:
    the steps done before this object, for a resumed run)."""

    def __init__(self, names, every=1, finite=None, start_step=0):
        self.names, self.every = list(names), max(1, int(every))
        self.pending = []          # (step, device copy of the values, items)
        self.t0 = time.perf_counter()
        self.finite, self.base = finite, start_step     # the check counts steps from base + 1

    def add(self, step, values, items=0):
        # a copy: a captured step rewrites its static output buffer at the next replay
        self.pending.append((step, values.copy(), items))
        return self.flush() if len(self.pending) >= self.every else []

    def flush(self):
        if not self.pending:
            return []
        from layers.backend import xp_of
        xp = xp_of(self.pending[0][1])
        host = xp.stack([v for _, v, _ in self.pending])
        host = host.get() if hasattr(host, "get") else host     # the one sync of the window
        now = time.perf_counter()
        rate = sum(n for _, _, n in self.pending) / max(now - self.t0, 1e-9)
        rows = [dict(zip(self.names, (float(x) for x in values)), step=step, rate=None)
                for (step, _, _), values in zip(self.pending, host)]
        rows[-1]["rate"] = rate
        self.pending, self.t0 = [], now
        if self.finite is not None and first_non_finite(rows, self.names) is None:
            self.finite.reset()
            self.base = rows[-1]["step"]
        return rows

    def where(self, step, default):
        """The first non-finite layer output or gradient the FiniteCheck saw since the last good
        window ('output of netD.main.2 (Conv2d)', with ' in step N' when that is not `step`),
        or `default`."""
        what = self.finite.first() if self.finite is not None else None
        if what is None:
            return default
        at = self.base + self.finite.first_step()
        return what if at == step else f"{what} in step {at}"

    def restart_clock(self):
        """Start the next window's clock now (after time spent outside training steps)."""
        self.t0 = time.perf_counter()


def first_non_finite(rows, names):
    """(row, name) of the first non-finite statistic in rows, or None."""
    for row in rows:
        for k in names:
            if not math.isfinite(row[k]):
                return row, k
    return None


def stopped_note(ckpt):
    """What a run stopped by a non-finite value says of its checkpoint: the last one is in
    place (and --resume continues from it), or none was written yet."""
    if os.path.exists(ckpt):
        return f"stopped with the last checkpoint in place (--resume {ckpt} continues from it)"
    return (f"stopped before any checkpoint was written; a new run needs another --outf (or "
            f"the log files in {os.path.dirname(ckpt) or '.'} removed)")


class CheckpointError(ValueError):
    """A weights or checkpoint file that cannot be used; the message says why (the caller names
    the argument and the path)."""


def read_arrays(path):
    """The arrays of an .npz (or .safetensors) file, every unreadable case a CheckpointError."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise CheckpointError("no such file") from None
    except OSError as e:
        raise CheckpointError(f"cannot be read ({e.strerror})") from None
    if not os.fspath(path).endswith(".safetensors") and head != b"PK\x03\x04":
        raise CheckpointError(f"not an .npz file (it starts with {head!r}, not a zip archive's "
                              f"b'PK\\x03\\x04')")
    try:
        return load_arrays(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        said = str(e).removeprefix(f"load: {os.fspath(path)} is ")
        if isinstance(e, ValueError) and said != str(e):   # (load's own: not damaged, other)
            raise CheckpointError(said) from None
        why = f"{type(e).__name__}: {e}"
        raise CheckpointError(f"a damaged .npz or .safetensors file ({why})") from None


def load_state(module, state):
    """load_state_dict, its refusal a CheckpointError of one line."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError) as e:   # (torch's message, its lines on one: a CLI error
        lines = str(e).split("\n\t")           # is a line; ValueError: a value that will not cast)
        why = "; ".join(w.strip() for w in lines[1:] or lines)
        raise CheckpointError(f"does not fit the model ({why})") from None


def load_weights(module, path):
    """Load a state dict file (what L.save writes) into `module`."""
    arrays = read_arrays(path)
    if "meta" in arrays:
        raise CheckpointError("a training checkpoint, not a weights file")
    load_state(module, arrays)


def override_hyper(optimizers, resume, **given):
    """After a resume restored the optimizers' hyper-parameters from the checkpoint, the ones
    the command line gave explicitly (name=value, None: not given) replace them in every group,
    as NVIDIA's train.py applies its learning rate to a resumed optimizer; says so, since the
    run then no longer equals an uninterrupted one."""
    for name, value in given.items():
        if value is None:
            continue
        key = "betas" if name == "beta1" else name
        saved = [g[key][0] if name == "beta1" else g[key]
                 for opt in optimizers.values() for g in opt.param_groups]
        if all(v == value for v in saved):
            continue                    # (the printed resume command repeats the run's own)
        for opt in optimizers.values():
            for g in opt.param_groups:
                if name == "beta1":
                    g["betas"] = (value, g["betas"][1])
                else:
                    g[name] = value
        print(f"note: --{name.replace('_', '-')} {value} replaces the value in {resume} (from "
              f"here on the run differs from an uninterrupted one)")


PRECISIONS = ("fp32", "bf16")


def set_precision(modules, precision):
    """The training jobs' --precision: 'fp32' leaves the models as built; 'bf16' casts every
    floating parameter and buffer to bfloat16, except batch norm's (float32, as cuDNN wants),
    computes each Sigmoid module in float32 (nn.Sigmoid: it feeds a loss), and the optimizers
    are to keep float32 master weights. Returns the models' data dtype."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    dtype = np.dtype(np.float32) if precision == "fp32" else L.backend.bfloat16
    for m in modules:
        if precision != "fp32" and any(L.backend.is_gpu(p.data) for p in m.parameters()):
            major = int(L.backend.cupy().__version__.split(".")[0])
            if major < 14:
                raise RuntimeError(f"precision {precision}: bfloat16 device arrays need CuPy 14 "
                                   f"or later, this is CuPy {L.backend.cupy().__version__}")
        m.to_dtype(dtype)
        for s in m.modules():                 # a bf16 model's sigmoid (its loss's input) in float32
            if isinstance(s, L.nn.Sigmoid):
                s.float32 = precision != "fp32"
    return dtype


def save_checkpoint(path, modules, optimizers, meta, rng, arrays):
    """One .npz: each module's state dict under 'name/key', each optimizer's state under
    'name/state/i/key', the job's own `arrays` (e.g. the epoch's sample order) under their
    names, and a JSON 'meta' with `meta` (epoch, position, step), the optimizers' settings and
    the RNG states (the job's `rng`, layers' host generator, the current device's generator). Written to a temporary file and renamed, so an interrupted save keeps the
    previous checkpoint."""
    arrays = dict(arrays)
    for name, m in modules.items():
        for k, v in m.state_dict().items():
            arrays[f"{name}/{k}"] = v
    opt_meta = {}
    for name, opt in optimizers.items():
        sd = opt.state_dict()
        for i, entry in sd["state"].items():
            for k, v in entry.items():
                arrays[f"{name}/state/{i}/{k}"] = np.asarray(v)
        opt_meta[name] = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()}
                          for g in sd["param_groups"]]
    meta = dict(meta, optimizers=opt_meta, host_rng=rng.bit_generator.state,
                layers_rng=L.random.host_generator().bit_generator.state)   # CPU dropout draws
    if L.random._devices:        # a GPU job: the current device's generator is the one it draws
        meta["device_rng"] = L.random.device_generator().get_state().tolist()
    arrays["meta"] = np.array(json.dumps(meta))
    save_arrays(arrays, path)


def checkpoint_meta(path, modules=()):
    """The JSON 'meta' of a checkpoint file (epoch, step, settings). `modules`: the job's model
    names, each of which must have state in the file -- so another job's checkpoint is named as
    such before its settings are compared with the flags (a Tacotron 2 checkpoint given to
    train.dcgan was 'trained with batch size 4')."""
    arrays = read_arrays(path)
    meta = meta_of(arrays)
    missing = [m for m in modules if not any(k.startswith(f"{m}/") for k in arrays)]
    if missing:
        held = sorted({k.split("/")[0] for k in arrays if "/" in k})
        raise CheckpointError(f"it holds no state for {' or '.join(map(repr, missing))} "
                              f"(it holds state for: {', '.join(held) or 'nothing'})")
    return meta


def meta_of(arrays):
    """The JSON 'meta' entry of a checkpoint's arrays."""
    if "meta" not in arrays:
        raise CheckpointError("a weights file, not a checkpoint (it has no 'meta' entry)")
    try:
        return json.loads(str(arrays["meta"]))
    except ValueError as e:
        raise CheckpointError(f"its 'meta' entry is not JSON ({e})") from None


def resume_point(meta, arrays, n, unit="items"):
    """(epoch, position, step, order) of a checkpoint's meta and arrays, for a dataset of n
    `unit`: where an exact resume goes on (item `position` of that epoch's `order`)."""
    try:
        epoch, position, step, order = (meta["epoch"], meta["position"], meta["step"],
                                        arrays["order"])
    except KeyError as e:
        raise CheckpointError(f"it has no {e.args[0]!r} entry") from None
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise CheckpointError(f"its epoch order is over {order.size} {unit} but the dataset has "
                              f"{n}")
    if not 0 <= position < n:
        raise CheckpointError(f"its position {position} is outside the epoch's {n} {unit}")
    return epoch, position, step, order


def load_checkpoint(path, modules, optimizers, rng, device):
    """Restore what save_checkpoint wrote into the modules, optimizers and RNGs (the device
    generator when `device` is a GPU, made current); returns (meta, every array of the file).
    A file that is not such a checkpoint is a CheckpointError."""
    arrays = read_arrays(path)
    if "meta" not in arrays:
        raise CheckpointError("a weights file, not a checkpoint (it has no 'meta' entry)")
    try:
        meta = json.loads(str(arrays["meta"]))
        opt_groups = {name: meta["optimizers"][name] for name in optimizers}
        host_rng = meta["host_rng"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"its 'meta' entry is not a checkpoint's ({type(e).__name__}: "
                              f"{e})") from None
    for name, m in modules.items():
        pre = f"{name}/"
        load_state(m, {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)})
    for name, opt in optimizers.items():
        state = {}
        for k, v in arrays.items():
            if k.startswith(f"{name}/state/"):
                _, _, i, key = k.split("/", 3)
                state.setdefault(int(i), {})[key] = v
        opt.load_state_dict({"state": state, "param_groups": opt_groups[name]})
    rng.bit_generator.state = host_rng
    if "layers_rng" in meta:
        L.random.host_generator().bit_generator.state = meta["layers_rng"]
    if device != "cpu" and "device_rng" in meta:
        L.random.device_generator().set_state(meta["device_rng"])
    return meta, arrays

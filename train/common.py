"""What every training job shares: device set-up, image grids, loss logs and plots, atomic
checkpoints that hold the RNG states too."""
import csv
import json
import os

import numpy as np

import layers as L
from layers.serialization import load as load_arrays
from layers.serialization import save as save_arrays


def set_device(device):
    """'cpu' or a GPU index; makes that GPU current. Returns the parsed device."""
    device = L.parse_device(device)
    if device != "cpu":
        try:
            import cupy
            cupy.cuda.Device(device).use()
        except Exception as e:
            raise SystemExit(f"--device {device}: no usable CUDA device ({type(e).__name__}: "
                             f"{str(e).splitlines()[0]}); use --device cpu") from None
    return device


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


class LossLog:
    """A CSV of per-step values (appended, so resumed runs continue it) and a PNG plot."""

    def __init__(self, path, fields):
        self.path, self.fields = path, list(fields)
        new = not os.path.exists(path)
        self.file = open(path, "a", newline="")
        self.writer = csv.writer(self.file)
        if new:
            self.writer.writerow(self.fields)

    def write(self, row):
        self.writer.writerow([row[k] for k in self.fields])

    def flush(self):
        self.file.flush()

    def plot(self, png, keys, x="step"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
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
        ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        plt.close(fig)


def save_checkpoint(path, modules, optimizers, meta, rng):
    """One .npz: each module's state dict under 'name/key', each optimizer's state under
    'name/state/i/key', and a JSON 'meta' with the epoch, step and RNG states. Written to a
    temporary file and renamed, so an interrupted save keeps the previous checkpoint."""
    arrays = {}
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
    meta = dict(meta, optimizers=opt_meta, host_rng=rng.bit_generator.state)
    if L.random._devices:
        meta["device_rng"] = {str(d): g.get_state().tolist() for d, g in L.random._devices.items()}
    arrays["meta"] = np.array(json.dumps(meta))
    save_arrays(arrays, path)


def load_checkpoint(path, modules, optimizers, rng):
    """Restore what save_checkpoint wrote; returns its meta dict."""
    arrays = load_arrays(path)
    meta = json.loads(str(arrays["meta"]))
    for name, m in modules.items():
        pre = f"{name}/"
        m.load_state_dict({k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)})
    for name, opt in optimizers.items():
        state = {}
        for k, v in arrays.items():
            if k.startswith(f"{name}/state/"):
                _, _, i, key = k.split("/", 3)
                state.setdefault(int(i), {})[key] = v
        opt.load_state_dict({"state": state, "param_groups": meta["optimizers"][name]})
    rng.bit_generator.state = meta["host_rng"]
    for d, st in meta.get("device_rng", {}).items():
        import cupy
        with cupy.cuda.Device(int(d)):
            L.random.device_generator().set_state(st)
    return meta

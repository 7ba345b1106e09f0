"""Image datasets for the GAN jobs, as uint8 arrays (N, H, W, C) resized to the training size.

    mnist   IDX files (gzipped or not) in DATAROOT, DATAROOT/raw or DATAROOT/MNIST/raw
            (torchvision's layout), or Keras' mnist.npz; the train split if present, else t10k
    digits  scikit-learn's bundled 8x8 handwritten digits (1797 images): works offline with no
            --dataroot, so the first run on a fresh machine trains at once
    folder  every .png/.jpg/.jpeg/.bmp under DATAROOT
    fake    uniform noise images (pipeline and speed checks)
"""
import gzip
import os
import struct
import zipfile
import zlib

import numpy as np


class DatasetError(ValueError):
    """A dataset that is missing or malformed; the message says what was expected where."""


def _open(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_idx(path):
    """An IDX file (http://yann.lecun.com/exdb/mnist/ format) as a NumPy array."""
    try:
        with _open(path) as f:
            head = f.read(4)
            if len(head) != 4 or head[:2] != b"\0\0":
                raise DatasetError(f"{path}: not an IDX file (magic {head.hex()!r})")
            code, ndim = head[2], head[3]
            dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
            if code not in dtypes:
                raise DatasetError(f"{path}: unknown IDX element type 0x{code:02x}")
            dims = f.read(4 * ndim)
            if len(dims) != 4 * ndim:
                raise DatasetError(f"{path}: the IDX header ends after {4 + len(dims)} bytes, "
                                   f"expected {4 + 4 * ndim} for {ndim} dimensions")
            shape = struct.unpack(f">{ndim}I", dims)
            data = np.frombuffer(f.read(), dtype=dtypes[code])
    except (OSError, EOFError, zlib.error) as e:     # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{path}: cannot be read ({type(e).__name__}: {e}); expected "
                           f"{'a gzipped' if path.endswith('.gz') else 'an'} IDX file") from None
    if data.size != int(np.prod(shape)):
        raise DatasetError(f"{path}: header says shape {shape} ({int(np.prod(shape))} values) "
                           f"but the file holds {data.size}")
    return data.reshape(shape)


def _find_idx(root, split):
    for folder in (root, os.path.join(root, "raw"), os.path.join(root, "MNIST", "raw")):
        for name in (f"{split}-images-idx3-ubyte", f"{split}-images.idx3-ubyte"):
            for ext in ("", ".gz"):
                path = os.path.join(folder, name + ext)
                if os.path.isfile(path):
                    return path
    return None


def load_mnist(root):
    """MNIST images as uint8 (N, 28, 28). Every error names --dataroot and the file at fault."""
    if not root:
        raise DatasetError("--dataset mnist needs --dataroot (a folder with the IDX files or "
                           "mnist.npz); with no --dataroot use --dataset digits")
    if not os.path.isdir(root):
        raise DatasetError(f"--dataroot {root}: is not a folder; expected a folder with MNIST's "
                           f"IDX files or mnist.npz")
    try:
        return _read_mnist(root)
    except DatasetError as e:
        raise DatasetError(f"--dataroot {root}: {e}") from None


def _read_mnist(root):
    npz = os.path.join(root, "mnist.npz")
    if os.path.isfile(npz):
        try:
            with np.load(npz) as f:
                files = f.files
                images = np.asarray(f["x_train"], np.uint8) if "x_train" in files else None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise DatasetError(f"{npz}: cannot be read ({type(e).__name__}: {e}); expected "
                               f"Keras' mnist.npz") from None
        if images is None:
            raise DatasetError(f"{npz}: expected Keras' arrays x_train/x_test, found {files}")
        return images
    for split in ("train", "t10k"):
        path = _find_idx(root, split)
        if path:
            images = read_idx(path)
            if images.ndim != 3 or images.dtype != np.uint8:
                raise DatasetError(f"{path}: expected uint8 images (N, H, W), got "
                                   f"{images.dtype} {images.shape}")
            return images
    raise DatasetError("no MNIST found: looked for train-/t10k-images-idx3-ubyte[.gz] in it, "
                       "in raw/ and in MNIST/raw/, and for mnist.npz")


def load_digits():
    """scikit-learn's 8x8 digits, scaled from 0..16 to uint8 0..255."""
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError as e:
        raise DatasetError(f"--dataset digits needs scikit-learn ({e}); pip install "
                           f"scikit-learn, or pass --dataset mnist --dataroot DIR") from None
    images = sk_digits().images                      # float64 in [0, 16]
    return np.round(images * (255 / 16)).astype(np.uint8)


def load_folder(root, nc):
    from PIL import Image
    if not root:
        raise DatasetError("--dataset folder needs --dataroot (a folder of images); with no "
                           "--dataroot use --dataset digits")
    if not os.path.isdir(root):
        raise DatasetError(f"--dataroot {root}: is not a folder; --dataset folder expects a "
                           f"folder of images")
    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files
                   if f.lower().endswith((".png", ".jpg", ".jpeg", ".bmp")))
    if not paths:
        raise DatasetError(f"--dataroot {root}: no .png/.jpg/.jpeg/.bmp images under it")
    mode = "L" if nc == 1 else "RGB"
    images = []
    for p in paths:
        try:
            images.append(np.asarray(Image.open(p).convert(mode)))
        except (OSError, Image.DecompressionBombError) as e:   # (UnidentifiedImageError: OSError)
            raise DatasetError(f"--dataroot {root}: {p} is not a readable image "
                               f"({type(e).__name__}: {e})") from None
    return images


def resize(images, size, nc):
    """uint8 (N, H, W[, C]) or a list of such images -> uint8 (N, size, size, nc): the shorter
    side scaled to `size` with bilinear resampling, then a centre crop (torchvision's
    Resize(size) + CenterCrop(size) on PIL images: the longer side int(size * long / short),
    truncated; the crop's offset round((side - size) / 2), Python's rounding)."""
    from PIL import Image
    out = np.empty((len(images), size, size, nc), np.uint8)
    mode = "L" if nc == 1 else "RGB"
    for i, img in enumerate(images):
        im = Image.fromarray(img).convert(mode)
        w, h = im.size
        if (w, h) != (size, size):
            short, long = min(w, h), max(w, h)
            new_long = int(size * long / short)
            im = im.resize((size, new_long) if w <= h else (new_long, size), Image.BILINEAR)
        left = int(round((im.size[0] - size) / 2.0))
        top = int(round((im.size[1] - size) / 2.0))
        a = np.asarray(im.crop((left, top, left + size, top + size)))
        out[i] = a.reshape(size, size, nc)
    return out


def load(dataset, dataroot, image_size, nc, seed=0):
    """uint8 images (N, image_size, image_size, nc) for the named dataset."""
    if dataset == "mnist":
        images = load_mnist(dataroot)
    elif dataset == "digits":
        images = load_digits()
    elif dataset == "folder":
        images = load_folder(dataroot, nc)
    elif dataset == "fake":
        return np.random.default_rng(seed).integers(0, 256, (2048, image_size, image_size, nc),
                                                    dtype=np.uint8)
    else:
        raise DatasetError(f"unknown dataset {dataset!r}")
    if len(images) == 0:
        raise DatasetError(f"{dataset}: no images found")
    return resize(images, image_size, nc)


def to_float(batch_uint8, xp=np):
    """uint8 (N, H, W, C) -> float32 (N, C, H, W) in [-1, 1] (ToTensor + Normalize(0.5, 0.5))."""
    x = batch_uint8.astype(xp.float32).transpose(0, 3, 1, 2)
    return xp.ascontiguousarray(x * (2 / 255) - 1)


class Batches:
    """Shuffled mini-batches, the last one partial (as DataLoader's default). On a GPU the next
    batch is copied from pinned memory on a side stream while the current step runs."""

    def __init__(self, images, batch_size, rng, device):
        self.images, self.batch_size, self.rng, self.device = images, batch_size, rng, device
        self.n = len(images)

    def __len__(self):
        return -(-self.n // self.batch_size)

    def order(self):
        """A new epoch's order of the images: a permutation drawn from the host generator."""
        return self.rng.permutation(self.n)

    def epoch(self, order, start=0):
        """The batches of one epoch in `order` (from order()), from image `start` of it on --
        where a checkpoint taken mid-epoch stopped."""
        chunks = [order[i:i + self.batch_size] for i in range(start, self.n, self.batch_size)]
        if self.device == "cpu":
            for idx in chunks:
                yield to_float(self.images[idx])
            return
        yield from _prefetch(self.images, chunks)


def _prefetch(images, chunks):
    """Double-buffered host->device copies on a side stream, synchronised by events."""
    import cupy as cp
    copy_stream = cp.cuda.Stream(non_blocking=True)
    shape = (len(chunks[0]),) + images.shape[1:]
    pinned = [cp.cuda.alloc_pinned_memory(int(np.prod(shape))) for _ in range(2)]
    host = [np.frombuffer(p, np.uint8, int(np.prod(shape))).reshape(shape) for p in pinned]
    device = [cp.empty(shape, cp.uint8) for _ in range(2)]
    ready = [cp.cuda.Event(), cp.cuda.Event()]

    def issue(k, idx):
        n = len(idx)
        ready[k].synchronize()            # the copy that last read host[k] has finished
        host[k][:n] = images[idx]
        with copy_stream:
            device[k][:n].set(host[k][:n], stream=copy_stream)
            ready[k].record(copy_stream)
        return n

    sizes = [issue(0, chunks[0]), 0]
    for i in range(len(chunks)):
        k = i % 2
        cp.cuda.get_current_stream().wait_event(ready[k])
        batch = to_float(device[k][:sizes[k]], cp)          # a new array: buffer k is free
        if i + 1 < len(chunks):
            copy_stream.wait_event(_record_now())           # buffer k^1 no longer read
            sizes[1 - k] = issue(1 - k, chunks[i + 1])
        yield batch


def _record_now():
    import cupy as cp
    ev = cp.cuda.Event()
    ev.record(cp.cuda.get_current_stream())
    return ev

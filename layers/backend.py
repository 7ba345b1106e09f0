"""Where data lives: NumPy arrays on the CPU, CuPy arrays on a GPU. Devices are 'cpu' or an int."""
import numpy as np

_cupy = None


def cupy():
    """The cupy module, imported on first use (the NumPy path never needs it)."""
    global _cupy
    if _cupy is None:
        import cupy as cp
        _cupy = cp
    return _cupy


_GPU_TYPES = set()


def is_gpu(a):
    """True for device arrays (CuPy's ndarray, or anything with __cuda_array_interface__)."""
    t = type(a)
    if t is np.ndarray:
        return False
    if t in _GPU_TYPES:
        return True
    if hasattr(t, "__cuda_array_interface__"):    # a class attribute check: computes nothing
        _GPU_TYPES.add(t)
        return True
    return False


def accumulation_dtype(dtype):
    """The dtype sums, means, softmaxes and losses of `dtype` data are computed in: float32 for
    half-precision data (as torch accumulates), else the data's own dtype."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == "f" and dtype.itemsize < 4 else dtype


def xp_of(a):
    return cupy() if is_gpu(a) else np


def xp_of_gpu(gpu):
    return cupy() if gpu else np


def device_of(a):
    return a.device.id if is_gpu(a) else "cpu"


def parse_device(device):
    """'cpu' | 'cuda' | 'cuda:1' | 1 | '1' -> 'cpu' or an int."""
    if device is None or device == "cpu":
        return "cpu"
    if isinstance(device, int):
        return device
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:"):
        text = text[5:]
    if text.isdigit():
        return int(text)
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or an int, got {device!r}")


def to_device(a, device):
    """Copy (if needed) array `a` to `device`."""
    device = parse_device(device)
    if device == "cpu":
        return a.get() if is_gpu(a) else a
    cp = cupy()
    if is_gpu(a) and a.device.id == device:
        return a
    with cp.cuda.Device(device):
        return cp.asarray(a)

"""Save / load state dicts: .npz always, .safetensors when that package is installed. Writes are
atomic (a temporary file in the same folder, then rename), so a crash never leaves half a file.
Neither NumPy's .npz nor safetensors' NumPy API has bfloat16 (NumPy would write raw 2-byte
voids): bfloat16 arrays are saved as float32, which holds every bfloat16 value exactly, so
loading them back into a bfloat16 model (load_state_dict casts) gives the same bits."""
import os
import tempfile
from collections import OrderedDict

import numpy as np

from .backend import bfloat16, from_foreign, is_gpu


def _arrays(state_dict):
    out = OrderedDict()
    for k, v in state_dict.items():
        if not (hasattr(v, "shape") and hasattr(v, "dtype")):
            raise TypeError(f"save: {k!r} is a {type(v).__name__}, not an array; save takes a "
                            f"flat {{name: array}} dict such as Module.state_dict() (an "
                            f"optimizer's nested state dict: see train.common.save_checkpoint)")
        v = from_foreign(v)                 # a PyTorch tensor (bfloat16, CUDA, Parameter)
        v = v.numpy() if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v
        v = v.get() if is_gpu(v) else np.asarray(v)
        out[k] = v.astype(np.float32) if v.dtype == bfloat16 else v
    return out


def save(state_dict, path):
    """Write a {name: array} dict to `path` (.safetensors, else .npz)."""
    path = os.fspath(path)
    arrays = _arrays(state_dict)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        if path.endswith(".safetensors"):
            from safetensors.numpy import save_file
            save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, tmp)
        else:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(path):
    """An OrderedDict of NumPy arrays, in the order they were saved."""
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file
        return OrderedDict(load_file(path))
    with np.load(path, allow_pickle=False) as f:
        return OrderedDict((k, f[k]) for k in f.files)

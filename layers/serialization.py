"""Save / load state dicts: .npz always, .safetensors when that package is installed. Writes are
atomic (a temporary file in the same folder, then rename), so a crash never leaves half a file.
Neither NumPy's .npz nor safetensors' NumPy API has bfloat16 (NumPy would write raw 2-byte
voids): bfloat16 arrays are saved as float32, which holds every bfloat16 value exactly, so
loading them back into a bfloat16 model (load_state_dict casts) gives the same bits."""
import json
import os
import secrets
import zipfile
from collections import OrderedDict

import numpy as np

from .backend import bfloat16, from_foreign, is_gpu

ORDER_KEY = "cudnnlite.order"       # a .safetensors file's metadata entry: the names in saved order


def _arrays(state_dict):
    if not hasattr(state_dict, "items"):       # (torch.save(model) saves the object: not here)
        raise TypeError(f"save: takes a {{name: array}} dict such as Module.state_dict(), got a "
                        f"{type(state_dict).__name__}; save model.state_dict() and load it into "
                        f"a model built by code")
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


def _temporary_beside(path, mode):
    """(fd, name) of a new file beside `path`, made with `mode` less the umask, as a plain open()
    makes one (mkstemp's is 0600; reading the umask means setting it, which is not thread-safe)."""
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(100):
        name = os.path.join(folder, f".tmp-{secrets.token_hex(6)}-{os.path.basename(path)}")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def write_atomically(path, write):
    """write(f) into a temporary file beside `path` (binary), then rename it onto `path`: a reader,
    or a run killed half way, never sees half a file, and the data is on disk before the name is
    (fsync). The file gets the mode a plain open() would give it: the replaced file's, else 0666
    less the umask."""
    path = os.fspath(path)
    try:
        kept = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        kept = None
    # made no wider than the file it replaces (a 0600 checkpoint is never readable by others
    # while it is written), that mode set exactly after
    fd, tmp = _temporary_beside(path, 0o666 if kept is None else kept & 0o777)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if kept is not None:
            os.chmod(tmp, kept)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_npz(f, arrays):
    """np.savez's format (a zip of NAME.npy), written entry by entry: any key is a name (np.savez
    takes them as keyword arguments, so 'file' raised and 'allow_pickle' was dropped)."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for k, v in arrays.items():
            with z.open(k + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(v), allow_pickle=False)


TORCH_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".tar")


def save(state_dict, path):
    """Write a {name: array} dict to `path` (.safetensors, else .npz), atomically, or as .npz into
    a binary file object (io.BytesIO, an open file: torch.save takes these too). A name with
    torch.save's suffixes (.pt, .pth, ...) is refused: the .npz written under it would look like
    a torch file that torch.load cannot read."""
    if hasattr(path, "write"):
        _write_npz(path, _arrays(state_dict))
        return
    path = os.fspath(path)
    if path.lower().endswith(TORCH_SUFFIXES):
        raise ValueError(f"save: {path} has a suffix of torch.save's files, but L.save writes "
                         f".npz (or .safetensors): name it .npz or .safetensors")
    arrays = _arrays(state_dict)
    if path.endswith(".safetensors"):
        from safetensors.numpy import save
        # (C order, 0-d arrays kept 0-d: ascontiguousarray makes them (1,)); the saved order
        # goes in the metadata (safetensors writes its own)
        data = save({k: v if v.flags.c_contiguous else np.array(v, order="C")
                     for k, v in arrays.items()},
                    metadata={ORDER_KEY: json.dumps(list(arrays))})
        write_atomically(path, lambda f: f.write(data))
    else:
        write_atomically(path, lambda f: _write_npz(f, arrays))


def load(path):
    """An OrderedDict of NumPy arrays, in the order they were saved: from a file named `path`, or
    an .npz read from a binary file object (save's)."""
    if not hasattr(path, "read"):
        path = os.fspath(path)
    if isinstance(path, str) and path.endswith(".safetensors"):
        from safetensors import safe_open
        from safetensors.numpy import load_file
        arrays = load_file(path)
        with safe_open(path, "np") as f:
            order = (f.metadata() or {}).get(ORDER_KEY)
        names = json.loads(order) if order else []
        if sorted(names) != sorted(arrays):         # (a file written elsewhere: its own order)
            names = list(arrays)
        return OrderedDict((k, arrays[k]) for k in names)
    f = np.load(path, allow_pickle=False)
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise ValueError(f"load: {path} holds one array, not a {{name: array}} .npz archive")
    with f:
        other = [m for m in f.zip.namelist() if not m.endswith(".npy")]
        if other:        # (np.load would hand their raw bytes back as if they were arrays)
            torch = any(m.endswith("data.pkl") for m in other)
            raise ValueError(f"load: {path} is " + (
                "a file torch.save wrote (a pickle in a zip): read it with torch.load and pass "
                "its state dict to load_state_dict (torch tensors are taken)" if torch else
                f"a zip of other files ({other[0]!r}, ...), not an .npz of arrays"))
        return OrderedDict((k, f[k]) for k in f.files)

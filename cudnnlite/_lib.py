"""Find and load libcudnn.so.9: an explicit path, then cuda.pathfinder (cu12 / cu13 wheels, system)."""
import ctypes
import os

ENV_VAR = "CUDNNLITE_LIBCUDNN"


class LibraryNotFound(OSError):
    """libcudnn.so.9 could not be loaded; the message says where we looked and what to install."""


def _load():
    tried = []
    path = os.environ.get(ENV_VAR)
    if path:
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            raise LibraryNotFound(f"{ENV_VAR}={path!r} could not be loaded: {e}") from e
    try:
        from cuda import pathfinder
    except ImportError:
        tried.append("cuda.pathfinder: not installed (pip install cuda-pathfinder)")
    else:
        try:
            loaded = pathfinder.load_nvidia_dynamic_lib("cudnn")
            # pathfinder has dlopen'ed it already; CDLL on the same path returns that handle.
            return ctypes.CDLL(loaded.abs_path), loaded.abs_path
        except Exception as e:  # pathfinder raises its own DynamicLibNotFoundError family
            tried.append(f"cuda.pathfinder.load_nvidia_dynamic_lib('cudnn'): {type(e).__name__}: {e}")
    try:
        return ctypes.CDLL("libcudnn.so.9"), "libcudnn.so.9"
    except OSError as e:
        tried.append(f"dlopen('libcudnn.so.9') on the system library path: {e}")
    raise LibraryNotFound(
        "libcudnn.so.9 (cuDNN 9) was not found. Looked in:\n  - " + "\n  - ".join(tried) +
        f"\nInstall it with `pip install nvidia-cudnn-cu12` (CUDA 12) or `pip install nvidia-cudnn-cu13` "
        f"(CUDA 13), or point {ENV_VAR} at a libcudnn.so.9.")


lib, path = _load()

"""Find and load the NVIDIA libraries cudnnlite binds: an explicit path from an environment
variable, then cuda.pathfinder (the cu12 / cu13 wheels, the system), then the dynamic loader's
search path. libcudnn.so.9 is loaded here; cudnnlite.blas loads libcublasLt the same way."""
import ctypes
import os

ENV_VAR = "CUDNNLITE_LIBCUDNN"


class LibraryNotFound(OSError):
    """A library could not be loaded; the message says where we looked and what to install."""


def load(name, env_var, sonames, install):
    """(ctypes.CDLL, path) of the library pathfinder calls `name` ('cudnn', 'cublasLt'): the file
    in $env_var when set (an error if it does not load), else pathfinder's find, else the first
    of `sonames` the dynamic loader finds. `install` ends the error message."""
    tried = []
    path = os.environ.get(env_var)
    if path:
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            raise LibraryNotFound(f"{env_var}={path!r} could not be loaded: {e}") from e
    try:
        from cuda import pathfinder
    except ImportError:
        tried.append("cuda.pathfinder: not installed (pip install cuda-pathfinder)")
    else:
        try:
            loaded = pathfinder.load_nvidia_dynamic_lib(name)
            # pathfinder has dlopen'ed it already; CDLL on the same path returns that handle.
            return ctypes.CDLL(loaded.abs_path), loaded.abs_path
        except Exception as e:  # pathfinder raises its own DynamicLibNotFoundError family
            tried.append(f"cuda.pathfinder.load_nvidia_dynamic_lib({name!r}): "
                         f"{type(e).__name__}: {e}")
    for soname in sonames:
        try:
            return ctypes.CDLL(soname), soname
        except OSError as e:
            tried.append(f"dlopen({soname!r}) on the system library path: {e}")
    raise LibraryNotFound(f"{sonames[0]} was not found. Looked in:\n  - " + "\n  - ".join(tried)
                          + f"\n{install}, or point {env_var} at the library file.")


lib, path = load("cudnn", ENV_VAR, ["libcudnn.so.9"],
                 "cuDNN needs cuBLASLt too (pathfinder loads it first, so its error may name "
                 "libcublasLt). Install both with `pip install nvidia-cudnn-cu12` (CUDA 12) or "
                 "`pip install nvidia-cudnn-cu13` (CUDA 13) -- in this project's checkout, "
                 "`pip install -e \".[cuda12]\"` or `\".[cuda13]\"`")

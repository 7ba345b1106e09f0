"""Argument helpers the compute modules share: alpha / beta pointers, the device-memory check."""
import ctypes

from .enums import DataType
from .errors import BadParam

_scalars = {}


def scalar(dt, value):
    """A pointer to alpha / beta as cuDNN wants it (double for double data, else float); made
    once per value and kept (the objects must outlive the call)."""
    key = (dt == DataType.DOUBLE, value)
    ref = _scalars.get(key)
    if ref is None:
        ref = _scalars[key] = ctypes.byref(ctypes.c_double(value) if key[0]
                                           else ctypes.c_float(value))
    return ref


def check_device(function, **arrays):
    """Every named array (None allowed) must be device memory: a CuPy array."""
    for name, a in arrays.items():
        if a is not None and not hasattr(getattr(a, "data", None), "ptr"):
            raise BadParam(function, {name: type(a).__name__},
                           f"{name} must be a CuPy array (device memory), got {type(a).__name__}")

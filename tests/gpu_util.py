"""Moving test data to the device in a given data type and layout, and back as float64 NCHW."""
import numpy as np


def storage(dtype):
    """(CuPy storage dtype, cudnnlite dtype override): these binding tests keep bf16 bits in
    uint16 arrays and tell the binding dtype='bfloat16' (the override path); CuPy 14's own
    bfloat16 arrays are tested through layers (test_bfloat16.py)."""
    return ("uint16", "bfloat16") if dtype == "bfloat16" else (dtype, None)


def rounded(a, dtype):
    """a as the device will hold it, back in float64 (the reference sees the rounded inputs)."""
    if dtype == "bfloat16":
        import ml_dtypes
        return np.asarray(a, ml_dtypes.bfloat16).astype(np.float64)
    return np.asarray(a, dtype).astype(np.float64)


def to_device(a, dtype, layout="NCHW", filter=False):
    """float64 NCHW (or KCRS) array -> CuPy array of `dtype` stored in `layout`."""
    import cupy
    if layout == "NHWC":
        a = np.moveaxis(a, 1, -1)
    if dtype == "bfloat16":
        import ml_dtypes
        bits = np.ascontiguousarray(np.asarray(a, ml_dtypes.bfloat16)).view(np.uint16)
        return cupy.asarray(bits)
    return cupy.asarray(np.ascontiguousarray(a.astype(dtype)))


def to_host(a, dtype, layout="NCHW"):
    """CuPy array of `dtype` in `layout` -> float64 NCHW."""
    h = a.get()
    if dtype == "bfloat16":
        import ml_dtypes
        h = h.view(ml_dtypes.bfloat16)
    h = h.astype(np.float64)
    return np.moveaxis(h, -1, 1) if layout == "NHWC" else h


def strided_like(t, where):
    """A layers Tensor on `where` ('cpu', a device, or the host GPU path's 0) viewing a copy of
    torch tensor t's whole storage with t's strides and offset: torch's layouts (transposed,
    channels-last, broadcast, sliced) as they are, on any device."""
    import layers as L
    import torch
    storage = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    flat = L.as_tensor(storage.numpy(), device=where).data
    args = flat[t.storage_offset():], tuple(t.shape), tuple(s * t.element_size()
                                                            for s in t.stride())
    view = np.lib.stride_tricks.as_strided(*args, subok=True) if isinstance(flat, np.ndarray) \
        else L.backend.xp_of(flat).lib.stride_tricks.as_strided(*args)   # (the host's: NumPy's)
    assert view.strides == args[2]
    return L.Tensor(view)

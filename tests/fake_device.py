"""A device array's metadata with no memory behind it, so the boundary's checks run in CI with no
GPU: cudnnlite must refuse a bad call from shape, dtype, strides and pointer alone, before any
pointer is used (a call it lets through then stops at cudnnCreate on a GPU-less machine)."""
from types import SimpleNamespace

import numpy as np


class FakeDeviceArray:
    def __init__(self, shape, dtype="float32", strides=None, ptr=1 << 20, device=0):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.itemsize
        if strides is None:      # C order, in bytes
            strides, inner = [], self.itemsize
            for n in reversed(self.shape):
                strides.insert(0, inner)
                inner *= n
        self.strides = tuple(strides)
        self.data = SimpleNamespace(ptr=ptr)
        self.device = SimpleNamespace(id=device)
        self.flags = SimpleNamespace(c_contiguous=self._c_contiguous())

    def _c_contiguous(self):
        inner = self.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != inner:
                return False
            inner *= n
        return True

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": self.strides, "version": 3}

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        assert self.flags.c_contiguous and int(np.prod(shape)) == self.size
        return FakeDeviceArray(shape, self.dtype, ptr=self.data.ptr, device=self.device.id)

    def __getitem__(self, index):
        """Basic slicing only: a view with the strides and offset NumPy would give."""
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, self.dtype), self.shape, self.strides)
        view = probe[index]
        offset = view.__array_interface__["data"][0] - probe.__array_interface__["data"][0]
        return FakeDeviceArray(view.shape, self.dtype, view.strides, self.data.ptr + offset,
                               self.device.id)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = axes or tuple(reversed(range(self.ndim)))
        return FakeDeviceArray([self.shape[a] for a in axes], self.dtype,
                               [self.strides[a] for a in axes], self.data.ptr, self.device.id)

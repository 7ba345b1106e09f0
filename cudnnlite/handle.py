"""One cudnnHandle_t per CUDA device, created lazily and bound to CuPy's current stream, plus a
per-handle workspace buffer that only grows (so steady-state steps allocate nothing)."""
import weakref
from ctypes import byref, c_void_p

from . import api
from .errors import NotInitialized

_handles = {}


class Handle:
    def __init__(self, device_id):
        cupy = _cupy("cudnnCreate")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise NotInitialized("cudnnCreate", {"device": device_id},
                                 f"no CUDA device is visible ({e})") from None
        if not 0 <= device_id < count:
            raise NotInitialized("cudnnCreate", {"device": device_id},
                                 f"device {device_id} does not exist ({count} visible)")
        self.device_id = device_id
        handle = c_void_p()
        with cupy.cuda.Device(device_id):
            api.cudnnCreate(byref(handle))
        self._as_parameter_ = handle
        self._finalizer = weakref.finalize(self, api.cudnnDestroy, handle)
        self.stream = None
        self._workspace = None

    def bind(self, stream_ptr):
        if stream_ptr != self.stream:
            api.cudnnSetStream(self, stream_ptr)
            self.stream = stream_ptr

    def workspace(self, nbytes):
        """Device pointer to at least `nbytes` of scratch memory owned by this handle (0 if none)."""
        if nbytes == 0:
            return 0
        if self._workspace is None or self._workspace.nbytes < nbytes:
            cupy = _cupy("workspace")
            self._workspace = None          # release the old buffer to the pool first
            self._workspace = cupy.empty(nbytes, dtype=cupy.uint8)
        return self._workspace.data.ptr

    def __repr__(self):
        return f"Handle(device={self.device_id}, stream={self.stream:#x})" if self.stream \
            else f"Handle(device={self.device_id})"


def _cupy(function):
    try:
        import cupy
    except ImportError as e:
        raise NotInitialized(function, {},
                             f"CuPy is not installed ({e}); pip install cupy-cuda12x or "
                             "cupy-cuda13x") from None
    return cupy


def get_handle():
    """The handle of the current CuPy device, bound to CuPy's current stream."""
    cupy = _cupy("cudnnCreate")
    try:
        device_id = cupy.cuda.runtime.getDevice()
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise NotInitialized("cudnnCreate", {}, f"no CUDA device is visible ({e})") from None
    handle = _handles.get(device_id)
    if handle is None:
        handle = _handles[device_id] = Handle(device_id)
    handle.bind(cupy.cuda.get_current_stream().ptr)
    return handle

"""One cudnnHandle_t per CUDA device, created lazily and bound to CuPy's current stream, plus a
per-handle workspace buffer that only grows (so steady-state steps allocate nothing), and the
capture scope: the device memory cudnnlite owns (workspaces, RNN length arrays) that a CUDA graph
captured inside the scope touches is kept alive by that graph, not freed under it."""
import contextlib
import threading
import weakref
from ctypes import byref, c_void_p

from . import api
from .errors import BadParam, NotInitialized

_handles = {}
_local = threading.local()      # .scopes: the open capture scopes of this thread, innermost last


@contextlib.contextmanager
def capture_scope():
    """`with capture_scope() as kept:` -- every cudnnlite-owned device buffer handed to a cuDNN
    call inside the block is appended to `kept`; the graph captured in the block holds `kept`
    for as long as it lives (layers.graph.CapturedStep does)."""
    scopes = _local.__dict__.setdefault("scopes", [])
    kept = []
    scopes.append(kept)
    try:
        yield kept
    finally:
        scopes.remove(kept)


def keep_alive(buffer):
    """Hand `buffer` to the innermost open capture scope (no-op outside one)."""
    scopes = getattr(_local, "scopes", None)
    if scopes and not any(b is buffer for b in scopes[-1]):
        scopes[-1].append(buffer)


class Workspace:
    """Scratch device memory that only grows, so steady-state calls allocate nothing. Growing
    drops this object's reference to the old buffer; a graph captured while it was in use still
    holds it (capture_scope). Growing during a capture is refused: the new buffer would come
    from the graph's own pool, so size the workspace with an eager run first."""

    def __init__(self):
        self.buffer = None

    @property
    def nbytes(self):
        return 0 if self.buffer is None else self.buffer.nbytes

    def pointer(self, nbytes, function, owner):
        """A device pointer to at least `nbytes` bytes (0 for none), kept by any open capture."""
        if nbytes == 0:
            return 0
        ws = self.buffer
        if ws is None or ws.nbytes < nbytes:
            cupy = _cupy(function)
            if cupy.cuda.get_current_stream().is_capturing():
                held = 0 if ws is None else ws.nbytes
                raise BadParam(function, {"handle": owner, "workspace": held, "needed": nbytes},
                               f"the handle's workspace would grow from {held} to {nbytes} bytes "
                               f"during CUDA-graph capture; run the captured work once eagerly "
                               f"first so the workspace is sized before capture")
            ws = self.buffer = None                     # release the old buffer first
            ws = self.buffer = cupy.empty(nbytes, dtype=cupy.uint8)
        keep_alive(ws)
        return ws.data.ptr


def why_no_device(error):
    """Why the CUDA runtime sees no device, from its error: with no NVIDIA driver at all it says
    'insufficient driver version', which would send a user to upgrade a driver they lack."""
    import ctypes.util
    if ctypes.util.find_library("cuda") is None:
        return "no NVIDIA driver: libcuda not found"
    return f"{type(error).__name__}: {str(error).splitlines()[0]}"


class Handle:
    def __init__(self, device_id):
        cupy = _cupy("cudnnCreate")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise NotInitialized("cudnnCreate", {"device": device_id},
                                 f"no CUDA device is visible ({why_no_device(e)})") from None
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
        self._workspace = Workspace()

    def bind(self, stream_ptr):
        if stream_ptr != self.stream:
            api.cudnnSetStream(self, stream_ptr)
            self.stream = stream_ptr

    def workspace(self, nbytes):
        """Device pointer to at least `nbytes` of scratch memory owned by this handle (0 if none);
        see Workspace."""
        return self._workspace.pointer(nbytes, "cudnnSetStream", self)

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
        raise NotInitialized("cudnnCreate", {},
                             f"no CUDA device is visible ({why_no_device(e)})") from None
    handle = _handles.get(device_id)
    if handle is None:
        handle = _handles[device_id] = Handle(device_id)
    handle.bind(cupy.cuda.get_current_stream().ptr)
    return handle

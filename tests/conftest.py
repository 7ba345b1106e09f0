"""The `gpu` marker: such tests skip, with one line saying why, when no CUDA device is visible.
The `on_host` fixture: the layers' GPU path run on the host (tests/host_kernels.py); `where`:
a test's `device` parameter, "host" meaning that path with cuDNN's calls answered there too."""
import pytest


def _gpu_reason():
    try:
        import cupy
    except ImportError as e:
        return f"CuPy not importable ({e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError when there is no driver
        from cudnnlite.handle import why_no_device
        return f"no CUDA device ({why_no_device(e)})"
    return None if n > 0 else "no CUDA device (0 visible)"


_REASON = _gpu_reason()


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    skip = pytest.mark.skip(reason=_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_device(monkeypatch):
    """cudnnlite's handle refused as on a machine with no GPU (NotInitialized from cudnnCreate),
    so a test that checks a call up to the handle with stand-in device arrays (fake pointers)
    runs the same on a GPU machine -- where a real handle would pass those pointers to cuDNN."""
    import cudnnlite as cl
    from cudnnlite import boundary

    def refuse():
        raise cl.NotInitialized("cudnnCreate", {}, "no CUDA device (the test's stand-in)")
    monkeypatch.setattr(boundary, "get_handle", refuse)


@pytest.fixture
def on_host(monkeypatch):
    """The layers' GPU path with tests/host_kernels.HOST as the cupy module: CuPy's kernels
    compiled for the host, the other CuPy routines NumPy's."""
    import host_kernels
    yield from host_kernels.install(monkeypatch)


def gpu_path_on_host(request, monkeypatch):
    """The layers' GPU path run on the CPU as device 0 (tests/host_kernels.py: CuPy's kernels
    compiled for the host, CuPy's transfers, cuDNN's calls answered on the host); skips where
    there is no host C++ compiler. Returns 0, the device to use."""
    import host_kernels
    if host_kernels.CXX is None:
        pytest.skip("no host C++ compiler")
    request.getfixturevalue("on_host")
    host_kernels.install_cudnn(monkeypatch)
    return 0


@pytest.fixture
def where(device, request, monkeypatch):
    """The device a test parametrized by `device` runs on; "host" is the GPU path run on the
    CPU (gpu_path_on_host), as device 0. On a GPU, float32 convolutions and recurrences compute
    in float32 (TF32 off, as torch's own parity tests run them): these tests compare with torch
    at float32's rounding, and whether cuDNN picks a TF32 kernel varies with the shape."""
    if device == "host":
        yield gpu_path_on_host(request, monkeypatch)
        return
    from cudnnlite import conv
    with conv.using(allow_tf32=False):
        yield device

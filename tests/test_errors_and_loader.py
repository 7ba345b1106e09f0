"""Status -> exception mapping, the loader, and the no-GPU handle error."""
import os
import subprocess
import sys

import pytest

import cudnnlite as cl
from cudnnlite.errors import error_class


def test_every_status_has_its_class_under_its_category():
    for status in cl.Status:
        if status == cl.Status.SUCCESS:
            continue
        cls = error_class(status)
        assert issubclass(cls, cl.CudnnError)
        assert cls.__doc__ == f"CUDNN_STATUS_{status.name}"
        category = {2000: cl.BadParam, 3000: cl.NotSupported, 4000: cl.InternalError,
                    5000: cl.ExecutionFailed}.get(status // 1000 * 1000)
        if category is not None:
            assert issubclass(cls, category)


def test_error_message_carries_status_function_and_arguments():
    err = cl.BadParamShapeMismatch("cudnnFoo", {"x": cl.TensorDescriptor((1, 2, 3, 4))},
                                   "detail text")
    assert str(err).splitlines()[0] == \
        "cudnnFoo failed: CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH (2008): detail text"
    assert "x = TensorDescriptor(FLOAT, dims=(1, 2, 3, 4), strides=(24, 12, 4, 1))" in str(err)
    assert err.status is cl.Status.BAD_PARAM_SHAPE_MISMATCH


def test_unknown_status_maps_to_category():
    assert error_class(2999) is cl.BadParam
    assert error_class(9999) is cl.CudnnError


def test_version_is_cudnn_9():
    major, minor, patch = cl.version()
    assert major == 9 and minor >= 0 and patch >= 0
    assert "libcudnn" in cl.library_path


def test_override_env_var_bad_path_is_a_clear_error():
    env = dict(os.environ, CUDNNLITE_LIBCUDNN="/nonexistent/libcudnn.so.9")
    r = subprocess.run([sys.executable, "-c", "import cudnnlite"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and "/nonexistent/libcudnn.so.9" in r.stderr


def test_override_env_var_good_path():
    env = dict(os.environ, CUDNNLITE_LIBCUDNN=cl.library_path)
    r = subprocess.run([sys.executable, "-c", "import cudnnlite; print(cudnnlite.library_path)"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == cl.library_path


def _has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(_has_gpu(), reason="checks the error raised when no GPU is present")
def test_handle_without_gpu_is_a_clear_error():
    with pytest.raises(cl.NotInitialized, match="cudnnCreate.*no CUDA device"):
        cl.get_handle()


def test_plan_descriptors_need_no_gpu():
    p = cl.conv.plan((8, 3, 64, 64), (12288, 4096, 64, 1), (16, 3, 4, 4), "float32",
                     pad=1, stride=2)
    assert p.y_dims == (8, 16, 32, 32)
    p = cl.conv.plan((8, 64, 64, 3), (12288, 192, 3, 1), (16, 4, 4, 3), "float16", "NHWC",
                     pad=1, stride=2)
    assert p.y_dims == (8, 16, 32, 32) and p.y.strides == (16384, 1, 512, 16)


@pytest.mark.parametrize("call", [
    lambda np_: cl.conv.forward(np_, np_),
    lambda np_: cl.batchnorm.forward_training(np_, np_[0, :, 0, 0], np_[0, :, 0, 0]),
    lambda np_: cl.activation.forward(np_, cl.ActivationMode.RELU),
])
def test_host_arrays_are_refused_before_any_cuda_call(call):
    """The boundary's device-memory check (cudnnlite.boundary) names the C function it guards."""
    pytest.importorskip("cupy")
    import numpy as np
    with pytest.raises(cl.BadParam, match=r"\(cudnn\w+\)|cudnn\w+ failed.*must be a CuPy array"):
        call(np.zeros((2, 3, 4, 4), np.float32))


def test_alpha_beta_pointers_hold_their_value_and_type():
    import ctypes
    from cudnnlite.boundary import scalar
    f, d = scalar(cl.DataType.FLOAT, 0.5), scalar(cl.DataType.DOUBLE, 0.5)
    assert ctypes.cast(f, ctypes.POINTER(ctypes.c_float)).contents.value == 0.5
    assert ctypes.cast(d, ctypes.POINTER(ctypes.c_double)).contents.value == 0.5
    assert scalar(cl.DataType.HALF, 0.5) is f          # half / bf16 data take float scalars

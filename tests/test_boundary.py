"""cudnnlite's boundary, with no GPU: every bad call is refused from the arrays' metadata alone,
with a BadParam subclass naming the C function, the argument and the values; a good call passes
the checks and stops only at cudnnCreate. Also the stride rule, the bounded caches and the
capture scope."""
import threading

import numpy as np
import pytest

import cudnnlite as cl
import layers as L
from cudnnlite import activation, batchnorm, boundary, conv
from cudnnlite import rnn as crnn
from cudnnlite._cache import LRU
from fake_device import FakeDeviceArray as Dev


def _has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


x, W = Dev((2, 3, 8, 8)), Dev((4, 3, 3, 3))
h16 = Dev((4, 5, 6, 6), "float16")

REFUSED = {  # name: (call, error class, message pattern)
    "conv W dtype": (lambda: conv.forward(x, Dev((4, 3, 3, 3), "float64")), cl.BadParam,
                     r"cudnnConvolutionForward failed.*x and W must have one dtype, got float32 "
                     r"and float64"),
    "conv out too small": (lambda: conv.forward(x, W, pad=1, out=Dev((2, 4, 8, 7))),
                           cl.BadParamShapeMismatch,
                           r"out has shape \(2, 4, 8, 7\), the result is \(2, 4, 8, 8\)"),
    "conv out dtype": (lambda: conv.forward(x, W, out=Dev((2, 4, 6, 6), "float16")), cl.BadParam,
                       r"x and out must have one dtype, got float32 and float16"),
    "conv out strided": (lambda: conv.forward(x, W, out=Dev((2, 4, 6, 12))[..., ::2]),
                         cl.BadParam, r"out must be C-contiguous"),
    "conv out misaligned": (lambda: conv.forward(x, W, out=Dev((2, 4, 6, 6), ptr=(1 << 20) + 4)),
                            cl.BadParam, r"out must be C-contiguous and 16-byte aligned"),
    "conv bf16 over float32": (lambda: conv.forward(x, W, dtype="bfloat16"), cl.BadParam,
                               r"dtype='bfloat16' takes 2-byte elements but x holds float32"),
    "conv float16 read as bf16": (lambda: conv.forward(h16, Dev((4, 5, 3, 3), "float16"),
                                                       dtype="bfloat16"), cl.BadParam,
                                  r"dtype='bfloat16' would read x's float16 values as BFLOAT16 "
                                  r"bits"),
    "conv uint16 unnamed": (lambda: conv.forward(Dev((2, 3, 8, 8), "uint16"),
                                                 Dev((4, 3, 3, 3), "uint16")),
                            cl.NotSupportedDataType, r"no cuDNN data type for uint16"),
    "conv beta without out": (lambda: conv.forward(x, W, beta=1.0), cl.BadParam,
                              r"beta != 0 blends into `out`"),
    "conv host array": (lambda: conv.forward(np.zeros((2, 3, 8, 8), np.float32), W), cl.BadParam,
                        r"x must be a CuPy array \(device memory\), got ndarray"),
    "dgrad gy shape": (lambda: conv.backward_data(W, Dev((2, 4, 5, 5)), (2, 3, 8, 8)),
                       cl.BadParamShapeMismatch,
                       r"cudnnConvolutionBackwardData.*gy has shape \(2, 4, 5, 5\), the "
                       r"convolution's output is \(2, 4, 6, 6\)"),
    "conv float stride": (lambda: conv.forward(x, W, stride=1.0), cl.BadParam,
                          r"cudnnConvolutionForward failed.*stride must be an integer or a "
                          r"sequence of integers, got 1\.0"),
    "conv fractional pad": (lambda: conv.forward(x, W, pad=(1.5, 1.5)), cl.BadParam,
                            r"pad must be an integer or a sequence of integers, got \(1\.5"),
    "dgrad float groups": (lambda: conv.backward_data(W, Dev((2, 4, 6, 6)), (2, 3, 8, 8),
                                                      groups=1.0), cl.BadParam,
                           r"cudnnConvolutionBackwardData.*groups must be an integer"),
    "transpose float groups": (lambda: conv.conv_transpose(Dev((2, 4, 5, 5)), Dev((4, 3, 4, 4)),
                                                           groups=2.0),
                               cl.BadParam, r"cudnnConvolutionBackwardData.*groups must be an "
                                            r"integer"),
    "transpose fractional padding": (lambda: conv.conv_transpose(Dev((2, 4, 5, 5)),
                                                                 Dev((4, 3, 4, 4)),
                                                                 padding=(0.5, 0.5)),
                                     cl.BadParam, r"cudnnConvolutionBackwardData.*expected an "
                                                  r"integer or a sequence of integers"),
    "wgrad out shape": (lambda: conv.backward_filter(x, Dev((2, 4, 6, 6)), (4, 3, 3, 3),
                                                     out=Dev((4, 3, 3, 2))),
                        cl.BadParamShapeMismatch, r"out has shape \(4, 3, 3, 2\), the result is "
                                                  r"\(4, 3, 3, 3\)"),
    "bn half gamma": (lambda: batchnorm.forward_training(h16, Dev((5,), "float16"),
                                                         Dev((5,), "float32")),
                      cl.BadParam, r"cudnnBatchNormalizationForwardTraining.*gamma must be "
                                   r"float32 for HALF data"),
    "bn float64 stats": (lambda: batchnorm.forward_training(
        Dev((4, 5, 6, 6)), Dev((5,)), Dev((5,)), Dev((5,)), Dev((5,), "float64")), cl.BadParam,
        r"running_var must be float32 for FLOAT data.*got float64"),
    "bn param size": (lambda: batchnorm.forward_inference(Dev((4, 5, 6, 6)), Dev((4,)), Dev((5,)),
                                                          Dev((5,)), Dev((5,))),
                      cl.BadParamShapeMismatch, r"gamma must be a contiguous array of 5 elements"),
    "bn 2-d": (lambda: batchnorm.forward_training(Dev((4, 5)), Dev((5,)), Dev((5,))), cl.BadParam,
               r"at least 3-d"),
    "bn gy dtype": (lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6), "float64"),
                                               Dev((5,)), Dev((5,)), Dev((5,))),
                    cl.BadParam, r"x and gy must have one dtype"),
    "bn gy shape": (lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 7)), Dev((5,)),
                                               Dev((5,)), Dev((5,))),
                    cl.BadParamShapeMismatch, r"gy has shape \(4, 5, 6, 7\), x has \(4, 5, 6, 6\)"),
    "bn add_to dtype": (lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6)),
                                                   Dev((5,)), Dev((5,)), Dev((5,)),
                                                   add_to=(Dev((5,), "float64"), Dev((5,)))),
                        cl.BadParam, r"cudnnBatchNormalizationBackward failed.*add_to\[0\] "
                                     r"\(ggamma\) has dtype float64, the result is float32"),
    "bn add_to not a pair": (lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6)),
                                                        Dev((5,)), Dev((5,)), Dev((5,)),
                                                        add_to=Dev((5,))),
                             cl.BadParam, r"add_to must be a pair \(ggamma, gbeta\)"),
    "bn add_to None": (lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6)),
                                                  Dev((5,)), Dev((5,)), Dev((5,)),
                                                  add_to=(Dev((5,)), None)),
                       cl.BadParam, r"add_to\[1\] \(gbeta\) must be an array to add into"),
    "bn add_to overlapping": (lambda: batchnorm.backward(
        Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6)), Dev((5,)), Dev((5,)), Dev((5,)),
        add_to=(Dev((5,), ptr=1 << 21), Dev((5,), ptr=(1 << 21) + 16))),
        cl.BadParam, r"add_to's two arrays overlap"),
    "bn ex add_to strided": (lambda: batchnorm.backward_ex(
        Dev((4, 6, 6, 5)), Dev((4, 6, 6, 5)), Dev((5,)), Dev((5,)), Dev((5,)), Dev((5,)),
        Dev((48,), "uint8"), add_to=(Dev((5,)), Dev((10,))[::2])),
        cl.BadParam, r"cudnnBatchNormalizationBackwardEx failed.*add_to\[1\] \(gbeta\) must be "
                     r"C-contiguous"),
    "conv out over W": (lambda: conv.forward(x, Dev((4, 3, 3, 3), ptr=(1 << 24) + 256), pad=1,
                                             out=Dev((2, 4, 8, 8), ptr=1 << 24)),
                        cl.BadParam, r"cudnnConvolutionForward failed.*out shares memory with W"),
    "dgrad out over gy": (lambda: conv.backward_data(W, Dev((2, 4, 6, 6), ptr=1 << 24),
                                                     (2, 3, 8, 8), out=Dev((2, 3, 8, 8),
                                                                           ptr=(1 << 24) - 64)),
                          cl.BadParam, r"cudnnConvolutionBackwardData.*out shares memory with gy"),
    "bias grad out inside gy": (lambda: conv.backward_bias(Dev((2, 4, 6, 6), ptr=1 << 24),
                                                           out=Dev((4,), ptr=(1 << 24) + 32)),
                                cl.BadParam, r"out shares memory with gy"),
    "act out a shifted x": (lambda: activation.forward(Dev((3, 4)), cl.ActivationMode.RELU,
                                                       out=Dev((3, 4), ptr=(1 << 20) + 16)),
                            cl.BadParam, r"cudnnActivationForward.*out shares memory with x"),
    "act gy shape": (lambda: activation.backward(Dev((3, 4)), Dev((4, 3)), Dev((3, 4)),
                                                 cl.ActivationMode.RELU),
                     cl.BadParamShapeMismatch, r"cudnnActivationBackward.*gy has shape \(4, 3\)"),
    "act out dtype": (lambda: activation.forward(Dev((3, 4)), cl.ActivationMode.TANH,
                                                 out=Dev((3, 4), "float64")),
                      cl.BadParam, r"x and out must have one dtype"),
    "add in place strided": (lambda: activation.add_tensor(Dev((1, 4, 1, 1)),
                                                           Dev((2, 4, 6, 12))[..., ::2]),
                             cl.BadParam, r"cudnnAddTensor.*c is written in place"),
    "add not broadcastable": (lambda: activation.add_tensor(Dev((1, 3, 1, 1)), Dev((2, 4, 6, 6))),
                              cl.BadParamShapeMismatch, r"a \(1, 3, 1, 1\) must have c's dims"),
    "scale in place transposed": (lambda: activation.scale_tensor(Dev((4, 6)).transpose(), 2.0),
                                  cl.BadParam, r"cudnnScaleTensor.*y is written in place"),
    "rnn x dtype": (lambda: crnn.forward(crnn.RNNDescriptor(cl.RNNMode.LSTM, 3, 4),
                                         Dev((5, 2, 3), "float64"), Dev((10,), "float64")),
                    cl.BadParam, r"cudnnRNNForward.*x has dtype float64, the RNN descriptor FLOAT"),
    "rnn hx dtype": (lambda: crnn.forward(crnn.RNNDescriptor(cl.RNNMode.LSTM, 3, 4),
                                          Dev((5, 2, 3)), Dev((10,)), Dev((1, 2, 4), "float16")),
                     cl.BadParam, r"x and hx must have one dtype"),
    "rnn x features": (lambda: crnn.forward(crnn.RNNDescriptor(cl.RNNMode.LSTM, 3, 4),
                                            Dev((5, 2, 2)), Dev((10,))),
                       cl.BadParamShapeMismatch, r"x must be \(T, B, 3\).*got \(5, 2, 2\)"),
    "rnn float lengths": (lambda: crnn._problem(crnn.RNNDescriptor(cl.RNNMode.LSTM, 3, 4),
                                                Dev((5, 2, 3)), [2.9, 1.5], False),
                          cl.BadParam, r"cudnnSetRNNDataDescriptor.*lengths must be integers"),
    "tensor stride past a C int": (lambda: cl.TensorDescriptor((2, 3, 8, 8),
                                                               strides=(2 ** 32 + 192, 64, 8, 1)),
                                   cl.BadParam, r"cudnnSetTensorNdDescriptor.*strides \(4294967488"),
    "rnn backward without forward": (lambda: crnn.backward(None, Dev((5, 2, 4))), cl.BadParam,
                                     r"cudnnRNNBackwardData_v8.*training-mode forward"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_calls_are_refused_at_the_boundary(name):
    call, error, pattern = REFUSED[name]
    with pytest.raises(error, match=pattern) as e:
        call()
    assert e.value.function.startswith("cudnn")


@pytest.mark.skipif(_has_gpu(), reason="checks where a good call stops with no GPU")
@pytest.mark.parametrize("call", [
    lambda: conv.forward(Dev((4, 6, 12, 12))[::2, 1:4, :, 4:12], W, pad=1),
    lambda: conv.forward(x, W, pad=1, out=Dev((2, 4, 8, 8), ptr=1 << 24), beta=1.0),
    lambda: activation.forward(Dev((3, 4)), cl.ActivationMode.RELU, out=Dev((3, 4))),  # in place
    lambda: conv.backward_data(W, Dev((2, 4, 6, 6)), (2, 3, 8, 8)),
    lambda: conv.backward_filter(x, Dev((2, 4, 6, 6)), (4, 3, 3, 3)),
    lambda: conv.backward_bias(Dev((2, 6, 6, 4)), layout="NHWC"),
    lambda: conv.backward_bias(Dev((2, 4, 6, 12))[..., 4:8]),
    lambda: conv.forward(Dev((2, 8, 8, 3), "float16"), Dev((4, 3, 3, 3), "float16"), layout="NHWC"),
    lambda: conv.forward(Dev((2, 3, 8, 8), "uint16"), Dev((4, 3, 3, 3), "uint16"),
                         dtype="bfloat16"),
    # CuPy 14's bfloat16 arrays (ml_dtypes' dtype) need no dtype= (train.* --precision bf16)
    lambda: conv.forward(Dev((2, 3, 8, 8), L.backend.bfloat16),
                         Dev((4, 3, 3, 3), L.backend.bfloat16)),
    lambda: conv.conv_transpose(Dev((2, 4, 5, 5), L.backend.bfloat16),
                                Dev((4, 3, 4, 4), L.backend.bfloat16), stride=2, padding=1),
    lambda: batchnorm.forward_training(Dev((4, 5, 6, 6), L.backend.bfloat16), Dev((5,)),
                                       Dev((5,)), Dev((5,)), Dev((5,))),
    lambda: conv.conv_transpose(Dev((2, 4, 5, 5)), Dev((4, 3, 4, 4)), stride=2, padding=1),
    lambda: conv.conv_transpose(Dev((2, 4, 5, 5)), Dev((4, 3, 3, 3)), stride=1, padding=1,
                                output_padding=1, dilation=2),           # the cropped path
    lambda: batchnorm.forward_inference(Dev((4, 5, 6)), Dev((5,)), Dev((5,)), Dev((5,)),
                                        Dev((5,))),
    lambda: batchnorm.backward(Dev((4, 5, 6, 6)), Dev((4, 5, 6, 6)), Dev((5,)), Dev((5,)),
                               Dev((5,))),
    lambda: activation.backward(Dev((3, 4)), Dev((3, 4)), Dev((3, 4)), cl.ActivationMode.TANH),
    lambda: activation.scale_tensor(Dev((3, 4)), 2.0),
    lambda: batchnorm.forward_training(h16, Dev((5,)), Dev((5,)), Dev((5,)), Dev((5,))),
    lambda: activation.forward(Dev((3, 4)), cl.ActivationMode.RELU),
    lambda: activation.add_tensor(Dev((1, 4, 1, 1)), Dev((2, 4, 6, 6))),
])
def test_good_calls_pass_the_checks_and_reach_cudnn_create(call, no_device):
    with pytest.raises(cl.NotInitialized, match="cudnnCreate"):
        call()


# ---- the stride rule ------------------------------------------------------------------------

big = Dev((4, 6, 12, 12))


@pytest.mark.parametrize("view,ok", [
    (big, True),
    (big[::2, 1:4, :, 4:12], True),          # slices keep the axis order: strides go in as they are
    (big[:, :, 3], True),
    (big[:, :, :, ::3], True),
    (big.transpose(0, 1, 3, 2), False),       # transposed
    (big[:, :, ::-1], False),                 # reversed (negative stride)
    (Dev((2, 3), strides=(0, 4)), False),     # broadcast (zero stride)
    (Dev((5, 8))[:, 1:], False),              # first element 4 bytes off a 16-byte boundary
    (big[::2, 1:4, :, 1:11], False),
    (Dev((4, 5), strides=(8, 4)), False),     # overlapping rows
    (Dev((2, 3), strides=(2 ** 33, 4)), False),   # a stride past a C int (2**31 elements)
])
def test_which_views_a_descriptor_can_state(view, ok):
    assert boundary.describable(view) is ok
    if ok:   # passed through as it is: the same array in forward and backward
        assert boundary.strided("cudnnConvolutionForward", "x", view) is view


def test_packed_arrays_pass_through_unchanged():
    a = Dev((3, 4))
    assert boundary.packed("f", "a", a) is a


def test_size_one_axes_get_packed_strides():
    a = Dev((2, 1, 3), strides=(12, 999, 4))
    assert cl.descriptors.element_strides(a) == (3, 3, 1)
    d = cl.TensorDescriptor.from_array(Dev((2, 3, 1, 5), strides=(60, 20, 0, 4)))
    assert d.setup()[2] == (15, 5, 5, 1)


# ---- bounded caches -------------------------------------------------------------------------

def test_a_dtype_maps_to_one_cudnn_type_however_it_is_spelled_and_however_often():
    """data_type memoises by the dtype object, type or name it is given: each spelling of a
    dtype gives the same DataType on every call, and an unsupported one is refused every time
    (also after supported ones were seen)."""
    from cudnnlite.descriptors import data_type
    bf16 = L.backend.bfloat16
    want = {"float32": cl.DataType.FLOAT, "float64": cl.DataType.DOUBLE,
            "float16": cl.DataType.HALF, "int8": cl.DataType.INT8, "uint8": cl.DataType.UINT8,
            "int32": cl.DataType.INT32, "int64": cl.DataType.INT64, "bool": cl.DataType.BOOLEAN}
    for _ in range(2):
        for name, dt in want.items():
            assert data_type(name) is dt and data_type(np.dtype(name)) is dt
            assert data_type(np.dtype(name).type) is dt
        assert data_type(bf16) is data_type("bfloat16") is cl.DataType.BFLOAT16
        for bad in ("uint16", np.dtype(np.uint16), np.complex64):
            with pytest.raises(cl.NotSupportedDataType, match="no cuDNN data type for"):
                data_type(bad)


def test_the_device_check_refuses_host_arrays_after_accepting_device_ones():
    """device_array remembers the array types it accepted; a NumPy array (or a type with no
    data.ptr) is still refused, on every call."""
    for _ in range(2):
        boundary.device_array("cudnnFoo", "x", Dev((2, 3)))
        for bad in (np.zeros(3, np.float32), [1.0], None):
            with pytest.raises(cl.BadParam, match="x must be a CuPy array"):
                boundary.device_array("cudnnFoo", "x", bad)


def test_lru_keeps_the_most_recent():
    c = LRU(2)
    assert c.get("a", lambda: 1) == 1 and c.get("b", lambda: 2) == 2
    assert c.get("a", lambda: -1) == 1                 # hit: "a" is now the most recent
    c.get("c", lambda: 3)                               # evicts "b"
    assert "b" not in c and "a" in c and len(c) == 2


def test_conv_plan_cache_is_bounded_and_keyed_on_dtype(monkeypatch):
    monkeypatch.setattr(conv._plans, "size", 4)
    conv.clear_cache()
    for L_ in range(10, 20):        # variable lengths: Tacotron's batches
        conv.plan((2, 8, 1, L_), (8 * L_, L_, L_, 1), (8, 8, 1, 5), "float32", pad=(0, 2))
    assert len(conv._plans) == 4
    a = conv.plan((2, 8, 1, 19), (152, 19, 19, 1), (8, 8, 1, 5), "float32", pad=(0, 2))
    b = conv.plan((2, 8, 1, 19), (152, 19, 19, 1), (8, 8, 1, 5), "float64", pad=(0, 2))
    assert a is not b and a.x.setup()[0] == cl.DataType.FLOAT and b.x.setup()[0] == cl.DataType.DOUBLE
    conv.clear_cache()


def test_tensor_descriptor_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(cl.descriptors._tensor_cache, "size", 3)
    for n in range(1, 9):
        cl.TensorDescriptor.cached(Dev((n, 2, 3, 4)))
    assert len(cl.descriptors._tensor_cache) == 3


# ---- what a captured graph keeps alive --------------------------------------------------------

def test_capture_scope_collects_buffers_once_and_nests():
    a, b = object(), object()
    from cudnnlite.handle import keep_alive
    keep_alive(a)                                    # outside a scope: nothing to do
    with cl.capture_scope() as outer:
        keep_alive(a)
        keep_alive(a)
        with cl.capture_scope() as inner:
            keep_alive(b)
        keep_alive(b)
    assert outer == [a, b] and inner == [b]


# ---- grad mode is per thread ----------------------------------------------------------------

def test_no_grad_in_one_thread_leaves_another_recording():
    inside, done = threading.Event(), threading.Event()

    def hold_no_grad():
        with L.no_grad():
            inside.set()
            done.wait(10)

    t = threading.Thread(target=hold_no_grad)
    t.start()
    inside.wait(10)
    try:
        assert L.is_grad_enabled()
        x = L.tensor(np.ones(3, np.float32), requires_grad=True)
        (x * 2.0).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 2])
    finally:
        done.set()
        t.join()


def test_join_helpers_follow_numpy_on_the_host():
    from layers.backend import concatenate, stack
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)) for _ in range(12)]
    np.testing.assert_array_equal(concatenate(arrays, -1), np.concatenate(arrays, -1))
    np.testing.assert_array_equal(stack(arrays, 1), np.stack(arrays, 1))
    np.testing.assert_array_equal(stack(arrays[:3], -1), np.stack(arrays[:3], -1))
    with pytest.raises(np.exceptions.AxisError):      # out-of-range axes are not wrapped
        stack(arrays, 3)
    with pytest.raises(ValueError):
        concatenate(arrays + [np.zeros((2, 4))], 0)

"""The GPU path's CuPy kernels, run on the host (tests/host_kernels.py), against PyTorch CPU.

Each test drives the layers' own GPU code -- the op's GPU branch, the optimizer's per-parameter /
multi-tensor / master-weight kernels, the device random generator, the non-finite check -- with
"device" arrays that are host memory and kernels compiled for the host from the very CUDA C the
GPU gets. So a wrong formula, a missed term, a swapped gate or a bad table walk in a kernel fails
here, in CI with no GPU. (What this cannot see -- CUDA's math library, races, launch limits --
stays with the `-m gpu` tests.)"""
import itertools

import numpy as np
import pytest
import torch

import layers as L
from layers import backend, finite, kernels, optim
from layers.backend import to_channels_last
from layers import functional as F
from layers import random as lrandom
from layers.ops import rnn as ops_rnn

from host_kernels import CALLS, CXX, HOST, HostArray, host

pytest.importorskip("cupy")        # HOST resolves kernel types with CuPy's own code
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

DTYPES = ["float32", "float64", "float16", "bfloat16"]


def _dt(name):
    return backend.bfloat16 if name == "bfloat16" else np.dtype(name)


def _tol(dtype):
    """(rtol, atol): the dtype's rounding of the result, plus float32 arithmetic for half data."""
    return {"float64": (1e-12, 1e-12), "float32": (2e-6, 1e-6), "float16": (2e-3, 1e-3),
            "bfloat16": (1.6e-2, 8e-3)}[dtype]


def _close(ours, ref, dtype, scale=1.0):
    rtol, atol = _tol(dtype)
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(ref, np.float64),
                               rtol=rtol * scale, atol=atol * scale)


def _data(shape, dtype, seed=0, low=-2.0, high=2.0):
    x = np.random.default_rng(seed).uniform(low, high, shape)
    return host(x.astype(_dt(dtype)))


def _torch(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def test_host_arrays_take_the_gpu_path(on_host):
    x = _data((3, 4), "float32")
    assert backend.is_gpu(x) and backend.xp_of(x) is HOST
    assert isinstance(HOST.empty_like(x), HostArray)


@pytest.mark.parametrize("convert", ["asarray", "array", "asanyarray", "ascontiguousarray",
                                     "asfortranarray"])
def test_the_engine_converting_a_device_array_to_numpy_is_refused_as_cupy_refuses_it(on_host,
                                                                                       convert):
    """CuPy's ndarray refuses NumPy's implicit conversion (its __array__ raises); a HostArray, an
    ndarray subclass, would be converted silently, so the harness refuses it when the engine's
    own code asks -- a GPU path that reads device data through NumPy fails here as on a GPU."""
    x = _data((3, 4), "float32")
    engine_code = compile(f"np.{convert}(x)", "<layers code>", "eval")
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        eval(engine_code, {"__name__": "layers.some_op", "np": np, "x": x})
    plain = eval(engine_code, {"__name__": "layers.some_op", "np": np, "x": x.get()})
    np.testing.assert_array_equal(plain, x.get())            # host data converts as ever
    mine = getattr(np, convert)(x)                           # the tests' own code may convert
    np.testing.assert_array_equal(np.asarray(mine), x.get())


# NumPy spellings CuPy 14 does not take: each fails on a GPU, so each must fail on the host too
NOT_CUPY = [
    ("cupy.errstate", AttributeError, "module 'cupy' has no attribute 'errstate'"),
    ("cupy.nanpercentile", AttributeError, "module 'cupy' has no attribute 'nanpercentile'"),
    ("cupy.clip(x, min=0.0)", TypeError, r"cupy.clip\(a, a_min, a_max"),
    ("cupy.sum(x, where=x > 0)", TypeError, "unexpected keyword argument 'where'"),
    ("cupy.array(x, like=x)", TypeError, "unexpected keyword argument 'like'"),
    ("x.item(0)", TypeError, r"cupy.ndarray.item\(self\): too many positional"),
    ("x.max(initial=0.0)", TypeError, "unexpected keyword argument 'initial'"),
    ("x.sort(order='a')", TypeError, "unexpected keyword argument 'order'"),
    ("x.ctypes", AttributeError, "'cupy.ndarray' object has no attribute 'ctypes'"),
    ("x.resize(6)", AttributeError, "'cupy.ndarray' object has no attribute 'resize'"),
    ("np.nanpercentile(x, 50)", TypeError, "no implementation found for 'numpy.nanpercentile'"),
    ("np.sum(x, where=x > 0)", TypeError, "unexpected keyword argument 'where'"),
    ("np.array([x, x])", TypeError, "Implicit conversion to a NumPy array is not allowed"),
]
# ... and what CuPy does take, with CuPy's results: device arrays, 0-d for a whole reduction
CUPY = ["cupy.clip(x, 0.0, 1.0)", "cupy.sum(x, axis=0, keepdims=True)", "x[0, 0].item()",
        "x.astype(np.float64, copy=False)", "x.reshape(3, 2)", "x.transpose(1, 0)",
        "x.max(axis=1)", "np.sum(x)", "np.linalg.norm(x)", "np.where(x > 2)[1]",
        "cupy.nonzero(x)[0]"]


@pytest.mark.parametrize("code,error,match", NOT_CUPY, ids=[c for c, _, _ in NOT_CUPY])
def test_numpy_spellings_cupy_lacks_are_refused_to_the_engine(on_host, code, error, match):
    """HOST's functions are NumPy's and HostArray's methods ndarray's; the harness binds the
    engine's calls to CuPy's own signatures and names, so a GPU path written in a NumPy spelling
    CuPy lacks fails here, as it would on a GPU."""
    x = _data((2, 3), "float32", low=0.0)
    with pytest.raises(error, match=match):
        eval(code, {"__name__": "layers.some_op", "cupy": HOST, "np": np, "x": x})


def test_the_engines_index_arrays_wrap_as_cupys_do(on_host):
    """CuPy wraps an integer-array index out of range (NumPy raises IndexError): a GPU path
    relying on NumPy's error would compute something else on a GPU, so here it does too."""
    x = host(np.arange(12.0).reshape(3, 4))
    scope = {"__name__": "layers.some_op", "cupy": HOST, "np": np, "x": x, "host": host}
    run = lambda code: np.asarray(eval(code, scope))          # noqa: E731
    np.testing.assert_array_equal(run("x[np.array([3, -4])]"), x.get()[[0, 2]])
    np.testing.assert_array_equal(run("x[:, [4, 5]]"), x.get()[:, [0, 1]])
    np.testing.assert_array_equal(run("x[..., np.array([6])]"), x.get()[:, [2]])
    np.testing.assert_array_equal(run("x[None, np.array([4])]"), x.get()[None, [1]])
    np.testing.assert_array_equal(run("cupy.take(x, host(np.array([12, -13])))"),
                                  x.get().ravel()[[0, 11]])
    np.testing.assert_array_equal(run("cupy.take_along_axis(x, host(np.array([[4], [5], [6]])), "
                                      "1)"), [[0.0], [5.0], [10.0]])
    np.testing.assert_array_equal(run("x[..., True, np.array([5])]"), x.get()[..., True, [1]])
    np.testing.assert_array_equal(run("x[True, np.array([3])]"), x.get()[True, [0]])  # (a new axis)
    np.testing.assert_array_equal(run("x[np.array([4]), ..., None]"), x.get()[[1], ..., None])
    z = host(np.array(5.0))
    scope["z"] = z
    exec("v = z[...]; v += 1", scope)                        # (still a view: no array index)
    assert float(z.get()) == 6.0
    exec("cupy.put_along_axis(x, host(np.array([[5], [4], [7]])), -2.0, 1)", scope)
    np.testing.assert_array_equal(x.get()[:, [1, 0, 3]].diagonal(), [-2.0, -2.0, -2.0])
    exec("x[np.array([3])] = -1.0", scope)                   # (row 0)
    assert (x.get()[0] == -1).all() and (x.get()[1:] != -1).all()
    with pytest.raises(IndexError):                          # (a Python int: CuPy checks it)
        run("x[3]")
    with pytest.raises(IndexError):                          # (the tests' own code: NumPy's)
        x[np.array([3])]


@pytest.mark.parametrize("code", CUPY)
def test_cupy_spellings_pass_with_cupy_results(on_host, code):
    x = _data((2, 3), "float32", low=0.0)
    r = eval(code, {"__name__": "layers.some_op", "cupy": HOST, "np": np, "x": x})
    if code != "x[0, 0].item()":
        assert isinstance(r, HostArray), type(r)
    else:
        assert r == x.get().item(0)
    assert x.item(0) == x.get()[0, 0]         # (the tests' own code: NumPy's, unchecked)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_of_two_is_one_kernel_and_exact(on_host, dtype, axis):
    """F.concat of two device arrays (kernels.join2), one of them a strided view: torch.cat's
    values exactly (a copy), and the gradient split back (views of gy)."""
    from host_kernels import CALLS
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4, 5)).astype(_dt(dtype))
    shape = list(a.shape)
    shape[axis] += 2                                # (a different length along the axis)
    b_full = rng.standard_normal([2 * n for n in shape]).astype(_dt(dtype))
    view = tuple(slice(0, 2 * n, 2) for n in shape)
    b = b_full[view]
    ta = L.tensor(host(a), requires_grad=True)
    tb = L.Tensor(host(b_full)[view], requires_grad=True)         # a strided "device" view
    CALLS.clear()
    y = F.concat([ta, tb], axis=axis)
    assert CALLS["cudnnlite_join2"] == 1
    ref = torch.cat([torch.tensor(a.astype(np.float64)), torch.tensor(b.astype(np.float64))], axis)
    np.testing.assert_array_equal(np.asarray(y.data, np.float64), ref.numpy())
    gy = rng.standard_normal(y.shape).astype(_dt(dtype))
    y.backward(L.tensor(host(gy)))
    n = a.shape[axis]
    np.testing.assert_array_equal(np.asarray(ta.grad.data, np.float64),
                                  np.take(gy, range(n), axis).astype(np.float64))
    np.testing.assert_array_equal(np.asarray(tb.grad.data, np.float64),
                                  np.take(gy, range(n, y.shape[axis]), axis).astype(np.float64))


def test_two_arrays_that_do_not_line_up_are_refused_not_joined(on_host):
    """backend.concatenate joins two device arrays in one kernel only when their shapes agree
    off the axis (join2 would read past the smaller one); otherwise the library's own error."""
    from host_kernels import CALLS
    CALLS.clear()
    with pytest.raises(ValueError):
        backend.concatenate([host(np.zeros((2, 3), np.float32)),
                             host(np.zeros((3, 3), np.float32))],
                            axis=1)
    assert CALLS["cudnnlite_join2"] == 0


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_of_two_is_one_kernel_and_exact(on_host, axis):
    from host_kernels import CALLS
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    ta, tb = L.tensor(host(a)), L.Tensor(host(np.ascontiguousarray(b.transpose(1, 0, 2)))
                                         .transpose(1, 0, 2))       # (a transposed view)
    CALLS.clear()
    y = F.stack([ta, tb], axis=axis)
    assert CALLS["cudnnlite_join2"] == 1
    np.testing.assert_array_equal(np.asarray(y.data), np.stack([a, b], axis))


@pytest.mark.parametrize("dtype", DTYPES)
def test_leaky_relu_forward_backward(on_host, dtype):
    x = _data((4, 5, 3, 3), dtype, seed=1)
    gy = _data(x.shape, dtype, seed=2)
    t = _torch(x).requires_grad_()
    ref = torch.nn.functional.leaky_relu(t, 0.2)
    ref.backward(_torch(gy))
    _close(kernels.leaky_relu(x, 0.2), ref.detach(), dtype)
    _close(kernels.leaky_relu_grad(x, gy, 0.2), t.grad, dtype)


@pytest.mark.parametrize("gy_layout", ["channels_last", "C"])
def test_pointwise_kernels_run_channels_last_operands_flat(on_host, monkeypatch, gy_layout):
    """kernels.pointwise: operands that share one channels-last layout run as flat 1-d arrays
    (CuPy would index them 4-d); operands whose layouts differ do not. Either way the values
    equal torch's and the output is stored as x is; the non-finite check reads a channels-last
    tensor's memory as 16-byte words and finds a NaN."""
    from layers.backend import is_channels_last, to_channels_last
    monkeypatch.setattr(kernels, "VECTOR_POINTWISE", False)     # (CuPy's elementwise kernels)
    flat = []
    real = kernels._flat_views
    monkeypatch.setattr(kernels, "_flat_views",
                        lambda args, raw: flat.append(real(args, raw) is not None) or
                        real(args, raw))
    x = _data((2, 5, 3, 4), "float32", seed=1)
    gy = _data(x.shape, "float32", seed=2)
    xc = host(to_channels_last(np.asarray(x)))
    gyc = host(to_channels_last(np.asarray(gy))) if gy_layout == "channels_last" else gy
    t = _torch(x).requires_grad_()
    ref = torch.nn.functional.leaky_relu(t, 0.2)
    ref.backward(_torch(gy))
    y, gx = kernels.leaky_relu(xc, 0.2), kernels.leaky_relu_grad(xc, gyc, 0.2)
    assert flat == [True, gy_layout == "channels_last"]
    assert is_channels_last(y) and is_channels_last(gx)
    _close(y, ref.detach(), "float32")
    _close(gx, t.grad, "float32")
    t = _torch(x).requires_grad_()
    torch.tanh(t).backward(_torch(gy))
    _close(kernels.activation("tanh", xc), torch.tanh(_torch(x)), "float32")
    _close(kernels.activation_grad_from_x("tanh", xc, gyc), t.grad, "float32")
    bad = np.asarray(xc).copy()
    bad[1, 3, 2, 1] = np.nan
    check = _bare_check()
    from host_kernels import CALLS
    CALLS.clear()
    check._check(host(to_channels_last(np.asarray(x))), "fine")
    check._check(host(to_channels_last(bad)), "bad")
    assert check.first() == "bad" and CALLS["cudnnlite_first_nonfinite_multi_float32"] == 1


def test_a_pointwise_kernel_called_without_its_output_or_with_mixed_dtypes(on_host):
    """kernels.pointwise falls back to CuPy's own indexing where flat views cannot pair the
    elements or give the result its shape: an output CuPy allocates (it would come back 1-d),
    operands of two dtypes with the same byte strides; and a kernel with no output parameter
    list builds."""
    from layers.backend import to_channels_last
    x = host(to_channels_last(np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)))
    y = kernels.pointwise("cudnnlite_test_square", "T x", "T y", "y = x * x")(x)
    assert y.shape == x.shape
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) ** 2)
    kernels.pointwise("cudnnlite_test_noop", "raw T x", "", "")
    b = host(np.arange(4, dtype=np.float64).reshape(2, 2).T)       # dense, strides (8, 16)
    a = host(np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2].T)  # strided, (8, 16) too
    assert a.strides == b.strides
    assert kernels._flat_views((b, a), (False, False)) is None


def test_sixteen_byte_vectors_are_counted_only_for_dense_aligned_whole_memory(on_host):
    """kernels.vectors16, what the 16-byte kernels (vector ReLUs, the finite check's words)
    take: dense in any axis order, aligned, whole vectors -- and never an empty array, whose
    zero-block launch a GPU refuses."""
    a = host(np.zeros((4, 2, 2, 2), np.float32))
    assert kernels.vectors16(a) == 8
    assert kernels.vectors16(to_channels_last(a)) == 8
    assert kernels.vectors16(a.transpose(3, 1, 0, 2)) == 8              # dense, permuted
    assert kernels.vectors16(a[:, :1]) is None                           # not dense
    assert kernels.vectors16(host(np.zeros(6, np.float32))) is None      # 24 bytes
    assert kernels.vectors16(host(np.zeros(9, np.float32))[1:5]) is None  # off 16 bytes
    assert kernels.vectors16(host(np.zeros((0, 4), np.float32))) is None


def test_dense_order_is_the_axis_order_that_makes_a_view_c_contiguous():
    """layers.backend.dense_order (memoised on shape, strides, itemsize) against a search of every
    axis order: the order it gives makes the view C-contiguous, and None comes exactly when no
    order does -- on the first call and on the memo's, for views sharing a shape."""
    import itertools
    from layers.backend import dense_order
    a = np.zeros((4, 3, 2, 5), np.float32)
    views = [a, a.transpose(0, 2, 3, 1), a.transpose(3, 1, 0, 2), a[:, :1], a[:, :, ::2],
             a[::-1], a[:1, :1], a[:, :0], np.zeros((4, 1, 2, 1), np.float64)[:, :, ::1],
             np.zeros((4, 1, 2, 1), np.float32).transpose(0, 3, 1, 2), a[..., 1:4],
             to_channels_last(np.zeros((2, 1, 3, 3), np.float32))]
    for _ in range(2):
        for v in views:
            order = dense_order(v)
            fits = [p for p in itertools.permutations(range(v.ndim))
                    if v.transpose(p).flags.c_contiguous and
                    all(s >= 0 for s in v.strides)]
            if order is None:
                assert not fits, (v.shape, v.strides)
            else:
                assert v.transpose(order).flags.c_contiguous, (v.shape, v.strides, order)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_finite_check_reads_dense_memory_as_words(on_host, dtype):
    """FiniteCheck._check on a dense, aligned tensor (the word kernel: 16-byte chunks, exponent
    bits): the dtype's largest finite value and its smallest subnormal pass; inf, -inf and NaN
    are found at every position of a chunk (a float64's high or low word, either half of a
    16-bit pair), against NumPy's isfinite; a tensor that is not whole chunks takes the
    elementwise kernel, with the same answers."""
    from host_kernels import CALLS
    dt = _dt(dtype)
    info = np.finfo(np.float32 if dtype == "bfloat16" else dt)
    big = float(info.max) if dtype != "bfloat16" else 3.3895313892515355e38
    values = [big, -big, float(info.smallest_subnormal), 0.0, 1.5]
    words = f"cudnnlite_first_nonfinite_words_{dtype}"
    for shape, kernel, store in (((4, 2, 2, 2), words, lambda a: a),
                                 ((4, 2, 2, 2), words, to_channels_last),
                                 ((3, 5), "cudnnlite_first_nonfinite", lambda a: a)):
        n = int(np.prod(shape))
        for pos in [None] + list(range(min(n, 9))) + [n - 1]:
            for bad in (np.inf, -np.inf, np.nan):
                a = np.array([values[i % len(values)] for i in range(n)]).astype(dt)
                if pos is not None:
                    a[pos] = bad
                a = store(a.reshape(shape))     # (channels-last: the kernel reads its memory)
                check = _bare_check()
                CALLS.clear()
                check._check(host(a), "t")
                want = None if np.isfinite(a.astype(np.float64)).all() else "t"
                assert check.first() == want, (shape, pos, bad)
                assert CALLS[kernel] == 1, (shape, CALLS)     # (a queue of one: this kernel)
                if pos is None:
                    break


def _bare_check():
    """A FiniteCheck of no models, on device 0 (the host harness), in its first step."""
    check = finite.FiniteCheck({}, device=0)
    check.__enter__()
    finite.active.check = None             # (no Module or backward() of the test sees it)
    return check


def _stored(dtype, shape, layout, bad_at):
    """A host 'device' array of `shape` laid out C-ordered, channels-last or as a strided view
    (not dense), with NaN or inf at the element a fraction bad_at of the way through it (0: the
    first, 1: the last; None: all finite)."""
    n = int(np.prod(shape))
    a = (np.arange(n) % 7 - 3.0).astype(_dt(dtype))
    if bad_at is not None:
        k = int(round(bad_at * (n - 1)))
        a[k] = np.nan if k % 2 else np.inf
    a = a.reshape(shape)
    if layout == "channels_last":
        return host(to_channels_last(a))
    if layout == "strided":                 # every other element of a wider array
        wide = host(np.zeros(shape[:-1] + (2 * shape[-1],), a.dtype))
        wide[..., ::2] = a
        return wide[..., ::2]
    if layout == "misaligned":              # dense, whole words, one element past 16 bytes
        longer = host(np.zeros(n + 1, a.dtype))
        longer[1:] = a.reshape(-1)
        return longer[1:].reshape(shape)
    return host(a)


# (shape, layout): dense tensors of several sizes, a channels-last one, two the queue cannot take
# (strided, misaligned: each checked alone, after the queue before it is launched), then dense
# ones again
QUEUED = [((4, 2, 2, 2), "C"), ((2, 4, 2, 2), "channels_last"), ((64,), "C"), ((2, 8, 3), "C"),
          ((4, 8), "strided"), ((16,), "misaligned"), ((8, 2), "C"), ((16,), "C")]


@pytest.mark.parametrize("threads", [256, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_queued_checks_name_the_first_bad_tensor_in_checking_order(on_host, monkeypatch, dtype,
                                                                  threads):
    """On a GPU the checks are queued and one launch reads them all as 16-byte words over a
    table of pointers (atomicMin keeps the smallest event): for every set of bad tensors below,
    placed at a chunk's first, middle or last element, the first bad one in checking order is
    named, as NumPy's isfinite says; a tensor the queue cannot take is checked in its place in
    that order; the launches are one table launch for the queue before them, their own, and one
    for the queue after. With one thread a block, a tensor is read by several blocks."""
    from host_kernels import CALLS
    monkeypatch.setattr(finite, "WORD_THREADS", threads)
    sets = [[], [0], [1], [2], [3], [4], [5], [6], [7], [2, 1], [4, 3], [5, 4], [6, 5], [1, 6],
            [3, 0, 5], [7, 5]]
    for where, bad in itertools.product((0, 1, 0.6), sets):    # first, last, inner element
        check = _bare_check()
        CALLS.clear()
        arrays = [_stored(dtype, shape, layout, where if i in bad else None)
                  for i, (shape, layout) in enumerate(QUEUED)]
        for i, a in enumerate(arrays):
            check._check(a, f"t{i}")
        want = next((f"t{i}" for i, a in enumerate(arrays)
                     if not np.isfinite(np.asarray(a).astype(np.float64)).all()), None)
        assert want == (f"t{min(bad)}" if bad else None)
        assert check.first() == want, (where, bad)
        assert (CALLS[f"cudnnlite_first_nonfinite_multi_{dtype}"],
                CALLS["cudnnlite_first_nonfinite"]) == (2, 2), CALLS


def test_the_queue_is_launched_at_a_dtype_change_and_at_its_limit(on_host, monkeypatch):
    """A tensor of another dtype than the queue's launches the queue first; QUEUE_LIMIT tensors
    launch it; either way the first bad tensor in checking order is named."""
    from host_kernels import CALLS
    monkeypatch.setattr(finite, "QUEUE_LIMIT", 2)
    for bad, want in (([1, 2], "t1"), ([2, 1], "t1"), ([3, 4], "t3"), ([4], "t4"), ([5], "t5"),
                      ([5, 4], "t4"), ([], None)):
        check = _bare_check()
        CALLS.clear()
        for i, dtype in enumerate(["float32", "float64", "float64", "float32", "float32",
                                   "float32"]):
            check._check(_stored(dtype, (16,), "C", 0.2 if i in bad else None), f"t{i}")
        assert check.first() == want, bad
        # float32 | float64 x 2 (at the limit) | float32 x 2 (at the limit) | float32 (first())
        assert (CALLS["cudnnlite_first_nonfinite_words_float32"],
                CALLS["cudnnlite_first_nonfinite_multi_float64"],
                CALLS["cudnnlite_first_nonfinite_multi_float32"]) == (2, 1, 1), CALLS


def test_a_host_tensor_between_queued_ones_keeps_their_events(on_host):
    """A NumPy tensor checked in a GPU step launches the queue first, so the queued tensors
    after it are named by their own events."""
    for bad, want in (([2], "t2"), ([0, 2], "t0"), ([1, 2], "t1"), ([3], "t3")):
        check = _bare_check()
        for i in range(4):
            a = _stored("float32", (16,), "C", 0.5 if i in bad else None)
            check._check(np.asarray(a) if i == 1 else a, f"t{i}")
        assert check.first() == want, bad


def test_a_step_launches_its_queue_when_it_ends_even_when_it_fails(on_host):
    """Leaving a step launches what it queued: the next step's start does not drop it (keep_first
    names the step), and a step that raises still has its queued tensors checked."""
    check = finite.FiniteCheck({}, device=0, keep_first=True)
    for step, bad in ((1, False), (2, True), (3, False)):
        with check:
            finite.active.check = None
            check._check(_stored("float32", (16,), "C", 0.5 if bad else None), "t")
            check._check(_stored("float32", (16,), "C", None), "u")
    assert (check.first(), check.first_step()) == ("t", 2)
    check = finite.FiniteCheck({}, device=0)
    with pytest.raises(RuntimeError, match="the step's own error"):
        with check:
            finite.active.check = None
            check._check(_stored("float32", (16,), "C", None), "t")
            check._check(_stored("float32", (16,), "C", 0.5), "u")
            raise RuntimeError("the step's own error")
    assert check.first() == "u"


@pytest.mark.parametrize("foreach", [False, True])
def test_queued_output_checks_run_when_backward_starts(on_host, monkeypatch, foreach):
    """backward() launches the queued checks of the forward's outputs, so the queue holds no
    array past the moment backward would free it; the NaN is found either way (and, foreach
    off, each output is checked as it comes)."""
    import weakref
    from host_kernels import CALLS, install_cudnn
    install_cudnn(monkeypatch)
    monkeypatch.setattr(optim, "FOREACH", foreach)
    model = L.Sequential(L.nn.Tanh(), L.nn.LeakyReLU(1.5))      # (|slope| > 1: checked too)
    check = finite.FiniteCheck({"m": model}, device=0)
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(2, 16)
    for bad in (False, True):
        CALLS.clear()
        x[1, 3] = np.nan if bad else 0.5
        with check:
            t = L.tensor(x, device=0, requires_grad=True)
            y = model(t)
            assert CALLS["cudnnlite_first_nonfinite_words_float32"] == (0 if foreach else 2)
            out = weakref.ref(y.data)
            y.sum().backward()
            del y
            assert out() is None           # (the queue let go of it)
        assert check.first() == ("output of m.0 (Tanh)" if bad else None)
        assert check.events == ["output of m.0 (Tanh)", "output of m.1 (LeakyReLU)"]
        assert CALLS["cudnnlite_first_nonfinite_multi_float32"] == (1 if foreach else 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bce_forward_backward_with_torch_clamps(on_host, dtype):
    p = _data((64,), dtype, seed=3, low=0.01, high=0.99)
    p[:3] = [0.0, 1.0, 0.5]
    t = host(np.where(np.arange(64) % 2 == 0, 1.0, 0.0).astype(dtype))
    t[:2] = [1.0, 0.0]                 # log(0) terms: torch clamps them at -100
    gy = _data((64,), dtype, seed=4)
    tp = _torch(p).requires_grad_()
    ref = torch.nn.functional.binary_cross_entropy(tp, _torch(t), reduction="none")
    ref.backward(_torch(gy))
    _close(kernels.bce(p, t), ref.detach(), dtype)
    ok = slice(2, None)                # torch's gradient at p = 0 / 1 divides by its eps too
    _close(np.asarray(kernels.bce_grad(p, t, gy))[ok], tp.grad[ok], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_bce_reduced_in_one_kernel_with_the_mean_in_its_gradient(on_host, dtype, mode):
    """BCE's sum / mean as one reduction kernel, and the mean's 1 / n folded into the gradient
    kernel, against torch; a NaN prediction makes the reduced loss NaN, as torch's."""
    p = _data((5, 13), dtype, seed=7, low=0.01, high=0.99)
    p[0, :2] = [0.0, 1.0]
    t = host(np.where(np.arange(65).reshape(5, 13) % 3 == 0, 1.0, 0.0).astype(dtype))
    t[0, :2] = [1.0, 0.0]
    tp = _torch(p).requires_grad_()
    ref = torch.nn.functional.binary_cross_entropy(tp, _torch(t), reduction=mode)
    ref.backward(torch.tensor(0.75, dtype=tp.dtype))
    CALLS.clear()
    _close(kernels.bce(p, t, mode), ref.detach(), dtype)
    assert CALLS == {f"cudnnlite_bce_{mode}": 1}, CALLS
    g = np.asarray(kernels.bce_grad(p, t, host(np.array(0.75, dtype)),
                                    p.size if mode == "mean" else 1))
    _close(g[1:], tp.grad[1:], dtype)
    # p = 0 and 1 divide by the 1e-12 guard, which torch holds as a float: 4e-9 apart in float64
    np.testing.assert_allclose(g[0], tp.grad[0].numpy(), rtol=max(1e-7, _tol(dtype)[0]))
    p[2, 2] = np.nan
    assert np.isnan(np.asarray(kernels.bce(p, t, mode)))
    empty = host(np.zeros((0,), dtype))          # torch: the mean of no terms is NaN, the sum 0
    assert np.isnan(np.asarray(kernels.bce(empty, empty, "mean"))) if mode == "mean" else \
        np.asarray(kernels.bce(empty, empty, "sum")) == 0
    with pytest.raises(ValueError, match="'none', 'sum' or 'mean', got 'avg'"):
        kernels.bce(p, t, "avg")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["relu", "tanh", "sigmoid"])
def test_activations_and_their_gradients_from_the_output(on_host, name, dtype):
    x = _data((6, 7), dtype, seed=5, low=-4, high=4)
    x[0, 0] = np.nan
    gy = _data(x.shape, dtype, seed=6)
    t = _torch(x).requires_grad_()
    ref = getattr(torch, name)(t)
    ref.backward(_torch(gy))
    y = kernels.activation(name, x)
    np.testing.assert_array_equal(np.isnan(np.asarray(y, np.float64)), np.isnan(ref.detach().numpy()))
    _close(np.asarray(y)[1:], ref.detach()[1:], dtype)
    # the gradient from the (rounded) output: compare with torch's on that output
    y64 = _torch(np.asarray(y, np.float64))
    dref = {"relu": (y64 > 0) * _torch(gy), "tanh": _torch(gy) * (1 - y64 ** 2),
            "sigmoid": _torch(gy) * y64 * (1 - y64)}[name]
    _close(np.asarray(kernels.activation_grad(name, y, gy))[1:], dref[1:], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_and_its_gradient(on_host, dtype, axis):
    a = _data((3, 9, 5), dtype, seed=7, low=-6, high=6)
    g = _data(a.shape, dtype, seed=8)
    t = _torch(a).requires_grad_()
    ref = torch.softmax(t, dim=axis)
    ref.backward(_torch(g))
    y = kernels.softmax(a, axis)
    _close(y, ref.detach(), dtype)
    _close(kernels.softmax_grad(y, g, axis), t.grad, dtype, scale=4)


def _torch_adam(values, grads, steps, **hyper):
    ps = [torch.tensor(np.asarray(v, np.float64), requires_grad=True) for v in values]
    opt = torch.optim.Adam(ps, **hyper)
    for k in range(steps):
        for p, g in zip(ps, grads):
            p.grad = torch.tensor(np.asarray(g[k], np.float64))
        opt.step()
    return [p.detach().numpy() for p in ps]


def _params_and_grads(shapes, dtype, steps, seed=10):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for _ in range(steps)] for s in shapes]
    return values, grads


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_per_parameter_and_multi_tensor_kernels_follow_torch(on_host, foreach, weight_decay,
                                                                  dtype):
    shapes, steps = [(5, 3), (7,), (2, 2, 3)], 4
    values, grads = _params_and_grads(shapes, dtype, steps)
    params = [L.Tensor(host(v.copy()), requires_grad=True) for v in values]
    opt = optim.Adam(params, lr=1e-2, weight_decay=weight_decay, foreach=foreach)
    for k in range(steps):
        for p, g in zip(params, grads):
            p.grad = L.Tensor(host(g[k].copy()))
        opt.step()
    ref = _torch_adam(values, grads, steps, lr=1e-2, weight_decay=weight_decay)
    for p, r in zip(params, ref):
        assert isinstance(p.data, HostArray)
        _close(p.data, r, dtype, scale=10)         # 4 steps of float arithmetic
    st = opt.state[params[1]]
    assert int(np.asarray(st["step"]).reshape(-1)[0]) == steps


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_adam_master_weights_kernel_updates_the_float32_master(on_host, dtype):
    shapes, steps = [(6, 4), (9,)], 3
    values, grads = _params_and_grads(shapes, np.float32, steps, seed=11)
    half = [v.astype(_dt(dtype)) for v in values]
    params = [L.Tensor(host(h.copy()), requires_grad=True) for h in half]
    opt = optim.Adam(params, lr=1e-2, master_weights=True)
    for k in range(steps):
        for p, g in zip(params, grads):
            p.grad = L.Tensor(host(g[k].astype(_dt(dtype))))
        opt.step()
    # torch: float32 Adam from the half start on the half gradients (as float32), then rounded
    ref = _torch_adam([h.astype(np.float32) for h in half],
                      [[g.astype(_dt(dtype)).astype(np.float32) for g in gs] for gs in grads],
                      steps, lr=1e-2)
    for p, r in zip(params, ref):
        master = opt.state[p]["master_param"]
        np.testing.assert_allclose(np.asarray(master, np.float64), r, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(p.data), np.asarray(master).astype(_dt(dtype)))
    # a weight loaded into the model mid-run replaces its stale master before the next update
    loaded = np.full(shapes[1], 0.5, np.float32).astype(_dt(dtype))
    params[1].data[...] = loaded
    for p, g in zip(params, grads):
        p.grad = L.Tensor(host(np.zeros(p.shape, _dt(dtype))))
    opt.step()
    master = np.asarray(opt.state[params[1]]["master_param"])
    assert np.all(np.abs(master - 0.5) < 0.05), master     # moved from 0.5, not from the old one


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_multi_tensor_master_adam_equals_the_per_tensor_kernel(on_host, dtype):
    """Adam(master_weights=True, foreach=True): all half-precision parameters of a group -- a
    channels-last one among them -- in one launch (plus one for the step counters), bit for bit
    the per-parameter kernel's masters, moments, steps and rounded weights over three steps, a
    weight loaded mid-run included."""
    from host_kernels import CALLS
    from layers.backend import to_channels_last
    shapes, steps = [(6, 4), (9,), (2, 3, 2, 2)], 3
    values, grads = _params_and_grads(shapes, np.float32, steps, seed=12)
    runs = []
    for foreach in (True, False):
        half = [v.astype(_dt(dtype)) for v in values]
        half[2] = to_channels_last(half[2])
        params = [L.Tensor(host(h), requires_grad=True) for h in half]
        opt = optim.Adam(params, lr=1e-2, master_weights=True, foreach=foreach)
        CALLS.clear()
        for k in range(steps):
            if k == 2:
                params[1].data[...] = np.asarray(0.5, _dt(dtype))
            for p, g in zip(params, grads):
                gk = g[k].astype(_dt(dtype))
                p.grad = L.Tensor(host(to_channels_last(gk) if gk.ndim == 4 else gk))
            opt.step()
        name = "cudnnlite_adam_master_multi" if foreach else "cudnnlite_adam_master"
        assert CALLS[name] == (steps if foreach else steps * len(shapes)), CALLS
        assert not foreach or CALLS["cudnnlite_adam_master"] == 0, CALLS
        runs.append([[np.asarray(a).copy() for a in (p.data, opt.state[p]["master_param"],
                                                      opt.state[p]["exp_avg"],
                                                      opt.state[p]["exp_avg_sq"],
                                                      opt.state[p]["step"])]
                     for p in params])
    for multi, single in zip(*runs):
        for a, b in zip(multi, single):
            np.testing.assert_array_equal(a, b)


def test_sgd_master_weights_resync_a_loaded_weight(on_host):
    """SGD keeps float32 masters of bfloat16 weights; kernels.sync_master puts a weight written
    into the model since the last step into its master (elsewhere the master keeps its bits)."""
    rng = np.random.default_rng(15)
    start = rng.standard_normal(50).astype(np.float32)
    grads = [rng.standard_normal(50).astype(backend.bfloat16) for _ in range(3)]
    p = L.Tensor(host(start.astype(backend.bfloat16)), requires_grad=True)
    opt = optim.SGD([p], lr=0.01, momentum=0.9, master_weights=True)
    t = torch.tensor(start.astype(backend.bfloat16).astype(np.float64), requires_grad=True)
    ref = torch.optim.SGD([t], lr=0.01, momentum=0.9)
    for k, g in enumerate(grads):
        if k == 2:      # a weight loaded into the model: element 7 only
            p.data[7] = 3.0
            with torch.no_grad():
                t[7] = 3.0
        p.grad = L.Tensor(host(g.copy()))
        t.grad = torch.tensor(g.astype(np.float64))
        opt.step()
        ref.step()
    master = np.asarray(opt.state[p]["master_param"], np.float64)
    np.testing.assert_allclose(master, t.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("max_norm", [1.5, 1e3])          # clipped, and left as they are
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_multi_tensor_clip_grad_norm_follows_torch(on_host, dtype, max_norm):
    rng = np.random.default_rng(12)
    shapes = [(300,), (17, 5), (3, 3, 3)]
    grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
    params = [L.Tensor(host(np.zeros(s, dtype)), requires_grad=True) for s in shapes]
    for p, g in zip(params, grads):
        p.grad = L.Tensor(host(g.copy()))
    norm = optim.clip_grad_norm_(params, max_norm, foreach=True)
    tp = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for t, g in zip(tp, grads):
        t.grad = torch.tensor(g.astype(np.float64))
    ref = torch.nn.utils.clip_grad_norm_(tp, max_norm)
    _close(np.asarray(norm.data), ref.numpy(), dtype)
    for p, t in zip(params, tp):
        _close(p.grad.data, t.grad, dtype)


@pytest.mark.parametrize("foreach", [False, True])
def test_non_finite_check_names_the_first_bad_gradient(on_host, monkeypatch, foreach):
    """Gradients are checked last parameter first (see FiniteCheck.gradients): per tensor, or by
    one multi-tensor launch whose atomicMin keeps the smallest event."""
    monkeypatch.setattr(optim, "FOREACH", foreach)
    model = L.Sequential(L.nn.Linear(3, 40), L.nn.Linear(40, 5))
    for p in model.parameters():
        p.data = host(p.data)
    check = finite.FiniteCheck({"m": model})
    opt = optim.SGD(list(model.parameters()), lr=0.1)
    for bad in ([], ["0.weight"], ["0.weight", "1.bias"], ["1.weight", "0.bias"]):
        with check:
            for name, p in model.named_parameters():
                g = np.ones(p.shape, np.float32)
                if name in bad:
                    g.reshape(-1)[g.size // 2] = np.inf if "weight" in name else np.nan
                p.grad = L.Tensor(host(g))
            check.gradients(opt)
        order = [n for n, _ in model.named_parameters()][::-1]
        expected = min(bad, key=order.index, default=None)
        assert check.first() == (None if expected is None else f"gradient of m.{expected}"), bad


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_device_generator_draws_uniform_normal_and_dropout(on_host, dtype):
    gen = lrandom.DeviceGenerator(1234)
    n = 200_000
    u = np.asarray(gen.uniform((n,), _dt(dtype)), np.float64)
    assert u.min() >= 0 and u.max() <= 1
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    z = np.asarray(gen.normal((n,), _dt(dtype)), np.float64)
    assert abs(z.mean()) < 4 / np.sqrt(n) and abs(z.std() - 1) < 0.01
    assert abs(np.mean(z > 1.0) - 0.158655) < 0.005          # the normal's tail, not only moments
    x = host(np.ones(n, _dt(dtype)))
    y, m = gen.dropout(x, 0.3)
    kept = np.asarray(m, np.float64) > 0
    assert abs(kept.mean() - 0.7) < 0.005
    np.testing.assert_allclose(np.asarray(y, np.float64)[kept], 1 / 0.7, rtol=_tol(dtype)[0])
    # a fresh generator with the same seed draws the same numbers; the offset moves on
    again = lrandom.DeviceGenerator(1234)
    np.testing.assert_array_equal(np.asarray(again.uniform((n,), _dt(dtype))),
                                  np.asarray(u).astype(_dt(dtype)))
    assert not np.array_equal(np.asarray(again.uniform((8,), "float32")), u[:8].astype(np.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstm_cell_kernels_follow_torch(on_host, dtype):
    B, I, H = 3, 4, 5
    rng = np.random.default_rng(13)
    ref = torch.nn.LSTMCell(I, H).double()
    x, h, c = (rng.standard_normal(s) for s in ((B, I), (B, H), (B, H)))
    gh, gc = rng.standard_normal((B, H)), rng.standard_normal((B, H))
    tx, th, tc = (torch.tensor(a, requires_grad=True) for a in (x, h, c))
    h1, c1 = ref(tx, (th, tc))
    (h1 * torch.tensor(gh)).sum().add((c1 * torch.tensor(gc)).sum()).backward()

    W = {k: v.detach().numpy().astype(dtype) for k, v in ref.named_parameters()}
    cell = ops_rnn.LSTMCell()
    cell.gpu = True
    hn, cn = cell.forward(*(host(a.astype(dtype)) for a in (x, h, c)),
                          host(W["weight_ih"]), host(W["weight_hh"]), host(W["bias_ih"]),
                          host(W["bias_hh"]))
    _close(hn, h1.detach(), dtype, scale=4)
    _close(cn, c1.detach(), dtype, scale=4)
    cell.needs_input_grad = (True, True, True, False, False, False, False)
    dx, dh, dc = cell.backward(host(gh.astype(dtype)), host(gc.astype(dtype)))[:3]
    _close(dx, tx.grad, dtype, scale=8)
    _close(dh, th.grad, dtype, scale=8)
    _close(dc, tc.grad, dtype, scale=8)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell_kernels_follow_torch(on_host, dtype, bias):
    B, I, H = 3, 4, 5
    rng = np.random.default_rng(14)
    ref = torch.nn.GRUCell(I, H, bias=bias).double()
    exact = lambda a: a.astype(_dt(dtype)).astype(np.float64)     # noqa: E731 (in the dtype)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.tensor(exact(p.numpy())))
    x, h, gh = (exact(rng.standard_normal(s)) for s in ((B, I), (B, H), (B, H)))
    tx, th = (torch.tensor(a, requires_grad=True) for a in (x, h))
    h1 = ref(tx, th)
    (h1 * torch.tensor(gh)).sum().backward()

    params = [ref.weight_ih, ref.weight_hh, ref.bias_ih, ref.bias_hh]
    W = [None if p is None else p.detach().numpy() for p in params]
    cell = ops_rnn.GRUCell()
    cell.gpu = True
    hn = cell.forward(*(host(a.astype(_dt(dtype))) for a in (x, h)),
                      *(None if w is None else host(w.astype(_dt(dtype))) for w in W))
    _close(hn, h1.detach(), dtype, scale=4)
    cell.needs_input_grad = (True, True, True, True, bias, bias)
    grads = cell.backward(host(gh.astype(_dt(dtype))))
    _close(grads[0], tx.grad, dtype, scale=8)
    _close(grads[1], th.grad, dtype, scale=8)
    for g, p in zip(grads[2:], params):     # the Deferred weight / bias gradients: a.T @ b or
        assert (g is None) == (p is None)   # a's column sums, summed here in float64
        if p is not None:
            a = np.asarray(g.a, np.float64)
            _close(a.sum(0) if g.b is None else a.T @ np.asarray(g.b, np.float64), p.grad, dtype,
                   scale=8)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ops_gpu_branches_softmax_and_leaky_relu_through_autograd(on_host, dtype):
    """The functional ops dispatch to their GPU branch for these arrays (kernels on the host)."""
    a = _data((4, 6), dtype, seed=14)
    x = L.Tensor(a, requires_grad=True)
    y = F.leaky_relu(F.softmax(x, axis=-1), 0.2)
    assert isinstance(y.data, HostArray)
    y.sum().backward()
    t = _torch(a).requires_grad_()
    torch.nn.functional.leaky_relu(torch.softmax(t, -1), 0.2).sum().backward()
    _close(y.data, torch.nn.functional.leaky_relu(torch.softmax(_torch(a), -1), 0.2), dtype)
    _close(x.grad.data, t.grad, dtype, scale=4)


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scattered_gradients_add_up_in_float32(on_host, gpu, dtype):
    """An embedding row (or an element picked by an index array) used 300 times gets gradient
    300 from 300 ones -- bfloat16 additions would stop at 256 (256 + 1 rounds back to 256) -- on
    the NumPy path and on the GPU path alike; and torch's gradient for mixed indices."""
    wrap = host if gpu else np.asarray
    W = L.Tensor(wrap(np.zeros((5, 3), _dt(dtype))), requires_grad=True)
    idx = np.array([2] * 300 + [0, 4, 4], np.int64)
    F.embedding(L.Tensor(wrap(idx)), W).sum().backward()
    expected = np.zeros((5, 3))
    np.add.at(expected, idx, 1.0)
    np.testing.assert_array_equal(np.asarray(W.grad.data, np.float64), expected)
    assert W.grad.dtype == W.dtype
    x = L.Tensor(wrap(np.zeros(7, _dt(dtype))), requires_grad=True)
    pick = np.array([3] * 300 + [1, 6], np.int64)
    x[wrap(pick)].sum().backward()
    expected = np.zeros(7)
    np.add.at(expected, pick, 1.0)
    np.testing.assert_array_equal(np.asarray(x.grad.data, np.float64), expected)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_relu_and_leaky_relu_over_vectors_equal_the_elementwise_kernels(on_host, monkeypatch,
                                                                          dtype, layout):
    """kernels.VECTOR_POINTWISE: ReLU and LeakyReLU forward and backward (from x and from y)
    over 16-byte vectors give the elementwise kernels' results bit for bit -- infinities, signed
    zeros, subnormals and bfloat16 rounding included -- and NaN where they give NaN (a NaN's
    payload is not kept), in either dense layout; an array the vectors cannot take (misaligned,
    not whole vectors, reversed) still runs the elementwise kernel."""
    from host_kernels import CALLS
    dt = _dt(dtype)
    bits = np.uint32 if dtype == "float32" else np.uint16
    rng = np.random.default_rng(9)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 3.0e38, -3.0e38,
                        0.1, -0.1, 1.0 + 2 ** -9, -(1.0 + 2 ** -9)])
    store = to_channels_last if layout == "channels_last" else (lambda a: a)

    def make(seed):
        v = np.random.default_rng(seed).standard_normal((2, 8, 4, 4)) * 3
        v.flat[:special.size] = special[rng.permutation(special.size)]
        return host(store(v.astype(dt)))
    x, gy = make(1), make(2)
    cases = {
        "leaky_relu_fwd": lambda: kernels.leaky_relu(x, 0.2),
        "leaky_relu_bwd": lambda: kernels.leaky_relu_grad(x, gy, 0.2),
        "relu_fwd": lambda: kernels.activation("relu", x),
        "relu_grad": lambda: kernels.activation_grad("relu", x, gy),
        "relu_grad_from_x": lambda: kernels.activation_grad_from_x("relu", x, gy),
    }
    for op, run in cases.items():
        monkeypatch.setattr(kernels, "VECTOR_POINTWISE", False)
        want = run()
        monkeypatch.setattr(kernels, "VECTOR_POINTWISE", True)
        CALLS.clear()
        got = run()
        kernel = "relu_grad" if op == "relu_grad_from_x" else op
        assert CALLS[f"cudnnlite_vector_{kernel}_{dtype}"] == 1, (op, dict(CALLS))
        assert got.strides == x.strides, op                    # laid out as its input
        nan = np.isnan(np.array(want, np.float64))
        np.testing.assert_array_equal(np.isnan(np.array(got, np.float64)), nan, err_msg=op)
        np.testing.assert_array_equal(np.array(got).view(bits)[~nan],
                                      np.array(want).view(bits)[~nan], err_msg=op)
    # not whole vectors (3 elements), and misaligned (one element in): the elementwise kernels
    for a in (host(np.array([1.0, -2.0, 3.0]).astype(dt)),
              host(np.arange(-8, 9, dtype=np.float64).astype(dt))[1:],
              host(np.arange(-8, 8, dtype=np.float64).astype(dt))[::-1]):
        CALLS.clear()
        y = kernels.leaky_relu(a, 0.2)
        assert not any(k.startswith("cudnnlite_vector") for k in CALLS), dict(CALLS)
        np.testing.assert_array_equal(np.array(y, np.float64),
                                      np.where(np.array(a, np.float64) > 0, np.array(a, np.float64),
                                               np.array(np.array(a, np.float32) * np.float32(0.2))
                                               .astype(dt).astype(np.float64)))

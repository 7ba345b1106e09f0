"""Mixed-dtype and integer operands follow torch's rules on the NumPy path and on the GPU path
(on a GPU, and run on the host: tests/host_kernels.py): where / masked_fill and arithmetic
promote as torch.result_type, sums of bool and integer data are int64, a mean of integer data
is refused, and an optimizer's step count loads into either path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)


def on(device, a):
    """A Tensor of a copy of array a on `device` ('cpu', or a GPU index: the GPU path)."""
    return L.tensor(np.array(a), device=device)


def values(t):
    return t.numpy()


MASK = np.array([True, False, True, False])
X32 = np.array([0.7, 1.6, -2.5, 3.25], np.float32)
I64 = np.array([5, 6, 7, 8], np.int64)
F64 = np.array([0.25, 1.3, 2.7, -1.0], np.float64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a, b", [(I64, X32), (X32, I64), (X32, F64), (np.zeros(4, np.int64), X32)])
def test_where_promotes_as_torch(where, a, b):
    want = torch.where(torch.tensor(MASK), torch.tensor(a), torch.tensor(b))
    got = F.where(MASK, on(where, a), on(where, b))
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(values(got), want.numpy())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_arithmetic_of_an_integer_and_a_float32_tensor_is_float32_as_torch(where, op):
    a, b = on(where, I64), L.Tensor(on(where, X32).data, requires_grad=True)
    got = getattr(F, op)(a, b)
    want = getattr(torch, op)(torch.tensor(I64), torch.tensor(X32))
    assert got.dtype == np.float32 and want.dtype == torch.float32
    np.testing.assert_allclose(values(got), want.numpy(), rtol=2e-7)
    got.sum().backward()                     # the float input's gradient keeps its dtype
    assert b.grad.dtype == np.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a", [np.array([True, True, False]), np.full(300, 1, np.uint8),
                               np.full((3, 100), 120, np.int8), np.arange(6, dtype=np.int32)])
def test_sums_of_bool_and_integer_data_are_int64_as_torch(where, a):
    for axis in (None, 0, -1):
        want = torch.tensor(a).sum() if axis is None else torch.tensor(a).sum(dim=axis)
        got = F.sum(on(where, a), axis=axis)
        assert got.dtype == np.int64 and want.dtype == torch.int64
        np.testing.assert_array_equal(values(got), want.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_a_mean_of_integer_data_is_refused_as_torch(where):
    with pytest.raises(RuntimeError):
        torch.tensor(I64).mean()
    with pytest.raises(TypeError, match="mean: input must be floating .* got int64"):
        F.mean(on(where, I64))
    assert float(values(F.mean(on(where, X32)))) == pytest.approx(float(X32.mean()), rel=1e-7)


@pytest.mark.parametrize("device", DEVICES[1:])
@pytest.mark.parametrize("first, second", [("cpu", "gpu path"), ("gpu path", "cpu"),
                                           ("gpu path", "gpu path"), ("cpu", "cpu")])
@pytest.mark.parametrize("step_as", ["saved", "torch float"])
def test_adam_resumes_on_either_path_from_a_state_saved_on_either(where, first, second,
                                                                 step_as):
    """Two Adam steps on one path, state_dict, two more on the other (or the same) after
    load_state_dict, against torch's four steps in float64. A CPU state's step is a number,
    a GPU state's a 0-d array, torch's own a float tensor: each loads as the path keeps it."""
    first, second = ("cpu" if path == "cpu" else where for path in (first, second))
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    grads = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4)]
    p = L.Parameter(on(first, w0).data)
    opt = L.optim.Adam([p], lr=0.1)
    for g in grads[:2]:
        p.grad = on(first, g)
        opt.step()
    sd = opt.state_dict()
    if step_as == "torch float":
        sd["state"][0]["step"] = np.array(2.0, np.float32)
    q = L.Parameter(on(second, values(p)).data)
    opt2 = L.optim.Adam([q], lr=0.1)
    opt2.load_state_dict(sd)
    for g in grads[2:]:
        q.grad = on(second, g)
        opt2.step()
    t = torch.tensor(w0.astype(np.float64), requires_grad=True)
    topt = torch.optim.Adam([t], lr=0.1)
    for g in grads:
        t.grad = torch.tensor(g.astype(np.float64))
        topt.step()
    np.testing.assert_allclose(values(q), t.detach().numpy(), rtol=0, atol=2e-6)
    step = opt2.state[q]["step"]             # a number on the NumPy path, 0-d array on a GPU
    assert int(L.backend.to_device(step, "cpu") if hasattr(step, "dtype") else step) == 4
    assert isinstance(step, int) if second == "cpu" else step.dtype == np.int64


F32 = np.array([1.0, -2.0, 3.5, 0.25], np.float32)
ZERO_DIM = {   # name: (ours, torch's) -- 0-d tensors and Python numbers by torch's result_type
    "int tensor, Python float": (lambda T: F.add(T(I64), 2.5), lambda t: t(I64) + 2.5),
    "int / int": (lambda T: F.div(T(I64), T(I64 + 1)), lambda t: t(I64) / t(I64 + 1)),
    "int / Python int": (lambda T: F.div(T(I64), 2), lambda t: t(I64) / 2),
    "bool + Python int": (lambda T: F.add(T(MASK), 1), lambda t: t(MASK) + 1),
    "bool + Python float": (lambda T: F.add(T(MASK), 1.5), lambda t: t(MASK) + 1.5),
    "float32 * 0-d float64": (lambda T: F.mul(T(F32), T(np.array(2.5))),
                              lambda t: t(F32) * t(np.array(2.5))),
    "float16 * 0-d float32": (lambda T: F.mul(T(F32.astype(np.float16)), T(np.array(2.5, np.float32))),
                              lambda t: t(F32.astype(np.float16)) * t(np.array(2.5, np.float32))),
    "int32 * 0-d int64": (lambda T: F.mul(T(I64.astype(np.int32)), T(np.array(3))),
                          lambda t: t(I64.astype(np.int32)) * t(np.array(3))),
    "int64 * 0-d float64": (lambda T: F.mul(T(I64), T(np.array(2.5))),
                            lambda t: t(I64) * t(np.array(2.5))),
    "where, Python float and int": (lambda T: F.where(MASK, 2.5, T(I64)),
                                    lambda t: torch.where(t(MASK), 2.5, t(I64))),
    "where, int and Python float": (lambda T: F.where(MASK, T(I64), 2.5),
                                    lambda t: torch.where(t(MASK), t(I64), 2.5)),
    "masked_fill of int data with a float": (lambda T: F.masked_fill(T(I64), MASK, -2.5),
                                             lambda t: t(I64).masked_fill(t(MASK), -2.5)),
    "masked_fill of bool data": (lambda T: F.masked_fill(T(~MASK), MASK, 1),
                                 lambda t: t(~MASK).masked_fill(t(MASK), 1)),
    "masked_fill of int data with a 0-d float tensor": (
        lambda T: F.masked_fill(T(I64), MASK, T(np.array(-2.5, np.float32))),
        lambda t: t(I64).masked_fill(t(MASK), t(np.array(-2.5, np.float32)))),
    "masked_fill of float16 data with a 0-d float64 tensor": (
        lambda T: F.masked_fill(T(F32.astype(np.float16)), MASK, T(np.array(1 / 3))),
        lambda t: t(F32.astype(np.float16)).masked_fill(t(MASK), t(np.array(1 / 3)))),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(ZERO_DIM))
def test_numbers_and_0d_tensors_promote_as_torchs_result_type(where, name):
    """A 0-d tensor or a Python number decides the dtype only where it is of a higher category
    (bool < integer < floating); true division of integers is float32; masked_fill keeps x's
    dtype."""
    ours, theirs = ZERO_DIM[name]
    got, want = ours(lambda a: on(where, a)), theirs(torch.tensor)
    assert str(got.dtype) == str(want.dtype).replace("torch.", ""), name
    np.testing.assert_array_equal(np.asarray(values(got), np.float64), want.double().numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_a_numpy_array_operand_takes_the_tensors_floating_dtype(where):
    """docs/from_pytorch.md's difference: a NumPy array meets a Tensor as a Python number does
    (torch makes it a tensor of its own dtype): it is cast to the Tensor's floating dtype, and
    the result is torch's for the two in that dtype."""
    def torch_of(a, dtype):
        return torch.tensor(np.asarray(a, np.float64)).to(getattr(torch, str(dtype)))
    for dtype, array in ((np.float32, F64), ("bfloat16", X32), (np.float64, X32)):
        x = on(where, X32).astype(dtype)
        t, c = torch_of(x.numpy(), x.dtype), torch_of(array, x.dtype)
        for got, want in ((x + array, t + c), (array * x, c * t), (x / array, t / c)):
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(values(got), np.float64),
                                          want.double().numpy())
    got = on(where, I64) + F64                    # (an integer tensor: the array's float dtype)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(values(got), (torch.tensor(I64) + torch.tensor(F64)).numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_minus_on_bool_tensors_is_refused_as_torch(where):
    for theirs in (lambda: torch.tensor(MASK) - torch.tensor(I64), lambda: -torch.tensor(MASK)):
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            theirs()
    for ours in (lambda: F.sub(on(where, MASK), on(where, I64)),
                 lambda: F.sub(on(where, I64), on(where, MASK)), lambda: -on(where, MASK)):
        with pytest.raises(TypeError, match="the - operator does not take bool tensors"):
            ours()


@pytest.mark.parametrize("device", DEVICES)
def test_a_half_sgd_step_rounds_lr_as_torch_does_where_it_runs(where):
    """torch's add(g, alpha=-lr) on float16 data: alpha rounded to float16 on the CPU, to float32
    on CUDA (the CUDA kernel's scalar is the float32 math type's); then one rounding of the sum
    through float32. lr = 1e-3 is 0.0010004 in float16."""
    p0 = np.linspace(-1e-4, 1e-4, 64).astype(np.float16)   # (small: the lr's last bits show)
    g = np.linspace(1, 9, 64).astype(np.float16)
    p = L.nn.Parameter(on(where, p0).data)
    p.grad = on(where, g)
    L.optim.SGD([p], lr=1e-3).step()
    lr = np.float16(1e-3) if where == "cpu" else np.float32(1e-3)
    want = (p0.astype(np.float64) - float(lr) * g.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(values(p), want.astype(np.float16))
    if where == "cpu":                               # and torch's own CPU step
        tp = torch.nn.Parameter(torch.tensor(p0))
        tp.grad = torch.tensor(g)
        torch.optim.SGD([tp], lr=1e-3).step()
        np.testing.assert_array_equal(values(p), tp.detach().numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_an_index_out_of_range_is_never_wrapped(where):
    """torch refuses a class target or an embedding index outside [0, n): NumPy and a GPU gather
    would wrap -1 to the last row silently. Here the host path raises, naming the value; a device
    gives NaN there (no read-back: the loss goes non-finite and the training loop says so)."""
    logits = L.Tensor(on(where, np.zeros((3, 4), np.float32)).data, requires_grad=True)
    target = on(where, np.array([1, -1, 2]))
    W = on(where, np.arange(8, dtype=np.float32).reshape(4, 2))
    if where == "cpu":
        with pytest.raises(IndexError, match="cross_entropy: target -1 is out of range for 4"):
            F.cross_entropy(logits, target)
        with pytest.raises(IndexError, match="embedding: index 4 is out of range for 4"):
            F.embedding(on(where, np.array([0, 4])), W)
        return
    assert np.isnan(values(F.cross_entropy(logits, target)))
    W.requires_grad = True
    y = F.embedding(on(where, np.array([[0, -1], [3, 4]])), W)
    got = values(y)
    np.testing.assert_array_equal(got[0, 0], [0, 1])
    np.testing.assert_array_equal(got[1, 0], [6, 7])
    assert np.isnan(got[0, 1]).all() and np.isnan(got[1, 1]).all()
    # the NaN rows' gradient goes to no row of W (their stand-in index is 0: row 0 gets only
    # its own index's)
    y.backward(on(where, np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2)))
    np.testing.assert_array_equal(values(W.grad), [[1, 2], [0, 0], [0, 0], [5, 6]])


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_with_every_target_ignored_has_a_zero_gradient(where):
    logits = L.Tensor(on(where, np.ones((2, 3), np.float32)).data, requires_grad=True)
    loss = F.cross_entropy(logits, on(where, np.array([-100, -100])))
    tl = torch.ones(2, 3, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tl, torch.tensor([-100, -100]))
    tloss.backward()
    assert np.isnan(values(loss)) and torch.isnan(tloss)
    loss.backward()
    np.testing.assert_array_equal(values(logits.grad), tl.grad.numpy())      # zeros, not NaN


@pytest.mark.parametrize("device", DEVICES)
def test_floating_functions_of_integers_are_float32_and_float_only_ones_refuse_them(where):
    """As torch: sigmoid / tanh / exp / log / a float power / a float bound of integer data give
    float32 (NumPy gave float64, and a sigmoid of zeros in int64); leaky_relu and softmax refuse
    integers (NumPy truncated the slope, the probabilities, to integers)."""
    a = np.array([-1, 2, 3])
    x, t = on(where, a), torch.tensor(a)
    for ours, theirs in ((F.sigmoid, torch.sigmoid), (F.tanh, torch.tanh), (F.exp, torch.exp),
                         (lambda v: v ** 0.5, lambda v: v ** 0.5),
                         (lambda v: F.clamp(v, 0.5, 1.5), lambda v: v.clamp(0.5, 1.5))):
        got, want = ours(x), theirs(t)
        assert got.dtype == np.float32 and want.dtype == torch.float32
        np.testing.assert_allclose(values(got), want.numpy(), rtol=1e-6, equal_nan=True)
    assert (x ** 2).dtype == np.int64 and F.clamp(x, 0, 1).dtype == np.int64  # (integers stay)
    for refused in (lambda v: F.leaky_relu(v, 0.5), lambda v: F.softmax(v, 0),
                    lambda v: F.log_softmax(v, 0)):
        with pytest.raises(TypeError, match="takes floating data, got int64"):
            refused(x)


@pytest.mark.parametrize("device", DEVICES)
def test_edge_shapes_and_exponents_match_torch(where):
    """x ** 0's gradient at 0 (NaN from 0 * 0 ** -1; torch: 0), a dot product's backward (it
    raised), transpose(dim0, dim1) (NumPy read (0, 1) of a 2-d tensor as no change), softmax of
    a 0-d and of an empty tensor (raised), an activation of an empty batch (cuDNN refuses)."""
    w = L.Tensor(on(where, np.array([0.0, 1.0], np.float32)).data, requires_grad=True)
    (w ** 0).sum().backward()
    np.testing.assert_array_equal(values(w.grad), [0, 0])
    a = L.Tensor(on(where, np.array([1.0, 2, 3], np.float32)).data, requires_grad=True)
    b = L.Tensor(on(where, np.array([4.0, 5, 6], np.float32)).data, requires_grad=True)
    (a @ b).backward()
    np.testing.assert_array_equal(values(a.grad), [4, 5, 6])
    np.testing.assert_array_equal(values(b.grad), [1, 2, 3])
    m = on(where, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(values(m.transpose(0, 1)), np.arange(6).reshape(2, 3).T)
    c = on(where, np.zeros((2, 3, 4), np.float32))
    assert F.transpose(c, 0, 2).shape == tuple(torch.zeros(2, 3, 4).transpose(0, 2).shape)
    assert F.transpose(c, 1, 0, 2).shape == (3, 2, 4)            # (a permutation, as NumPy)
    z = L.Tensor(on(where, np.array(2.0, np.float32)).data, requires_grad=True)
    s = F.softmax(z, 0)
    assert s.shape == () and float(values(s)) == float(torch.softmax(torch.tensor(2.0), 0))
    F.log_softmax(z, 0).backward()
    assert float(values(z.grad)) == 0.0
    e = L.Tensor(on(where, np.zeros((0, 3), np.float32)).data, requires_grad=True)
    for f in (lambda v: F.softmax(v, 0), lambda v: F.log_softmax(v, 1), F.relu, F.sigmoid,
              F.tanh):
        y = f(e)
        assert y.shape == (0, 3)
        y.sum().backward()
        assert e.grad.shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_convolution_of_an_empty_batch_is_torchs(where, channels_last):
    """N = 0 (cuDNN takes no empty tensor): an empty output and input gradient, a zero filter
    gradient, as torch's; the transposed convolution too."""
    for conv, tconv in ((nn.Conv2d(3, 4, 3, stride=2, padding=1),
                         torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)),
                        (nn.ConvTranspose2d(3, 4, 4, stride=2, padding=1),
                         torch.nn.ConvTranspose2d(3, 4, 4, stride=2, padding=1))):
        conv.to(where)
        if channels_last:
            conv.to(memory_format="channels_last")
        x = L.Tensor(on(where, np.zeros((0, 3, 8, 8), np.float32)).data, requires_grad=True)
        y = conv(x)
        tx = torch.zeros(0, 3, 8, 8, requires_grad=True)
        ty = tconv(tx)
        assert y.shape == tuple(ty.shape)
        y.sum().backward()
        ty.sum().backward()
        assert x.grad.shape == (0, 3, 8, 8)
        np.testing.assert_array_equal(values(conv.weight.grad), tconv.weight.grad.numpy())
        np.testing.assert_array_equal(values(conv.bias.grad), tconv.bias.grad.numpy())


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("device", DEVICES)
def test_a_tensor_exponent_and_a_number_base_are_torchs(where, dtype, rtol):
    """x ** y with y a Tensor (broadcasting) and 2 ** x (__rpow__): values and both gradients as
    torch's, the zero-base and zero-exponent cases included (log 0 masked, 0 ** -1 masked)."""
    A = np.array([[0.0, 0.0, 2.0, 1.5], [3.0, 0.5, 0.0, 2.5]])
    B = np.array([0.0, 2.0, 0.5, -1.5])
    a = L.Tensor(on(where, A.astype(dtype)).data, requires_grad=True)
    b = L.Tensor(on(where, B.astype(dtype)).data, requires_grad=True)
    ta = torch.tensor(A.astype(dtype), requires_grad=True)
    tb = torch.tensor(B.astype(dtype), requires_grad=True)
    for ours, theirs in (((a ** b) * 1.5, (ta ** tb) * 1.5), (2 ** b, 2 ** tb),
                         (0.0 ** b, 0.0 ** tb)):
        a.grad = b.grad = ta.grad = tb.grad = None
        assert values(ours).dtype == dtype
        np.testing.assert_allclose(values(ours), theirs.detach().numpy(), rtol=rtol)
        ours.sum().backward()
        theirs.sum().backward()
        for mine, want in ((a, ta), (b, tb)):
            if want.grad is not None:
                np.testing.assert_allclose(values(mine.grad), want.grad.numpy(), rtol=rtol,
                                           atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_a_power_outside_its_domain_is_nan_or_inf_silently_as_torchs(where):
    """x ** 0.5 of a negative, x ** -1 of 0: torch's NaN / inf, and on the NumPy path no NumPy
    RuntimeWarning (CuPy gives none; the host stand-in for it is NumPy, which does)."""
    import warnings
    x = L.Tensor(on(where, np.array([-1.0, 0.0, 4.0], np.float32)).data, requires_grad=True)
    t = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error" if where == "cpu" else "ignore")
        y = x ** 0.5 + x ** -1
        y.sum().backward()
    ty = t ** 0.5 + t ** -1
    ty.sum().backward()
    np.testing.assert_array_equal(values(y), ty.detach().numpy())
    np.testing.assert_array_equal(values(x.grad), t.grad.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_dtypes_are_taken_where_a_dtype_is(where):
    """torch code's dtype arguments (torch.float64, torch.bfloat16, torch.int64) as NumPy's of
    the same name: Tensor.to / astype / Module.to, the values torch's."""
    x = on(where, X32)
    for dtype in (torch.float64, torch.bfloat16, torch.int64, torch.bool):
        want = torch.tensor(X32).to(dtype)
        for got in (x.to(dtype), x.to(dtype=dtype), x.astype(dtype), x.to(where, dtype)):
            assert str(got.dtype) == str(dtype).removeprefix("torch.")
            np.testing.assert_array_equal(np.asarray(values(got), np.float64),
                                          want.double().numpy())
    for dtype in (torch.float64, torch.bfloat16, torch.int32):
        for make in (lambda: L.zeros(2, dtype=dtype, device=where),
                     lambda: L.full((2,), 3, dtype=dtype, device=where),
                     lambda: L.arange(3, dtype=dtype, device=where),
                     lambda: L.tensor([1, 2], dtype=dtype, device=where)):
            assert str(make().dtype) == str(dtype).removeprefix("torch.")
    for dtype, bn in ((torch.float64, "float64"), (torch.float16, "float32")):
        m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).to(where).to(dtype)
        assert str(m[0].weight.dtype) == str(dtype).removeprefix("torch.")
        assert str(m[1].weight.dtype) == bn                     # (batch norm's own rule)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_fill_takes_a_host_0d_value_for_a_tensor_on_any_device(where):
    """A 0-d value on the host with x on a GPU (torch takes a CPU scalar tensor there): the
    result on x's device in x's dtype, the value's gradient back on the host."""
    v = L.tensor(np.array(2.5, np.float64), requires_grad=True)
    x = on(where, X32)
    y = F.masked_fill(x, MASK, v)
    assert y.device == x.device and str(y.dtype) == "float32"
    np.testing.assert_array_equal(values(y), np.where(MASK, np.float32(2.5), X32))
    F.sum(y * on(where, np.array([1.0, 5.0, 3.0, 7.0], np.float32))).backward()
    assert v.grad.device == v.device and float(v.grad) == 4.0

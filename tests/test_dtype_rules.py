"""Mixed-dtype and integer operands follow torch's rules on the NumPy path and on the GPU path
(run on the host, tests/host_kernels.py): where / masked_fill and arithmetic promote a floating
tensor with an integer one to the floating dtype, sums of bool and integer data are int64, a
mean of integer data is refused, and an optimizer's step count loads into either path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F

from host_kernels import CXX, host

pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

PATHS = ["numpy", "host"]   # ("gpu" as an id would read as the gpu marker)


def on(path, a):
    """A Tensor of a copy of array a on the NumPy path or on the (host-run) GPU path."""
    return L.Tensor(host(np.array(a)) if path == "host" else np.array(a))


def values(t):
    return np.asarray(t.data)


@pytest.fixture
def paths(request, monkeypatch):
    """Both paths: installs the host harness for the 'host' one (the GPU path)."""
    if request.param == "host":
        request.getfixturevalue("on_host")
    return request.param


MASK = np.array([True, False, True, False])
X32 = np.array([0.7, 1.6, -2.5, 3.25], np.float32)
I64 = np.array([5, 6, 7, 8], np.int64)
F64 = np.array([0.25, 1.3, 2.7, -1.0], np.float64)


@pytest.mark.parametrize("paths", PATHS, indirect=True)
@pytest.mark.parametrize("a, b", [(I64, X32), (X32, I64), (X32, F64), (np.zeros(4, np.int64), X32)])
def test_where_promotes_as_torch(paths, a, b):
    want = torch.where(torch.tensor(MASK), torch.tensor(a), torch.tensor(b))
    got = F.where(MASK, on(paths, a), on(paths, b))
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(values(got), want.numpy())


@pytest.mark.parametrize("paths", PATHS, indirect=True)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_arithmetic_of_an_integer_and_a_float32_tensor_is_float32_as_torch(paths, op):
    a, b = on(paths, I64), L.Tensor(on(paths, X32).data, requires_grad=True)
    got = getattr(F, op)(a, b)
    want = getattr(torch, op)(torch.tensor(I64), torch.tensor(X32))
    assert got.dtype == np.float32 and want.dtype == torch.float32
    np.testing.assert_allclose(values(got), want.numpy(), rtol=2e-7)
    got.sum().backward()                     # the float input's gradient keeps its dtype
    assert b.grad.dtype == np.float32


@pytest.mark.parametrize("paths", PATHS, indirect=True)
@pytest.mark.parametrize("a", [np.array([True, True, False]), np.full(300, 1, np.uint8),
                               np.full((3, 100), 120, np.int8), np.arange(6, dtype=np.int32)])
def test_sums_of_bool_and_integer_data_are_int64_as_torch(paths, a):
    for axis in (None, 0, -1):
        want = torch.tensor(a).sum() if axis is None else torch.tensor(a).sum(dim=axis)
        got = F.sum(on(paths, a), axis=axis)
        assert got.dtype == np.int64 and want.dtype == torch.int64
        np.testing.assert_array_equal(values(got), want.numpy())


@pytest.mark.parametrize("paths", PATHS, indirect=True)
def test_a_mean_of_integer_data_is_refused_as_torch(paths):
    with pytest.raises(RuntimeError):
        torch.tensor(I64).mean()
    with pytest.raises(TypeError, match="mean: input must be floating .* got int64"):
        F.mean(on(paths, I64))
    assert float(values(F.mean(on(paths, X32)))) == pytest.approx(float(X32.mean()), rel=1e-7)


@pytest.mark.parametrize("first, second", [("numpy", "host"), ("host", "numpy"),
                                           ("host", "host"), ("numpy", "numpy")])
@pytest.mark.parametrize("step_as", ["saved", "torch float"])
def test_adam_resumes_on_either_path_from_a_state_saved_on_either(on_host, first, second,
                                                                 step_as):
    """Two Adam steps on one path, state_dict, two more on the other (or the same) after
    load_state_dict, against torch's four steps in float64. A CPU state's step is a number,
    a GPU state's a 0-d array, torch's own a float tensor: each loads as the path keeps it."""
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
    step = opt2.state[id(q)]["step"]
    assert int(np.asarray(step)) == 4
    assert isinstance(step, int) if second == "numpy" else step.dtype == np.int64

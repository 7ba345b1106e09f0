"""Every misuse tried gets a clear error naming what is wrong, with the offending values."""
import numpy as np
import pytest

import layers as L
from layers import F, nn


def t(*shape, dtype=np.float32, grad=False):
    return L.Tensor(np.ones(shape, dtype), requires_grad=grad)


@pytest.mark.parametrize("call,error,pattern", [
    (lambda: F.conv2d(t(2, 3, 8, 8), t(4, 5, 3, 3)), ValueError,
     r"3 channels \(shape \(2, 3, 8, 8\)\).*\(4, 5, 3, 3\)"),
    (lambda: F.conv2d(t(8, 8), t(4, 3, 3, 3)), ValueError, r"4-d input.*unbatched.*\(8, 8\)"),
    (lambda: F.linear(t(2, 5), t(3, 4)), ValueError, r"5 features \(shape \(2, 5\)\).*\(3, 4\)"),
    (lambda: F.matmul(t(2, 3), t(4, 5)), ValueError, r"\(2, 3\) and \(4, 5\)"),
    (lambda: F.mse_loss(t(2, 3), t(3, 2)), ValueError, r"\(2, 3\).*\(3, 2\)"),
    (lambda: F.reshape(t(2, 3), 4, 2), ValueError, r"\(2, 3\).*\(4, 2\)"),
    (lambda: F.concat([t(2, 3), t(3, 4)], 0), ValueError, r"\(2, 3\) and \(3, 4\)"),
    (lambda: F.conv2d(t(1, 1, 4, 4, dtype=np.float64), t(1, 1, 3, 3)), TypeError,
     r"float64.*float32"),
    (lambda: F.cross_entropy(t(3, 4), np.zeros(3, np.float32)), TypeError, "integers"),
    (lambda: F.conv_transpose2d(t(1, 2, 4, 4), t(2, 3, 3, 3), stride=2, output_padding=2),
     ValueError, r"output_padding \(2, 2\) must be smaller than either stride \(2, 2\)"),
    (lambda: nn.ConvTranspose2d(2, 3, 3, stride=1, output_padding=1)(t(1, 2, 4, 4)), ValueError,
     "output_padding"),
    (lambda: nn.BatchNorm2d(3)(t(2, 3, 4)), ValueError, r"expected 4-d input, got shape \(2, 3, 4\)"),
    (lambda: F.batch_norm(t(1, 3), None, None, training=True), ValueError, "more than 1 value"),
    (lambda: F.dropout(t(3), 1.5), ValueError, "probability"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError, "divisible by groups 2"),
])
def test_misuse_is_a_clear_error(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_backward_on_non_scalar_needs_a_gradient():
    x = t(2, 3, grad=True)
    with pytest.raises(RuntimeError, match=r"non-scalar tensor of shape \(2, 3\)"):
        (x * 2.0).backward()


def test_backward_gradient_shape_mismatch():
    x = t(2, 3, grad=True)
    with pytest.raises(RuntimeError, match=r"\(3, 2\) does not match.*\(2, 3\)"):
        (x * 2.0).backward(np.ones((3, 2), np.float32))


def test_backward_twice_without_retain_graph():
    x = t(3, grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = t(3, grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * np.ones(3))


def test_backward_without_any_grad_input():
    with pytest.raises(RuntimeError, match="does not require grad"):
        (t(3) * 2.0).sum().backward()


def test_no_grad_records_nothing():
    x = t(3, grad=True)
    with L.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf


def test_bce_target_gradient_is_refused():
    p = L.Tensor(np.full(3, 0.5, np.float32), requires_grad=True)
    target = L.Tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(NotImplementedError, match="detach"):
        F.binary_cross_entropy(p, target).backward()


@pytest.mark.parametrize("loss,args", [
    ("binary_cross_entropy", (np.full(3, 0.5, np.float32), np.ones(3, np.float32))),
    ("binary_cross_entropy_with_logits", (np.zeros(3, np.float32), np.ones(3, np.float32))),
    ("mse_loss", (np.zeros(3, np.float32), np.ones(3, np.float32))),
    ("l1_loss", (np.zeros(3, np.float32), np.ones(3, np.float32))),
    ("cross_entropy", (np.zeros((3, 4), np.float32), np.array([0, 1, 3]))),
])
def test_a_loss_reduction_that_is_not_one_of_torchs_three_is_refused(loss, args):
    """'avg' was an unreduced loss on the NumPy path (and a sum in a GPU kernel)."""
    with pytest.raises(ValueError, match=f"{loss}: reduction must be 'mean', 'sum' or 'none', "
                                         f"got 'avg'"):
        getattr(F, loss)(L.Tensor(args[0]), args[1], reduction="avg")
    getattr(F, loss)(L.Tensor(args[0]), args[1], reduction="sum")     # the three still work


def test_unknown_device_string():
    with pytest.raises(ValueError, match="device must be"):
        t(2).to("tpu")


def test_module_attribute_error_names_the_class():
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'wieght'"):
        nn.Linear(2, 3).wieght


def test_a_gpu_index_with_no_such_device_is_one_clear_error():
    """Module.to(0) / tensor(device=0) where no CUDA device answers: a RuntimeError naming the
    device and saying how to stay on the CPU, not CuPy's traceback."""
    import cupy
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    m = L.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=rf"^device {count}: no such CUDA device here \(.*\); "
                                           r"use 'cpu' for the NumPy path$"):
        m.to(count)


def test_a_plain_tensor_or_array_is_not_taken_as_a_parameter_or_a_submodule():
    """As torch: it would leave state_dict(), parameters() and the optimizer on the old
    Parameter while forward used the new array."""
    m = nn.Sequential(nn.Linear(2, 2))
    lin = m[0]
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight' of Linear"):
        lin.weight = L.Tensor(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="cannot assign 'ndarray' as parameter 'bias'"):
        lin.bias = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match="cannot assign 'int' as submodule '0' of Sequential"):
        setattr(m, "0", 3)
    assert next(lin.parameters()) is lin.weight
    lin.bias = None                                     # None still removes it, as torch
    assert list(lin.state_dict()) == ["weight"]
    lin.weight = nn.Parameter(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(lin.state_dict()["weight"], np.ones((2, 2)))


# ---- torch's refusals of a convolution's numbers, and of an optimizer's (each refused by torch
# too: checked below against torch itself) ------------------------------------------------------

def _conv_refusals(F_, T):
    """(name, call) pairs for layers (F_ = layers.functional, T = a float64 tensor maker) and
    torch (torch.nn.functional, torch.ones)."""
    x, w = (T(1, 1, 6, 6), T(2, 1, 3, 3)) if T is not None else (None, None)
    return {
        "kernel_past_input": lambda: F_.conv2d(T(1, 1, 2, 5), T(1, 1, 3, 3)),
        "kernel_past_input_1d": lambda: F_.conv1d(T(1, 1, 2), T(1, 1, 3)),
        "dilated_kernel_past_input": lambda: F_.conv2d(T(1, 1, 5, 5), T(1, 1, 3, 3), dilation=3),
        "dilation_0": lambda: F_.conv2d(x, w, dilation=0),
        "stride_0": lambda: F_.conv2d(x, w, stride=0),
        "padding_negative": lambda: F_.conv2d(x, w, padding=-1),
        "bias_one_for_two": lambda: F_.conv2d(x, w, T(1)),
        "bias_2d": lambda: F_.conv2d(x, w, T(2, 1)),
        "transposed_groups_uneven": lambda: F_.conv_transpose2d(T(1, 3, 3, 3), T(3, 2, 3, 3),
                                                                groups=2),
        "transposed_output_padding_negative": lambda: F_.conv_transpose2d(
            T(1, 1, 3, 3), T(1, 2, 3, 3), stride=2, output_padding=-1),
        "transposed_bias_wrong": lambda: F_.conv_transpose2d(T(1, 1, 3, 3), T(1, 2, 3, 3), T(3)),
    }


@pytest.mark.parametrize("case", list(_conv_refusals(F, None)))    # (names only: T is None)
def test_a_convolution_torch_refuses_is_refused_naming_the_numbers(case):
    import torch
    ours = _conv_refusals(F, lambda *s: L.Tensor(np.ones(s)))[case]
    theirs = _conv_refusals(torch.nn.functional, lambda *s: torch.ones(s, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        theirs[case]()
    with pytest.raises(ValueError, match=r"conv(1d|2d|_transpose2d): .*\d"):
        ours()


def test_torchs_one_element_spellings_of_1d_arguments_are_taken():
    import torch
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 9)), rng.standard_normal((3, 2, 3))
    tx, tw = torch.tensor(x), torch.tensor(w)
    for kw in ({"stride": (2,)}, {"padding": (1,)}, {"dilation": (2,)},
               {"padding": "same", "stride": (1,)}):
        np.testing.assert_allclose(F.conv1d(L.tensor(x), L.tensor(w), **kw).numpy(),
                                   torch.nn.functional.conv1d(tx, tw, **kw).numpy(), rtol=1e-12)
    m = nn.Conv1d(2, 3, (3,), stride=(2,), padding=(1,))
    assert m.weight.shape == (3, 2, 3) and m.stride == (2,) and m.padding == (1,)


def test_sgd_steps_a_0d_parameter_as_torch():
    """momentum and weight_decay on a scalar parameter: a NumPy 0-d sum was a NumPy scalar,
    kept as the momentum buffer, which the next step could not write into."""
    import torch
    p, tp = nn.Parameter(np.array(1.0)), torch.nn.Parameter(torch.tensor(1.0, dtype=torch.float64))
    opt = L.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True)
    topt = torch.optim.SGD([tp], lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True)
    for g in (0.5, -0.25, 2.0):
        p.grad, tp.grad = L.Tensor(np.array(g)), torch.tensor(g, dtype=torch.float64)
        opt.step()
        topt.step()
        assert p.data.shape == () and p.data.item() == tp.item()


def test_optimizer_numbers_and_positions_are_torchs():
    import torch
    p, tp = nn.Parameter(np.ones(2)), torch.nn.Parameter(torch.ones(2))
    for ours, theirs in ((lambda: L.optim.SGD([p], lr=-0.1), lambda: torch.optim.SGD([tp], lr=-0.1)),
                         (lambda: L.optim.SGD([p], momentum=-1), lambda: torch.optim.SGD([tp], momentum=-1)),
                         (lambda: L.optim.SGD([p], weight_decay=-1),
                          lambda: torch.optim.SGD([tp], weight_decay=-1)),
                         (lambda: L.optim.Adam([p], weight_decay=-1),
                          lambda: torch.optim.Adam([tp], weight_decay=-1))):
        with pytest.raises(ValueError) as want:
            theirs()
        with pytest.raises(ValueError, match=f"^{want.value}$"):     # (torch's words)
            ours()
    # torch's sixth positional argument is amsgrad (not done here: refused, not ignored)
    torch.optim.Adam([tp], 1e-3, (0.9, 0.99), 1e-8, 0, True)
    for cls in (L.optim.Adam, L.optim.AdamW):
        with pytest.raises(NotImplementedError, match="amsgrad"):
            cls([p], 1e-3, (0.9, 0.99), 1e-8, 0, True)


def test_max_pool1d_takes_torchs_positions_and_return_indices():
    import torch
    x = np.array([[[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0]]])
    for args in ((2, 2, 0, 1, True), (3, 2, 1, 1, True, True), (2, None, 0, 2, False, True)):
        ours, theirs = nn.MaxPool1d(*args)(L.tensor(x)), torch.nn.MaxPool1d(*args)(torch.tensor(x))
        ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bce_of_a_value_outside_0_1_is_refused_on_the_cpu_as_torch():
    import torch
    p, t = np.array([1.5, 0.5]), np.array([1.0, 0.0])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor(p), torch.tensor(t))
    with pytest.raises(ValueError, match=r"between 0 and 1.*1\.5"):
        F.binary_cross_entropy(L.tensor(p), L.tensor(t))
    # a NaN passes (layers.finite reports where it appeared)
    assert np.isnan(F.binary_cross_entropy(L.tensor(np.array([np.nan, 0.5])), L.tensor(t)).item())

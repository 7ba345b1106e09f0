"""An array changed in place after an op saved it for backward (an optimizer step, zero_(), an
initialiser, load_state_dict, between a forward and its backward) makes that backward refuse to
run, as torch's version counter does, instead of computing the gradient from the new values;
a change to an array no backward reads is fine, as in torch. Each case runs here and in torch
on the CPU: both raise, or neither does and the gradients agree."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)

W0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
X0 = np.array([[1.0, 2.0, -3.0], [0.5, -0.5, 4.0]], np.float32)


class Ours:
    """The few calls the cases make, in this package (on `where`)..."""
    F = F

    def __init__(self, where):
        self.where = where

    def tensor(self, a, grad):
        return L.Tensor(L.tensor(a.copy(), device=self.where).data, requires_grad=grad)

    def zero_(self, t):
        with L.no_grad():
            t.zero_()

    def sgd_step(self, p):
        p.grad = L.tensor(np.ones(p.shape, np.float32), device=self.where)
        L.optim.SGD([p], lr=0.5).step()

    def normal_(self, p):
        L.init.normal_(p)

    def linear(self):
        return nn.Linear(3, 2).to(self.where)

    def grad(self, p):
        return p.grad.numpy()


class Torch(Ours):
    """... and in torch."""
    F = torch.nn.functional

    def tensor(self, a, grad):
        return torch.tensor(a.copy(), requires_grad=grad)

    def zero_(self, t):
        with torch.no_grad():
            t.zero_()

    def sgd_step(self, p):
        p.grad = torch.ones_like(p)
        torch.optim.SGD([p], lr=0.5).step()

    def normal_(self, p):
        with torch.no_grad():
            torch.nn.init.normal_(p)

    def linear(self):
        return torch.nn.Linear(3, 2)

    def grad(self, p):
        return p.grad.detach().numpy()


def saved_input_zeroed(api, w, x):          # a product saved x: its gradient would use zeros
    loss = (w * x).sum()
    api.zero_(x)
    return loss


def saved_input_partly_zeroed_through_a_view(api, w, x):     # one row of x: x's version too
    loss = (w * x).sum()
    api.zero_(x[1])
    return loss


def saved_input_added_to(api, w, x):         # x += 1 writes x's own array (torch's in place)
    loss = (w * x).sum()
    x += 1
    return loss


def unsaved_input_zeroed(api, w, x):        # a sum saves neither input: no gradient changes
    loss = (w + x).sum()
    api.zero_(w)
    return loss


def saved_output_zeroed(api, w, x):         # a sigmoid saves its output
    s = api.F.sigmoid(w)
    loss = (s * x).sum()
    api.zero_(s)
    return loss


def saved_output_zeroed_through_a_detached_alias(api, w, x):    # (they share one version)
    s = api.F.sigmoid(w)
    loss = s.sum()
    api.zero_(s.detach())
    return loss


def optimizer_step(api, w, x):              # a GAN loop's slip: the weight stepped in between
    x.requires_grad_()                       # (x's gradient reads w.T)
    loss = (x @ w.T).sum()
    api.sgd_step(w)
    return loss


def optimizer_step_where_no_gradient_reads_the_weight(api, w, x):    # x wants no gradient:
    loss = (x @ w.T).sum()                                          # neither keeps w (torch's mm)
    api.sgd_step(w)
    return loss


def initialiser(api, w, x):
    loss = api.F.tanh(x * w).sum()
    api.normal_(x)
    return loss


def change_after_a_fresh_forward(api, w, x):    # the change came first: nothing to refuse
    api.sgd_step(w)
    api.zero_(x)
    return (x @ w.T).sum()


CASES = [saved_input_zeroed, saved_input_partly_zeroed_through_a_view, saved_input_added_to,
         unsaved_input_zeroed, saved_output_zeroed,
         saved_output_zeroed_through_a_detached_alias, optimizer_step,
         optimizer_step_where_no_gradient_reads_the_weight, initialiser,
         change_after_a_fresh_forward]


def outcome(api, case):
    """case's w gradient, or the RuntimeError's text."""
    w, x = api.tensor(W0, True), api.tensor(X0, False)
    loss = case(api, w, x)
    w.grad = None
    try:
        loss.backward()
    except RuntimeError as e:
        return str(e)
    return api.grad(w)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("device", DEVICES)
def test_a_backward_whose_saved_array_changed_in_place_refuses_as_torchs(where, case):
    ours, theirs = outcome(Ours(where), case), outcome(Torch(where), case)
    assert isinstance(ours, str) == isinstance(theirs, str), (ours, theirs)
    if isinstance(theirs, str):
        assert "was changed in place by" in ours, ours
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_the_error_names_the_op_the_input_and_the_change(where):
    api = Ours(where)
    w, x = api.tensor(W0, True), api.tensor(X0, True)
    loss = (x @ w.T).sum()
    api.sgd_step(w)
    with pytest.raises(RuntimeError, match=r"MatMul.backward: its input 1 \(shape \(3, 2\), "
                                           r"float32\), .* changed in place by SGD.step\(\)"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_load_state_dict_between_forward_and_backward_refuses_as_torchs(where):
    for api in (Ours(where), Torch(where)):
        m = api.linear()
        x = api.tensor(X0, True)          # (x's gradient reads the weight)
        loss = m(x).sum()
        m.load_state_dict({k: np.asarray(v) * 2 for k, v in m.state_dict().items()}
                          if api.F is F else {k: v * 2 for k, v in m.state_dict().items()})
        with pytest.raises(RuntimeError):
            loss.backward()


def test_a_second_backward_after_an_optimizer_step_refuses_as_torchs():
    for api in (Ours("cpu"), Torch("cpu")):
        w, x = api.tensor(W0, True), api.tensor(X0, True)
        loss = (x @ w.T).sum()
        loss.backward(retain_graph=True)
        api.sgd_step(w)
        with pytest.raises(RuntimeError):
            loss.backward()


# ---- the in-place operations themselves: x += y, x.add_(y), x[i] = v, copy_, fill_, clone -----

X1 = np.array([[1.0, -2.0, 3.5], [0.25, 4.0, -1.0]], np.float32)


def _set(x, index, value):
    x[index] = value
    return x


IN_PLACE = {
    "iadd": lambda x, m: x.__iadd__(m.tensor(np.array([1.0, 2.0, 3.0], np.float32))),
    "isub": lambda x, m: x.__isub__(0.5),
    "imul": lambda x, m: x.__imul__(m.tensor(X1[::-1].copy())),
    "itruediv": lambda x, m: x.__itruediv__(3),
    "add_alpha": lambda x, m: x.add_(m.tensor(X1), alpha=-2),
    "sub_alpha": lambda x, m: x.sub_(m.tensor(X1[:1]), alpha=0.5),
    "mul_": lambda x, m: x.mul_(-1.5),
    "div_": lambda x, m: x.div_(m.tensor(np.array([2.0, 4.0, 8.0], np.float32))),
    "setitem_row": lambda x, m: _set(x, 1, m.tensor(np.array([7.0, 8.0, 9.0], np.float32))),
    "setitem_slice": lambda x, m: _set(x, (slice(None), slice(1, None)), -3.0),
    "copy_": lambda x, m: x.copy_(m.tensor(np.array([[5.5, 6, 7]], np.float64))),
    "fill_": lambda x, m: x.fill_(2.25),
    "zero_": lambda x, m: x.zero_(),
}


class _TorchMaker:
    def tensor(self, a):
        return torch.tensor(a)


class _OurMaker:
    def __init__(self, where):
        self.where = where

    def tensor(self, a):
        return L.tensor(a, device=self.where)


@pytest.mark.parametrize("op", list(IN_PLACE))
@pytest.mark.parametrize("device", DEVICES)
def test_each_in_place_op_changes_the_tensor_and_its_views_as_torchs(where, op):
    x, tx = L.tensor(X1.copy(), device=where), torch.tensor(X1.copy())
    view, tview = x[0], tx[0]                      # a view sees the change, as torch's
    got, want = IN_PLACE[op](x, _OurMaker(where)), IN_PLACE[op](tx, _TorchMaker())
    assert got is x and want is tx
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    np.testing.assert_array_equal(view.numpy(), tview.numpy())
    assert x.dtype == np.float32


@pytest.mark.parametrize("device", DEVICES)
def test_a_hand_written_sgd_loop_trains_the_model_as_torchs(where):
    """The tutorial loop `for p in model.parameters(): p -= lr * p.grad` under no_grad: the
    parameters themselves change (with Python's fallback to `p = p - ...` nothing did).
    float64: float32 products differ in their last bits between torch's and NumPy's BLAS on
    some CPUs, and three steps of a sum of squares make that a few parts in a million."""
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2).double()
    m = nn.Linear(3, 2).double()
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    m.to(where)
    x64 = X1.astype(np.float64)
    for step in range(3):
        for model, x in ((m, L.tensor(x64, device=where)), (tm, torch.tensor(x64))):
            model.zero_grad() if hasattr(model, "zero_grad") else None
            loss = (model(x) ** 2).sum()
            loss.backward()
        with L.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
        with torch.no_grad():
            for p in tm.parameters():
                p -= 0.1 * p.grad
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[k], v.numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("call,error,pattern", [
    (lambda w, s: w.__iadd__(1), RuntimeError, r"x \+= y: a leaf tensor that requires grad"),
    (lambda w, s: w.zero_(), RuntimeError, r"zero_\(\): a leaf tensor that requires grad"),
    (lambda w, s: s.mul_(2), RuntimeError, r"mul_\(\): a tensor of a recorded graph is not "
                                          r"changed in place here"),
    (lambda w, s: L.tensor(np.zeros(2, np.float32)).add_(w[0]), RuntimeError,
     r"add_\(\): a tensor of a recorded graph"),
    (lambda w, s: _set(s, 0, 1.0), RuntimeError, r"x\[\.\.\.\] = value: a tensor of a "
                                                r"recorded graph"),
    (lambda w, s: L.tensor(np.arange(3)).__itruediv__(2), TypeError,
     r"x /= y: the result's type float32 cannot be cast to the tensor's int64"),
    (lambda w, s: L.tensor(np.arange(3)).__iadd__(1.5), TypeError, r"cannot be cast"),
    (lambda w, s: L.tensor(np.zeros(3, bool)).__iadd__(1), TypeError, r"int64 cannot be cast"),
    (lambda w, s: L.tensor(np.zeros(3, np.float32)).__iadd__(L.tensor(np.ones((2, 3), np.float32))),
     RuntimeError, r"a result of shape \(2, 3\) does not fit the tensor's shape \(3,\)"),
    (lambda w, s: L.tensor(np.zeros(3, np.float32)).copy_(np.ones(4)), RuntimeError,
     r"copy_\(\): a source of shape \(4,\) does not broadcast to the tensor's shape \(3,\)"),
])
def test_an_in_place_op_torch_refuses_is_refused_by_name(call, error, pattern):
    w = L.Tensor(W0.copy(), requires_grad=True)
    s = F.sigmoid(w)
    with pytest.raises(error, match=pattern):
        call(w, s)


@pytest.mark.parametrize("device", DEVICES)
def test_clone_is_a_copy_in_the_graph_laid_out_as_its_source(where):
    x = L.Tensor(L.tensor(X1, device=where).data, requires_grad=True)
    c = x.clone()
    assert c.data is not x.data and c.requires_grad
    (c * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X1, 3))
    with L.no_grad():
        c.zero_()
    np.testing.assert_array_equal(x.numpy(), X1)          # the source keeps its values


@pytest.mark.parametrize("device", DEVICES)
def test_accumulating_a_loss_with_plus_equals_is_torchs(where):
    """`loss = 0; loss += term` in a loop (a tensor of a recorded graph): a new tensor each time,
    bound to the name, with torch's value and gradients; the old tensor keeps its values (the one
    difference from torch, which writes it)."""
    w = L.Tensor(L.tensor(W0, device=where).data, requires_grad=True)
    tw = torch.tensor(W0, requires_grad=True)
    for api_w in (w, tw):
        loss = 0
        for k in range(3):
            loss += (api_w * (k + 1)).sum()
        first = loss
        loss *= 2
        loss -= api_w[0].sum()
        loss /= 4
        loss.backward()
        if api_w is w:
            ours, old = loss.item(), first.item()
    assert ours == pytest.approx(loss.item(), rel=1e-6)
    assert old == pytest.approx(6 * W0.sum(), rel=1e-6)      # (torch's first is now the loss)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


# ---- what else an op keeps for backward, and the record's own limits ----------------------------

def where_mask_changed(api, w, x):           # torch.where keeps its condition
    m = api.tensor(np.array([[True, False, True], [False, True, False]]), False)
    loss = api.where_(m, w, 0.0).sum()
    api.fill_(m, True)
    return loss


def index_changed(api, w, x):                 # advanced indexing keeps its index
    i = api.tensor(np.array([0, 1]), False)
    loss = (w[i] * x).sum()
    api.fill_(i, 1)
    return loss


def grad_zeroed_in_place(api, w, x):          # zero_grad(set_to_none=False) writes .grad
    w.grad = api.tensor(W0 * 2, False)
    g = api.tensor(X0, True)
    loss = (g * w.grad).sum()
    opt = api.sgd(w)
    opt.zero_grad(set_to_none=False)
    w.grad = None
    g.grad = None
    return loss, g


@pytest.mark.parametrize("case", [where_mask_changed, index_changed], ids=lambda c: c.__name__)
@pytest.mark.parametrize("device", DEVICES)
def test_a_kept_mask_or_index_changed_refuses_as_torchs(where, case):
    ours, theirs = outcome(_Kept(where), case), outcome(_TorchKept(where), case)
    assert isinstance(theirs, str), theirs
    assert isinstance(ours, str) and "was changed in place by fill_()" in ours, ours


@pytest.mark.parametrize("device", DEVICES)
def test_zero_grad_keeping_the_arrays_is_recorded_as_torchs(where):
    for api in (_Kept(where), _TorchKept(where)):
        w = api.tensor(W0, True)
        loss, g = grad_zeroed_in_place(api, w, None)
        with pytest.raises(RuntimeError):
            loss.backward()


class _Kept(Ours):
    def where_(self, m, a, b):
        return F.where(m, a, b)

    def fill_(self, t, v):
        with L.no_grad():
            t.fill_(v)

    def sgd(self, w):
        return L.optim.SGD([w], lr=0.1)


class _TorchKept(Torch):
    def where_(self, m, a, b):
        return torch.where(m, a, torch.tensor(b))

    def fill_(self, t, v):
        with torch.no_grad():
            t.fill_(v)

    def sgd(self, w):
        return torch.optim.SGD([w], lr=0.1)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_a_view_of_half_data_is_a_view_on_the_numpy_path(dtype):
    """Indexing computes nothing: half data stays a view (it was a float32 copy, so x[0].zero_()
    changed nothing), as torch's."""
    dtype = L.backend.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = L.tensor(np.ones((2, 3), np.float32)).astype(dtype)
    x[0].zero_()
    x.reshape(6)[4:].fill_(5)
    assert x.dtype == dtype
    np.testing.assert_array_equal(x.numpy().astype(np.float32), [[0, 0, 0], [1, 5, 5]])


@pytest.mark.parametrize("device", DEVICES)
def test_eval_batch_norm_takes_its_gradient_from_the_statistics_its_forward_used(where):
    """The GPU path read the running statistics again in backward: a training forward or a
    fill_ in between changed the gradient (the NumPy path kept the forward's)."""
    x = L.tensor(np.linspace(-1, 1, 2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2),
                 device=where)
    grads = []
    for change in (False, True):
        m = nn.BatchNorm2d(3).to(where)
        with L.no_grad():
            m.running_var.fill_(4.0)
        m.eval()
        xi = L.Tensor(x.data.copy(), requires_grad=True)
        loss = m(xi).sum()
        if change:
            with L.no_grad():
                m.running_var.fill_(100.0)
        loss.backward()
        grads.append(xi.grad.numpy())
    np.testing.assert_allclose(grads[0], 1 / np.sqrt(4 + 1e-5), rtol=1e-6)
    np.testing.assert_array_equal(grads[1], grads[0])


def test_a_backward_older_than_the_remembered_changes_refuses(monkeypatch):
    """The record keeps the latest change of so many distinct spans; a backward whose forward
    came before the oldest forgotten one cannot be checked, and says so rather than run."""
    import sys
    T = sys.modules["layers.changes"]
    monkeypatch.setattr(T, "_MAX_CHANGES", 8)
    for name, fresh in (("_changes", {}), ("_index", {}), ("_widest", {}), ("_large", set()),
                        ("_forgotten", 0)):
        monkeypatch.setattr(T, name, fresh)
    w = L.tensor(W0, requires_grad=True)
    x = L.tensor(X0)
    loss = (w * x).sum()
    buffers = [L.tensor(np.zeros(3, np.float32)) for _ in range(12)]
    for b in buffers:
        b.fill_(1.0)
    with pytest.raises(RuntimeError, match=r"Mul.backward: more distinct arrays were "
                                           r"changed in place since its forward than the record "):
        loss.backward()
    loss = (w * x).sum()                # a forward after them is checked as usual
    loss.backward()


def test_a_numpy_integer_index_is_no_array_and_refuses_nothing():
    """x[np.int64(t)] keeps its index; a NumPy scalar's __array_interface__ is a temporary copy
    whose address may be memory changed since (a scratch tensor freed): it was taken for an
    array and the backward refused, where torch gives the gradient."""
    x = L.Tensor(np.arange(36, dtype=np.float32).reshape(6, 3, 2), requires_grad=True)
    seq, loss = x * 1, 0
    for t in np.arange(6):
        step = seq[t]
        loss = loss + (step * step).mean()
        with L.no_grad():
            scratch = step.detach().sum(dim=0)
            scratch /= 2
        del scratch
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.arange(36).reshape(6, 3, 2) / 6, rtol=1e-6)


def test_a_large_changed_array_is_still_seen_and_searches_stay_short(monkeypatch):
    """Changed spans of _LARGE bytes or more are kept apart (one zeroed large buffer would make
    every search walk the index under it); a saved view inside one is still caught."""
    import sys
    T = sys.modules["layers.changes"]
    monkeypatch.setattr(T, "_LARGE", 64)
    # a fresh record: a span an earlier test recorded under the real _LARGE (memory handed out
    # again at the same address) is in the index already and would stay there
    for name, empty in (("_changes", {}), ("_index", {}), ("_widest", {}), ("_large", set())):
        monkeypatch.setattr(T, name, empty)
    big = L.tensor(np.ones((4, 32), np.float32))          # 512 bytes: a large span here
    w = L.tensor(np.ones(32, np.float32), requires_grad=True)
    loss = (w * big[2]).sum()                              # saves a 128-byte view of it
    with L.no_grad():
        big.zero_()
    assert any(span[2] - span[1] >= 64 for span in T._large)
    with pytest.raises(RuntimeError, match=r"Mul.backward: its input 1 .* changed in place by "
                                           r"zero_\(\)"):
        loss.backward()


def test_plus_equals_on_a_recorded_tensor_keeps_its_dtype_and_shape_as_torchs():
    x = L.tensor(np.ones(2, np.float32), requires_grad=True)
    tx = torch.ones(2, requires_grad=True)
    h, th = (x * 1).astype(np.float16), (tx * 1).half()
    h += L.tensor(np.full(2, 0.5, np.float32))                   # float32 operand: float16 stays
    th += torch.full((2,), 0.5)
    assert h.dtype == np.float16 and th.dtype == torch.float16
    h.astype(np.float32).sum().backward()
    th.float().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    g = x * 1
    with pytest.raises(RuntimeError, match=r"x \+= y: a result of shape \(3, 2\) does not fit "
                                           r"the tensor's shape \(2,\)"):
        g += L.tensor(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match=r"x \*= y: the result's type float32 cannot be cast to "
                                        r"the tensor's int64"):
        i = L.tensor(np.arange(2))
        i *= x


@pytest.mark.parametrize("device", ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"])
def test_a_convolution_input_the_gpu_path_copies_still_refuses_a_change(where):
    """A view cuDNN cannot read as it is (an NCHW input of a channels-last filter) is copied at
    the boundary; the backward reads the copy, but an in-place change of the input itself after
    the forward refuses it there too, as on the CPU path and in torch (found by a bug hunt)."""
    rng = np.random.default_rng(0)
    x = L.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), device=where)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    W = L.Tensor(L.tensor(w, device=where).to(memory_format="channels_last").data,
                 requires_grad=True)
    for op in (lambda: F.conv2d(x, W), lambda: F.conv_transpose2d(x[:, :, ::2, ::2], W[:3])):
        y = op()
        x.add_(1.0)
        with pytest.raises(RuntimeError, match="changed in place"):
            y.sum().backward()

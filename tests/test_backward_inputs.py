"""backward(inputs=...) and autograd.backward as torch's: only the named tensors' .grad are
accumulated into (a non-leaf's after its hooks, as retain_grad keeps it), other leaves are left
alone, hooks run once on a gradient summed over several roots, a tensor no root depends on keeps
its .grad, create_graph too; each scenario run on torch CPU and compared (float64; on the CPU, a
GPU and the host GPU path)."""
import numpy as np
import pytest
import torch

import layers as L

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]


def _leaf(lib, values, device):
    if lib is torch:
        return torch.tensor(values, dtype=torch.float64, requires_grad=True)
    return L.tensor(np.asarray(values, np.float64), device=device, requires_grad=True)


def _value(t):
    if t is None:
        return None
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def _only_the_leaf_asked_for(lib, d, seen):
    x, w = _leaf(lib, [1.0, 2.0], d), _leaf(lib, [3.0, -4.0], d)
    h = x * w
    h.retain_grad()                      # (on the path: kept, as torch keeps it)
    (h * h).sum().backward(inputs=[x])
    return {"x": x.grad, "w": w.grad, "h": h.grad}


def _a_non_leaf_input_after_its_hooks(lib, d, seen):
    x = _leaf(lib, [1.0, 2.0], d)
    h = x * 3
    h.register_hook(lambda g: g * 10)
    y = (h * h * x).sum()
    y.backward(inputs=[h], retain_graph=True)
    first = h.grad.detach().clone()
    y.backward(inputs=[h, x])            # (h.grad accumulates; x's through the hooked h)
    return {"first": first, "h": h.grad, "x": x.grad, "retains": lib.tensor(float(
        h.retains_grad))}


def _an_unused_input_keeps_its_grad(lib, d, seen):
    x, z = _leaf(lib, [1.0, 2.0], d), _leaf(lib, [5.0], d)
    (x * x).sum().backward(inputs=[z, x])
    return {"x": x.grad, "z": z.grad}


def _leaf_hooks_run_once_on_the_sum(lib, d, seen):
    a = _leaf(lib, [1.0, -2.0], d)
    b = a * 2
    b.register_hook(lambda g: seen.append(("b", _value(g))))
    a.register_hook(lambda g: seen.append(("a", _value(g))) or g * 3)
    lib.autograd.backward([(b * 3).sum(), (b * b).sum(), a], [None, None,
                          _leaf(lib, [0.5, 0.25], d).detach()])
    return {"a": a.grad}


def _several_roots_with_inputs(lib, d, seen):
    a, c = _leaf(lib, [1.0, -2.0], d), _leaf(lib, [2.0, 3.0], d)
    lib.autograd.backward([a * c, c * c], [_leaf(lib, [1.0, 2.0], d).detach(),
                                           _leaf(lib, [-1.0, 0.5], d).detach()], inputs=[c])
    return {"a": a.grad, "c": c.grad}


def _a_root_that_is_the_input(lib, d, seen):
    x = _leaf(lib, [1.0, 2.0], d)
    h = x * x
    h.backward(_leaf(lib, [2.0, 5.0], d).detach(), inputs=[h])
    c = _leaf(lib, [2.0], d)
    lib.autograd.backward([c], [_leaf(lib, [7.0], d).detach()], inputs=c)
    return {"h": h.grad, "x": x.grad, "c": c.grad}


def _create_graph_with_inputs(lib, d, seen):
    a, b = _leaf(lib, [1.0, 2.0], d), _leaf(lib, [0.5, -1.0], d)
    (a * a * a * b).sum().backward(inputs=[a], create_graph=True)
    ga = a.grad
    a.grad = None
    ga.sum().backward()                  # (a's .grad has a graph: its own gradient)
    return {"ga": ga, "a": a.grad, "b": b.grad}


def _the_other_outputs_hooks_run_too(lib, d, seen, create_graph=False):
    """The op that made an input runs every output's hooks and retain_grad, as torch's."""
    x = _leaf(lib, [1.0, 2.0, 3.0, 4.0], d)
    a, b = (x * 2).reshape(2, 2).unbind(0)          # (one op, two outputs, in both)
    b.retain_grad()
    b.register_hook(lambda g: seen.append(("b", _value(g))))
    y = (lib.sin(a) * b).sum()
    y.backward(inputs=[b], retain_graph=True, create_graph=create_graph)
    y.backward(inputs=[a], create_graph=create_graph)
    return {"a": a.grad, "b": b.grad, "x": x.grad}


def _the_other_outputs_hooks_run_too_with_create_graph(lib, d, seen):
    return _the_other_outputs_hooks_run_too(lib, d, seen, create_graph=True)


def _the_other_pieces_hooks_run_too(lib, d, seen, how="chunk"):
    """split and chunk are one op with an output per piece, as torch's: a sibling piece's hooks
    and retain_grad run when the op runs for another piece."""
    x = _leaf(lib, [1.0, 2.0, 3.0, 4.0, 5.0], d)
    a, b, c = (x * 2).chunk(3) if how == "chunk" else (x * 2).split([1, 3, 1])
    b.retain_grad()
    b.register_hook(lambda g: seen.append(("b", _value(g))))
    c.register_hook(lambda g: seen.append(("c", _value(g))))
    y = (lib.sin(a).sum() * b).sum() + (c * c).sum()
    y.backward(inputs=[b], retain_graph=True)
    y.backward(inputs=[a])
    return {"a": a.grad, "b": b.grad, "c": c.grad, "x": x.grad}


def _the_other_pieces_hooks_run_too_with_split(lib, d, seen):
    return _the_other_pieces_hooks_run_too(lib, d, seen, how="split")


def _autograd_grad_of_a_piece_runs_the_other_pieces_hooks(lib, d, seen):
    x = _leaf(lib, [1.0, 2.0, 3.0, 4.0, 5.0], d)
    a, b, c = (x * 2).chunk(3)
    c.register_hook(lambda g: seen.append(("c", _value(g))))
    y = (lib.sin(a).sum() * b).sum() + (c * c).sum()
    (gb,) = lib.autograd.grad(y, [b])
    return {"gb": gb, "x": x.grad}


SCENARIOS = [_the_other_outputs_hooks_run_too, _the_other_outputs_hooks_run_too_with_create_graph,
             _the_other_pieces_hooks_run_too, _the_other_pieces_hooks_run_too_with_split,
             _autograd_grad_of_a_piece_runs_the_other_pieces_hooks,
             _only_the_leaf_asked_for, _a_non_leaf_input_after_its_hooks,
             _an_unused_input_keeps_its_grad, _leaf_hooks_run_once_on_the_sum,
             _several_roots_with_inputs, _a_root_that_is_the_input, _create_graph_with_inputs]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__[1:] for s in SCENARIOS])
@pytest.mark.parametrize("device", DEVICES)
def test_backward_with_inputs_is_torchs(scenario, where):
    ours_seen, torch_seen = [], []
    got, want = scenario(L, where, ours_seen), scenario(torch, None, torch_seen)
    assert got.keys() == want.keys()
    for k in want:
        if want[k] is None:
            assert got[k] is None, k
            continue
        assert got[k] is not None, k
        np.testing.assert_allclose(_value(got[k]), _value(want[k]), rtol=1e-14, err_msg=k)
    assert [n for n, _ in ours_seen] == [n for n, _ in torch_seen]
    for (n, g), (_, tg) in zip(ours_seen, torch_seen):
        np.testing.assert_allclose(g, tg, rtol=1e-14, err_msg=f"hook of {n}")


def test_bad_inputs_are_refused_as_torchs():
    x = L.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"`inputs` argument to `backward\(\)` cannot be "
                                           r"empty"):
        (x * 2).sum().backward(inputs=[])
    with pytest.raises(RuntimeError, match=r"inputs\[1\] \(shape \(1,\)\) does not require "
                                           r"grad"):
        (x * 2).sum().backward(inputs=[x, L.tensor([1.0])])
    with pytest.raises(TypeError, match="inputs must be Tensors"):
        (x * 2).sum().backward(inputs=[np.ones(1)])
    assert x.grad is None

"""torch.autograd.functional (`layers.autograd.functional`): vjp, jvp, vhp, hvp, jacobian and
hessian of a Python function of Tensors, built on autograd.grad -- its create_graph for the
second-order ones (a jvp is the vjp of a vjp; a Hessian is the Jacobian of a gradient). The
arguments, the shapes and tuple structure of the results, strict= and create_graph= are
torch's. The Jacobians take one backward pass per output element (torch's reverse mode
without vectorize); strategy='forward-mode' takes one jvp per input element."""
from .backend import xp_of
from .tensor import Tensor

__all__ = ["vjp", "jvp", "vhp", "hvp", "jacobian", "hessian"]


def _as_tuple(value, what, fn):
    """(value as a tuple of Tensors, whether it was a tuple)."""
    is_tuple = isinstance(value, (tuple, list))
    items = tuple(value) if is_tuple else (value,)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {what} must be a Tensor or a tuple of Tensors, got "
                            f"{type(t).__name__}" + (f" at index {i}" if is_tuple else ""))
    return items, is_tuple


def _as_given(items, is_tuple):
    return items if is_tuple else items[0]


def _inputs(inputs, create_graph, fn):
    """The inputs as the function will see them, each a new Tensor that requires grad: with
    create_graph, one that does keeps its graph (a view, as torch's), else a detached copy."""
    items, is_tuple = _as_tuple(inputs, "inputs", fn)
    return tuple(t.reshape(t.shape) if create_graph and t.requires_grad else
                 t.detach().requires_grad_(True) for t in items), is_tuple


def _outputs(func, inputs, fn):
    items, is_tuple = _as_tuple(func(*inputs), "the outputs of the user-provided function", fn)
    return items, is_tuple


def _finished(items, create_graph):
    """Results as torch hands them: detached unless create_graph."""
    return tuple(t if create_graph or t is None else t.detach() for t in items)


def _vectors(v, like, what, fn):
    """v as a tuple matching `like` in number and shapes; None only where every one of `like`
    has one element (ones then)."""
    if v is None:
        if any(t.size != 1 for t in like):
            raise RuntimeError(f"{fn}: v can only be None if the {what} is a single element "
                               f"(shapes {[tuple(t.shape) for t in like]}); give v")
        return tuple(Tensor(t.data * 0 + 1) for t in like)
    items, _ = _as_tuple(v, "v", fn)
    if len(items) != len(like) or any(tuple(a.shape) != tuple(b.shape)
                                      for a, b in zip(items, like)):
        raise RuntimeError(f"{fn}: v has shapes {[tuple(t.shape) for t in items]}, the {what} "
                           f"{[tuple(t.shape) for t in like]}")
    return items


def _grads(outputs, inputs, grad_outputs, create_graph, strict, fn, against="input"):
    """autograd.grad of outputs in inputs (retained, unused allowed): zeros for an input the
    outputs do not reach, or, strict, an error naming it."""
    from .autograd import grad
    wanted = [o for o in outputs if o.requires_grad]
    gs = [None] * len(inputs)
    if wanted:
        go = [g for o, g in zip(outputs, grad_outputs) if o.requires_grad]
        gs = list(grad(wanted, inputs, go, retain_graph=True, create_graph=create_graph,
                       allow_unused=True))
    for i, g in enumerate(gs):
        if g is None:
            if strict:
                raise RuntimeError(f"{fn}: the output is independent of {against} {i}, which "
                                   f"strict=True does not allow")
            gs[i] = Tensor(inputs[i].data * 0)
    return tuple(gs)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the vector-Jacobian product at inputs."""
    inputs, in_tuple = _inputs(inputs, create_graph, "vjp")
    outputs, out_tuple = _outputs(func, inputs, "vjp")
    v = _vectors(v, outputs, "output of the function", "vjp")
    g = _grads(outputs, inputs, v, create_graph, strict, "vjp")
    return (_as_given(_finished(outputs, create_graph), out_tuple),
            _as_given(_finished(g, create_graph), in_tuple))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v): the Jacobian-vector product, as the vjp of a vjp (torch's double
    backward trick: the first vjp is linear in its vector u, so its own vjp in u with v is
    J v)."""
    inputs, in_tuple = _inputs(inputs, create_graph, "jvp")
    v = _vectors(v, inputs, "input", "jvp")
    outputs, out_tuple = _outputs(func, inputs, "jvp")
    u = tuple(Tensor(o.data * 0).requires_grad_(True) for o in outputs)
    g = _grads(outputs, inputs, u, True, strict, "jvp")
    reached = [(gi, vi) for gi, vi in zip(g, v) if gi.requires_grad]
    Jv = _grads([gi for gi, _ in reached], u, [vi for _, vi in reached], create_graph, strict,
                "jvp", against="output")
    return (_as_given(_finished(outputs, create_graph), out_tuple),
            _as_given(_finished(Jv, create_graph), out_tuple))


def _scalar_output(func, inputs, fn):
    outputs, _ = _outputs(func, inputs, fn)
    if len(outputs) != 1 or outputs[0].size != 1:
        raise RuntimeError(f"{fn}: the function must return a single Tensor with a single "
                           f"element, got shapes {[tuple(o.shape) for o in outputs]}")
    return outputs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H): the vector-Hessian product of a scalar function."""
    inputs, in_tuple = _inputs(inputs, create_graph, "vhp")
    out = _scalar_output(func, inputs, "vhp")
    v = _vectors(v, inputs, "input", "vhp")
    g = _grads((out,), inputs, (Tensor(out.data * 0 + 1),), True, strict, "vhp")
    reached = [(gi, vi) for gi, vi in zip(g, v) if gi.requires_grad]
    h = _grads([gi for gi, _ in reached], inputs, [vi for _, vi in reached], create_graph,
               strict, "vhp")
    return out if create_graph else out.detach(), _as_given(_finished(h, create_graph), in_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v), as torch's: the vhp of the gradient's vjp (H v = (v^T H^T)^T, the
    same as vhp's for a twice continuously differentiable function, whose H is symmetric)."""
    inputs, in_tuple = _inputs(inputs, create_graph, "hvp")
    out = _scalar_output(func, inputs, "hvp")
    v = _vectors(v, inputs, "input", "hvp")
    g = _grads((out,), inputs, (Tensor(out.data * 0 + 1),), True, strict, "hvp")
    u = tuple(Tensor(t.data * 0).requires_grad_(True) for t in inputs)
    reached = [(gi, ui) for gi, ui in zip(g, u) if gi.requires_grad]
    back = _grads([gi for gi, _ in reached], inputs, [ui for _, ui in reached], True, strict,
                  "hvp")
    used = [(bi, vi) for bi, vi in zip(back, v) if bi.requires_grad]
    Hv = _grads([bi for bi, _ in used], u, [vi for _, vi in used], create_graph, strict, "hvp")
    return out if create_graph else out.detach(), _as_given(_finished(Hv, create_graph),
                                                            in_tuple)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of func at inputs: for output i and input j, a Tensor of shape
    outputs[i].shape + inputs[j].shape, nested as torch's (a Tensor for one output and one
    input; a tuple over the tuple side; a tuple of tuples, outputs first, for two). One
    backward pass per output element (vectorize= gives the same values here)."""
    from . import functional as F
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: '
                         'If your function has more outputs than inputs, "forward-mode" tends to '
                         'be more performant. Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        return _forward_jacobian(func, inputs, create_graph, strict, vectorize)
    inputs, in_tuple = _inputs(inputs, create_graph, "jacobian")
    outputs, out_tuple = _outputs(func, inputs, "jacobian")
    rows = []
    for out in outputs:
        flat = F.reshape(out, (-1,))
        per_input = [[] for _ in inputs]
        for k in range(flat.shape[0]):
            one = Tensor(flat.data * 0)
            one.data[k] = 1
            for j, g in enumerate(_grads((flat,), inputs, (one,), create_graph, strict,
                                         "jacobian")):
                per_input[j].append(g)
        rows.append(tuple(_block(gs, 0, out, x) for gs, x in zip(per_input, inputs)))
    rows = [_finished(r, create_graph) for r in rows]
    if out_tuple:
        return tuple(_as_given(r, in_tuple) for r in rows)
    return _as_given(rows[0], in_tuple)


def _block(pieces, axis, out, x):
    """The Jacobian block of output `out` in input `x` (shape out.shape + x.shape): its rows
    (axis 0: reverse mode) or columns (axis -1: forward mode) stacked, or zeros for none."""
    from . import functional as F
    shape = tuple(out.shape) + tuple(x.shape)
    if not pieces:
        return Tensor(xp_of(x.data).zeros(shape, x.dtype))
    return F.reshape(F.stack(pieces, axis), shape)


def _forward_jacobian(func, inputs, create_graph, strict, vectorize):
    """jacobian(strategy='forward-mode'): a column J e_k per input element k, each a jvp (the
    vjp of the vjp, as jvp's) from one forward and one vjp graph; torch's refusals (its
    forward mode wants vectorize=True, and neither create_graph nor strict)."""
    from . import functional as F
    if create_graph:
        raise NotImplementedError('torch.autograd.functional.jacobian: `create_graph=True` and '
                                  '`strategy="forward-mode"` are not supported together (yet). '
                                  'Please either set `create_graph=False` or `strategy='
                                  '"reverse-mode"`.')
    if strict:
        raise RuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy='
                           '"forward-mode"` are not supported together (yet). Please either '
                           'set `strict=False` or `strategy="reverse-mode"`.')
    if not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse "
                                  "Hessian is only implemented for `vectorize=True`.")
    inputs, in_tuple = _inputs(inputs, False, "jacobian")
    outputs, out_tuple = _outputs(func, inputs, "jacobian")
    u = tuple(Tensor(o.data * 0).requires_grad_(True) for o in outputs)
    g = _grads(outputs, inputs, u, True, False, "jacobian")
    columns = [[[] for _ in inputs] for _ in outputs]         # [output][input]: J e_k, by k
    for j, x in enumerate(inputs):
        for k in range(x.size):
            e = Tensor(x.data.reshape(-1) * 0)
            e.data[k] = 1
            reached = [gi for gi in (g[j],) if gi.requires_grad]
            Jv = _grads(reached, u, [F.reshape(e, x.shape)] * len(reached), False, False,
                        "jacobian", against="output")
            for i in range(len(outputs)):
                columns[i][j].append(Jv[i])
    rows = []
    for i, out in enumerate(outputs):
        rows.append(tuple(_block(cs, -1, out, x) for cs, x in zip(columns[i], inputs)))
    # (torch's forward mode gives lists where the inputs are a tuple: its nesting, its types)
    rows = [list(r) if in_tuple else r[0] for r in (_finished(r, False) for r in rows)]
    if out_tuple:
        return list(rows) if in_tuple else tuple(rows)
    return rows[0]


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar function: the Jacobian of its gradient (a Tensor of shape
    inputs.shape * 2 for one input; a tuple of tuples [i][j] for several)."""
    _, in_tuple = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*xs):
        out = _scalar_output(func, xs, "hessian")
        g = _grads((out,), xs, (Tensor(out.data * 0 + 1),), True, strict, "hessian")
        return g if in_tuple else g[0]
    return jacobian(gradient, inputs, create_graph, strict, vectorize, outer_jacobian_strategy)

"""torch.autograd's grad(): gradients of outputs with respect to chosen inputs, returned rather
than added into .grad. Same engine as Tensor.backward (layers.tensor.run_backward), run in its
capture mode: no .grad changes (a retain_grad tensor's aside, as torch's), a non-leaf input's
gradient is taken as it reaches the op that made it (before its own hooks), a leaf input's after
its hooks -- torch's order.

create_graph=True (here and in Tensor.backward) runs the second engine below, backward_graph:
the same walk, consumers before producers, but every gradient is a Tensor that each op's
backward_graph makes from differentiable ops, so the gradients have a graph of their own and
can be differentiated again (a gradient penalty, a Hessian-vector product). It is written for
the ops listed in docs/from_pytorch.md; any other op refuses it by name."""
import sys

from .backend import xp_of
from .tensor import (Tensor, _accumulate, _capture_outputs, _check_runnable, _free, _hooked,
                     _leading_to, _topological_order, enable_grad, run_backward)

__all__ = ["grad", "backward", "functional"]


def _tensors(name, value):
    if isinstance(value, Tensor):
        return [value]
    value = list(value)
    for v in value:
        if not isinstance(v, Tensor):
            raise TypeError(f"grad(): {name} must be Tensors, got {type(v).__name__}")
    return value


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: the sum over `tensors` of d(tensor)/d(leaf), each weighted by its
    gradient (None: implied, for one-element tensors), accumulated into the leaves' .grad in one
    run of the engine (a tensor reached from two of them has its hooks run once, on the sum).
    inputs: only those tensors' .grad are accumulated into -- a non-leaf's too, after its
    hooks, as retain_grad keeps it -- and only the ops leading to them run; one of them no
    tensor depends on keeps its .grad. retain_graph defaults to create_graph."""
    tensors = _tensors("tensors", tensors)
    grads = [None] * len(tensors) if grad_tensors is None else \
        [grad_tensors] if isinstance(grad_tensors, Tensor) else list(grad_tensors)
    if len(grads) != len(tensors):
        raise ValueError(f"autograd.backward: {len(grads)} grad_tensors for {len(tensors)} "
                         f"tensors")
    if inputs is not None:
        inputs = _tensors("inputs", inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        for i, t in enumerate(inputs):
            if not t.requires_grad:
                raise RuntimeError(f"backward(): inputs[{i}] (shape {t.shape}) does not require "
                                   f"grad")
    roots = [(t, t._root_gradient(g)) for t, g in zip(tensors, grads)]
    keep = create_graph if retain_graph is None else retain_graph
    capture = None if inputs is None else {id(t): [t, None] for t in inputs}
    # a non-leaf input keeps its gradient as retain_grad does, after its hooks, and retains
    # it from then on (torch's)
    retaining = [] if inputs is None else [t for t in inputs if t._ctx is not None]
    for t in retaining:
        t.retain_grad()
    if create_graph:
        backward_graph([(t, root_gradient(given, g, t.dtype)) for t, (g, given) in roots],
                       bool(keep), capture)
    else:
        _backward_arrays([(t, g) for t, (g, _) in roots], bool(keep), capture)
    if capture is None:
        return
    for t, g in capture.values():                # the leaves asked for, after their hooks
        if g is not None and t._ctx is None:
            if create_graph:
                _add_to_grad(t, g)
            else:
                _accumulate(t, g)


def _backward_arrays(roots, retain_graph, capture):
    """The first-order engine from roots [(Tensor, gradient array)], leaves among them; with
    `capture`, each captured leaf's hooks then run on its whole gradient, after the walk (as
    torch's: the engine's capture mode leaves them to its caller)."""
    run_backward(roots, retain_graph, capture)
    if capture is not None:
        for entry in capture.values():
            if entry[1] is not None and entry[0]._ctx is None:
                entry[1] = _hooked(entry[0], entry[1])


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """A tuple, one gradient per input: the sum over `outputs` of d(output)/d(input) weighted by
    `grad_outputs` (None: ones, for one-element outputs only). The graph is freed unless
    retain_graph. An input no output depends on is an error unless allow_unused (None
    returned for it, or zeros with materialize_grads), as torch's."""
    if not only_inputs:            # (torch's deprecated argument: ignored, as torch ignores it)
        import warnings
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True), as torch's", stacklevel=2)
    if is_grads_batched:
        return _batched(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                        materialize_grads)
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("grad(): materialize_grads=True needs allow_unused=True (or None)")
    outputs, inputs = _tensors("outputs", outputs), _tensors("inputs", inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    else:
        grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad(): {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad(): input {i} (shape {t.shape}) does not require grad")
    roots = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if not out.requires_grad:
            raise RuntimeError(f"grad(): output {i} (shape {out.shape}) does not require grad "
                               f"(no input of its graph requires grad)")
        if g is None:
            if out.data.size != 1:
                raise RuntimeError(f"grad(): output {i} has shape {out.shape}: a gradient can "
                                   f"be implied only for one-element outputs (give "
                                   f"grad_outputs)")
            g = xp_of(out.data).ones_like(out.data)
        else:
            given = g
            g = g.data if isinstance(g, Tensor) else g
            if tuple(g.shape) != tuple(out.shape):
                raise RuntimeError(f"grad(): grad_outputs[{i}] has shape {tuple(g.shape)}, "
                                   f"output {i} has {out.shape}")
            if create_graph:
                g = root_gradient(given, g, out.dtype)
            elif g.dtype != out.dtype:
                g = g.astype(out.dtype)
        roots.append((out, Tensor(g) if create_graph and not isinstance(g, Tensor) else g))
    capture = {id(t): [t, None] for t in inputs}
    if create_graph:
        backward_graph(roots, retain_graph is not False, capture)
        return _results(inputs, capture, allow_unused, materialize_grads, copy=False)
    _backward_arrays(roots, bool(retain_graph), capture)
    return _results(inputs, capture, allow_unused, materialize_grads, copy=True)


def _batched(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
             materialize_grads):
    """grad(is_grads_batched=True): each grad_output's first axis is a batch of weightings; a
    gradient per entry, stacked on a first axis of the result (torch's vmap over the backward:
    here one backward per entry, the graph kept until the last)."""
    outputs = _tensors("outputs", outputs)
    gos = [grad_outputs] if grad_outputs is None or isinstance(grad_outputs, Tensor) \
        else list(grad_outputs)
    if len(gos) != len(outputs):
        raise ValueError(f"grad(): {len(gos)} grad_outputs for {len(outputs)} outputs")
    sizes = []
    for i, (out, g) in enumerate(zip(outputs, gos)):
        if g is None or len(g.shape) == 0 or tuple(g.shape[1:]) != tuple(out.shape):
            raise RuntimeError(
                f"If `is_grads_batched=True`, we interpret the first dimension of each "
                f"grad_output as the batch dimension. The sizes of the remaining dimensions are "
                f"expected to match the shape of corresponding output, but a mismatch was "
                f"detected: grad_output[{i}] has a shape of "
                f"{None if g is None else tuple(g.shape)} and output[{i}] has a shape of "
                f"{tuple(out.shape)}.")
        sizes.append(g.shape[0])
    if len(set(sizes)) > 1 or not sizes[0]:
        raise ValueError(f"grad(is_grads_batched=True): the grad_outputs' batch sizes are "
                         f"{sizes}; expected one size, at least 1 (torch's vmap)")
    n = sizes[0]
    per = [grad(outputs, inputs, [g[b] for g in gos],
                retain_graph=True if b < n - 1 else retain_graph, create_graph=create_graph,
                allow_unused=allow_unused or materialize_grads)
           for b in range(n)]
    from .functional import stack
    result = []
    for t, column in zip(_tensors("inputs", inputs), zip(*per)):
        if column[0] is not None:
            result.append(stack(list(column), 0) if create_graph else
                          Tensor(xp_of(column[0].data).stack([c.data for c in column])))
        elif materialize_grads:       # (torch's: the input's zeros, no batch axis)
            result.append(Tensor(xp_of(t.data).zeros_like(t.data), requires_grad=create_graph))
        else:
            result.append(None)
    return tuple(result)


def root_gradient(given, array, dtype):
    """create_graph's gradient of an output: the Tensor given (its own graph followed too), cast
    to the output's dtype by a differentiable cast; an array (or None: `array`, the ones made
    for it) as a constant Tensor."""
    if isinstance(given, Tensor):
        return given if given.dtype == dtype else given.to(dtype)
    return Tensor(array.astype(dtype, copy=False))


def _results(inputs, capture, allow_unused, materialize_grads, copy):
    """grad()'s tuple: each input's captured gradient (a copy of an array: the engine may hand
    one array to several inputs, x + y, or pass a grad_output through as it is; create_graph's
    Tensors as they are, their graph being the point), or None / zeros for an unused input
    (zeros that require grad with create_graph, as torch's)."""
    result = []
    for i, t in enumerate(inputs):
        g = capture[id(t)][1]
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"grad(): input {i} (shape {t.shape}) was not used in the "
                                   f"graph of the outputs; pass allow_unused=True if that is "
                                   f"meant")
            result.append(Tensor(xp_of(t.data).zeros_like(t.data), requires_grad=not copy)
                          if materialize_grads else None)
        elif copy:
            result.append(Tensor(g.astype(t.dtype, copy=True)))
        else:
            result.append(g)
    return tuple(result)


# ---- create_graph: the differentiable engine ----------------------------------------------------

def backward_graph(roots, retain_graph=True, capture=None, stop=False):
    """The backward engine of create_graph=True. roots: [(Tensor, its gradient as a Tensor)].
    As tensor.run_backward, each op runs once, consumers before producers -- its backward_graph,
    under enable_grad, so what it computes is recorded -- and each input's gradient Tensor is
    summed for the op that made it or handed to a leaf: added out of place into the leaf's
    .grad (after the leaf's hooks), or, with `capture` (autograd.grad), into its entry there,
    other leaves dropped. Output hooks and retain_grad see Tensors. The graph is freed as it
    goes unless retain_graph. stop (a composite's engine, composite_grads): the captured
    Tensors are where the walk ends, their makers not followed and no hook of theirs run (the
    outer engine runs them); their gradient is the partial one, through the composite alone."""
    if not stop:
        from .finite import active as finite_check
        if finite_check.check is not None:     # (its queued output checks run first, as
            finite_check.check.flush()         # tensor.run_backward's)
    order = _topological_order(*(t._ctx for t, _ in roots if t._ctx is not None),
                               stop=capture if stop else None)
    pending, leaves = {}, {}
    for t, g in roots:
        if t._ctx is None:                      # a root that is itself a leaf
            _to_leaf(t, g, capture, leaves)
            continue
        slot = pending.setdefault(t._ctx, [None] * t._ctx.n_outputs)
        slot[t._index] = g if slot[t._index] is None else slot[t._index] + g
    captured_outputs = {}
    needed = None
    if capture is not None and not stop:
        for entry in capture.values():
            if entry[0]._ctx is not None:
                captured_outputs.setdefault(entry[0]._ctx, []).append((entry[0]._index, entry))
        needed = _leading_to(order, capture)
    with enable_grad():
        for fn in reversed(order):
            grads = pending.pop(fn, None)
            if grads is None:
                continue
            entries = captured_outputs.get(fn)
            if needed is not None and fn not in needed:
                if entries:
                    if fn.hooked is not None:
                        _output_hooks(fn, grads)         # (every output's, as torch's)
                    _capture_outputs(grads, entries)
                continue
            _check_runnable(fn, inputs=True)
            if entries:
                _capture_outputs(grads, entries)
            if fn.hooked is not None:
                _output_hooks(fn, grads)
            gxs = fn.backward_graph(*grads)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for t, gx in zip(fn.inputs, gxs):
                if gx is None or not isinstance(t, Tensor) or not t.requires_grad:
                    continue
                if not isinstance(gx, Tensor):
                    raise TypeError(f"{type(fn).__name__}.backward_graph returned a "
                                    f"{type(gx).__name__}, not a Tensor")
                if gx.shape != t.shape:
                    raise RuntimeError(f"{type(fn).__name__}.backward_graph returned a gradient "
                                       f"of shape {gx.shape} for an input of shape {t.shape}")
                if gx.dtype != t.dtype:
                    gx = gx.to(t.dtype)
                if t._ctx is None or (stop and id(t) in capture):
                    _to_leaf(t, gx, capture, leaves, hooks=not stop)
                    continue
                slot = pending.setdefault(t._ctx, [None] * t._ctx.n_outputs)
                held = slot[t._index]
                slot[t._index] = gx if held is None else held + gx
            if not retain_graph:
                _free(fn)
        for t, g in leaves.values():           # each leaf's summed gradient, after its hooks
            if t._hooks:
                g = _hooked_tensor(t._hooks, g, t.shape)
            if capture is not None:
                _add_into(capture[id(t)], g)
            else:
                _add_to_grad(t, g)


def _add_to_grad(t, g):
    """g into t.grad as torch's create_graph accumulates: the first a copy laid out as t (a
    gradient may be shared -- x + y hands one to both -- or a broadcast view), later ones
    added out of place."""
    from .backend import is_channels_last
    from .functional import clone
    if t.grad is not None:
        t.grad = t.grad + g
    else:
        t.grad = clone(g, "channels_last" if t.ndim == 4 and is_channels_last(t.data) else
                       "contiguous")


def _to_leaf(t, g, capture, leaves, hooks=True):
    """A leaf's gradient Tensor: into its capture entry, or kept in `leaves` -- for its hooks to
    see the sum, and, without capture, to add into .grad once, summed (out of place, as torch's
    create_graph accumulates; tensor._to_leaf's order)."""
    if capture is not None and id(t) not in capture:
        return                                 # (autograd.grad: a leaf not asked for)
    if (hooks and t._hooks) or capture is None:
        held = leaves.get(id(t))
        leaves[id(t)] = (t, g if held is None else held[1] + g)
    elif capture is not None:
        _add_into(capture[id(t)], g)
    else:
        _add_to_grad(t, g)


def _add_into(entry, g):
    entry[1] = g if entry[1] is None else entry[1] + g


def _hooked_tensor(hooks, g, shape):
    """g after each hook of `hooks` ([(handle, function)]), Tensors in and out."""
    for _, hook in list(hooks):
        out = hook(g)
        if out is None:
            continue
        if not isinstance(out, Tensor) or out.shape != g.shape or out.dtype != g.dtype:
            raise RuntimeError(f"a hook of a tensor of shape {shape} returned "
                               f"{type(out).__name__} {getattr(out, 'shape', '')} "
                               f"{getattr(out, 'dtype', '')}: expected a Tensor of shape "
                               f"{g.shape} and dtype {g.dtype}")
        g = out
    return g


def _output_hooks(fn, grads):
    """The hooks and retain_grad of fn's outputs on their gradient Tensors (tensor's
    _run_output_hooks, create_graph's way: a retained .grad is the Tensor itself)."""
    for index, (ref, hooks) in fn.hooked.items():
        g = grads[index]
        if g is None:
            continue
        t = ref()
        g = grads[index] = _hooked_tensor(hooks, g, None if t is None else t.shape)
        if t is not None and t._retains_grad:
            _add_to_grad(t, g)


def composite_grads(fn, grads):
    """Function.backward_graph of an op that sets `composite`: its forward recomputed in other
    differentiable ops from its own input Tensors, and that graph differentiated by
    backward_graph, stopping at those inputs -- each input's gradient through this op alone,
    with a graph back to the inputs (and to `grads`)."""
    outs = fn.composite(*fn.inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    roots = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
    wanted = [t for t, need in zip(fn.inputs, fn.needs_input_grad)
              if need and isinstance(t, Tensor)]
    capture = {id(t): [t, None] for t in wanted}
    if roots:
        backward_graph(roots, True, capture, stop=True)
    result, given = [], set()
    for t in fn.inputs:               # (a Tensor given twice, x * x: its whole gradient once)
        entry = capture.get(id(t)) if isinstance(t, Tensor) and id(t) not in given else None
        given.add(id(t))
        result.append(None if entry is None else entry[1])
    return tuple(result)


from . import autograd_functional as functional  # noqa: E402  (torch.autograd.functional)
sys.modules[__name__ + ".functional"] = functional

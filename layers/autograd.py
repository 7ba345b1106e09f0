"""torch.autograd's grad(): gradients of outputs with respect to chosen inputs, returned rather
than added into .grad. Same engine as Tensor.backward (layers.tensor.run_backward), run in its
capture mode: no .grad changes (a retain_grad tensor's aside, as torch's), a non-leaf input's
gradient is taken as it reaches the op that made it (before its own hooks), a leaf input's after
its hooks -- torch's order. create_graph (a differentiable gradient, for double backward) is not
done here."""
from .backend import xp_of
from .tensor import Tensor, _hooked, run_backward

__all__ = ["grad"]


def _tensors(name, value):
    if isinstance(value, Tensor):
        return [value]
    value = list(value)
    for v in value:
        if not isinstance(v, Tensor):
            raise TypeError(f"grad(): {name} must be Tensors, got {type(v).__name__}")
    return value


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """A tuple, one gradient per input: the sum over `outputs` of d(output)/d(input) weighted by
    `grad_outputs` (None: ones, for one-element outputs only). The graph is freed unless
    retain_graph. An input no output depends on is an error unless allow_unused (None
    returned for it, or zeros with materialize_grads), as torch's."""
    if create_graph:
        raise NotImplementedError("grad(create_graph=True): a differentiable gradient (double "
                                  "backward) is not done here")
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not done here")
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
            g = g.data if isinstance(g, Tensor) else g
            if tuple(g.shape) != tuple(out.shape):
                raise RuntimeError(f"grad(): grad_outputs[{i}] has shape {tuple(g.shape)}, "
                                   f"output {i} has {out.shape}")
            if g.dtype != out.dtype:
                g = g.astype(out.dtype)
        roots.append((out, g))
    capture = {id(t): [t, None] for t in inputs}
    for out, g in roots:
        if out._ctx is None:                # an output that is itself a leaf input
            entry = capture.get(id(out))
            if entry is not None:
                entry[1] = g if entry[1] is None else entry[1] + g
    graph_roots = [(out, g) for out, g in roots if out._ctx is not None]
    if graph_roots:
        run_backward(graph_roots, bool(retain_graph), capture)
    for entry in capture.values():               # a leaf's hooks run on its whole gradient
        t, g = entry
        if g is not None and t._ctx is None:
            entry[1] = _hooked(t, g)
    result = []
    for i, t in enumerate(inputs):
        g = capture[id(t)][1]
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"grad(): input {i} (shape {t.shape}) was not used in the "
                                   f"graph of the outputs; pass allow_unused=True if that is "
                                   f"meant")
            result.append(Tensor(xp_of(t.data).zeros_like(t.data)) if materialize_grads
                          else None)
        else:
            # a copy: the engine may hand one array to several inputs (x + y), or pass a
            # grad_output through as it is
            result.append(Tensor(g.astype(t.dtype, copy=True)))
    return tuple(result)

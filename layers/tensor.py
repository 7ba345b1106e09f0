"""Tensor, Function and the backward pass (define-by-run, micrograd-shaped).

A Function's forward runs on arrays (`forward_cpu` with NumPy, `forward_gpu` with cuDNN/CuPy,
or one `forward` written for both via `xp`); its `backward` takes the output gradients as arrays
and returns one gradient (or None) per input. `backward()` is a topological sort and nothing else.
"""
import functools
import inspect
import itertools
import operator
import threading
import weakref

import numpy as np

from .backend import (addable, bfloat16, concatenate, default_complex, default_float,
                      device_of, dtype_or_none, fit_integers, fit_value, from_foreign,
                      is_floating, is_gpu, is_half, np_dtype, parse_device, to_device, xp_of,
                      xp_of_gpu)
from . import changes as _record
from .trace import active as _trace


class _GradMode(threading.local):
    enabled = True          # per thread, as torch: no_grad() in one thread leaves others recording


_grad_mode = _GradMode()
_sequence = itertools.count(1)      # Function.seq: the order ops were recorded in


class _GradModeSwitch:
    """Grad mode `mode` inside a `with` block, in this thread (torch's no_grad / enable_grad):
    also a decorator -- `@no_grad()` or `@no_grad` -- of a function, or of a generator function,
    whose body then runs in that mode each time it resumes (the caller's mode in between)."""
    mode = None

    def __new__(cls, func=None):
        self = super().__new__(cls)
        return self if func is None else self(func)

    def __init__(self, func=None):
        self._saved = []

    def __enter__(self):
        self._saved.append(_grad_mode.enabled)
        _grad_mode.enabled = self.mode

    def __exit__(self, *exc):
        _grad_mode.enabled = self._saved.pop()

    def __call__(self, fn):
        switch = self._switch

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def generator(*args, **kwargs):
                gen = fn(*args, **kwargs)
                try:
                    with switch():
                        response = gen.send(None)
                    while True:
                        try:
                            request = yield response
                        except GeneratorExit:
                            with switch():
                                gen.close()
                            raise
                        except BaseException as e:
                            with switch():
                                response = gen.throw(e)
                        else:
                            with switch():
                                response = gen.send(request)
                except StopIteration as stop:       # (its return value is this one's)
                    return stop.value
            return generator

        @functools.wraps(fn)
        def function(*args, **kwargs):
            with switch():
                return fn(*args, **kwargs)
        return function

    def _switch(self):
        return type(self)()


class no_grad(_GradModeSwitch):
    """Record no graph inside the block (evaluation, optimizer updates), in this thread."""
    mode = False


class inference_mode(_GradModeSwitch):
    """torch.inference_mode: no_grad here (this engine makes no inference tensors);
    inference_mode(False) records graphs, as torch's (its grad mode is `not mode`)."""

    def __new__(cls, mode=True):
        return super().__new__(cls, mode if callable(mode) else None)   # (bare decorator)

    def __init__(self, mode=True):
        super().__init__()
        self.mode = not (callable(mode) or bool(mode))

    def _switch(self):
        return type(self)(not getattr(self, "mode", False))   # (a bare decorator's: made, not set)


class enable_grad(_GradModeSwitch):
    """Record graphs inside the block, even within no_grad(), in this thread."""
    mode = True


class set_grad_enabled(_GradModeSwitch):
    """torch.set_grad_enabled(mode): sets the mode at once (a call on its own switches it), and
    as a `with` block or a decorator restores the one before after."""

    def __new__(cls, mode):
        return super().__new__(cls)

    def __init__(self, mode):
        super().__init__()
        self.mode = bool(mode)
        self._saved.append(_grad_mode.enabled)
        _grad_mode.enabled = self.mode

    def __enter__(self):
        pass                                    # (switched when made)

    def __exit__(self, *exc):
        if self._saved:
            _grad_mode.enabled = self._saved.pop()

    def __call__(self, fn):
        self.__exit__()                         # (a decorator: the mode made is put back)
        return super().__call__(fn)

    def _switch(self):
        return _Switched(self.mode)


class _Switched(_GradModeSwitch):
    """set_grad_enabled's decorator form: each call (or resume) in that mode."""

    def __new__(cls, mode):
        return super().__new__(cls)

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def _switch(self):
        return _Switched(self.mode)


def is_grad_enabled():
    return _grad_mode.enabled


class _Added:
    """What an op's backward returns for an input whose gradient it has added into that leaf's
    existing .grad itself (Function.grad_into)."""

    def __repr__(self):
        return "ADDED"


ADDED = _Added()


class Function:
    """One differentiable op. Subclasses set `forward_cpu`/`forward_gpu` (or `forward`) and
    `backward`; `self.saved` holds what backward needs; `self.needs_input_grad` says which inputs
    want a gradient (return None for the others).

    An op on the GPU whose class sets `adds_into_grad` is handed, before its backward runs,
    `grad_into`: per input, the array of that leaf's .grad where the leaf has one already (a
    second backward into the same parameters: DCGAN's discriminator, three a step), else None.
    Its backward may add an input's gradient straight into that array -- a GEMM's or cuDNN's
    beta = 1, no gradient array made, no addition launched after -- and return ADDED for it; or
    ignore it."""
    inputs = None          # the input Tensors (or constants), dropped after backward
    adds_into_grad = False
    grad_into = None
    half = None            # float16 / bfloat16 when the NumPy path runs it in float32 (_half_of)
    saved = None           # what backward reads: only what the wanted gradients need (an
                           # in-place change to memory no backward reads refuses nothing)
    needs_input_grad = None    # per input, set before forward when a graph is recorded
    kept = ()              # attributes besides `saved` holding arrays backward reads (GetItem's
                           # index): an in-place change to them refuses the backward too
    stamp = 0              # the in-place-change clock when its forward ran (layers.changes)
    seq = 0                # recorded ops are numbered in the order they ran (backward's order)
    upcast_half = True     # False: the op handles half data itself (a cast)
    n_outputs = 1
    links = ()             # after backward freed `inputs`: (weak ref to each input Tensor, the
                           # op that made it), the graph's shape without its arrays
    hooked = None          # {output index: (weak ref to the Tensor, its hook list)} for
                           # outputs with hooks or retain_grad (hooks live on as torch's do on
                           # grad_fn; the Tensor is not kept alive by its own op)

    def __init__(self, **params):
        self.__dict__.update(params)

    gpu = False            # where the inputs live; set by apply before forward runs

    @property
    def xp(self):
        return xp_of_gpu(self.gpu)

    def forward(self, *arrays):
        if self.gpu:
            return self.forward_gpu(*arrays)
        return self.forward_cpu(*arrays)

    def forward_cpu(self, *arrays):
        raise NotImplementedError

    def forward_gpu(self, *arrays):
        raise NotImplementedError

    def backward(self, *grads):
        raise NotImplementedError

    composite = None       # (*input Tensors) -> output Tensor(s): the op spelled in other ops

    def backward_graph(self, *grads):
        """create_graph's backward (layers.autograd): the input gradients as Tensors made by
        differentiable ops from `grads` (Tensors; None for an output no gradient reached) and
        `self.inputs`, so that they can be differentiated again. An op either writes it, or
        sets `composite`, its forward spelled in other differentiable ops, whose graph the
        engine then differentiates (a recomputation, for ops whose second derivative would
        be long to write: losses, normalisations). Any other op refuses double backward."""
        if self.composite is None:
            raise NotImplementedError(
                f"{type(self).__name__}: no double backward (create_graph=True) is written for "
                f"this op")
        from .autograd import composite_grads
        return composite_grads(self, grads)

    @classmethod
    def apply(cls, *inputs, **params):
        fn = cls(**params)
        arrays = []
        first = None
        needs = False
        for t in inputs:
            if isinstance(t, Tensor):
                a = t.data
                if first is None:
                    first, gpu = t, is_gpu(a)
                    device = a.device.id if gpu else None
                elif is_gpu(a) != gpu or (gpu and a.device.id != device):
                    raise RuntimeError(
                        f"{cls.__name__}: inputs on different devices: {first.device} "
                        f"(shape {first.shape}) and {t.device} (shape {t.shape})")
                arrays.append(a)
                if t.requires_grad:
                    needs = True
            else:
                arrays.append(t)
        if first is None:
            raise TypeError(f"{cls.__name__}: at least one input must be a Tensor")
        fn.gpu = gpu
        half = None if fn.gpu or not fn.upcast_half else _half_of(inputs)
        if half is not None:              # the NumPy path computes half data in float32
            fn.half = half
            arrays = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == half
                      else a for a in arrays]
        needs = needs and _grad_mode.enabled
        if needs:
            fn.needs_input_grad = tuple(isinstance(t, Tensor) and t.requires_grad for t in inputs)
            fn.stamp = _record.clock
            fn.seq = next(_sequence)
        trace = _trace.trace
        if trace is None and fn.gpu:
            out = fn.forward(*arrays)
        elif trace is None:
            with np.errstate(all="ignore"):  # NaN / inf as they come, without NumPy's warnings
                out = fn.forward(*arrays)    # (torch gives none; layers.finite finds them)
        else:
            trace.open("fprop", cls.__name__, arrays=arrays)
            fn.layer = trace.layer           # its backward is credited to the same layer
            try:
                out = fn.forward(*arrays)
            finally:
                trace.close()
        if half is not None:
            out = _round_to(out, half)
        elif fn.gpu and first.data.dtype.itemsize == 2 and fn.upcast_half and \
                is_half(first.data.dtype):               # (float32 data: stops at the itemsize)
            out = _keep_half(out, first.data.dtype, inputs)
        if not isinstance(out, tuple):
            y = Tensor(out, requires_grad=needs)
            if needs:
                fn.inputs = inputs
                y._ctx = fn
            return y
        ys = tuple(Tensor(o, requires_grad=needs) for o in out)
        if needs:
            fn.inputs = inputs
            fn.n_outputs = len(ys)
            for i, y in enumerate(ys):
                y._ctx, y._index = fn, i
        return ys


def _half_of(inputs):
    """The half dtype (float16 / bfloat16) of an op whose floating Tensor inputs all have it, else
    None. The NumPy path runs such an op in float32 and rounds its results once, as cuDNN and
    cuBLAS compute half data (NumPy itself would sum bfloat16 in bfloat16: 10000 ones make 256).
    Ops that mix a half input with float32 parameters (batch norm) do their own upcasting."""
    half = None
    for t in inputs:
        if isinstance(t, Tensor) and is_floating(t.data.dtype):
            if not is_half(t.data.dtype) or (half is not None and t.data.dtype != half):
                return None
            half = t.data.dtype
    return half


def _round_to(out, half):
    """float32 results of an op run in float32 for `half` data, rounded to `half`."""
    if isinstance(out, tuple):
        return tuple(_round_to(o, half) for o in out)
    return out.astype(half) if out.dtype == np.float32 else out


def _keep_half(out, dtype, inputs):
    """On the GPU, an op on float16 / bfloat16 tensors gives float16 / bfloat16 too, as torch's
    ops do: a result CuPy widened (a bfloat16 array times a Python float may come out float32)
    is rounded back, when every floating Tensor input has `dtype`."""
    outs = out if isinstance(out, tuple) else (out,)
    if all(o.dtype == dtype or not is_floating(o.dtype) for o in outs):
        return out
    if any(isinstance(t, Tensor) and is_floating(t.dtype) and t.dtype != dtype for t in inputs):
        return out                           # a promotion between Tensors (as torch) stays
    outs = tuple(o.astype(dtype) if is_floating(o.dtype) and o.dtype.itemsize > 2 else o
                 for o in outs)
    return outs if isinstance(out, tuple) else outs[0]


_ARRAY_TYPES = {np.ndarray}     # array types a Tensor holds as they come (+ device arrays seen)


def _as_array(data, dtype):
    """What a Tensor of `data` holds: a NumPy or device array (a Tensor's own, a NumPy scalar's,
    a torch tensor's, one made of a list), in `dtype` when one is given."""
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, np.generic):            # NumPy reductions return scalars
        data = np.asarray(data)
    foreign = from_foreign(data)
    if foreign is data and is_gpu(data):
        _ARRAY_TYPES.add(type(data))            # (a torch tensor is never `foreign is data`)
    data = foreign
    if not (isinstance(data, np.ndarray) or is_gpu(data)):
        data = np.asarray(data, dtype=dtype or default_float())
    elif dtype is not None and data.dtype != dtype:
        data = data.astype(dtype)
    return data


class _Size(int):
    """Tensor.size: the element count, as NumPy's .size (an int); and called, torch's size():
    the shape, size(dim) one axis's length (x.view(x.size(0), -1))."""

    def __new__(cls, shape, count):
        self = super().__new__(cls, count)
        self.shape = tuple(shape)
        return self

    def __call__(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def __reduce__(self):            # (copied or pickled: the plain count)
        return int, (int(self),)


class Tensor:
    """An n-d array (NumPy or CuPy) that can record the ops applied to it. Its operators and
    array methods (+ - * / ** @ [], .sum(), .reshape(), .astype(), .T, ...) are spellings of
    layers.functional, which installs them: this module -- Tensor, Function and the backward
    engine -- imports no op (the way Chainer installs Variable's arithmetic)."""
    __slots__ = ("data", "grad", "_requires_grad", "_ctx", "_index", "_hooks", "_retains_grad",
                 "__weakref__")
    __array_priority__ = 1000    # so ndarray * Tensor defers to Tensor.__rmul__

    def __init__(self, data, requires_grad=False, dtype=None):
        if type(requires_grad) is int:          # (a bool is not: Tensor(3, 4) is torch's sizes)
            raise TypeError(f"Tensor({data!r}, {requires_grad!r}): torch's legacy size "
                            f"constructor is not taken here (Tensor(data, requires_grad)); use "
                            f"L.empty(...) / L.zeros(...) for a tensor of a size, L.tensor(data) "
                            f"for one of values")
        if dtype is not None or type(data) not in _ARRAY_TYPES:   # (else: an op's own result)
            data = _as_array(data, dtype)
        self.data = data
        self.grad = None
        self.requires_grad = requires_grad
        self._ctx = None
        self._index = 0
        self._hooks = None                 # register_hook's [(handle, function)], in order
        self._retains_grad = False

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        """As torch: only floating data can require gradients (an integer tensor's gradient
        would be truncated to integers), and only a leaf's flag can be turned off."""
        if flag and not is_floating(self.data.dtype):
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, "
                               f"got {self.data.dtype} (shape {self.data.shape}), as torch")
        if not flag and getattr(self, "_ctx", None) is not None:    # (its gradient would be
            raise RuntimeError(                                       # dropped silently)
                f"you can only change requires_grad flags of leaf variables (shape "
                f"{self.data.shape}), as torch; to use a computed tensor without its graph, "
                f"take y.detach()")
        self._requires_grad = bool(flag)

    # ---- array-like attributes ------------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: _Size(self.data.shape, self.data.size))
    device = property(lambda self: device_of(self.data))
    is_leaf = property(lambda self: self._ctx is None)

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        grad = ", requires_grad=True" if self.requires_grad else ""
        where = "" if self.device == "cpu" else f", device={self.device}"
        kind = "" if self.dtype in (default_float(), np.int64, np.bool_) else \
            f", dtype={self.dtype}"
        values = self.numpy()
        if is_half(values.dtype):               # (NumPy prints bfloat16 1.0 as "1")
            values = values.astype(np.float32)
        return (f"Tensor({np.array2string(values, precision=4, threshold=20)}{kind}{where}"
                f"{grad})")

    def numpy(self):
        """The values as a NumPy array (a device-to-host copy for GPU data, stored as the data
        is: channels-last stays channels-last, as torch's .cpu().numpy())."""
        return to_device(self.data, "cpu")

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device=None, dtype=None, memory_format=None):
        """A copy on `device` ('cpu', 'cuda', 'cuda:1', an int), or self if already there --
        differentiable, as torch's: the gradient goes back to this tensor's device; a dtype in
        its place, or `dtype`, casts as astype does (torch's x.to(dtype): floating dtypes in the
        graph, integer / bool ones constants); a Tensor in its place gives its dtype and
        device; `memory_format` ('channels_last', 'contiguous') lays the result out so where
        its layout suggests another one (layers.functional.to_memory_format: a copy in the
        graph, as torch's)."""
        if isinstance(device, Tensor):              # torch's x.to(other): its dtype and device
            device, dtype = device.device, device.dtype
        elif dtype_or_none(device) is not None:
            device, dtype = None, device
        t = self if dtype is None else self.astype(dtype)      # (astype, _to_device -- an op --
        t = t if device is None else t._to_device(device)     # and _to_memory_format from
        return t if memory_format is None else t._to_memory_format(memory_format)  # functional)

    def float(self):
        return self.astype(np.float32)

    def double(self):
        return self.astype(np.float64)

    def long(self):
        return self.astype(np.int64)

    def int(self):
        return self.astype(np.int32)

    def bool(self):
        return self.astype(np.bool_)

    def bfloat16(self):
        return self.astype(bfloat16)

    def half(self):
        return self.astype(np.float16)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=0):
        return self.to(parse_device(device))

    def detach(self):
        """The same data, cut from the graph."""
        return Tensor(self.data)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    # ---- hooks (torch's tensor hooks and retain_grad) --------------------------------------
    def register_hook(self, hook):
        """hook(grad) runs when this tensor's gradient of a backward is complete (a Tensor: the
        sum over every use); it may return a Tensor of the same shape and dtype to use instead.
        A leaf's hooks run before the gradient is added into .grad. Returns a handle whose
        remove() takes the hook off, as torch's."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        self._hooked_by_its_op()
        handle = _HookHandle(self._hooks)
        self._hooks.append((handle, hook))
        return handle

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in .grad (summed over backward calls, as a
        leaf's); a leaf keeps its own already."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._ctx is not None:
            self._retains_grad = True
            self._hooked_by_its_op()

    @property
    def retains_grad(self):
        return self._retains_grad

    def _hooked_by_its_op(self):
        """A non-leaf's gradient is complete when the op that made it runs its backward: that op
        names it (Function.hooked) so the engine runs its hooks there. The hook list is one
        list, changed in place (a handle's remove() reaches the op's view of it too)."""
        if self._hooks is None:
            self._hooks = []
        if self._ctx is not None:
            if self._ctx.hooked is None:
                self._ctx.hooked = {}
            self._ctx.hooked[self._index] = (weakref.ref(self), self._hooks)

    # ---- backward -------------------------------------------------------------------------
    def backward(self, grad=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's .grad that requires_grad (with `inputs`,
        into those tensors' .grad only: layers.autograd.backward). create_graph: the gradients
        are Tensors with a graph of their own (each leaf's .grad then too, added out of place),
        for a second differentiation; the graph is kept unless retain_graph is False (as
        torch's)."""
        if inputs is not None:
            from .autograd import backward
            return backward([self], None if grad is None else [grad], retain_graph,
                            create_graph, inputs)
        grad, given = self._root_gradient(grad)
        if create_graph:
            from .autograd import backward_graph, root_gradient
            backward_graph([(self, root_gradient(given, grad, self.dtype))],
                           retain_graph is not False)
            return
        run_backward([(self, grad)], bool(retain_graph))      # (a leaf self: into its .grad)

    def _root_gradient(self, grad):
        """(the gradient array backward starts from at self -- `grad` checked against self, or
        ones for a one-element self --, `grad` as given)."""
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no input of "
                               "the graph has requires_grad=True; a gradient from "
                               "autograd.grad has a graph only with create_graph=True)")
        xp = xp_of(self.data)
        given = grad
        if grad is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward() on a non-scalar tensor of shape {self.shape} needs a gradient "
                    f"argument of that shape (grad can be implied only for scalar outputs)")
            grad = xp.ones_like(self.data)
        else:
            grad = grad.data if isinstance(grad, Tensor) else grad
            if grad.shape != self.shape:
                raise RuntimeError(f"backward(): gradient shape {grad.shape} does not match the "
                                   f"tensor's shape {self.shape}")
            if grad.dtype != self.dtype:           # (as torch: a gradient has its tensor's dtype)
                grad = grad.astype(self.dtype)
        return grad, given


def _to_leaf(t, g, own, leaves, capture):
    """A leaf's gradient array: into its capture entry (autograd.grad; a leaf not asked for:
    dropped), or kept in `leaves` ({id: [leaf, parts, own]}) until the walk ends, when the
    parts are summed and -- after its hooks, where it has some -- added into its .grad once, as
    torch's engine sums them before its AccumulateGrad ((p1 + p2) + ..., then into an existing
    .grad: the order shows in float16). own: the one part may become the .grad itself (Fresh;
    a sum of several always may)."""
    if capture is not None:
        entry = capture.get(id(t))
        if entry is not None:
            entry[1] = g if entry[1] is None else entry[1] + g
        return
    held = leaves.get(id(t))
    if held is None:
        leaves[id(t)] = [t, [g], own]
    else:
        held[1].append(g)


def run_backward(roots, retain_graph, capture=None):
    """The backward engine: from each (Tensor, its gradient array) of `roots`, every
    op's backward once, consumers before producers, each gradient handed on to the op that made
    its input or into a leaf's .grad. With `capture` ({id(tensor): [tensor, None]}: autograd.grad)
    no .grad changes: the gradients of those tensors are summed into their entries instead (a
    non-leaf's as it reaches the op that made it, before its hooks, a leaf's after its hooks,
    as torch's) and other leaves' are dropped."""
    from .finite import active as finite_check
    if finite_check.check is not None:     # its queued output checks run now (their arrays
        finite_check.check.flush()         # are alive: backward frees them as it goes)
    with np.errstate(all="ignore"):       # (as forward: no NumPy warnings, as torch)
        _run(roots, retain_graph, capture)


def _run(roots, retain_graph, capture):
    order = _topological_order(*(t._ctx for t, _ in roots if t._ctx is not None))
    deferred, leaves = {}, {}
    pending = {}
    for t, grad in roots:
        if t._ctx is None:                     # a root that is a leaf itself
            _to_leaf(t, grad, False, leaves, capture)
            continue
        slot = pending.setdefault(t._ctx, [None] * t._ctx.n_outputs)
        slot[t._index] = grad if slot[t._index] is None else slot[t._index] + grad
    captured_outputs = {}                # {op: [(output index, capture entry)]} (non-leaves)
    needed = None
    if capture is not None:
        for entry in capture.values():
            if entry[0]._ctx is not None:
                captured_outputs.setdefault(entry[0]._ctx, []).append((entry[0]._index, entry))
        needed = _leading_to(order, capture)
    for fn in reversed(order):
        grads = pending.pop(fn, None)
        if grads is None:
            continue
        if needed is not None and fn not in needed:
            # autograd.grad: an op no asked-for tensor lies behind does not run (as torch); one
            # that made an asked-for tensor gives it its gradient after that tensor's hooks
            # (torch's order where nothing behind it is asked for)
            entries = captured_outputs.get(fn)
            if entries:
                if fn.hooked is not None:
                    _run_output_hooks(fn, grads)         # (every output's, as torch's)
                _capture_outputs(grads, entries)
            continue
        _check_runnable(fn)
        if captured_outputs and fn in captured_outputs:
            _capture_outputs(grads, captured_outputs[fn])
        if fn.hooked is not None:              # its outputs' hooks, retain_grad
            _run_output_hooks(fn, grads)
        trace = _trace.trace
        if trace is None:
            _backward_one(fn, grads, pending, deferred, leaves, capture)
        else:
            trace.open("bprop", type(fn).__name__, getattr(fn, "layer", ""),
                       [t.data for t in fn.inputs if isinstance(t, Tensor)])
            try:
                _backward_one(fn, grads, pending, deferred, leaves, capture)
            finally:
                trace.close()
        if not retain_graph:
            _free(fn)
    if capture is not None:                    # (leaves' gradients went to capture, or nowhere:
        return                                 # autograd.grad runs their hooks)
    stacked = {}             # one row-stack per list of terms (a cell's W_ih, W_hh, b_ih and
    for leaf, parts in deferred.values():                   # b_hh share their dA's)
        trace = _trace.trace
        if trace is None:
            _accumulate_deferred(leaf, parts, stacked)
            continue
        layer, _, name = trace.param_path(leaf).rpartition(".")
        trace.open("bprop", f"WeightGrad({name})", layer, [leaf.data])
        try:
            _accumulate_deferred(leaf, parts, stacked)
        finally:
            trace.close()
    for leaf, parts, own in leaves.values():   # each leaf's summed gradient, after its hooks
        g = parts[0]
        for part in parts[1:]:
            g = g + part
        if leaf._hooks:
            _accumulate(leaf, _hooked(leaf, g))
        else:
            _accumulate(leaf, g, own or len(parts) > 1)


def _check_runnable(fn, inputs=False):
    """fn's backward can run: its graph was not freed, nothing it saved -- with `inputs`, nor
    its inputs (create_graph's backward_graph reads them) -- was changed in place since its
    forward."""
    if fn.inputs is None:
        raise RuntimeError("backward through a graph a second time: its saved arrays were "
                           "freed; call backward(retain_graph=True) the first time")
    if _record.clock != fn.stamp:          # something was changed in place since forward
        _record.refuse_changed(fn, inputs)


def _free(fn):
    """After fn's backward, without retain_graph: its inputs and saved arrays let go, the graph's
    shape kept (links: autograd.grad reads it)."""
    fn.links = _links(fn.inputs)
    fn.inputs = None
    fn.saved = None
    for name in fn.kept:                   # (what else it kept for backward: freed too)
        setattr(fn, name, None)


class _HookHandle:
    """register_hook's handle: remove() takes this registration off (the same function
    registered twice is two registrations, as torch's)."""

    def __init__(self, hooks):
        self._hooks = hooks

    def remove(self):
        for i, (handle, _) in enumerate(self._hooks):
            if handle is self:
                del self._hooks[i]
                return


def _hooked(t, g):
    """g after t's hooks, or g."""
    return _apply_hooks(t._hooks, g, t.shape) if t._hooks else g


def _apply_hooks(hooks, g, shape):
    """g after each hook of `hooks` ([(handle, function)]; each may return a replacement of g's
    shape and dtype)."""
    for _, hook in list(hooks):
        out = hook(Tensor(g))
        if out is None:
            continue
        out = out.data if isinstance(out, Tensor) else out
        if out.shape != g.shape or out.dtype != g.dtype:
            raise RuntimeError(f"a hook of a tensor of shape {shape} returned a gradient of "
                               f"shape {out.shape} and dtype {out.dtype}: expected "
                               f"{g.shape} and {g.dtype}")
        g = out
    return g


def _capture_outputs(grads, entries):
    """autograd.grad's non-leaf inputs made by this op: their gradients as they reach it."""
    for index, entry in entries:
        g = grads[index]
        if g is None:
            continue
        if isinstance(g, _DeferredSum):
            g = grads[index] = g.value()
        entry[1] = g if entry[1] is None else entry[1] + g


def _run_output_hooks(fn, grads):
    """The hooks and retain_grad of fn's outputs (Function.hooked), on their complete
    gradients, before fn's backward takes them."""
    for index, (ref, hooks) in fn.hooked.items():
        g = grads[index]
        if g is None:
            continue                     # (no gradient reached it: no hook runs, as torch)
        if isinstance(g, _DeferredSum):
            g = g.value()
        t = ref()
        g = grads[index] = _apply_hooks(hooks, g, None if t is None else t.shape)
        if t is not None and t._retains_grad:
            if t.grad is None:
                from .backend import copy_like
                t.grad = Tensor(copy_like(g, t.data))
            else:
                _graph_grad_changed(t)
                t.grad.data += g


class Fresh:
    """A gradient array an op's backward has just made and keeps no reference to (a cuDNN /
    cuBLAS output, a sum): for a leaf with no .grad yet, backward() makes it the .grad as it is,
    where another gradient is copied first (it may be shared: x + x hands gy to both inputs).
    torch's AccumulateGrad takes an unshared gradient the same way. `fresh(a)` wraps, None
    passes."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


def fresh(a):
    return a if a is None or a is ADDED else Fresh(a)


class Deferred:
    """A parameter's gradient a.T @ b (a (N, out), b (N, in); b None: a's column sums, a bias's
    gradient) that an op's backward may return instead of computing it. backward() keeps the
    Deferred of each leaf until its end, then sums them with one product of the row-stacked a's
    and b's: for a weight used once per decoder frame, one GEMM over every use instead of one
    per use plus an addition into .grad (less memory traffic, fewer launches). For an input that
    is not a leaf the terms are added up in float32 as they come (_DeferredSum) and rounded once
    when the op that made the input runs its backward."""
    __slots__ = ("a", "b")

    def __init__(self, a, b=None):
        self.a, self.b = a, b

    def value(self):
        from .ops.linalg import mm
        return _column_sums(self.a) if self.b is None else mm(self.a.T, self.b)


def _backward_one(fn, grads, pending, deferred, leaves, capture=None):
    """Run fn's backward and hand each input's gradient on: summed into `pending` for the op
    that made the input; a leaf's kept in `leaves` (_to_leaf), summed into its .grad at the
    end, after its hooks; a Deferred gradient of a leaf to `deferred`; with `capture`
    (autograd.grad) a leaf's gradient goes to its entry there, or nowhere."""
    grads = [g.value() if isinstance(g, _DeferredSum) else g for g in grads]
    half = fn.half
    if half is not None:                  # (see _half_of) its gradients too, in float32
        grads = [g.astype(np.float32) if g is not None and g.dtype == half else g
                 for g in grads]
    if fn.adds_into_grad and fn.gpu and capture is None:
        fn.grad_into = _grads_of_leaves(fn.inputs)
        try:
            gxs = fn.backward(*grads)
        finally:
            fn.grad_into = None          # (an op a Tensor still holds would keep the .grads)
    else:
        gxs = fn.backward(*grads)
    if not isinstance(gxs, tuple):
        gxs = (gxs,)
    for t, gx in zip(fn.inputs, gxs):
        own = type(gx) is Fresh          # an array no one else holds: a leaf may keep it
        if own:
            gx = gx.array
        if gx is ADDED:                  # already in t's .grad (Function.grad_into)
            continue
        if gx is None or not isinstance(t, Tensor) or not t.requires_grad:
            continue
        if isinstance(gx, Deferred):
            if t._ctx is None:
                if capture is not None and id(t) not in capture:
                    continue             # (autograd.grad: a leaf not asked for, dropped)
                if not t._hooks and capture is None:
                    deferred.setdefault((id(t), gx.b is None), (t, []))[1].append(gx)
                    continue
                gx = gx.value()          # (a leaf with hooks: its sum is handed to them)
            else:
                # an op's output used many times (Tacotron 2's location kernel, once a decoder
                # frame): its Deferred terms are added up in float32 as they come, rounded to
                # the tensor's dtype once, when the op that made it runs its backward
                slot = pending.setdefault(t._ctx, [None] * t._ctx.n_outputs)
                held = slot[t._index]
                if not isinstance(held, _DeferredSum):
                    held = slot[t._index] = _DeferredSum(t, held)
                held.add(gx, fn)
                continue
        if gx.shape != t.shape:
            raise RuntimeError(f"{type(fn).__name__}.backward returned a gradient of shape "
                               f"{gx.shape} for an input of shape {t.shape}")
        if gx.dtype != t.dtype:     # a gradient has its tensor's dtype (as torch)
            gx, own = gx.astype(t.dtype), True
        if t._ctx is None:
            _to_leaf(t, gx, own, leaves, capture)
        else:
            slot = pending.setdefault(t._ctx, [None] * t._ctx.n_outputs)
            held = slot[t._index]
            if isinstance(held, _DeferredSum):
                held.dense = gx if held.dense is None else held.dense + gx
            else:
                slot[t._index] = gx if held is None else held + gx


class _DeferredSum:
    """The gradient of a non-leaf tensor that came (partly) as Deferred terms: each term added
    into a float32 (float64) accumulator as it comes -- one product, nothing held until later
    -- and the sum rounded to the tensor's dtype once, plus any dense part, when the op that
    made the tensor runs its backward (a half-precision sum rounded a frame at a time drifts:
    ~2 % for Tacotron 2's location kernel over 400 frames)."""
    __slots__ = ("tensor", "dense", "acc")

    def __init__(self, tensor, dense):
        self.tensor, self.dense, self.acc = tensor, dense, None

    def add(self, term, fn):
        from .backend import accumulation_dtype
        from .ops.linalg import mm
        t = self.tensor
        A = accumulation_dtype(term.a.dtype)
        shape = (term.a.shape[1],) if term.b is None else (term.a.shape[1], term.b.shape[1])
        if shape != t.shape:
            raise RuntimeError(f"{type(fn).__name__}.backward returned a deferred gradient of "
                               f"shape {shape} for an input of shape {t.shape}")
        if term.b is None:
            g = term.a.sum(axis=0, dtype=A)
        elif self.acc is not None and term.a.dtype == term.b.dtype == self.acc.dtype == A:
            mm(term.a.T, term.b, out=self.acc)     # added in place (cuBLASLt's beta = 1)
            return
        else:
            g = mm(term.a.T, term.b).astype(A, copy=False)
        self.acc = g if self.acc is None else self.acc + g

    def value(self):
        g = self.acc.astype(self.tensor.dtype, copy=False)
        return g if self.dense is None else self.dense + g


def _grads_of_leaves(inputs):
    """Function.grad_into: per input, the .grad array of a leaf that wants a gradient and has
    one, else None; None when no input has one."""
    into = [t.grad.data if isinstance(t, Tensor) and t._ctx is None and t.requires_grad and
            t.grad is not None and not t._hooks and t.grad._ctx is None else None
            for t in inputs]
    return tuple(into) if any(a is not None for a in into) else None


def _accumulate(leaf, g, own=False):
    """Add gradient g into leaf.grad; the first one is stored as the leaf is laid out (as torch
    lays a .grad out like its parameter: channels-last stays so, C = 1 too, where g's own
    strides may fit both layouts): g itself when `own` (see Fresh) and laid out so, else a copy
    (g may be shared: x + x hands gy to both inputs)."""
    if leaf.grad is None:
        if own and type(g) is type(leaf.data) and g.strides == leaf.data.strides:
            leaf.grad = Tensor(g)
            return
        from .backend import copy_like
        leaf.grad = Tensor(copy_like(g, leaf.data))
    else:
        _graph_grad_changed(leaf)
        leaf.grad.data += g


def _graph_grad_changed(leaf):
    """A .grad that create_graph left with a graph of its own, about to be added into in place:
    recorded as a change (torch's version counter), so a backward through a graph that read it
    refuses rather than reading the sum."""
    if leaf.grad._ctx is not None:
        _record.mark_changed(leaf.grad, "backward() adding into a .grad made with create_graph")


def _stack(arrays, stacked):
    """The arrays stacked by rows (the one array itself if alone), made once per list."""
    if len(arrays) == 1:
        return arrays[0]
    key = tuple(id(a) for a in arrays)
    if key not in stacked:
        stacked[key] = concatenate(arrays, axis=0)
    return stacked[key]


def _column_sums(a):
    """A bias's gradient: a's column sums, rounded once (a bfloat16 accumulator rounds at every
    addition: 8 rows already cost ~1 %)."""
    from .backend import sum_rounded_once
    return sum_rounded_once(a, 0)


def _accumulate_deferred(leaf, parts, stacked):
    """Add the sum of a leaf's Deferred gradients (all of one kind) into its .grad: the a's (and
    b's) stacked by rows, then one column sum or one product -- on the GPU accumulated straight
    into an existing .grad by the GEMM (cuBLASLt's beta = 1)."""
    from .ops.linalg import mm
    a = _stack([p.a for p in parts], stacked)
    if leaf.grad is not None:
        _graph_grad_changed(leaf)
    grad = None if leaf.grad is None else leaf.grad.data
    if parts[0].b is None:
        g = _column_sums(a)
    else:
        b = _stack([p.b for p in parts], stacked)
        if addable(grad, leaf.shape, a.dtype):
            mm(a.T, b, out=grad)
            return
        g = mm(a.T, b)
    if g.shape != leaf.shape:
        raise RuntimeError(f"a deferred gradient of shape {g.shape} for a parameter of shape "
                           f"{leaf.shape}")
    if g.dtype != leaf.dtype:
        g = g.astype(leaf.dtype)
    if grad is None:
        leaf.grad = Tensor(g)             # made here, shared with nothing: no copy
    else:
        grad += g


def _links(inputs):
    return [(weakref.ref(t), t._ctx) for t in inputs if isinstance(t, Tensor)]


def _inputs_and_makers(fn):
    """(input Tensor or None where it is gone, the op that made it) of fn, freed or not."""
    if fn.inputs is not None:
        return [(t, t._ctx) for t in fn.inputs if isinstance(t, Tensor)]
    return [(ref(), ctx) for ref, ctx in fn.links]


def _leading_to(order, capture):
    """The ops of `order` (producers first) whose backward reaches a tensor of `capture`: one of
    their inputs is such a tensor, or was made by an op that made one (any of its outputs: torch
    runs what leads to that op, so a sibling output's hooks see their gradient) or by a needed
    op (a freed op by its links: where one is needed, running it says the graph was freed, as
    torch's)."""
    makers = {entry[0]._ctx for entry in capture.values() if entry[0]._ctx is not None}
    needed = set()
    for fn in order:
        for t, maker in _inputs_and_makers(fn):
            if (t is not None and id(t) in capture) or maker in needed or maker in makers:
                needed.add(fn)
                break
    return needed


def _inputs_iter(fn):
    """fn's inputs; a freed op's, the ops that made them (its links)."""
    return iter(fn.inputs) if fn.inputs is not None else (ctx for _, ctx in fn.links)


_recorded = operator.attrgetter("seq")


def _topological_order(*roots, stop=None):
    """Functions reachable from the roots (iterative DFS, one visit each: the graph of a long
    autoregressive decode is deeper than Python's recursion limit), in the order they were
    recorded -- so each after every function that feeds it. stop: ids of Tensors whose makers are
    not followed (a composite's inputs, layers.autograd)."""
    order, seen = [], set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, _inputs_iter(root))]
        while stack:
            fn, it = stack[-1]
            for t in it:             # (an input Tensor; of a freed op, the op that made it)
                parent = t._ctx if isinstance(t, Tensor) and (stop is None or id(t) not in stop) \
                    else t if isinstance(t, Function) else None
                if parent is not None and parent not in seen:
                    seen.add(parent)
                    stack.append((parent, _inputs_iter(parent)))
                    break
            else:
                stack.pop()
                order.append(fn)
    order.sort(key=_recorded)        # torch's order: the op recorded last goes first, so gradients
    return order                     # add up as torch's do (it matters in float16 / bfloat16)


def _from_python(data, dtype):
    """Python data (numbers, nested lists / tuples) or a NumPy scalar as an array of `dtype`, or,
    where none is given, of the dtype torch.tensor infers: each number's own (Python bool /
    int: bool / int64, float / complex: the default dtypes; a NumPy scalar or array, or a
    one-element Tensor, keeps its dtype), promoted over them all as torch promotes. What torch
    refuses is refused with its kind of error: None, strings, sets, dicts, Python ints outside
    int64, NumPy uint64, Tensors of more than one element."""
    found, data = _scan(data, dtype is not None, None)
    target = dtype if dtype is not None else found if found is not None else default_float()
    if found is not None and np.dtype(target).kind in "iu" and np.dtype(target) != found:
        _check_numbers(data, target)         # (data of the dtype asked for needs no check)
    try:
        return np.asarray(data, dtype=target)
    except OverflowError:
        big = next((v for v in _leaves(data) if type(v) is int and not
                    -2 ** 63 <= v < 2 ** 63), None)
        if np.dtype(target).kind not in "iu" or np.dtype(target) == np.uint64:
            raise              # (torch wraps no negative into a uint64 tensor())
        if big is not None:
            raise ValueError(f"tensor(): Overflow when unpacking long long: the Python int {big} "
                             f"does not fit in int64 (as torch)") from None
        # (ints outside the integer dtype: torch's refusal, or a negative wrapped in an unsigned
        # dtype, -1 as 255 in uint8)
        return fit_integers("tensor()", np.asarray(data, dtype=np.int64), target)


_PYTHON_NUMBER = {bool: lambda: np.dtype(bool), int: lambda: np.dtype(np.int64),
                  float: default_float, complex: default_complex}


_MIXED = object()           # _kinds_dtype's answer for a set of types that needs the walk
_KINDS = {}                 # {(frozenset of types, default dtypes): their dtype or _MIXED}


def _kinds_dtype(kinds):
    """torch's dtype for a sequence whose elements' types are `kinds`, where each is a Python
    number or a NumPy numeric scalar (None for none at all), else _MIXED. Remembered by the set
    of types (and the default dtypes, which a Python float or complex takes)."""
    key = (frozenset(kinds), default_float(), default_complex())
    d = _KINDS.get(key)
    if d is None and key not in _KINDS:
        if len(_KINDS) > 256:                          # (a bound: type sets are few in practice)
            _KINDS.clear()
        d = _KINDS[key] = _MIXED
        if all(k in _PYTHON_NUMBER or issubclass(k, np.generic) and k is not np.uint64 and
               (np.dtype(k).kind in "biufc" or is_floating(np.dtype(k))) for k in key[0]):
            d = _KINDS[key] = _promoted(_PYTHON_NUMBER[k]() if k in _PYTHON_NUMBER
                                        else np.dtype(k) for k in key[0])
    return d


def _scan(x, given, first):
    """(torch's dtype for x -- None where x holds no number --, x with each one-element Tensor
    in it as its number), or torch's error for a value it refuses. `first`: x is reached from
    the top through first elements only (a string there is torch's 'too many dimensions'); None
    at the top; `given`: a dtype was given (torch's message for a non-number is then another).
    Sequences of numbers (and rows of them) are read by their elements' types alone, without a
    walk."""
    number = _PYTHON_NUMBER.get(type(x))
    if number is not None:
        return number(), x
    if isinstance(x, np.generic):
        d = _kinds_dtype((type(x),))
        if d is not _MIXED:                             # (a NumPy number: its own dtype)
            return d, x
    if isinstance(x, (list, tuple, range)):
        kinds = set(map(type, x))
        d = _kinds_dtype(kinds)
        if d is not _MIXED:
            return d, x
        if kinds <= {list, tuple}:                     # rows: their elements' types at once
            inner = set()
            for row in x:
                inner.update(map(type, row))
            d = _kinds_dtype(inner)
            if d is not _MIXED:
                return d, x
        dtypes, items = [], []
        for i, v in enumerate(x):
            d, item = _scan(v, given, i == 0 and first is not False)
            dtypes.append(d)
            items.append(item)
        changed = any(a is not b for a, b in zip(items, x))
        return _promoted(dtypes), (items if changed else x)
    if isinstance(x, (str, bytes, np.str_, np.bytes_)) or \
            isinstance(x, np.ndarray) and x.dtype.kind in "SU":
        if first and isinstance(x, (str, np.str_, np.ndarray)):
            raise ValueError(f"tensor(): too many dimensions 'str': the string {x!r} is not a "
                             f"number (as torch)")
        raise TypeError(f"tensor(): invalid data type '{type(x).__name__}': {x!r} is not a "
                        f"number (as torch)")
    if isinstance(x, (np.ndarray, np.generic)):
        if isinstance(x, np.ndarray) and x.ndim == 0 and first is not None:
            raise TypeError(f"tensor(): a 0-d NumPy array inside a list ({x!r}) is refused, as "
                            f"torch (len() of unsized object); take x.item() or a 1-d array")
        if x.dtype == np.uint64:
            raise TypeError(f"tensor(): NumPy uint64 ({x!r}) is refused, as torch (an integer "
                            f"is required)")
        if x.dtype.kind not in "biufc" and not is_floating(x.dtype):
            raise TypeError(f"tensor(): can't convert NumPy data of type {x.dtype} ({x!r:.60}), "
                            f"as torch: only numbers and bools")
        return x.dtype, x
    for kind in _PYTHON_NUMBER:                    # (NumPy's float64 is a float: taken above)
        if isinstance(x, kind):
            return _PYTHON_NUMBER[kind](), x
    foreign = from_foreign(x)
    if isinstance(x, Tensor) or foreign is not x:
        size = x.size if isinstance(x, Tensor) else x.numel()
        if size != 1:
            raise ValueError(f"tensor(): only one element tensors can be converted to Python "
                             f"scalars, got a tensor of shape {tuple(x.shape)} in the data")
        a = x.data if isinstance(x, Tensor) else foreign
        return np.dtype(a.dtype), a.reshape(()).item()
    if given:
        raise TypeError(f"tensor(): must be real number, not {type(x).__name__} ({x!r:.60})")
    raise RuntimeError(f"tensor(): Could not infer dtype of {type(x).__name__} ({x!r:.60})")


def _promoted(dtypes):
    """torch.promote_types over `dtypes` (None: no number); a complex dtype with an integer one
    is the complex one (NumPy widens complex64 with int64 to complex128)."""
    from .backend import promote_types
    out = None
    for d in dtypes:
        if d is None:
            continue
        if out is None:
            out = d
        elif {out.kind, d.kind} <= set("biuc") and "c" in (out.kind, d.kind) and out != d:
            out = out if out.kind == "c" else d
        else:
            out = promote_types(out, d)
    return out


def _check_numbers(data, target):
    """Each number of Python data bound for integer dtype `target`, checked as torch checks it
    (backend.fit_value): a float truncated, refused where NaN, infinite or out of range; a NumPy
    int, and an array's values inside the data, refused out of range -- NumPy would store -1.0
    or np.int64(300) into uint8 as 255 or 44. (Python ints are NumPy's to refuse: caught where
    they are converted.)"""
    for v in _leaves(data):
        if type(v) is int or type(v) is bool:
            continue
        if isinstance(v, np.ndarray):
            if not v.size:
                continue
            if is_floating(v.dtype):
                values = v.astype(np.float64)
                for x in ((float("nan"),) if np.isnan(values).any() else
                          (float(values.min()), float(values.max()))):
                    fit_value("tensor()", x, target)
            elif v.dtype.kind in "iu":
                fit_integers("tensor()", v, target)
        else:
            fit_value("tensor()", v, target)


def _leaves(x):
    """The numbers of nested lists / tuples, in order."""
    if isinstance(x, (list, tuple, range)):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new Tensor of a copy of a list / NumPy array / CuPy array / Tensor, as torch.tensor (a
    later change to the data is not the tensor's; as_tensor shares it), on `device` (default:
    where the data already is -- the CPU for lists and NumPy arrays, its GPU for a CuPy array).
    The dtype, where none is given, is torch.tensor's: Python ints give int64, bools bool, floats
    the default dtype (float32 unless set_default_dtype), complex numbers complex64 (complex128
    with a float64 default); NumPy arrays and scalars keep theirs."""
    source = data.data if isinstance(data, Tensor) else from_foreign(data)
    t = as_tensor(source, dtype, device)
    if (isinstance(source, np.ndarray) or is_gpu(source)) and \
            xp_of(t.data) is xp_of(source) and xp_of(t.data).may_share_memory(t.data, source):
        t = Tensor(t.data.copy(order="K"))       # (its layout kept: channels-last stays so)
    t.requires_grad = requires_grad
    return t


def as_tensor(data, dtype=None, device=None):
    """A Tensor of `data` sharing its memory where it can (an array already of `dtype` on
    `device`), else of a copy: torch.as_tensor / torch.from_numpy. A Tensor comes back as it is
    when nothing is to change."""
    dtype = None if dtype is None else np_dtype(dtype)      # (a torch dtype too)
    if isinstance(data, Tensor):       # (a change of dtype or device in the graph, as .to())
        t = data if dtype is None else data.astype(dtype)
        return t if device is None else t.to(device)
    data = from_foreign(data)               # (a PyTorch tensor)
    if isinstance(data, np.ndarray) and data.dtype.kind not in "biufc" and \
            not is_floating(data.dtype):    # (strings, objects, dates: torch's refusal)
        raise TypeError(f"can't convert np.ndarray of type {data.dtype}: only numbers and bools "
                        f"(as torch)")
    if not (isinstance(data, np.ndarray) or is_gpu(data)):
        data = _from_python(data, dtype)
    elif dtype is not None:
        data = data.astype(dtype, copy=False)
    return Tensor(data if device is None else to_device(data, device))


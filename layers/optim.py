"""Optimizers with PyTorch's update rules, updating parameters in place (torch's formulas; a
result can differ from torch's in its last bits, in float64 too).

On the GPU each update is one fused CuPy kernel per parameter -- or, with foreach, one per dtype
over a table of the parameters' pointers -- and the step count lives in device memory (bias
corrections are computed inside the kernel), so a step needs no host sync and can be captured in
a CUDA graph. State dicts follow torch.optim's shape."""
import collections
import contextlib
import sys
import math

import numpy as np

from . import kernels
from .backend import (accumulation_dtype, default_float, device_table, from_foreign, is_dense,
                      is_floating, is_gpu, is_half, stack, to_device, xp_of)
from .changes import mark_changed
from .tensor import Tensor, enable_grad, no_grad
from .trace import active as _trace


class Optimizer:
    """Subclasses implement `_update()`, run by `step()` without recording a graph.

    master_weights=True (mixed precision): each float16 / bfloat16 parameter is updated through
    a float32 master copy kept in its state ('master_param', saved and restored with the state
    dict): the update runs on the master with the gradient cast to float32, then the master is
    rounded into the parameter's own array. bfloat16 keeps 8 significant bits, so without it an
    update smaller than 1/256 of a weight is lost. The master is made from the parameter at its
    first step, and before every update an element whose parameter no longer equals the master
    rounded (new weights loaded into the model, or written by hand) takes the parameter's value:
    one elementwise pass, no host sync, so a captured step does it too. Subclasses implementing
    `step` themselves, rather than `_update`, do without master weights."""
    defaults = {}
    fused_masters = False    # the subclass updates GPU masters itself (one kernel: Adam)

    def __init__(self, params, master_weights=False, **hyper):
        self.master_weights = bool(master_weights)
        self.defaults = dict(type(self).defaults, **hyper)      # (this optimizer's, as torch's)
        if isinstance(params, Tensor):
            raise TypeError(f"{type(self).__name__}: params must be an iterable of Tensors or "
                            f"dicts (torch's rule), got one Tensor of shape {params.shape}: "
                            f"pass [tensor]")
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        # {parameter: its state}, as torch's (a parameter not stepped yet reads as {})
        self.param_groups, self.state = [], collections.defaultdict(dict)
        # load_state_dict's count, and the groups' settings it left (schedulers made after a
        # load put them back: their constructor's step may have written over them)
        self.loads, self.loaded_settings = 0, None
        for g in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(g)

    def add_param_group(self, param_group):
        """One more group (torch's): its 'params' a Tensor, a list of them or of (name, Tensor)
        pairs (named_parameters(): the names kept as 'param_names'), its missing settings this
        optimizer's defaults. A parameter already in a group, or twice in this one, is refused
        (torch refuses the first and warns of the second): it would be stepped twice."""
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{name}: a parameter group is a dict, got "
                            f"{type(param_group).__name__}")
        group = dict(self.defaults)
        group.update(param_group)
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(f"{name}: a group's params must be ordered (a list), not a set: "
                            f"the state dict numbers them in order")
        params = list(params)
        if params and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                          for p in params):
            group["param_names"] = [n for n, _ in params]
            params = [p for _, p in params]
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{name} can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"{name}: can't optimize a non-leaf Tensor (shape {p.shape}: "
                                 f"the result of an op; optimize the tensors it came from)")
        if len({id(p) for p in params}) != len(params):
            raise ValueError(f"{name}: a parameter group has duplicate parameters: each would "
                             f"be stepped twice (torch warns that this will be an error)")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group "
                             f"(as torch refuses: they would be stepped twice)")
        group["params"] = params
        self.param_groups.append(group)

    @no_grad()
    def step(self, closure=None):
        """One update of each parameter with a gradient. closure (torch's): a function that
        recomputes the loss, called first with gradients recorded; its loss is returned (else
        None)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with self._on_masters():
            self._update()
        by = f"{type(self).__name__}.step()"
        for group in self.param_groups:          # (an op that saved one refuses its backward)
            for p in group["params"]:
                if p.grad is not None:
                    mark_changed(p, by)
        return loss

    def _update(self):
        raise NotImplementedError

    @contextlib.contextmanager
    def _on_masters(self):
        """With master_weights, the half-precision parameters with a gradient hold their float32
        master and its float32 gradient for the update; afterwards each master is rounded into
        the parameter's own array (in place: a captured graph holds its address)."""
        swapped, seen = [], set()
        if self.master_weights:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None or not is_half(p.dtype) or id(p) in seen:
                        continue
                    seen.add(id(p))
                    st = self.state.setdefault(p, {})
                    fused = self.fused_masters and is_gpu(p.data)
                    if "master_param" not in st:
                        st["master_param"] = p.data.astype(np.float32)
                    elif not fused:
                        _sync_master(st["master_param"], p.data)
                    if fused:
                        continue            # sync, update and rounding in one kernel (_update)
                    swapped.append((p, p.data, p.grad))
                    p.data, p.grad = st["master_param"], Tensor(p.grad.data.astype(np.float32))
        try:
            yield
        finally:
            for p, data, grad in swapped:
                data[...] = p.data
                p.data, p.grad = data, grad

    def _state_dtype(self, p, key):
        """The dtype of a floating state array of p: float32 for its master and, with master
        weights, for the state made from the master; else p's own."""
        if key == "master_param" or (self.master_weights and is_half(p.dtype)):
            return np.dtype(np.float32)
        return p.dtype

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0
                    mark_changed(p.grad, "zero_grad(set_to_none=False)")

    def _params_with_grad(self):
        """(group, parameter) for each parameter with a gradient; under a layers.trace.Trace the
        caller's loop body for a parameter runs in an 'optimizer' scope named by its path."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                trace = _trace.trace
                if trace is None:
                    yield group, p
                    continue
                trace.open("optimizer", type(self).__name__, trace.param_path(p), [p.data])
                try:
                    yield group, p
                finally:
                    trace.close()

    def state_dict(self):
        """{'state': {index: {name: array or number}}, 'param_groups': [...]}, as torch."""
        index, state = 0, {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                if p in self.state:
                    state[index] = {k: (v.get() if is_gpu(v) else np.array(v, copy=True))
                                    if not isinstance(v, (int, float)) else v
                                    for k, v in self.state[p].items()}
                ids.append(index)
                index += 1
            groups.append({k: v for k, v in group.items() if k != "params"} | {"params": ids})
        return {"state": state, "param_groups": groups}

    # keys of a torch optimizer's param group this one has no setting for that change nothing
    # here whatever their value (where the step counter lives, the kernel torch picks, autograd
    # through the step, a scheduler's starting lr, named_parameters' names); any other unknown
    # key is refused when set
    NO_EFFECT = frozenset({"capturable", "fused", "foreach", "differentiable", "initial_lr",
                           "param_names", "max_lr", "min_lr", "max_momentum",
                           "base_momentum"})      # (the last four: OneCycleLR's, CyclicLR's)

    def load_state_dict(self, state_dict):
        """Restore hyper-parameters and per-parameter state (this optimizer's state_dict, or a
        torch optimizer's of the same class and parameters, tensors included). Everything is
        checked before anything changes: the groups and their sizes, no setting this optimizer
        does not do (amsgrad=True, maximize=True, ...), each state array of its parameter's
        shape. State arrays that exist already are overwritten in place (a captured CUDA graph
        holds their addresses); new ones are made."""
        name = f"{type(self).__name__}.load_state_dict"
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{name}: {len(saved_groups)} parameter groups saved, this "
                             f"optimizer has {len(self.param_groups)}")
        settings = []
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"{name}: parameter group {i} saved {len(saved['params'])} "
                                 f"parameters, this optimizer's has {len(group['params'])}")
            kept = {}
            for k, v in saved.items():
                if k == "params":
                    continue
                if k in self.defaults or k in group or k in self.NO_EFFECT:
                    kept[k] = v
                elif v:
                    raise ValueError(f"{name}: parameter group {i} has {k}={v!r}, which "
                                     f"{type(self).__name__} does not do; expected {k} off")
            settings.append(kept)
        params = [p for g in self.param_groups for p in g["params"]]
        entries = []
        for i, entry in state_dict["state"].items():
            if not 0 <= int(i) < len(params):
                raise ValueError(f"{name}: state for parameter {i}, this optimizer has "
                                 f"{len(params)}")
            p = params[int(i)]
            # (None: a state torch keeps no array for, an older SGD's momentum_buffer at 0)
            entry = {k: from_foreign(v) for k, v in entry.items() if v is not None}
            for k, v in entry.items():
                if k != "step" and not isinstance(v, (int, float)) and \
                        tuple(np.shape(v)) != tuple(p.shape):
                    raise ValueError(f"{name}: state {k!r} of parameter {i} has shape "
                                     f"{tuple(np.shape(v))}, the parameter {tuple(p.shape)}")
            entries.append((p, entry))
        for group, kept in zip(self.param_groups, settings):
            group.update(kept)
        state = {}
        for p, entry in entries:
            old = self.state.get(p, {})
            new = state[p] = {}
            for k, v in entry.items():
                cur = old.get(k)
                if k == "step":
                    new[k] = _loaded_step(p, v, cur)
                    continue
                if isinstance(v, (int, float)) and (cur is None or isinstance(cur, (int, float))):
                    new[k] = v
                    continue
                v = v.get() if is_gpu(v) else np.array(v)    # (a copy: never the caller's)
                if cur is not None and not isinstance(cur, (int, float)) and cur.shape == v.shape:
                    cur[...] = to_device(v.astype(cur.dtype, copy=False), p.device)
                    new[k] = cur
                else:       # in the dtype the update makes it (files keep bfloat16 as float32)
                    if is_floating(v.dtype):
                        v = v.astype(self._state_dtype(p, k), copy=False)
                    new[k] = to_device(v, p.device)
        self.state = collections.defaultdict(dict, state)
        self.loads += 1
        self.loaded_settings = [{k: v for k, v in group.items() if k != "params"}
                                for group in self.param_groups]


def _sync_master(master, p):
    """master[i] = p[i] where p[i] != master[i] rounded to p's dtype (weights written into the
    model since the last step); elsewhere the master keeps its extra bits."""
    if is_gpu(p):
        kernels.sync_master(master, p)
    else:
        stale = master.astype(p.dtype) != p
        master[stale] = p[stale].astype(np.float32)


# default `foreach` of Adam, clip_grad_norm_ and FiniteCheck's gradient check: one launch per
# dtype, as torch's Adam on CUDA. Measured on an H100: captured steps 2-3 % faster (DCGAN 6.83 vs
# 7.00 ms, Tacotron 2 41.6 vs 42.5 ms), 66 / 500 fewer kernels, eager unchanged
FOREACH = True


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight_decay added to the gradient; amsgrad not supported).

    foreach=True (default: layers.optim.FOREACH) updates all float32 / float64 parameters of a
    group that live on a GPU in one launch per dtype, through a table of their pointers
    (layers.kernels.adam_multi) -- the same arithmetic as the per-parameter kernel, element for
    element; other parameters take the per-parameter path. With master_weights, a half-precision
    GPU parameter is updated through its float32 master by one kernel (kernels.adam_master), and
    with foreach all of a group's of one dtype in one launch (kernels.adam_master_multi)."""
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=None)
    fused_masters = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, foreach=None, master_weights=False):
        _check_settings(lr=lr, eps=eps)
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        _check_settings(weight_decay=weight_decay)
        if all(isinstance(b, Tensor) for b in betas):
            raise NotImplementedError(f"{type(self).__name__}: Tensor betas are not done here")
        if not all(isinstance(b, float) for b in betas):        # (torch's check: (0, 0.9) too)
            raise ValueError("betas must be either both floats or both Tensors")
        if amsgrad:
            raise NotImplementedError(f"{type(self).__name__}: amsgrad is not done here")
        super().__init__(params, master_weights, lr=lr, betas=tuple(betas), eps=eps,
                         weight_decay=weight_decay, foreach=foreach)

    def _update(self):
        # (group, dtype, with masters) -> (group, [(p, g, m, v, step) or (q, g, master, m, v,
        # step)], [p])
        batched = {}
        for group, p in self._params_with_grad():
            st = self.state.setdefault(p, {})
            xp = xp_of(p.data)
            master = st.get("master_param") if self.master_weights and is_half(p.dtype) \
                else None                   # (set: a GPU parameter's master, not swapped in)
            if "step" not in st:            # (a master weight may be there already)
                like = p.data if master is None else master
                st.update(step=xp.zeros((), dtype=np.int64) if is_gpu(p.data) else 0,
                          exp_avg=xp.zeros_like(like), exp_avg_sq=xp.zeros_like(like))
            b1, b2 = group["betas"]
            if is_gpu(p.data):              # (a master is a GPU parameter's: see above)
                moments = (st["exp_avg"], st["exp_avg_sq"], st["step"])
                arrays, fits, one = ((p.data, p.grad.data) + moments, _batchable, kernels.adam) \
                    if master is None else ((p.data, p.grad.data, master) + moments,
                                            _batchable_master, kernels.adam_master)
                foreach = FOREACH if group["foreach"] is None else group["foreach"]
                if foreach and fits(arrays):
                    entry = batched.setdefault((id(group), p.dtype.str, master is not None),
                                               (group, [], []))
                    entry[1].append(arrays)
                    entry[2].append(p)
                    continue
                st["step"] += 1
                one(*arrays, group["lr"], b1, b2, group["eps"], group["weight_decay"])
                continue
            st["step"] += 1
            # half-precision parameters are updated in float32 (eps = 1e-8 is 0 in float16)
            A = accumulation_dtype(p.dtype).type
            w0, g = p.data.astype(A, copy=False), p.grad.data.astype(A, copy=False)
            if group["weight_decay"]:
                g = g + A(group["weight_decay"]) * w0
            m = st["exp_avg"].astype(A, copy=False)
            v = st["exp_avg_sq"].astype(A, copy=False)
            w = A(1 - b1)                       # m = lerp(m, g, 1 - b1), in torch.lerp's two forms
            m = m + w * (g - m) if w < 0.5 else g - (g - m) * (1 - w)
            v = v * A(b2) + A(1 - b2) * g * g
            bc1 = 1 - b1 ** st["step"]
            bc2 = 1 - b2 ** st["step"]
            denom = np.sqrt(v) / A(math.sqrt(bc2)) + A(group["eps"])
            st["exp_avg"][...], st["exp_avg_sq"][...] = m, v
            p.data[...] = w0 - A(group["lr"] / bc1) * m / denom
        for (_, _, masters), (group, tensors, params) in batched.items():
            one, rows_of, multi = (kernels.adam_master, kernels.adam_master_rows,
                                   kernels.adam_master_multi) if masters else \
                (kernels.adam, kernels.adam_rows, kernels.adam_multi)
            if len({t[0].data.ptr for t in tensors}) < len(tensors):    # a parameter twice
                for t in tensors:
                    t[-1][...] += 1
                    one(*t, group["lr"], *group["betas"], group["eps"], group["weight_decay"])
                continue
            rows, total = rows_of(tensors)
            trace = _trace.trace
            if trace is not None:
                trace.open("optimizer", "Adam(foreach, master)" if masters else "Adam(foreach)",
                           _common_path(trace, params), [t[0] for t in tensors])
            try:
                multi(device_table(rows), len(rows), total, tensors[0][0], group["lr"],
                      *group["betas"], group["eps"], group["weight_decay"])
            finally:
                if trace is not None:
                    trace.close()


def _common_path(trace, params):
    """The layer name of a multi-tensor update in a kernel table: the parameters' common module
    path and their count ('netD (12 parameters)')."""
    paths = [trace.param_path(p).split(".") for p in params]
    common = []
    for parts in zip(*paths):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return f"{'.'.join(common) or 'all'} ({len(params)} parameters)"


def _batchable(arrays):
    """p, g, m, v, step fit the multi-tensor Adam: float32 / float64 arrays of one dtype whose
    k-th stored items are one element (_paired), and a device step counter (else the per-tensor
    kernel, which checks its arguments, takes them)."""
    p, step = arrays[0], arrays[4]
    return p.dtype in (np.float32, np.float64) and _device_step(step) and \
        all(a.dtype == p.dtype for a in arrays[:4]) and _paired(arrays[:4])


def _batchable_master(arrays):
    """q, g, master, m, v, step fit the multi-tensor master-weight Adam: q and g of one half
    dtype, master, m and v float32, all paired item by item (_paired), and a device step
    counter (else the per-tensor kernel, whose elementwise launch pairs them by index)."""
    q, g, master, m, v, step = arrays
    return is_half(q.dtype) and g.dtype == q.dtype and \
        all(a.dtype == np.float32 for a in (master, m, v)) and _device_step(step) and \
        _paired(arrays[:5])


def _paired(arrays):
    """Arrays of one shape and device whose k-th stored items are one element, as the
    multi-tensor kernels pair them: all C-ordered (a channels-last one with C = 1 counts), or
    all dense with the same strides counted in elements (all channels-last, say)."""
    a0 = arrays[0]
    return all(a.shape == a0.shape and a.device.id == a0.device.id for a in arrays) and (
        all(a.flags.c_contiguous for a in arrays) or
        (all(is_dense(a) for a in arrays) and
         len({tuple(s // a.itemsize for s in a.strides) for a in arrays}) == 1))


def _loaded_step(p, v, cur):
    """A saved step count -- a number, a NumPy or device 0-d array, torch's float tensor read
    as an array -- as the update keeps it: for a GPU parameter the device int64 counter its
    kernels advance (written in place where one exists: a captured graph reads that one), on
    the CPU a Python int. (A CPU checkpoint's number kept as a number sent a GPU update down the
    per-tensor path with a host integer where the kernel reads a device counter.)"""
    n = int(round(float(v.get() if is_gpu(v) else np.asarray(v))))
    if not is_gpu(p.data):
        return n
    if cur is not None and _device_step(cur):
        cur[...] = n
        return cur
    return to_device(np.array(n, np.int64), p.device)


def _device_step(step):
    """A step counter the kernels advance on the device: one int64 in device memory."""
    return is_gpu(step) and step.dtype == np.int64 and step.size == 1


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay -- each parameter scaled by
    1 - lr * weight_decay before Adam's update, no L2 term in its gradient (default 1e-2)."""
    defaults = dict(Adam.defaults, weight_decay=1e-2, decoupled_weight_decay=True)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, foreach=None, master_weights=False):
        if master_weights:
            raise NotImplementedError("AdamW: master_weights is not done here (the decay would "
                                      "have to reach the float32 masters); use Adam, or float32 "
                                      "parameters")
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True

    def _update(self):
        for group, p in self._params_with_grad():
            if group["weight_decay"]:
                _scale(p.data, 1 - group["lr"] * group["weight_decay"])   # (p.mul_, as torch)
        decays = [group["weight_decay"] for group in self.param_groups]
        try:                                  # Adam's update without its L2 term
            for group in self.param_groups:
                group["weight_decay"] = 0.0
            super()._update()
        finally:
            for group, decay in zip(self.param_groups, decays):
                group["weight_decay"] = decay


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, nesterov, L2 weight_decay."""
    defaults = dict(lr=1e-3, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0)

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, master_weights=False):
        # (torch's `x < 0`, not `not 0 <= x` as the others': a NaN lr or momentum is taken)
        _check_settings(lr=lr, momentum=momentum, weight_decay=weight_decay,
                        refused=lambda x: x < 0.0)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, master_weights, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov)

    def _update(self):
        for group, p in self._params_with_grad():
            g = p.grad.data
            if group["weight_decay"]:
                g = _add_scaled(g, group["weight_decay"], p.data)
            mu = group["momentum"]
            if mu:
                st = self.state.setdefault(p, {})
                buf = st.get("momentum_buffer")
                if buf is None:
                    buf = st["momentum_buffer"] = g.copy()
                else:
                    _scale(buf, mu)
                    _add_scaled(buf, 1 - group["dampening"], g, out=buf)
                g = _add_scaled(g, mu, buf) if group["nesterov"] else buf
            _add_scaled(p.data, -group["lr"], g, out=p.data)


class RMSprop(Optimizer):
    """torch.optim.RMSprop: the running mean of squared gradients (factor alpha), centered
    (minus the squared running mean of the gradients) or not, momentum, L2 weight_decay. Written
    once for both paths in array operations (several launches a parameter on a GPU). The step
    count (torch's state 'step') is a device counter for a GPU parameter, as Adam's: a captured
    step (layers.graph.CapturedStep) replays with it."""
    defaults = dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                    centered=False)

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, master_weights=False):
        _check_settings(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                        alpha=alpha)
        super().__init__(params, master_weights, lr=lr, alpha=alpha, eps=eps,
                         weight_decay=weight_decay, momentum=momentum, centered=centered)

    def _update(self):
        for group, p in self._params_with_grad():
            g = p.grad.data
            if group["weight_decay"]:
                g = _add_scaled(g, group["weight_decay"], p.data)
            st = self.state.setdefault(p, {})
            xp, alpha = xp_of(p.data), group["alpha"]
            if "square_avg" not in st:
                st["step"] = _new_step(p)
                st["square_avg"] = xp.zeros_like(p.data)
            st["step"] += 1                     # (a device counter: in place)
            avg_sq = st["square_avg"]
            avg_sq[...] = avg_sq * alpha + (1 - alpha) * g * g
            if group["centered"]:
                avg_g = st.setdefault("grad_avg", xp.zeros_like(p.data))
                avg_g += (1 - alpha) * (g - avg_g)
                denom = xp.sqrt(avg_sq - avg_g * avg_g) + group["eps"]
            else:
                denom = xp.sqrt(avg_sq) + group["eps"]
            if group["momentum"]:
                buf = st.setdefault("momentum_buffer", xp.zeros_like(p.data))
                buf[...] = buf * group["momentum"] + g / denom
                _add_scaled(p.data, -group["lr"], buf, out=p.data)
            else:
                _add_scaled(p.data, -group["lr"], g / denom, out=p.data)


class Adagrad(Optimizer):
    """torch.optim.Adagrad: each parameter's step lr / (1 + (t - 1) lr_decay) divided by the
    root of its summed squared gradients (+ eps), L2 weight_decay. Array operations on both
    paths; for a GPU parameter the step count t is a device counter and the decayed rate is
    computed from it on the device, so a captured step replays right."""
    defaults = dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                    eps=1e-10)

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, *, master_weights=False):
        _check_settings(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, master_weights, lr=lr, lr_decay=lr_decay,
                         weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps)
        for group in self.param_groups:          # (torch makes the state at construction)
            for p in group["params"]:
                self.state[p] = self._new_state(p)

    def _new_state(self, p):
        """p's step count and sum before its first update. The sum starts at the constructor's
        initial_accumulator_value, whatever p's group says (torch's)."""
        return {"step": _new_step(p), "sum": xp_of(p.data).full(
            p.shape, self.defaults["initial_accumulator_value"],
            dtype=self._state_dtype(p, "sum"))}

    def _update(self):
        for group, p in self._params_with_grad():
            g = p.grad.data
            if group["weight_decay"]:
                g = _add_scaled(g, group["weight_decay"], p.data)
            st = self.state.setdefault(p, {})
            if "sum" not in st:          # (a group added since: made at its first step, torch's)
                st.update(self._new_state(p))
            st["step"] += 1                     # (a device counter: in place)
            st["sum"] += g * g
            update = g / (xp_of(p.data).sqrt(st["sum"]) + group["eps"])
            if group["lr_decay"] and is_gpu(p.data):     # (the rate from the device counter)
                rate = group["lr"] / (1 + (st["step"] - 1) * group["lr_decay"])
                p.data -= (rate * update).astype(p.dtype, copy=False)
                continue
            rate = group["lr"] / (1 + (int(st["step"]) - 1) * group["lr_decay"]) \
                if group["lr_decay"] else group["lr"]       # (no host read of a counter)
            _add_scaled(p.data, -rate, update, out=p.data)


# torch's words for an optimizer's settings in its refusals
_SETTING_WORDS = {"lr": "learning rate", "eps": "epsilon value"}


def _check_settings(refused=lambda x: not 0.0 <= x, **settings):
    """Refuse the first setting, in the order given, that torch's check refuses (`not 0.0 <= x`:
    a negative value or NaN), in torch's words ("Invalid learning rate: nan")."""
    for name, x in settings.items():
        if refused(x):
            raise ValueError(f"Invalid {_SETTING_WORDS.get(name, name + ' value')}: {x}")


def _new_step(p):
    """A parameter's step count before its first update: 0, or for a GPU parameter a device
    int64 counter (advanced in place, as _loaded_step keeps one)."""
    return to_device(np.array(0, np.int64), p.device) if is_gpu(p.data) else 0


def _scale(a, s):
    """a *= s in place, as torch's a.mul_(s) on the CPU: in the op's math type with s rounded to
    it (float32 for half data; NumPy would round s to the half dtype first)."""
    if a.dtype.itemsize == 2:
        a[...] = (a.astype(np.float32) * np.float32(s)).astype(a.dtype)
    else:
        a *= a.dtype.type(s)


def _add_scaled(a, alpha, b, out=None):
    """a + alpha * b as torch's a.add(b, alpha=alpha) computes it on the CPU: alpha rounded to a's
    dtype, then one fused multiply-add in the op's math type (float32 for float32 and half data),
    rounded to a's dtype. Computed in float64, where the float32 (or half) product alpha * b is
    exact; two roundings (alpha * b, then the sum) differed from torch in ~9 % of a float32
    update's elements. On the GPU, as torch's CUDA kernel: alpha in float32 for half data."""
    gpu = is_gpu(a)
    # (torch on CUDA rounds alpha to float32 for half data, on the CPU to the half dtype)
    alpha = float(np.float32(alpha) if gpu and a.dtype.itemsize == 2 else a.dtype.type(alpha))
    # float64 data: in long double on the CPU (x86's 64-bit significand: the sum is rounded
    # twice only where the product's last bits decide it); CuPy has no wider type
    wide = np.longdouble if a.dtype == np.float64 and not gpu else np.float64
    r = a.astype(wide) + wide(alpha) * b.astype(wide)
    if a.dtype.itemsize == 2:
        r = r.astype(np.float32)          # (half data: torch's float32 result, then rounded)
    r = r.astype(a.dtype)
    if out is None:                   # (NumPy's 0-d arithmetic gives a scalar: an array kept)
        return r if gpu else np.asarray(r)
    out[...] = r
    return out


@no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale all gradients so their joint norm is at most max_norm; returns the norm before
    clipping as a Tensor in the gradients' dtype (computed on the device: no host sync, unless
    error_if_nonfinite asks for the norm to be checked, as torch's). foreach=True (default:
    layers.optim.FOREACH), for the 2-norm of float32 / float64 GPU gradients of one dtype: the
    squares summed in float64 by one launch over a table of the gradients' pointers and the
    gradients scaled by one more, whatever their number."""
    grads = [p.grad.data for p in (parameters if not isinstance(parameters, Tensor)
                                   else [parameters]) if p.grad is not None]
    norm_type = float(norm_type)                # ('inf', a NumPy float: as torch takes them)
    if not grads:
        return Tensor(np.zeros((), default_float()))
    xp = xp_of(grads[0])
    # float16 squares overflow: summed in float32; gradients of several dtypes in the widest
    A = np.result_type(*{accumulation_dtype(g.dtype) for g in grads})
    if (FOREACH if foreach is None else foreach) and norm_type == 2 and is_gpu(grads[0]) and \
            grads[0].dtype in (np.float32, np.float64) and \
            all(g.dtype == grads[0].dtype and is_dense(g) and
                g.device.id == grads[0].device.id for g in grads) and \
            len({g.data.ptr for g in grads}) == len(grads):       # (one gradient twice: below)
        rows, n = kernels.pointer_rows(grads)
        table = device_table(rows)
        total = _checked_total(xp.sqrt(kernels.multi_sumsq(table, len(rows), n, grads[0]))
                               .astype(A), norm_type, error_if_nonfinite)
        kernels.multi_scale(table, len(rows), n, grads[0], total, max_norm)
        return Tensor(total)
    # torch's: the norm of the gradients' norms (for p = 0, -inf too), in float32 for half data
    from .functional import norm
    total = norm(Tensor(stack([norm(Tensor(g.astype(A, copy=False)), norm_type).data
                               for g in grads])), norm_type).data
    total = _checked_total(total, norm_type, error_if_nonfinite)      # (before any change)
    coef = xp.minimum(max_norm / (total + 1e-6), 1.0).astype(A)
    for g in grads:
        if g.dtype == A:
            g *= coef
        else:                  # half gradients: scaled in float32, rounded once
            g[...] = (g.astype(A) * coef).astype(g.dtype)
    dtypes = {g.dtype for g in grads}            # (torch's: in the gradients' dtype)
    return Tensor(total.astype(dtypes.pop()) if len(dtypes) == 1 else total)


def _checked_total(total, norm_type, error_if_nonfinite):
    """The total norm, refused when it is not finite and error_if_nonfinite asks (a host read
    of one number, as torch's check)."""
    if error_if_nonfinite and not bool(xp_of(total).isfinite(total)):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           f"`parameters` is non-finite, so it cannot be clipped (as torch: "
                           f"error_if_nonfinite=False to clip anyway)")
    return total



def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient into [-clip_value, clip_value] in place (torch's
    clip_grad_value_; a negative clip_value sets every gradient to it, as torch's clamp with
    min > max); returns None, as torch's. NaN stays NaN."""
    for p in (parameters if not isinstance(parameters, Tensor) else [parameters]):
        if p.grad is not None:
            g = p.grad.data
            xp_of(g).clip(g, -clip_value, clip_value, out=g)

from . import lr_scheduler  # noqa: E402  (layers.optim.lr_scheduler, as torch.optim.lr_scheduler)
# ... and importable under that name: `from layers.optim.lr_scheduler import StepLR`
sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler

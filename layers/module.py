"""Module, Parameter, Sequential: parameters, buffers and submodules registered by assignment,
state_dict keys and order exactly as PyTorch writes them (own parameters, own buffers, then each
child), NumPy arrays in and out."""
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy as np

from .backend import (bfloat16, floating_dtype_or_none, from_foreign, is_floating, is_gpu,
                      np_dtype, parse_device, to_channels_last, to_contiguous, to_device)
from .finite import active as _finite
from .trace import active as _trace
from .changes import mark_changed
from .tensor import Tensor


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
IncompatibleKeys.__doc__ = "load_state_dict's answer, as torch's: the keys missing and unexpected."


class Parameter(Tensor):
    """A Tensor that a Module registers as trainable (requires_grad=True)."""

    def __init__(self, data, requires_grad=True):
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


def options_repr(head, *options):
    """A module's extra_repr as torch prints it: `head`, then ", name=value" for each option
    (name, value, shown) that is shown (torch leaves out an option at its default)."""
    return head + "".join(f", {name}={value}" for name, value, shown in options if shown)


class Module:
    # True where finite inputs always give a finite output (activations): layers.finite skips
    # checking such a leaf's output when its inputs were checked
    finite_preserving = False
    _forward_pre_hooks = None       # {key: hook(module, args)} (register_forward_pre_hook)
    _forward_hooks = None           # {key: hook(module, args, output)} (register_forward_hook)

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration -------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                                 f"before assigning {name!r}")
        if getattr(type(self).__dict__.get(name), "parametrized", False):
            if isinstance(value, Parameter):      # (torch's refusal; a Tensor: right_inverse)
                raise KeyError(f"attribute '{name}' already exists")
            object.__setattr__(self, name, value)  # (layers.parametrize's property)
            return
        if isinstance(value, Parameter):
            self._buffers.pop(name, None)
            self._modules.pop(name, None)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = value if value is None or isinstance(value, Tensor) \
                else Tensor(value)
        elif name in self._parameters:
            if value is not None:      # (as torch: a plain tensor there would leave the
                raise TypeError(      # state_dict and the optimizer on the old Parameter)
                    f"cannot assign {type(value).__name__!r} as parameter {name!r} of "
                    f"{type(self).__name__}: expected a layers.nn.Parameter or None")
            self._parameters[name] = None
        elif name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__!r} as submodule {name!r} "
                                f"of {type(self).__name__}: expected a Module or None")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __delattr__(self, name):
        """del module.weight (a parameter, buffer or submodule): unregistered, as torch's (MAML
        code then sets a plain Tensor there)."""
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                return
        object.__delattr__(self, name)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def register_buffer(self, name, value, persistent=True):
        """A non-trainable tensor saved in state_dict (running statistics, counters); with
        persistent=False moved with the module but left out of state_dict (a causal mask), as
        torch's."""
        self._buffers[name] = value if value is None or isinstance(value, Tensor) \
            else Tensor(value)
        transient = self.__dict__.setdefault("_non_persistent", set())
        (transient.discard if persistent else transient.add)(name)

    def register_parameter(self, name, param):
        if param is None:
            self._parameters[name] = None
        else:
            self.__setattr__(name, param)

    # ---- traversal ----------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(path, module) of self and every submodule, depth first, as torch's: a module used
        in two places is listed once (at its first path) unless remove_duplicate is False."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name,
                                           remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    def add_module(self, name, module):
        """torch's: `module` (a Module or None) as child `name`."""
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"add_module: a name must be a non-empty string without '.', got "
                           f"{name!r}")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a Module")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        """The module at dotted path `target` ('' is self), as torch's."""
        m = self
        for part in target.split(".") if target else ():
            if part not in m._modules or m._modules[part] is None:
                raise AttributeError(f"{type(m).__name__} has no submodule {part!r} "
                                     f"(looking up {target!r})")
            m = m._modules[part]
        return m

    def children(self):
        return (m for _, m in self.named_children())

    def named_children(self):
        """(name, child), a child used under two names listed once, as torch's."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def _named_members(self, kind, prefix, recurse, remove_duplicate):
        """(path, tensor) of the `kind` dict (_parameters, _buffers) of self (and with recurse
        its submodules), each tensor once unless remove_duplicate is False, as torch's."""
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        seen = set()
        for mod_name, m in modules:
            for name, t in getattr(m, kind).items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mod_name}.{name}" if mod_name else name), t

    # ---- state --------------------------------------------------------------------------------
    def _state_items(self, persistent_only=False):
        """(key, Tensor) in PyTorch's state_dict order (a module used twice: under each path,
        as torch's); persistent_only: without buffers registered persistent=False (state_dict
        leaves them out, .to() and a captured step keep them)."""
        for mod_name, m in self.named_modules(remove_duplicate=False):
            pre = f"{mod_name}." if mod_name else ""
            for name, p in m._parameters.items():
                if p is not None:
                    yield pre + name, p
            transient = m.__dict__.get("_non_persistent", ()) if persistent_only else ()
            for name, b in m._buffers.items():
                if b is not None and name not in transient:
                    yield pre + name, b

    def state_dict(self):
        """OrderedDict of NumPy copies, keys as PyTorch (e.g. 'main.1.running_mean')."""
        return OrderedDict((k, np.array(t.numpy(), copy=True))
                           for k, t in self._state_items(persistent_only=True))

    def load_state_dict(self, state_dict, strict=True):
        """Copy arrays (NumPy, CuPy, this engine's Tensors, or torch tensors) into this module's
        parameters and buffers in place, on their current devices. Refused as torch refuses, with
        its RuntimeError and message: a shape that differs (strict or not), and with `strict`
        keys missing or unexpected. Everything is checked before anything is copied: a refused
        state dict leaves the module as it was (torch's may have copied part of it)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        state_dict, missing, unexpected, hook_errors = self._load_pre_hooks(state_dict, strict)
        own = OrderedDict(self._state_items(persistent_only=True))
        missing += [k for k in own if k not in state_dict]
        unexpected += [k for k in state_dict if k not in own]
        errors = []
        if strict and missing:
            errors.append("Missing key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in missing) + ". ")
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        errors += hook_errors
        values = []
        for key, t in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            value = value.data if isinstance(value, Tensor) else from_foreign(value)  # (torch's)
            value = value.get() if is_gpu(value) else np.asarray(value)
            if tuple(value.shape) != tuple(t.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{tuple(value.shape)} from checkpoint, the shape in current model "
                              f"is {tuple(t.shape)}.")
            values.append((t, value))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        for t, value in values:
            t.data[...] = to_device(value.astype(t.dtype, copy=False), t.device)
            mark_changed(t, f"{type(self).__name__}.load_state_dict")
        return IncompatibleKeys(missing, unexpected)

    def _register_load_state_dict_pre_hook(self, hook):
        """hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs) runs before load_state_dict reads anything, with a copy of the state dict it
        may change (rename an older form's keys: parametrizations.weight_norm) and this module's
        key prefix ('main.2.'), as torch's; what it adds to the three lists is reported with the
        rest."""
        self.__dict__.setdefault("_load_state_dict_pre_hooks", []).append(hook)

    def _load_pre_hooks(self, state_dict, strict):
        """(the state dict as the modules' pre-hooks leave it -- a copy --, missing keys,
        unexpected keys, error messages) they reported."""
        state_dict, missing, unexpected, errors = OrderedDict(state_dict), [], [], []
        for path, m in self.named_modules(remove_duplicate=False):
            for hook in m.__dict__.get("_load_state_dict_pre_hooks", ()):
                hook(state_dict, f"{path}." if path else "", {}, strict, missing, unexpected,
                     errors)
        return state_dict, missing, unexpected, errors

    # ---- modes and devices --------------------------------------------------------------------
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=0):
        return self.to(parse_device(device))

    def requires_grad_(self, requires_grad=True):
        """Every parameter's requires_grad (freezing a part of a model), as torch's."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def to(self, device=None, dtype=None, memory_format=None):
        """Move every parameter, gradient and buffer to `device` in place (a floating dtype in
        its place, or `dtype`, is to_dtype's, as torch's module.to(torch.bfloat16)); memory_format
        'channels_last' stores every 4-d one (N, C, H, W) as (N, H, W, C), PyTorch's
        channels_last: the convolutions and batch norms they feed then run cuDNN's NHWC kernels
        (do this before making the optimizer or capturing a step: the arrays are new);
        'contiguous' goes back. Returns self."""
        if memory_format not in (None, "channels_last", "contiguous"):
            raise ValueError(f"to: memory_format must be 'channels_last' or 'contiguous', got "
                             f"{memory_format!r}")
        if device is not None and floating_dtype_or_none(device) is not None:
            device, dtype = None, device
        if dtype is not None:
            if floating_dtype_or_none(dtype) is None:
                raise TypeError(f"to: dtype must be a floating dtype (float16, bfloat16, "
                                f"float32, float64), got {dtype!r}")
            self.to_dtype(dtype)
        if device is not None:
            device = parse_device(device)
        for _, t in self._state_items():
            for a in (t, t.grad):
                if a is None:
                    continue
                if device is not None:
                    a.data = to_device(a.data, device)
                if memory_format is not None and a.data.ndim == 4:
                    a.data = to_channels_last(a.data) if memory_format == "channels_last" \
                        else to_contiguous(a.data)
        return self

    def to_dtype(self, dtype):
        """Cast every floating parameter and buffer (not integer counters) in place: each module's
        own to `param_dtype(dtype)` (batch norm keeps float32 for float16 data, as cuDNN wants)."""
        dtype = np_dtype(dtype)
        for m in self.modules():
            target = m.param_dtype(dtype)
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is not None and is_floating(t.dtype) and t.dtype != target:
                    t.data = t.data.astype(target)
                    if t.grad is not None:
                        t.grad.data = t.grad.data.astype(target)
        return self

    def param_dtype(self, dtype):
        """The dtype this module's own floating parameters and buffers take for `dtype` data."""
        return np.dtype(dtype)

    def double(self):
        return self.to_dtype(np.float64)

    def float(self):
        return self.to_dtype(np.float32)

    def half(self):
        return self.to_dtype(np.float16)

    def bfloat16(self):
        return self.to_dtype(bfloat16)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data[...] = 0
                mark_changed(p.grad, "zero_grad(set_to_none=False)")

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def register_forward_pre_hook(self, hook):
        """hook(module, args) runs before forward, as torch's; it may return new positional
        args (a tuple, or one value). Returns a handle whose remove() takes it off."""
        return _ModuleHookHandle(self, "_forward_pre_hooks", hook)

    def register_forward_hook(self, hook):
        """hook(module, args, output) runs after forward, as torch's; it may return a new
        output. Returns a handle whose remove() takes it off."""
        return _ModuleHookHandle(self, "_forward_hooks", hook)

    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks:
            for hook in list(self._forward_pre_hooks.values()):
                new = hook(self, args)
                if new is not None:
                    args = new if isinstance(new, tuple) else (new,)
        trace = _trace.trace                 # a layers.trace.Trace names this step's ops
        if trace is None:
            out = self.forward(*args, **kwargs)
        else:
            trace.enter_module(self)
            try:
                out = self.forward(*args, **kwargs)
            finally:
                trace.exit_module()
        if self._forward_hooks:
            for hook in list(self._forward_hooks.values()):
                new = hook(self, args, out)
                if new is not None:
                    out = new
        if _finite.check is not None:        # a layers.finite.FiniteCheck watches this step
            _finite.check.output(self, out, args)
        return out

    def extra_repr(self):
        return ""

    def __repr__(self):
        """torch's: extra_repr's lines, then each child's, indented; one extra line and no child
        inline."""
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + repr(m).replace("\n", "\n  ")
                       for name, m in self._modules.items()]
        lines = extra_lines + child_lines
        if not lines:
            return f"{type(self).__name__}()"
        if len(extra_lines) == 1 and not child_lines:
            return f"{type(self).__name__}({extra_lines[0]})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class _ModuleHookHandle:
    """A module hook's registration (its own key in the module's table): remove() takes it
    off."""
    _next = 0

    def __init__(self, module, table, hook):
        if getattr(module, table) is None:
            object.__setattr__(module, table, OrderedDict())
        _ModuleHookHandle._next += 1
        self.key, self._table = _ModuleHookHandle._next, getattr(module, table)
        self._table[self.key] = hook

    def remove(self):
        self._table.pop(self.key, None)


class _Container(Module):
    """What ModuleList / ModuleDict and ParameterList / ParameterDict share: their items live
    in one of the Module's own dicts (`_slot`: '_modules' or '_parameters', so traversal,
    state_dict and .to() see them as torch's do), each of kind `_kind`."""
    _slot = "_modules"
    _kind = Module

    @property
    def _items(self):
        return self.__dict__[self._slot]

    def _checked(self, where, value):
        if not isinstance(value, self._kind):
            raise TypeError(f"{type(self).__name__}{where}: expected a {self._kind.__name__}, "
                            f"got {type(value).__name__}")
        return value

    def __len__(self):
        return len(self._items)


class _ListOf(_Container):
    """Items named '0', '1', ... kept in order."""

    def __init__(self, values=()):
        super().__init__()
        for v in values:
            self.append(v)

    def append(self, value):
        self._items[str(len(self._items))] = self._checked(".append", value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):                # (torch: one of the same kind, same items)
            return self.__class__(list(self._items.values())[i])
        return list(self._items.values())[i]

    def __setitem__(self, i, value):
        value = self._checked(f"[{i}] = ...", value)
        key = list(self._items)[i]              # (an IndexError past the end, as a list's)
        self._items[key] = value

    def __iter__(self):
        return iter(self._items.values())


class _DictOf(_Container):
    """Items under string keys, kept in insertion order: state_dict names are `key...`."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.update(values)

    def __setitem__(self, key, value):
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"{type(self).__name__}: a key must be a non-empty string without "
                           f"'.', got {key!r}")
        self._items[key] = self._checked(f"[{key!r}] = ...", value)

    def __getitem__(self, key):
        return self._items[key]

    def __delitem__(self, key):
        del self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __contains__(self, key):
        return key in self._items

    def keys(self):
        return self._items.keys()

    def values(self):
        return self._items.values()

    def items(self):
        return self._items.items()

    def pop(self, key):
        return self._items.pop(key)

    def clear(self):
        self._items.clear()

    def update(self, values):
        """From a mapping or (key, value) pairs, in their order."""
        for key, value in (values.items() if hasattr(values, "items") else values):
            self[key] = value


class ModuleList(_ListOf):
    """Children named '0', '1', ... kept in order, with no forward of its own (torch's
    ModuleList): what a model iterates over itself."""

    def __init__(self, modules=()):              # (torch's argument names)
        super().__init__(modules)

    def append(self, module):
        return super().append(module)

    def extend(self, modules):
        return super().extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice) and isinstance(self, Sequential):   # (its children keep
            return self.__class__(OrderedDict(list(self._modules.items())[i]))  # their names)
        return super().__getitem__(i)


class ModuleDict(_DictOf):
    """Children under string keys, kept in insertion order (torch's ModuleDict): state_dict
    names are `key.param`."""

    def __init__(self, modules=None):            # (torch's argument names)
        super().__init__(modules)

    def update(self, modules):
        super().update(modules)


class _ParameterItems:
    """ParameterList's and ParameterDict's kind: a Parameter; a Tensor or array given is made
    one, which requires grad (as torch's wrap a Tensor)."""
    _slot, _kind = "_parameters", Parameter

    def _checked(self, where, value):
        if isinstance(value, Parameter):
            return value
        return Parameter(value.data if isinstance(value, Tensor) else value)   # (trainable)

    def extra_repr(self):
        """torch's lines, '  (name): Parameter containing: [dtype of size AxB (device)]' (the
        dtype named as here, float32 where torch says torch.float32)."""
        lines = []
        for name, p in self._parameters.items():
            device = "" if p.device == "cpu" else f" ({p.device})"
            size = "x".join(str(n) for n in p.shape)
            lines.append(f"  ({name}): Parameter containing: [{p.dtype} of size {size}{device}]")
        return "\n".join(lines)


class ParameterList(_ParameterItems, _ListOf):
    """torch's ParameterList: parameters named '0', '1', ..."""


class ParameterDict(_ParameterItems, _DictOf):
    """torch's ParameterDict: parameters under string keys."""

    def __init__(self, parameters=None):         # (torch's argument names)
        super().__init__(parameters)

    def update(self, parameters):
        super().update(parameters)

    def get(self, key, default=None):
        return self._items.get(key, default)

    def setdefault(self, key, default=None):
        if key not in self._items:
            self[key] = default
        return self._items[key]


class Sequential(ModuleList):
    """Children named '0', '1', ... (or by an OrderedDict's keys, as torch's) applied in order."""

    def __init__(self, *modules):
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            super().__init__()
            for name, m in modules[0].items():
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential: {name!r} is a {type(m).__name__}, not a "
                                    f"Module")
                self._modules[name] = m
            return
        super().__init__(modules)

    def forward(self, input):
        for m in self:
            input = m(input)
        return input

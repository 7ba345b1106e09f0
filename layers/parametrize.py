"""torch.nn.utils.parametrize: a module's parameter or buffer replaced by a function of other
tensors -- `module.weight` is computed, on each read, by modules (parametrizations) from the
tensors kept under `module.parametrizations.weight.original` (or original0, original1, ... when
the first parametrization's right_inverse splits it into several); assigning `module.weight = X`
runs the parametrizations' right_inverse and stores what it gives in the originals.

    parametrize.register_parametrization(conv, "weight", Symmetric())
    conv.weight                    # Symmetric()(conv.parametrizations.weight.original)
    with parametrize.cached():     # each parametrized tensor computed once in the block
        ...

As torch's: the module's class becomes `Parametrized<Class>` (a subclass with a property per
parametrized name), the originals keep the parameter's identity where they can (one original: the
same Parameter object, with the right inverse's data), and the state_dict keys are torch's
(`parametrizations.weight.original`, `parametrizations.weight.0._u`), so checkpoints move both
ways. layers.parametrizations has torch's weight_norm and spectral_norm in this form.
"""
import contextlib
from collections.abc import Sequence

from .changes import mark_changed
from .module import Module, ModuleDict, ModuleList, Parameter
from .tensor import Tensor, no_grad

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached",
           "type_before_parametrizations", "ParametrizationList"]

_cache_depth = 0
_cache = {}                 # {(id(module), name): the tensor}, inside cached()


@contextlib.contextmanager
def cached():
    """Inside the block each parametrized tensor is computed once, on its first read, and that
    Tensor is returned again (a forward reads a weight shared by several layers, or a recurrent
    layer's weight once per time step, once); as torch's, blocks nest and the cache is dropped
    when the outermost ends."""
    global _cache_depth
    _cache_depth += 1
    try:
        yield
    finally:
        _cache_depth -= 1
        if not _cache_depth:
            _cache.clear()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and its originals: `original` (a
    Parameter or buffer: the tensor as the right inverses left it) or original0, original1, ...
    when the first parametrization's right_inverse gives a sequence (weight_norm: g and v)."""

    def __init__(self, modules, original, unsafe=False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = original.shape, original.dtype
        with no_grad():
            new = original
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
                # (no right_inverse, or one that says NotImplementedError: the identity)
        if not isinstance(new, (Tensor, Sequence)):
            raise ValueError(f"'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if new.dtype != dtype:
                raise ValueError(f"When `right_inverse` outputs one tensor, it may not change "
                                 f"the dtype.\noriginal.dtype: {dtype}\n"
                                 f"right_inverse(original).dtype: {new.dtype}")
            if new.device != original.device:
                raise ValueError(f"When `right_inverse` outputs one tensor, it may not change "
                                 f"the device.\noriginal.device: {original.device}\n"
                                 f"right_inverse(original).device: {new.device}")
            _set(original, new)        # (the same Parameter: an optimizer made before keeps it)
            _register(self, "original", original)
        else:
            for i, item in enumerate(new):
                if not isinstance(item, Tensor):
                    raise ValueError(f"'right_inverse' must return a Tensor or a Sequence of "
                                     f"tensors (list, tuple...). Got element {i} of the sequence "
                                     f"with type {type(item).__name__}.")
                # new tensors: an optimizer made before the registration must be given them
                if isinstance(original, Parameter):
                    item = Parameter(item.data, original.requires_grad)
                else:
                    item = Tensor(item.data, requires_grad=original.requires_grad)
                _register(self, f"original{i}", item)
        if not unsafe:
            _check_result(self(), dtype, shape, "A parametrization must return a tensor. Got {}.",
                          "Registering a parametrization may not change the {} of the tensor, "
                          "unless `unsafe` flag is enabled.", "unparametrized {}",
                          "parametrized {}")

    def right_inverse(self, value):
        """Store `value` (assigned to the parametrized tensor) in the originals: each
        parametrization's right_inverse, last first (torch's; a parametrization without one
        cannot be assigned to)."""
        with no_grad():
            for module in reversed(self):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       f"implement right_inverse.")
                value = module.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(f"The tensor returned by `right_inverse` has dtype "
                                     f"{value.dtype} while `original` has dtype "
                                     f"{self.original.dtype}")
                _set(self.original, value)
                return
            if not isinstance(value, Sequence):
                raise ValueError(f"'right_inverse' must return a sequence of tensors. Got "
                                 f"{type(value).__name__}.")
            if len(value) != self.ntensors:
                raise ValueError(f"'right_inverse' must return a sequence of tensors of length "
                                 f"{self.ntensors}. Got a sequence of length {len(value)}.")
            for i, item in enumerate(value):
                original_i = getattr(self, f"original{i}")
                if not isinstance(item, Tensor):
                    raise ValueError(f"`right_inverse` must return a sequence of tensors. Got "
                                     f"element {i} of type {type(item).__name__}")
                if original_i.dtype != item.dtype:
                    raise ValueError(f"Tensor {i} returned by `right_inverse` has dtype "
                                     f"{item.dtype} while `original{i}` has dtype "
                                     f"{original_i.dtype}")
                _set(original_i, item)

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


class _Parametrized(property):
    """The property a parametrized class has for each parametrized name (Module.__setattr__
    hands an assignment to it)."""
    parametrized = True

    def __init__(self, name):
        def get(module):
            parametrization = module.parametrizations[name]
            if not _cache_depth:
                return parametrization()
            key = (id(module), name)
            tensor = _cache.get(key)
            if tensor is None:
                tensor = _cache[key] = parametrization()
            return tensor

        def set_(module, value):
            module.parametrizations[name].right_inverse(value)
        super().__init__(get, set_)


def is_parametrized(module, tensor_name=None):
    """Whether `module` has a parametrization (on `tensor_name`, if given)."""
    parametrizations = getattr(module, "parametrizations", None)
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else tensor_name in parametrizations


def type_before_parametrizations(module):
    """The module's class as it was before any parametrization (Conv2d for a
    ParametrizedConv2d)."""
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Parametrize `module`'s parameter or buffer `tensor_name` by the module `parametrization`
    (a second one on the same name is applied to the first's result). Unless `unsafe`, the
    parametrized tensor must keep its shape and dtype, and a right_inverse must give tensors
    back (torch's checks, its ValueErrors). Returns the module."""
    if not isinstance(module, Module):
        raise TypeError(f"register_parametrization: expected a Module, got "
                        f"{type(module).__name__}")
    if not isinstance(parametrization, Module):
        raise TypeError(f"register_parametrization: a parametrization must be a Module, got "
                        f"{type(parametrization).__name__}")
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            name = f"module.{tensor_name}"
            _check_result(x, y.dtype, y.shape, "A parametrization must return a tensor. Got {}.",
                          "Registering a parametrization may not change the {} of the tensor, "
                          "unless the `unsafe` flag is enabled.", name + ".{}",
                          f"parametrization({name})" + ".{}")
            if hasattr(parametrization, "right_inverse"):
                try:
                    z = parametrization.right_inverse(x)
                except NotImplementedError:
                    pass
                else:
                    _check_result(z, y.dtype, y.shape,
                                  "parametrization.right_inverse must return a tensor. Got: {}",
                                  "The tensor returned by parametrization.right_inverse must "
                                  "have the same {} as " + name + ", unless the `unsafe` flag "
                                  "is enabled.", name + ".{}", "returned {}")
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe |= unsafe            # (an unsafe one makes the list unsafe from then on)
    elif tensor_name in module._parameters or tensor_name in module._buffers:
        original = getattr(module, tensor_name)
        if original is None:
            raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                             f"parametrized element with name '{tensor_name}'")
        plist = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        setattr(type(module), tensor_name, _Parametrized(tensor_name))
        module.parametrizations[tensor_name] = plist
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Take the parametrizations of `tensor_name` off: it becomes a parameter (or buffer) again
    -- its parametrized value now (leave_parametrized), or its original (one original only).
    With one original the same Parameter object comes back (an optimizer keeps it). Returns the
    module."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                _set(original, getattr(module, tensor_name))
    elif leave_parametrized:
        t = getattr(module, tensor_name)
        original = Parameter(t.detach().data, True) if t.requires_grad else t.detach()
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that "
                         "is parametrized in terms of a sequence of tensors.")
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    _register(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = type(module).__bases__[0]
    return module


def _register(module, name, tensor):
    if isinstance(tensor, Parameter):
        module.register_parameter(name, tensor)
    else:
        module.register_buffer(name, tensor)


def _set(original, new):
    """torch's original.set_(new): the original Tensor object, holding new's data."""
    if new is original:
        return
    original.data = new.data
    mark_changed(original, "parametrize (right_inverse)")


def _check_result(x, dtype, shape, not_tensor, changed, before, after):
    """x -- a parametrization's result, or a right inverse's -- is a Tensor of the `dtype` and
    `shape` of the tensor it stands for; refused as torch refuses (its ValueErrors: `not_tensor`
    naming x's type, `changed` followed by the two dtypes or shapes labelled `before` / `after`
    with 'dtype' or 'shape' put in for {})."""
    if not isinstance(x, Tensor):
        raise ValueError(not_tensor.format(type(x).__name__))
    for what, want, got in (("dtype", dtype, x.dtype), ("shape", tuple(shape), tuple(x.shape))):
        if want != got:
            raise ValueError(f"{changed.format(what)}\n{before.format(what)}: {want}\n"
                             f"{after.format(what)}: {got}")


def _inject_new_class(module):
    """module's class becomes a subclass of its own, Parametrized<Class>, that the properties
    go on (as torch's: other modules of the class are left alone); such a module is saved
    through its state_dict, not pickled."""
    cls = type(module)

    def __getstate__(self):
        raise RuntimeError("Serialization of parametrized modules is only supported through "
                           "state_dict().")

    def __deepcopy__(self, memo):
        import copy
        replica = memo.get(id(self))
        if replica is None:
            replica = memo[id(self)] = self.__new__(type(self))
            replica.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return replica

    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,),
                            {"__getstate__": __getstate__, "__deepcopy__": __deepcopy__,
                             "__module__": cls.__module__})

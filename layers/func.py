"""torch.func's functional_call: a module run with other tensors in place of its parameters and
buffers (MAML's inner steps, ensembles, a Hessian in the parameters), the module left as it was.

    out = L.func.functional_call(net, {"0.weight": w, "0.bias": b}, (x,))

The given tensors are swapped into the module's own dicts for the one call and swapped back
after it, error or not, as torch's: the call records its graph through them (a non-leaf
weight carries its gradient back to whatever made it), a missing name keeps the module's own
tensor, and a buffer the call changes in place (batch norm's running statistics) is the given
tensor changed. Also at torch's older path, nn.utils.stateless.functional_call.
"""
from .module import Module
from .tensor import Tensor

_MISSING = object()


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with the tensors of `parameter_and_buffer_dicts` (one dict, or a
    tuple / list of dicts with distinct keys, named as named_parameters / named_buffers name
    them) in place of its own. tie_weights: a tensor the module holds under two names (a shared
    embedding) takes a value given for either name under both (two different values for one
    tied tensor are refused). strict: every parameter and buffer given, no other name. args
    that is not a tuple is the one argument."""
    if isinstance(parameter_and_buffer_dicts, dict):
        given = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, (tuple, list)):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("functional_call: expected all elements of "
                             "parameter_and_buffer_dicts to be dictionaries")
        given, repeated = {}, []
        for d in parameter_and_buffer_dicts:
            for name, value in d.items():
                if name in given and name not in repeated:
                    repeated.append(name)
                given[name] = value
        if repeated:
            raise ValueError(f"functional_call: {repeated} appeared in multiple dictionaries; "
                             f"behavior of functional call is ambiguous")
    else:
        raise ValueError(f"functional_call: expected parameter_and_buffer_dicts to be a dict, "
                         f"or a list/tuple of dicts, but got {type(parameter_and_buffer_dicts)}")
    if not isinstance(module, Module):
        raise TypeError(f"functional_call: expected a Module, got {type(module).__name__}")
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    swapped = _untied(module, given) if tie_weights else dict(given)
    if strict:
        _check_keys(module, swapped)
    originals = {}
    try:
        for name, value in swapped.items():
            originals[name] = _swap(module, name, value)
        return module(*args, **(kwargs or {}))
    finally:
        after = {name: _swap(module, name, old) for name, old in reversed(originals.items())}
        # a module that reassigned a given buffer in its forward: the dict gets the new one
        given.update({name: after[name] for name in given if name in after})


def _named_tensors(module):
    """{path: tensor} of every parameter and buffer, a tensor held twice under both names."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def _untied(module, given):
    """given, with each value for a tied tensor also under the tensor's other names."""
    names_of = {}
    for name, t in _named_tensors(module).items():
        if t is not None:
            names_of.setdefault(id(t), []).append(name)
    tied = {name: names for names in names_of.values() if len(names) > 1 for name in names}
    untied = dict(given)
    for name in given:
        if name not in tied:
            continue
        values = {id(given[n]): given[n] for n in tied[name] if n in given}
        if len(values) > 1:
            raise ValueError(f"functional_call got multiple values for keys "
                             f"{sorted(tied[name])}, which are tied. Consider using "
                             f"tie_weights=False")
        for n in tied[name]:
            untied[n] = given[name]
    return untied


def _check_keys(module, given):
    valid = set(_named_tensors(module))
    missing, unexpected = sorted(valid - set(given)), sorted(set(given) - valid)
    errors = []
    if unexpected:
        errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if errors:
        raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" +
                           "\n\t".join(errors))


def _swap(module, path, value):
    """Put value (a Tensor, None, or _MISSING: remove) at dotted `path`; return what was there
    (_MISSING where nothing was). The module's own dicts are written directly: a plain Tensor
    takes a Parameter's place for the call, as torch's."""
    if value is not _MISSING and value is not None and not isinstance(value, Tensor):
        raise TypeError(f"functional_call: {path!r} must be a Tensor, got "
                        f"{type(value).__name__}")
    owner_path, _, name = path.rpartition(".")
    if not name:
        raise KeyError(f"functional_call: tensor name can't be empty string \"\" ({path!r})")
    owner = module.get_submodule(owner_path)
    for table in (owner._parameters, owner._buffers):
        if name in table:
            old = table[name]
            if value is _MISSING:
                del table[name]
            else:
                table[name] = value
            return old
    old = owner.__dict__.get(name, _MISSING)
    if name in owner._modules or (old is not _MISSING and old is not None and
                                  not isinstance(old, Tensor)):
        raise TypeError(f"functional_call: attribute {path!r} of {type(owner).__name__} is not "
                        f"a Tensor")
    if value is _MISSING:
        owner.__dict__.pop(name, None)
    else:
        object.__setattr__(owner, name, value)
    return old

"""`configure` / `using` for a module whose behaviour lives in a frozen dataclass held as its
module-global `settings` (cudnnlite.conv, cudnnlite.blas): every cache key includes the current
settings object, so swapping it takes effect at once."""
import sys
from contextlib import contextmanager
from dataclasses import astuple, replace


def cached_hash(self):
    """__hash__ for a settings dataclass (frozen: its fields never change), computed once: the
    settings object is part of every cache key, looked up on every call."""
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash(astuple(self))
        object.__setattr__(self, "_hash", h)
    return h


def state_without_hash(self):
    """__getstate__ for the same: a pickled or copied settings object does not carry the cached
    hash (another process hashes its strings with another seed)."""
    state = dict(self.__dict__)
    state.pop("_hash", None)
    return state


def settings_functions(module_name, check=lambda changes: None):
    """(configure, using) for the module named `module_name`; check(changes) raises on a bad
    value before anything changes."""
    module = sys.modules[module_name]

    def configure(**changes):
        """Change settings for the rest of the process, e.g. configure(allow_tf32=False)."""
        check(changes)
        module.settings = replace(module.settings, **changes)
        return module.settings

    @contextmanager
    def using(**changes):
        """Temporarily change settings: `with module.using(allow_tf32=False): ...`."""
        saved = module.settings
        configure(**changes)
        try:
            yield module.settings
        finally:
            module.settings = saved
    return configure, using

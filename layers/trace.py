"""Where a step's work comes from, for profilers: while a Trace is active on a thread, each op's
forward (Function.apply), each op's backward (Tensor.backward) and each parameter's optimizer
update opens a Scope named by its direction, its layer path and its op:

    ('fprop', 'netD.main.2', 'Conv2d')   ('bprop', 'netD.main.2', 'Conv2d')
    ('optimizer', 'netD.main.2.weight', 'Adam')

The layer path is the innermost module call (Module.__call__) the op ran in, named as
named_modules() names it under the Trace's model names; an op's backward is credited to the layer
its forward ran in. A Scope opens and closes by the Trace's `on_enter` / `on_exit` callbacks, which
is where a profiler hooks in: tools.kernels pushes a CUPTI external-correlation id per scope (so
every GPU kernel is matched to its op) and an NVTX range (so Nsight shows the same names).

Inactive (no Trace), each hook costs one thread-local attribute read."""
import threading
from dataclasses import dataclass, field


class _Active(threading.local):
    trace = None                     # the Trace in effect on this thread


active = _Active()


@dataclass
class Scope:
    index: int                       # order of opening within the trace
    direction: str                   # 'fprop' | 'bprop' | 'optimizer'
    layer: str                       # 'netD.main.2', '' outside every named module
    op: str                          # 'Conv2d', 'MatMul', 'Adam', ...
    shapes: tuple = ()               # the op's array inputs' shapes (both directions)
    dtype: str = ""
    calls: list = field(default_factory=list)   # filled by the profiler (cuDNN calls, ...)


class Trace:
    """with Trace({'netG': netG, 'netD': netD}, on_enter=f, on_exit=g) as t: step() -- then
    t.scopes lists every op scope of the step in the order they opened."""

    def __init__(self, models, on_enter=None, on_exit=None):
        self.module_paths, self.param_paths = {}, {}
        for name, model in models.items():
            for path, m in model.named_modules(prefix=name):
                self.module_paths[id(m)] = path
            for path, p in model.named_parameters(name):
                self.param_paths[id(p)] = path
        self.on_enter, self.on_exit = on_enter, on_exit
        self.scopes = []
        self._layers = []            # the module-call stack's paths
        self._open = []              # the open scopes (an op's backward may run ops)

    def __enter__(self):
        if active.trace is not None:
            raise RuntimeError("a layers.trace.Trace is already active on this thread")
        active.trace = self
        return self

    def __exit__(self, *exc):
        while self._open:               # a scope left open (an abandoned optimizer loop): close
            self.close()                # it now, so the profiler's pushes and pops balance
        active.trace = None

    # ---- the engine's hooks ----------------------------------------------------------------
    def enter_module(self, module):
        path = self.module_paths.get(id(module))
        self._layers.append(path if path is not None else
                            (self._layers[-1] if self._layers else ""))

    def exit_module(self):
        self._layers.pop()

    @property
    def layer(self):
        return self._layers[-1] if self._layers else ""

    def open(self, direction, op, layer=None, arrays=()):
        shapes = tuple(tuple(a.shape) for a in arrays if hasattr(a, "shape"))
        dtype = next((str(a.dtype) for a in arrays if hasattr(a, "dtype")), "")
        s = Scope(len(self.scopes), direction, self.layer if layer is None else layer, op,
                  shapes, dtype)
        if self.on_enter is not None:
            self.on_enter(s)            # first: a scope whose hook failed is not left open
        self.scopes.append(s)
        self._open.append(s)
        return s

    def close(self):
        if not self._open:              # closed already by __exit__
            return
        s = self._open.pop()
        if self.on_exit is not None:
            self.on_exit(s)

    @property
    def current(self):
        """The innermost open scope, or None."""
        return self._open[-1] if self._open else None

    def param_path(self, p):
        return self.param_paths.get(id(p), "")

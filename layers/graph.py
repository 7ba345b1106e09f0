"""Whole-step CUDA-graph capture: a step function is run eagerly to warm up (kernels compiled,
cuDNN algorithms chosen, workspaces sized, optimizer state made), then one call is captured
into a CUDA graph on a private memory pool; every later call with the same key copies its inputs
into the captured step's static input buffers and replays the graph -- one launch instead of
hundreds, no Python in between.

A graph replays fixed kernels, fixed scalar arguments and fixed addresses, so:
- its key is everything that changes them: the inputs' shapes, dtypes, device and requires_grad,
  grad mode, cudnnlite's conv settings, and for the `modules` / `optimizers` given: every
  module's train / eval flag and plain settings (numbers, strings, flags such as a dropout
  switch), the address, dtype, shape and requires_grad of every parameter and buffer (a part
  frozen or unfrozen between calls changes which gradients the step computes), every optimizer's
  hyper-parameters (lr, betas, ...), the same of its parameters (held by no module given, too)
  and the addresses of its state. A call whose key is new is
  warmed up and captured anew. The most recently used graphs are kept: at most `max_graphs`,
  and while more than one is kept, at most `max_bytes` of memory in their pools (default: half
  the device's memory) -- each graph's pool holds its step's peak of intermediates, so a
  variable-shape workload (Tacotron 2: one graph per batch shape) would otherwise fill the
  device with graphs.
- host values the step reads -- Python numbers, sequence lengths -- are baked into the graph as
  they were at capture: pass them as keyword arguments, `step(x, lengths=(5, 3))` (hashable
  values: they join the key and reach fn as keywords), or as device inputs.
- it owns, or keeps alive, every buffer it touches: its pool (intermediates, outputs), the
  parameter / buffer / optimizer-state arrays of its key, the device RNG's state, and the
  workspaces cudnnlite handed out during capture (cudnnlite.capture_scope).
State that changes between replays is updated in place by this engine (Optimizer.load_state_dict,
manual_seed, Module.load_state_dict), so a replay after it computes what an eager call would.
Host syncs and allocations of unpredictable size must stay out of the step.
"""
import gc
from collections import OrderedDict

from .backend import copy_like, cupy, is_gpu
from .tensor import Tensor, is_grad_enabled


class CapturedStep:
    """`step = CapturedStep(fn, modules=(net,), optimizers=(opt,))`; `out = step(*inputs,
    **host)` with device arrays or Tensors as inputs and hashable host values as keywords. `out`
    is what fn returned during capture (static buffers, rewritten by each replay: read or copy
    them before the next call)."""

    MAX_SEEN = 1024      # keys remembered for their warm-up count (variable-length workloads)

    def __init__(self, fn, *, modules=(), optimizers=(), warmup=1, max_graphs=8,
                 max_bytes="auto"):
        self.fn, self.warmup, self.max_graphs, self.max_bytes = fn, warmup, max_graphs, max_bytes
        self.modules, self.optimizers = tuple(modules), tuple(optimizers)
        self.stream = cupy().cuda.Stream(non_blocking=True)
        self._graphs = OrderedDict()   # key -> (graph, static inputs, outputs, what it keeps)
        self._seen = OrderedDict()     # key -> eager calls so far (the most recent MAX_SEEN)

    def key(self, arrays, inputs, host=None):
        """Everything that decides which kernels, arguments and addresses a capture holds."""
        from cudnnlite import blas, conv
        parts = [tuple((a.shape, a.strides, a.dtype.str, a.device.id) for a in arrays),
                 tuple(getattr(i, "requires_grad", False) for i in inputs), is_grad_enabled(),
                 conv.settings, blas.settings, tuple(sorted((host or {}).items()))]
        for m in self.modules:
            parts.append(tuple((sub.training, _settings(sub)) for sub in m.modules()))
            parts.append(tuple((_address(t.data), t.requires_grad) for _, t in m._state_items()))
        for opt in self.optimizers:
            parts.append(tuple(_frozen(g) for g in opt.param_groups))
            parts.append(tuple((_address(p.data), p.requires_grad) for g in opt.param_groups
                               for p in g["params"]))      # (parameters no module given holds)
            parts.append(tuple((id(p), tuple((k, _address(v)) for k, v in st.items()))
                               for p, st in opt.state.items()))
        return tuple(parts)

    def __call__(self, *inputs, **host):
        cp = cupy()
        arrays = [a.data if isinstance(a, Tensor) else a for a in inputs]
        if not all(is_gpu(a) for a in arrays):
            raise TypeError("CapturedStep: every input must be a device array (CuPy / GPU Tensor)")
        try:
            key = self.key(arrays, inputs, host)
            hash(key)
        except TypeError as e:
            raise TypeError(f"CapturedStep: host keyword arguments must be hashable (tuples, "
                            f"numbers, strings), got {sorted(host)}: {e}") from None
        caller = cp.cuda.get_current_stream()
        self.stream.wait_event(caller.record())
        with self.stream:
            entry = self._graphs.get(key)
            if entry is None:
                if self._seen.get(key, 0) < self.warmup:
                    self._seen[key] = self._seen.get(key, 0) + 1
                    self._seen.move_to_end(key)
                    if len(self._seen) > self.MAX_SEEN:
                        self._seen.popitem(last=False)
                    out = self.fn(*inputs, **host)
                else:
                    entry = self._capture_with_room(arrays, inputs, host)
                    self._graphs[key] = entry
                    self._seen.clear()        # warm-up counts of keys passed through (no state yet)
                    evict(self._graphs, self.max_graphs, self._byte_budget(),
                          lambda e: e[3][0].total_bytes())
            else:
                self._graphs.move_to_end(key)
            if entry is not None:
                graph, static, out, _ = entry
                for dst, src in zip(static, arrays):
                    dst[...] = src
                graph.launch(self.stream)
        caller.wait_event(self.stream.record())
        return out

    def _byte_budget(self):
        """max_bytes, or half the memory of the device the step runs on (the current one: a
        step may have no inputs)."""
        if self.max_bytes != "auto":
            return self.max_bytes
        return cupy().cuda.Device().mem_info[1] // 2

    def _owned(self):
        """The long-lived arrays a capture reads and writes: parameters, buffers, optimizer state,
        the device RNG's (seed, offset)."""
        from . import random
        owned = [t.data for m in self.modules for _, t in m._state_items()]
        owned += [p.data for opt in self.optimizers for g in opt.param_groups for p in g["params"]]
        owned += [v for opt in self.optimizers for st in opt.state.values() for v in st.values()
                  if is_gpu(v)]
        owned.append(random.device_generator().state)
        return owned

    def _capture_with_room(self, arrays, inputs, host):
        """_capture; if the device runs out of memory during it, drop the other graphs (their
        pools) and the blocks CuPy's default pool keeps cached from eager steps -- memory the
        new graph's own pool cannot use -- and capture once more."""
        try:
            return self._capture(arrays, inputs, host)
        except (RuntimeError, MemoryError) as e:        # (CuPy's OutOfMemoryError is one)
            if "OutOfMemoryError" not in (type(e).__name__, type(e.__cause__).__name__):
                raise
        while len(self._graphs) > 1:      # the most recent stays: its outputs may be in use
            self._graphs.popitem(last=False)
        gc.collect()
        cupy().get_default_memory_pool().free_all_blocks()
        return self._capture(arrays, inputs, host)

    def _capture(self, arrays, inputs, host):
        import cudnnlite
        cp = cupy()
        malloc, blocks = keeping_allocator(cp)
        pool = cp.cuda.MemoryPool(malloc)  # the graph's buffers live here, and only here
        with cp.cuda.using_allocator(pool.malloc), cudnnlite.capture_scope() as kept:
            static = [copy_like(a, a) for a in arrays]   # (layouts kept: channels-last too)
            wrapped = [Tensor(s, requires_grad=i.requires_grad) if isinstance(i, Tensor) else s
                       for s, i in zip(static, inputs)]
            _flush_finite_check()      # what an open check queued eagerly stays out of it
            self.stream.synchronize()
            self.stream.begin_capture()
            try:
                out = self.fn(*wrapped, **host)
                _flush_finite_check()  # and what the step queued is launched inside it
            except Exception as e:
                try:
                    self.stream.end_capture()
                except Exception:      # the capture was invalidated by the failing call
                    pass
                raise RuntimeError(
                    f"CapturedStep: the step cannot be captured in a CUDA graph: "
                    f"{type(e).__name__}: {e}. Run it eagerly instead (e.g. train.dcgan's "
                    f"--no-cuda-graph); known causes: a host read inside the step (.get(), "
                    f".numpy(), float(), a NumPy conversion), or a CuPy routine that calls a "
                    f"CUDA library through CuPy's own handles (cupy.linalg, CuPy's matmul; "
                    f"layers' matmul and linear use cudnnlite.blas, which captures)") from e
            graph = self.stream.end_capture()
        return graph, static, out, (pool, kept, self._owned(), blocks)


def _flush_finite_check():
    """Launch what the active layers.finite.FiniteCheck has queued. A step captured inside an
    open `with check:` leaves its checks queued at its end; launched after the capture ends,
    they would run once, eagerly, and never on a replay -- and a queue left from eager work
    before the capture, launched inside it, would have every replay read arrays the graph does
    not own."""
    from .finite import active
    if active.check is not None:
        active.check.flush()


def keeping_allocator(cp):
    """(malloc, blocks): a raw allocator for a capture's memory pool that also keeps every block
    it makes in `blocks`, for the graph to hold. CuPy's pool, when a cudaMalloc fails, frees its
    cached free blocks and tries again -- during a capture (CuPy's relaxed mode tolerates the
    cudaFree) those are blocks the kernels captured so far still address, so the graph would
    replay into memory it no longer owns, or that a later block of its own now reuses. Kept
    here, nothing the graph addresses goes back to the driver before the graph is dropped; the
    retry fails instead, and CapturedStep makes room its own way (_capture_with_room)."""
    blocks = []

    def malloc(size):
        mem = cp.cuda.Memory(size)            # cudaMalloc (CuPy's pool rounds the size up)
        blocks.append(mem)
        return cp.cuda.MemoryPointer(mem, 0)
    return malloc, blocks


def evict(graphs, max_graphs, max_bytes, size):
    """Drop the least recently used entries of `graphs` (an OrderedDict, oldest first) while
    there are more than max_graphs, or while they hold more than max_bytes (None: no limit) in
    all -- never the newest one. size(entry) -> its bytes. A dropped graph frees its pool when
    the last reference to it goes."""
    while len(graphs) > 1 and (len(graphs) > max_graphs or max_bytes is not None and
                               sum(size(e) for e in graphs.values()) > max_bytes):
        graphs.popitem(last=False)


def _address(a):
    """(address, dtype, shape) of a device array; a host value stands for itself."""
    if is_gpu(a):
        return a.data.ptr, a.dtype.str, a.shape
    return a if isinstance(a, (int, float, bool, str)) else (type(a).__name__, getattr(a, "shape", None))


_PLAIN = (bool, int, float, str, type(None))


def _settings(module):
    """A module's own plain settings (numbers, strings, flags, tuples of them) as a tuple. None
    is left out: an attribute set to None and one never set are the same to the kernels (a
    change to or from a value still changes the tuple), and per-call state a forward or an
    inference leaves behind as None (Tacotron 2's decoder mask) must not change the key."""
    return tuple((k, v) for k, v in vars(module).items()
                 if not k.startswith("_") and k != "training" and v is not None
                 and (isinstance(v, _PLAIN)
                      or isinstance(v, tuple) and all(isinstance(i, _PLAIN) for i in v)))


def _frozen(group):
    """An optimizer param group's hyper-parameters as a hashable tuple (its params left out)."""
    return tuple((k, tuple(v) if isinstance(v, list) else v)
                 for k, v in sorted(group.items()) if k != "params")

"""Whole-step CUDA-graph capture: a step function is run eagerly to warm up (kernels compiled,
cuDNN algorithms chosen, workspaces sized, optimizer state made), then one call is captured
into a CUDA graph on a private memory pool; every later call with inputs of the same shapes
copies them into the captured step's static input buffers and replays the graph -- one launch
instead of hundreds, no Python in between.

What makes a step capturable, and what this engine already does for it: no host sync inside
the step (losses stay on the device until the caller reads them), no allocation that moves
(the private pool keeps every buffer the graph touches alive), device-side randomness
(layers.random's generator) and device-side step counters (Adam, batch norm).
"""
from .backend import cupy, is_gpu
from .tensor import Tensor


class CapturedStep:
    """`step = CapturedStep(fn)`; `out = step(*inputs)` with device arrays or Tensors as inputs.
    `out` is what fn returned during capture (static buffers, rewritten by each replay: read or
    copy them before the next call). A new input shape is captured once more, after its own
    warm-up calls."""

    def __init__(self, fn, warmup=1):
        self.fn, self.warmup = fn, warmup
        self.stream = cupy().cuda.Stream(non_blocking=True)
        self._graphs = {}          # input signature -> (graph, static inputs, outputs, pool)
        self._seen = {}            # input signature -> eager calls so far

    @staticmethod
    def _signature(inputs):
        return tuple((a.shape, a.dtype.str) for a in inputs)

    def __call__(self, *inputs):
        cp = cupy()
        arrays = [a.data if isinstance(a, Tensor) else a for a in inputs]
        if not all(is_gpu(a) for a in arrays):
            raise TypeError("CapturedStep: every input must be a device array (CuPy / GPU Tensor)")
        sig = self._signature(arrays)
        caller = cp.cuda.get_current_stream()
        self.stream.wait_event(caller.record())
        with self.stream:
            entry = self._graphs.get(sig)
            if entry is None:
                if self._seen.get(sig, 0) < self.warmup:
                    self._seen[sig] = self._seen.get(sig, 0) + 1
                    out = self.fn(*inputs)
                else:
                    entry = self._graphs[sig] = self._capture(arrays, inputs)
            if entry is not None:
                graph, static, out, _ = entry
                for dst, src in zip(static, arrays):
                    dst[...] = src
                graph.launch(self.stream)
        caller.wait_event(self.stream.record())
        return out

    def _capture(self, arrays, inputs):
        cp = cupy()
        pool = cp.cuda.MemoryPool()       # the graph's buffers live here, and only here
        with cp.cuda.using_allocator(pool.malloc):
            static = [a.copy() for a in arrays]
            wrapped = [Tensor(s, requires_grad=i.requires_grad) if isinstance(i, Tensor) else s
                       for s, i in zip(static, inputs)]
            self.stream.synchronize()
            self.stream.begin_capture()
            try:
                out = self.fn(*wrapped)
            except Exception as e:
                try:
                    self.stream.end_capture()
                except Exception:      # the capture was invalidated by the failing call
                    pass
                raise RuntimeError(
                    f"CapturedStep: the step cannot be captured in a CUDA graph: "
                    f"{type(e).__name__}: {e}. Run it eagerly instead (e.g. train.dcgan's "
                    f"--no-cuda-graph); known case: CuPy refuses cuBLAS calls (matmul, "
                    f"linear) during capture") from e
            graph = self.stream.end_capture()
        return graph, static, out, pool

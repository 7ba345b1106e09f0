"""The host time of an eager DCGAN training step on this engine's GPU path with the GPU taken
out: every CuPy kernel, cuDNN call and cuBLAS product is a no-op, so the time left is the
engine's own Python -- layers, cudnnlite, the step -- which an eager step on a GPU pays on top
of the C calls, CuPy's launches and the GPU's own time. Runs on any machine, GPU or not: the
measure of the eager step's host overhead a change can be judged by without a GPU.

The step is train.dcgan's (channels-last, float32, Adam with foreach, a FiniteCheck, vector
pointwise kernels) run on tests/host_kernels.py's host "device" (NumPy arrays with CuPy's
attributes), with that harness's answers replaced by stubs that allocate the outputs and compute
nothing: the NumPy work left is each output's allocation and the array operators' stand-ins,
timed apart and left out of the engine's time. A narrow model keeps them small; the width sets
which convolutions take cuBLAS (16 and up: as at 64). Convolutions take the graph API, as
train.dcgan's do on a GPU: the host device builds no plan, so each problem's stand-in runs
graph.ExecutionPlan's own execute() with a stand-in variant pack and a stubbed cudnnBackendExecute.

    python -m tools.bench_host [--width 16] [--batch 2] [--steps 200] [--ops]
"""
import collections
import functools
import os
import sys
import threading
import time

import numpy as np

from train import cli

HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
# CuPy module functions that make a new array (counted as allocations)
ALLOCATING = {"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
              "array", "stack", "concatenate"}


class _Patches:
    """setattr / setitem with undo (what the harness's install functions are handed)."""

    def __init__(self):
        self._undo = []

    def setattr(self, target, name, value):
        old = getattr(target, name)
        self._undo.append(lambda: setattr(target, name, old))
        setattr(target, name, value)

    def setitem(self, mapping, key, value):
        if key in mapping:
            old = mapping[key]
            self._undo.append(lambda: mapping.__setitem__(key, old))
        else:
            self._undo.append(lambda: mapping.pop(key, None))
        mapping[key] = value

    def defer(self, fn):
        """Run fn at undo, in its place among the patches (last made, first undone)."""
        self._undo.append(fn)

    def undo(self):
        while self._undo:
            self._undo.pop()()


class Stubs:
    """The harness with its answers stubbed: `seconds` spent inside the stubs (and NumPy's
    allocations / operators standing in for CuPy's), `calls` counted by kind."""

    def __init__(self):
        self.seconds, self.calls = 0.0, collections.Counter()

    def timed(self, kind, fn):
        @functools.wraps(fn)
        def stub(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls[kind] += 1
        return stub

    def install(self, patches):
        """Point the layers' GPU path at the host harness, then stub its answers."""
        if HARNESS not in sys.path:
            sys.path.insert(0, HARNESS)
        import host_kernels as hk
        from cudnnlite import api, blas
        from layers import kernels
        installing = hk.install(patches, strict=False)
        next(installing)
        patches.defer(lambda: next(installing, None))     # (its end clears the kernel caches)
        hk.install_cudnn(patches)
        stubs = self

        class Elementwise(hk.ElementwiseKernel):
            def __call__(self, *args, size=None, **_):
                return stubs.timed("CuPy kernels", self._outputs)(args, size)

            def _outputs(self, args, size):
                outs = list(args[self.nin:])
                if not outs:
                    ins = [a.dtype.type if isinstance(a, np.ndarray) else None
                           for a in args[:self.nin]]
                    _, _, types = self._cupy._decide_params_type(tuple(ins), ())
                    types = dict(types._pairs)
                    shape = (size,) if size is not None else np.broadcast_shapes(*(
                        a.shape for a, p in zip(args, self.params)
                        if not p.raw and isinstance(a, np.ndarray) and a.ndim > 0))
                    outs = [hk.host(np.empty(shape, p.dtype if p.dtype is not None
                                             else types[p.ctype]))
                            for p in self.params[self.nin:]]
                return outs[0] if len(outs) == 1 else tuple(outs)

        class Reduction(hk.ReductionKernel):
            def __call__(self, *args, out=None, axis=None, keepdims=False, **_):
                return stubs.timed("CuPy kernels", self._output)(args, out, axis, keepdims)

            def _output(self, args, out, axis, keepdims):
                if out is not None:
                    return out
                shape = np.broadcast_shapes(*(np.shape(a) for a in args))
                axes = range(len(shape)) if axis is None else \
                    [a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,))]
                (po,) = self._cupy.out_params
                dtype = po.dtype if po.dtype is not None else np.result_type(args[0])
                return hk.host(np.empty(tuple(1 if d in axes else n for d, n in enumerate(shape)
                                              if keepdims or d not in axes), dtype))

        class Raw(hk.RawKernel):
            def __call__(self, grid, block, args, **_):
                stubs.calls["CuPy kernels"] += 1

        for name, cls in (("ElementwiseKernel", Elementwise), ("ReductionKernel", Reduction),
                          ("RawKernel", Raw)):
            patches.setattr(hk._HostCupy, name, cls)
        for name in dir(api):          # every cuDNN compute call (descriptors stay real)
            if name.startswith("cudnn") and ("Forward" in name or "Backward" in name) and \
                    not name.startswith(("cudnnGet", "cudnnFind")):
                patches.setattr(api, name, self.timed("cuDNN calls", lambda *a, **k: 0))

        def matmul(a, b, out=None, **_):
            return out if out is not None else hk.host(np.empty((a.shape[0], b.shape[1]),
                                                                a.dtype))
        patches.setattr(blas, "matmul", self.timed("cuBLAS products", matmul))
        # CuPy's array functions and operators: NumPy's stand-ins timed apart (the module
        # attribute's lookup too: CuPy's is a plain module attribute), allocations and operator
        # kernels counted
        real, wrapped = hk._HostCupy.__getattr__, {}

        def lookup(host, name):
            attr = wrapped.get(name)
            if attr is None:
                attr = real(host, name)
                if callable(attr) and not isinstance(attr, type):
                    attr = self.timed("allocations" if name in ALLOCATING else "CuPy functions",
                                      attr)
                wrapped[name] = attr
            return attr

        def module_attr(host, name):
            t0 = time.perf_counter()
            try:
                return lookup(host, name)
            finally:
                self.seconds += time.perf_counter() - t0
        patches.setattr(hk._HostCupy, "__getattr__", module_attr)
        # .device is a C attribute of CuPy's ndarray, not a Python property (.data, the host
        # array's other one, is made once per array and then one dict lookup: left as it is)
        patches.setattr(hk.HostArray, "device", hk._DEVICE0)

        def array_operator(array, ufunc, method, *inputs, **kwargs):
            plain = [i.view(np.ndarray) if isinstance(i, hk.HostArray) else i for i in inputs]
            if "out" in kwargs:
                kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, hk.HostArray) else o
                                      for o in kwargs["out"])
            result = getattr(ufunc, method)(*plain, **kwargs)
            return hk.host(result) if isinstance(result, np.ndarray) else result
        patches.setattr(hk.HostArray, "__array_ufunc__",
                        self.timed("CuPy operators (kernels)", array_operator))
        patches.setattr(kernels, "VECTOR_POINTWISE", True)
        # train.dcgan's convolutions on a GPU: the graph API (conv.configure(api="graph")). The
        # host device builds no plan (finalizing needs libcuda), so each problem gets a HostPlan:
        # graph.ExecutionPlan's own execute() -- its variant pack looked up by pointers, made where
        # missing (a stand-in here), then one cudnnBackendExecute (stubbed)
        from cudnnlite import conv, graph
        from cudnnlite._cache import LRU

        class HostPlan:
            workspace, desc = 0, None
            execute = graph.ExecutionPlan.execute

            def __init__(self):
                self._packs, self._lock = LRU(graph.PACKS_PER_PLAN), threading.Lock()

        patches.setattr(conv, "_new_graph_plan", lambda *args: HostPlan())
        # the problems' plan cache too: no stand-in plan outlives the measure (restored after)
        patches.setattr(conv, "_plans", LRU(conv.PLAN_CACHE_SIZE))
        patches.setattr(graph, "BackendDescriptor", lambda *args, **kwargs: object())
        patches.setattr(api, "cudnnBackendExecute",
                        self.timed("cuDNN graph executions", lambda *a: 0))
        patches.setattr(conv, "settings", conv.settings)          # (restored at the end)
        conv.configure(api="graph")


def dcgan_step(width, batch):
    """train.dcgan's eager device step on device 0 (the harness's host device)."""
    import layers as L
    from layers.finite import FiniteCheck
    from train import dcgan
    L.manual_seed(3)
    netG, netD = dcgan.Generator(nz=100, ngf=width, nc=1), dcgan.Discriminator(ndf=width, nc=1)
    for m in (netG, netD):
        m.to(0)
        m.to(memory_format="channels_last")
    optG, optD = dcgan.make_optimizers(netG, netD, master_weights=False)
    finite = FiniteCheck({"netG": netG, "netD": netD})
    rng = np.random.default_rng(0)
    real = L.tensor(rng.uniform(-1, 1, (batch, 1, 64, 64)).astype(np.float32), device=0)
    noise = L.tensor(rng.standard_normal((batch, 100, 1, 1)).astype(np.float32), device=0)

    def step():
        return dcgan.train_step_device(netG, netD, optG, optD, real, noise, finite)
    return step, {"netG": netG, "netD": netD}


def measure(width=16, batch=2, steps=200, repeats=5, ops=False):
    """(engine ms per step -- the best of `repeats` runs of `steps` --, {kind: calls per step},
    [op table rows] or None)."""
    import warnings
    patches, stubs = _Patches(), Stubs()
    try:
        stubs.install(patches)
        step, models = dcgan_step(width, batch)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")        # (the stubs' uninitialised outputs)
            for _ in range(3):
                step()
            best = float("inf")
            for _ in range(repeats):
                stubs.seconds, stubs.calls = 0.0, collections.Counter()
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                best = min(best, (time.perf_counter() - t0 - stubs.seconds) / steps * 1e3)
            calls = {k: n / steps for k, n in sorted(stubs.calls.items())}
            rows = None
            if ops:
                from tools.profile_dcgan import op_times
                rows = op_times(step, steps, models)
        return best, calls, rows
    finally:
        patches.undo()


def main(argv=None):
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--width", type=cli.positive_int, default=16,
                    help="ngf = ndf of the models (16 and up route as 64 does) [16]")
    ap.add_argument("--batch", type=cli.positive_int, default=2, help="batch size [2]")
    ap.add_argument("--steps", type=cli.positive_int, default=200, help="steps a run [200]")
    ap.add_argument("--repeats", type=cli.positive_int, default=5,
                    help="runs; the fastest is reported [5]")
    ap.add_argument("--ops", action="store_true",
                    help="also each op's host time (forward, backward, optimizer), stubs "
                         "included")
    args = ap.parse_args(argv)
    try:
        import cupy  # noqa: F401  (the kernels' parameter rules are CuPy's own)
        import cudnnlite.api  # noqa: F401  (descriptors stay real: libcudnn is loaded)
    except Exception as e:
        cli.fail(f"tools.bench_host needs CuPy and the cuDNN wheel (pip install -e "
                 f"'.[cuda12]'; no GPU needed) and a checkout with tests/: {e}")
    if not os.path.exists(os.path.join(HARNESS, "host_kernels.py")):
        cli.fail(f"tools.bench_host runs on the checkout's host harness, "
                 f"{HARNESS}/host_kernels.py, "
                 f"which is not there (run it from a git checkout)")
    ms, calls, rows = measure(args.width, args.batch, args.steps, args.repeats, args.ops)
    print(f"DCGAN eager step, width {args.width}, batch {args.batch}, GPU calls stubbed")
    print(f"engine host time: {ms:.3f} ms/step (the fastest of {args.repeats} runs; the stubs' "
          f"and NumPy's stand-ins' time left out)")
    print("calls a step (counted, not timed): cuDNN calls (legacy entry points), cuDNN graph "
          "executions (the convolutions), cuBLAS products, CuPy kernels (the layers' own), CuPy "
          "operators (+=, ... on arrays: a kernel each), CuPy functions (module functions that "
          "make no array), allocations")
    for kind, n in calls.items():
        print(f"  {kind:<26} {n:7.1f} per step")
    if rows:
        print(f"\n{'direction':<10} {'op':<24} {'calls/step':>10} {'us/call':>9}")
        for direction, op, n, us in rows:
            print(f"{direction:<10} {op:<24} {n:10.1f} {us:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

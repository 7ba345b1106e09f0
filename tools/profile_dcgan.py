"""Where an eager DCGAN training step's time goes on this engine: host (Python) time against
device time per step, the host time by package (this engine's layers, cudnnlite's Python and the
C calls it makes, CuPy, NumPy, the interpreter), the host time of each op (forward, backward,
optimizer update) and of each cuDNN / cuBLASLt entry point the step calls, whether the step
waits for the GPU anywhere (a hidden host sync), then the Python functions that cost the most
(cProfile). The step is train.dcgan's, in its default GPU layout (channels-last) unless told.

    python -m tools.profile_dcgan --device 0 [--memory-format contiguous|channels_last]
        [--precision fp32|bf16] [--conv-api legacy|graph] [--steps 30] [--top 35]
"""
import cProfile
import collections
import contextlib
import io
import os
import pstats
import time

from train import cli

# a profiled function's file -> the row of the by-package table it is counted in
PACKAGES = (("layers", os.sep + "layers" + os.sep), ("cudnnlite", os.sep + "cudnnlite" + os.sep),
            ("train", os.sep + "train" + os.sep), ("cupy", os.sep + "cupy"),
            ("numpy", os.sep + "numpy" + os.sep))


def package_of(filename):
    """The PACKAGES row a function's file belongs to; '(C calls and builtins)' for cProfile's
    entries with no file (builtins: CuPy's compiled methods, ctypes, dict / list methods)."""
    if filename == "~" or filename.startswith("<"):
        return "(C calls and builtins)"
    for name, part in PACKAGES:
        if part in filename:
            return name
    return "(other Python)"


def by_package(stats, steps):
    """[(package, host ms per step, calls per step)] from a pstats.Stats, largest first: each
    function's own time (tottime), so a row is what that package's code itself spent."""
    seconds, calls = collections.Counter(), collections.Counter()
    for (filename, _, _), (_, ncalls, tottime, _, _) in stats.stats.items():
        row = package_of(filename)
        seconds[row] += tottime
        calls[row] += ncalls
    return [(row, seconds[row] * 1e3 / steps, calls[row] / steps)
            for row, _ in seconds.most_common()]


def c_call_times(step, steps):
    """[(C function, calls per step, host us per call)] over `steps` calls of step(), most host
    time first: every cuDNN compute entry point and cublasLtMatmul, each call timed on the host
    from entry to return (tools.kernels.cudnn_calls_recorded puts the timer around it)."""
    from tools.kernels import cudnn_calls_recorded
    seconds, calls = collections.Counter(), collections.Counter()

    @contextlib.contextmanager
    def timed(name, _args):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] += time.perf_counter() - t0
            calls[name] += 1

    with cudnn_calls_recorded(timed):
        for _ in range(steps):
            step()
    return [(name, calls[name] / steps, seconds[name] / calls[name] * 1e6)
            for name, _ in seconds.most_common()]


def op_times(step, steps, models):
    """[(direction, op, calls per step, host us per call)] over `steps` calls of step(), most
    host time first: each op's forward, backward and optimizer update timed on the host from
    its layers.trace scope's opening to its closing (inclusive: the Python, the CuPy calls and
    the C calls the op makes; an op's backward that runs other ops includes theirs)."""
    from layers.trace import Trace
    seconds, calls, started = collections.Counter(), collections.Counter(), {}

    def enter(scope):
        started[scope.index] = time.perf_counter()

    def leave(scope):
        key = (scope.direction, scope.op)
        seconds[key] += time.perf_counter() - started.pop(scope.index)
        calls[key] += 1

    for _ in range(steps):
        with Trace(models, on_enter=enter, on_exit=leave):
            step()
    return [(direction, op, calls[(direction, op)] / steps,
             seconds[(direction, op)] / calls[(direction, op)] * 1e6)
            for (direction, op), _ in seconds.most_common()]


SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


def waits(step, sync, busy_ms=200.0):
    """Does step() wait for the GPU (a host sync: a read-back, a blocking C call)? It runs once
    behind a one-thread kernel that keeps the GPU busy for busy_ms: a step that never syncs
    returns in its own host time, one that does returns after the busy kernel. Returns (host ms
    of that step, [(function, ms)] of the Python functions whose own time exceeds busy_ms / 4:
    where it waited, a C call counting in the function that made it). Run step once before: a
    kernel's first launch loads its module, and loading one waits for the GPU."""
    import cupy
    spin = cupy.RawKernel(SPIN, "spin")
    sync()
    spin((1,), (1,), (cupy.uint64(busy_ms * 1e6),))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    step()
    prof.disable()
    host_ms = (time.perf_counter() - t0) * 1e3
    sync()
    stalls = [(f"{fn}:{line}({name})", tottime * 1e3) for (fn, line, name), (_, _, tottime, _, _)
              in pstats.Stats(prof).stats.items() if tottime * 1e3 > busy_ms / 4]
    return host_ms, sorted(stalls, key=lambda r: -r[1])


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=128, help="[128]")
    ap.add_argument("--memory-format", default="channels_last",
                    choices=["contiguous", "channels_last"],
                    help="the models' layout [channels_last, train.dcgan's GPU default]")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="[fp32]")
    ap.add_argument("--conv-api", default="graph", choices=["legacy", "graph"],
                    help="cuDNN's graph API (train.dcgan's default) or the legacy convolution "
                         "calls [graph]")
    ap.add_argument("--algo", default="benchmark", choices=["benchmark", "heuristic"],
                    help="cuDNN's convolution algorithm (graph-API engine) choice [benchmark, "
                         "train.dcgan's default]")
    ap.add_argument("--steps", type=cli.positive_int, default=30,
                    help="steps profiled (after 10 untimed) [30]")
    ap.add_argument("--top", type=cli.positive_int, default=35,
                    help="rows of the cProfile table [35]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool profiles the GPU path (host against device "
                                         "time); with no GPU, python -m tools.bench_host --ops "
                                         "times the eager step's own Python per op")
    import cupy
    from cupyx.profiler import benchmark
    import layers as L
    from cudnnlite import conv
    from tools import workloads
    from train import dcgan
    G, D, oG, oD, real, finite = workloads.dcgan(args.device, args.batch_size, args.precision,
                                                 args.memory_format)
    real, gen = L.Tensor(real), L.random.device_generator()

    def step():
        dcgan.train_step_device(G, D, oG, oD, real,
                                L.Tensor(gen.normal((args.batch_size, 100, 1, 1))), finite)

    with conv.using(api=args.conv_api, algo_mode=args.algo):
        result = benchmark(step, n_repeat=args.steps, n_warmup=10)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        cupy.cuda.get_current_stream().synchronize()
        prof.disable()
    print(f"{args.memory_format} {args.precision}, {args.conv_api} convolutions: host "
          f"{result.cpu_times.mean() * 1e3:.2f} ms/step, device "
          f"{result.gpu_times.mean() * 1e3:.2f} ms/step (cupyx.profiler.benchmark, "
          f"{args.steps} steps)\n")
    stats = pstats.Stats(prof)
    print("host time by package, profiled (cProfile's own cost included; ctypes calls into "
          "cuDNN count in the Python function that makes them):")
    print(f"{'package':<24} {'ms/step':>8} {'calls/step':>11}")
    for row, ms, calls in by_package(stats, args.steps):
        print(f"{row:<24} {ms:8.2f} {calls:11.0f}")
    print()
    with conv.using(api=args.conv_api, algo_mode=args.algo):
        ops = op_times(step, args.steps, {"netG": G, "netD": D})
        rows = c_call_times(step, args.steps)
        busy = 200.0
        host_ms, stalls = waits(step, cupy.cuda.get_current_stream().synchronize, busy)
    print("host time of each op, by direction (its layers.trace scope, inclusive):")
    print(f"{'direction':<10} {'op':<28} {'calls/step':>10} {'us/call':>8} {'ms/step':>8}")
    for direction, op, n, us in ops:
        print(f"{direction:<10} {op:<28} {n:10.1f} {us:8.1f} {n * us / 1e3:8.2f}")
    print()
    print("host time of each cuDNN / cuBLASLt call (entry to return, timed around the C call):")
    print(f"{'C function':<46} {'calls/step':>10} {'us/call':>8} {'ms/step':>8}")
    for name, n, us in rows:
        print(f"{name:<46} {n:10.1f} {us:8.1f} {n * us / 1e3:8.2f}")
    print(f"{'all of them':<46} {sum(n for _, n, _ in rows):10.1f} {'':>8} "
          f"{sum(n * us for _, n, us in rows) / 1e3:8.2f}\n")
    if stalls:
        print(f"host syncs: the step, started behind a {busy:.0f} ms GPU kernel, took "
              f"{host_ms:.1f} ms on the host; it waited in:")
        for where, ms in stalls:
            print(f"  {ms:8.1f} ms  {where}")
    else:
        print(f"host syncs: none (the step, started behind a {busy:.0f} ms GPU kernel, returned "
              f"after {host_ms:.1f} ms)")
    print()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()

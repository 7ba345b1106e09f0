"""Timing shared by the benchmarks: wall time over many calls, bracketed by device syncs."""
import time


def ms_per_call(fn, sync, warmup=5, steps=30):
    """Milliseconds per call of fn, after `warmup` calls; sync() waits for the device."""
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - t0) / steps * 1e3


def kernels_and_busy_ms(step, sync):
    """(kernels, GPU-busy ms) of one call of step, from torch.profiler's CUDA activity (CUPTI,
    which sees every kernel of the process, a CUDA graph's replayed ones included)."""
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    kernels = [e for e in events if not e.name.lower().startswith(("memcpy", "memset"))]
    return len(kernels), sum(e.device_time_total for e in events) / 1e3


def with_setting(module, name, value, step):
    """step, run with module.<name> = value and the previous value restored: a benchmark row's
    own setting, whatever the rows around it use. A captured step keeps the setting it was
    captured with."""
    def run():
        saved = getattr(module, name)
        setattr(module, name, value)
        try:
            return step()
        finally:
            setattr(module, name, saved)
    return run


ROWS = {"off": [False], "on": [True], "both": [False, True]}   # an off|on|both flag's row settings


def add_foreach_argument(ap):
    """The benchmarks' --foreach off|on|both (ROWS[args.foreach]: the settings to make rows of)."""
    ap.add_argument("--foreach", default="on", choices=list(ROWS),
                    help="this engine's multi-tensor Adam, gradient clip and non-finite check "
                         "(layers.optim.FOREACH, on by default), on, off, or rows of both [on]")


def with_foreach(flag, step):
    """step with layers.optim.FOREACH = flag (Adam's multi-tensor update, the one-launch
    gradient clip and non-finite check)."""
    from layers import optim
    return with_setting(optim, "FOREACH", flag, step)


def finite_statistics(step, sync):
    """One more call of step: are all the statistics it returns (a CuPy array or a torch
    tensor on the device) finite? A benchmark row whose step has gone non-finite is not timing
    a training step."""
    import numpy as np
    out = step()
    sync()
    values = out.float().cpu().numpy() if hasattr(out, "cpu") else out.get()
    return bool(np.isfinite(values).all())


def report_non_finite(names, what):
    """Say, on stderr, which rows' `what` were not finite; the tool's exit status (1 if any)."""
    import sys
    for name in names:
        print(f"error: {name}: the last step's {what} are not all finite -- its time is not "
              f"that of a training step", file=sys.stderr)
    return 1 if names else 0

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

"""Batch norm fused into DCGAN's discriminator convolutions through cuDNN's graph API
(conv + GenStats, a BN-apply + LeakyReLU prologue, both), each checked against the unfused calls
and timed against them on this GPU (batch 128, channels-last, k4 s2 p1).

The graphs:

- conv + genstats: batch norm's per-channel sum and sum of squares in the convolution's epilogue;
- prologue + conv: the previous batch norm's apply (x * scale + bias) and LeakyReLU(0.2) on the
  convolution's input, as it is read;
- prologue + conv + genstats: both, what one layer of a fused netD would run.

A layer of the engine today runs the previous batch norm (cudnnBatchNormalizationForwardTrainingEx
on the convolution's input: its statistics and apply), LeakyReLU, then the convolution; the fused
layer runs prologue + conv + genstats (its genstats stand in for the next batch norm's
statistics pass). Each fused plan's output is checked against the unfused computation -- the
convolution (through cudnnlite.conv) of LeakyReLU(x * scale + bias), and NumPy float64 sums of
its own output -- before it is timed. Plans: the fastest of the first --plans the heuristics
offer (as train.dcgan benchmarks them), none that down-converts its inputs.

    python -m tools.bench_fusions --device 0
"""
import numpy as np

from train import cli

# netD's convolutions 2-4 (pytorch/examples, ndf 64, 64x64 images): (C, H) of the input, K out
LAYERS = [("netD.main.2", 64, 32, 128), ("netD.main.5", 128, 16, 256),
          ("netD.main.8", 256, 8, 512)]
SLOPE = 0.2
VARIANTS = ["conv", "conv + genstats", "prologue + conv", "prologue + conv + genstats"]
# largest |fused - unfused| / max|unfused| of the output taken as equal: a few roundings of the
# convolution's inputs (TF32: 10 mantissa bits; bf16: 7) -- engines differ in summation order
TOLERANCE = {"float32": 2.0 ** -8, "bfloat16": 2.0 ** -5}
# GenStats against float64 sums of the output it wrote: summed in float32 (2^-16 over a channel's
# 8,192 values is ample), or -- bf16 -- perhaps from the values before their rounding to bf16
STATS_TOLERANCE = {"float32": 2.0 ** -16, "bfloat16": 2.0 ** -7}


def _graph(handle, variant, n, c, h, k, dt):
    """The operation graph of one variant; uids: x 1, W 2, y 3, sum 4, sqsum 5, scale 6, bias 7."""
    from cudnnlite import graph
    from cudnnlite.enums import DataType, PointwiseMode as PW
    F = DataType.FLOAT
    p = h // 2

    def nhwc(uid, dims, dtype, virtual=False):
        N, C, H, W = dims
        return graph.tensor(uid, dims, [C * H * W, 1, C * W, C], dtype, 16, virtual)
    x, w, y = nhwc(1, [n, c, h, h], dt), nhwc(2, [k, c, 4, 4], dt), nhwc(3, [n, k, p, p], dt)
    ops, conv_in = [], x
    if variant.startswith("prologue"):
        scale, bias = nhwc(6, [1, c, 1, 1], F), nhwc(7, [1, c, 1, 1], F)
        scaled, shifted = nhwc(101, [n, c, h, h], F, True), nhwc(102, [n, c, h, h], F, True)
        conv_in = nhwc(103, [n, c, h, h], dt, True)
        ops += [graph.pointwise_operation(PW.MUL, x, scaled, b=scale),
                graph.pointwise_operation(PW.ADD, scaled, shifted, b=bias),
                graph.pointwise_operation(PW.RELU_FWD, shifted, conv_in, slope=SLOPE)]
    ops.append(graph.convolution_operation("cudnnConvolutionForward", conv_in, w, y,
                                           graph.convolution([1, 1], [2, 2], [1, 1], F),
                                           1.0, 0.0, False))
    if variant.endswith("genstats"):
        ops.append(graph.gen_stats_operation(y, nhwc(4, [1, k, 1, 1], F),
                                             nhwc(5, [1, k, 1, 1], F)))
    return graph.operation_graph(handle, ops)


def _uids(variant):
    return [1, 2, 3] + ([4, 5] if variant.endswith("genstats") else []) + \
        ([6, 7] if variant.startswith("prologue") else [])


def measure(layer, dtype, plans, repeats):
    """{variant: (us, engine, plans tried, error or None)} and the unfused calls' us."""
    import cupy
    import cudnnlite as cl
    from cudnnlite import batchnorm, conv, graph
    from cudnnlite.enums import DataType, NumericalNote
    from layers import backend, kernels
    name, c, h, k = layer
    n, p = 128, h // 2
    np_dt = np.float32 if dtype == "float32" else backend.bfloat16
    dt = DataType.FLOAT if dtype == "float32" else DataType.BFLOAT16
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.standard_normal((n, h, h, c)).astype(np_dt))
    W = cupy.asarray((rng.standard_normal((k, 4, 4, c)) / np.sqrt(16 * c)).astype(np_dt))
    scale = cupy.asarray(rng.uniform(0.5, 1.5, c).astype(np.float32))
    bias = cupy.asarray(rng.uniform(-0.5, 0.5, c).astype(np.float32))
    y = cupy.empty((n, p, p, k), np_dt)
    s, q = cupy.empty(k, np.float32), cupy.empty(k, np.float32)
    pointers = {1: x.data.ptr, 2: W.data.ptr, 3: y.data.ptr, 4: s.data.ptr, 5: q.data.ptr,
                6: scale.data.ptr, 7: bias.data.ptr}
    handle = cl.get_handle()
    # the unfused computation: LeakyReLU(x * scale + bias) rounded to the data's type, convolved
    pre = x.astype(np.float32) * scale + bias
    pre = cupy.where(pre > 0, pre, pre * SLOPE).astype(np_dt)
    reference = {False: conv.forward(x, W, stride=2, pad=1, layout="NHWC"),
                 True: conv.forward(pre, W, stride=2, pad=1, layout="NHWC")}
    out = {}
    for variant in VARIANTS:
        uids = _uids(variant)

        def run(plan):
            plan.execute(handle, uids, [pointers[u] for u in uids],
                         handle.workspace(plan.workspace))
        try:                                    # (a plan cuDNN will not execute is skipped)
            plan = graph.fastest_plan(
                handle, _graph(handle, variant, n, c, h, k, dt),
                lambda notes, ws: NumericalNote.DOWN_CONVERT_INPUTS not in notes, run, plans,
                lambda fn: graph.event_ms(fn, repeats))
        except cl.CudnnError as e:
            out[variant] = (None, None, 0, f"no plan: {str(e).splitlines()[0]}")
            continue
        best_us = min(ms for _, ms in plan.timings if isinstance(ms, float)) * 1e3
        for a in (y, s, q):                     # what the checked run writes, and nothing older
            a.fill(np.nan)
        run(plan)
        ref = reference[variant.startswith("prologue")]
        got, want = cupy.asnumpy(y).astype(np.float64), cupy.asnumpy(ref).astype(np.float64)
        error = np.abs(got - want).max() / np.abs(want).max()
        problem = None if error <= TOLERANCE[dtype] else f"output off by {error:.2g}"
        if variant.endswith("genstats") and problem is None:
            sums = got.reshape(-1, k).sum(0), (got.reshape(-1, k) ** 2).sum(0)
            for what, mine, exact, size in (("sum", s, sums[0], np.abs(got).reshape(-1, k).sum(0)),
                                            ("sum of squares", q, sums[1], sums[1])):
                off = np.abs(cupy.asnumpy(mine) - exact).max() / size.max()
                if not off <= STATS_TOLERANCE[dtype]:      # (NaN: not written)
                    problem = f"{what} off by {off:.2g}"
        out[variant] = (best_us, plan.engine, len(plan.timings), problem, error)
    # what a layer of the engine runs instead: the previous batch norm and LeakyReLU on x
    g, b = cupy.ones(c, np.float32), cupy.zeros(c, np.float32)
    rm, rv = cupy.zeros(c, np.float32), cupy.ones(c, np.float32)
    unfused = {"batch norm *Ex (statistics + apply)":
               graph.event_ms(lambda: batchnorm.forward_training_ex(x, g, b, rm, rv), repeats),
               "LeakyReLU": graph.event_ms(lambda: kernels.leaky_relu(x, SLOPE), repeats)}
    return out, {what: ms * 1e3 for what, ms in unfused.items()}


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both",
                    help="float32 data with TF32 convolutions, bfloat16 data, or both [both]")
    ap.add_argument("--plans", type=cli.positive_int, default=10,
                    help="plans timed per graph, the heuristics' first [10]")
    ap.add_argument("--repeats", type=cli.positive_int, default=20,
                    help="timed executions per plan [20]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times cuDNN graphs on a GPU")
    import cupy
    dtypes = {"fp32": ["float32"], "bf16": ["bfloat16"], "both": ["float32", "bfloat16"]}
    print(f"{cupy.cuda.runtime.getDeviceProperties(args.device)['name'].decode()}, "
          f"batch 128, channels-last, us per call (CUDA events)")
    failed = False
    for dtype in dtypes[args.precision]:
        print(f"\n{dtype}:")
        print(f"{'layer':<12} {'graph':<28} {'us':>8} {'engine':>7} {'plans':>6}  check")
        summary, missing = [], []
        for layer in LAYERS:
            fused, unfused = measure(layer, dtype, args.plans, args.repeats)
            for variant, (us, engine, n, problem, *err) in fused.items():
                failed |= problem is not None and us is not None
                shown = "-" if us is None else f"{us:8.1f}"
                check = problem or f"equal (output {err[0]:.1e})"
                print(f"{layer[0]:<12} {variant:<28} {shown:>8} {'-' if engine is None else engine:>7} {n:>6}  {check}")
            for what, us in unfused.items():
                print(f"{layer[0]:<12} {what:<28} {us:8.1f}")
            conv_us, fused_us = fused["conv"][0], fused["prologue + conv + genstats"][0]
            if conv_us is not None and fused_us is not None:
                summary.append((layer[0], conv_us + sum(unfused.values()), fused_us))
            missing += [(layer[0], v) for v, (us, *_) in fused.items() if us is None]
        for name, now, fused_us in summary:
            print(f"{name}: batch norm + LeakyReLU + conv {now:.1f} us; fused layer "
                  f"{fused_us:.1f} us ({fused_us / now:.2f}x)")
        if missing:         # (not a failure: which graphs an engine takes is the GPU's and cuDNN's)
            print(f"no plan on this GPU, so neither checked nor timed: "
                  f"{', '.join(f'{name} {v}' for name, v in missing)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

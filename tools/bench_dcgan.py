"""DCGAN training step, this engine against PyTorch, side by side on one GPU.

One DCGAN training iteration (batch 128, 64x64, nz 100, ngf = ndf = 64, Adam) timed on this
engine (eager, and replaying a captured CUDA graph) and on PyTorch (eager; eager with fused Adam;
the whole step captured in a CUDA graph by hand, with capturable fused Adam) -- same model, same
loop (pytorch/examples), TF32 convolutions and cuDNN's benchmarked algorithms on both
(pytorch/examples sets cudnn.benchmark = True; --algo heuristic for cuDNN's first suggestion),
this engine through cuDNN's graph API as train.dcgan (--conv-api legacy for the legacy calls)
-- side by side in one run on one GPU:
ms/step, images/s, and from one profiled step of each (CUPTI, through torch.profiler) kernels
per step and GPU-busy time.

    python -m tools.bench_dcgan --device 0 [--steps 100] [--algo heuristic|benchmark]
                                           [--conv-api legacy|graph|both]
                                           [--precision fp32|bf16|both]
                                           [--memory-format contiguous|channels_last]
                                           [--foreach off|on|both]
                                           [--whole-input-gemm off|on|both]
                                           [--thin-input-gemm off|on|both]
                                           [--vector-pointwise off|on|both]
                                           [--finite-check off|on|both]
                                           [--call-cache off|on|both]
                                           [--freeze-d off|on|both]

--precision bf16 times this engine in train.dcgan --precision bf16 (bfloat16 models, batch norm
float32, float32 master weights) and PyTorch with its models in bfloat16 (model.to(bfloat16):
no master weights -- a speed reference, not the same arithmetic). --memory-format channels_last
stores both engines' models channels-last (cuDNN's NHWC kernels; PyTorch's
model.to(memory_format=torch.channels_last)).
"""
import itertools
import statistics

from tools.timing import (ROWS, add_foreach_argument, finite_statistics,
                          kernels_and_busy_ms, ms_per_call, report_non_finite, with_foreach, with_setting)
from train import cli


def ours(device, batch, cuda_graph, precision="fp32", memory_format="contiguous",
         check_finite=True, freeze_d=True):
    """train.dcgan's own step: noise drawn on the device, every layer output and gradient
    checked for non-finite values on the device (check_finite=False: not, as PyTorch's step),
    statistics left on the device (train.dcgan reads them back every --log-every steps), D's
    parameters frozen in G's pass (freeze_d=False: pytorch/examples' loop exactly, D's weight
    gradients computed there too and dropped). Returns (step, sync)."""
    import cupy
    from tools import workloads
    from train import dcgan
    G, D, oG, oD, real, finite = workloads.dcgan(device, batch, precision, memory_format)
    finite = finite if check_finite else None
    step = dcgan.make_device_step(G, D, oG, oD, 100, device, None, cuda_graph=cuda_graph,
                                  finite=finite, freeze_d=freeze_d)
    return (lambda: step(real)), cupy.cuda.get_current_stream().synchronize


def pytorch(device, batch, variant, precision="fp32", memory_format="contiguous",
            benchmark=True, freeze_d=False):
    """PyTorch's step: variant 'eager' (torch.optim.Adam as pytorch/examples), 'fused' (Adam's
    fused kernels) or 'captured' (fused capturable Adam, the whole step in one CUDA graph after
    three warm-up steps on a side stream, as torch.cuda.graphs' docs show); freeze_d: netD
    frozen in G's pass, as train.dcgan's step. Returns (step, sync)."""
    import torch
    from tools import dcgan_torch as ref
    torch.backends.cudnn.allow_tf32 = True          # PyTorch's default for convolutions
    torch.backends.cudnn.benchmark = benchmark      # pytorch/examples' DCGAN sets it True
    dev = f"cuda:{device}"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    torch.manual_seed(0)
    G, D = ref.Generator().to(dev), ref.Discriminator().to(dev)
    G.apply(ref.weights_init), D.apply(ref.weights_init)
    G.to(dtype), D.to(dtype)
    if memory_format == "channels_last":
        G.to(memory_format=torch.channels_last), D.to(memory_format=torch.channels_last)
    fused, capturable = variant in ("fused", "captured"), variant == "captured"
    oG, oD = (torch.optim.Adam(m.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=fused,
                               capturable=capturable) for m in (G, D))
    real = (torch.rand(batch, 1, 64, 64, device=dev) * 2 - 1).to(dtype)

    def step():
        return ref.train_step_tensors(G, D, oG, oD, real,
                                      torch.randn(batch, 100, 1, 1, device=dev, dtype=dtype),
                                      freeze_d)
    if not capturable:
        return step, torch.cuda.synchronize
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stats = step()

    def replay():
        # The graph holds its private pool (intermediates, gradients, `stats`) but no reference
        # to the models, the optimizers' state or `real`, whose memory it reads and writes at
        # every replay: `replay.owned` keeps them for as long as the graph.
        # (Returning graph.replay alone let them be collected and their blocks reused by the
        # other rows: the likely cause of BCELoss's device-side assert in the H100 run of
        # 2026-11-22.)
        graph.replay()
        return stats
    replay.owned = (G, D, oG, oD, real)
    return replay, torch.cuda.synchronize


def main():
    ap = cli.ArgumentParser(description=__doc__.split("\n\n")[1].replace("\n", " "))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=128, help="[128]")
    ap.add_argument("--steps", type=cli.positive_int, default=100,
                    help="timed steps per run [100]")
    ap.add_argument("--warmup", type=cli.nonnegative_int, default=20,
                    help="untimed steps before each run [20]")
    ap.add_argument("--repeats", type=cli.positive_int, default=3,
                    help="runs of each row, interleaved; the median is reported [3]")
    ap.add_argument("--algo", default="benchmark", choices=["heuristic", "benchmark"],
                    help="both engines' convolution algorithm choice: benchmark (cudnnlite's "
                         "algo_mode='benchmark': cudnnFind*Ex, or timing the graph API's plans; "
                         "torch.backends.cudnn.benchmark = True: train.dcgan's default and "
                         "pytorch/examples') or cuDNN's heuristics [benchmark]")
    ap.add_argument("--conv-api", default="graph", choices=["legacy", "graph", "both"],
                    help="cudnnlite's convolution entry points: the backend (graph) API's "
                         "cached plans (train.dcgan's default), the legacy cudnnConvolution* "
                         "calls, or both side by side [graph]")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "both"],
                    help="fp32; bf16: this engine's train.dcgan --precision bf16 (float32 master "
                         "weights) and PyTorch's models in bfloat16; or both [fp32]")
    add_foreach_argument(ap)
    ap.add_argument("--whole-input-gemm", default="on", choices=list(ROWS),
                    help="this engine's convolutions whose filter covers the whole input "
                         "(netD's last, netG's first) as one cuBLASLt product "
                         "(layers.ops.conv.WHOLE_INPUT_AS_GEMM, on by default), or through "
                         "cuDNN, or rows of both [on]")
    ap.add_argument("--thin-input-gemm", default="on", choices=list(ROWS),
                    help="this engine's channels-last convolutions with fewer input channels "
                         "than one 16-byte vector (netD's first, netG's last: one channel) as "
                         "im2col + one cuBLASLt product (layers.ops.conv.THIN_INPUT_AS_GEMM, on "
                         "by default), or through cuDNN, or rows of both [on]")
    ap.add_argument("--vector-pointwise", default="on", choices=list(ROWS),
                    help="this engine's ReLU / LeakyReLU kernels over 16-byte vectors "
                         "(layers.kernels.VECTOR_POINTWISE, on by default), or CuPy's "
                         "elementwise kernels, or rows of both [on]")
    ap.add_argument("--finite-check", default="on", choices=list(ROWS),
                    help="this engine's on-device non-finite check of every layer output and "
                         "gradient (train.dcgan's step has it; PyTorch's has none), or rows "
                         "without it, or both [on]")
    ap.add_argument("--call-cache", default="on", choices=list(ROWS),
                    help="this engine's convolution, batch-norm and activation calls reusing "
                         "the boundary checks' conclusions for a call seen before with arrays of "
                         "the same signature (cudnnlite.boundary.CALL_CACHE, on by default; it "
                         "saves eager host time), or every call checked, or both: eager rows "
                         "with and without it (a captured replay runs no Python) [on]")
    ap.add_argument("--freeze-d", default="on", choices=list(ROWS),
                    help="this engine's step with D's parameters frozen in G's pass "
                         "(train.dcgan's default: D's weight gradients there are dropped "
                         "unread in pytorch/examples' loop, so the weights are the same), or "
                         "pytorch/examples' loop exactly, or rows of both; with on, PyTorch "
                         "gets a captured row with netD.requires_grad_(False) there too [on]")
    ap.add_argument("--memory-format", default="channels_last",
                    choices=["contiguous", "channels_last"],
                    help="both engines' models stored so (channels_last: NHWC kernels, "
                         "train.dcgan's default on a GPU) [channels_last]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times the GPU path (cuDNN, CUDA graphs) "
                                         "against PyTorch's; with no GPU, python -m "
                                         "tools.bench_host times the eager step's own Python")
    import cupy
    from cudnnlite import boundary, conv
    conv.configure(algo_mode=args.algo, allow_tf32=True)
    apis = ["legacy", "graph"] if args.conv_api == "both" else [args.conv_api]
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    foreachs = ROWS[args.foreach]
    gemms = ROWS[args.whole_input_gemm]
    thins = ROWS[args.thin_input_gemm]
    vectors = ROWS[args.vector_pointwise]
    checks = ROWS[args.finite_check]
    caches = ROWS[args.call_cache]
    freezes = ROWS[args.freeze_d]
    from layers import kernels as layer_kernels
    from layers.ops import conv as ops_conv
    runs = {}                                        # name -> (step, sync, conv api)
    for precision in precisions:
        tag = "" if precision == "fp32" else " bf16"
        for api in apis:
            with conv.using(api=api):
                for captured, foreach, gemm, thin, vector, check, cache, freeze in \
                        itertools.product((False, True), foreachs, gemms, thins, vectors,
                                          checks, caches, freezes):
                    if captured and not cache and len(caches) > 1:
                        continue            # (a replay runs no Python: the same row again)
                    name = (f"cudnnlite {'captured' if captured else 'eager'}{tag}"
                            f"{' (legacy API)' if api == 'legacy' else ''}"
                            f"{'' if foreach else ' per-tensor'}"
                            f"{'' if gemm else ' whole-input cuDNN'}"
                            f"{'' if thin else ' thin-input cuDNN'}"
                            f"{'' if vector else ' elementwise relu'}"
                            f"{'' if check else ' unchecked'}"
                            f"{'' if cache else ' no call cache'}"
                            f"{'' if freeze else ' D unfrozen'}")
                    step, sync = ours(args.device, args.batch_size, captured, precision,
                                      args.memory_format, check, freeze)
                    step = with_foreach(foreach, step)
                    step = with_setting(ops_conv, "WHOLE_INPUT_AS_GEMM", gemm, step)
                    step = with_setting(ops_conv, "THIN_INPUT_AS_GEMM", thin, step)
                    step = with_setting(boundary, "CALL_CACHE", cache, step)
                    runs[name] = (with_setting(layer_kernels, "VECTOR_POINTWISE", vector, step),
                                  sync, api)
        for variant, label in (("eager", "eager"), ("fused", "eager, fused Adam"),
                               ("captured", "captured")):
            runs[f"pytorch {label}{tag}"] = pytorch(args.device, args.batch_size, variant,
                                                    precision, args.memory_format,
                                                    args.algo == "benchmark") + (None,)
        if True in freezes:               # like for like with this engine's default step
            runs[f"pytorch captured{tag} D frozen"] = pytorch(
                args.device, args.batch_size, "captured", precision, args.memory_format,
                args.algo == "benchmark", freeze_d=True) + (None,)
    times = {name: [] for name in runs}
    for _ in range(args.repeats):                    # interleaved, so drift hits all alike
        for name, (step, sync, api) in runs.items():
            with conv.using(api=api or "legacy"):
                times[name].append(ms_per_call(step, sync, args.warmup, args.steps))
    gpu = cupy.cuda.runtime.getDeviceProperties(args.device)["name"].decode()
    print(f"DCGAN train step, batch {args.batch_size}, TF32 convolutions, {args.memory_format}, "
          f"{gpu}")
    print(f"{'engine':<44} {'ms/step':>8} {'img/s':>8} {'kernels':>8} {'GPU busy ms':>12}"
          f"   runs (ms/step)")
    for name, (step, sync, api) in runs.items():
        med = statistics.median(times[name])
        with conv.using(api=api or "legacy"):
            kernels, busy = kernels_and_busy_ms(step, sync)
        print(f"{name:<44} {med:8.2f} {args.batch_size / med * 1e3:8.0f} {kernels:8d} "
              f"{busy:12.2f}   " + " ".join(f"{t:.2f}" for t in times[name]))
    bad = []
    for name, (step, sync, api) in runs.items():
        with conv.using(api=api or "legacy"):     # (the row's own key: its graph, replayed)
            if not finite_statistics(step, sync):
                bad.append(name)
    for name in times:                    # against PyTorch eager in the same precision
        base = "pytorch eager" + (" bf16" if " bf16" in name else "")
        if name != base:
            print(f"speed-up of {name} over {base}: "
                  f"{statistics.median(times[base]) / statistics.median(times[name]):.2f}x")
    return report_non_finite(bad, "errD, errG, D(x), D(G(z))")


if __name__ == "__main__":
    raise SystemExit(main())

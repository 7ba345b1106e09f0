"""One DCGAN training iteration (batch 128, 64x64, nz 100, ngf = ndf = 64, Adam) timed on this
engine (eager, and replaying a captured CUDA graph) and on PyTorch eager -- same model, same loop
(pytorch/examples), TF32 convolutions on both -- side by side in one run on one GPU.

    python -m tools.bench_dcgan --device 0 [--steps 100] [--algo heuristic|benchmark]
                                           [--conv-api legacy|graph|both]
"""
import statistics

from tools.timing import ms_per_call
from train import cli


def ours(device, batch, warmup, steps, cuda_graph):
    """train.dcgan's own step: noise drawn on the device, every layer output and gradient
    checked for non-finite values on the device, statistics read back every step."""
    import cupy
    from tools import workloads
    from train import dcgan
    G, D, oG, oD, real, finite = workloads.dcgan(device, batch)
    step = dcgan.make_step(G, D, oG, oD, 100, device, None, cuda_graph=cuda_graph, finite=finite)
    return ms_per_call(lambda: step(real), cupy.cuda.get_current_stream().synchronize, warmup,
                       steps)


def pytorch(device, batch, warmup, steps):
    import torch
    from tools import dcgan_torch as ref
    torch.backends.cudnn.allow_tf32 = True          # PyTorch's default for convolutions
    dev = f"cuda:{device}"
    torch.manual_seed(0)
    G, D = ref.Generator().to(dev), ref.Discriminator().to(dev)
    G.apply(ref.weights_init), D.apply(ref.weights_init)
    oG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    oD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.rand(batch, 1, 64, 64, device=dev) * 2 - 1

    def step():
        ref.train_step(G, D, oG, oD, real, torch.randn(batch, 100, 1, 1, device=dev))
    return ms_per_call(step, torch.cuda.synchronize, warmup, steps)


def main():
    ap = cli.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=128)
    ap.add_argument("--steps", type=cli.positive_int, default=100)
    ap.add_argument("--warmup", type=cli.nonnegative_int, default=20)
    ap.add_argument("--repeats", type=cli.positive_int, default=3)
    ap.add_argument("--algo", default="heuristic", choices=["heuristic", "benchmark"],
                    help="cudnnlite's algorithm choice [heuristic, as PyTorch without "
                         "cudnn.benchmark]")
    ap.add_argument("--conv-api", default="legacy", choices=["legacy", "graph", "both"],
                    help="cudnnlite's convolution entry points: the legacy cudnnConvolution* "
                         "calls, the backend (graph) API's cached plans, or both side by side "
                         "[legacy]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times the GPU path (cuDNN, CUDA graphs) "
                                         "against PyTorch's")
    import cupy
    from cudnnlite import conv
    conv.configure(algo_mode=args.algo, allow_tf32=True)
    apis = ["legacy", "graph"] if args.conv_api == "both" else [args.conv_api]
    suffix = {"legacy": "", "graph": " (graph API)"}
    times = {}
    for _ in range(args.repeats):                    # interleaved, so drift hits all alike
        for api in apis:
            with conv.using(api=api):
                for captured in (False, True):
                    name = f"cudnnlite {'captured' if captured else 'eager'}{suffix[api]}"
                    times.setdefault(name, []).append(ours(
                        args.device, args.batch_size, args.warmup, args.steps,
                        cuda_graph=captured))
        times.setdefault("pytorch eager", []).append(pytorch(args.device, args.batch_size,
                                                             args.warmup, args.steps))
    print(f"DCGAN train step, batch {args.batch_size}, {cupy.cuda.runtime.getDeviceProperties(args.device)['name'].decode()}")
    print(f"{'engine':<32} {'ms/step (median)':>17} {'img/s':>8}   runs (ms/step)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<32} {med:17.2f} {args.batch_size / med * 1e3:8.0f}   "
              + " ".join(f"{t:.2f}" for t in ts))
    base = statistics.median(times["pytorch eager"])
    for name in times:
        if name != "pytorch eager":
            print(f"speed-up of {name} over pytorch eager: "
                  f"{base / statistics.median(times[name]):.2f}x")


if __name__ == "__main__":
    main()

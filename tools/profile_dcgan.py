"""Where a DCGAN training step's time goes on this engine: host (Python) time against device
time per step, then the Python functions that cost the most host time (cProfile).

    python -m tools.profile_dcgan --device 0 [--steps 30] [--top 35]
"""
import cProfile
import io
import pstats

from train import cli


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=128)
    ap.add_argument("--steps", type=cli.positive_int, default=30)
    ap.add_argument("--top", type=cli.positive_int, default=35)
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool profiles the GPU path (host against device "
                                         "time)")
    import cupy
    from cupyx.profiler import benchmark
    import layers as L
    from tools import workloads
    from train import dcgan
    G, D, oG, oD, real, finite = workloads.dcgan(args.device, args.batch_size)
    real, gen = L.Tensor(real), L.random.device_generator()

    def step():
        dcgan.train_step(G, D, oG, oD, real, L.Tensor(gen.normal((args.batch_size, 100, 1, 1))),
                         finite)

    result = benchmark(step, n_repeat=args.steps, n_warmup=10)
    print(f"host {result.cpu_times.mean() * 1e3:.2f} ms/step, device "
          f"{result.gpu_times.mean() * 1e3:.2f} ms/step (cupyx.profiler.benchmark, "
          f"{args.steps} steps)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    cupy.cuda.get_current_stream().synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()

"""Every algorithm cuDNN lists for each convolution of a DCGAN step (forward, backward-data,
backward-filter of the discriminator's convs and the generator's transposed convs), timed on
the GPU, next to the one the heuristics pick, what the layers run (`layers` column: cuDNN's
pick; one cuBLASLt product for a filter that covers its whole input, marked `gemm`; im2col +
one product for a channels-last input narrower than 16 bytes a pixel, marked `im2col`) and
PyTorch's time for the same op.

    python -m tools.conv_algos --device 0 [--batch-size 128] [--tf32 1]
"""
import numpy as np

from train import cli

# (name, x shape, W shape, stride, pad): the convolution as cuDNN sees it. The generator's
# ConvTranspose2d(i, o) layers are backward-data of these with x = the transposed conv's output.
DCGAN = [
    ("D conv1", (1, 64, 64), (64, 1, 4, 4), 2, 1),
    ("D conv2", (64, 32, 32), (128, 64, 4, 4), 2, 1),
    ("D conv3", (128, 16, 16), (256, 128, 4, 4), 2, 1),
    ("D conv4", (256, 8, 8), (512, 256, 4, 4), 2, 1),
    ("D conv5", (512, 4, 4), (1, 512, 4, 4), 1, 0),
    ("G convT1", (512, 4, 4), (100, 512, 4, 4), 1, 0),
    ("G convT2", (256, 8, 8), (512, 256, 4, 4), 2, 1),
    ("G convT3", (128, 16, 16), (256, 128, 4, 4), 2, 1),
    ("G convT4", (64, 32, 32), (128, 64, 4, 4), 2, 1),
    ("G convT5", (1, 64, 64), (64, 1, 4, 4), 2, 1),
]


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=128)
    ap.add_argument("--tf32", type=int, default=1, choices=[0, 1])
    ap.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"])
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times cuDNN's convolution algorithms")
    import cupy
    import torch
    from cupyx.profiler import benchmark
    import cudnnlite as cl
    from cudnnlite import conv
    from layers.ops import conv as ops_conv
    conv.configure(allow_tf32=bool(args.tf32))
    torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    handle = cl.get_handle()
    N = args.batch_size
    rng = np.random.default_rng(0)
    nhwc = args.layout == "NHWC"
    total_pick = total_best = total_torch = total_layers = 0.0
    print(f"{'layer':<9} {'dir':<10} {'picked':<22} {'ms':>7} {'best':<22} {'ms':>7} "
          f"{'layers ms':>9} {'route':<6} {'torch ms':>8}")
    for name, xs, ws, s, p in DCGAN:
        x = rng.standard_normal((N,) + xs).astype(np.float32)
        W = (rng.standard_normal(ws) * 0.02).astype(np.float32)
        if nhwc:
            x, W = np.moveaxis(x, 1, -1).copy(), np.moveaxis(W, 1, -1).copy()
        xd, Wd = cupy.asarray(x), cupy.asarray(W)
        y = conv.forward(xd, Wd, stride=s, pad=p, layout=args.layout)
        gy = cupy.asarray(rng.standard_normal(y.shape).astype(np.float32))
        pl = conv.plan(xd.shape, conv.c_strides(xd.shape), Wd.shape, "float32", args.layout,
                       p, s, 1, 1)
        tx = torch.tensor(np.moveaxis(x, -1, 1) if nhwc else x, device=f"cuda:{args.device}")
        tw = torch.tensor(np.moveaxis(W, -1, 1) if nhwc else W, device=f"cuda:{args.device}")
        tgy = torch.tensor(np.moveaxis(gy.get(), -1, 1) if nhwc else gy.get(),
                           device=f"cuda:{args.device}")
        geometry = ((s, s), (p, p), (1, 1), 1, args.layout)
        layers_runs = {       # the layers' GPU branch of each direction (ops.conv.on_gpu)
            "fwd": lambda: ops_conv.on_gpu("conv_forward", xd, Wd, *geometry),
            "bwd_data": lambda: ops_conv.on_gpu("conv_backward_data", Wd, gy, xd.shape,
                                                *geometry),
            "bwd_filter": lambda: ops_conv.on_gpu("conv_backward_filter", xd, gy, Wd.shape,
                                                  *geometry)}
        route = "gemm" if ops_conv.WHOLE_INPUT_AS_GEMM and ops_conv.whole_input(
            xd.shape, Wd.shape, (p, p), (1, 1), 1) else \
            "im2col" if ops_conv.THIN_INPUT_AS_GEMM and ops_conv.thin_input(
                xd.shape, Wd.shape, args.layout, 1, xd.itemsize) else ""
        runs = {
            "fwd": (conv.FWD, lambda a: conv.forward(xd, Wd, stride=s, pad=p, algo=a,
                                                     layout=args.layout),
                    lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)),
            "bwd_data": (conv.BWD_DATA,
                         lambda a: conv.backward_data(Wd, gy, xd.shape, stride=s, pad=p, algo=a,
                                                      layout=args.layout),
                         lambda: torch.ops.aten.convolution_backward(
                             tgy, tx, tw, None, (s, s), (p, p), (1, 1), False, (0, 0), 1,
                             (True, False, False))),
            "bwd_filter": (conv.BWD_FILTER,
                           lambda a: conv.backward_filter(xd, gy, Wd.shape, stride=s, pad=p,
                                                          algo=a, layout=args.layout),
                           lambda: torch.ops.aten.convolution_backward(
                               tgy, tx, tw, None, (s, s), (p, p), (1, 1), False, (0, 0), 1,
                               (False, True, False))),
        }
        for dname, (d, run, trun) in runs.items():
            if name.startswith("G") and dname == "fwd":
                continue              # a transposed conv uses bwd_data forward, fwd + wgrad back
            picked = pl.choose(d, handle, None, None, None)
            times = {}
            for q in pl.candidates(d, handle):
                if q.status != 0 or q.memory > 1 << 30:
                    continue
                try:
                    t = benchmark(run, (q.algo,), n_repeat=20, n_warmup=3).gpu_times.mean() * 1e3
                except cl.CudnnError:
                    continue
                key = f"{d.algos(q.algo).name}/{cl.MathType(q.mathType).name[:6]}"
                times[key] = min(t, times.get(key, t))
            pick_key = f"{d.algos(picked.algo).name}/{picked.math_type.name[:6]}"
            t_pick = times.get(pick_key, float("nan"))
            best = min(times, key=times.get)
            t_torch = benchmark(trun, n_repeat=20, n_warmup=3).gpu_times.mean() * 1e3
            t_layers = benchmark(layers_runs[dname], n_repeat=20,
                                 n_warmup=3).gpu_times.mean() * 1e3
            total_pick += t_pick
            total_best += times[best]
            total_torch += t_torch
            total_layers += t_layers
            print(f"{name:<9} {dname:<10} {pick_key:<22} {t_pick:7.3f} {best:<22} "
                  f"{times[best]:7.3f} {t_layers:9.3f} {route:<6} {t_torch:8.3f}")
    print(f"{'total':<20} {'':<22} {total_pick:7.3f} {'':<22} {total_best:7.3f} "
          f"{total_layers:9.3f}        {total_torch:8.3f}")


if __name__ == "__main__":
    main()

"""Host-side cost of one call of each kind the engine issues -- a cuDNN convolution through the
legacy API and through the graph API, batch norm, activation, a CuPy elementwise kernel -- on tiny tensors, so the GPU is
never the bottleneck: what a step pays per launch before any kernel runs.

    python -m tools.bench_calls --device 0
"""
import time

import numpy as np

from train import cli


def host_us(fn, n=300):
    import cupy
    for _ in range(20):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        cupy.cuda.get_current_stream().synchronize()
    return best


def main():
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    args = ap.parse_args()
    cli.use_device(args.device, gpu_only="this tool times the host cost of GPU calls")
    import cupy
    import cudnnlite as cl
    from cudnnlite import activation, batchnorm, conv
    x = cupy.asarray(np.random.default_rng(0).standard_normal((2, 8, 8, 8)), np.float32)
    W = cupy.asarray(np.random.default_rng(1).standard_normal((8, 8, 3, 3)), np.float32)
    g, b = cupy.ones(8, np.float32), cupy.zeros(8, np.float32)
    rm, rv = cupy.zeros(8, np.float32), cupy.ones(8, np.float32)
    y = conv.forward(x, W, pad=1)
    p = conv.plan(x.shape, conv.c_strides(x.shape), W.shape, "float32", "NCHW", 1, 1, 1, 1)
    h = cl.get_handle()
    ch = p.choose(conv.FWD, h, x, W, y)
    one = conv.scalar(cl.DataType.FLOAT, 1.0)
    zero = conv.scalar(cl.DataType.FLOAT, 0.0)
    ws = h.workspace(ch.workspace)
    cdesc = p.conv(ch.math_type)
    gp = p.graph_plan(conv.FWD, h, 1.0, 0.0)
    gws = h.workspace(gp.workspace)
    rows = [
        ("cudnnConvolutionForward (raw ctypes call)",
         lambda: cl.api.cudnnConvolutionForward(h, one, p.x, x.data.ptr, p.w, W.data.ptr, cdesc,
                                                ch.algo, ws, ch.workspace, zero, p.y, y.data.ptr)),
        ("cudnnBackendExecute (raw, variant pack reused)",
         lambda: gp.execute(h, (1, 2, 3), (x.data.ptr, W.data.ptr, y.data.ptr), gws)),
        ("conv.forward (plan lookup + call)", lambda: conv.forward(x, W, pad=1)),
        ("conv.forward, api='graph' (plan + variant pack)", None),
        ("batchnorm.forward_training", lambda: batchnorm.forward_training(x, g, b, rm, rv)),
        ("activation.forward (relu)", lambda: activation.forward(x, cl.ActivationMode.RELU)),
        ("cupy x + x", lambda: x + x),
        ("cupy.empty_like", lambda: cupy.empty_like(x)),
    ]
    print(f"{'call':<50} {'host us/call':>12}")
    for name, fn in rows:
        if fn is None:                       # the graph API: the same call under api='graph'
            with conv.using(api="graph"):
                us = host_us(lambda: conv.forward(x, W, pad=1))
        else:
            us = host_us(fn)
        print(f"{name:<50} {us:12.1f}")


if __name__ == "__main__":
    main()

"""Host-side cost of one call of each kind the engine issues -- a cuDNN convolution through the
legacy API and through the graph API, batch norm (plain, and the *Ex calls channels-last training
takes), activation, a CuPy elementwise kernel, CuPy views, a layers op through the autograd engine
-- on tiny tensors, so the GPU is never the bottleneck: what a step pays per launch before any
kernel runs. The cudnnlite calls are timed twice: as a training step repeats them (the boundary's
call cache: the checks' conclusions reused) and with every call checked (CALL_CACHE off).

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
    import layers as L
    from cudnnlite import activation, batchnorm, boundary, conv
    from layers import kernels
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
    cdesc = p.conv(ch.math_type)
    gp = p.graph_plan(conv.FWD, h, 1.0, 0.0)
    # channels-last training batch norm: the *Ex calls (x read as NHWC), and the bare C call
    fn = "cudnnBatchNormalizationForwardTrainingEx"
    mode = cl.BatchNormMode.SPATIAL_PERSISTENT
    _, x4, xdesc, bdesc, _, dt = batchnorm._setup(fn, x, "NHWC", mode, None, {})
    ex_ws, ex_rs = batchnorm._ex_sizes_for(h, xdesc, bdesc, dt, mode, backward=False)
    ex_bwd_ws = batchnorm._ex_sizes_for(h, xdesc, bdesc, dt, mode, backward=True)[0]
    y_ex, mean, invstd, reserve = batchnorm.forward_training_ex(x, g, b, rm, rv)
    # one workspace for the bare calls, as large as any row's (the wrappers' rows ask for the
    # same sizes): growing the handle's workspace frees the old buffer, so a pointer taken
    # before a larger request would name freed memory
    ws = gws = ex_workspace = h.workspace(max(ch.workspace, gp.workspace, ex_ws, ex_bwd_ws))

    def ex_raw():
        cl.api.cudnnBatchNormalizationForwardTrainingEx(
            h, mode, cl.BatchNormOps.BN, one, zero, xdesc, x.data.ptr, None, None, xdesc,
            y_ex.data.ptr, bdesc, g.data.ptr, b.data.ptr, 0.1, rm.data.ptr, rv.data.ptr, 1e-5,
            mean.data.ptr, invstd.data.ptr, None, ex_workspace, ex_ws,
            reserve.data.ptr if ex_rs else None, ex_rs)
    # one op through the autograd engine (a Tensor that records its graph)
    xt = L.Tensor(x.copy(), requires_grad=True)
    conv_m, bn_m = L.nn.Conv2d(8, 8, 3, padding=1).to(0), L.nn.BatchNorm2d(8).to(0)
    rows = [
        ("cudnnConvolutionForward (raw ctypes call)",
         lambda: cl.api.cudnnConvolutionForward(h, one, p.x, x.data.ptr, p.w, W.data.ptr, cdesc,
                                                ch.algo, ws, ch.workspace, zero, p.y, y.data.ptr)),
        ("cudnnBackendExecute (raw, variant pack reused)",
         lambda: gp.execute(h, (1, 2, 3), (x.data.ptr, W.data.ptr, y.data.ptr), gws)),
        ("conv.forward (plan lookup + call)", lambda: conv.forward(x, W, pad=1)),
        ("conv.forward, api='graph' (plan + variant pack)", None),
        ("batchnorm.forward_training", lambda: batchnorm.forward_training(x, g, b, rm, rv)),
        ("cudnnBatchNormalizationForwardTrainingEx (raw, NHWC)", ex_raw),
        ("batchnorm.forward_training_ex (NHWC)",
         lambda: batchnorm.forward_training_ex(x, g, b, rm, rv)),
        ("batchnorm.backward_ex (NHWC)",
         lambda: batchnorm.backward_ex(x, x, g, b, mean, invstd, reserve)),
        ("activation.forward (relu)", lambda: activation.forward(x, cl.ActivationMode.RELU)),
        ("boundary.signature of 3 arrays (the call cache's key)",
         lambda: boundary.signature(x, W, y)),
        ("layers.kernels.leaky_relu (CuPy ElementwiseKernel)", lambda: kernels.leaky_relu(x, 0.2)),
        ("cupy x + x", lambda: x + x),
        ("cupy.empty_like", lambda: cupy.empty_like(x)),
        ("cupy x.transpose(0, 2, 3, 1) (a view)", lambda: x.transpose(0, 2, 3, 1)),
        ("cupy x.reshape(2, -1) (a view)", lambda: x.reshape(2, -1)),
        ("layers F.leaky_relu (engine: Tensor in, graph recorded)",
         lambda: L.functional.leaky_relu(xt, 0.2)),
        ("layers nn.Conv2d forward (engine)", lambda: conv_m(xt)),
        ("layers nn.BatchNorm2d forward, training (engine)", lambda: bn_m(xt)),
    ]
    print(f"{'call':<58} {'host us/call':>12} {'checked':>8}")
    for name, fn in rows:
        graph = fn is None                   # the graph API: the same call under api='graph'
        if graph:
            fn = lambda: conv.forward(x, W, pad=1)      # noqa: E731
        with conv.using(api="graph" if graph else conv.settings.api):
            us = host_us(fn)
            # the cudnnlite calls once more with every call checked (boundary.CALL_CACHE off)
            checked = ""
            if name.startswith(("conv.", "batchnorm.", "activation.", "layers nn.")):
                boundary.CALL_CACHE = False
                try:
                    checked = f"{host_us(fn):8.1f}"
                finally:
                    boundary.CALL_CACHE = True
        print(f"{name:<58} {us:12.1f} {checked:>8}")


if __name__ == "__main__":
    main()

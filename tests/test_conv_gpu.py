"""cuDNN convolution on the GPU against the float64 NumPy reference, over a grid of geometries,
layouts and data types; transposed convolution against torch; every algorithm cuDNN lists."""
import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import conv
from reference import (TOLERANCE, conv_backward_data, conv_backward_filter, conv_forward,
                       rel_err)
from gpu_util import rounded, storage, to_device, to_host

pytestmark = pytest.mark.gpu

# (N, C, spatial, K, kernel, stride, pad, dilation, groups)
GEOMETRIES = [
    (2, 3, (9, 9), 4, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (2, 4, (10, 11), 6, (3, 2), (2, 1), (0, 1), (1, 1), 1),
    (3, 8, (16, 16), 8, (4, 4), (2, 2), (1, 1), (1, 1), 1),       # DCGAN-like
    (2, 6, (12, 12), 4, (3, 3), (1, 1), (2, 2), (2, 2), 2),       # dilation + groups
    (1, 8, (7, 9), 8, (3, 3), (2, 3), (1, 0), (1, 2), 8),         # depthwise
    (4, 16, (8, 8), 32, (1, 1), (1, 1), (0, 0), (1, 1), 4),
    (2, 3, (5, 6, 7), 4, (3, 2, 3), (1, 2, 1), (1, 0, 1), (1, 1, 2), 1),   # 3-d
]
DTYPES = ["float64", "float32", "float16", "bfloat16"]
LAYOUTS = ["NCHW", "NHWC"]


def _case(rng, g, dtype):
    N, C, spatial, K, kernel, stride, pad, dil, groups = g
    x = rounded(rng.standard_normal((N, C) + spatial), dtype)
    W = rounded(rng.standard_normal((K, C // groups) + kernel) / np.sqrt(C * np.prod(kernel)),
                dtype)
    geo = dict(stride=stride, pad=pad, dilation=dil, groups=groups)
    return x, W, geo


def _id(g):
    return "x".join(map(str, g[2])) + f"-k{g[4][0]}s{g[5][0]}p{g[6][0]}d{g[7][0]}g{g[8]}"


@pytest.fixture(autouse=True)
def _no_tf32():
    with conv.using(allow_tf32=False):
        yield


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", GEOMETRIES, ids=_id)
def test_forward(g, dtype, layout):
    import cupy
    if layout == "NHWC" and len(g[2]) == 3 and dtype == "float64":
        pytest.skip("cuDNN has no float64 NDHWC convolution")
    rng = np.random.default_rng(0)
    x, W, geo = _case(rng, g, dtype)
    ref = conv_forward(x, W, geo["stride"], geo["pad"], geo["dilation"], geo["groups"])
    store, override = storage(dtype)
    xd, Wd = to_device(x, dtype, layout), to_device(W, dtype, layout)
    y_shape = np.moveaxis(ref, 1, -1).shape if layout == "NHWC" else ref.shape
    poison = 0xFFFF if store == "uint16" else np.nan     # 0xFFFF is a bf16 NaN
    out = cupy.full(y_shape, poison, dtype=store)
    y = conv.forward(xd, Wd, layout=layout, out=out, dtype=override, **geo)
    assert rel_err(to_host(y, dtype, layout), ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", GEOMETRIES, ids=_id)
def test_backward_data_and_filter_and_bias(g, dtype, layout):
    if layout == "NHWC" and len(g[2]) == 3 and dtype == "float64":
        pytest.skip("cuDNN has no float64 NDHWC convolution")
    rng = np.random.default_rng(1)
    x, W, geo = _case(rng, g, dtype)
    y_shape = conv_forward(x, W, **{k: geo[k] for k in ("stride", "pad", "dilation", "groups")}).shape
    gy = rounded(rng.standard_normal(y_shape), dtype)
    _, override = storage(dtype)
    xd, Wd, gyd = (to_device(a, dtype, layout) for a in (x, W, gy))
    if dtype == "float64" and layout == "NHWC":
        # cuDNN 9 lists every backward-data and backward-filter algorithm as NOT_SUPPORTED for
        # double NHWC: the error must say so, naming the heuristics call and each candidate.
        with pytest.raises(cl.NotSupported, match="BackwardDataAlgorithm_v7(.|\n)*NOT_SUPPORTED"):
            conv.backward_data(Wd, gyd, xd.shape, layout=layout, **geo)
        with pytest.raises(cl.NotSupported, match="BackwardFilterAlgorithm_v7(.|\n)*NOT_SUPPORT"):
            conv.backward_filter(xd, gyd, Wd.shape, layout=layout, **geo)
        return
    gx = conv.backward_data(Wd, gyd, xd.shape, layout=layout, dtype=override, **geo)
    gW = conv.backward_filter(xd, gyd, Wd.shape, layout=layout, dtype=override, **geo)
    ref_gx = conv_backward_data(gy, W, x.shape, geo["stride"], geo["pad"], geo["dilation"],
                                geo["groups"])
    ref_gW = conv_backward_filter(x, gy, W.shape, geo["stride"], geo["pad"], geo["dilation"],
                                  geo["groups"])
    assert rel_err(to_host(gx, dtype, layout), ref_gx) < TOLERANCE[dtype]
    assert rel_err(to_host(gW, dtype, layout), ref_gW) < TOLERANCE[dtype]
    if dtype in ("float64", "float32"):   # cudnnConvolutionBackwardBias: float types only here
        gb = conv.backward_bias(gyd, layout=layout)
        assert rel_err(gb.get(), gy.sum(axis=(0,) + tuple(range(2, gy.ndim)))) < TOLERANCE[dtype]


def test_tf32_is_used_when_allowed_and_close():
    import cupy
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 64, 16, 16))
    W = rng.standard_normal((64, 64, 3, 3)) / 24
    ref = conv_forward(x, W, (1, 1), (1, 1), (1, 1), 1)
    xd, Wd = cupy.asarray(x, np.float32), cupy.asarray(W, np.float32)
    with conv.using(allow_tf32=True):
        e_tf32 = rel_err(conv.forward(xd, Wd, pad=1).get(), ref)
    e_fma = rel_err(conv.forward(xd, Wd, pad=1).get(), ref)
    assert e_tf32 < TOLERANCE["tf32"] and e_fma < TOLERANCE["float32"]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("g", [GEOMETRIES[0], GEOMETRIES[2], GEOMETRIES[3]], ids=_id)
def test_every_listed_algorithm_agrees(g, direction):
    import cupy
    rng = np.random.default_rng(3)
    x, W, geo = _case(rng, g, "float32")
    st, pd, dl, gr = geo["stride"], geo["pad"], geo["dilation"], geo["groups"]
    y = conv_forward(x, W, st, pd, dl, gr)
    gy = rng.standard_normal(y.shape)
    xd, Wd, gyd = (cupy.asarray(a, np.float32) for a in (x, W, gy))
    p = conv.plan(xd.shape, conv.c_strides(xd.shape), Wd.shape, "float32", "NCHW", pd, st, dl, gr)
    d = {"fwd": conv.FWD, "bwd_data": conv.BWD_DATA, "bwd_filter": conv.BWD_FILTER}[direction]
    listed = [q for q in p.candidates(d, cl.get_handle()) if q.status == 0]
    assert listed, "cuDNN listed no supported algorithm"
    ran = 0
    for q in listed:
        if q.memory > 1 << 30:
            continue
        if direction == "fwd":
            out, ref = conv.forward(xd, Wd, algo=q.algo, **geo), y
        elif direction == "bwd_data":
            out = conv.backward_data(Wd, gyd, xd.shape, algo=q.algo, **geo)
            ref = conv_backward_data(gy, W, x.shape, st, pd, dl, gr)
        else:
            out = conv.backward_filter(xd, gyd, Wd.shape, algo=q.algo, **geo)
            ref = conv_backward_filter(x, gy, W.shape, st, pd, dl, gr)
        assert rel_err(out.get(), ref) < 5e-5, d.algos(q.algo).name
        ran += 1
    assert ran >= 1


@pytest.mark.parametrize("mode", ["heuristic", "benchmark"])
def test_algorithm_modes_and_determinism(mode):
    import cupy
    rng = np.random.default_rng(4)
    x, W, geo = _case(rng, GEOMETRIES[2], "float32")
    gy = rounded(rng.standard_normal((3, 8, 8, 8)), "float32")
    ref = conv_backward_filter(x, gy, W.shape, (2, 2), (1, 1), (1, 1), 1)
    xd, Wd, gy = (cupy.asarray(a, np.float32) for a in (x, W, gy))
    with conv.using(algo_mode=mode, deterministic=True):
        a = conv.backward_filter(xd, gy, Wd.shape, **geo)
        b = conv.backward_filter(xd, gy, Wd.shape, **geo)
    assert cupy.array_equal(a, b)
    assert rel_err(a.get(), ref) < TOLERANCE["float32"]


def test_zero_workspace_limit_falls_back_to_an_algorithm_that_fits():
    import cupy
    rng = np.random.default_rng(5)
    x, W, geo = _case(rng, GEOMETRIES[2], "float32")
    xd, Wd = cupy.asarray(x, np.float32), cupy.asarray(W, np.float32)
    with conv.using(workspace_limit=0):
        y = conv.forward(xd, Wd, **geo)
        p = conv.plan(xd.shape, conv.c_strides(xd.shape), Wd.shape, "float32", "NCHW",
                      geo["pad"], geo["stride"], geo["dilation"], geo["groups"])
        choice = p.choose(conv.FWD, cl.get_handle(), xd, Wd, y)
    assert choice.workspace == 0
    assert rel_err(y.get(), conv_forward(x, W, (2, 2), (1, 1), (1, 1), 1)) < TOLERANCE["float32"]


def test_strided_input_view():
    import cupy
    rng = np.random.default_rng(6)
    big = rng.standard_normal((4, 6, 12, 12))
    W = rng.standard_normal((5, 3, 3, 3))
    xd = cupy.asarray(big, np.float32)[::2, 1:4, :, 1:11]     # non-contiguous
    y = conv.forward(xd, cupy.asarray(W, np.float32), pad=1)
    ref = conv_forward(big[::2, 1:4, :, 1:11], W, (1, 1), (1, 1), (1, 1), 1)
    assert rel_err(y.get(), ref) < TOLERANCE["float32"]


# ---- transposed convolution = backward-data, against torch ----------------------------------

TRANSPOSED = [  # (N, Cin, H, W, Cout, R, S, stride, padding, output_padding, dilation, groups)
    (2, 4, 5, 5, 3, 4, 4, 2, 1, 0, 1, 1),       # DCGAN generator block
    (2, 100, 1, 1, 16, 4, 4, 1, 0, 0, 1, 1),    # DCGAN first layer: 1x1 -> 4x4
    (2, 4, 6, 7, 6, 3, 3, 2, 1, 1, 1, 1),       # output_padding < stride
    (1, 6, 5, 5, 4, 3, 2, 3, (0, 1), (2, 1), 1, 2),
    (2, 3, 4, 4, 2, 3, 3, 1, 1, 1, 2, 1),       # output_padding >= stride (< dilation): crop path
    (1, 2, 3, 5, 2, 2, 3, (1, 2), 0, (0, 1), (2, 1), 1),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", TRANSPOSED)
def test_conv_transpose_matches_torch(case, layout):
    import cupy
    torch = pytest.importorskip("torch")
    N, Cin, H, Wd, Cout, R, S, s, p, op, d, g = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, Cin, H, Wd))
    W = rng.standard_normal((Cin, Cout // g, R, S))          # PyTorch layout
    ref = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(W),
                                               stride=s, padding=p, output_padding=op,
                                               dilation=d, groups=g).numpy()
    xd = to_device(x, "float32", layout)
    Wdev = cupy.asarray(np.ascontiguousarray(np.moveaxis(W, 1, -1) if layout == "NHWC" else W),
                        np.float32)
    y = conv.conv_transpose(xd, Wdev, stride=s, padding=p, output_padding=op, dilation=d,
                            groups=g, layout=layout)
    assert rel_err(to_host(y, "float32", layout), ref) < TOLERANCE["float32"]


def test_conv_transpose_rejects_output_padding_not_below_stride_or_dilation():
    import cupy
    x = cupy.zeros((1, 2, 4, 4), np.float32)
    W = cupy.zeros((2, 3, 3, 3), np.float32)
    with pytest.raises(cl.BadParam) as e:
        conv.conv_transpose(x, W, stride=2, output_padding=2)
    assert e.value.function == "cudnnConvolutionBackwardData"
    assert "output_padding=2, stride=2, dilation=1" in str(e.value)


def test_shape_errors_name_the_function():
    import cupy
    x = cupy.zeros((2, 3, 8, 8), np.float32)
    W = cupy.zeros((4, 5, 3, 3), np.float32)
    with pytest.raises(cl.BadParam, match="cudnnGetConvolutionNdForwardOutputDim"):
        conv.forward(x, W)
    with pytest.raises(cl.BadParam, match="cudnnConvolutionForward.*CuPy array"):
        conv.forward(np.zeros((2, 3, 8, 8), np.float32), W)
    with pytest.raises(cl.BadParamShapeMismatch, match="gy has shape"):
        conv.backward_data(cupy.zeros((4, 3, 3, 3), np.float32),
                           cupy.zeros((2, 4, 5, 5), np.float32), (2, 3, 8, 8))

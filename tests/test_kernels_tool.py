"""layers.trace (the scopes a profiler sees) and tools.kernels (one row per GPU kernel of a step).
The scopes and the cuDNN-call descriptions run anywhere (descriptors need no GPU); the kernel
table itself needs a GPU and cupti-python."""
import csv

import numpy as np
import pytest

import layers as L
from layers import nn
from layers.trace import Trace
from tools import kernels


def small_model():
    L.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                         nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 2)))


def test_scopes_name_direction_layer_and_op_and_backward_takes_its_forwards_layer():
    model = small_model()
    opt = L.optim.Adam(model.parameters())
    x = L.tensor(np.random.default_rng(0).standard_normal((2, 2, 4, 4)).astype(np.float32))
    events = []
    with Trace({"net": model}, on_enter=lambda s: events.append(("+", s.index)),
               on_exit=lambda s: events.append(("-", s.index))) as t:
        loss = (model(x) ** 2).sum()
        loss.backward()
        opt.step()
    fwd = [(s.layer, s.op) for s in t.scopes if s.direction == "fprop"]
    assert fwd[:5] == [("net.0", "Conv2d"), ("net.1", "BatchNorm"), ("net.2", "ReLU"),
                       ("net.3.0", "Reshape"), ("net.3.1", "Linear")]
    assert fwd[5:] == [("", "Pow"), ("", "Sum")]          # outside every module
    assert t.scopes[0].shapes == ((2, 2, 4, 4), (3, 2, 3, 3), (3,))
    assert t.scopes[0].dtype == "float32"
    bwd = [(s.layer, s.op) for s in t.scopes if s.direction == "bprop"]
    assert bwd[:-2] == list(reversed(fwd))                # each op's backward, in its layer
    # then Linear's Deferred weight and bias gradients, summed at the end of backward
    assert bwd[-2:] == [("net.3.1", "WeightGrad(weight)"), ("net.3.1", "WeightGrad(bias)")]
    upd = [(s.layer, s.op) for s in t.scopes if s.direction == "optimizer"]
    assert upd == [(name, "Adam") for name, _ in model.named_parameters("net")]
    # scopes open and close in nesting order, each exactly once
    depth = 0
    for sign, _ in events:
        depth += 1 if sign == "+" else -1
        assert depth >= 0
    assert depth == 0 and len(events) == 2 * len(t.scopes)


def test_a_trace_is_per_thread_and_not_nested():
    with Trace({}) as t:
        with pytest.raises(RuntimeError, match="already active"):
            Trace({}).__enter__()
    assert t is not None
    from layers.trace import active
    assert active.trace is None


def test_describe_call_reads_the_descriptors_in_cudnn_letters():
    from cudnnlite import api
    from cudnnlite.descriptors import (ConvolutionDescriptor, FilterDescriptor, TensorDescriptor,
                                       conv_output_shape)
    from cudnnlite.enums import ConvBwdDataAlgo, ConvFwdAlgo, MathType
    x = TensorDescriptor((128, 64, 32, 24))
    w = FilterDescriptor((128, 64, 4, 4))
    conv = ConvolutionDescriptor(pad=1, stride=2, math_type=MathType.TENSOR_OP)
    y = TensorDescriptor(conv_output_shape(x, w, conv))
    assert y.dims == (128, 128, 16, 12)        # (32 + 2 - 4) // 2 + 1, (24 + 2 - 4) // 2 + 1
    names = api.cudnnConvolutionForward.arg_names
    args = dict(zip(names, [None] * len(names))) | dict(
        xDesc=x, wDesc=w, convDesc=conv, yDesc=y, algo=int(ConvFwdAlgo.IMPLICIT_PRECOMP_GEMM))
    params, algo = kernels.describe_call("cudnnConvolutionForward", args)
    assert params == "N=128,C=64,H=32,W=24,K=128,P=16,Q=12,R=4,S=4 pad=1,1 stride=2,2"
    assert algo == "IMPLICIT_PRECOMP_GEMM TENSOR_OP"
    # backward-data (a transposed convolution): dx is the forward's x, dy its y
    names = api.cudnnConvolutionBackwardData.arg_names
    args = dict(zip(names, [None] * len(names))) | dict(
        dxDesc=x, wDesc=w, convDesc=conv, dyDesc=y, algo=int(ConvBwdDataAlgo.ALGO_1))
    params, algo = kernels.describe_call("cudnnConvolutionBackwardData", args)
    assert params.startswith("N=128,C=64,H=32,W=24,K=128,P=16,Q=12,R=4,S=4")
    assert algo == "ALGO_1 TENSOR_OP"


def test_a_graph_api_plan_is_described_by_the_convolution_it_was_built_for():
    """A cudnnBackendExecute row: its plan's engine summary, and the direction and problem
    cudnnlite.conv recorded on the plan (plan.problem), in the legacy rows' letters."""
    from types import SimpleNamespace
    from cudnnlite import api, conv
    p = conv.plan((128, 32, 24, 64), (49152, 1536, 64, 1), (128, 4, 4, 64), "float32", "NHWC",
                  pad=(1, 1), stride=(2, 2), dilation=(1, 1), groups=1)
    names = api.cudnnBackendExecute.arg_names
    for what, label in (("cudnnConvolutionBackwardFilter", "backward-filter"),
                        ("conv + bias + relu", "conv + bias + relu")):
        plan = SimpleNamespace(summary="engine 7 TENSOR_CORE", problem=conv._problem(what, p))
        args = dict(zip(names, [None] * len(names))) | dict(executionPlan=plan)
        params, algo = kernels.describe_call("cudnnBackendExecute", args)
        assert params == (f"{label}: N=128,C=64,H=32,W=24,K=128,P=16,Q=12,R=4,S=4 pad=1,1 "
                          f"stride=2,2")
        assert algo == "engine 7 TENSOR_CORE"
    plan = SimpleNamespace(summary="engine 3")                  # a plan made elsewhere
    params, algo = kernels.describe_call("cudnnBackendExecute", dict(executionPlan=plan))
    assert (params, algo) == ("", "engine 3")


def test_gemm_sizes_of_products():
    from layers.trace import Scope
    s = Scope(0, "fprop", "l", "Linear", ((64, 7, 512), (1024, 512), (1024,)), "float32")
    assert kernels.describe_scope(s) == ("M=448,N=1024,K=512", "cuBLASLt")
    s = Scope(0, "fprop", "l", "MatMul", ((8, 3, 5), (5, 2)), "float32")
    assert kernels.describe_scope(s) == ("M=3,N=2,K=5 batch=8", "cuBLASLt")


@pytest.mark.parametrize("transposed", [False, True])
def test_a_cublaslt_call_reads_back_as_the_row_major_product(transposed):
    """The descriptors cudnnlite.blas would hand cublasLtMatmul for y (7, 5) = a (7, 3) @ b,
    b (3, 5) stored as is or as the transpose of a (5, 3) array (TRANSA = T): M, N, K as the
    user wrote them, not cuBLAS's swapped ones."""
    from cudnnlite import blas
    a = np.zeros((4, 7, 3), np.float32)
    b = np.zeros((5, 3), np.float32).T if transposed else np.zeros((3, 5), np.float32)
    p = blas.describe(a, b, blas.CudaDataType.R_32F, has_bias=True)
    args = {"computeDesc": blas.MatmulDesc(p.compute, blas.CudaDataType.R_32F, p.a.op, p.b.op,
                                           p.epilogue),
            "Adesc": blas.MatrixLayout(p.data_type, p.a.rows, p.a.cols, p.a.ld, p.batch,
                                       p.a.batch_stride),
            "Ddesc": blas.MatrixLayout(p.data_type, p.m, p.n, p.ldd, p.batch, p.stride_d)}
    assert kernels.describe_call("cublasLtMatmul", args) == ("M=7,N=5,K=3 batch=4",
                                                             "COMPUTE_32F BIAS")


def test_the_cudnn_wrappers_are_installed_and_removed():
    from cudnnlite import api, blas
    before, blas_before = api.cudnnConvolutionForward, blas.cublasLtMatmul
    seen = []
    import contextlib

    @contextlib.contextmanager
    def on_call(name, args):
        seen.append(name)
        yield
    from cudnnlite import conv
    with kernels.cudnn_calls_recorded(on_call):
        assert api.cudnnConvolutionForward is not before
        # every call site looks its function up in api at call time (conv's three directions too)
        assert conv.FWD.compute is api.cudnnConvolutionForward
        assert conv.BWD_FILTER.compute is api.cudnnConvolutionBackwardFilter
        assert api.cudnnGetVersion is not None and not hasattr(api.cudnnGetVersion, "__wrapped__")
        assert api.cudnnCreateTensorDescriptor.__name__ == "cudnnCreateTensorDescriptor"
        assert blas.cublasLtMatmul is not blas_before
    assert api.cudnnConvolutionForward is before and blas.cublasLtMatmul is blas_before


def test_kernel_names_and_busy_time():
    assert kernels.short_kernel_name(
        "void cudnn::cnn::conv2d_grouped_direct_kernel<float, 1>(cudnn::cnn::Params, int)") \
        == "cudnn::cnn::conv2d_grouped_direct_kernel<>"
    R = kernels.Row
    rows = [R(0, "", "", "", "", "", "", "", "a", 2.0, 1000),      # [1000, 3000) ns
            R(1, "", "", "", "", "", "", "", "b", 1.0, 2500),      # [2500, 3500): overlaps
            R(2, "", "", "", "", "", "", "", "c", 0.5, 10000)]     # [10000, 10500)
    assert kernels.busy_us(rows) == pytest.approx(3.0)


@pytest.mark.gpu
@pytest.mark.parametrize("foreach", [True, False])
def test_every_kernel_of_a_dcgan_step_is_listed_and_matched_to_its_op(tmp_path, monkeypatch,
                                                                      foreach):
    pytest.importorskip("cupti")
    monkeypatch.setattr(L.optim, "FOREACH", foreach)
    from cudnnlite import conv
    algo_mode = conv.settings.algo_mode
    out = tmp_path / "k.csv"
    md = tmp_path / "k.md"
    assert kernels.main(["dcgan", "--device", "0", "--batch-size", "16", "--warmup", "2",
                         "--conv-api", "legacy", "--csv", str(out), "--markdown", str(md)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) > 100
    assert all(float(r["us"]) >= 0 for r in rows)
    def layers(function, direction="fprop"):
        return {r["layer"] for r in rows if r["function"] == function and
                r["direction"] == direction}
    # netD's three inner convolutions run cuDNN's forward (in D's step and in G's), netG's
    # three inner transposed ones cuDNN's backward-data; the filter covering its whole input
    # (netD's last, netG's first) and the one-channel layers (netD's first, netG's last:
    # layers.ops.conv.whole_input / thin_input) are cuBLASLt products instead
    assert layers("cudnnConvolutionForward") == {f"netD.main.{i}" for i in (2, 5, 8)}
    assert layers("cudnnConvolutionBackwardData") == {f"netG.main.{i}" for i in (3, 6, 9)}
    assert layers("cublasLtMatmul") == {"netD.main.0", "netD.main.11", "netG.main.0",
                                        "netG.main.12"}
    assert conv.settings.algo_mode == algo_mode      # (the job's --algo, for the job only)
    # every cuDNN row ran inside an op scope, and each parameter has its Adam update
    assert all(r["op"] != "(outside ops)" for r in rows if r["function"].startswith("cudnn"))
    updates = {r["layer"] for r in rows if r["direction"] == "optimizer"}
    if foreach:     # one multi-tensor launch per optimizer, named by its parameters' model
        assert {"netD.main (11 parameters)", "netG.main (13 parameters)"} <= updates, updates
    else:
        assert "netD.main.0.weight" in updates and "netG.main.1.bias" in updates
    assert "kernels (and memcpy / memset) per step" in md.read_text()


@pytest.mark.gpu
def test_with_the_graph_api_each_plan_row_names_its_convolution(tmp_path):
    """tools.kernels' default for dcgan, train.dcgan's: the convolutions run cuDNN's graph-API
    plans, whose rows say which convolution each computes (netD's inner ones forward, netG's
    inner transposed ones backward-data) and which engine ran it."""
    pytest.importorskip("cupti")
    out = tmp_path / "k.csv"
    assert kernels.main(["dcgan", "--device", "0", "--batch-size", "16", "--warmup", "2",
                         "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(open(out)) if r["function"] == "cudnnBackendExecute"]

    def layers(what):
        return {r["layer"] for r in rows if r["params"].startswith(what + ":") and
                r["direction"] == "fprop"}
    assert layers("forward") == {f"netD.main.{i}" for i in (2, 5, 8)}
    assert layers("backward-data") == {f"netG.main.{i}" for i in (3, 6, 9)}
    assert rows and all(r["algo"].startswith("engine ") for r in rows)


def test_a_scope_left_open_is_closed_when_the_trace_ends_and_a_failing_hook_opens_none():
    events = []
    model = small_model()
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    (model(L.tensor(np.ones((1, 2, 4, 4), np.float32))) ** 2).sum().backward()
    with Trace({"net": model}, on_enter=lambda s: events.append("+"),
               on_exit=lambda s: events.append("-")) as t:
        it = opt._params_with_grad()
        next(it)                          # an optimizer loop abandoned inside its first scope
    assert events == ["+", "-"] and t.current is None
    del it

    def refuse(scope):
        raise RuntimeError("hook failed")
    with Trace({"net": model}, on_enter=refuse) as t:
        with pytest.raises(RuntimeError, match="hook failed"):
            model(L.tensor(np.ones((1, 2, 4, 4), np.float32)))
        assert t.current is None


def test_describing_a_call_never_stops_it():
    assert kernels.describe_call("cudnnConvolutionForward", {"convDesc": object()}) == ("", "")
    assert not kernels._is_compute("cudnnFindConvolutionForwardAlgorithmEx")
    assert kernels._is_compute("cudnnBackendExecute")


@pytest.mark.parametrize("argv,message", [
    (["dcgan", "--device", "cpu"], "--device cpu"),
    (["tacotron2", "--text", " "], "--text ' ': expected a sentence"),
])
def test_cli_errors_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        kernels.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_a_multi_tensor_update_is_one_scope_named_by_its_parameters_model(on_host):
    """The GPU path on the host (tests/host_kernels.py): Adam(foreach=True) updates the model's
    parameters in one launch, traced as one 'Adam(foreach)' scope whose layer names the
    parameters' common module path and their count -- what a kernel table's optimizer row
    shows."""
    from host_kernels import host
    model = small_model()
    for p in model.parameters():
        p.data = host(np.asarray(p.data))
    opt = L.optim.Adam(model.parameters(), foreach=True)
    for p in model.parameters():
        p.grad = L.Tensor(host(np.ones(p.shape, np.float32)))
    with Trace({"net": model}) as t:
        opt.step()
    multi = [(s.layer, s.op) for s in t.scopes if s.op == "Adam(foreach)"]
    assert multi == [("net (6 parameters)", "Adam(foreach)")]

"""Training steps through the layers' GPU path, run on the host, equal the NumPy path's (DCGAN,
a recurrent decoder, Tacotron 2).

The models live on "device 0" as tests/host_kernels.py's host arrays: every op takes its GPU
branch -- channels-last routing, half-precision rules, the CuPy kernels (compiled for the
host), cudnnlite's boundary checks, descriptors, algorithm plans and allocations for
convolutions (transposed ones as backward-data), batch norm and activations, whose cuDNN calls
are answered on the host from the descriptors cuDNN reports and the memory the pointers name,
Adam's fused and multi-tensor kernels, the device random generator's noise. What stands in:
cuBLASLt (NumPy with blas.matmul's contract) and cuDNN's RNN (the reference LSTM's cell
steps). The same step on the CPU path is the reference: a wrong layout, dtype, descriptor or
pointer in a GPU branch shows as a difference."""
import numpy as np
import pytest

import layers as L
from layers import backend
from layers import rnn as rnn_module
from train import dcgan

from host_kernels import CXX, HostArray, install_cudnn
from reference import before_batch_norm

pytest.importorskip("cupy")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


def _close_to_largest(ours, ref, tol, what=""):
    """Each array of `ours` equals `ref`'s to `tol` times the largest entry of ref's."""
    for k in ref:
        scale = max(np.abs(ref[k]).max(), 1e-6)
        np.testing.assert_allclose(ours[k], ref[k], rtol=0, atol=tol * scale,
                                   err_msg=f"{what} {k}")


def _tacotron2_gradients_close(grads, ref, tol):
    """_close_to_largest, but for the conv biases before batch norm (reference.before_batch_norm)
    whose gradients are exactly 0: there both paths hold only noise, below tol / 100 of the
    largest gradient entry of all."""
    assert set(grads) == set(ref)
    overall = max(np.abs(g).max() for g in ref.values())
    for k in filter(before_batch_norm, ref):
        assert np.abs(grads[k]).max() < tol * 1e-2 * overall, k
        assert np.abs(ref[k]).max() < tol * 1e-2 * overall, k
    _close_to_largest({k: grads[k] for k in ref if not before_batch_norm(k)},
                      {k: ref[k] for k in ref if not before_batch_norm(k)}, tol, "gradient")


def _models(device, dtype, memory_format, foreach, width=4):
    L.manual_seed(3)
    netG = dcgan.Generator(nz=8, ngf=width, nc=1)
    netD = dcgan.Discriminator(ndf=width, nc=1)
    for m in (netG, netD):
        m.to(device)
        if dtype != "float32":
            m.to(backend.bfloat16)
        if memory_format != "contiguous":
            m.to(memory_format=memory_format)
    optG, optD = dcgan.make_optimizers(netG, netD, master_weights=dtype != "float32")
    for opt in (optG, optD):
        for g in opt.param_groups:
            g["foreach"] = foreach
            if dtype != "float32":      # (see the test's docstring)
                g["lr"] = 0.0
    return netG, netD, optG, optD


def _run(device, dtype, memory_format, foreach, steps=2, width=4):
    netG, netD, optG, optD = _models(device, dtype, memory_format, foreach, width)
    rng = np.random.default_rng(5)
    out = []
    for _ in range(steps):
        real = rng.uniform(-1, 1, (6, 1, 64, 64)).astype(np.float32)
        noise = rng.standard_normal((6, 8, 1, 1)).astype(np.float32)
        stats = dcgan.train_step_device(netG, netD, optG, optD, L.tensor(real, device=device),
                                        L.tensor(noise, device=device))
        out.append(np.asarray(stats, np.float64))
    r = dict(stats=out)
    r["grads"] = {f"{k}.{n}": np.array(p.grad.data, np.float64)        # of the last step
                  for k, m in (("G", netG), ("D", netD)) for n, p in m.named_parameters()}
    if dtype != "float32":
        # one more Adam step with lr 1e-3 on those gradients, through the float32 masters
        # (adam_master on the GPU path; the multi-tensor kernel takes the float32 batch-norm
        # parameters with foreach)
        masters = {}
        for opt in (optG, optD):
            for g in opt.param_groups:
                g["lr"] = 1e-3
            opt.step()
        for k, m, opt in (("G", netG, optG), ("D", netD, optD)):
            for n, p in m.named_parameters():
                st = opt.state[p]
                masters[f"{k}.{n}"] = np.array(st.get("master_param", p.data), np.float64)
                if "master_param" in st:        # the weight is its master, rounded
                    np.testing.assert_array_equal(
                        np.array(p.data), np.array(st["master_param"]).astype(p.dtype))
        r["masters"] = masters
    r["state"] = {f"{k}.{n}": np.array(t, np.float64)       # weights and running statistics
                  for k, m in (("G", netG), ("D", netD)) for n, t in m.state_dict().items()}
    netD.eval()                                             # batch norm's inference call
    r["eval"] = np.array(netD(L.tensor(rng.uniform(-1, 1, (6, 1, 64, 64)).astype(np.float32),
                                       device=device).astype(next(netD.parameters()).dtype)
                              ).data, np.float64)
    return r


@pytest.mark.parametrize("dtype,memory_format,foreach,tol", [
    ("float32", "contiguous", False, 1e-4),
    ("float32", "contiguous", True, 1e-4),
    ("float32", "channels_last", False, 1e-4),
    ("float32", "channels_last", True, 1e-4),
    # bfloat16, one step: the paths' gradients agree to 1 % of each one's largest entry here;
    # a wrong layout or a lost term is of the order of the entries themselves
    ("bfloat16", "contiguous", False, 0.02),
    ("bfloat16", "channels_last", True, 0.02),
    ("vector float32", "channels_last", True, 1e-4),        # kernels.VECTOR_POINTWISE on
    ("vector bfloat16", "channels_last", True, 0.02),
    # 16 wide: the one-channel layers' window (16) fits their 16 outputs, so channels-last
    # runs them as im2col + cuBLASLt (layers.ops.conv.thin_input). One step, and the weights
    # after Adam compared only where the gradient is clear of 0: Adam's first step is
    # lr * sign(g), so in a model this wide some gradient within float32 rounding of 0 moves
    # its weight by 2 lr between the paths (a second step would compound it)
    ("thin float32", "channels_last", True, 1e-4)])
def test_dcgan_steps_on_the_gpu_path_equal_the_numpy_path(on_host, monkeypatch, dtype,
                                                           memory_format, foreach, tol):
    """Statistics of each step, gradients of the last, the weights and running statistics
    after the Adam steps, and an eval-mode forward of D.

    float32 takes two steps. bfloat16 takes one with lr 0 (so both paths' every forward and
    backward see the same weights), then one Adam step with lr 1e-3 on its gradients: Adam
    moves a weight whose gradient is near 0 by a full step either way, so the masters are
    compared only where the gradient is more than 5 % of its tensor's largest, to 5 % of lr
    (there Adam's steps agree to ~1 % of lr: D's first step saw its gradient before G's
    backward added to it, so its second step depends on the gradients' sizes, not only their
    signs; a master left unchanged is off by lr). (In a DCGAN four channels wide, bfloat16 amplifies
    roundings batch by batch: on a second batch every bfloat16 path -- GPU or NumPy, either
    layout -- has gradient entries 30 % of the largest away from float64's, 13 % from each
    other; the first batch gives the paths a tight check.)"""
    from host_kernels import CALLS
    install_cudnn(monkeypatch)
    vector, thin = dtype.startswith("vector "), dtype.startswith("thin ")
    dtype = dtype.split()[-1]
    width = 16 if thin else 4
    monkeypatch.setattr(L.kernels, "VECTOR_POINTWISE", vector)
    steps = 2 if dtype == "float32" and not thin else 1
    ref = _run("cpu", dtype, memory_format, foreach, steps, width)
    CALLS.clear()
    ours = _run(0, dtype, memory_format, foreach, steps, width)
    # the GPU branches ran: cuDNN's batch norm (both directions -- the *Ex calls for
    # channels-last training -- and inference), the activations (cuDNN's for float32, the CuPy
    # kernels for bfloat16), LeakyReLU's and Adam's kernels
    ex = "Ex" if memory_format == "channels_last" else ""
    lrelu = [f"cudnnlite_vector_leaky_relu_{d}_{dtype}" for d in ("fwd", "bwd")] if vector \
        else ["leaky_relu_fwd_float32", "leaky_relu_bwd_float32"]
    for call in ("cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                 "cudnnConvolutionBackwardFilter",
                 f"cudnnBatchNormalizationForwardTraining{ex}",
                 f"cudnnBatchNormalizationBackward{ex}",
                 "cudnnBatchNormalizationForwardInference", *lrelu, "cudnnlite_bce_mean",
                 "bce_bwd"):
        assert CALLS[call] > 0, (call, CALLS)
    thin_calls = ("cudnnlite_im2col_nhwc", "cudnnlite_col2im_nhwc_float", "cublasLtMatmul")
    assert all(CALLS[c] for c in thin_calls) if thin else not any(CALLS[c] for c in thin_calls[:2]), \
        CALLS
    if dtype == "float32":
        assert CALLS["cudnnActivationForward"] and CALLS["cudnnActivationBackward"], CALLS
        assert CALLS["cudnnlite_adam_multi_float32" if foreach else "adam_float32"] > 0, CALLS
    else:
        relu = "cudnnlite_vector_relu_fwd_bfloat16" if vector else "cudnnlite_relu_fwd"
        assert CALLS[relu] and CALLS["cudnnlite_adam_master_multi" if foreach
                                     else "cudnnlite_adam_master"], CALLS
    for a, b in zip(ours["stats"], ref["stats"]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

    _close_to_largest(ours["grads"], ref["grads"], tol, "gradient")
    scale = np.abs(ref["eval"]).max()
    np.testing.assert_allclose(ours["eval"], ref["eval"], rtol=0, atol=tol * scale)
    if dtype == "float32" and not thin:
        _close_to_largest(ours["state"], ref["state"], tol, "state")
    else:
        _close_to_largest({k: v for k, v in ours["state"].items() if "running" in k},
                          {k: v for k, v in ref["state"].items() if "running" in k}, tol, "state")
    if thin:            # the weights after Adam where the gradient is clear of 0 (5 % of lr)
        for k, g in ref["grads"].items():
            clear = np.abs(g) > 0.05 * np.abs(g).max()
            np.testing.assert_allclose(ours["state"][k][clear], ref["state"][k][clear],
                                       rtol=0, atol=0.05 * 2e-4, err_msg=f"weight {k}")
    if dtype != "float32":
        for k, g in ref["grads"].items():
            clear = np.abs(g) > 0.05 * np.abs(g).max()
            np.testing.assert_allclose(ours["masters"][k][clear], ref["masters"][k][clear],
                                       rtol=0, atol=0.05 * 1e-3, err_msg=f"master {k}")


class _Decoder(L.Module):
    """Tacotron 2's decoder pattern in small: an LSTMCell and a Linear run once a frame (their
    weight gradients deferred to one GEMM each at the end of backward, accumulated with beta 1),
    the frames stacked, softmax and leaky ReLU between."""

    def __init__(self):
        super().__init__()
        self.cell = L.nn.LSTMCell(6, 8)
        self.out = L.nn.Linear(8, 6)

    def forward(self, x, frames):
        state, ys = None, []
        for _ in range(frames):
            h, c = self.cell(x, state)
            state = (h, c)
            x = L.F.leaky_relu(L.F.softmax(self.out(h), axis=-1), 0.2)
            ys.append(x)
        return L.F.stack(ys, 1)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 0.05)])
def test_a_recurrent_decoder_on_the_gpu_path_equals_the_numpy_path(on_host, monkeypatch, dtype,
                                                                   tol):
    """Two backward passes without zero_grad: the deferred GEMMs add into existing gradients."""
    install_cudnn(monkeypatch)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((4, 7, 6)).astype(np.float32)
    results = []
    for device in ("cpu", 0):
        L.manual_seed(4)
        m = _Decoder().to(device)
        if dtype != "float32":
            m.to(backend.bfloat16)
        xt = L.tensor(x, device=device)
        xt = L.Tensor(xt.data.astype(next(m.parameters()).dtype))
        for _ in range(2):
            y = m(xt, 7)
            (y.astype(np.float32) * L.tensor(w, device=device)).sum().backward()
        results.append({n: np.array(p.grad.data, np.float64) for n, p in m.named_parameters()})
        if device == 0:
            assert isinstance(next(m.parameters()).grad.data, HostArray)
    ref, ours = results
    _close_to_largest(ours, ref, tol, "gradient")


@pytest.mark.parametrize("name", ["relu", "tanh", "sigmoid"])
def test_cudnn_activations_keep_a_nan_on_the_gpu_path(on_host, monkeypatch, name):
    """float32 activations go to cuDNN, whose default (NOT_PROPAGATE_NAN) would make relu(NaN)
    0 and hide it from the non-finite checks; cudnnlite asks cuDNN to propagate NaN, as torch's
    relu and the NumPy path do (the host stand-in reads the descriptor's NaN option)."""
    from host_kernels import CALLS
    install_cudnn(monkeypatch)
    x = np.array([[-1.0, np.nan, 2.0, 0.5]], np.float32)
    CALLS.clear()
    y = getattr(L.F, name)(L.tensor(x, device=0))
    assert CALLS["cudnnActivationForward"] == 1
    ref = getattr(L.F, name)(L.tensor(x))
    np.testing.assert_array_equal(np.isnan(np.array(y.data)), [[False, True, False, False]])
    np.testing.assert_allclose(np.array(y.data), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_tacotron2_step_on_the_gpu_path_equals_the_numpy_path(on_host, monkeypatch, dtype):
    """Tacotron 2 (small hparams, variable lengths, dropout off) through the GPU path: encoder
    convolutions and batch norm, the decoder's LSTM cells, attention (masks, softmax, location
    convolution), deferred weight gradients, postnet, losses, clip and Adam -- with the encoder's
    cuDNN LSTM stood in for by the layers' reference LSTM (LSTMCell ops, on the "device").

    float32: every loss part and every gradient to 1e-4 of its tensor's largest entry. bfloat16:
    against float32 the gradients of either path are off by up to 40 % of a tensor's largest
    entry (the encoder's, under many roundings), so the check is the losses (1 %), the gradient
    norm (5 %; measured 3 %) and the direction of the whole gradient (cosine > 0.99; measured
    0.997 between the paths, 0.992 / 0.995 against float32)."""
    tol = 1e-4 if dtype == "float32" else 0.01
    memory = "float" if dtype == "float32" else "unsigned_short"   # (bfloat16 read as its bits)
    from host_kernels import CALLS
    from layers import rnn
    from tools import tacotron2_torch as ref_model
    from train.tacotron2 import HParams, Tacotron2, make_optimizer, set_dropout, train_step
    install_cudnn(monkeypatch)
    monkeypatch.setattr(rnn.LSTM, "_forward_cudnn", rnn.LSTM._forward_reference)
    hp = HParams.small()
    batch = ref_model.make_batch(hp, 3, [9, 7, 4], [12, 9, 11], seed=3)
    results = []
    for device in ("cpu", 0):
        L.manual_seed(2)
        m = Tacotron2(hp).to(device)
        if dtype != "float32":
            m.to(backend.bfloat16)
        set_dropout(m, False)
        opt = make_optimizer(m, master_weights=dtype != "float32")
        CALLS.clear()
        losses = train_step(m, opt, batch)
        grads = {n: np.array(p.grad.data, np.float64) for n, p in m.named_parameters()
                 if p.grad is not None}
        results.append((losses, grads))
    from train.tacotron2.model import Attention
    op = "location_attention" if Attention.fuse_location else "additive_attention"
    assert CALLS["lstm_cell_fwd_float"] and CALLS["cudnnBatchNormalizationForwardTraining"] and \
        CALLS[f"cudnnlite_{op}_fwd_float_{memory}"] and \
        CALLS[f"cudnnlite_{op}_bwd_float_{memory}"] and CALLS["cublasLtMatmul"], CALLS
    (ref_losses, ref_grads), (losses, grads) = results
    for k in ref_losses:
        t = 0.05 if k == "grad_norm" and dtype != "float32" else tol
        assert abs(losses[k] - ref_losses[k]) <= t * abs(ref_losses[k]) + 1e-6, \
            (k, losses[k], ref_losses[k])
    assert set(grads) == set(ref_grads)
    if dtype != "float32":
        names = sorted(k for k in ref_grads if not before_batch_norm(k))
        a = np.concatenate([grads[k].ravel() for k in names])
        b = np.concatenate([ref_grads[k].ravel() for k in names])
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99
        return
    _tacotron2_gradients_close(grads, ref_grads, tol)


def test_a_tacotron2_step_with_device_lengths_equals_the_packed_numpy_step(on_host, monkeypatch):
    """The step a captured Tacotron 2 runs: lengths as device Tensors (nothing read back) -- the
    encoder's reverse direction over each sequence reversed within its length, masks made on
    the device -- equals the NumPy path's packed-sequence step with host lengths."""
    from train.tacotron2 import HParams, Tacotron2, make_optimizer, set_dropout
    from train.tacotron2.model import _ints_on, targets, train_step_device
    from tools import tacotron2_torch as ref_model
    install_cudnn(monkeypatch)
    monkeypatch.setattr(rnn_module.LSTM, "_one_direction_cudnn",
                        rnn_module.LSTM._one_direction_cells)
    hp = HParams.small()
    batch = ref_model.make_batch(hp, 3, [9, 7, 4], [12, 9, 11], seed=4)
    text, text_lengths, mels, gates, mel_lengths = batch
    results = []
    for device in ("cpu", 0):
        L.manual_seed(2)
        m = Tacotron2(hp).to(device)
        set_dropout(m, False)
        opt = make_optimizer(m)
        if device == "cpu":
            stats = train_step_device(m, opt, batch)
        else:
            mt, gt = targets(m, mels, gates)
            stats = train_step_device(m, opt, (
                _ints_on(text, device), L.Tensor(_ints_on(text_lengths, device)), mt.data,
                gt.data, L.Tensor(_ints_on(mel_lengths, device))))
            assert isinstance(stats, HostArray)
        results.append((np.array(stats, np.float64),
                        {n: np.array(p.grad.data, np.float64) for n, p in m.named_parameters()
                         if p.grad is not None}))
    (ref_stats, ref_grads), (stats, grads) = results
    np.testing.assert_allclose(stats, ref_stats, rtol=1e-4)
    _tacotron2_gradients_close(grads, ref_grads, 1e-4)

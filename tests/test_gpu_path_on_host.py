"""A DCGAN training step through the layers' GPU path, run on the host, equals the NumPy path's.

The models live on "device 0" as tests/host_kernels.py's host arrays: every op takes its GPU
branch -- channels-last routing, half-precision rules, the CuPy kernels (compiled for the
host), cudnnlite's boundary checks, descriptors and allocations for batch norm and activations,
whose cuDNN calls are answered on the host from the descriptors cuDNN reports, Adam's fused and
multi-tensor kernels, the device random generator's noise -- while convolutions, which take
their NumPy path on host arrays, are the reference's. The same step on the CPU path is the
reference: a wrong layout, dtype, descriptor or pointer in a GPU branch shows as a difference."""
import numpy as np
import pytest

import layers as L
from layers import backend, optim
from train import dcgan

from host_kernels import CXX, HostArray, install_cudnn

pytest.importorskip("cupy")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


def _models(device, dtype, memory_format, foreach):
    L.manual_seed(3)
    netG, netD = dcgan.Generator(nz=8, ngf=4, nc=1), dcgan.Discriminator(ndf=4, nc=1)
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


def _run(device, dtype, memory_format, foreach, steps=2):
    netG, netD, optG, optD = _models(device, dtype, memory_format, foreach)
    rng = np.random.default_rng(5)
    out = []
    for _ in range(steps):
        real = rng.uniform(-1, 1, (6, 1, 64, 64)).astype(np.float32)
        noise = rng.standard_normal((6, 8, 1, 1)).astype(np.float32)
        stats = dcgan.train_step_device(netG, netD, optG, optD, L.tensor(real, device=device),
                                        L.tensor(noise, device=device))
        out.append(np.asarray(stats, np.float64))
    weights = {f"{k}.{n}": np.array(t, np.float64)
               for k, m in (("G", netG), ("D", netD)) for n, t in m.state_dict().items()}
    grads = {f"{k}.{n}": np.array(p.grad.data, np.float64)        # of the last step
             for k, m in (("G", netG), ("D", netD)) for n, p in m.named_parameters()}
    return out, weights, grads, netD


@pytest.mark.parametrize("dtype,memory_format,foreach,tol", [
    ("float32", "contiguous", False, 1e-4),
    ("float32", "contiguous", True, 1e-4),
    ("float32", "channels_last", False, 1e-4),
    ("float32", "channels_last", True, 1e-4),
    # bfloat16, one step: the paths' gradients agree to 1 % of each one's largest entry here;
    # a wrong layout or a lost term is of the order of the entries themselves
    ("bfloat16", "contiguous", False, 0.05),
    ("bfloat16", "channels_last", True, 0.05)])
def test_dcgan_steps_on_the_gpu_path_equal_the_numpy_path(on_host, monkeypatch, dtype,
                                                           memory_format, foreach, tol):
    """Statistics of each step, gradients of the last, and (float32) the weights after two
    Adam steps. bfloat16 takes one step, with lr 0, and its weights are not compared: Adam moves
    a weight whose gradient is near 0 by a full step either way, so two bfloat16 roundings of
    that gradient move the paths' weights apart; and in a DCGAN four channels wide, bfloat16
    amplifies roundings batch by batch -- on this test's second batch every bfloat16 path (GPU
    or NumPy, either layout) has gradient entries 30 % (of the largest) away from float64's,
    and 13 % from each other -- so only the first batch gives the paths a tight check."""
    install_cudnn(monkeypatch)
    steps = 2 if dtype == "float32" else 1
    ref_stats, ref_weights, ref_grads, _ = _run("cpu", dtype, memory_format, foreach, steps)
    stats, weights, grads, netD = _run(0, dtype, memory_format, foreach, steps)
    assert isinstance(next(netD.parameters()).data, HostArray)        # the GPU branches ran
    for a, b in zip(stats, ref_stats):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    compared = [(grads, ref_grads)] + ([(weights, ref_weights)] if dtype == "float32" else [])
    for ours, ref in compared:
        for k in ref:
            scale = max(np.abs(ref[k]).max(), 1e-6)
            np.testing.assert_allclose(ours[k], ref[k], rtol=0, atol=tol * scale, err_msg=k)


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
    for k in ref:
        scale = max(np.abs(ref[k]).max(), 1e-6)
        np.testing.assert_allclose(ours[k], ref[k], rtol=0, atol=tol * scale, err_msg=k)

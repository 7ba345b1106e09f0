"""DCGAN against pytorch/examples: state_dict interop, step equivalence (CPU in CI, CUDA on the
GPU machine), data loading and the CLI's files. Bad input to the CLI: test_cli.py; exact resume:
test_resume.py; non-finite steps: test_finite.py."""
import gzip
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import layers as L
from train import data, dcgan
from reference import rel_err
from tools import dcgan_torch as ref

LR = 2e-4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_state_dict_keys_and_shapes_are_pytorch_examples():
    for ours, theirs in ((dcgan.Generator(), ref.Generator()),
                         (dcgan.Discriminator(), ref.Discriminator())):
        sd, tsd = ours.state_dict(), theirs.state_dict()
        assert list(sd) == list(tsd)
        for k in tsd:
            assert sd[k].shape == tuple(tsd[k].shape) and sd[k].dtype == tsd[k].numpy().dtype, k


def test_weights_init_distribution():
    L.manual_seed(0)
    g = dcgan.Generator(ngf=16)
    w = g.main[0].weight.numpy()
    assert abs(w.std() - 0.02) < 0.002 and abs(w.mean()) < 0.002
    bn = g.main[1].weight.numpy()
    assert abs(bn.mean() - 1) < 0.01 and not g.main[1].bias.numpy().any()


def _pair(nz, ngf, ndf, device, dtype):
    torch.manual_seed(0)
    tG, tD = ref.Generator(nz, ngf), ref.Discriminator(ndf)
    tG.apply(ref.weights_init), tD.apply(ref.weights_init)
    G, D = dcgan.Generator(nz, ngf), dcgan.Discriminator(ndf)
    G.load_state_dict(tG.state_dict()), D.load_state_dict(tD.state_dict())
    tdev = "cpu" if device == "cpu" else f"cuda:{device}"
    tdtype = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    tG.to(tdev, tdtype), tD.to(tdev, tdtype)
    G.to(device).to_dtype(dtype), D.to(device).to_dtype(dtype)
    topt = (torch.optim.Adam(tG.parameters(), lr=2e-4, betas=(0.5, 0.999)),
            torch.optim.Adam(tD.parameters(), lr=2e-4, betas=(0.5, 0.999)))
    return (G, D, *dcgan.make_optimizers(G, D)), (tG, tD, *topt), tdev


def _grads_at_step(opt):
    """{parameter: a copy of its gradient} as torch optimizer `opt` last stepped with it (its
    step() wrapped to keep them)."""
    kept, step = {}, opt.step

    def keep_and_step(*args, **kwargs):
        kept.update((q, q.grad.detach().clone()) for g in opt.param_groups for q in g["params"])
        return step(*args, **kwargs)
    opt.step = keep_and_step
    return kept


def _equivalence(device, dtype, steps, batch=8, nz=100, ngf=32, ndf=32, out_rtol=1e-3,
                 param_rtol=2e-3, param_atol=1e-12, grad_rtol=None, flipped=1e-2, strict=None,
                 freeze_d=True):
    """`steps` iterations of both. After each: losses and D outputs within out_rtol. After each of
    the first `strict` steps (all by default; while the two runs' weights have not drifted apart):
    every parameter's gradient within grad_rtol (norm-relative; where given: D's against torch's
    as D stepped with them, before G's pass added errG's, where our step freezes D in G's pass --
    freeze_d, train_step's default), and every parameter's
    update
    (after - before) equal to torch's within 1e-3 relative except on at most a `flipped` fraction
    of its elements (at least 4 where any may flip) (Adam moves a weight by about lr * sign(g), and a gradient below the dtype's
    rounding noise may take either sign). At the end, every parameter and buffer within
    param_rtol (+ param_atol)."""
    (G, D, oG, oD), (tG, tD, toG, toD), tdev = _pair(nz, ngf, ndf, device, dtype)
    pairs = [(p, q) for ours, theirs in ((G, tG), (D, tD))
             for (_, p), q in zip(ours.named_parameters(), theirs.parameters())]
    at_d_step = _grads_at_step(toD)           # torch's D gradients as D steps with them
    rng = np.random.default_rng(1)
    for i in range(steps):
        before = [(p.numpy().copy(), q.detach().cpu().numpy().copy()) for p, q in pairs]
        real = rng.uniform(-1, 1, (batch, 1, 64, 64)).astype(dtype)
        noise = rng.standard_normal((batch, nz, 1, 1)).astype(dtype)
        r = dcgan.train_step(G, D, oG, oD, L.tensor(real, device=device),
                             L.tensor(noise, device=device), freeze_d=freeze_d)
        tr = ref.train_step(tG, tD, toG, toD, torch.from_numpy(real).to(tdev),
                            torch.from_numpy(noise).to(tdev))
        for k in tr:
            assert abs(r[k] - tr[k]) <= out_rtol * abs(tr[k]), (k, r[k], tr[k])
        for (p, q), (p0, q0) in zip(pairs, before if strict is None or i < strict else []):
            if grad_rtol is not None:
                theirs = at_d_step.get(q, q.grad) if freeze_d else q.grad
                assert rel_err(p.grad.numpy(), theirs.cpu().numpy()) < grad_rtol
            step, tstep = p.numpy() - p0, q.detach().cpu().numpy() - q0
            off = np.abs(step - tstep) > 1e-3 * np.abs(tstep) + 1e-12
            assert off.sum() <= max(flipped * off.size, 4 if flipped else 0), (p.shape, off.sum())
    for ours, theirs in ((G, tG), (D, tD)):
        sd = ours.state_dict()
        for k, v in theirs.state_dict().items():
            np.testing.assert_allclose(sd[k], v.cpu().numpy(), rtol=param_rtol, atol=param_atol,
                                       err_msg=k)


@pytest.mark.parametrize("freeze_d", [True, False])
def test_two_steps_match_pytorch_on_cpu_float64(freeze_d):
    """The algorithm, step for step: in float64 nothing is lost to rounding. With D frozen in
    G's pass (train_step's default) every weight and statistic is still pytorch/examples', and
    D's gradients are the ones D stepped with; without, D's gradients are torch's after the
    whole iteration (errG's added)."""
    _equivalence("cpu", np.float64, steps=2, out_rtol=1e-9, param_rtol=1e-7, grad_rtol=1e-9,
                 flipped=0, freeze_d=freeze_d)


def test_two_steps_match_pytorch_on_cpu_float32():
    """In float32 the gradients agree to ~1e-6 (summation order), but Adam's first step moves
    every weight by about lr * sign(g): elements whose gradient is below float32's rounding noise
    (~1e-7 here) go either way, and the second step's moments inherit that. So the outputs meet
    the 1e-3 bar after one step and agree to a few 1e-3 after two; each element agrees to 2e-3
    or, where a sign went the other way, to within what Adam can move it (about 2 * lr a step;
    63 of the first layer's 409600 weights, here). The generator's gradients already come through
    the updated discriminator, so they differ by ~1e-2, and by the second step all do. So the
    updates are checked on the first step, where such flips stay rare (the `flipped` bound): a
    wrong sign in any gradient or update flips every element of that update and cannot hide
    there. The float64 test above is the strict one (gradients to 1e-9, no flip at all)."""
    _equivalence("cpu", np.float32, steps=1, param_atol=2 * LR)
    _equivalence("cpu", np.float32, steps=2, out_rtol=5e-3, param_atol=5 * LR, strict=1)


def test_the_torch_references_frozen_d_step_is_pytorch_examples_step():
    """tools.bench_dcgan's like-for-like PyTorch row (netD.requires_grad_(False) in G's pass)
    trains the same weights as pytorch/examples' loop; only D's dropped gradients differ: they
    stay the ones D stepped with."""
    runs = []
    for freeze_d in (False, True):
        (_, _, _, _), (tG, tD, toG, toD), _ = _pair(100, 16, 16, "cpu", np.float64)
        at_d_step = _grads_at_step(toD)
        rng = np.random.default_rng(1)
        for _ in range(2):
            real = torch.from_numpy(rng.uniform(-1, 1, (4, 1, 64, 64)))
            noise = torch.from_numpy(rng.standard_normal((4, 100, 1, 1)))
            stats = ref.train_step_tensors(tG, tD, toG, toD, real, noise, freeze_d=freeze_d)
        runs.append(([t.detach().clone() for m in (tG, tD) for t in m.state_dict().values()],
                     stats, [p.requires_grad for p in tD.parameters()]))
        unchanged = [torch.equal(p.grad, at_d_step[p]) for p in tD.parameters()]
        assert all(unchanged) if freeze_d else not any(unchanged)
    (w0, s0, _), (w1, s1, trainable) = runs
    assert all(trainable)                  # D trainable again after G's pass
    torch.testing.assert_close(s1, s0, rtol=1e-12, atol=0)
    for a, b in zip(w0, w1):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_steps_match_pytorch_cuda(dtype):
    from cudnnlite import conv
    torch.backends.cudnn.allow_tf32 = False
    try:
        with conv.using(allow_tf32=False):
            if dtype == np.float64:
                _equivalence(0, dtype, steps=2, batch=32, ngf=64, ndf=64, out_rtol=1e-9,
                             param_rtol=1e-7, grad_rtol=1e-9, flipped=0)
            else:
                _equivalence(0, dtype, steps=1, batch=32, ngf=64, ndf=64, param_atol=2 * LR)
                _equivalence(0, dtype, steps=2, batch=32, ngf=64, ndf=64, out_rtol=5e-3,
                             param_atol=5 * LR, strict=1)
    finally:
        torch.backends.cudnn.allow_tf32 = True


# ---- data -------------------------------------------------------------------------------------

def write_idx(path, images):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(b"\0\0\x08\x03" + struct.pack(">III", *images.shape) + images.tobytes())


@pytest.mark.parametrize("layout", ["plain", "raw", "MNIST/raw"])
@pytest.mark.parametrize("ext", ["", ".gz"])
def test_mnist_idx_layouts(tmp_path, layout, ext):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    folder = tmp_path if layout == "plain" else tmp_path / layout
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(str(folder / f"t10k-images-idx3-ubyte{ext}"), images)
    np.testing.assert_array_equal(data.load_mnist(str(tmp_path)), images)


def test_keras_npz(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (4, 28, 28), dtype=np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=np.zeros(4), x_test=x, y_test=np.zeros(4))
    np.testing.assert_array_equal(data.load_mnist(str(tmp_path)), x)


def test_malformed_and_missing_data_are_clear_errors(tmp_path):
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"\0\0\x08\x03" + struct.pack(">III", 9, 28, 28))
    with pytest.raises(data.DatasetError, match=r"header says shape \(9, 28, 28\)"):
        data.load_mnist(str(tmp_path))
    with pytest.raises(data.DatasetError, match="is not a folder"):
        data.load_mnist(str(tmp_path / "nope"))
    with pytest.raises(data.DatasetError, match="no MNIST found"):
        data.load_mnist(str(tmp_path / ".."))


def test_resize_matches_torchvision_style_scaling():
    img = np.zeros((1, 28, 28), np.uint8)
    img[0, 10:18, 10:18] = 255
    out = data.resize(img, 64, 1)
    assert out.shape == (1, 64, 64, 1)
    x = data.to_float(out)
    assert x.shape == (1, 1, 64, 64) and x.min() == -1.0 and x.max() == 1.0


@pytest.mark.parametrize("h,w", [(64, 67), (67, 64), (30, 49), (64, 131), (100, 77),
                                 (65, 65)])
def test_resize_and_crop_are_torchvisions(h, w):
    """torchvision's Resize(64) + CenterCrop(64) on PIL images, by its rules (torchvision is not
    installed): the longer side int(64 * long / short), truncated; the crop's offset
    int(round((side - 64) / 2.0)). A pixel off was the failure (round, and a floor offset)."""
    from PIL import Image
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    nh, nw = (64, int(64 * w / h)) if h <= w else (int(64 * h / w), 64)
    im = Image.fromarray(img).resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - 64) / 2.0)), int(round((nw - 64) / 2.0))
    want = np.asarray(im.crop((left, top, left + 64, top + 64)))
    np.testing.assert_array_equal(data.resize([img], 64, 3)[0], want)
    ramp = np.tile(np.arange(67, dtype=np.uint8) * 3, (64, 1))   # 64 x 67: a crop 2 columns in
    np.testing.assert_array_equal(data.resize([ramp], 64, 1)[0, 0, :3, 0], [6, 9, 12])


def test_real_mnist_if_present():
    root = os.path.join(ROOT, "..", "shared", "data", "mnist")
    if not os.path.isdir(root):
        pytest.skip("../shared/data/mnist not present")
    images = data.load_mnist(root)
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert 30 < images.mean() < 40                   # MNIST's mean intensity is about 33


# ---- the CLI ----------------------------------------------------------------------------------

def _cli(*args, cwd=ROOT):
    r = subprocess.run([sys.executable, "-m", "train.dcgan", "--device", "cpu", "--ngf", "8",
                        "--ndf", "8", "--batch-size", "6", *args], cwd=cwd, capture_output=True,
                       text=True, timeout=600)
    return r


def test_cli_dry_run_writes_its_files(tmp_path):
    r = _cli("--dry-run", "--outf", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for name in ("real_samples.png", "fake_samples_epoch_001.png", "loss_curve.png", "losses.csv",
                 "checkpoint.npz", "netG_epoch_001.npz", "netD_epoch_001.npz"):
        assert (tmp_path / name).stat().st_size > 0, name
    text = (tmp_path / "losses.csv").read_bytes().decode()
    assert "\r" not in text                          # one newline a row, as any CSV reader takes
    rows = text.splitlines()
    assert rows[0] == "step,epoch,errD,errG,D_x,D_G_z1,D_G_z2,img_per_s" and len(rows) == 2
    assert "stopped after step 1 (--dry-run); python -m train.dcgan --device cpu " in r.stdout
    assert f"--resume {tmp_path / 'checkpoint.npz'} continues the run" in r.stdout
    from PIL import Image
    assert Image.open(tmp_path / "fake_samples_epoch_001.png").size == (530, 530)  # 8x8 of 64 + 2
    # the saved generator loads into pytorch/examples' netG
    tG = ref.Generator(ngf=8)
    tG.load_state_dict({k: torch.from_numpy(v) for k, v in L.load(tmp_path / "netG_epoch_001.npz").items()})


def test_labels_are_kept_per_array_type(monkeypatch):
    """train.dcgan's cached label vectors are keyed on the array type as well as the device id:
    the tests' host stand-ins for device arrays share device 0 with a real GPU's arrays, and a
    label made for one must never be handed to the other (a host pointer in a CUDA kernel is an
    illegal address)."""
    from fake_device import FakeDeviceArray
    from host_kernels import host
    from train import dcgan

    class Module:                   # the cupy module's `full`, making host arrays
        @staticmethod
        def full(shape, value, dtype):
            return host(np.full(shape, value, dtype))
    monkeypatch.setattr(L.backend, "_cupy", Module)
    monkeypatch.setattr(dcgan, "_labels", {})
    on_host = dcgan._label(1.0, 4, L.Tensor(host(np.zeros((4, 1, 8, 8), np.float32))))
    on_gpu = dcgan._label(1.0, 4, L.Tensor(FakeDeviceArray((4, 1, 8, 8))))
    assert on_host is not on_gpu
    assert dcgan._label(1.0, 4, L.Tensor(host(np.ones((4, 1, 8, 8), np.float32)))) is on_host

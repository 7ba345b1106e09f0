"""DCGAN (pytorch/examples' model and training loop) on the layers engine.

    python -m train.dcgan --device 0                       # GPU, scikit-learn's digits
    python -m train.dcgan --device 0 --dataset mnist --dataroot ../shared/data/mnist
    python -m train.dcgan --device cpu --dry-run           # NumPy path, one batch

Generator: z (N, nz, 1, 1) -> ConvT(4,1,0) 4x4 -> 4 x [ConvT(4,2,1) + BN + ReLU] ... -> Tanh
(N, nc, 64, 64). Discriminator: Conv(4,2,1) + LeakyReLU(0.2), 3 x [Conv(4,2,1) + BN +
LeakyReLU(0.2)], Conv(4,1,0) + Sigmoid -> (N,). state_dict keys and shapes are those of
pytorch/examples' netG / netD, so weights load both ways.
"""
import contextlib
import os
import sys
import time

import numpy as np

import layers as L
from layers import F, nn
from layers.finite import FiniteCheck

from . import cli, data
from .common import (PRECISIONS, CheckpointError, DeviceStats, LossLog, Progress,
                     checkpoint_meta, first_non_finite, load_checkpoint, load_weights,
                     override_hyper, rate_cell, resume_point, save_checkpoint, save_image_grid,
                     set_precision, stopped_note)


class Generator(nn.Module):
    def __init__(self, nz=100, ngf=64, nc=1):
        super().__init__()
        self.nz = nz
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )
        self.apply(weights_init)

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf=64, nc=1):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )
        self.apply(weights_init)

    def forward(self, x):
        return self.main(x).reshape(-1)


def weights_init(m):
    """pytorch/examples' init: N(0, 0.02) conv weights, N(1, 0.02) / 0 batch norm."""
    name = type(m).__name__
    if "Conv" in name:
        L.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in name:
        L.init.normal_(m.weight, 1.0, 0.02)
        L.init.zeros_(m.bias)


def make_optimizers(netG, netD, lr=2e-4, beta1=0.5, master_weights=False):
    """pytorch/examples' Adam for each model; master_weights for bfloat16 models (float32
    masters of their weights: see layers.optim.Optimizer)."""
    return (L.optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999),
                         master_weights=master_weights),
            L.optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999),
                         master_weights=master_weights))


_labels = {}


def _label(value, n, like):
    """A constant label vector, made once per (value, size, device, dtype); float32 for a
    bfloat16 model, so its losses are float32 (the loss promotes D's bfloat16 output, as torch
    would) and are logged to float32's precision."""
    dtype = L.backend.accumulation_dtype(like.dtype)
    # (keyed on the array type too: a device array and a stand-in for one -- the tests' host
    # arrays -- share device ids, and neither may be handed the other's memory)
    key = (value, n, like.device, dtype, type(like.data))
    t = _labels.get(key)
    if t is None:
        xp = np if like.device == "cpu" else L.backend.cupy()
        t = _labels[key] = L.Tensor(xp.full((n,), value, dtype=dtype))
    return t


STATS = ("errD", "errG", "D_x", "D_G_z1", "D_G_z2")


def train_step(netG, netD, optG, optD, real, noise, finite=None, freeze_d=True):
    """One pytorch/examples iteration: D on real (label 1), D on G(noise).detach() (label 0),
    D step; then G through D (label 1), G step. real (N, nc, H, W), noise (N, nz, 1, 1): NumPy
    or CuPy arrays (or Tensors) on the models' device. Returns Python floats (one host sync).
    freeze_d: see train_step_device."""
    return stats_dict(train_step_device(netG, netD, optG, optD, real, noise, finite, freeze_d))


def stats_dict(stats):
    """The five statistics of a step, from the device array train_step_device returns."""
    values = stats.get() if L.backend.is_gpu(stats) else stats
    return dict(zip(STATS, (float(v) for v in values)))


def train_step_device(netG, netD, optG, optD, real, noise, finite=None, freeze_d=True):
    """train_step without the host sync: returns errD, errG, D(x), D(G(z)) before and after the
    D step as one array on the device (what a captured CUDA graph can return). With a
    layers.finite.FiniteCheck of netG and netD as `finite`, the step also records on the device
    which layer output or gradient first went non-finite.

    freeze_d (the default): D's parameters take no gradient in G's pass. pytorch/examples'
    errG.backward() also computes D's weight gradients there, which nothing reads -- D has
    stepped, and the next iteration's netD.zero_grad() drops them -- so skipping them (D's five
    filter gradients, and the additions of three of them into .grad) changes no weight, no
    statistic and no gradient of G: it leaves D's .grad holding errD's gradients, the ones D
    stepped with. freeze_d=False: pytorch/examples' loop exactly, D's .grad then errD's plus
    errG's."""
    weight = next(netD.parameters())          # the models' dtype: float32, or bfloat16 (bf16)
    device = weight.device
    real, noise = (_input(a, device, weight.dtype) for a in (real, noise))
    n = real.shape[0]
    ones, zeros = _label(1.0, n, real), _label(0.0, n, real)

    with finite if finite is not None else contextlib.nullcontext():
        netD.zero_grad()
        out_real = netD(real)
        errD_real = F.binary_cross_entropy(out_real, ones)
        errD_real.backward()
        fake = netG(noise)
        out_fake = netD(fake.detach())
        errD_fake = F.binary_cross_entropy(out_fake, zeros)
        errD_fake.backward()
        _update(optD, finite)

        netG.zero_grad()
        with _frozen(netD) if freeze_d else contextlib.nullcontext():
            out_g = netD(fake)
            errG = F.binary_cross_entropy(out_g, ones)
            errG.backward()
        _update(optG, finite)

    xp = np if device == "cpu" else L.backend.cupy()
    A = L.backend.accumulation_dtype(errG.dtype)       # bfloat16 results: logged in float32
    f = lambda a: a.astype(A, copy=False)      # noqa: E731
    return xp.stack([f(errD_real.data) + f(errD_fake.data), f(errG.data),
                     f(out_real.data).mean(), f(out_fake.data).mean(), f(out_g.data).mean()])


@contextlib.contextmanager
def _frozen(module):
    """module's trainable parameters take no gradient inside the block (as
    module.requires_grad_(False)); each is trainable again after it, whatever the block raised."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad = False
    try:
        yield
    finally:
        for p in params:
            p.requires_grad = True


def _input(a, device, dtype):
    """An input array (or Tensor) as a Tensor on `device` in the models' dtype (no graph: the
    data loader's float32 images and the noise are rounded to bfloat16 for a bf16 model)."""
    t = a if isinstance(a, L.Tensor) else L.as_tensor(a, device=device)
    return t if t.dtype == dtype else L.Tensor(t.data.astype(dtype))


def _update(opt, finite):
    """opt.step(), with the gradients it applies checked first (the step would spread a
    non-finite gradient into every weight it touches)."""
    if finite is not None:
        finite.gradients(opt)
    opt.step()


def make_step(netG, netD, optG, optD, nz, device, rng, cuda_graph=True, finite=None,
              freeze_d=True):
    """real -> stats dict (one host sync); see make_device_step."""
    step = make_device_step(netG, netD, optG, optD, nz, device, rng, cuda_graph, finite,
                            freeze_d)
    return lambda real: stats_dict(step(real))


def make_device_step(netG, netD, optG, optD, nz, device, rng, cuda_graph=True, finite=None,
                     freeze_d=True):
    """real -> the STATS as one array on the models' device (no host sync). On a GPU with
    cuda_graph, the noise draw and the whole iteration are one captured CUDA graph (after one
    eager warm-up call per batch shape); its output buffer is rewritten by the next call.
    freeze_d: see train_step_device."""
    if device == "cpu" or not cuda_graph:
        return lambda real: train_step_device(netG, netD, optG, optD, real,
                                              sample_noise(real.shape[0], nz, device, rng),
                                              finite, freeze_d)

    def device_step(real):
        noise = sample_noise(real.shape[0], nz, device, rng)
        return train_step_device(netG, netD, optG, optD, real, noise, finite, freeze_d)
    return L.graph.CapturedStep(device_step, modules=(netG, netD), optimizers=(optG, optD))


def sample_noise(n, nz, device, rng):
    """N(0, 1) noise (n, nz, 1, 1): the host generator on the CPU, the device generator on a GPU."""
    if device == "cpu":
        return L.Tensor(rng.standard_normal((n, nz, 1, 1)).astype(np.float32))
    return L.Tensor(L.random.device_generator().normal((n, nz, 1, 1)))


ARCH = {"nz": 100, "ngf": 64, "ndf": 64, "nc": 1}     # the model flags and their defaults


def parse_args(argv=None):
    """The flags, each checked for what it can be on its own (one-line errors, exit 2)."""
    p = cli.ArgumentParser(prog="python -m train.dcgan", description=__doc__.splitlines()[0])
    p.add_argument("--device", type=cli.device, default=0,
                   help="GPU index, or 'cpu' for the NumPy path [0]")
    p.add_argument("--dataset", default=None, choices=["mnist", "digits", "folder", "fake"],
                   help="[digits: scikit-learn's bundled handwritten digits, works offline; a "
                        "resumed run keeps its checkpoint's]")
    p.add_argument("--dataroot", default=None,
                   help="folder of the mnist / folder dataset [a resumed run: its checkpoint's]")
    p.add_argument("--batch-size", type=cli.positive_int, default=None,
                   help="[128; a resumed run keeps its checkpoint's]")
    p.add_argument("--image-size", type=cli.positive_int, default=64, help="[64]")
    p.add_argument("--nc", type=cli.channels, default=None,
                   help="image channels [1; a resumed run keeps its checkpoint's, as for the three "
                        "below]")
    p.add_argument("--nz", type=cli.positive_int, default=None,
                   help="size of the latent vector [100]")
    p.add_argument("--ngf", type=cli.positive_int, default=None, help="generator width [64]")
    p.add_argument("--ndf", type=cli.positive_int, default=None, help="discriminator width [64]")
    p.add_argument("--epochs", type=cli.positive_int, default=None,
                   help="[25; a resumed run: its checkpoint's, unless given (to extend it)]")
    p.add_argument("--lr", type=cli.positive_float, default=None,
                   help="Adam's learning rate [2e-4; given with --resume, it replaces the "
                        "checkpoint's]")
    p.add_argument("--beta1", type=float, default=None,
                   help="Adam's beta1 [0.5; as --lr with --resume]")
    p.add_argument("--netG", default="", help="generator weights (.npz) to start from")
    p.add_argument("--netD", default="", help="discriminator weights (.npz) to start from")
    p.add_argument("--resume", default="", help="a checkpoint.npz to continue exactly")
    p.add_argument("--outf", default=None,
                   help="folder for images, logs, checkpoints [out/dcgan; a resumed run: its "
                        "checkpoint's folder]")
    p.add_argument("--seed", type=cli.seed, default=None,
                   help="[0; a resumed run keeps its checkpoint's]")
    p.add_argument("--dry-run", action="store_true", help="one batch, then stop")
    p.add_argument("--max-steps", type=cli.nonnegative_int, default=0,
                   help="stop after this many steps [0: off]")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="fp32, or bf16: bfloat16 weights and activations (batch norm's "
                        "parameters and netD's sigmoid float32) with float32 master weights in "
                        "Adam [fp32; a resumed run keeps its checkpoint's]")
    p.add_argument("--memory-format", choices=("contiguous", "channels_last"), default=None,
                   help="channels_last: the models' 4-d weights and activations stored (N, H, W, "
                        "C), PyTorch's channels_last, for cuDNN's NHWC kernels [channels_last on "
                        "a GPU, contiguous on the CPU; a resumed run keeps its checkpoint's]")
    p.add_argument("--algo", choices=("benchmark", "heuristic"), default=None,
                   help="how cuDNN's convolution algorithms (or the graph API's engines) are "
                        "chosen on a GPU: benchmark times the candidates once per problem and "
                        "keeps the fastest (pytorch/examples' DCGAN sets cudnn.benchmark = "
                        "True), heuristic takes cuDNN's first suggestion [benchmark; a GPU flag, "
                        "an error with --device cpu]")
    p.add_argument("--conv-api", choices=("graph", "legacy"), default=None,
                   help="cuDNN's convolution entry points on a GPU: the backend (graph) API's "
                        "cached plans (26-33 us of host time a call in an H100 step) or the "
                        "legacy cudnnConvolution* calls (100-150 us) [graph; a GPU flag, an "
                        "error with --device cpu]")
    p.add_argument("--no-cuda-graph", action="store_true",
                   help="run each GPU step eagerly instead of replaying a captured CUDA graph")
    p.add_argument("--log-every", type=cli.positive_int, default=10,
                   help="steps between reading the losses back from the GPU (one transfer, no "
                        "per-step wait; every step is still logged) [10]")
    args = p.parse_args(argv)
    if args.image_size != 64:
        cli.fail(f"--image-size {args.image_size}: expected 64 (the DCGAN architecture is built "
                 f"for 64x64 images)")
    if args.beta1 is not None and not 0 <= args.beta1 < 1:
        cli.fail(f"--beta1 {args.beta1}: expected a number in [0, 1)")
    if args.resume and (args.netG or args.netD):
        cli.fail(f"--resume {args.resume}: restores both models' weights; expected no "
                 f"--netG / --netD with it")
    if args.algo is not None and args.device == "cpu":
        cli.fail(f"--algo {args.algo}: chooses cuDNN's convolution algorithms, which the NumPy "
                 f"path does not use; expected a GPU --device")
    if args.conv_api is not None and args.device == "cpu":
        cli.fail(f"--conv-api {args.conv_api}: chooses cuDNN's convolution entry points, which "
                 f"the NumPy path does not use; expected a GPU --device")
    if args.dataroot and args.dataset not in (None, "mnist", "folder"):
        cli.fail(f"--dataroot {args.dataroot}: --dataset {args.dataset} reads no folder; "
                 f"expected --dataset mnist or folder with it")
    return args


def _load(arg, path, load, expected):
    """load(), with a CheckpointError turned into the one-line error for `arg`."""
    try:
        return load()
    except CheckpointError as e:
        cli.fail(f"{arg} {path}: {e}; expected {expected}")


def main(argv=None):
    """Check and load everything (device, dataset, weights, checkpoint) before writing anything
    in --outf; then train, and stop with status 1 at a step whose statistics are not finite."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    args.outf = cli.run_outf(args.outf, args.resume, "out/dcgan")
    cli.check_outf(args.outf)
    cli.new_run_outf(args.outf, args.resume)
    resume_meta = _load("--resume", args.resume,
                        lambda: checkpoint_meta(args.resume, ("netG", "netD")),
                        "the checkpoint.npz of a train.dcgan run") if args.resume else None
    # the data a checkpoint's epoch order is over (a checkpoint from before they were kept:
    # the flags, as then)
    args.dataset = cli.saved_setting("--dataset", "--dataset", "dataset", args.dataset, "digits",
                                     resume_meta, args.resume)
    given_dataroot = args.dataroot
    args.dataroot = cli.saved_dataroot(args.dataroot, resume_meta)
    args.epochs = cli.epochs(args.epochs, 25, resume_meta)
    args.seed = cli.saved_setting("--seed", "--seed", "seed", args.seed, 0, resume_meta,
                                  args.resume)      # (the fake dataset, the sample grid's noise)
    if args.dataroot and args.dataset not in ("mnist", "folder"):
        cli.fail(f"--dataroot {args.dataroot}: --dataset {args.dataset} reads no folder; "
                 f"expected --dataset mnist or folder with it")
    args.batch_size = cli.batch_size(args.batch_size, 128, resume_meta, args.resume)
    args.precision = cli.precision(args.precision, resume_meta, args.resume)
    for flag, default in ARCH.items():       # the architecture a checkpoint was trained with
        setattr(args, flag, cli.saved_setting(f"--{flag}", f"--{flag}", flag,
                                              getattr(args, flag), default, resume_meta,
                                              args.resume))
    # channels-last on a GPU: cuDNN's NHWC kernels, the same arithmetic (H100, TF32: captured
    # step 5.32 vs 6.29 ms, docs/performance.md); the NumPy path gains nothing from it
    args.memory_format = cli.memory_format(
        args.memory_format, resume_meta, args.resume,
        default="contiguous" if args.device == "cpu" else "channels_last")
    device = cli.use_device(args.device)
    if device != "cpu":
        from cudnnlite import conv
        # the graph API: eager DCGAN step on an H100 17.8 against 25.1 ms with the legacy calls
        # (the same GPU time with the heuristics' plans); benchmarked plans took the captured
        # step 3.99 -> 3.72-3.76 ms (docs/performance.md)
        conv.configure(algo_mode=args.algo or "benchmark", api=args.conv_api or "graph")
    L.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    try:
        images = data.load(args.dataset, args.dataroot, args.image_size, args.nc, args.seed)
    except data.DatasetError as e:
        if args.dataroot and given_dataroot is None:          # (the checkpoint named it)
            cli.fail(f"{e} (the --dataroot of the checkpoint {args.resume}; expected "
                     f"--dataroot where that data is now)")
        cli.fail(e)
    batches = data.Batches(images, args.batch_size, rng, device)

    netG = Generator(args.nz, args.ngf, args.nc)
    netD = Discriminator(args.ndf, args.nc)
    arch = f"--nz {args.nz} --ngf {args.ngf} --ndf {args.ndf} --nc {args.nc}"
    for arg, net, path in (("--netG", netG, args.netG), ("--netD", netD, args.netD)):
        if path:
            _load(arg, path, lambda: load_weights(net, path),
                  f"weights for {arch}, such as the {arg[2:]}_epoch_NNN.npz train.dcgan writes")
    netG.to(device), netD.to(device)
    dtype = set_precision((netG, netD), args.precision)
    netG.to(memory_format=args.memory_format), netD.to(memory_format=args.memory_format)
    optG, optD = make_optimizers(netG, netD, args.lr or 2e-4,
                                 0.5 if args.beta1 is None else args.beta1,
                                 master_weights=args.precision != "fp32")
    fixed_noise = L.Tensor(np.random.default_rng(args.seed + 1).standard_normal(
        (64, args.nz, 1, 1)).astype(dtype)).to(device)

    modules, optimizers = {"netG": netG, "netD": netD}, {"optG": optG, "optD": optD}
    start_epoch, position, step = 0, 0, 0
    carried = np.zeros(len(STATS)), 0      # the epoch's loss sums and rows before a resume
    if args.resume:
        meta, arrays = _load("--resume", args.resume,
                             lambda: load_checkpoint(args.resume, modules, optimizers, rng, device),
                             f"the checkpoint.npz of a train.dcgan run with {arch}")
        start_epoch, position, step, order = _load(
            "--resume", args.resume, lambda: resume_point(meta, arrays, len(images), "images"),
            f"the checkpoint.npz of a train.dcgan run with {arch} on this dataset (--dataset "
            f"{args.dataset}{' --dataroot ' + args.dataroot if args.dataroot else ''})")
        cli.check_max_steps(args.max_steps, step, args.resume)
        if position and "epoch_rows" in meta:    # (mid-epoch: its summary covers it all)
            carried = np.array(meta["epoch_sums"], np.float64), meta["epoch_rows"]
        if start_epoch >= args.epochs:
            cli.fail(f"--epochs {args.epochs}: the checkpoint {args.resume} has finished "
                     f"{start_epoch} epochs; expected more epochs than that")
        print(f"resumed from {args.resume}: epoch {start_epoch + 1}, image {position} of its "
              f"order, step {step}")
        override_hyper(optimizers, args.resume, lr=args.lr, beta1=args.beta1)
    else:
        order = batches.order()
    cli.make_outf(args.outf)
    try:
        log = LossLog(os.path.join(args.outf, "losses.csv"),
                      ["step", "epoch", "errD", "errG", "D_x", "D_G_z1", "D_G_z2", "img_per_s"],
                      resume_step=step if args.resume else None)
    except ValueError as e:
        cli.fail(f"--resume {args.resume}: {e}")
    save_image_grid(data.to_float(images[:64]), os.path.join(args.outf, "real_samples.png"))
    print(f"{len(images)} images ({args.dataset}), {len(batches)} "
          f"batch{'es' if len(batches) != 1 else ''} of "
          f"{min(args.batch_size, len(images))} "
          f"per epoch, device {device}, precision {args.precision}, {args.memory_format}")

    finite = FiniteCheck(modules, keep_first=True)
    run_step = make_device_step(netG, netD, optG, optD, args.nz, device, rng,
                                cuda_graph=not args.no_cuda_graph, finite=finite)
    stats = DeviceStats(STATS, args.log_every, finite, start_step=step)
    ckpt = os.path.join(args.outf, "checkpoint.npz")

    def checkpoint(epoch, position, order, step, sums, count):
        """(epoch, position) is where to go on: image `position` of that epoch's `order`; sums
        and count, the epoch's loss sums and logged rows so far (its summary line after a
        resume covers the whole epoch). The log's rows are on disk first: a resume keeps those
        up to the checkpoint's step."""
        log.flush()
        save_checkpoint(ckpt, modules, optimizers,
                        {"epoch": epoch, "position": position, "step": step,
                         "epochs": args.epochs, "epoch_sums": [float(v) for v in sums],
                         "epoch_rows": count,
                         "batch_size": args.batch_size, "precision": args.precision,
                         **{flag: getattr(args, flag) for flag in ARCH},
                         "memory_format": args.memory_format, "dataset": args.dataset,
                         "seed": args.seed,
                         "dataroot": args.dataroot and os.path.abspath(args.dataroot)}, rng,
                        {"order": order})

    for epoch in range(start_epoch, args.epochs):
        # updated by hand, so it is still open for the last window's figures after the loop
        bar = Progress(len(batches), f"epoch {epoch + 1}/{args.epochs}",
                       initial=position // args.batch_size)
        sums, count = carried if position else (np.zeros(len(STATS)), 0)
        seen, t0, stop = 0, time.perf_counter(), False
        stats.restart_clock()

        def record(rows):
            """Log read-back rows; False (after saying where) when one is not finite."""
            nonlocal sums, count
            bad = first_non_finite(rows, STATS)
            for r in rows if bad is None else rows[:rows.index(bad[0])]:
                log.write(dict(r, epoch=epoch + 1, img_per_s=rate_cell(r["rate"])))
                sums += [r[k] for k in STATS]
                count += 1
            if bad is not None:
                row, k = bad
                first = stats.where(row["step"], "no layer output or gradient of netG / netD")
                print(f"error: step {row['step']}: {k} is {row[k]}; first non-finite: {first}; "
                      f"{stopped_note(ckpt)}", file=sys.stderr)
                log.flush()
                return False
            if rows:
                r = rows[-1]
                bar.set_postfix(Loss_D=f"{r['errD']:.3f}", Loss_G=f"{r['errG']:.3f}",
                                D_x=f"{r['D_x']:.3f}",
                                D_G_z=f"{r['D_G_z1']:.3f}/{r['D_G_z2']:.3f}",
                                img_s=f"{r['rate']:.0f}")
            return True

        with bar:
            for real in batches.epoch(order, position):
                with np.errstate(all="ignore"):      # non-finite values: `finite` says where
                    values = run_step(real)
                step += 1
                position += real.shape[0]
                seen += real.shape[0]
                bar.update(1)
                if not record(stats.add(step, values, real.shape[0])):
                    return 1
                if args.dry_run or (args.max_steps and step >= args.max_steps):
                    stop = True
                    break
            if not record(stats.flush()):
                return 1
        mean, elapsed = sums / max(count, 1), time.perf_counter() - t0
        print(f"[{epoch + 1}/{args.epochs}] epoch means: Loss_D {mean[0]:.4f} Loss_G {mean[1]:.4f} "
              f"D(x) {mean[2]:.4f} D(G(z)) {mean[3]:.4f}/{mean[4]:.4f} "
              f"{seen / elapsed:.0f} img/s")
        finished = position == len(images)
        if not finished:
            # before the samples below move batch norm's running statistics: an uninterrupted
            # run draws no samples here
            checkpoint(epoch, position, order, step, sums, count)
        with L.no_grad():
            fake = netG(fixed_noise)          # train mode, as pytorch/examples samples
        save_image_grid(fake.numpy().astype(np.float32),
                        os.path.join(args.outf, f"fake_samples_epoch_{epoch + 1:03d}.png"))
        log.plot(os.path.join(args.outf, "loss_curve.png"), ["errD", "errG"])
        L.save(netG.state_dict(), os.path.join(args.outf, f"netG_epoch_{epoch + 1:03d}.npz"))
        L.save(netD.state_dict(), os.path.join(args.outf, f"netD_epoch_{epoch + 1:03d}.npz"))
        if finished:
            order, position = batches.order(), 0
            checkpoint(epoch + 1, position, order, step, np.zeros(len(STATS)), 0)
        if stop:
            print(cli.stop_line("python -m train.dcgan", argv, ckpt, step,
                                "--dry-run" if args.dry_run else "--max-steps",
                                finished and epoch + 1 == args.epochs,
                                drop=("--netG", "--netD")))
            break
    log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The training steps the tools time and profile, set up in one place as train.dcgan sets them
up, so a benchmark, the profiler and the kernel table measure the same step."""


def dcgan(device, batch_size, precision="fp32", memory_format="contiguous"):
    """pytorch/examples' DCGAN (1 channel, 64x64, nz 100, ngf = ndf = 64) on `device`, seeded 0,
    in train.dcgan's --precision and --memory-format, with its Adam optimizers, a random real batch in [-1, 1) drawn
    on the device (an array) and train.dcgan's non-finite check:
    (netG, netD, optG, optD, real, finite)."""
    import layers as L
    from layers.finite import FiniteCheck
    from train import dcgan as job
    from train.common import set_precision
    L.manual_seed(0)
    G, D = job.Generator().to(device), job.Discriminator().to(device)
    set_precision((G, D), precision)
    G.to(memory_format=memory_format), D.to(memory_format=memory_format)
    oG, oD = job.make_optimizers(G, D, master_weights=precision != "fp32")
    real = L.random.device_generator().uniform((batch_size, 1, 64, 64)) * 2 - 1
    return G, D, oG, oD, real, FiniteCheck({"netG": G, "netD": D})

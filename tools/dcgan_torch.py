"""pytorch/examples' DCGAN (dcgan/main.py) in PyTorch: the reference the tests compare against and
the baseline tools/bench_dcgan.py times. Its netG / netD, weights_init and one iteration of its
training loop, verbatim in structure."""
import torch
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self, nz=100, ngf=64, nc=1):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh())

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf=64, nc=1):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid())

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


def train_step(netG, netD, optimizerG, optimizerD, real_cpu, noise):
    stats = train_step_tensors(netG, netD, optimizerG, optimizerD, real_cpu, noise)
    return dict(zip(("errD", "errG", "D_x", "D_G_z1", "D_G_z2"), stats.tolist()))


def train_step_tensors(netG, netD, optimizerG, optimizerD, real_cpu, noise, freeze_d=False):
    """pytorch/examples' iteration with no host sync (no .item()): the five statistics as one
    tensor on the device, so the whole step can be captured in a CUDA graph. freeze_d: netD's
    parameters take no gradient in G's pass (netD.requires_grad_(False) around it), as
    train.dcgan's step; the same weights, without D's discarded weight gradients."""
    criterion = nn.BCELoss()
    batch_size = real_cpu.size(0)
    netD.zero_grad()
    label = torch.full((batch_size,), 1.0, dtype=real_cpu.dtype, device=real_cpu.device)
    output = netD(real_cpu)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.detach().mean()
    fake = netG(noise)
    label.fill_(0.0)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.detach().mean()
    errD = errD_real.detach() + errD_fake.detach()
    optimizerD.step()
    netG.zero_grad()
    label.fill_(1.0)
    if freeze_d:
        netD.requires_grad_(False)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    if freeze_d:
        netD.requires_grad_(True)
    D_G_z2 = output.detach().mean()
    optimizerG.step()
    return torch.stack([errD, errG.detach(), D_x, D_G_z1, D_G_z2])

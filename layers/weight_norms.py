"""torch.nn.utils' weight_norm and spectral_norm: a layer's weight recomputed before each forward
from other parameters -- a direction and a length (weight normalisation: a vocoder's
convolutions), or divided by its largest singular value (spectral normalisation: a GAN's
discriminator). Both are torch's older form, a forward pre-hook, with its state_dict names
(`weight_g` / `weight_v`; `weight_orig`, `weight_u`, `weight_v`), so checkpoints written by
torch code that uses them load here and back.

    netD.main[2] = nn.utils.spectral_norm(nn.Conv2d(64, 128, 4, 2, 1))
    conv = nn.utils.weight_norm(nn.Conv1d(80, 512, 5, padding=2))

The weight is a plain attribute between forwards (the Tensor the hook made, with the graph back
to the parameters); .to() moves the parameters, and the next forward remakes it.
"""
from . import functional as F
from .creation import randn
from .module import Module, Parameter
from .tensor import no_grad

__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]


def _norm_except_dim(v, dim):
    """The 2-norm of v over every axis but `dim` (kept, size 1), or of all of v (dim -1); a 1-d
    v has no other axis: its elements' magnitudes (torch's)."""
    if dim == -1:
        return F.norm(v)
    axes = tuple(a for a in range(v.ndim) if a != dim)
    return F.norm(v, 2, axes, keepdim=True) if axes else F.absolute(v)


def weight_from(g, v, dim):
    """g * v / ||v||, the norm over every axis of v but `dim` (-1: over all of v)."""
    return v * (g / _norm_except_dim(v, dim))


def wrapped_dim(dim, weight, name, what):
    """weight_norm's dim as its norm takes it: None / -1 the whole tensor, other negative dims
    counted from the end (torch's); out of range refused."""
    if dim is None:
        return -1
    if dim != -1 and not -weight.ndim <= dim < weight.ndim:
        raise ValueError(f"{what}: dim {dim} is out of range for {name} of shape "
                         f"{tuple(weight.shape)} (None / -1 is the whole tensor, as torch's)")
    return dim + weight.ndim if dim < -1 else dim


def matrix(weight, dim):
    """weight as spectral norm's matrix (torch's): axis `dim` first, the rest flattened."""
    if dim != 0:
        weight = F.transpose(weight, (dim,) + tuple(a for a in range(weight.ndim) if a != dim))
    return F.reshape(weight, weight.shape[0], -1)


class WeightNorm:
    """The forward pre-hook of weight_norm: weight = g * v / ||v|| (the norm over every axis but
    `dim`; dim -1: over all of v)."""

    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute_weight(self, module):
        return weight_from(getattr(module, self.name + "_g"), getattr(module, self.name + "_v"),
                           self.dim)

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.weight_norm: `name` replaced by parameters name_g (its norm over every
    axis but `dim`, kept; dim None: one number) and name_v (its direction, the weight as it
    was), registered after the module's others, and recomputed from them before each forward.
    Returns the module."""
    _refuse_twice(module, WeightNorm, name, "weight_norm")
    weight = _parameter(module, name, "weight_norm")
    fn = WeightNorm(name, wrapped_dim(dim, weight, name, "weight_norm"))
    del module._parameters[name]
    with no_grad():
        module.register_parameter(name + "_g", Parameter(_norm_except_dim(weight, fn.dim)))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    setattr(module, name, fn.compute_weight(module))
    module.register_forward_pre_hook(fn)
    return module


def remove_weight_norm(module, name="weight"):
    """torch.nn.utils.remove_weight_norm: `name` a parameter again, g * v / ||v|| as it is now
    (registered last, as torch's). Returns the module."""
    fn = _take_hook(module, WeightNorm, name, "weight_norm")
    with no_grad():
        weight = fn.compute_weight(module)
    _drop_attribute(module, name)
    del module._parameters[name + "_g"]
    del module._parameters[name + "_v"]
    setattr(module, name, Parameter(weight))
    return module


class SpectralNorm:
    """The forward pre-hook of spectral_norm: weight = W / sigma, sigma = u . (W v), the largest
    singular value of W (as a matrix: axis `dim` its rows) by power iteration -- in training,
    n_power_iterations steps on the buffers u and v before each forward (no gradient through
    them, as torch's); in evaluation, u and v as they are."""

    def __init__(self, name, n_power_iterations, dim, eps):
        self.name, self.n_power_iterations, self.dim, self.eps = \
            name, n_power_iterations, dim, eps

    def matrix(self, weight):
        return matrix(weight, self.dim)

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        w = self.matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(F.matmul(F.transpose(w, 0, 1), u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(F.matmul(w, v), dim=0, eps=self.eps))
                u, v = u.clone(), v.clone()   # (a later step's update leaves this graph alone)
        sigma = F.sum(u * F.matmul(w, v))
        return weight / sigma

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, module.training))


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """torch.nn.utils.spectral_norm: `name` becomes the parameter name_orig, with buffers name_u
    and name_v (random unit vectors to start, from manual_seed's generator), and is W / sigma(W)
    before each forward. dim: the axis of the output channels (default 1 for the transposed
    convolutions, else 0). Returns the module."""
    from .nn import ConvTranspose1d, ConvTranspose2d
    if n_power_iterations <= 0:
        raise ValueError(f"Expected n_power_iterations to be positive, but got "
                         f"n_power_iterations={n_power_iterations}")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d)) else 0
    _refuse_twice(module, SpectralNorm, name, "spectral_norm")
    weight = _parameter(module, name, "spectral_norm")
    if not -weight.ndim <= dim < weight.ndim:
        raise ValueError(f"spectral_norm: dim {dim} is out of range for {name} of shape "
                         f"{weight.shape}")
    fn = SpectralNorm(name, n_power_iterations, dim % weight.ndim, eps)
    with no_grad():
        h, w = fn.matrix(weight).shape
        device, dtype = weight.device, weight.dtype
        u = F.normalize(randn(h, dtype=dtype, device=device), dim=0, eps=eps)
        v = F.normalize(randn(w, dtype=dtype, device=device), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(fn)
    return module


def remove_spectral_norm(module, name="weight"):
    """torch.nn.utils.remove_spectral_norm: `name` a parameter again, W / sigma with u and v as
    they are (registered last, as torch's); the buffers go. Returns the module."""
    fn = _take_hook(module, SpectralNorm, name, "spectral_norm")
    with no_grad():
        weight = fn.compute_weight(module, do_power_iteration=False)
    _drop_attribute(module, name)
    del module._buffers[name + "_u"]
    del module._buffers[name + "_v"]
    del module._parameters[name + "_orig"]
    module.register_parameter(name, Parameter(weight))
    return module


def _parameter(module, name, what):
    if not isinstance(module, Module):
        raise TypeError(f"{what}: expected a Module, got {type(module).__name__}")
    weight = module._parameters.get(name)
    if weight is None:
        raise ValueError(f"{what}: {type(module).__name__} has no parameter {name!r}"
                         + (" (it is None)" if name in module._parameters else ""))
    return weight


def _refuse_twice(module, kind, name, what):
    for hook in (module._forward_pre_hooks or {}).values():
        if isinstance(hook, kind) and hook.name == name:
            raise RuntimeError(f"Cannot register two {what} hooks on the same parameter {name}")


def _take_hook(module, kind, name, what):
    """The module's `kind` hook for `name`, taken off its pre-hooks."""
    hooks = module._forward_pre_hooks or {}
    for key, hook in hooks.items():
        if isinstance(hook, kind) and hook.name == name:
            del hooks[key]
            return hook
    raise ValueError(f"{what} of '{name}' not found in {module}")


def _drop_attribute(module, name):
    """The plain attribute the hook kept the weight in."""
    module.__dict__.pop(name, None)

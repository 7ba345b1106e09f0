"""torch.nn.utils.parametrizations: weight_norm and spectral_norm in torch's newer form, a
parametrization (layers.parametrize) -- `module.weight` computed on each read from
`parametrizations.weight.original0` / `original1` (g, v) or `parametrizations.weight.original`
(with the power iteration's vectors `parametrizations.weight.0._u` / `_v`), torch's state_dict
keys, so a checkpoint of torch code that uses them loads here and back. weight_norm also loads a
checkpoint of the older form (`weight_g` / `weight_v`, layers.weight_norms), as torch's does.

    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(80, 512, 5, padding=2))
    netD.main[2] = nn.utils.parametrizations.spectral_norm(nn.Conv2d(64, 128, 4, 2, 1))
"""
from . import functional as F
from .creation import randn
from .module import Module
from .parametrize import register_parametrization
from .tensor import Tensor, no_grad
from .weight_norms import _norm_except_dim, matrix, weight_from, wrapped_dim

__all__ = ["weight_norm", "spectral_norm"]


class _WeightNorm(Module):
    """weight = g * v / ||v|| from (g, v): the norm over every axis of v but `dim` (None or -1:
    over all of v, g one number); right_inverse splits a weight into (its norm, itself)."""

    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def _axis(self, v):
        return wrapped_dim(self.dim, v, "the weight", "weight_norm")

    def forward(self, weight_g, weight_v):
        return weight_from(weight_g, weight_v, self._axis(weight_v))

    def right_inverse(self, weight):
        return _norm_except_dim(weight, self._axis(weight)), weight


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.parametrizations.weight_norm: `name` parametrized by its norm g
    (`parametrizations.<name>.original0`, the norm over every axis but `dim`, kept; None: one
    number) and its direction v (`original1`, the weight as it was). Returns the module."""
    if not isinstance(module, Module):
        raise TypeError(f"weight_norm: expected a Module, got {type(module).__name__}")
    weight = getattr(module, name, None)
    if isinstance(weight, Tensor):
        wrapped_dim(dim, weight, name, "weight_norm")        # (refused before anything changes)
    register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def older_names(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                    error_msgs):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)
    module._register_load_state_dict_pre_hook(older_names)
    return module


class _SpectralNorm(Module):
    """weight / sigma, sigma = u . (W v) the largest singular value of W (the weight as a matrix,
    axis `dim` its rows) by power iteration on the buffers _u and _v: 15 steps when made, then
    n_power_iterations before each computation in training (none in evaluation), outside the
    gradient, as torch's. A 1-d weight is divided by its norm."""

    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, "
                             f"{ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                w = matrix(weight, self.dim)
                h, k = w.shape
                self.register_buffer("_u", F.normalize(
                    randn(h, dtype=weight.dtype, device=weight.device), dim=0, eps=eps))
                self.register_buffer("_v", F.normalize(
                    randn(k, dtype=weight.dtype, device=weight.device), dim=0, eps=eps))
            self._power_method(w, 15)

    def _power_method(self, w, n_power_iterations):
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(F.matmul(w, self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(F.matmul(F.transpose(w, 0, 1), self._u), dim=0,
                                          eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        w = matrix(weight, self.dim)
        if self.training:
            self._power_method(w, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()   # (a later step's update leaves this graph be)
        sigma = F.sum(u * F.matmul(w, v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """torch.nn.utils.parametrizations.spectral_norm: `name` parametrized as W / sigma(W)
    (`parametrizations.<name>.original`, buffers `parametrizations.<name>.0._u` / `_v`: random
    unit vectors, from manual_seed's generator, after 15 power-iteration steps). dim: the axis of
    the output channels (default 1 for the transposed convolutions, else 0). Returns the
    module."""
    from .nn import ConvTranspose1d, ConvTranspose2d
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d)) else 0
    register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


def __getattr__(name):
    if name == "orthogonal":
        raise AttributeError("nn.utils.parametrizations.orthogonal is not done here (weight_norm "
                             "and spectral_norm are)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

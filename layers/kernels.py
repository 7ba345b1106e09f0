"""CuPy kernels of the GPU path, each fusing what would otherwise be several launches.
Compiled on first use (CuPy caches the binaries), so importing this costs nothing."""
import functools

from .backend import cupy


@functools.lru_cache(maxsize=None)
def elementwise(name, in_params, out_params, body, preamble=""):
    return cupy().ElementwiseKernel(in_params, out_params, body, name, preamble=preamble)


def leaky_relu(x, slope):
    return elementwise("leaky_relu_fwd", "T x, T slope", "T y",
                       "y = x > (T)0 ? x : x * slope")(x, x.dtype.type(slope))


def leaky_relu_grad(x, gy, slope):
    return elementwise("leaky_relu_bwd", "T x, T gy, T slope", "T gx",
                       "gx = x > (T)0 ? gy : gy * slope")(x, gy, x.dtype.type(slope))


def bce(p, t):
    # PyTorch clamps each log term at -100 so p = 0 or 1 gives a finite loss
    return elementwise("bce_fwd", "T p, T t", "T l",
                       "l = -(t * max(log(p), (T)-100) + ((T)1 - t) * max(log1p(-p), (T)-100))")(p, t)


def bce_grad(p, t, gy):
    # d/dp times the upstream gradient gy (a device scalar or an array), with PyTorch's
    # eps = 1e-12 guard on the denominator
    return elementwise("bce_bwd", "T p, T t, T gy", "T g",
                       "g = gy * (p - t) / max(((T)1 - p) * p, (T)1e-12)")(p, t, gy)


def adam(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.Adam's update in one pass; `step` is a device int64 scalar (already advanced),
    so the bias corrections are computed here and the launch has no host-side state."""
    T = p.dtype.type
    elementwise(
        "adam", "T g, raw int64 step, T lr, T beta1, T beta2, T eps, T wd", "T p, T m, T v",
        """
        T gr = wd != (T)0 ? g + wd * p : g;
        T w = (T)1 - beta1;
        m = w < (T)0.5 ? m + w * (gr - m) : gr - (gr - m) * ((T)1 - w);   // torch.lerp
        v = v * beta2 + ((T)1 - beta2) * gr * gr;
        double t = (double)step[0];
        double bc1 = 1.0 - pow((double)beta1, t);
        double bc2 = 1.0 - pow((double)beta2, t);
        T denom = sqrt(v) / (T)sqrt(bc2) + eps;
        p = p - (T)((double)lr / bc1) * m / denom;
        """)(g, step, T(lr), T(beta1), T(beta2), T(eps), T(weight_decay), p, m, v)

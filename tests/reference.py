"""Independent float64 NumPy references for the GPU tests: convolution by shifted windows
(one einsum per filter tap), written directly from the definition

    y[n, k, p, q] = sum_{c, r, s} x_pad[n, g(k)*C/G + c, p*sh + r*dh, q*sw + s*dw] * W[k, c, r, s]

and its two adjoints. Layout NCHW / KCRS, any number of spatial dims."""
import itertools

import numpy as np

TOLERANCE = {              # ||out - ref|| / ||ref||, per data type of the GPU computation
    "float64": 1e-12,
    "float32": 1e-5,       # FMA math (TF32 off)
    "tf32": 5e-3,          # float32 data, TF32 tensor cores: 10-bit mantissa operands
    "float16": 3e-3,
    "bfloat16": 2e-2,
}


def rel_err(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.all(np.isfinite(out)), "non-finite values in output (unwritten or overflow)"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)


def _geometry(x_spatial, w_spatial, stride, pad, dilation):
    return [(size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, s, p, d in zip(x_spatial, w_spatial, stride, pad, dilation)]


def _window(out_shape, tap, stride, dilation):
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                 for o, t, s, d in zip(out_shape, tap, stride, dilation))


def conv_forward(x, W, stride, pad, dilation, groups):
    N, C = x.shape[:2]
    K, Cg = W.shape[:2]
    G = groups
    out = _geometry(x.shape[2:], W.shape[2:], stride, pad, dilation)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    y = np.zeros((N, K, *out))
    for tap in itertools.product(*(range(k) for k in W.shape[2:])):
        patch = xp[(slice(None), slice(None)) + _window(out, tap, stride, dilation)]
        for g in range(G):
            ks, cs = slice(g * K // G, (g + 1) * K // G), slice(g * Cg, (g + 1) * Cg)
            y[:, ks] += np.einsum("nc...,kc->nk...", patch[:, cs], W[(ks, slice(None)) + tap])
    return y


def conv_backward_data(gy, W, x_shape, stride, pad, dilation, groups):
    K, Cg = W.shape[:2]
    G = groups
    out = gy.shape[2:]
    gxp = np.zeros(x_shape[:2] + tuple(s + 2 * p for s, p in zip(x_shape[2:], pad)))
    for tap in itertools.product(*(range(k) for k in W.shape[2:])):
        window = (slice(None), slice(None)) + _window(out, tap, stride, dilation)
        for g in range(G):
            ks, cs = slice(g * K // G, (g + 1) * K // G), slice(g * Cg, (g + 1) * Cg)
            gxp[window][:, cs] += np.einsum("nk...,kc->nc...", gy[:, ks], W[(ks, slice(None)) + tap])
    crop = tuple(slice(p, p + s) for p, s in zip(pad, x_shape[2:]))
    return gxp[(slice(None), slice(None)) + crop]


def conv_backward_filter(x, gy, w_shape, stride, pad, dilation, groups):
    K, Cg = w_shape[:2]
    G = groups
    out = gy.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    N = x.shape[0]
    gW = np.zeros(w_shape)
    for tap in itertools.product(*(range(k) for k in w_shape[2:])):
        patch = xp[(slice(None), slice(None)) + _window(out, tap, stride, dilation)]
        for g in range(G):
            ks, cs = slice(g * K // G, (g + 1) * K // G), slice(g * Cg, (g + 1) * Cg)
            gW[(ks, slice(None)) + tap] = np.einsum("ncs,nks->kc", patch[:, cs].reshape(N, Cg, -1),
                                                    gy[:, ks].reshape(N, K // G, -1))
    return gW


def batch_norm_train(x, gamma, beta, eps, axes):
    """(y, mean, invstd, biased var, unbiased var) with statistics over `axes`."""
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    n = x.size // mean.size
    invstd = 1.0 / np.sqrt(var + eps)
    y = gamma * (x - mean) * invstd + beta
    return y, mean, invstd, var, var * n / (n - 1)


def batch_norm_backward(x, gy, gamma, eps, axes):
    mean = x.mean(axis=axes, keepdims=True)
    invstd = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * invstd
    n = x.size // mean.size
    gbeta = gy.sum(axis=axes, keepdims=True)
    ggamma = (gy * xhat).sum(axis=axes, keepdims=True)
    gx = gamma * invstd / n * (n * gy - gbeta - xhat * ggamma)
    return gx, ggamma, gbeta


def before_batch_norm(name):
    """Tacotron 2's conv biases each followed by a training-mode batch norm: their gradient is
    exactly 0 (the norm subtracts the channel mean), so every engine holds rounding noise there."""
    return name.endswith(".0.conv.bias") and "convolutions" in name

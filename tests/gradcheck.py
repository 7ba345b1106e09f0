"""Float64 central differences along a random direction (Chainer's check_backward): for
L(inputs) = sum(w * f(inputs)) with a fixed random w, compare the backward pass's
<grad L, v> with (L(x + h v) - L(x - h v)) / 2h for a random direction v."""
import numpy as np

import layers as L


def check_backward(f, *arrays, h=1e-6, rtol=1e-6, atol=1e-9, seed=0, grad_inputs=None):
    """f maps Tensors to a Tensor (or a tuple of Tensors); arrays are float64 NumPy inputs.
    grad_inputs: indices of the inputs to differentiate (default: every float input)."""
    rng = np.random.default_rng(seed)
    idx = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grad_inputs is None \
        else list(grad_inputs)
    tensors = [L.Tensor(a.copy(), requires_grad=i in idx) for i, a in enumerate(arrays)]
    outs = f(*tensors)
    outs = outs if isinstance(outs, tuple) else (outs,)
    weights = [rng.standard_normal(o.shape) for o in outs]
    loss = None
    for o, w in zip(outs, weights):
        term = (o * L.Tensor(w)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    dirs = [rng.standard_normal(arrays[i].shape) for i in idx]
    analytic = sum(float(np.sum(tensors[i].grad.numpy() * v)) for i, v in zip(idx, dirs))

    def value(sign):
        moved = [a.copy() for a in arrays]
        for i, v in zip(idx, dirs):
            moved[i] = moved[i] + sign * h * v
        with L.no_grad():
            outs = f(*[L.Tensor(a) for a in moved])
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(float(np.sum(o.numpy() * w)) for o, w in zip(outs, weights))

    numeric = (value(+1) - value(-1)) / (2 * h)
    assert abs(analytic - numeric) <= atol + rtol * abs(numeric), (analytic, numeric)

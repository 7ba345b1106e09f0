"""One comparison the torch-spelling tests share: a function of a tensor, run on layers (on the
CPU, a GPU or the host GPU path) and on torch CPU with the same data, gives torch's shape and
values, and -- with one upstream gradient, linspace(-1, 2) over the output -- torch's gradient."""
import numpy as np
import torch

import layers as L


def assert_like_torch(fn, data, where, rtol, atol=0.0):
    """fn(layers tensor) against fn(torch tensor); returns the layers output."""
    x = L.Tensor(L.tensor(data, device=where).data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    y, ty = fn(x), fn(tx)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    g = np.linspace(-1, 2, ty.numel()).reshape(ty.shape).astype(data.dtype)
    y.backward(L.tensor(g, device=where))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
    return y

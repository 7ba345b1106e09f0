"""layers.keras against keras.layers.Conv2D / Conv2DTranspose (Keras 3, torch backend, CPU):
outputs, input gradients and kernel/bias gradients over many kernel / stride / padding /
output_padding / dilation combinations."""
import itertools
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

import layers as L  # noqa: E402
from reference import rel_err  # noqa: E402

if keras.backend.backend() != "torch":
    pytest.skip("these parity tests drive Keras on its torch backend", allow_module_level=True)

TOL = 1e-4


def _both(layer, ours, x, kernel, bias):
    layer.build(x.shape)
    layer.set_weights([kernel, bias])
    tx = torch.tensor(x, requires_grad=True)
    ty = layer(tx)
    w = np.random.default_rng(1).standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(w)).sum().backward()
    xs = L.Tensor(x, requires_grad=True)
    ks = L.Tensor(kernel, requires_grad=True)
    bs = L.Tensor(bias, requires_grad=True)
    y = ours(xs, ks, bs)
    (y * L.Tensor(w)).sum().backward()
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.numpy(), ty.detach().numpy()) < TOL
    assert rel_err(xs.grad.numpy(), tx.grad.numpy()) < TOL
    assert rel_err(ks.grad.numpy(), layer.kernel.value.grad.numpy()) < TOL
    assert rel_err(bs.grad.numpy(), layer.bias.value.grad.numpy()) < TOL


CONV = [(k, s, p, d) for k, s, p, d in itertools.product((1, 2, 3, 4), (1, 2, 3), ("valid", "same"),
                                                          (1, 2))
        if not (s > 1 and d > 1)]


@pytest.mark.parametrize("k,s,padding,d", CONV)
def test_conv2d(k, s, padding, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 8, 3)).astype(np.float32)
    kernel = rng.standard_normal((k, k + 1 if k < 4 else k, 3, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    layer = keras.layers.Conv2D(5, kernel.shape[:2], strides=s, padding=padding, dilation_rate=d)
    _both(layer, lambda x_, k_, b_: L.keras.conv2d(x_, k_, b_, s, padding, d), x, kernel, bias)


TRANSPOSE = [(k, s, p, op, d)
             for k, s, p, op, d in itertools.product((1, 2, 3, 4), (1, 2, 3), ("valid", "same"),
                                                     (None, 0, 1, 2), (1, 2))
             if not (s > 1 and d > 1) and (op is None or op < s)]


@pytest.mark.parametrize("k,s,padding,op,d", TRANSPOSE)
def test_conv2d_transpose(k, s, padding, op, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    kernel = rng.standard_normal((k, k, 4, 3)).astype(np.float32)        # (R, S, Cout, Cin)
    bias = rng.standard_normal(4).astype(np.float32)
    layer = keras.layers.Conv2DTranspose(4, k, strides=s, padding=padding, output_padding=op,
                                         dilation_rate=d)
    _both(layer, lambda x_, k_, b_: L.keras.conv2d_transpose(x_, k_, b_, s, padding, op, d),
          x, kernel, bias)


def test_conv2d_transpose_rejects_output_padding_not_below_strides():
    x, kernel = np.zeros((1, 3, 3, 2), np.float32), np.zeros((3, 3, 4, 2), np.float32)
    with pytest.raises(ValueError, match=r"output_padding \(2, 2\) must be smaller than strides"):
        L.keras.conv2d_transpose(x, kernel, strides=2, output_padding=2)

"""Every op's backward against float64 central differences on the NumPy path."""
import numpy as np
import pytest

import layers as L
from layers import F, keras
from gradcheck import check_backward

R = np.random.default_rng(0)


def rnd(*shape, positive=False):
    a = R.standard_normal(shape)
    return np.abs(a) + 0.5 if positive else a


def away_from_kinks(a, points=(0.0,), margin=1e-3):
    for p in points:
        a[np.abs(a - p) < margin] = p + 0.1
    return a


CASES = {
    "add_broadcast": (lambda a, b: a + b, [rnd(3, 4, 5), rnd(4, 1)]),
    "sub_broadcast": (lambda a, b: a - b, [rnd(2, 3), rnd(3)]),
    "mul_broadcast": (lambda a, b: a * b, [rnd(2, 1, 4), rnd(3, 1)]),
    "div": (lambda a, b: a / b, [rnd(3, 4), rnd(3, 4, positive=True)]),
    "scalar_ops": (lambda a: (2.0 - a) * 3.0 / 1.5 + 1.0, [rnd(5)]),
    "rdiv": (lambda a: 2.0 / a, [rnd(4, positive=True)]),
    "neg": (lambda a: -a, [rnd(3)]),
    "pow": (lambda a: a ** 3, [rnd(3, 2)]),
    "pow_frac": (lambda a: a ** 0.5, [rnd(6, positive=True)]),
    "exp": (F.exp, [rnd(4, 3)]),
    "log": (F.log, [rnd(4, 3, positive=True)]),
    "relu": (F.relu, [away_from_kinks(rnd(4, 5))]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), [away_from_kinks(rnd(4, 5))]),
    "tanh": (F.tanh, [rnd(3, 4)]),
    "sigmoid": (F.sigmoid, [rnd(3, 4) * 5]),
    "clamp": (lambda x: F.clamp(x, -0.5, 0.7), [away_from_kinks(rnd(20), (-0.5, 0.7))]),
    "softmax": (lambda x: F.softmax(x, axis=1), [rnd(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, axis=-1), [rnd(2, 3, 4)]),
    "sum_axes": (lambda x: x.sum(axis=(0, 2)), [rnd(2, 3, 4)]),
    "sum_keepdims": (lambda x: x.sum(axis=1, keepdims=True), [rnd(2, 3, 4)]),
    "mean_all": (lambda x: x.mean(), [rnd(3, 4)]),
    "mean_axis": (lambda x: x.mean(axis=-1), [rnd(3, 4)]),
    "reshape": (lambda x: x.reshape(6, -1), [rnd(2, 3, 4)]),
    "transpose": (lambda x: x.transpose(2, 0, 1), [rnd(2, 3, 4)]),
    "concat": (lambda a, b: F.concat([a, b], axis=1), [rnd(2, 3), rnd(2, 5)]),
    "stack": (lambda a, b: F.stack([a, b], axis=1), [rnd(2, 3), rnd(2, 3)]),
    "stack_neg_axis": (lambda a, b: F.stack([a, b], axis=-1) * 2.0, [rnd(2, 3), rnd(2, 3)]),
    "unstack": (lambda x: F.stack(list(F.unstack(x, axis=1))[::-1], axis=0) * 1.5,
                [rnd(2, 3, 4)]),
    "getitem_basic": (lambda x: x[1:, ::2, None], [rnd(3, 5)]),
    "getitem_advanced": (lambda x: x[np.array([0, 2, 0])], [rnd(3, 4)]),
    "pad": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [rnd(2, 3, 4)]),
    "embedding": (lambda w: F.embedding(np.array([[1, 3], [3, 2]]), w, padding_idx=0),
                  [rnd(5, 4)]),
    "linear": (F.linear, [rnd(3, 4), rnd(5, 4), rnd(5)]),
    "linear_3d": (lambda x, w: F.linear(x, w), [rnd(2, 3, 4), rnd(5, 4)]),
    "matmul_batched": (F.matmul, [rnd(2, 3, 4), rnd(4, 5)]),
    "matmul_vec": (F.matmul, [rnd(4), rnd(2, 4, 3)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
               [rnd(2, 3, 7, 7), rnd(4, 3, 3, 3), rnd(4)]),
    "conv2d_dilated_grouped": (lambda x, w: F.conv2d(x, w, None, 1, 2, 2, groups=2),
                               [rnd(2, 4, 6, 6), rnd(6, 2, 3, 3)]),
    "conv2d_nhwc": (lambda x, w: F.conv2d(x, w, None, (2, 1), (1, 0), layout="NHWC"),
                    [rnd(2, 6, 5, 3), rnd(4, 3, 2, 3)]),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
               [rnd(2, 3, 9), rnd(4, 3, 3), rnd(4)]),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1),
                         [rnd(2, 4, 3, 3), rnd(4, 2, 4, 4), rnd(2)]),
    "conv_transpose2d_outpad_groups": (lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1, 2),
                                       [rnd(1, 4, 3, 4), rnd(4, 3, 3, 3)]),
    "conv_transpose2d_crop_path": (lambda x, w: F.conv_transpose2d(x, w, None, 1, 1, 1, 1, 2),
                                   [rnd(1, 2, 4, 4), rnd(2, 3, 3, 3)]),
    "batch_norm_train": (lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
                         [rnd(4, 3, 2, 2), rnd(3), rnd(3)]),
    "batch_norm_1d": (lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
                      [rnd(5, 3), rnd(3), rnd(3)]),
    "batch_norm_eval": (lambda x, g, b: F.batch_norm(x, np.full(3, 0.2), np.full(3, 1.5), g, b),
                        [rnd(4, 3, 2), rnd(3), rnd(3)]),
    "bce": (lambda p, t: F.binary_cross_entropy(p, t),
            [R.uniform(0.05, 0.95, (4, 3)), R.uniform(0, 1, (4, 3))]),
    "bce_with_logits": (lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="sum"),
                        [rnd(4, 3), R.uniform(0, 1, (4, 3))]),
    "mse": (F.mse_loss, [rnd(3, 4), rnd(3, 4)]),
    "l1": (lambda a, b: F.l1_loss(a, b, "none"), [rnd(3, 4), rnd(3, 4) + 3]),
    "cross_entropy": (lambda x: F.cross_entropy(x, np.array([1, 0, 3, -100])), [rnd(4, 5)]),
    "cross_entropy_2d": (lambda x: F.cross_entropy(x, np.array([[1, 2], [0, 0]]), reduction="sum"),
                         [rnd(2, 3, 2)]),
    "keras_conv2d_same": (lambda x, k: keras.conv2d(x, k, strides=2, padding="same"),
                          [rnd(2, 6, 5, 3), rnd(3, 2, 3, 4)]),
    "keras_conv2d_transpose_same": (
        lambda x, k: keras.conv2d_transpose(x, k, strides=2, padding="same"),
        [rnd(2, 3, 4, 3), rnd(3, 3, 2, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_matches_central_differences(name):
    f, arrays = CASES[name]
    targets_are_constant = name.startswith("bce")
    check_backward(f, *arrays, grad_inputs=[0] if targets_are_constant else None)


def test_dropout_backward_with_a_fixed_mask():
    def f(x):
        L.manual_seed(3)            # the same mask for every evaluation
        return F.dropout(x, 0.3)
    check_backward(f, rnd(50))


def test_grad_accumulates_when_a_value_is_used_twice():
    x = L.tensor([1.0, 2.0, 3.0], dtype=np.float64, requires_grad=True)
    (x * x + x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2, 3]) + 1)
    (x * 2.0).sum().backward()                        # a second backward adds to .grad
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2, 3]) + 3)


def test_unstack_and_stacks_gradients_are_views_not_copies():
    """(Tacotron 2 runs them once per decoder frame: a copy each was a kernel each.)"""
    x = L.tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    parts = F.unstack(x, axis=1)
    assert all(np.shares_memory(p.data, x.data) for p in parts)
    gy = np.arange(24.0).reshape(2, 3, 4)
    from layers.ops.shape import Stack
    fn = Stack(axis=1)
    fn.needs_input_grad = (True,) * 3
    grads = fn.backward(gy)
    assert all(np.shares_memory(g, gy) for g in grads)
    np.testing.assert_array_equal(grads[1], gy[:, 1])

"""The README's example runs as written; layers.keras' GPU path (cuDNN NHWC) equals its NumPy
path."""
import itertools
import os
import re

import numpy as np
import pytest

import layers as L
from cudnnlite import conv
from reference import rel_err

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_example_runs_and_its_gradient_is_the_numpy_paths():
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
    scope = {}
    with conv.using(allow_tf32=False):
        exec(compile(code, "README.md", "exec"), scope)
    net = scope["net"]
    grad = net[0].weight.grad
    assert grad.device == 0
    # the same net, weights and data on the NumPy path
    from layers import F, nn
    cpu = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    cpu.load_state_dict(net.state_dict())     # training mode: batch statistics, as on the GPU
    x = scope["x"].get()
    loss = F.mse_loss(cpu(L.tensor(x)), L.tensor(np.zeros(scope["y"].shape, np.float32)))
    loss.backward()
    assert rel_err(grad.numpy(), cpu[0].weight.grad.numpy()) < 1e-4


@pytest.mark.parametrize("k,s,padding,d", [(k, s, p, d) for k, s, p, d in itertools.product(
    (1, 3, 4), (1, 2), ("valid", "same"), (1, 2)) if not (s > 1 and d > 1)])
def test_keras_conv2d_gpu_matches_numpy(k, s, padding, d):
    _compare(lambda x, w, b: L.keras.conv2d(x, w, b, s, padding, d), (2, 9, 8, 3), (k, k, 3, 5),
             cout=5)


@pytest.mark.parametrize("k,s,padding,op", [(k, s, p, op) for k, s, p, op in itertools.product(
    (2, 3, 4), (1, 2, 3), ("valid", "same"), (None, 0, 1)) if op is None or op < s])
def test_keras_conv2d_transpose_gpu_matches_numpy(k, s, padding, op):
    _compare(lambda x, w, b: L.keras.conv2d_transpose(x, w, b, s, padding, op), (2, 5, 4, 3),
             (k, k, 4, 3), cout=4)


def _compare(fn, x_shape, k_shape, cout):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in (x_shape, k_shape, cout)]
    results = []
    with conv.using(allow_tf32=False):
        for device in ("cpu", 0):
            ts = [L.tensor(a, device=device, requires_grad=True) for a in arrays]
            y = fn(*ts)
            w = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
            (y * L.tensor(w, device=device)).sum().backward()
            results.append([y.numpy()] + [t.grad.numpy() for t in ts])
    for a, b in zip(*results):
        assert rel_err(b, a) < 1e-5

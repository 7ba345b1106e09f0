"""A gradient an op has just made (layers.tensor.Fresh: a convolution's or batch norm's) becomes
a leaf's first .grad as it is; any other is copied first, so no two leaves -- and no leaf and an
op -- share a gradient's memory, and later backward passes add into each .grad alone."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, backend


@pytest.fixture
def copies(monkeypatch):
    """The arrays layers.backend.copy_like copied (the engine's first-gradient copies)."""
    made = []
    real = backend.copy_like

    def counted(a, like):
        made.append(a.shape)
        return real(a, like)
    monkeypatch.setattr(backend, "copy_like", counted)
    return made


def test_conv_and_batch_norm_gradients_are_kept_without_a_copy_and_accumulate(copies):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    g, b = rng.standard_normal(4), rng.standard_normal(4)
    r = rng.standard_normal((2, 4, 6, 6))       # (not y * y: batch norm makes its sum constant)
    W, G, B = (L.tensor(a, requires_grad=True) for a in (w, g, b))
    tW, tG, tB = (torch.tensor(a, requires_grad=True) for a in (w, g, b))
    for _ in range(2):                           # the second pass adds into the kept arrays
        y = F.batch_norm(F.conv2d(L.tensor(x), W, None, 1, 1), None, None, G, B, training=True)
        (y * L.tensor(r)).sum().backward()
        ty = torch.nn.functional.batch_norm(
            torch.nn.functional.conv2d(torch.tensor(x), tW, None, 1, 1), None, None, tG, tB,
            training=True)
        (ty * torch.tensor(r)).sum().backward()
    assert copies == []
    for ours, ref in ((W, tW), (G, tG), (B, tB)):
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-10,
                                   atol=1e-10 * np.abs(ref.grad.numpy()).max())


def test_a_gradient_handed_to_two_leaves_is_copied_for_each(copies):
    """a + b gives both inputs the same gy (and x + x gives x it twice): each leaf's .grad is its
    own array, so a second backward adds into each once."""
    a, b = (L.tensor(np.ones(3), requires_grad=True) for _ in range(2))
    for _ in range(2):
        (a + b).sum().backward()
    assert len(copies) == 2 and a.grad.data is not b.grad.data
    np.testing.assert_array_equal(a.grad.numpy(), [2, 2, 2])
    np.testing.assert_array_equal(b.grad.numpy(), [2, 2, 2])
    x = L.tensor(np.ones(3), requires_grad=True)
    for _ in range(2):
        (x + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4, 4, 4])
    a.grad.data[0] = 7
    assert b.grad.numpy()[0] == 2

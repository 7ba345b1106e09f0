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


@pytest.mark.parametrize("device", ["host", pytest.param(0, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("memory_format", ["channels_last", "contiguous"])
def test_a_second_backward_adds_into_the_existing_gradients_on_the_gpu(where, memory_format,
                                                                     monkeypatch):
    """On the GPU a parameter's second gradient goes straight into its .grad where the call can
    add (Function.grad_into): batch norm's weight and bias through cuDNN's betaParamDiff = 1,
    a convolution filter on a cuBLASLt route (a thin input's im2col product, a whole-input
    product) through beta = 1 -- backward() adds none of them itself -- and cuDNN's own
    backward-filter (the contiguous first convolution) is added by backward(). Two passes (as
    DCGAN's discriminator sees real, then fake, images) equal torch's float64 gradients."""
    import importlib
    engine = importlib.import_module("layers.tensor")
    rng = np.random.default_rng(1)
    w1, w2 = rng.standard_normal((16, 1, 4, 4)) / 4, rng.standard_normal((1, 16, 4, 4)) / 16
    g, b = rng.uniform(0.5, 1.5, 16), rng.uniform(-0.5, 0.5, 16)
    batches = [(rng.standard_normal((2, 1, 8, 8)), rng.standard_normal((2, 1, 1, 1)))
               for _ in range(2)]
    params = [L.tensor(a.astype(np.float32), requires_grad=True, device=where)
              for a in (w1, g, b, w2)]
    if memory_format == "channels_last":
        params[0].data, params[3].data = (backend.to_channels_last(p.data)
                                          for p in (params[0], params[3]))
    W1, G, B, W2 = params
    added_by_backward = []
    real = engine._accumulate
    monkeypatch.setattr(engine, "_accumulate", lambda leaf, gx, own=False: (
        added_by_backward.append(next(i for i, p in enumerate(params) if p is leaf))
        if leaf.grad is not None else None, real(leaf, gx, own))[1])
    for x, r in batches:
        xt = L.tensor(x.astype(np.float32), device=where)
        if memory_format == "channels_last":
            xt = L.Tensor(backend.to_channels_last(xt.data))
        h = F.leaky_relu(F.batch_norm(F.conv2d(xt, W1, None, 2, 1), None, None, G, B,
                                      training=True), 0.2)
        (F.conv2d(h, W2) * L.tensor(r.astype(np.float32), device=where)).sum().backward()
    # the second pass: what backward() itself added
    assert added_by_backward == ([] if memory_format == "channels_last" else [0])
    tp = [torch.tensor(a, requires_grad=True) for a in (w1, g, b, w2)]
    for x, r in batches:
        th = torch.nn.functional.leaky_relu(torch.nn.functional.batch_norm(
            torch.nn.functional.conv2d(torch.tensor(x), tp[0], None, 2, 1), None, None, tp[1],
            tp[2], training=True), 0.2)
        (torch.nn.functional.conv2d(th, tp[3]) * torch.tensor(r)).sum().backward()
    for ours, ref in zip(params, tp):
        ref = ref.grad.numpy()
        got = np.asarray(ours.grad.data.get() if hasattr(ours.grad.data, "get") else
                         ours.grad.data, np.float64)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("device", ["host", pytest.param(0, marks=pytest.mark.gpu)])
def test_batch_norm_with_one_tensor_as_weight_and_bias_adds_its_two_gradients(where):
    """Weight and bias the same Tensor: one .grad takes both gradients, so they are not handed
    to cuDNN to add into at once (cudnnlite refuses add_to arrays that overlap); the engine adds
    them, and two passes equal torch's."""
    rng = np.random.default_rng(2)
    w0 = rng.uniform(0.5, 1.5, 3)
    xs = [rng.standard_normal((4, 3, 2, 2)) for _ in range(2)]
    r = rng.standard_normal((4, 3, 2, 2))
    w, tw = L.tensor(w0.astype(np.float32), requires_grad=True, device=where), \
        torch.tensor(w0, requires_grad=True)
    for x in xs:
        (F.batch_norm(L.tensor(x.astype(np.float32), device=where), None, None, w, w,
                      training=True) * L.tensor(r.astype(np.float32), device=where)).sum() \
            .backward()
        (torch.nn.functional.batch_norm(torch.tensor(x), None, None, tw, tw, training=True) *
         torch.tensor(r)).sum().backward()
    got = np.asarray(w.grad.data.get() if hasattr(w.grad.data, "get") else w.grad.data)
    np.testing.assert_allclose(got, tw.grad.numpy(), rtol=0,
                               atol=1e-5 * np.abs(tw.grad.numpy()).max())


@pytest.mark.parametrize("device", ["host", pytest.param(0, marks=pytest.mark.gpu)])
def test_an_op_keeps_no_gradient_it_was_offered_after_backward(where):
    """Function.grad_into is dropped once the op's backward has run: an output Tensor kept by
    the caller (its op with it) does not keep the parameters' old .grad arrays alive."""
    import weakref
    W = L.tensor(np.ones((4, 3, 3, 3), np.float32), requires_grad=True, device=where)
    x = L.tensor(np.ones((2, 3, 5, 5), np.float32), device=where)
    kept = []
    for _ in range(2):
        y = F.conv2d(x, W, None, 1, 1)
        y.sum().backward()
        kept.append(y)
    old = weakref.ref(W.grad.data)
    W.grad = None
    import gc
    gc.collect()
    assert old() is None
    assert kept[1]._ctx.grad_into is None

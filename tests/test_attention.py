"""F.additive_attention (layers.ops.attention): Tacotron 2's attention after its projections as
one op, against PyTorch float64 composing NVIDIA's get_alignment_energies, masked_fill, softmax
and bmm -- on the NumPy path, and on the GPU path's own kernels run on the host
(tests/host_kernels.py), with lengths past one block of threads."""
import numpy as np
import pytest
import torch

import layers as L
from layers import functional as F
from layers.ops import attention

from host_kernels import CALLS, install_cudnn


def _case(B, Lc, A, E, masked, seed=0):
    rng = np.random.default_rng(seed)
    q, loc, pm = (rng.standard_normal(s) * 0.7 for s in ((B, A), (B, Lc, A), (B, Lc, A)))
    v, memory = rng.standard_normal((1, A)), rng.standard_normal((B, Lc, E))
    lengths = rng.integers(1, Lc + 1, B)
    lengths[0] = Lc
    mask = np.arange(Lc)[None, :] >= lengths[:, None] if masked else None
    g_ctx, g_w = rng.standard_normal((B, E)), rng.standard_normal((B, Lc))
    return (q, loc, pm, v, memory), mask, (g_ctx, g_w)


def _torch(inputs, mask, grads):
    """NVIDIA's Attention.forward after the projections, float64, and its input gradients."""
    q, loc, pm, v, memory = (torch.tensor(a, requires_grad=True) for a in inputs)
    energies = (torch.tanh(q[:, None, :] + loc + pm) @ v.T).squeeze(-1)
    if mask is not None:
        energies = energies.masked_fill(torch.tensor(mask), -float("inf"))
    w = torch.softmax(energies, dim=1)
    ctx = torch.bmm(w.unsqueeze(1), memory).squeeze(1)
    (ctx * torch.tensor(grads[0])).sum().add((w * torch.tensor(grads[1])).sum()).backward()
    return [ctx.detach().numpy(), w.detach().numpy()], \
        [t.grad.numpy() for t in (q, loc, pm, v, memory)]


def _ours(inputs, mask, grads, dtype, device):
    ts = [L.tensor(a.astype(dtype), requires_grad=True, device=device) for a in inputs]
    m = None if mask is None else L.backend.to_device(mask, device)
    ctx, w = F.additive_attention(*ts, mask=m)
    out = [np.asarray(L.backend.to_device(t.data, "cpu"), np.float64) for t in (ctx, w)]
    loss = F.sum(ctx * L.tensor(grads[0].astype(dtype), device=device)) + \
        F.sum(w * L.tensor(grads[1].astype(dtype), device=device))
    loss.backward()
    return out, [np.asarray(L.backend.to_device(t.grad.data, "cpu"), np.float64) for t in ts]


def _close(got, want, rtol):
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * np.abs(r).max())


CASES = [dict(B=3, Lc=7, A=5, E=6, masked=True), dict(B=2, Lc=9, A=4, E=3, masked=False),
         # lengths, attention and memory sizes past the kernel's block of threads (strided loops)
         dict(B=2, Lc=300, A=131, E=270, masked=True)]


@pytest.mark.parametrize("case", CASES, ids=["masked", "unmasked", "long"])
@pytest.mark.parametrize("where", ["numpy", "gpu path on the host",
                                   pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_additive_attention_equals_torch_float64(case, where, dtype, rtol, request,
                                                 monkeypatch):
    inputs, mask, grads = _case(**case)
    device = "cpu" if where == "numpy" else 0
    if where == "gpu path on the host":
        request.getfixturevalue("on_host")
        install_cudnn(monkeypatch)                  # (v's deferred gradient is a cuBLASLt GEMM)
        CALLS.clear()
    out, gin = _ours(inputs, mask, grads, dtype, device)
    if where == "gpu path on the host":
        F = "double" if dtype == np.float64 else "float"
        assert CALLS[f"cudnnlite_additive_attention_fwd_{F}_{F}"] == 1
    ref_out, ref_gin = _torch(inputs, mask, grads)
    _close(out, ref_out, rtol)
    _close(gin, ref_gin, rtol)
    if mask is not None:                      # no weight, and no memory gradient, past a length
        assert (out[1][mask] == 0).all() and (gin[4][mask] == 0).all()


@pytest.mark.parametrize("where", ["numpy", "gpu path on the host",
                                   pytest.param("gpu", marks=pytest.mark.gpu)])
def test_bfloat16_is_computed_in_float32_and_rounded_once(where, request):
    """bfloat16 inputs: both outputs within half an ulp of bfloat16 (plus float32's error) of
    the float64 result of the same rounded inputs, as the other ops' bfloat16 results."""
    inputs, mask, grads = _case(2, 6, 8, 5, True, seed=4)
    bf = L.backend.bfloat16
    inputs = [a.astype(bf).astype(np.float64) for a in inputs]
    device = "cpu" if where == "numpy" else 0
    if where == "gpu path on the host":
        request.getfixturevalue("on_host")
    ts = [L.tensor(a.astype(bf), device=device) for a in inputs]
    ctx, w = F.additive_attention(*ts, mask=None if mask is None else
                                  L.backend.to_device(mask, device))
    assert ctx.dtype == bf and w.dtype == bf
    ref, _ = _torch(inputs, mask, grads)
    for got, want in zip((ctx, w), ref):
        got = np.asarray(L.backend.to_device(got.data, "cpu"), np.float64)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - 7)
        assert (np.abs(got - want) <= 0.5 * ulp + 1e-6 * np.abs(want) + 1e-30).all()


def test_v_gradient_is_deferred_to_one_product_over_every_use():
    """Used once per decoder frame, v's gradient is summed by one product at the end of
    backward (layers.tensor.Deferred), and equals the per-use sum."""
    inputs, mask, grads = _case(2, 5, 4, 3, True, seed=2)
    v = L.tensor(inputs[3], requires_grad=True)
    total = 0
    for k in range(3):                       # three "frames" sharing v
        ts = [L.tensor(a * (k + 1), requires_grad=True) for a in inputs[:3]]
        ctx, w = F.additive_attention(*ts, v, L.tensor(inputs[4]), mask=mask)
        total = total + F.sum(ctx * L.tensor(grads[0])) + F.sum(w * L.tensor(grads[1]))
    total.backward()
    want = sum(_torch([a * (k + 1) for a in inputs[:3]] + list(inputs[3:]), mask, grads)[1][3]
               for k in range(3))
    np.testing.assert_allclose(v.grad.numpy(), want, rtol=1e-12)


def test_bad_shapes_name_every_operand():
    q, loc, pm, v, memory = (L.tensor(np.zeros(s, np.float32)) for s in
                             ((2, 4), (2, 5, 4), (2, 5, 4), (4, 1), (2, 5, 3)))
    with pytest.raises(ValueError, match=r"additive_attention: .*v \(4, 1\)"):
        F.additive_attention(q, loc, pm, v, memory)
    with pytest.raises(TypeError, match="additive_attention: inputs must share one floating"):
        F.additive_attention(q, loc, pm, L.tensor(np.zeros((1, 4))), memory)


def test_the_long_cases_are_longer_than_a_block():
    assert CASES[2]["Lc"] > attention.THREADS and LOCATION_CASES[2]["Lc"] > attention.THREADS


def test_the_gpu_kernels_block_and_row_groups_are_powers_of_two():
    """The kernels' shared-memory reductions halve the block and a row's group of threads, and
    a block holds whole groups."""
    for n in (attention.THREADS, attention.GROUP):
        assert n & (n - 1) == 0
    assert attention.THREADS % attention.GROUP == 0


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_memory_is_read_where_it_lies_and_not_copied_per_frame(on_host, monkeypatch, dtype):
    """The encoder's output reaches the attention as a (time, batch) transposed view (the
    device-lengths LSTM), bfloat16 under --precision bf16: the kernels read it through its
    strides and storage type, and backward keeps the caller's array -- no (B, L, E) copy a
    decoder frame. Results as with a dense float64 memory."""
    install_cudnn(monkeypatch)
    read = []
    real = attention._device_memory
    monkeypatch.setattr(attention, "_device_memory",
                        lambda m, F_: read.append((m, real(m, F_))) or read[-1][1])
    dtype = L.backend.bfloat16 if dtype == "bfloat16" else dtype
    inputs, mask, grads = _case(3, 6, 5, 7, True, seed=5)
    inputs = [a.astype(dtype).astype(np.float64) for a in inputs]       # exact in dtype
    mem_t = L.backend.to_device(np.ascontiguousarray(inputs[4].transpose(1, 0, 2)).astype(dtype), 0)
    memory = L.Tensor(mem_t.transpose(1, 0, 2), requires_grad=True)     # strides (E, B E, 1)
    assert not memory.data.flags.c_contiguous
    ts = [L.tensor(a.astype(dtype), requires_grad=True, device=0) for a in inputs[:4]]
    ctx, w = F.additive_attention(*ts, memory, mask=mask)
    assert ctx._ctx.saved[3] is memory.data
    assert [given is got[0] for given, got in read] == [True]         # read in place, forward
    (F.sum(ctx.astype(np.float32) * L.tensor(grads[0].astype(np.float32), device=0)) +
     F.sum(w.astype(np.float32) * L.tensor(grads[1].astype(np.float32), device=0))).backward()
    (ref_ctx, ref_w), ref_g = _torch(inputs, mask, grads)
    tol = 2e-5 if dtype == np.float32 else 1e-2
    _close([np.asarray(ctx.numpy(), np.float64), np.asarray(w.numpy(), np.float64)],
           [ref_ctx, ref_w], tol)
    _close([np.asarray(memory.grad.numpy(), np.float64)], [ref_g[4]], tol)
    assert len(read) == 2 and read[1][1][0] is memory.data              # and backward


def test_a_host_mask_moves_to_the_device_and_must_be_boolean(on_host, monkeypatch):
    install_cudnn(monkeypatch)
    inputs, mask, grads = _case(2, 5, 4, 3, True, seed=6)
    ts = [L.tensor(a.astype(np.float32), device=0) for a in inputs]
    ctx, w = F.additive_attention(*ts, mask=mask)            # a NumPy mask, device inputs
    np.testing.assert_allclose(w.numpy(), _torch(inputs, mask, grads)[0][1], rtol=2e-5, atol=1e-7)
    with pytest.raises(TypeError, match="additive_attention: the mask must be boolean"):
        F.additive_attention(*ts, mask=mask.astype(np.float32))


def test_a_processed_memory_that_is_not_3d_is_named():
    q, loc, pm, v, memory = (L.tensor(np.zeros(s, np.float32)) for s in
                             ((2, 4), (2, 5, 4), (10, 4), (1, 4), (2, 5, 3)))
    with pytest.raises(ValueError, match=r"additive_attention: processed_memory \(10, 4\)"):
        F.additive_attention(q, loc, pm, v, memory)


# ---- F.location_attention: the location features computed in the op --------------------------

def _location_case(B, Lc, A, E, K, Fn, seed=0):
    rng = np.random.default_rng(seed)
    (q, _, pm, v, memory), mask, grads = _case(B, Lc, A, E, True, seed)
    xw = rng.uniform(0, 1, (B, Lc))
    xc = xw + rng.uniform(0, 2, (B, Lc))
    Wc, Wd = rng.standard_normal((Fn, 2, K)) * 0.3, rng.standard_normal((A, Fn)) * 0.3
    return (q, xw, xc, Wc, Wd, pm, v, memory), mask, grads


def _torch_location(inputs, mask, grads):
    """NVIDIA's LocationLayer (conv1d, 'same' padding, then dense) and Attention, float64."""
    q, xw, xc, Wc, Wd, pm, v, memory = (torch.tensor(a, requires_grad=True) for a in inputs)
    K = Wc.shape[-1]
    conv = torch.nn.functional.conv1d(torch.stack([xw, xc], 1), Wc, padding=(K - 1) // 2)
    loc = conv.transpose(1, 2) @ Wd.T
    energies = (torch.tanh(q[:, None, :] + loc + pm) @ v.T).squeeze(-1)
    energies = energies.masked_fill(torch.tensor(mask), -float("inf"))
    w = torch.softmax(energies, dim=1)
    ctx = torch.bmm(w.unsqueeze(1), memory).squeeze(1)
    ((ctx * torch.tensor(grads[0])).sum() + (w * torch.tensor(grads[1])).sum()).backward()
    return [ctx.detach().numpy(), w.detach().numpy()], [t.grad.numpy() for t in
                                                         (q, xw, xc, Wc, Wd, pm, v, memory)]


LOCATION_CASES = [dict(B=3, Lc=7, A=5, E=6, K=3, Fn=4),
                  dict(B=2, Lc=5, A=4, E=3, K=31, Fn=3),          # windows wider than the text
                  dict(B=2, Lc=270, A=9, E=130, K=31, Fn=2)]      # past one block of threads


@pytest.mark.parametrize("case", LOCATION_CASES, ids=["K3", "K31_short", "long"])
@pytest.mark.parametrize("where", ["numpy", "gpu path on the host",
                                   pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-11), (np.float32, 5e-5)])
def test_location_attention_equals_nvidias_location_layer_and_attention(case, where, dtype,
                                                                         rtol, request,
                                                                         monkeypatch):
    """The composed kernel (dense @ conv, as train.tacotron2's LocationLayer.kernel() makes it)
    and the whole op against torch's conv1d + dense + attention: outputs and the gradients of
    query, both weights, the conv and dense weights, processed memory, v and memory."""
    inputs, mask, grads = _location_case(**case)
    device = "cpu" if where == "numpy" else 0
    if where == "gpu path on the host":
        request.getfixturevalue("on_host")
        install_cudnn(monkeypatch)
        CALLS.clear()
    q, xw, xc, Wc, Wd, pm, v, memory = ts = [
        L.tensor(a.astype(dtype), requires_grad=True, device=device) for a in inputs]
    kernel = F.matmul(F.transpose(F.reshape(Wc, Wc.shape[0], -1)), F.transpose(Wd))
    ctx, w = F.location_attention(q, xw, xc, kernel, pm, v, memory,
                                  mask=L.backend.to_device(mask, device))
    (F.sum(ctx * L.tensor(grads[0].astype(dtype), device=device)) +
     F.sum(w * L.tensor(grads[1].astype(dtype), device=device))).backward()
    if where == "gpu path on the host":
        Fc = "double" if dtype == np.float64 else "float"
        assert CALLS[f"cudnnlite_location_attention_fwd_{Fc}_{Fc}"] == 1
        assert CALLS[f"cudnnlite_location_attention_bwd_{Fc}_{Fc}"] == 1
    ref_out, ref_g = _torch_location(inputs, mask, grads)
    _close([np.asarray(L.backend.to_device(t.data, "cpu"), np.float64) for t in (ctx, w)],
           ref_out, rtol)
    _close([np.asarray(L.backend.to_device(t.grad.data, "cpu"), np.float64) for t in ts],
           ref_g, rtol)


def test_a_location_kernel_of_even_width_is_refused():
    z = lambda *s: L.tensor(np.zeros(s, np.float32))          # noqa: E731
    with pytest.raises(ValueError, match=r"location_attention: location_kernel \(8, 4\): "
                                         r"expected \(2 K, A\) with K odd"):
        F.location_attention(z(2, 4), z(2, 5), z(2, 5), z(8, 4), z(2, 5, 4), z(1, 4), z(2, 5, 3))
    with pytest.raises(ValueError, match=r"weights_cum \(2, 6\)"):
        F.location_attention(z(2, 4), z(2, 5), z(2, 6), z(6, 4), z(2, 5, 4), z(1, 4), z(2, 5, 3))


def test_a_non_leaf_location_kernels_gradient_is_summed_as_it_comes(monkeypatch):
    """LocationLayer.kernel() is a product of two parameters, used once a decoder frame: its
    Deferred gradient terms are added into one float32 accumulator as they come (one product a
    frame, nothing held; no rounding, no separate addition), and Wc's and Wd's gradients equal
    torch's over the frames."""
    import sys
    from layers.ops import linalg
    ltensor = sys.modules["layers.tensor"]
    inputs, mask, grads = _location_case(2, 6, 5, 4, 3, 3, seed=7)
    q, xw, xc, Wc, Wd, pm, v, memory = inputs
    monkeypatch.setattr(ltensor.Deferred, "value", lambda self: pytest.fail("per-frame product"))
    products = []
    real_mm = linalg.mm
    monkeypatch.setattr(linalg, "mm", lambda a, b, *r, **k: products.append(
        (a.shape, b.shape)) or real_mm(a, b, *r, **k))
    tWc, tWd = L.tensor(Wc, requires_grad=True), L.tensor(Wd, requires_grad=True)
    kernel = F.matmul(F.transpose(F.reshape(tWc, 3, -1)), F.transpose(tWd))
    total = 0
    for k in range(3):
        ctx, w = F.location_attention(L.tensor(q * (k + 1)), L.tensor(xw), L.tensor(xc), kernel,
                                      L.tensor(pm), L.tensor(v), L.tensor(memory), mask=mask)
        total = total + F.sum(ctx * L.tensor(grads[0])) + F.sum(w * L.tensor(grads[1]))
    total.backward()
    assert products == [((6, 12), (12, 5))] * 3     # (2 K, B L) @ (B L, A) a frame
    want_Wc = want_Wd = 0
    for k in range(3):
        _, g = _torch_location([q * (k + 1), xw, xc, Wc, Wd, pm, v, memory], mask, grads)
        want_Wc, want_Wd = want_Wc + g[3], want_Wd + g[4]
    np.testing.assert_allclose(tWc.grad.numpy(), want_Wc, rtol=1e-10)
    np.testing.assert_allclose(tWd.grad.numpy(), want_Wd, rtol=1e-10)

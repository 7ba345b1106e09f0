"""F.scaled_dot_product_attention and nn.MultiheadAttention against torch's: outputs, attention
weights and every gradient (inputs and parameters), in float64 on the NumPy path, the GPU path
run on the host and the GPU; masks of both kinds, causal, rows with nothing to attend, grouped
query heads, kdim / vdim, batch_first, unbatched input; state_dict names, repr and refusals."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn
from reference import rel_err

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
TOL = 1e-12

DEAD = np.ones((4, 5), bool)
DEAD[1] = False                       # (row 1 attends nothing: 0, and no gradient)
DEAD[2, 3:] = False
FLOAT_MASK = np.zeros((4, 5))
FLOAT_MASK[0] = -np.inf
FLOAT_MASK[3, 1] = -2.5
SDPA = {  # name -> (q, k, v shapes, keywords)
    "plain": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), {}),
    "bool_mask_dead_row": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), {"attn_mask": DEAD}),
    "float_mask_dead_row": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6),
                            {"attn_mask": FLOAT_MASK}),
    "causal": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), {"is_causal": True}),
    "causal_2d_scale": ((4, 8), (5, 8), (5, 6), {"is_causal": True, "scale": 0.3}),
    "grouped_query_heads": ((2, 4, 4, 8), (2, 2, 5, 8), (2, 2, 5, 6), {"enable_gqa": True}),
}


def _pair(a, where):
    return L.tensor(a, device=where, requires_grad=True), torch.tensor(a, requires_grad=True)


def _kw(kw, lib, where):
    """Array keywords as the library's tensors."""
    return {k: (torch.tensor(v) if lib is torch else L.tensor(v, device=where))
            if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@pytest.mark.parametrize("case", list(SDPA))
@pytest.mark.parametrize("device", DEVICES)
def test_scaled_dot_product_attention_is_torchs(where, case):
    *shapes, kw = SDPA[case]
    rng = np.random.default_rng(len(case))
    pairs = [_pair(rng.standard_normal(s), where) for s in shapes]
    y = F.scaled_dot_product_attention(*(p[0] for p in pairs), **_kw(kw, L, where))
    ty = torch.nn.functional.scaled_dot_product_attention(*(p[1] for p in pairs),
                                                          **_kw(kw, torch, where))
    w = rng.standard_normal(ty.shape)
    (y * L.tensor(w, device=where)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    assert rel_err(y.numpy(), ty.detach().numpy()) < TOL
    for ours, theirs in pairs:
        assert np.isfinite(ours.grad.numpy()).all()
        assert rel_err(ours.grad.numpy(), theirs.grad.numpy()) < TOL


MHA = {  # name -> (constructor keywords, q, k, v shapes, forward keywords)
    "plain": ({}, (3, 2, 8), (5, 2, 8), (5, 2, 8), {}),
    "masks_per_head_weights": ({}, (3, 2, 8), (5, 2, 8), (5, 2, 8), {
        "key_padding_mask": np.array([[False, False, True, False, True], [False] * 5]),
        "attn_mask": np.triu(np.ones((3, 5), bool), 1), "average_attn_weights": False}),
    "batch_first_float_mask_per_head": ({"batch_first": True}, (2, 3, 8), (2, 5, 8), (2, 5, 8),
                                        {"attn_mask": np.linspace(-1, 1, 60).reshape(4, 3, 5),
                                         "need_weights": False}),
    "kdim_vdim": ({"kdim": 4, "vdim": 6}, (3, 2, 8), (5, 2, 4), (5, 2, 6), {}),
    "unbatched_no_bias": ({"bias": False}, (3, 8), (5, 8), (5, 8),
                          {"key_padding_mask": np.array([False, True, False, False, False])}),
    "causal_hint": ({}, (3, 2, 8), (3, 2, 8), (3, 2, 8),
                    {"attn_mask": np.triu(np.ones((3, 3), bool), 1), "is_causal": True}),
    "bias_kv_masks": ({"add_bias_kv": True}, (3, 2, 8), (5, 2, 8), (5, 2, 8), {
        "key_padding_mask": np.array([[False, False, True, False, True], [False] * 5]),
        "attn_mask": np.triu(np.ones((3, 5), bool), 1), "average_attn_weights": False}),
    "zero_attn_float_mask_per_head": ({"add_zero_attn": True, "batch_first": True}, (2, 3, 8),
                                      (2, 5, 8), (2, 5, 8),
                                      {"attn_mask": np.linspace(-1, 1, 60).reshape(4, 3, 5)}),
    "bias_kv_and_zero_attn_unbatched": ({"add_bias_kv": True, "add_zero_attn": True}, (3, 8),
                                        (5, 8), (5, 8), {"key_padding_mask": np.array(
                                            [False, True, False, False, False])}),
    "bias_kv_no_bias_kdim": ({"add_bias_kv": True, "bias": False, "kdim": 4, "vdim": 6},
                             (3, 2, 8), (5, 2, 4), (5, 2, 6), {}),
}


@pytest.mark.parametrize("case", list(MHA))
@pytest.mark.parametrize("device", DEVICES)
def test_multihead_attention_is_torchs(where, case):
    ctor, *shapes, kw = MHA[case]
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, **ctor).double()
    ours = nn.MultiheadAttention(8, 2, **ctor).double()
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    rng = np.random.default_rng(len(case))
    pairs = [_pair(rng.standard_normal(s), where) for s in shapes]
    out, weights = ours(*(p[0] for p in pairs), **_kw(kw, L, where))
    tout, tweights = theirs(*(p[1] for p in pairs), **_kw(kw, torch, where))
    assert (weights is None) == (tweights is None)
    g = rng.standard_normal(tout.shape)
    loss = (out * L.tensor(g, device=where)).sum()
    tloss = (tout * torch.tensor(g)).sum()
    if weights is not None:
        assert rel_err(weights.numpy(), tweights.detach().numpy()) < TOL
        loss, tloss = loss + (weights * weights).sum(), tloss + (tweights * tweights).sum()
    loss.backward()
    tloss.backward()
    assert rel_err(out.numpy(), tout.detach().numpy()) < TOL
    for a, b in pairs:
        assert rel_err(a.grad.numpy(), b.grad.numpy()) < TOL
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_err(p.grad.numpy(), q.grad.numpy()) < TOL, name


def test_multihead_attention_init_and_float32():
    """torch's init: xavier-uniform in_proj_weight (bound sqrt(6 / (E + 3E))), zero biases; a
    float32 module runs in float32."""
    L.manual_seed(0)
    m = nn.MultiheadAttention(64, 4)
    w = m.in_proj_weight.numpy()
    bound = np.sqrt(6 / (64 + 192))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert not m.in_proj_bias.numpy().any() and not m.out_proj.bias.numpy().any()
    kv = nn.MultiheadAttention(64, 4, add_bias_kv=True)       # (xavier-normal: std 1/sqrt(E))
    for b in (kv.bias_k.numpy(), kv.bias_v.numpy()):
        assert b.shape == (1, 1, 64) and 0.7 < b.std() * 8 < 1.3 and abs(b.mean()) < 0.05
    x = L.tensor(np.random.default_rng(0).standard_normal((5, 2, 64)).astype(np.float32))
    out, weights = m(x, x, x)
    assert out.dtype == weights.dtype == np.float32
    np.testing.assert_allclose(weights.numpy().sum(-1), 1, rtol=1e-6)


def test_attention_refusals_are_torchs():
    q = L.tensor(np.zeros((2, 3, 4)))
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=L.tensor(np.ones((3, 3), bool)),
                                       is_causal=True)
    with pytest.raises(TypeError, match="Expected attn_mask dtype to be bool or float"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=L.tensor(np.zeros((3, 3), np.int64)))
    with pytest.raises(ValueError, match="must be \\(..., L, E\\), \\(..., S, E\\)"):
        F.scaled_dot_product_attention(q, L.tensor(np.zeros((2, 3, 5))), q)
    with pytest.raises(ValueError, match="embed_dim 6 must be divisible by num_heads 4"):
        nn.MultiheadAttention(6, 4)
    m = nn.MultiheadAttention(4, 2).double()
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(q, q, q, is_causal=True)
    with pytest.raises(ValueError, match="key_padding_mask of shape \\(3,\\); expected "
                                         "\\(3, 2\\)"):        # (q: L 2, N 3, E 4)
        m(q, q, q, key_padding_mask=L.tensor(np.zeros(3, bool)))


ENCODERS = {  # name -> (layer keywords, input shape, forward keywords)
    "post_norm_relu_padding": ({}, (5, 2, 8), {
        "src_key_padding_mask": np.array([[False] * 5, [False, False, False, True, True]])}),
    "pre_norm_gelu_batch_first_causal": ({"norm_first": True, "activation": "gelu",
                                          "batch_first": True}, (2, 5, 8),
                                         {"mask": np.triu(np.full((5, 5), -np.inf), 1),
                                          "is_causal": True}),
    "no_bias_callable_activation": ({"bias": False, "activation": "tanh"}, (4, 3, 8), {}),
}


@pytest.mark.parametrize("case", list(ENCODERS))
@pytest.mark.parametrize("device", DEVICES)
def test_transformer_encoder_is_torchs(where, case):
    """Two layers and a final norm, dropout 0.1 in eval mode (torch's own training path: grads
    are on); outputs and every gradient, state_dict names."""
    kw, shape, fwd = ENCODERS[case]
    torch.manual_seed(0)

    def make(lib, act):
        layer_kw = dict(kw, activation=act) if "activation" in kw else kw
        layer = lib.TransformerEncoderLayer(8, 2, dim_feedforward=16, **layer_kw)
        return lib.TransformerEncoder(layer, 2, norm=lib.LayerNorm(8), enable_nested_tensor=False)
    act = kw.get("activation")
    theirs = make(torch.nn, torch.tanh if act == "tanh" else act or "relu").double().eval()
    ours = make(nn, L.tanh if act == "tanh" else act or "relu").double().eval()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    x, tx = _pair(np.random.default_rng(3).standard_normal(shape), where)
    y = ours(x, **_kw(fwd, L, where))
    ty = theirs(tx, **_kw(fwd, torch, where))
    g = np.random.default_rng(4).standard_normal(shape)
    (y * L.tensor(g, device=where)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    assert rel_err(y.numpy(), ty.detach().numpy()) < TOL
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) < TOL
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_err(p.grad.numpy(), q.grad.numpy()) < TOL, name


@pytest.mark.parametrize("norm_first,batch_first", [(False, False), (True, True)])
@pytest.mark.parametrize("device", DEVICES)
def test_transformer_is_torchs(where, norm_first, batch_first):
    """nn.Transformer (encoder, decoder, their final norms, torch's xavier init shapes): a causal
    target mask from generate_square_subsequent_mask and padding masks; outputs and every
    gradient against torch (eval mode, float64)."""
    torch.manual_seed(0)
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
              dim_feedforward=16, norm_first=norm_first, batch_first=batch_first)
    theirs = torch.nn.Transformer(**kw).double().eval()
    ours = nn.Transformer(**kw).double().eval()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    S, T, N = 5, 4, 2
    rng = np.random.default_rng(5)
    src, tsrc = _pair(rng.standard_normal((N, S, 8) if batch_first else (S, N, 8)), where)
    tgt, ttgt = _pair(rng.standard_normal((N, T, 8) if batch_first else (T, N, 8)), where)
    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=np.float64)
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    np.testing.assert_array_equal(mask.numpy(), tmask.numpy())
    pad = np.array([[False] * S, [False, False, False, True, True]])
    y = ours(src, tgt, tgt_mask=mask.to(where), src_key_padding_mask=L.tensor(pad, device=where),
             memory_key_padding_mask=L.tensor(pad, device=where), tgt_is_causal=True)
    ty = theirs(tsrc, ttgt, tgt_mask=tmask, src_key_padding_mask=torch.tensor(pad),
                memory_key_padding_mask=torch.tensor(pad), tgt_is_causal=True)
    g = rng.standard_normal(ty.shape)
    (y * L.tensor(g, device=where)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    assert rel_err(y.numpy(), ty.detach().numpy()) < TOL
    for a, b in ((src, tsrc), (tgt, ttgt)):
        assert rel_err(a.grad.numpy(), b.grad.numpy()) < TOL
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_err(p.grad.numpy(), q.grad.numpy()) < TOL, name
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        ours(src, tgt[:1] if batch_first else tgt[:, :1])


def test_transformer_init_is_xavier_for_every_matrix():
    L.manual_seed(0)
    m = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=32)
    for name, p in m.named_parameters():
        if p.ndim > 1:
            fan_out, fan_in = p.shape
            bound = np.sqrt(6 / (fan_in + fan_out))
            assert np.abs(p.numpy()).max() <= bound and np.abs(p.numpy()).max() > 0.8 * bound, name
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not swish"):
        nn.TransformerEncoderLayer(16, 2, activation="swish")

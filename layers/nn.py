"""Layers with PyTorch's constructor arguments, parameter names, weight layouts and defaults.
`layers.nn.functional`, `layers.nn.utils` and `layers.nn.utils.rnn` import as torch's do
(`import layers.nn.functional as F`, `from layers.nn.utils.rnn import pad_sequence`)."""
import copy
import sys

import numpy as np

from . import functional as F
from .backend import default_float, is_half
from .functional import pair as _pair
from . import init
from .creation import zeros_like
from .module import (Module, ModuleDict, ModuleList, Parameter,  # noqa: F401
                     ParameterDict, ParameterList, Sequential, options_repr)
from . import parametrizations, parametrize, rnn_utils, weight_norms
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401  (re-exported)
from .tensor import Tensor


def _empty(*shape):
    return np.empty(shape, dtype=default_float())


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features))
        self.register_parameter("bias", Parameter(_empty(out_features)) if bias else None)
        init.default_weight_and_bias_(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for MultiheadAttention's out_proj (a Linear; the name keeps the repr)."""


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: in_proj_weight (3E, E) (q_proj_weight, k_proj_weight,
    v_proj_weight when kdim / vdim differ), in_proj_bias (3E,), out_proj (E -> E); torch's
    init (xavier_uniform_, zero biases). forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False) ->
    (output, weights or None); (L, N, E), or (N, L, E) with batch_first, or unbatched (L, E).
    Masks as torch's: True in a bool attn_mask / key_padding_mask is *not* attended; a float
    one is added. The attention is F.scaled_dot_product_attention's (a row with nothing to
    attend gives 0, where torch's need_weights path gives NaN). add_bias_kv: learnt bias_k /
    bias_v (1, 1, E), one more key and value position after the projections; add_zero_attn:
    one more of zeros after the heads are split (masks padded to attend both), as torch's."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be greater than "
                             f"0, got embed_dim={embed_dim} and num_heads={num_heads} (as torch)")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by "
                             f"num_heads {num_heads} (as torch)")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(_empty(embed_dim, embed_dim))
            self.k_proj_weight = Parameter(_empty(embed_dim, self.kdim))
            self.v_proj_weight = Parameter(_empty(embed_dim, self.vdim))
            self.register_parameter("in_proj_weight", None)
        self.register_parameter("in_proj_bias", Parameter(np.zeros(3 * embed_dim, default_float()))
                                if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        if add_bias_kv:
            self.bias_k = Parameter(_empty(1, 1, embed_dim))
            self.bias_v = Parameter(_empty(1, 1, embed_dim))
        else:
            self.bias_k = self.bias_v = None         # (attributes, not parameters: torch's)
        self.add_zero_attn = add_zero_attn
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                  self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if bias:
            init.zeros_(self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _projections(self):
        """(W_q, W_k, W_v, b_q, b_k, b_v): slices of in_proj_weight / in_proj_bias (in the
        graph), or the separate weights."""
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            ws = (w[:E], w[E:2 * E], w[2 * E:])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        bs = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
        return ws + bs

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: Need attn_mask if specifying the is_causal "
                               "hint (as torch)")
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention: query, key and value must all be 3-d "
                             f"(batched) or 2-d (unbatched), got {query.shape}, {key.shape}, "
                             f"{value.shape}")
        if not batched:          # one sequence: a batch of one (axis 1, or 0 with batch_first)
            axis = 0 if self.batch_first else 1
            query, key, value = (F.unsqueeze(t, axis) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = F.unsqueeze(key_padding_mask, 0)
        if not self.batch_first:                                   # (N, L, E) inside
            query, key, value = (F.transpose(t, 0, 1) for t in (query, key, value))
        N, L_, E = query.shape
        S, H, d = key.shape[1], self.num_heads, self.head_dim
        wq, wk, wv, bq, bk, bv = self._projections()

        def heads(y):                         # (N, T, E) -> (N, H, T, d)
            return F.transpose(F.reshape(y, N, y.shape[1], H, d), (0, 2, 1, 3))

        def key_heads(y, bias):               # the keys' / values': with add_bias_kv's bias
            if bias is not None:              # and add_zero_attn's zeros, a position each
                y = F.cat([y, F.expand(bias, N, 1, E)], 1)
            y = heads(y)
            return F.cat([y, zeros_like(y[:, :, :1])], 2) if self.add_zero_attn else y
        q = heads(F.linear(query, wq, bq))
        k, v = key_heads(F.linear(key, wk, bk), self.bias_k), \
            key_heads(F.linear(value, wv, bv), self.bias_v)
        mask = self._merged_mask(attn_mask, key_padding_mask, N, L_, S, query)
        extra = k.shape[2] - S                # (the masks attend the added positions)
        if extra and mask is not None:
            mask = F.cat([mask, zeros_like(mask[..., :1]).expand(
                *mask.shape[:-1], extra)], -1)
        out, weights = F._attention("MultiheadAttention", q, k, v, mask,
                                    self.dropout if self.training else 0.0, False, None, False)
        out = self.out_proj(F.reshape(F.transpose(out, (0, 2, 1, 3)), N, L_, E))
        if not self.batch_first:
            out = F.transpose(out, 0, 1)
        if not batched:
            out = F.squeeze(out, 0 if self.batch_first else 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = F.mean(weights, dim=1)
        return out, (weights if batched else F.squeeze(weights, 0))

    def _merged_mask(self, attn_mask, key_padding_mask, N, L_, S, like):
        """attn_mask ((L, S) or (N * H, L, S)) and key_padding_mask ((N, S)) as one float mask
        to add, broadcasting to (N, H, L, S): -inf where a bool one is True."""
        def as_float(m, name):
            if m is None:
                return None
            m = m if isinstance(m, Tensor) else Tensor(np.asarray(m))
            if m.dtype == np.bool_:
                return F.where(m.to(like.device), -np.inf,
                               zeros_like(m, dtype=like.dtype, device=like.device))
            if m.dtype != like.dtype:
                raise TypeError(f"MultiheadAttention: {name} of dtype {m.dtype} for "
                                f"{like.dtype} data; expected bool or {like.dtype} (as torch)")
            return m.to(like.device)
        total = None
        a = as_float(attn_mask, "attn_mask")
        if a is not None:
            if a.shape == (L_, S):
                total = a
            elif a.shape == (N * self.num_heads, L_, S):
                total = F.reshape(a, N, self.num_heads, L_, S)
            else:
                raise ValueError(f"MultiheadAttention: attn_mask of shape {a.shape}; expected "
                                 f"({L_}, {S}) or ({N * self.num_heads}, {L_}, {S})")
        k = as_float(key_padding_mask, "key_padding_mask")
        if k is not None:
            if k.shape != (N, S):
                raise ValueError(f"MultiheadAttention: key_padding_mask of shape {k.shape}; "
                                 f"expected ({N}, {S})")
            k = F.reshape(k, N, 1, 1, S)
            total = k if total is None else total + k
        return total


def _activation(kind, activation):
    """torch's transformer activation: 'relu', 'gelu' or a callable."""
    if not isinstance(activation, str):
        return activation
    if activation not in ("relu", "gelu"):
        raise RuntimeError(f"{kind}: activation should be relu/gelu, not {activation} (as torch)")
    return F.relu if activation == "relu" else F.gelu


class _TransformerLayer(Module):
    """What torch's encoder and decoder layers share, built in torch's registration order (so
    state dicts move both ways): the attention modules `attentions` names, the feed-forward
    block (linear1, activation, dropout, linear2), then LayerNorms norm1..norm{n} and dropouts
    dropout1..dropout{n}, one per sublayer."""
    attentions = ()

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                 batch_first, norm_first, bias):
        super().__init__()
        for name in self.attentions:
            setattr(self, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first))
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        n = len(self.attentions) + 1
        for k in range(1, n + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for k in range(1, n + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = _activation(type(self).__name__, activation)

    def _attend(self, attn, drop, x, mem, mask, key_padding_mask, is_causal):
        return drop(attn(x, mem, mem, attn_mask=mask, key_padding_mask=key_padding_mask,
                         need_weights=False, is_causal=is_causal)[0])

    def _ff_block(self, x, drop):
        return drop(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _sublayers(self, x, blocks):
        """x through each (norm, block) with a residual: post-norm (norm(x + block(x))), or
        pre-norm with norm_first (x + block(norm(x))), as torch's."""
        for norm, block in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


class TransformerEncoderLayer(_TransformerLayer):
    """torch.nn.TransformerEncoderLayer: self-attention, then the feed-forward block, each with
    dropout and a residual, LayerNorm'd after (or before, norm_first)."""
    attentions = ("self_attn",)

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        return self._sublayers(src, [
            (self.norm1, lambda x: self._attend(self.self_attn, self.dropout1, x, x, src_mask,
                                                src_key_padding_mask, is_causal)),
            (self.norm2, lambda x: self._ff_block(x, self.dropout2))])


class TransformerDecoderLayer(_TransformerLayer):
    """torch.nn.TransformerDecoderLayer: self-attention, attention over the memory
    (multihead_attn), then the feed-forward block, each with dropout and a residual."""
    attentions = ("self_attn", "multihead_attn")

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        return self._sublayers(tgt, [
            (self.norm1, lambda x: self._attend(self.self_attn, self.dropout1, x, x, tgt_mask,
                                                tgt_key_padding_mask, tgt_is_causal)),
            (self.norm2, lambda x: self._attend(self.multihead_attn, self.dropout2, x, memory,
                                                memory_mask, memory_key_padding_mask,
                                                memory_is_causal)),
            (self.norm3, lambda x: self._ff_block(x, self.dropout3))])


class _Stack(Module):
    """num_layers copies of a layer (layers.0, layers.1, ...) and an optional final norm."""

    def __init__(self, layer, num_layers, norm):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def _through(self, x, **kwargs):
        for layer in self.layers:
            x = layer(x, **kwargs)
        return x if self.norm is None else self.norm(x)


class TransformerEncoder(_Stack):
    """torch.nn.TransformerEncoder. (torch's nested-tensor fast path in eval mode zeroes the
    outputs at padded positions; here they are computed, as torch's training path does.)"""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        return self._through(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                             is_causal=bool(is_causal))


class TransformerDecoder(_Stack):
    """torch.nn.TransformerDecoder."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        return self._through(tgt, memory=memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                             tgt_key_padding_mask=tgt_key_padding_mask,
                             memory_key_padding_mask=memory_key_padding_mask,
                             tgt_is_causal=bool(tgt_is_causal),
                             memory_is_causal=memory_is_causal)


class Transformer(Module):
    """torch.nn.Transformer: an encoder and a decoder, each ending in a LayerNorm; every weight of
    two or more dimensions xavier-uniform, as torch's init."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True):
        super().__init__()
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                batch_first, norm_first, bias)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(*args), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(*args), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got "
                               f"{src.shape} and {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"Transformer: the feature number of src and tgt must be equal to "
                               f"d_model {self.d_model}, got {src.shape} and {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """torch's: a float (sz, sz) mask, -inf above the diagonal (the future), 0 elsewhere."""
        dt = default_float() if dtype is None else dtype
        m = np.triu(np.full((sz, sz), -np.inf, dtype=dt), 1)
        t = Tensor(m)
        return t if device is None else t.to(device)


PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """padding_mode 'reflect', 'replicate' or 'circular' pads the input by F.pad in that mode
    and convolves it unpadded, as torch's modules do ('zeros': the convolution's own)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                 bias, weight_shape, padding_mode="zeros"):
        super().__init__()
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"{type(self).__name__}: padding_mode must be one of "
                             f"{list(PADDING_MODES)}, got {padding_mode!r}")
        self.padding_mode = padding_mode
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: in_channels {in_channels} and out_channels "
                             f"{out_channels} must both be divisible by groups {groups}")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"{type(self).__name__}: padding {padding!r} is neither 'valid' "
                                 f"nor 'same' (nor a number)")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError(f"{type(self).__name__}: padding='same' needs stride 1 (as "
                                 f"torch), got stride {stride}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.groups = dilation, groups
        self.weight = Parameter(_empty(*weight_shape))
        self.register_parameter("bias", Parameter(_empty(out_channels)) if bias else None)
        init.default_weight_and_bias_(self.weight, self.bias)

    def extra_repr(self):
        """torch's, in its order (a string padding and padding_mode unquoted, as there)."""
        return options_repr(
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}",
            ("padding", self.padding, isinstance(self.padding, str) or any(self.padding)),
            ("dilation", self.dilation, any(d != 1 for d in self.dilation)),
            ("output_padding", getattr(self, "output_padding", None),
             any(getattr(self, "output_padding", ()))),
            ("groups", self.groups, self.groups != 1),
            ("bias", False, self.bias is None),
            ("padding_mode", self.padding_mode, self.padding_mode != "zeros"))

    def _padded(self, x):
        """(x, the convolution's padding): x padded in padding_mode and 0 where that is not
        'zeros' -- torch's widths: each axis's padding both sides, 'same' split as the
        convolution splits it (the odd one after)."""
        if self.padding_mode == "zeros":
            return x, self.padding
        if self.padding == "valid":
            return x, self.padding
        if self.padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in total]
        else:
            pairs = [(p, p) for p in self.padding]
        widths = tuple(w for pair in reversed(pairs) for w in pair)
        return F.pad(x, widths, mode=self.padding_mode), (0,) * len(pairs)


class Conv2d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros"):
        k = _pair(kernel_size)
        super().__init__(in_channels, out_channels, k, _pair(stride),
                         padding if isinstance(padding, str) else _pair(padding),
                         _pair(dilation), groups, bias, (out_channels, in_channels // groups) + k,
                         padding_mode)

    def forward(self, input):
        input, padding = self._padded(input)
        return F.conv2d(input, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)


class Conv1d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros"):
        one = lambda v: F.single("Conv1d", v)                  # noqa: E731 (torch's (3,) too)
        kernel_size = one(kernel_size)
        super().__init__(in_channels, out_channels, (kernel_size,), (one(stride),),
                         padding if isinstance(padding, str) else (one(padding),),
                         (one(dilation),), groups, bias,
                         (out_channels, in_channels // groups, kernel_size), padding_mode)

    def forward(self, input):
        input, padding = self._padded(input)
        padding = padding if isinstance(padding, str) else padding[0]
        return F.conv1d(input, self.weight, self.bias, self.stride[0], padding,
                        self.dilation[0], self.groups)


class _ConvTransposeNd(_ConvNd):
    """weight (in_channels, out_channels/groups, *kernel_size), as torch; forward(x,
    output_size=) picks the output_padding that gives that size, as torch's."""
    dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding,
                 groups, bias, dilation, padding_mode):
        if padding_mode != "zeros":
            raise ValueError(f"{type(self).__name__}: only the 'zeros' padding mode is supported "
                             f"(as torch), got {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, (in_channels, out_channels // groups) + kernel_size)
        self.output_padding = output_padding

    def _output_padding(self, x, output_size):
        """torch's: output_padding, or, for a requested output_size (its spatial sizes, or the
        whole shape), the one that gives it -- each size within [the smallest transposed size,
        that + stride - 1]."""
        if output_size is None:
            return self.output_padding
        n = self.dims
        size = [int(s) for s in output_size]
        leading = x.ndim - n                     # (N, C; unbatched: C)
        if len(size) == leading + n:
            size = size[leading:]
        if len(size) != n:
            raise ValueError(f"{type(self).__name__}: for {x.ndim}D input, output_size must have "
                             f"{n} or {leading + n} elements (got {len(size)})")
        smallest = [(x.shape[leading + d] - 1) * self.stride[d] - 2 * self.padding[d] +
                    self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(n)]
        largest = [s + t - 1 for s, t in zip(smallest, self.stride)]
        if any(not lo <= s <= hi for s, lo, hi in zip(size, smallest, largest)):
            raise ValueError(f"{type(self).__name__}: requested an output size of {size}, but "
                             f"valid sizes range from {smallest} to {largest} (for an input of "
                             f"{tuple(x.shape[leading:])})")
        return tuple(s - lo for s, lo in zip(size, smallest))


class ConvTranspose1d(_ConvTransposeNd):
    """weight (in_channels, out_channels/groups, k), as torch."""
    dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros"):
        one = lambda v: (F.single("ConvTranspose1d", v),)        # noqa: E731 (torch's (3,) too)
        super().__init__(in_channels, out_channels, one(kernel_size), one(stride), one(padding),
                         one(output_padding), groups, bias, one(dilation), padding_mode)

    def forward(self, input, output_size=None):
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


class ConvTranspose2d(_ConvTransposeNd):
    """weight (in_channels, out_channels/groups, R, S), as torch."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros"):
        super().__init__(in_channels, out_channels, _pair(kernel_size), _pair(stride),
                         _pair(padding), _pair(output_padding), groups, bias, _pair(dilation),
                         padding_mode)

    def forward(self, input, output_size=None):
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)


def _affine_parameters(module, shape, affine, bias=True):
    """A normalization's weight (ones) and bias (zeros) of `shape`, in the default dtype,
    registered in that order (torch's state_dict order), or None where not affine (no bias:
    bias None)."""
    module.register_parameter("weight", Parameter(np.ones(shape, default_float()))
                              if affine else None)
    module.register_parameter("bias", Parameter(np.zeros(shape, default_float()))
                              if affine and bias else None)


def _running_statistics(module, num_features, track):
    """A normalization's buffers running_mean (zeros), running_var (ones), num_batches_tracked
    (0), or each None where it does not track them (torch's _NormBase)."""
    module.register_buffer("running_mean", np.zeros(num_features, default_float())
                           if track else None)
    module.register_buffer("running_var", np.ones(num_features, default_float())
                           if track else None)
    module.register_buffer("num_batches_tracked", np.zeros((), np.int64) if track else None)


class _BatchNorm(Module):
    dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine_parameters(self, num_features, affine, bias)
        _running_statistics(self, num_features, track_running_stats)

    def forward(self, input):
        if input.ndim not in self.dims:
            raise ValueError(f"{type(self).__name__}: expected "
                             f"{' or '.join(map(str, self.dims))}-d input, got shape "
                             f"{input.shape}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.data += 1          # on the device for GPU modules
            if self.momentum is None:                  # cumulative average: needs the count
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch_stats = self.training or not self.track_running_stats
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)

    def param_dtype(self, dtype):
        """float64 for float64 data, else float32: cuDNN's batch norm keeps its statistics and
        affine parameters in float32 for float32, float16 and bfloat16 data."""
        return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    dims = (4,)


class Embedding(Module):
    """torch.nn.Embedding: weight (num_embeddings, embedding_dim) drawn N(0, 1), padding_idx's
    row zero and without gradient (a negative one counts from the end, kept as torch keeps it),
    max_norm / norm_type renorming the rows used, scale_grad_by_freq (F.embedding)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within "
                                 f"num_embeddings {num_embeddings} (as torch)")
            padding_idx %= num_embeddings
        if sparse:
            raise NotImplementedError("Embedding: sparse gradients are not done here "
                                      "(docs/from_pytorch.md)")
        self.num_embeddings, self.embedding_dim, self.padding_idx = \
            num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.weight = Parameter(_empty(num_embeddings, embedding_dim))
        init.normal_(self.weight)
        if padding_idx is not None:
            self.weight.data[padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq)

    def extra_repr(self):
        return options_repr(f"{self.num_embeddings}, {self.embedding_dim}",
                            ("padding_idx", self.padding_idx, self.padding_idx is not None),
                            ("max_norm", self.max_norm, self.max_norm is not None),
                            ("norm_type", self.norm_type, self.norm_type != 2),
                            ("scale_grad_by_freq", True, self.scale_grad_by_freq))

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """torch's: an Embedding whose weight is `embeddings` (rows, dim) -- the same memory, as
        torch's -- trained unless freeze."""
        weight = Parameter(embeddings.data if isinstance(embeddings, Tensor) else embeddings,
                           requires_grad=not freeze)
        if weight.ndim != 2:
            raise ValueError(f"Embeddings parameter is expected to be 2-dimensional (as torch), "
                             f"got shape {weight.shape}")
        m = cls(*weight.shape, padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
        m.weight = weight
        return m


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()          # (inplace is accepted for torch compatibility)
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p} (as "
                             f"torch)")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """torch's: whole channels of (N, C, L) / (C, L) input dropped (F.dropout1d)."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(Dropout):
    """torch's: whole channels dropped (F.dropout2d)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training)


class Dropout3d(Dropout):
    """torch's: whole channels of (N, C, D, H, W) / (C, D, H, W) input dropped (F.dropout3d)."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training)


class ReLU(Module):
    finite_preserving = True        # finite in, finite out (layers.finite skips a re-check)

    def __init__(self, inplace=False):
        super().__init__()          # (inplace is accepted for torch compatibility)
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope   # inplace is accepted for torch compatibility
        self.inplace = inplace

    @property
    def finite_preserving(self):
        """A slope beyond +-1 can take a finite input past the largest float."""
        return abs(self.negative_slope) <= 1

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class GELU(Module):
    finite_preserving = True

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class _Activation(Module):
    """An activation of layers.functional with keyword settings (torch's module form)."""
    fn, settings = None, ()

    def __init__(self, *args, **kwargs):
        super().__init__()
        names = [n for n, _ in self.settings]
        values = dict(self.settings)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes {len(names)} positional arguments")
        values.update(zip(names, args))
        for k, v in kwargs.items():
            if k != "inplace" and k not in values:
                raise TypeError(f"{type(self).__name__}: unexpected argument {k!r}")
            values[k] = v
        values.pop("inplace", None)         # (accepted for torch's spelling; results are new)
        self._values = values
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def forward(self, input):
        return type(self).fn(input, **self._values)

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._values.items())


class SiLU(_Activation):
    fn, settings = staticmethod(F.silu), (("inplace", False),)


class Mish(_Activation):
    fn, settings = staticmethod(F.mish), (("inplace", False),)


class ELU(_Activation):
    fn, settings = staticmethod(F.elu), (("alpha", 1.0), ("inplace", False))


class Softplus(_Activation):
    fn, settings = staticmethod(F.softplus), (("beta", 1.0), ("threshold", 20.0))


class Hardtanh(_Activation):
    fn, settings = staticmethod(F.hardtanh), (("min_val", -1.0), ("max_val", 1.0),
                                              ("inplace", False))


class ReLU6(_Activation):
    fn, settings = staticmethod(F.relu6), (("inplace", False),)


class LogSigmoid(_Activation):
    fn, settings = staticmethod(F.logsigmoid), ()


class Tanh(Module):
    finite_preserving = True

    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    """With float32=True (train.common.set_precision sets it for bf16 models) a bfloat16 or
    float16 input is computed and returned in float32, as autocast keeps a loss's inputs. In
    bfloat16 (8 significant bits) sigmoid(x) rounds to exactly 1 for x above ~5.5; binary
    cross-entropy's gradient toward 0 there is its clamp's 1 / 1e-12, which the sigmoid's
    gradient (taken from x for half data) turns into ~1e8: a bf16 DCGAN discriminator blew up so
    after ~100 steps of MNIST (H100, 2026-11-23)."""
    finite_preserving = True

    def __init__(self, float32=False):
        super().__init__()
        self.float32 = float32

    def extra_repr(self):
        return "float32=True" if self.float32 else ""

    def forward(self, input):
        if self.float32 and is_half(input.dtype):
            input = input.astype(np.float32)
        return F.sigmoid(input)


class Flatten(Module):
    """torch.nn.Flatten: dims start_dim..end_dim as one (1..-1: all but the batch axis)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Upsample(Module):
    """torch.nn.Upsample (F.interpolate: nearest, nearest-exact, linear, bilinear)."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):
        """torch's: the scale factor as floats (as it stores them), else the size."""
        sf = self.scale_factor
        if sf is not None:
            sf = tuple(float(f) for f in sf) if isinstance(sf, tuple) else float(sf)
            what = f"scale_factor={sf!r}"
        else:
            what = f"size={self.size!r}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    """torch's: bilinear with align_corners=True."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", align_corners=True)


class MaxPool2d(Module):
    """torch.nn.MaxPool2d (F.max_pool2d: composed of slices and a max, both paths)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """torch.nn.AvgPool2d (F.avg_pool2d)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool1d(MaxPool2d):
    """torch.nn.MaxPool1d (F.max_pool1d)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool1d(AvgPool2d):
    """torch.nn.AvgPool1d (F.avg_pool1d)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self):               # (torch's: one-element tuples, as it stores them)
        one = lambda v: v if isinstance(v, tuple) else (v,)          # noqa: E731
        return (f"kernel_size={one(self.kernel_size)}, stride={one(self.stride)}, "
                f"padding={one(self.padding)}")


class _AdaptivePool(Module):
    function = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return type(self).function(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_AdaptivePool):
    """torch.nn.AdaptiveAvgPool2d (F.adaptive_avg_pool2d)."""
    function = staticmethod(F.adaptive_avg_pool2d)


class AdaptiveMaxPool2d(_AdaptivePool):
    """torch.nn.AdaptiveMaxPool2d's values (F.adaptive_max_pool2d; no return_indices)."""
    function = staticmethod(F.adaptive_max_pool2d)


class AdaptiveAvgPool1d(_AdaptivePool):
    """torch.nn.AdaptiveAvgPool1d (F.adaptive_avg_pool1d)."""
    function = staticmethod(F.adaptive_avg_pool1d)


class Identity(Module):
    """torch.nn.Identity: its input (any arguments of the constructor taken, as torch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Softmax(Module):
    """torch.nn.Softmax; dim=None takes torch's implicit axis: 0 for a 0-, 1- or 3-d input,
    else 1."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def _axis(self, x):
        return self.dim if self.dim is not None else F.implicit_softmax_dim(x.ndim)

    def extra_repr(self):
        return f"dim={self.dim}"

    def forward(self, input):
        return F.softmax(input, dim=self._axis(input))


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, dim=self._axis(input))


class LayerNorm(Module):
    """torch.nn.LayerNorm: weight (ones) and bias (zeros) of normalized_shape (F.layer_norm)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else \
            tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, shape, elementwise_affine, bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """torch.nn.GroupNorm: weight (ones) and bias (zeros) of num_channels (F.group_norm)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by "
                             f"num_groups {num_groups} (as torch)")
        self.num_groups, self.num_channels, self.eps, self.affine = \
            num_groups, num_channels, eps, affine
        _affine_parameters(self, num_channels, affine, bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(Module):
    """torch's InstanceNorm1d / 2d: each sample's statistics per channel (F.instance_norm);
    affine=True adds weight (ones) and bias (zeros). track_running_stats=True keeps running
    statistics (buffers running_mean, running_var and num_batches_tracked, which instance norm
    never counts up, as torch's) moved toward each training batch's, and normalises with them in
    evaluation; momentum None leaves them as they are (torch's)."""
    dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum, self.affine = \
            num_features, eps, momentum, affine
        self.track_running_stats = track_running_stats
        _affine_parameters(self, num_features, affine, bias)
        _running_statistics(self, num_features, track_running_stats)

    def forward(self, input):
        batched = self.dims[-1]
        if input.ndim == batched - 1:             # unbatched (C, ...), as torch's: a batch of 1
            return F.squeeze(self.forward(F.unsqueeze(input, 0)), 0)
        if input.ndim != batched or input.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): expected "
                             f"{batched}-d input (or {batched - 1}-d, unbatched) with "
                             f"{self.num_features} channels, got shape {input.shape}")
        if not self.track_running_stats:
            return F.instance_norm(input, weight=self.weight, bias=self.bias, eps=self.eps)
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training, 0.0 if self.momentum is None else self.momentum,
                               self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    dims = (3,)


class InstanceNorm2d(_InstanceNorm):
    dims = (4,)


class NLLLoss(Module):
    """torch.nn.NLLLoss: `weight` (C,) a buffer, as CrossEntropyLoss's."""

    def __init__(self, weight=None, *, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class _Loss(Module):
    """torch's loss modules' arguments: size_average and reduce (deprecated there) refused,
    reduction kept."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        F._legacy_reduction(type(self).__name__, size_average, reduce)
        self.reduction = reduction


class BCELoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, self.reduction, self.log_target)


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss: `weight` (C,) is a buffer (in state_dict, moved by .to())."""

    def __init__(self, weight=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


__all__ = ["Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "GELU", "SiLU",
           "Mish", "ELU", "Softplus", "Hardtanh", "ReLU6", "LogSigmoid", "Linear", "Conv1d",
           "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d",
           "Embedding", "Dropout",
           "Dropout1d", "Dropout2d", "Dropout3d", "ReLU", "LeakyReLU", "Tanh", "Sigmoid",
           "Flatten", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "MaxPool2d",
           "AvgPool2d", "MaxPool1d",
           "AvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AdaptiveAvgPool1d", "Identity",
           "Softmax", "LogSoftmax", "LayerNorm", "NLLLoss", "BCELoss", "BCEWithLogitsLoss",
           "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss", "CrossEntropyLoss",
           "LSTM", "LSTMCell", "GRU", "GRUCell", "RNN", "RNNCell", "MultiheadAttention",
           "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer", "utils"]


class _Stateless:
    """torch.nn.utils.stateless: functional_call (layers.func's)."""

    @staticmethod
    def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                        tie_weights=True, strict=False):
        from .func import functional_call
        return functional_call(module, parameter_and_buffer_dicts, args, kwargs,
                               tie_weights=tie_weights, strict=strict)


class _Utils:
    """torch.nn.utils' spelling of what layers.optim has: nn.utils.clip_grad_norm_ and
    clip_grad_value_; nn.utils.rnn (layers.rnn_utils: packing padded sequences);
    nn.utils.stateless.functional_call (layers.func's); weight_norm and spectral_norm
    (layers.weight_norms)."""

    rnn = rnn_utils
    stateless = _Stateless()
    parametrize = parametrize
    parametrizations = parametrizations

    def __getattr__(self, name):
        raise AttributeError(f"nn.utils has no attribute {name!r}")
    weight_norm = staticmethod(weight_norms.weight_norm)
    remove_weight_norm = staticmethod(weight_norms.remove_weight_norm)
    spectral_norm = staticmethod(weight_norms.spectral_norm)
    remove_spectral_norm = staticmethod(weight_norms.remove_spectral_norm)

    @staticmethod
    def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                        foreach=None):
        from .optim import clip_grad_norm_
        return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)

    @staticmethod
    def clip_grad_value_(parameters, clip_value, foreach=None):
        from .optim import clip_grad_value_
        return clip_grad_value_(parameters, clip_value, foreach)

    @staticmethod
    def parameters_to_vector(parameters):
        """The parameters flattened and joined into one vector (in the graph, as torch's)."""
        return F.concat([F.reshape(p, (-1,)) for p in parameters], 0)

    @staticmethod
    def vector_to_parameters(vec, parameters):
        """Each parameter's data replaced by its slice of vec, in order (as torch's; the slices
        are copied in, recorded as in-place changes)."""
        if vec.ndim != 1:
            raise TypeError(f"vector_to_parameters: expected a 1-d vector, got shape {vec.shape}")
        parameters = list(parameters)
        if vec.shape[0] != sum(p.size for p in parameters):
            raise ValueError(f"vector_to_parameters: a vector of {vec.shape[0]} values for "
                             f"parameters of {sum(p.size for p in parameters)}")
        start = 0
        with F.no_grad():
            for p in parameters:
                p.copy_(F.reshape(vec[start:start + p.size], p.shape))
                start += p.size


utils = _Utils()
functional = F
# torch's import paths (this module is not a package: the submodules are registered by name)
sys.modules[__name__ + ".functional"] = F
sys.modules[__name__ + ".utils"] = utils
sys.modules[__name__ + ".utils.rnn"] = rnn_utils
sys.modules[__name__ + ".utils.stateless"] = utils.stateless

"""nn.utils.rnn (pad_sequence, pack_padded_sequence, pad_packed_sequence, pack_sequence) and the
recurrent layers on packed input, against torch's, values and gradients."""
import numpy as np
import pytest
import torch

import layers as L
from reference import rel_err

U, TU = L.nn.utils.rnn, torch.nn.utils.rnn
TOL = 1e-5
# "host": the GPU path on the CPU (conftest's `where`), its cuDNN RNN the reference recurrence
DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]


def _pair(shape, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return L.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _same(ours, theirs, tol=0.0):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert ours.shape == theirs.shape
    assert rel_err(ours.numpy(), theirs) <= tol


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths,enforce_sorted", [([5, 3, 3, 1], True), ([2, 5, 3, 5], False),
                                                    ([1, 1, 4, 2], False)])
def test_pack_padded_sequence_is_torchs(batch_first, lengths, enforce_sorted):
    x, tx = _pair((4, 6, 3) if batch_first else (6, 4, 3))
    p = U.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    tp = TU.pack_padded_sequence(tx, torch.tensor(lengths), batch_first=batch_first,
                                 enforce_sorted=enforce_sorted)
    _same(p.data, tp.data)
    _same(p.batch_sizes, tp.batch_sizes)
    for ours, theirs in ((p.sorted_indices, tp.sorted_indices),
                         (p.unsorted_indices, tp.unsorted_indices)):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            _same(ours, theirs)
    w = np.random.default_rng(1).standard_normal(tp.data.shape).astype(np.float32)
    (p.data * L.tensor(w)).sum().backward()
    (tp.data * torch.tensor(w)).sum().backward()
    _same(x.grad, tx.grad)
    # and back, in the other layout, longer, with another padding value
    for total, value in ((None, 0.0), (8, -2.5)):
        y, n = U.pad_packed_sequence(p, batch_first=not batch_first, padding_value=value,
                                     total_length=total)
        ty, tn = TU.pad_packed_sequence(tp, batch_first=not batch_first, padding_value=value,
                                        total_length=total)
        _same(y, ty)
        _same(n, tn)


def test_pad_packed_sequence_gradient_and_cropping():
    """pad_packed_sequence of a batch padded longer than its longest sequence crops it, and
    sends gradients back only to the steps within each length."""
    x, tx = _pair((7, 3, 2))
    lengths = [4, 2, 3]
    y, _ = U.pad_packed_sequence(U.pack_padded_sequence(x, lengths, enforce_sorted=False))
    ty, _ = TU.pad_packed_sequence(TU.pack_padded_sequence(tx, lengths, enforce_sorted=False))
    _same(y, ty)
    w = np.random.default_rng(2).standard_normal(ty.shape).astype(np.float32)
    (y * L.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    _same(x.grad, tx.grad)


@pytest.mark.parametrize("batch_first,value,side", [(False, 0.0, "right"), (True, -1.0, "right"),
                                                    (True, 3.0, "left")])
def test_pad_sequence_and_pack_sequence_are_torchs(batch_first, value, side):
    pairs = [_pair((n, 2, 3), seed=n) for n in (3, 5, 1)]
    y = U.pad_sequence([p[0] for p in pairs], batch_first, value, side)
    ty = TU.pad_sequence([p[1] for p in pairs], batch_first, value, side)
    _same(y, ty)
    w = np.random.default_rng(3).standard_normal(ty.shape).astype(np.float32)
    (y * L.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for ours, theirs in pairs:
        _same(ours.grad, theirs.grad)
    p = U.pack_sequence([q[0] for q in pairs], enforce_sorted=False)
    tp = TU.pack_sequence([q[1] for q in pairs], enforce_sorted=False)
    _same(p.data, tp.data)
    _same(p.batch_sizes, tp.batch_sizes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch_first,bi", [(False, True), (True, False)])
def test_recurrent_layers_on_packed_input_are_torchs(kind, batch_first, bi, device, where,
                                                     monkeypatch):
    """The encoder pattern of NVIDIA's Tacotron 2: pack, run, pad back; the padding of the input
    is NaN, which packing keeps out of every result, as torch's."""
    if device == "host":
        monkeypatch.setattr(L.rnn.RNNBase, "_forward_cudnn", L.rnn.RNNBase._forward_reference)
    device = where
    torch.manual_seed(0)
    t = getattr(torch.nn, kind)(3, 4, 2, batch_first=batch_first, bidirectional=bi)
    m = getattr(L.nn, kind)(3, 4, 2, batch_first=batch_first, bidirectional=bi)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    m.to(device)
    lengths = [4, 6, 2]
    a = np.random.default_rng(4).standard_normal((3, 6, 3) if batch_first else (6, 3, 3))
    for b, n in enumerate(lengths):
        (a[b, n:] if batch_first else a[n:, b])[...] = np.nan
    a = a.astype(np.float32)
    D = 2 if bi else 1
    h0 = np.random.default_rng(5).standard_normal((2 * D, 3, 4)).astype(np.float32)
    results = []
    for mod, lib, tensor in ((t, TU, lambda v: torch.tensor(v, requires_grad=True)),
                             (m, U, lambda v: L.tensor(v, device=device, requires_grad=True))):
        x, h = tensor(a), tensor(h0)
        packed = lib.pack_padded_sequence(x, lengths, batch_first=batch_first,
                                          enforce_sorted=False)
        out, finals = mod(packed, (h, h * 0.5) if kind == "LSTM" else h)
        y, n = lib.pad_packed_sequence(out, batch_first=batch_first)
        finals = list(finals) if kind == "LSTM" else [finals]
        loss = (y * y).sum() + sum((f * f).sum() * 0.3 for f in finals)
        loss.backward()
        grads = [x.grad, h.grad] + [p.grad for p in mod.parameters()]
        results.append([y, out.data] + finals + grads)
    for i, (theirs, ours) in enumerate(zip(*results)):
        theirs = np.nan_to_num(theirs.detach().numpy(), nan=0.0)   # (torch's x.grad: 0 there)
        assert np.isfinite(ours.numpy()).all(), i
        assert rel_err(ours.numpy(), theirs) < TOL, i


def test_packing_keeps_the_dtype_and_is_a_four_tuple_as_torchs():
    """The captioning idiom: pack integer targets, take [0] (the packed rows), as class indices."""
    caps = np.array([[3, 1, 4, 1], [5, 9, 2, 0]], np.int64)
    for dtype in (np.int64, np.int32, bool):
        p = U.pack_padded_sequence(L.tensor(caps.astype(dtype)), [4, 3], batch_first=True)
        tp = TU.pack_padded_sequence(torch.tensor(caps.astype(dtype)), [4, 3], batch_first=True)
        assert p[0].dtype == dtype and len(p) == len(tp) == 4
        np.testing.assert_array_equal(p[0].numpy(), tp[0].numpy())
        y, _ = U.pad_packed_sequence(p, batch_first=True, padding_value=-1)
        ty, _ = TU.pad_packed_sequence(tp, batch_first=True, padding_value=-1)
        assert y.dtype == dtype
        np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert p.double().padded.dtype == np.float64 and p.cpu().padded.device == "cpu"
    with pytest.raises(RuntimeError, match="value -1 cannot be converted to type uint8"):
        U.pad_sequence([L.tensor(np.array([1, 2], np.uint8)), L.tensor(np.array([3], np.uint8))],
                       padding_value=-1)                  # (it padded with 255)


def test_unpad_and_unpack_sequence_are_torchs():
    x, tx = _pair((6, 3, 2))
    lengths = [4, 6, 1]
    ours = U.unpad_sequence(x, lengths)
    theirs = TU.unpad_sequence(tx.detach(), torch.tensor(lengths))   # (torch's: not a leaf)
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        _same(a, b)
    seqs = [_pair((n, 2), seed=n) for n in (2, 5, 3)]
    ours = U.unpack_sequence(U.pack_sequence([q[0] for q in seqs], enforce_sorted=False))
    theirs = TU.unpack_sequence(TU.pack_sequence([q[1] for q in seqs], enforce_sorted=False))
    w = [np.random.default_rng(k).standard_normal(b.shape).astype(np.float32)
         for k, b in enumerate(theirs)]
    sum((a * L.tensor(c)).sum() for a, c in zip(ours, w)).backward()
    sum((b * torch.tensor(c)).sum() for b, c in zip(theirs, w)).backward()
    for a, b in zip(ours, theirs):
        _same(a, b)
    for a, b in seqs:
        _same(a.grad, b.grad)


def test_torchs_import_paths_work_in_a_fresh_interpreter():
    import subprocess
    import sys
    code = ("import layers.nn.functional as F; from layers.nn.utils.rnn import pad_sequence; "
            "from layers.nn.utils import clip_grad_norm_; import layers as L; "
            "assert F is L.F and pad_sequence is L.nn.utils.rnn.pad_sequence "
            "and L.nn.functional is L.F; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_packing_misuse_is_refused_as_torch():
    x = L.tensor(np.zeros((5, 3, 2), np.float32))
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        U.pack_padded_sequence(x, [2, 5, 3])
    with pytest.raises(RuntimeError, match="Length of all samples has to be greater than 0"):
        U.pack_padded_sequence(x, [5, 0, 3], enforce_sorted=False)
    with pytest.raises(ValueError, match=r"lengths \[5, 6, 3\] run past the input's 5 steps"):
        U.pack_padded_sequence(x, [5, 6, 3], enforce_sorted=False)
    with pytest.raises(ValueError, match="expected 2 sequences along axis 1"):
        U.pack_padded_sequence(x, [5, 3])
    p = U.pack_padded_sequence(x, [5, 3, 2])
    q = p.to(L.float64)
    assert q.padded.dtype == np.float64 and q.lengths == p.lengths and not q.is_cuda
    with pytest.raises(NotImplementedError, match="not from packed rows"):
        U.PackedSequence(p.data, p.batch_sizes)
    with pytest.raises(TypeError, match="expected a PackedSequence, got Tensor"):
        U.pad_packed_sequence(x)
    with pytest.raises(ValueError, match="total_length=4 and max sequence length being 5"):
        U.pad_packed_sequence(p, total_length=4)
    with pytest.raises(TypeError, match="a PackedSequence carries its own lengths"):
        L.nn.GRU(2, 3)(p, lengths=[5, 3, 2])
    with pytest.raises(TypeError, match="lengths must be integers"):
        U.pack_padded_sequence(x, [5.0, 3.5, 2.0])

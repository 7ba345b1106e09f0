"""torch.nn.utils.rnn, as `L.nn.utils.rnn`: pad_sequence, pack_padded_sequence,
pad_packed_sequence, pack_sequence, unpad_sequence, unpack_sequence and PackedSequence, so torch
code that packs its batches runs unchanged.

cuDNN's RNN takes padded sequences with one length each (padded I/O), so a PackedSequence here
keeps the padded batch and its lengths, and the recurrent layers run on those; torch's packed
rows (`.data`, time-major, longest sequences first) are gathered from them only when read.
"""
import operator

import numpy as np

from . import functional as F
from .creation import full_like, zeros_like
from .tensor import Tensor


def _host_lengths(fn, lengths):
    """lengths as a list of Python ints: a list, a NumPy array or a CPU Tensor (torch's rule: not
    a device one)."""
    if isinstance(lengths, Tensor):
        if lengths.device != "cpu":
            raise RuntimeError(f"{fn}: 'lengths' argument should be a 1D CPU int64 tensor, but got "
                               f"{lengths.ndim}D {lengths.device} tensor (the recurrent layers "
                               f"take device lengths directly: lstm(x, lengths=lengths))")
        lengths = lengths.data
    if isinstance(lengths, np.ndarray) and lengths.ndim != 1:
        raise ValueError(f"{fn}: lengths must be 1-d, got shape {lengths.shape}")
    try:
        return [operator.index(n) for n in lengths]
    except TypeError:
        raise TypeError(f"{fn}: lengths must be integers, got {list(lengths)}") from None


class PackedSequence:
    """torch.nn.utils.rnn.PackedSequence as pack_padded_sequence makes it: `data` (the packed
    rows, sum(lengths) x features), `batch_sizes` (sequences still running at each step),
    `sorted_indices` / `unsorted_indices` (None when the batch came sorted, enforce_sorted).
    Recurrent layers take it and give one back; pad_packed_sequence undoes it. Made by those
    (PackedSequence.of), not from packed rows: PackedSequence(data, batch_sizes) is refused."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("PackedSequence(data, batch_sizes, ...): a packed sequence is "
                                  "made here by pack_padded_sequence / pack_sequence (it keeps "
                                  "the padded batch cuDNN runs on), not from packed rows")

    @classmethod
    def of(cls, padded, lengths, batch_first, sorted_indices):
        """The sequences of `padded` (zero past each length), lengths host ints."""
        self = object.__new__(cls)
        self.padded, self.lengths, self.batch_first = padded, lengths, batch_first
        self.sorted_indices = sorted_indices
        self.unsorted_indices = None if sorted_indices is None else \
            Tensor(np.argsort(sorted_indices.data, kind="stable"))
        return self

    @property
    def batch_sizes(self):
        n = np.asarray(self.lengths)
        return Tensor(np.array([(n > t).sum() for t in range(n.max())], np.int64))

    @property
    def data(self):
        """The packed rows: at each step t, the sequences longer than t, longest first."""
        order = np.arange(len(self.lengths)) if self.sorted_indices is None else \
            self.sorted_indices.data
        n = np.asarray(self.lengths)[order]
        t_idx = np.concatenate([np.full((n > t).sum(), t) for t in range(n.max())])
        b_idx = np.concatenate([order[n > t] for t in range(n.max())])
        if self.batch_first:
            t_idx, b_idx = b_idx, t_idx
        return self.padded[t_idx.tolist(), b_idx.tolist()]

    def __iter__(self):           # torch's is a namedtuple of these four
        return iter((self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices))

    def __getitem__(self, i):
        return tuple(self)[i]

    def __len__(self):
        return 4

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    def to(self, *args, **kwargs):
        """The same sequence with its padded batch moved / cast by Tensor.to."""
        return PackedSequence.of(self.padded.to(*args, **kwargs), self.lengths,
                                 self.batch_first, self.sorted_indices)

    @property
    def is_cuda(self):
        return self.padded.device != "cpu"

    def __repr__(self):
        return (f"PackedSequence(lengths={self.lengths}, padded={tuple(self.padded.shape)}, "
                f"batch_first={self.batch_first}, device={self.padded.device})")


def _valid(lengths, T, batch_first, like, extra_dims):
    """A boolean mask (T, B, 1...) / (B, T, 1...) of the steps within each length, on like's
    device."""
    m = np.arange(T)[:, None] < np.asarray(lengths)[None, :]
    if batch_first:
        m = m.T
    m = m.reshape(m.shape + (1,) * extra_dims)
    return Tensor(m).to(like.device)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """torch's: input (T, B, *) (batch_first: (B, T, *)) padded past each of its B lengths, which
    are host ints (a list, a CPU tensor), in decreasing order unless enforce_sorted=False. Steps
    past a length are not part of the sequence: they are zeroed here, so they reach nothing."""
    fn = "pack_padded_sequence"
    lengths = _host_lengths(fn, lengths)
    T_axis, B_axis = (1, 0) if batch_first else (0, 1)
    if input.ndim < 2 or input.shape[B_axis] != len(lengths):
        raise ValueError(f"{fn}: expected {len(lengths)} sequences along axis {B_axis} of input "
                         f"{tuple(input.shape)} (batch_first={batch_first}), one per length")
    if lengths and min(lengths) <= 0:
        raise RuntimeError(f"{fn}: Length of all samples has to be greater than 0, but found an "
                           f"element in 'lengths' that is <= 0: {lengths}")
    T = input.shape[T_axis]
    if lengths and max(lengths) > T:
        raise ValueError(f"{fn}: lengths {lengths} run past the input's {T} steps")
    sorted_indices = None
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise RuntimeError(f"{fn}: `lengths` array must be sorted in decreasing order when "
                               f"`enforce_sorted` is True (got {lengths}). You can pass "
                               f"`enforce_sorted=False` to pack_padded_sequence and/or "
                               f"pack_sequence to sidestep this requirement.")
    else:
        sorted_indices = Tensor(np.argsort(-np.asarray(lengths), kind="stable").astype(np.int64))
    padded = input
    if min(lengths) < T:
        padded = F.where(_valid(lengths, T, batch_first, input, input.ndim - 2), input,
                         zeros_like(input))                           # (input's dtype kept)
    return PackedSequence.of(padded, lengths, batch_first, sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """torch's: (padded, lengths) of a PackedSequence -- padded (T, B, *) (batch_first:
    (B, T, *)) with T the longest length or total_length, padding_value past each length;
    lengths an int64 CPU tensor, in the batch's own order."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got "
                        f"{type(sequence).__name__}")
    lengths = sequence.lengths
    longest = max(lengths)
    if total_length is not None and total_length < longest:
        raise ValueError(f"pad_packed_sequence: Expected total_length to be at least the length "
                         f"of the longest sequence in input, but got total_length={total_length} "
                         f"and max sequence length being {longest}")
    T = longest if total_length is None else total_length
    x = sequence.padded
    if sequence.batch_first != batch_first:
        x = F.transpose(x, 1, 0, *range(2, x.ndim))
    T_axis = 1 if batch_first else 0
    have = x.shape[T_axis]
    if have != T:                                  # crop to the longest, or pad to total_length
        widths = [0, 0] * (x.ndim - T_axis - 1) + [0, T - have]
        x = F.pad(x, widths)
    if padding_value != 0:       # (past each length: zeros already, packing put them there)
        x = F.where(_valid(lengths, T, batch_first, x, x.ndim - 2), x,
                    full_like(x, padding_value))          # (in x's dtype, as torch's fill_)
    return x, Tensor(np.array(lengths, np.int64))


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """torch's: a list of (L_i, *) tensors as one (max L, B, *) (batch_first: (B, max L, *)),
    padding_value after each (padding_side='left': before)."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    trailing = {tuple(s.shape[1:]) for s in sequences}
    if len(trailing) > 1 or any(s.ndim == 0 for s in sequences):
        raise ValueError(f"pad_sequence: every sequence must be (L, *) with one trailing shape, "
                         f"got {[tuple(s.shape) for s in sequences]}")
    T = max(s.shape[0] for s in sequences)
    rows = []
    for s in sequences:
        extra = T - s.shape[0]
        widths = [0, 0] * (s.ndim - 1) + ([0, extra] if padding_side == "right" else [extra, 0])
        rows.append(F.pad(s, widths, value=padding_value) if extra else s)
    return F.stack(rows, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted=True):
    """torch's: pack_padded_sequence of pad_sequence(sequences)."""
    sequences = list(sequences)
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences],
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """torch's: the list of each sequence's first lengths[b] steps of a padded batch."""
    lengths = _host_lengths("unpad_sequence", lengths)
    x = padded_sequences if batch_first else F.transpose(
        padded_sequences, 1, 0, *range(2, padded_sequences.ndim))
    if x.shape[0] != len(lengths):
        raise ValueError(f"unpad_sequence: {len(lengths)} lengths for a batch of {x.shape[0]}")
    return [x[b, :n] for b, n in enumerate(lengths)]


def unpack_sequence(packed_sequences):
    """torch's: the list of the sequences of a PackedSequence, in the batch's own order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)

"""torch.einsum: Einstein summation, composed of the engine's own differentiable ops -- a
diagonal by indexing, sums, permutations, reshapes and batched matrix products (cuBLASLt on a
GPU) -- so it runs on both paths and its gradient is theirs.

    einsum("bhqd,bhkd->bhqk", q, k)       attention scores
    einsum("ii->i", a)                    a diagonal
    einsum("...ij,...jk", a, b)           batched matmul, the batch axes broadcast

The operands are contracted left to right, two at a time: labels both share and need later are
batch axes, labels both share and nobody needs are summed by the product, the rest are its rows
and columns. A label of size 1 in one operand broadcasts against the other's, as torch's.
"""
import math
import string

import numpy as np

from . import functional as F
from .tensor import Tensor

LETTERS = string.ascii_uppercase + string.ascii_lowercase    # torch's labels, in the order of
#                                                             an implicit output (A-Z, a-z)


def _parse(equation, operands):
    """Each operand's labels and the output's, as lists of ints: a letter its index in LETTERS,
    the ellipsis's axes -1 ... -E (right-aligned: the last ellipsis axis is -1 in every
    operand)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum(): {equation!r} has {len(terms)} operand term(s), got "
                         f"{len(operands)} operand(s)")
    E = 0
    labels = []
    for k, (term, x) in enumerate(zip(terms, operands)):
        letters = term.replace("...", "")
        if term.count("...") > 1 or "." in letters:
            raise ValueError(f"einsum(): operand {k} term {term!r} has more than one ellipsis or "
                             f"a stray '.'")
        bad = [c for c in letters if c not in LETTERS]
        if bad:
            raise ValueError(f"einsum(): invalid subscript {bad[0]!r} in {equation!r}: labels "
                             f"are letters [a-zA-Z]")
        n_ell = x.ndim - len(letters)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise ValueError(f"einsum(): the number of subscripts in operand {k}'s term {term!r} "
                             f"does not match its {x.ndim} dimensions")
        E = max(E, n_ell)
        before, _, after = term.partition("...")
        labels.append([LETTERS.index(c) for c in before] + list(range(-n_ell, 0))
                      + [LETTERS.index(c) for c in after])
    if arrow:
        letters = rhs.replace("...", "")
        if rhs.count("...") > 1 or "." in letters or any(c not in LETTERS for c in letters):
            raise ValueError(f"einsum(): invalid output term {rhs!r} in {equation!r}")
        if len(set(letters)) != len(letters):
            raise ValueError(f"einsum(): output term {rhs!r} repeats a label")
        seen = {c for term in terms for c in term}
        missing = [c for c in letters if c not in seen]
        if missing:
            raise ValueError(f"einsum(): output label {missing[0]!r} appears in no operand of "
                             f"{equation!r}")
        before, ell, after = rhs.partition("...")
        if E and not ell:
            ell_out = []            # (torch: the ellipsis axes summed when the output omits it)
        else:
            ell_out = list(range(-E, 0))
        out = [LETTERS.index(c) for c in before] + ell_out + [LETTERS.index(c) for c in after]
    else:                           # implicit: the ellipsis, then the labels used once, sorted
        counts = {}
        for term in labels:
            for lab in term:
                if lab >= 0:
                    counts[lab] = counts.get(lab, 0) + 1
        out = list(range(-E, 0)) + sorted(lab for lab, n in counts.items() if n == 1)
    return labels, out


def _name(lab):
    return "..." if lab < 0 else LETTERS[lab]


def _diagonal(x, labels):
    """x with each repeated label taken once, on the diagonal of its axes."""
    labels = list(labels)
    while len(set(labels)) < len(labels):
        lab = next(lab for lab in labels if labels.count(lab) > 1)
        i, j = [k for k, other in enumerate(labels) if other == lab][:2]
        if x.shape[i] != x.shape[j]:
            raise ValueError(f"einsum(): subscript {_name(lab)!r} is repeated for an operand "
                             f"but the sizes don't match, {x.shape[i]} != {x.shape[j]}")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        x = F.transpose(x, tuple(rest + [i, j]))
        idx = np.arange(x.shape[-1])
        x = x[..., idx, idx]                         # (..., n): the diagonal, last
        labels = [labels[k] for k in rest] + [lab]
    return x, labels


def _sum_out(x, labels, drop):
    """x with the axes of the labels in `drop` summed."""
    axes = tuple(k for k, lab in enumerate(labels) if lab in drop)
    if not axes:
        return x, labels
    return F.sum(x, dim=axes), [lab for lab in labels if lab not in drop]


def _permuted(x, labels, order):
    perm = [labels.index(lab) for lab in order]
    if perm != list(range(len(perm))):
        x = F.transpose(x, tuple(perm))
    return x


def _contract(a, la, b, lb, keep):
    """The product of a (labels la) and b (lb), keeping the labels in `keep`: shared kept labels
    are batch axes (matmul broadcasts a size 1), shared others are summed by the product; the
    result's labels are batch, then a's own, then b's own."""
    sizes = {}
    for x, labels in ((a, la), (b, lb)):
        for n, lab in zip(x.shape, labels):
            if lab in sizes and 1 not in (n, sizes[lab]) and n != sizes[lab]:
                raise ValueError(f"einsum(): operands do not broadcast: subscript "
                                 f"{_name(lab)!r} has sizes {sizes[lab]} and {n}")
            sizes[lab] = n if lab not in sizes or sizes[lab] == 1 else sizes[lab]
    shared = [lab for lab in la if lab in lb]
    # a summed label of size 1 on one side broadcasts: sum(a_i b_i) = a_0 sum(b_i), so each
    # side sums its own axis of it first
    apart = {lab for lab in shared if lab not in keep and
             a.shape[la.index(lab)] != b.shape[lb.index(lab)]}
    a, la = _sum_out(a, la, apart)
    b, lb = _sum_out(b, lb, apart)
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    a_own = [lab for lab in la if lab not in lb]
    b_own = [lab for lab in lb if lab not in la]
    a = _permuted(a, la, batch + a_own + summed)
    b = _permuted(b, lb, batch + summed + b_own)
    nb = len(batch)
    a_sizes, b_sizes = a.shape[nb:nb + len(a_own)], b.shape[nb + len(summed):]
    k = math.prod(a.shape[nb + len(a_own):])
    y = F.matmul(F.reshape(a, *a.shape[:nb], math.prod(a_sizes), k),
                 F.reshape(b, *b.shape[:nb], k, math.prod(b_sizes)))
    return F.reshape(y, *y.shape[:nb], *a_sizes, *b_sizes), batch + a_own + b_own


def einsum(equation, *operands):
    """torch.einsum(equation, *operands) (or one list of operands)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(x, Tensor) for x in operands):
        raise TypeError(f"einsum(): expected Tensor operands, got "
                        f"{[type(x).__name__ for x in operands]}")
    F._check_float("einsum", *operands)
    labels, out = _parse(equation, operands)
    xs = []
    for i, (x, lab) in enumerate(zip(operands, labels)):
        x, lab = _diagonal(x, lab)
        # a label of this operand alone that the output does not keep: summed at once
        others = set(out).union(*(set(term) for j, term in enumerate(labels) if j != i))
        xs.append(_sum_out(x, lab, set(lab) - others))
    x, lab = xs[0]
    for j in range(1, len(xs)):
        keep = set(out).union(*(set(term) for _, term in xs[j + 1:]))
        x, lab = _contract(x, lab, *xs[j], keep)
    return _permuted(x, lab, out)

"""In-place changes: what torch's version counter is for.

A change is a span of memory and a time. An op's backward refuses to run when an array its
forward kept for it (Function.saved and the attributes Function.kept names) overlaps a span
changed after that forward: its gradient would be computed from the new values. Spans, not
tensors: a view (w.T, x[0], a reshape), a detached alias and an op's output are all caught
alike, and a change to memory no backward reads refuses nothing. Every in-place writer of a
Tensor's array in this package calls mark_changed; Function.apply notes `clock` at forward, and
backward calls refuse_changed for an op whose note is older than the clock.
"""
import bisect

import numpy as np

from . import tensor as _tensor    # (Tensor, read at call time: tensor.py imports this module)
from .backend import is_gpu

clock = 0               # in-place changes so far; a Function notes the count at its forward
_changes = {}           # span -> (clock, what changed it): each span's latest change, oldest first
_index = {}             # device -> [lows, spans]: the changed spans under _LARGE, sorted by
                        # first byte
_widest = {}            # device -> the longest of those (how far back a search looks)
_large = set()          # the changed spans of _LARGE bytes or more, looked at one by one (one
_LARGE = 1 << 20        # zeroed 200 MB buffer must not make every search walk 200 MB of index)
_MAX_CHANGES = 1 << 16  # distinct spans remembered (a parameter's span repeats: it stays one)
_forgotten = 0          # the newest change no longer remembered (a backward older than it refuses)


def _span(a):
    """(device, first byte, end): the memory array a spans; None when it has none."""
    if a.size == 0:
        return None
    if is_gpu(a):
        where, low = a.device.id, a.data.ptr
    else:
        where, low = "cpu", a.__array_interface__["data"][0]
    high = low + a.itemsize
    for n, step in zip(a.shape, a.strides):
        if step < 0:
            low += step * (n - 1)
        else:
            high += step * (n - 1)
    return where, low, high


def _overlap(p, q):
    return p is not None and q is not None and p[0] == q[0] and p[1] < q[2] and q[1] < p[2]


def mark_changed(t, by):
    """Record that Tensor t's memory was just changed in place, by `by` ('zero_()',
    'SGD.step()', ...). Every in-place writer of a Tensor's array in this package calls it; a
    user's own write through .data is not seen (nor is it by torch)."""
    global clock
    span = _span(t.data)
    if span is None:
        return
    clock += 1
    if _changes.pop(span, None) is None:              # a new span: into the address index
        _remember(span)
    _changes[span] = (clock, by)
    if len(_changes) > _MAX_CHANGES:
        _forget(len(_changes) - _MAX_CHANGES * 3 // 4)


def _forget(n):
    """Drop the n oldest changes (their spans' latest) and rebuild the address index."""
    global _forgotten
    for span in list(_changes)[:n]:
        _forgotten = max(_forgotten, _changes.pop(span)[0])
    _index.clear()
    _widest.clear()
    _large.clear()
    for span in sorted(_changes, key=lambda s: s[1]):
        _remember(span)


def _remember(span):
    """A newly changed span into the address index (or the large ones' set)."""
    if span[2] - span[1] >= _LARGE:
        _large.add(span)
        return
    lows, spans = _index.setdefault(span[0], ([], []))
    i = bisect.bisect_left(lows, span[1])
    lows.insert(i, span[1])
    spans.insert(i, span)
    _widest[span[0]] = max(_widest.get(span[0], 0), span[2] - span[1])


def _changed_after(span, stamp):
    """The latest change after clock value `stamp` of memory overlapping span, as (span, by),
    or None."""
    for other in _large:
        if _overlap(other, span) and _changes[other][0] > stamp:
            return other, _changes[other][1]
    entry = _index.get(span[0])
    if entry is None:
        return None
    lows, spans = entry
    reach = span[1] - _widest[span[0]]        # no changed span starting before this reaches it
    for i in range(bisect.bisect_left(lows, span[2]) - 1, -1, -1):
        if lows[i] <= reach:
            break
        other = spans[i]
        if other[2] > span[1]:
            when, by = _changes[other]
            if when > stamp:
                return other, by
    return None


def _saved_arrays(saved, depth=3):
    """The arrays in what an op saved for backward: in tuples, lists, dicts and an object's
    attributes (cudnnlite.rnn.Saved), a few levels down."""
    if saved is None or depth == 0 or isinstance(saved, (int, float, str, np.dtype, np.generic)):
        return                                    # (a NumPy scalar owns no array's memory)
    if hasattr(saved, "strides") and hasattr(saved, "dtype"):
        yield saved
        return
    if isinstance(saved, _tensor.Tensor):
        yield saved.data
        return
    if isinstance(saved, dict):
        saved = tuple(saved.values())
    elif not isinstance(saved, (tuple, list)):
        fields = getattr(saved, "__dict__", None)
        if fields is None:
            fields = {k: getattr(saved, k, None) for k in getattr(saved, "__slots__", ())}
        saved = tuple(fields.values())
    for s in saved:
        yield from _saved_arrays(s, depth - 1)


def refuse_changed(fn, inputs=False):
    """Raise if memory fn's forward kept for its backward was changed in place since; with
    `inputs` (create_graph's backward, which reads the op's input Tensors themselves), the
    inputs' memory too."""
    kept = [(name, span) for name in ("saved",) + fn.kept
            for span in map(_span, _saved_arrays(getattr(fn, name, None))) if span is not None]
    if inputs:
        kept += [("inputs", span) for span in map(_span, _saved_arrays(fn.inputs, 2))
                 if span is not None]
    if kept and fn.stamp < _forgotten:
        raise RuntimeError(
            f"{type(fn).__name__}.backward: more distinct arrays were changed in place since "
            f"its forward than the record keeps ({_MAX_CHANGES * 3 // 4} to {_MAX_CHANGES}), and "
            f"whether one it saved for the gradient was among them is no longer known; run "
            f"backward sooner after the forward")
    for name, span in kept:
        found = _changed_after(span, fn.stamp)
        if found is not None:
            _raise_changed(fn, span, name, found[1])


def _raise_changed(fn, saved, name, by):
    """The error for an op whose kept span `saved` (in its attribute `name`) was changed after
    its forward: what it was (an input, by index; its output; the attribute) and what changed it."""
    what = "its output or an array it saved" if name == "saved" else f"its {name}"
    for i, t in enumerate(fn.inputs):
        if isinstance(t, _tensor.Tensor) and _overlap(_span(t.data), saved):
            what = f"its input {i} (shape {t.shape}, {t.dtype})"
            break
    raise RuntimeError(
        f"{type(fn).__name__}.backward: {what}, which its forward kept for the gradient, was "
        f"changed in place by {by} after that forward; the gradient would be computed from the "
        f"new values. Run backward before the change, or run the forward again after it")

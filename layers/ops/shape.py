"""Ops that move values without arithmetic: reshape, transpose, concat, stack, indexing, pad,
embedding lookup."""
import numpy as np

from ..backend import (accumulation_dtype, concatenate, cupy, device_of, is_floating, out_of_range,
                       stack, to_device)
from ..tensor import Function


class Reshape(Function):
    upcast_half = False           # a view each way: no arithmetic to run in float32

    def forward(self, x):
        self.in_shape = x.shape
        return x.reshape(self.shape)

    def backward(self, gy):
        return gy.reshape(self.in_shape)

    def backward_graph(self, gy):
        return Reshape.apply(gy, shape=self.in_shape)


class Transpose(Function):
    """Permute axes (reverse them when axes is None), as numpy.transpose."""
    upcast_half = False

    def forward(self, x):
        self.perm = tuple(range(x.ndim))[::-1] if not self.axes else tuple(
            a % x.ndim for a in self.axes)
        return x.transpose(self.perm)

    def backward(self, gy):
        return gy.transpose(np.argsort(self.perm))

    def backward_graph(self, gy):
        return Transpose.apply(gy, axes=tuple(np.argsort(self.perm).tolist()))


class BroadcastTo(Function):
    """A view of x repeated along its size-1 (and new leading) axes, stride 0 there (torch's
    expand); the gradient sums over what was repeated."""

    def forward(self, x):
        self.in_shape = x.shape
        return self.xp.broadcast_to(x, self.shape)

    def backward(self, gy):
        from .elementwise import unbroadcast
        return unbroadcast(gy, self.in_shape)

    def backward_graph(self, gy):
        from .elementwise import unbroadcast_graph
        return unbroadcast_graph(gy, self.in_shape)


class Concat(Function):
    """numpy.concatenate (backend.concatenate: two device arrays in one kernel); the gradients
    are views of gy."""

    def forward(self, *xs):
        self.sizes = [x.shape[self.axis] for x in xs]
        return concatenate(xs, axis=self.axis)

    def backward(self, gy):
        bounds = np.cumsum(self.sizes)[:-1].tolist()
        parts = self.xp.split(gy, bounds, axis=self.axis)
        return tuple(p if need else None for p, need in zip(parts, self.needs_input_grad))

    def backward_graph(self, gy):
        axis, bounds = self.axis % gy.ndim, np.cumsum([0] + self.sizes).tolist()
        return tuple(GetItem.apply(gy, index=(slice(None),) * axis + (slice(lo, hi),))
                     if need else None
                     for lo, hi, need in zip(bounds, bounds[1:], self.needs_input_grad))


class Stack(Function):
    """The gradients of the stacked arrays are views of gy (no copy: Tacotron 2 stacks each
    decoder frame's outputs, and a copy per frame was a kernel per frame); an op that needs a
    dense operand copies it at its own boundary."""

    def forward(self, *xs):
        return stack(xs, axis=self.axis)

    def backward(self, gy):
        axis = self.axis % gy.ndim
        return tuple(gy[(slice(None),) * axis + (i,)] if need else None
                     for i, need in enumerate(self.needs_input_grad))

    def backward_graph(self, gy):
        axis = self.axis % gy.ndim
        return tuple(GetItem.apply(gy, index=(slice(None),) * axis + (i,)) if need else None
                     for i, need in enumerate(self.needs_input_grad))


class Unstack(Function):
    """The slices x[i] along `axis`, as separate outputs (the gradient stacks them back; a slice
    nothing used gets zeros)."""

    def forward(self, x):
        self.shape, self.dtype = x.shape, x.dtype
        self.n_outputs = x.shape[self.axis]
        axis = self.axis % x.ndim                    # views, as Stack's gradients
        return tuple(x[(slice(None),) * axis + (i,)] for i in range(self.n_outputs))

    def backward(self, *gys):
        zeros = None
        parts = []
        for g in gys:
            if g is None:
                if zeros is None:
                    shape = self.shape[:self.axis] + self.shape[self.axis + 1:]
                    zeros = self.xp.zeros(shape, dtype=self.dtype)
                g = zeros
            parts.append(g)
        return stack(parts, axis=self.axis)

    def backward_graph(self, *gys):
        from ..tensor import Tensor
        zeros = Tensor(self.xp.zeros(self.shape[:self.axis] + self.shape[self.axis + 1:],
                                     dtype=self.dtype))
        return Stack.apply(*(zeros if g is None else g for g in gys), axis=self.axis)


class Split(Function):
    """torch.split's pieces of x along `axis`, `sizes` long, as one op with an output each (views
    of x, as torch's); the gradient joins the pieces' gradients in one concatenation, zeros for
    a piece nothing used. One op, as torch's split_with_sizes: backward(inputs=[piece]) and the
    hooks of the pieces behave as torch's."""
    upcast_half = False           # views: no arithmetic to run in float32

    def forward(self, x):
        self.shape, self.dtype = x.shape, x.dtype
        lead = (slice(None),) * self.axis
        bounds = np.cumsum([0, *self.sizes]).tolist()
        return tuple(x[lead + (slice(lo, hi),)] for lo, hi in zip(bounds, bounds[1:]))

    def _zeros(self, size):
        return self.xp.zeros(self.shape[:self.axis] + (size,) + self.shape[self.axis + 1:],
                             dtype=self.dtype)

    def backward(self, *gys):
        return concatenate([self._zeros(n) if g is None else g
                            for g, n in zip(gys, self.sizes)], axis=self.axis)

    def backward_graph(self, *gys):
        from ..tensor import Tensor
        return Concat.apply(*(Tensor(self._zeros(n)) if g is None else g
                              for g, n in zip(gys, self.sizes)), axis=self.axis)


def _index_array(index, gpu):
    """Index Tensors/arrays inside an index expression, moved to where the data is."""
    from ..tensor import Tensor
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for i in items:
        if isinstance(i, Tensor):
            i = i.data
        if isinstance(i, (list, np.ndarray)) and gpu:
            i = cupy().asarray(i)
        out.append(i)
    return tuple(out) if isinstance(index, tuple) else out[0]


def _scatter_add(xp, out, index, values):
    """out[index] += values, adding where an index repeats (numpy / cupy add.at); out returned.
    Callers make `out` in the accumulation dtype: float32 for float16 / bfloat16 gradients (a
    row picked many times would round at every addition; and CuPy's add.at takes no bfloat16);
    the engine hands the gradient on in the input's own dtype."""
    xp.add.at(out, index, values.astype(out.dtype, copy=False))
    return out


class GetItem(Function):
    """y = x[index] for basic (slices, ints, None, ...) and advanced (integer/bool arrays)
    indexing; the gradient scatters back, adding where an element was picked twice."""
    kept = ("index",)
    upcast_half = False      # (indexing computes nothing: half data stays a view, as torch's)

    def forward(self, x):
        self.index = _index_array(self.index, self.gpu)
        self.shape, self.dtype = x.shape, x.dtype
        return x[self.index]

    def backward(self, gy):
        return _scattered(self.xp, gy, self.index, self.shape, self.dtype)

    def backward_graph(self, gy):
        return GetItemGrad.apply(gy, index=self.index, shape=self.shape)


def _scattered(xp, gy, index, shape, dtype):
    """zeros(shape)[index] += gy (repeats added), in dtype's accumulation dtype."""
    return _scatter_add(xp, xp.zeros(shape, dtype=accumulation_dtype(dtype)), index, gy)


class GetItemGrad(Function):
    """GetItem's gradient as an op of its own (create_graph): y = zeros(shape) with gy added at
    `index`; linear in gy, so its gradient is the same indexing, gx = g[index]."""
    kept = ("index",)
    upcast_half = False

    def forward(self, gy):
        return _scattered(self.xp, gy, self.index, self.shape, gy.dtype).astype(gy.dtype,
                                                                               copy=False)

    def backward(self, g):
        return g[self.index]

    def backward_graph(self, g):
        return GetItem.apply(g, index=self.index)


class ReversePadded(Function):
    """Each sequence of a (T, B, ...) batch reversed within its length, the padding after it left
    in place: y[t, b] = x[n_b - 1 - t, b] for t < n_b, x[t, b] past it. lengths: an int array (B,)
    where x lives (device lengths: nothing is read back, so a step using it can be captured for
    any lengths). A permutation that is its own inverse: the gradient is the same gather."""

    def forward(self, x, lengths):
        xp = self.xp
        t = xp.arange(x.shape[0])[:, None]
        n = lengths.reshape(1, -1).astype(t.dtype, copy=False)
        self.rows = xp.where(t < n, n - 1 - t, t)                        # (T, B)
        self.cols = xp.arange(x.shape[1])[None, :]
        return x[self.rows, self.cols]

    def backward(self, gy):
        return gy[self.rows, self.cols], None


# torch's padding modes as numpy.pad's (and cupy.pad's)
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
              "circular": "wrap"}


class Pad(Function):
    """Padding; pad_width as numpy.pad's ((before, after), ...) per axis, mode torch's (constant
    `value`, reflect, replicate, circular). Backward: the interior of the gradient, plus, for the
    copying modes, each padded element's gradient added to the element it copies -- the
    source of every position along an axis is numpy.pad's of the positions themselves."""
    mode = "constant"

    def forward(self, x):
        self.shape = x.shape
        self.crop = tuple(slice(b, b + n) for (b, _), n in zip(self.pad_width, x.shape))
        # padded in x's memory order (a channels-last tensor stays channels-last, as torch's)
        order = sorted(range(x.ndim), key=lambda i: -abs(x.strides[i]))
        widths = [self.pad_width[i] for i in order]
        xt = x.transpose(order)
        if self.mode == "constant":
            y = self.xp.pad(xt, widths, constant_values=self.value)
        else:
            y = self.xp.pad(xt, widths, mode=_PAD_MODES[self.mode])
        return y.transpose(np.argsort(order))

    def backward_graph(self, gy):
        if self.mode != "constant":
            raise NotImplementedError(f"Pad: no double backward (create_graph=True) is written "
                                      f"for mode {self.mode!r} ('constant' has one)")
        return GetItem.apply(gy, index=self.crop)

    def backward(self, gy):
        if self.mode == "constant":
            return gy[self.crop]
        xp, g = self.xp, gy
        for axis, ((b, a), n) in enumerate(zip(self.pad_width, self.shape)):
            if not (b or a):
                continue
            source = np.pad(np.arange(n), (b, a), mode=_PAD_MODES[self.mode])
            moved = xp.moveaxis(g, axis, 0)
            summed = _scatter_add(xp, xp.zeros((n,) + moved.shape[1:],
                                               accumulation_dtype(gy.dtype)),
                                  xp.asarray(source), moved)
            g = xp.moveaxis(summed, 0, axis)
        return xp.ascontiguousarray(g).astype(gy.dtype, copy=False)


class Gather(Function):
    """y[..., j, ...] = x[..., index[..., j, ...], ...] along `axis` (torch.gather: index has
    x's number of axes, no larger than x off the axis, and y its shape); the gradient adds into
    the gathered positions, where an index repeats too. An index out of range: the host raises
    (out_of_range), a device gives NaN there and no gradient."""
    kept = ("index",)

    def forward(self, x):
        xp, index, axis = self.xp, self.index, self.axis
        bad = out_of_range("gather", index, x.shape[axis], "index")
        if bad is not None:
            index = xp.where(bad, 0, index)
        self.index, self.bad, self.shape = index, bad, x.shape
        y = _gathered(xp, x, index, axis)
        if bad is not None:
            y = xp.where(bad, xp.nan, y).astype(x.dtype)
        return y

    def backward(self, gy):
        return _gather_grad(self.xp, gy, self.index, self.axis, self.shape, self.bad)

    def backward_graph(self, gy):
        return GatherGrad.apply(gy, index=self.index, axis=self.axis, shape=self.shape,
                                bad=self.bad)


def _gathered(xp, x, index, axis):
    """x[..., index[..., j, ...], ...] along axis (x cut to index's extent off the axis)."""
    axis %= max(x.ndim, 1)
    part = x[tuple(slice(0, n) if d != axis else slice(None) for d, n in enumerate(index.shape))]
    return xp.take_along_axis(part, index, axis=axis)


def _gather_grad(xp, gy, index, axis, shape, bad):
    """Gather's gradient: zeros of `shape` with gy added at the gathered positions (repeats
    added; none where `bad`, an out-of-range index)."""
    if bad is not None:
        gy = xp.where(bad, 0, gy).astype(gy.dtype, copy=False)
    gx = xp.zeros(shape, accumulation_dtype(gy.dtype))
    xp.add.at(gx, _positions(xp, index, axis), gy.astype(gx.dtype, copy=False))
    return gx.astype(gy.dtype, copy=False)


class GatherGrad(Function):
    """Gather's gradient as an op of its own (create_graph; torch.max(x, dim)'s values too):
    y = _gather_grad(gy), linear in gy, so its gradient is the same gather, 0 where an index
    was out of range."""
    kept = ("index", "bad")

    def forward(self, gy):
        return _gather_grad(self.xp, gy, self.index, self.axis, self.shape, self.bad)

    def backward(self, g):
        y = _gathered(self.xp, g, self.index, self.axis)
        return y if self.bad is None else self.xp.where(self.bad, 0, y).astype(g.dtype)

    def backward_graph(self, g):
        from .. import functional as F
        y = Gather.apply(g, index=self.index, axis=self.axis)
        return y if self.bad is None else F.where(self.bad, 0.0, y)


def _positions(xp, index, axis):
    """Where each entry of `index` points: per axis of x, broadcastable index arrays (`index`
    itself along `axis`, each other axis its own positions: numpy.indices, sparse)."""
    nd = index.ndim
    axis %= max(nd, 1)                     # (max(x, dim=-1)'s axis comes as given)
    return tuple(index if d == axis else
                 xp.arange(n).reshape((1,) * d + (n,) + (1,) * (nd - d - 1))
                 for d, n in enumerate(index.shape))


class Scatter(Function):
    """y = x with y at index[..., j, ...] along `axis` set to src[..., j, ...] (torch.scatter;
    reduce='add': added, torch.scatter_add -- repeated indices add up). src is a Tensor (its
    part of index's shape is read) or a number. gx = gy (0 where scatter overwrote: what x
    had there is gone); gsrc = gy gathered at index where src was read, 0 elsewhere. Where an
    index repeats, scatter (not 'add') keeps one write, which one not defined (as torch). An
    index out of range: the host raises (out_of_range); a device makes the whole result NaN
    (no host sync to find it), as Gather marks its outputs -- integer data, which has no NaN,
    reads the check back and raises."""
    kept = ("index",)

    def forward(self, x, src):
        xp, index, axis = self.xp, self.index, self.axis
        bad = out_of_range("scatter", index, x.shape[axis], "index")
        if bad is not None and not is_floating(x.dtype):
            if bool(bad.any()):         # (no NaN to mark integer data with: read back, refuse)
                raise IndexError(f"scatter: an index is out of range for {x.shape[axis]} "
                                 f"(integer data has no NaN to mark the result with)")
            bad = None
        if bad is not None:
            index = self.index = xp.where(bad, 0, index)
        pos = _positions(xp, index, axis)
        self.src_shape = getattr(src, "shape", None)
        part = src[tuple(slice(0, n) for n in index.shape)] if self.src_shape is not None \
            else src
        if self.reduce == "add":
            A = accumulation_dtype(x.dtype)
            y = x.astype(A, copy=True)
            xp.add.at(y, pos, part.astype(A, copy=False) if self.src_shape is not None
                      else A.type(part))
            y = y.astype(x.dtype, copy=False)
        else:
            y = x.copy()
            y[pos] = part
        if bad is not None:
            y = xp.where(bad.any(), xp.nan, y).astype(x.dtype, copy=False)
        return y

    def backward(self, gy):
        xp, pos = self.xp, _positions(self.xp, self.index, self.axis)
        gx = gy
        if self.reduce != "add":
            gx = gy.copy()
            gx[pos] = 0
        gsrc = None
        if self.src_shape is not None and self.needs_input_grad[1]:
            gsrc = xp.zeros(self.src_shape, gy.dtype)
            gsrc[tuple(slice(0, n) for n in self.index.shape)] = gy[pos]
        return gx, gsrc


class ToDevice(Function):
    """y = x copied to `device` (torch's differentiable x.to(device)); the gradient is copied
    back to x's device."""
    upcast_half = False

    def forward(self, x):
        self.source = device_of(x)
        return to_device(x, self.device)

    def backward(self, gy):
        return to_device(gy, self.source)


class Embedding(Function):
    """y[..., :] = W[idx[...], :]; rows at padding_idx get no gradient (as torch), nor do the
    NaN rows of an index out of range on a device (out_of_range: no row of W is theirs). With
    scale_grad_by_freq each pick's gradient is divided by its row's count in idx (torch's)."""
    scale_grad_by_freq = False

    def forward(self, W, idx):
        bad = out_of_range("embedding", idx, W.shape[0], "index")
        if bad is not None:                   # (a device: NaN rows where an index is out of range)
            idx = self.xp.where(bad, 0, idx)
        self.saved, self.bad = idx, bad
        self.w_shape = W.shape
        y = W[idx]
        if bad is not None:
            y = self.xp.where(bad[..., None], self.xp.nan, y).astype(W.dtype)
        return y

    def backward(self, gy):
        idx = self.saved
        xp = self.xp
        if self.bad is not None:              # (their stand-in index 0 takes nothing)
            gy = xp.where(self.bad[..., None], 0, gy).astype(gy.dtype, copy=False)
        if self.scale_grad_by_freq:
            picked = idx if self.bad is None else idx[~self.bad]
            counts = xp.bincount(picked.reshape(-1), minlength=self.w_shape[0])
            gy = gy / xp.maximum(counts[idx], 1)[..., None].astype(accumulation_dtype(gy.dtype))
        gW = _scatter_add(xp, xp.zeros(self.w_shape, dtype=accumulation_dtype(gy.dtype)),
                          idx.reshape(-1), gy.reshape(-1, self.w_shape[1]))
        if self.padding_idx is not None:
            gW[self.padding_idx] = 0
        return gW, None


class Triangle(Function):
    """torch.tril / triu: the lower (`upper` False) or upper triangle of the last two axes from
    diagonal `diagonal` on, the rest zeros; the gradient is gy's same triangle."""

    def _part(self, a):
        return (self.xp.triu if self.upper else self.xp.tril)(a, self.diagonal)

    def forward(self, x):
        return self._part(x)

    def backward(self, gy):
        return self._part(gy)

    def backward_graph(self, gy):
        return Triangle.apply(gy, upper=self.upper, diagonal=self.diagonal)

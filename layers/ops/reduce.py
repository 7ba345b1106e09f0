"""Reductions and normalisers over axes: sum, mean, amax, softmax, log_softmax. Half-precision data is
reduced in float32 (the result cast back), as torch does: a float16 sum of many terms, or a
count above 65504, is not representable in float16."""
import numpy as np

from .. import kernels
from ..backend import accumulation_dtype, dim_index, is_floating
from ..tensor import Function


def _axes(axis, ndim):
    """The axes to reduce, each in [0, ndim); a 0-d tensor takes axis 0 / -1 (nothing to
    reduce), as torch; an axis out of range is torch's IndexError."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(dim_index(a, max(ndim, 1)) for a in axes)
    return axes if ndim else ()


def _expand(gy, shape, axes, keepdims, xp):
    """Broadcast a reduced gradient back to `shape` (a contiguous copy)."""
    if not keepdims:
        gy = gy.reshape([1 if i in axes else n for i, n in enumerate(shape)])
    return xp.broadcast_to(gy, shape).copy()


def _expand_graph(gy, shape, axes, keepdims):
    """_expand of a gradient Tensor, in differentiable ops (create_graph)."""
    from .. import functional as F
    if not keepdims:
        gy = F.reshape(gy, [1 if i in axes else n for i, n in enumerate(shape)])
    return F.broadcast_to(gy, shape)


def _integer_sum_dtype(dtype):
    """The dtype a sum of bool or integer data is taken and returned in, as torch: int64 (uint64
    for uint64 data), so True + True is 2 and 300 uint8 ones are 300; None for floating data."""
    kind = np.dtype(dtype).kind
    if kind not in "biu":
        return None
    return np.dtype(np.uint64 if np.dtype(dtype) == np.uint64 else np.int64)


class Sum(Function):
    """Floating data summed in its accumulation dtype and returned in its own; bool and integer
    data summed and returned in int64 (as torch)."""

    def forward(self, x):
        self.shape, self.axes = x.shape, _axes(self.axis, x.ndim)
        whole = _integer_sum_dtype(x.dtype)
        if whole is not None:
            return x.sum(axis=self.axes, keepdims=self.keepdims, dtype=whole)
        acc = accumulation_dtype(x.dtype)
        return x.sum(axis=self.axes, keepdims=self.keepdims, dtype=acc).astype(x.dtype, copy=False)

    def backward(self, gy):
        return _expand(gy, self.shape, self.axes, self.keepdims, self.xp)

    def backward_graph(self, gy):
        return _expand_graph(gy, self.shape, self.axes, self.keepdims)


class Mean(Function):
    """Of floating data only: torch refuses to guess a mean's dtype for integer data (NumPy's
    float64 would turn a float32 graph float64)."""

    def forward(self, x):
        if not is_floating(x.dtype):
            raise TypeError(f"mean: input must be floating (float16, bfloat16, float32, "
                            f"float64), got {x.dtype}; cast it first (x.float(), as torch)")
        self.shape, self.axes = x.shape, _axes(self.axis, x.ndim)
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        acc = accumulation_dtype(x.dtype)
        return x.mean(axis=self.axes, keepdims=self.keepdims, dtype=acc).astype(x.dtype, copy=False)

    def backward(self, gy):
        acc = accumulation_dtype(gy.dtype)
        g = (gy.astype(acc, copy=False) / acc.type(self.count)).astype(gy.dtype, copy=False)
        return _expand(g, self.shape, self.axes, self.keepdims, self.xp)

    def backward_graph(self, gy):
        return _expand_graph(gy / self.count, self.shape, self.axes, self.keepdims)


class Amax(Function):
    """The maximum over axes (torch.amax); the gradient goes to the maxima, shared evenly among
    ties, as torch's amax (NaN is the maximum where there is one, as torch's)."""

    def forward(self, x):
        self.axes = _axes(self.axis, x.ndim)
        y = x.max(axis=self.axes, keepdims=True)
        self.saved = x, y
        return y if self.keepdims else y.reshape([n for i, n in enumerate(y.shape)
                                                  if i not in self.axes])

    def _share(self, dtype):
        """Each element's share of the gradient: 1 / (the ties) at the maxima, else 0."""
        x, y = self.saved
        xp = self.xp
        hit = (x == y) | (xp.isnan(x) & xp.isnan(y)) if is_floating(x.dtype) else x == y
        return hit.astype(dtype) / hit.sum(axis=self.axes, keepdims=True, dtype=dtype)

    def backward(self, gy):
        acc = accumulation_dtype(gy.dtype)
        g = gy.astype(acc, copy=False).reshape(self.saved[1].shape) * self._share(acc)
        return g.astype(gy.dtype, copy=False)

    def backward_graph(self, gy):
        from .. import functional as F
        from ..tensor import Tensor
        return F.reshape(gy, self.saved[1].shape) * Tensor(self._share(gy.dtype))


class MaxAlong(Function):
    """The maximum along one axis, kept (torch.max(x, dim)'s values): the gradient goes to the
    index `self.index` (the first maximum, argmax's) alone, as torch's."""
    kept = ("index",)

    def forward(self, x):
        self.shape = x.shape
        return self.xp.take_along_axis(x, self.index, axis=self.axis)

    def backward(self, gy):
        g = self.xp.zeros(self.shape, gy.dtype)
        self.xp.put_along_axis(g, self.index, gy, axis=self.axis)
        return g

    def backward_graph(self, gy):
        from .shape import GatherGrad
        return GatherGrad.apply(gy, index=self.index, axis=self.axis, shape=self.shape, bad=None)


class Softmax(Function):
    """exp(x - max) / sum(exp(x - max)) along axis; on the GPU three fused kernels forward and
    two backward (layers.kernels.softmax), the same arithmetic."""

    def forward(self, x):
        xp = self.xp
        a = x.astype(accumulation_dtype(x.dtype), copy=False)
        if self.gpu:
            y = kernels.softmax(a, self.axis)
        else:
            e = xp.exp(a - a.max(axis=self.axis, keepdims=True))
            y = e / e.sum(axis=self.axis, keepdims=True)
        self.saved = y        # (in float for half data: backward from a rounded y would err)
        return y.astype(x.dtype, copy=False)

    def backward(self, gy):
        y = self.saved
        acc = accumulation_dtype(y.dtype)
        y, g = y.astype(acc, copy=False), gy.astype(acc, copy=False)
        if self.gpu:
            return kernels.softmax_grad(y, g, self.axis)
        return y * (g - (g * y).sum(axis=self.axis, keepdims=True))

    def backward_graph(self, gy):
        from .. import functional as F
        y = Softmax.apply(self.inputs[0], axis=self.axis)
        return y * (gy - F.sum(gy * y, self.axis, keepdims=True))


class LogSoftmax(Function):
    def forward(self, x):
        xp = self.xp
        a = x.astype(accumulation_dtype(x.dtype), copy=False)
        shifted = a - a.max(axis=self.axis, keepdims=True)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))
        self.saved = y        # (in float for half data, as Softmax)
        return y.astype(x.dtype, copy=False)

    def backward(self, gy):
        acc = accumulation_dtype(gy.dtype)
        y, g = self.saved.astype(acc, copy=False), gy.astype(acc, copy=False)
        return g - self.xp.exp(y) * g.sum(axis=self.axis, keepdims=True)

    def backward_graph(self, gy):
        from .. import functional as F
        p = Softmax.apply(self.inputs[0], axis=self.axis)
        return gy - p * F.sum(gy, self.axis, keepdims=True)


def _running(fn, x, name):
    """x's running sum or product (`name`: 'cumsum', 'cumprod') along fn.axis, as torch's:
    floating data in its accumulation dtype, returned in its own; bool and integer data in int64
    (fn.keep: in x's own dtype, torch's dtype=). (result, the accumulation-dtype result of
    floating data, else None)."""
    whole = x.dtype if fn.keep and not is_floating(x.dtype) else _integer_sum_dtype(x.dtype)
    op = getattr(fn.xp, name)
    if whole is not None:
        return op(x, axis=fn.axis, dtype=whole), None
    y = op(x, axis=fn.axis, dtype=accumulation_dtype(x.dtype))
    return y.astype(x.dtype, copy=False), y


class Cumsum(Function):
    """The running sum along `axis` (torch.cumsum): floating data summed in its accumulation
    dtype and returned in its own, bool and integer data in int64 (as torch); the gradient is
    the running sum of gy from the other end. keep: summed in x's own dtype (torch's dtype=)."""
    keep = False

    def forward(self, x):
        return _running(self, x, "cumsum")[0]

    def backward(self, gy):
        xp, axis = self.xp, self.axis
        acc = accumulation_dtype(gy.dtype)
        g = xp.flip(xp.cumsum(xp.flip(gy, axis), axis=axis, dtype=acc), axis)
        return g.astype(gy.dtype, copy=False)

    def backward_graph(self, gy):
        """backward's running sum from the other end, in differentiable ops."""
        from .. import functional as F
        return F.flip(Cumsum.apply(F.flip(gy, self.axis), axis=self.axis), self.axis)


class Cumprod(Function):
    """The running product along `axis` (torch.cumprod), dtypes as Cumsum's. Its gradient is
    exact where a factor is 0, as torch's: before a row's first zero, the reverse running sum of
    gy * y (up to that zero) divided by x; at the first zero, the product before it times gy
    weighted by the running products after it, up to the second zero; past it, 0 (each later
    product holds the zero: those terms are 0 even beside an inf or NaN, as torch's)."""
    keep = False

    def forward(self, x):
        y, acc = _running(self, x, "cumprod")
        self.saved = None if acc is None else (x, acc)     # (backward: floating data's x, y)
        return y

    def backward(self, gy):
        x, y = self.saved
        xp, ax = self.xp, self.axis
        acc = y.dtype
        a, g = xp.moveaxis(x.astype(acc, copy=False), ax, -1), \
            xp.moveaxis(gy.astype(acc, copy=False), ax, -1)
        y = xp.moveaxis(y, ax, -1)
        n = a.shape[-1]
        if n <= 1:                 # (y = x: gy itself, as torch's, even for an inf or NaN x)
            return gy
        idx = xp.arange(n)

        def first_zero(mask):                     # per row, the first index where mask (n: none)
            return xp.where(mask.any(-1), mask.argmax(-1), n)[..., None]
        first = first_zero(a == 0)
        second = first_zero((a == 0) & (idx > first))
        before = idx < first

        def rev_cumsum(b):
            return xp.flip(xp.cumsum(xp.flip(b, -1), axis=-1), -1)
        # (each y_i past the first zero holds it: its terms are 0, not 0 * inf -- torch's rule)
        grad = xp.where(before, rev_cumsum(xp.where(before, g * y, 0)) / xp.where(before, a, 1), 0)
        # at the first zero z: prod(x before it) * sum_{z <= i < second zero} g_i prod_{z<k<=i} x_k
        span = (idx >= first) & (idx < second)
        after = xp.cumprod(xp.where(span & (idx > first), a, 1), axis=-1)
        at_zero = xp.where(span, g * after, 0).sum(-1, keepdims=True)
        prev = xp.take_along_axis(y, xp.clip(first - 1, 0, None), -1)
        prev = xp.where(first > 0, prev, 1)
        grad = xp.where(idx == first, prev * at_zero, grad)
        return xp.moveaxis(grad, -1, ax).astype(gy.dtype, copy=False)


class Prod(Function):
    """The product over `axis` (one axis, or None: every element), as torch.prod: bool and
    integer data in int64. The gradient of each factor is the product of the others, taken as
    the running products from both ends (no division: exact where a factor is 0, as torch's)."""

    keep = False              # multiplied in x's own dtype (torch's dtype=)

    def forward(self, x):
        self.shape = x.shape
        whole = x.dtype if self.keep and not is_floating(x.dtype) else \
            _integer_sum_dtype(x.dtype)
        dtype = whole if whole is not None else accumulation_dtype(x.dtype)
        flat = x.reshape(-1) if self.axis is None else x
        y = flat.prod(axis=0 if self.axis is None else self.axis, keepdims=self.keepdims,
                      dtype=dtype)
        if self.axis is None and self.keepdims:
            y = y.reshape((1,) * x.ndim)
        self.saved = x
        return y if whole is not None else y.astype(x.dtype, copy=False)

    def backward(self, gy):
        x, xp = self.saved, self.xp
        acc = accumulation_dtype(gy.dtype)
        axis = self.axis
        a = x.astype(acc, copy=False)
        if axis is None:
            a = a.reshape(-1)
        ax = 0 if axis is None else axis

        def upto(b, stop):                       # b's first `stop` entries along ax
            return b[(slice(None),) * ax + (slice(0, stop),)]
        n = a.shape[ax]
        ones = xp.ones_like(upto(a, 1))

        def exclusive(b):                        # b's running products, shifted one on
            return xp.concatenate([ones, xp.cumprod(upto(b, n - 1), axis=ax)], axis=ax)
        before = exclusive(a) if n else a
        after = xp.flip(exclusive(xp.flip(a, ax)), ax) if n else a
        g = gy.astype(acc, copy=False)
        if axis is None:
            g = g.reshape(())
        elif not self.keepdims:
            g = xp.expand_dims(g, ax)
        return (g * before * after).reshape(self.shape).astype(gy.dtype, copy=False)


class VectorNorm(Function):
    """The vector p-norm over `axes` (torch.linalg.vector_norm; torch.norm's vector forms):
    p = 2, 1, inf, -inf, 0 (the count of non-zeros: no gradient, .grad stays None as torch's)
    or any other p, accumulated in float32 for half data. The gradient is 0 where the norm is 0
    (as torch's), and for p = +-inf shared evenly among the entries that reach it (as
    torch's)."""

    def forward(self, x):
        xp, p = self.xp, self.ord
        self.axes = axes = _axes(self.axis, x.ndim)
        a = xp.abs(x.astype(accumulation_dtype(x.dtype), copy=False))
        if p == 2:
            y = xp.sqrt((a * a).sum(axis=axes, keepdims=True))
        elif p == 1:
            y = a.sum(axis=axes, keepdims=True)
        elif p == np.inf:
            y = a.max(axis=axes, keepdims=True)
        elif p == -np.inf:
            y = a.min(axis=axes, keepdims=True)
        elif p == 0:
            y = (a != 0).sum(axis=axes, keepdims=True).astype(a.dtype)
        else:
            y = (a ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)
        self.saved = x, y
        out = y if self.keepdims else y.reshape([n for i, n in enumerate(y.shape)
                                                 if i not in axes])
        return out.astype(x.dtype, copy=False)

    def backward(self, gy):
        x, y = self.saved
        xp, p = self.xp, self.ord
        acc = y.dtype
        a = x.astype(acc, copy=False)
        g = gy.astype(acc, copy=False).reshape(y.shape)
        if p == 0:
            return None                 # (a count: no gradient reaches x, as torch's)
        if p == 1:
            gx = g * xp.sign(a)
        elif p in (np.inf, -np.inf):
            hit = xp.abs(a) == y
            gx = g * xp.sign(a) * hit / hit.sum(axis=self.axes, keepdims=True)
        else:
            safe = xp.where(y == 0, 1, y)
            if p == 2:
                gx = g * a / safe
            else:                                  # sign(x) |x|^(p-1), 0 at x = 0 (p < 1)
                gx = g * xp.where(a == 0, 0, xp.sign(a) * xp.abs(a) ** (p - 1)) / safe ** (p - 1)
            # 0 where the norm is 0 (as torch): for p > 0 every x is 0 there already, for p < 0
            # one x of 0 makes it 0 and the others' terms are not
            gx = xp.where(y == 0, 0, gx)
        return gx.astype(x.dtype, copy=False)

    def backward_graph(self, gy):
        """p = 1: gy sign(x); p = 2: gy x / |x|, 0 where the norm is 0 (the norm recomputed,
        differentiable; 1 in its place there, where every x is 0). Other p refuse."""
        from .. import functional as F
        from .elementwise import _const
        (x,), y = self.inputs, self.saved[1]
        g = F.reshape(gy, y.shape)
        if self.ord == 1:
            return g * _const(x, self.xp.sign(x.data))
        if self.ord != 2:
            raise NotImplementedError(f"VectorNorm: no double backward (create_graph=True) is "
                                      f"written for p = {self.ord} (p = 1 and 2 are)")
        norm = VectorNorm.apply(x, ord=2, axis=self.axis, keepdims=True)
        return g * x / F.where(y == 0, 1.0, norm)

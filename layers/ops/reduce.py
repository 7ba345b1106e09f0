"""Reductions and normalisers over axes: sum, mean, softmax, log_softmax."""
from ..tensor import Function


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim for a in axes)


def _expand(gy, shape, axes, keepdims, xp):
    """Broadcast a reduced gradient back to `shape` (a contiguous copy)."""
    if not keepdims:
        gy = gy.reshape([1 if i in axes else n for i, n in enumerate(shape)])
    return xp.broadcast_to(gy, shape).copy()


class Sum(Function):
    def forward(self, x):
        self.shape, self.axes = x.shape, _axes(self.axis, x.ndim)
        return x.sum(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        return _expand(gy, self.shape, self.axes, self.keepdims, self.xp)


class Mean(Function):
    def forward(self, x):
        self.shape, self.axes = x.shape, _axes(self.axis, x.ndim)
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        return x.mean(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        return _expand(gy / gy.dtype.type(self.count), self.shape, self.axes, self.keepdims,
                       self.xp)


class Softmax(Function):
    def forward(self, x):
        xp = self.xp
        e = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        self.saved = y = e / e.sum(axis=self.axis, keepdims=True)
        return y

    def backward(self, gy):
        y = self.saved
        return y * (gy - (gy * y).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    def forward(self, x):
        xp = self.xp
        shifted = x - x.max(axis=self.axis, keepdims=True)
        self.saved = y = shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))
        return y

    def backward(self, gy):
        y = self.saved
        return gy - self.xp.exp(y) * gy.sum(axis=self.axis, keepdims=True)

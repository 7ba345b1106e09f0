"""Matrix products on cuBLAS (CuPy) or NumPy: matmul with broadcasting, and linear."""
from ..tensor import Function
from .elementwise import unbroadcast


class MatMul(Function):
    """y = a @ b with numpy.matmul semantics (1-d operands, batch broadcasting)."""

    def forward(self, a, b):
        self.saved = a, b
        return a @ b

    def backward(self, gy):
        a, b = self.saved
        xp = self.xp
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = gy
        if a.ndim == 1:
            g2 = xp.expand_dims(g2, -2)
        if b.ndim == 1:
            g2 = xp.expand_dims(g2, -1)
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = unbroadcast(g2 @ xp.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = unbroadcast(xp.swapaxes(a2, -1, -2) @ g2, b2.shape).reshape(b.shape)
        return ga, gb


class Linear(Function):
    """y = x @ W.T + b, x (..., in), W (out, in) as torch.nn.Linear."""

    def forward(self, x, W, b=None):
        self.saved = x, W
        y = x @ W.T
        if b is not None:
            y += b
        return y

    def backward(self, gy):
        x, W = self.saved
        need_x, need_W = self.needs_input_grad[:2]
        gx = gy @ W if need_x else None
        g2 = gy.reshape(-1, gy.shape[-1])
        gW = g2.T @ x.reshape(-1, x.shape[-1]) if need_W else None
        gb = g2.sum(axis=0) if len(self.needs_input_grad) > 2 and self.needs_input_grad[2] else None
        return gx, gW, gb

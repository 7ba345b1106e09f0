"""Matrix products: matmul with NumPy's semantics (1-d operands, batch broadcasting) and linear.
On the GPU every product is cuBLASLt through cudnnlite.blas -- on CuPy's current stream with a
workspace cudnnlite owns, so a step that uses them can be captured in a CUDA graph -- with
Linear's bias folded into the product's epilogue."""
import math

import numpy as np

from ..backend import is_gpu, xp_of
from ..tensor import Deferred, Function
from .elementwise import unbroadcast


def mm(a, b, bias=None, out=None):
    """a @ b (+ bias), 2-d or 3-d (a leading batch axis, a 2-d operand shared by every item);
    with `out`, the product is added into out in place and out returned. NumPy, or one cuBLASLt
    call on the GPU (transposed views read in place)."""
    if is_gpu(a):
        from cudnnlite import blas
        return blas.matmul(a, b, out, bias=bias, beta=0.0 if out is None else 1.0)
    y = a @ b
    if bias is not None:
        y += bias
    if out is None:
        return y
    out += y
    return out


def matmul(a, b):
    """numpy.matmul: 1-d operands are a row / a column (dropped from the result), batch axes
    broadcast."""
    if not is_gpu(a):
        return a @ b
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    y = mm(_batched(a2, batch), _batched(b2, batch))
    y = y.reshape(batch + y.shape[-2:])
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


def _batched(x, batch):
    """x (..., R, C) as one matrix (2-d: every batch item reads it) or (items, R, C)."""
    if all(n == 1 for n in x.shape[:-2]):
        return x.reshape(x.shape[-2:])
    x = xp_of(x).broadcast_to(x, batch + x.shape[-2:])
    # a copy only when the batch axes cannot merge; the batch size stated, not -1 (a matrix of
    # 0 entries leaves -1 undecided)
    return x.reshape((math.prod(batch),) + x.shape[-2:])


class MatMul(Function):
    """y = a @ b with numpy.matmul semantics (1-d operands, batch broadcasting)."""

    def forward(self, a, b):
        need = self.needs_input_grad or (False, False)
        self.shapes = a.shape, b.shape
        self.saved = (a if need[1] else None), (b if need[0] else None)   # (as torch's mm)
        return matmul(a, b)

    def backward(self, gy):
        a, b = self.saved
        (a_shape, b_shape), xp = self.shapes, self.xp
        a2_shape = (1,) + a_shape if len(a_shape) == 1 else a_shape
        b2_shape = b_shape + (1,) if len(b_shape) == 1 else b_shape
        g2 = gy
        if len(a_shape) == 1 and len(b_shape) == 1:     # (a dot product: gy is 0-d)
            g2 = gy.reshape(1, 1)
        elif len(a_shape) == 1:
            g2 = xp.expand_dims(g2, -2)
        elif len(b_shape) == 1:
            g2 = xp.expand_dims(g2, -1)
        ga = gb = None
        if self.needs_input_grad[0]:
            b2 = b.reshape(b2_shape)
            ga = unbroadcast(matmul(g2, xp.swapaxes(b2, -1, -2)), a2_shape).reshape(a_shape)
        if self.needs_input_grad[1]:
            a2 = a.reshape(a2_shape)
            gb = unbroadcast(matmul(xp.swapaxes(a2, -1, -2), g2), b2_shape).reshape(b_shape)
        return ga, gb

    def backward_graph(self, gy):
        """backward's products, as MatMul ops on Tensors: 1-d operands made a row / a column
        first, batch axes summed back to each operand's."""
        from .. import functional as F
        from .elementwise import unbroadcast_graph
        a, b = self.inputs
        a2 = F.reshape(a, (1,) + a.shape) if a.ndim == 1 else a
        b2 = F.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
        g2 = gy
        if a.ndim == 1 and b.ndim == 1:             # (a dot product: gy is 0-d)
            g2 = F.reshape(gy, (1, 1))
        elif a.ndim == 1:
            g2 = F.unsqueeze(gy, -2)
        elif b.ndim == 1:
            g2 = F.unsqueeze(gy, -1)
        need_a, need_b = self.needs_input_grad
        ga = F.reshape(unbroadcast_graph(MatMul.apply(g2, F.swapaxes(b2, -1, -2)), a2.shape),
                       a.shape) if need_a else None
        gb = F.reshape(unbroadcast_graph(MatMul.apply(F.swapaxes(a2, -1, -2), g2), b2.shape),
                       b.shape) if need_b else None
        return ga, gb


class Linear(Function):
    """y = x @ W.T + b, x (..., in), W (out, in) as torch.nn.Linear."""

    def forward(self, x, W, b=None):
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])     # (-1: undecided if in = 0)
        need = self.needs_input_grad or (False, False)
        self.saved = (x2 if need[1] else None), (W if need[0] else None), x.shape  # (as torch)
        return mm(x2, W.T, bias=b).reshape(x.shape[:-1] + (W.shape[0],))

    def backward(self, gy):
        """gx now; the weight's and bias's gradients Deferred (summed over every use of the layer
        at the end of backward: one GEMM for a layer called once per decoder frame)."""
        x2, W, shape = self.saved
        need_x, need_W = self.needs_input_grad[:2]
        g2 = gy.reshape(math.prod(gy.shape[:-1]), gy.shape[-1])
        gx = mm(g2, W).reshape(shape) if need_x else None
        gW = Deferred(g2, x2) if need_W else None
        gb = Deferred(g2) if len(self.needs_input_grad) > 2 and self.needs_input_grad[2] else None
        return gx, gW, gb

    def backward_graph(self, gy):
        from .. import functional as F
        x, W = self.inputs[:2]
        need = self.needs_input_grad
        g2 = F.reshape(gy, (math.prod(gy.shape[:-1]), gy.shape[-1]))
        gx = F.reshape(MatMul.apply(g2, W), x.shape) if need[0] else None
        gW = MatMul.apply(F.transpose(g2), F.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1]))) \
            if need[1] else None
        gb = F.sum(g2, 0) if len(need) > 2 and need[2] else None
        return gx, gW, gb

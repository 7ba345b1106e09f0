"""The differentiable ops, one family per file; each op's NumPy forward, GPU forward and backward
live together in one Function subclass. `layers.functional` is the user-facing spelling."""
from ..tensor import ADDED, Fresh


def nchw_views(cls):
    """Class decorator for an op written for NHWC data (layout='NHWC'): with `nchw=True` it takes
    NCHW-shaped 4-d operands stored channels-last (PyTorch's memory format) and runs on their NHWC
    views -- forward's 4-d inputs viewed NHWC and its 4-d result viewed back NCHW, backward's
    gradients the same way round. The views are taken inside the one op: four autograd nodes (a
    transpose of x, one of W, the op, a transpose back) and their backward steps were the host
    cost of a channels-last convolution before."""
    forward, backward = cls.forward, cls.backward

    def forward_views(self, *arrays):
        if not self.nchw:
            return forward(self, *arrays)
        return _views(forward(self, *_views(arrays, (0, 2, 3, 1))), (0, 3, 1, 2))

    def backward_views(self, *grads):
        if not self.nchw:
            return backward(self, *grads)
        if self.grad_into is not None:       # (the leaves' .grad arrays the op may add into)
            self.grad_into = _views(self.grad_into, (0, 2, 3, 1))
        return _views(backward(self, *_views(grads, (0, 2, 3, 1))), (0, 3, 1, 2))

    cls.forward, cls.backward, cls.nchw = forward_views, backward_views, False
    return cls


def _views(arrays, perm):
    """Each 4-d array of `arrays` (one array, or a tuple of arrays, Nones and Fresh-wrapped
    gradients: still Fresh, a view of an array no one else holds) transposed by `perm`; the
    rest (ADDED too) as they are."""
    if type(arrays) is not tuple:
        return _view(arrays, perm)
    return tuple([_view(a, perm) for a in arrays])


def _view(a, perm):
    if a is None or a is ADDED:
        return a
    if type(a) is Fresh:
        return Fresh(_view(a.array, perm))
    return a.transpose(perm) if a.ndim == 4 else a


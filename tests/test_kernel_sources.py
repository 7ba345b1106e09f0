"""Every CUDA kernel the GPU path builds compiles for every floating dtype, checked with nvcc on a
machine with no GPU.

CuPy builds an ElementwiseKernel / ReductionKernel's source only when it is launched, so a type
error in a kernel body (e.g. `x > 0 ? x : x * slope`, whose branches are bfloat16 and float: an
ambiguous conditional for CuPy's bfloat16 class) would first show on a GPU. Here each kernel the
layers make is caught at construction (CuPy's kernel classes are swapped for recorders, and the
code around them is fed stand-in arrays), written out as CUDA C the way CuPy lays a kernel out
-- typedefs for its type placeholders, CuPy's own headers, the preamble, the body per element
(a reduction: map, then reduce, then post-map) -- and compiled by nvcc for T = float32, float64,
float16 and bfloat16. Skipped where there is no nvcc."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from layers import finite, kernels
from layers import random as lrandom
from layers.ops import attention as ops_attention
from layers.ops import rnn as ops_rnn

from host_kernels import C_NAMES

cupy = pytest.importorskip("cupy")
REAL_ELEMENTWISE = cupy.ElementwiseKernel
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)),
                                    None)
NEEDS_NVCC = pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")


class Stand:
    """A stand-in for a device array (or anything CuPy would return): every attribute, call,
    index and arithmetic gives another stand-in; it has a dtype, a shape and a size."""

    def __init__(self, dtype="float32"):
        self.dtype = np.dtype(dtype)
        self.shape, self.size, self.ndim, self.itemsize = (4, 4), 16, 2, self.dtype.itemsize

    def __getattr__(self, name):
        return Stand(self.dtype)

    def __call__(self, *args, **kwargs):
        return Stand(self.dtype)

    def __getitem__(self, i):
        return Stand(self.dtype)

    def __setitem__(self, i, v):
        pass

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = \
        __rtruediv__ = lambda self, other: Stand(self.dtype)


class Recorder:
    def __init__(self, kind, *args, **kwargs):
        self.kind, self.args, self.kwargs, self.calls = kind, args, kwargs, []
        HARVEST.append(self)

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        outs = len(_params(self.args[1])) if self.kind == "elementwise" else 1
        dtype = next((a.dtype for a in args if isinstance(a, Stand)), "float32")
        return tuple(Stand(dtype) for _ in range(outs)) if outs > 1 else Stand(dtype)


HARVEST = []


def _harvest(monkeypatch, dtype):
    """Run every kernel-building path of layers with stand-ins; returns the recorded kernels."""
    HARVEST.clear()
    kernels.elementwise.cache_clear()
    kernels.pointwise.cache_clear()
    kernels.reduction.cache_clear()
    kernels._sumsq_kernel.cache_clear()
    monkeypatch.setattr(ops_rnn._kernel, "cache", {}, raising=False)
    for name, kind in (("ElementwiseKernel", "elementwise"), ("ReductionKernel", "reduction"),
                       ("RawKernel", "raw")):
        monkeypatch.setattr(cupy, name, lambda *a, _k=kind, **kw: Recorder(_k, *a, **kw))
    like = lambda a, *_, **k: Stand(a.dtype if isinstance(a, Stand) else dtype)   # noqa: E731
    made = lambda _, dt=None, **k: Stand(k.get("dtype", dt) or dtype)            # noqa: E731
    for name, fake in (("array", made), ("empty", made), ("empty_like", like),
                       ("zeros_like", like), ("broadcast_to", like)):
        monkeypatch.setattr(cupy, name, fake)
    monkeypatch.setattr(kernels, "_blocks_for", lambda device_id: 4)
    monkeypatch.setattr(kernels, "empty_like", like)
    monkeypatch.setattr(ops_rnn, "mm", lambda *a, **k: Stand(dtype))
    x = Stand(dtype)
    kernels.leaky_relu(x, 0.2)
    kernels.leaky_relu_grad(x, x, 0.2)
    for mode in ("none", "sum", "mean"):
        kernels.bce(x, x, mode)
    kernels.bce_grad(x, x, x)
    kernels.softmax(x, -1)
    kernels.join2(x, x, 1)
    x4 = Stand(dtype)
    x4.shape = (1, 4, 4, 1)
    kernels.im2col_nhwc(x4, 2, 2, (1, 1), (0, 0), (1, 1), 3, 3)
    kernels.col2im_nhwc(x, (1, 4, 4, 1), 2, 2, (1, 1), (0, 0), (1, 1), 3, 3)
    kernels.softmax_grad(x, x, -1)
    for act in kernels._ACT_FWD:
        kernels.activation(act, x)
        kernels.activation_grad(act, x, x)
    for approximate in kernels._GELU:
        kernels.gelu(x, approximate)
        kernels.gelu_grad(x, x, approximate)
    kernels.erf(x)
    kernels.adam(x, x, x, x, Stand("int64"), 1e-3, 0.9, 0.999, 1e-8, 0.0)
    kernels.adam_multi(Stand("int64"), 2, 16, x, 1e-3, 0.9, 0.999, 1e-8, 0.0)
    kernels.sync_master(Stand("float32"), x)
    kernels.adam_master(x, x, Stand("float32"), Stand("float32"), Stand("float32"),
                        Stand("int64"), 1e-3, 0.9, 0.999, 1e-8, 0.0)
    kernels.adam_master_multi(Stand("int64"), 2, 16, x, 1e-3, 0.9, 0.999, 1e-8, 0.0)
    if dtype in ("float32", "float64"):          # the foreach norm's dtypes
        kernels.multi_sumsq(Stand("int64"), 2, 16, x)
        kernels.multi_scale(Stand("int64"), 2, 16, x, Stand(dtype), 1.0)
    finite._flag_kernel()
    finite._word_kernel.cache_clear()
    finite._word_kernel(dtype)
    finite._multi_word_kernel.cache_clear()
    finite._multi_word_kernel(dtype)
    kernels._vector_kernel.cache_clear()
    if dtype in kernels._VECTOR_TYPES:             # (the 16-byte-vector ReLU / LeakyReLU)
        for op in kernels._VECTOR_OPS:
            kernels._vector_kernel(op, dtype)
    gen = lrandom.DeviceGenerator(0)
    gen.dropout(x, 0.1)
    gen.uniform((4, 4), dtype)
    gen.normal((4, 4), dtype)
    ops_attention._kernel.cache_clear()
    for direction in ("fwd", "bwd"):           # memory stored as the data, or bfloat16's bits
        F = "double" if dtype == "float64" else "float"
        for location in (False, True):            # (LocationAttention's too)
            ops_attention._kernel(direction, F, "float64" if dtype == "float64" else "float32",
                                  location)
            if F == "float":
                ops_attention._kernel(direction, F, "bfloat16", location)
    cell = ops_rnn.LSTMCell()
    cell.gpu = True
    cell.forward(x, x, x, x, x)
    cell.needs_input_grad = (False,) * 7
    cell.backward(x, x)
    return list(HARVEST)


def _params(spec):
    """'T x, raw int64 tab' -> [(raw, type, name)]."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        words = part.split()
        raw = words[0] == "raw"
        out.append((raw, words[-2], words[-1]))
    return out


def _ctype(t, dtype, placeholders):
    if t in C_NAMES:
        return C_NAMES[t]
    placeholders.add(t)
    return t


def _placeholder_types(placeholders, dtype):
    """T is the dtype under test; any other placeholder (a sum or update type) float / double."""
    acc = "double" if dtype == "float64" else "float"
    return "".join(f"typedef {C_NAMES[dtype] if p == 'T' else acc} {p};\n"
                   for p in sorted(placeholders))


def _elementwise_source(k, dtype, uid):
    in_params, out_params, body, name = k.args[:4]
    preamble = k.kwargs.get("preamble", k.args[4] if len(k.args) > 4 else "")
    placeholders, args, binds = set(), [], []
    for spec, const in ((in_params, True), (out_params, False)):
        for raw, t, n in _params(spec):
            c = _ctype(t, dtype, placeholders)
            if raw:
                args.append(f"{'const ' if const else ''}{c}* {n}")
            elif const:
                args.append(f"const {c}* _p_{n}")
                binds.append(f"const {c}& {n} = _p_{n}[i];")
            else:
                args.append(f"{c}* _p_{n}")
                binds.append(f"{c}& {n} = _p_{n}[i];")
    return (f"namespace k{uid} {{\n{_placeholder_types(placeholders, dtype)}{preamble}\n"
            f"__global__ void {name}({', '.join(args)}, long long _size) {{\n"
            f"  for (long long i = threadIdx.x; i < _size; i += blockDim.x) {{\n"
            f"    {' '.join(binds)}\n    {body};\n  }}\n}}\n}}\n")


def _reduction_source(k, dtype, uid):
    in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name = k.args[:7]
    preamble = k.kwargs.get("preamble", "")
    placeholders, args, binds = set(), [], []
    for raw, t, n in _params(in_params):
        c = _ctype(t, dtype, placeholders)
        args.append(f"const {c}* _p_{n}")
        binds.append(f"const {c}& {n} = _p_{n}[i];")
    (_, t_out, out_name), = _params(out_params)
    c_out = _ctype(t_out, dtype, placeholders)
    return (f"namespace k{uid} {{\n{_placeholder_types(placeholders, dtype)}{preamble}\n"
            f"typedef {c_out} _type_reduce;\n"
            f"#define REDUCE(a, b) ({reduce_expr})\n#define POST_MAP(a) ({post_map_expr})\n"
            f"__global__ void {name}({', '.join(args)}, {c_out}* _p_{out_name}, long long _size) {{\n"
            f"  _type_reduce _acc = _type_reduce({identity});\n"
            f"  for (long long i = threadIdx.x; i < _size; i += blockDim.x) {{\n"
            f"    {' '.join(binds)}\n    _type_reduce _v = _type_reduce({map_expr});\n"
            f"    _acc = REDUCE(_acc, _v);\n  }}\n"
            f"  {c_out}& {out_name} = _p_{out_name}[0];\n  POST_MAP(_acc);\n}}\n"
            f"#undef REDUCE\n#undef POST_MAP\n}}\n")


def _raw_source(k, dtype, uid):
    return f"namespace k{uid} {{\n{k.args[0]}\n}}\n"


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_every_elementwise_kernel_can_resolve_its_types(dtype, monkeypatch):
    """CuPy infers a type placeholder (T, S) from the arrays of a call only, never from a scalar
    (a 'T x, S slope' kernel called with a float for slope fails with KeyError: 'S'): each kernel,
    built by CuPy and given the dtypes of the call the layers made, resolves every placeholder."""
    harvest = _harvest(monkeypatch, dtype)
    checked = 0
    for k in harvest:
        if k.kind != "elementwise":
            continue
        kernel = REAL_ELEMENTWISE(*k.args, **k.kwargs)
        for args in k.calls:
            types = [a.dtype.type if isinstance(a, Stand) else None for a in args]
            ins, outs = types[:kernel.nin], types[kernel.nin:]
            kernel._decide_params_type(tuple(ins), tuple(outs))    # raises on an unknown one
            checked += 1
    assert checked >= 15


@NEEDS_NVCC
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_every_kernel_compiles_for(dtype, monkeypatch, tmp_path):
    harvest = _harvest(monkeypatch, dtype)
    names = {k.args[1] if k.kind == "raw" else k.args[3 if k.kind == "elementwise" else 6]
             for k in harvest}
    names |= {n.rsplit("_", 1)[0] for n in names}       # (names keyed by a scalar's type)
    for expected in ("leaky_relu_fwd", "bce_bwd", "cudnnlite_softmax_fwd", "cudnnlite_relu_fwd",
                     "cudnnlite_join2", "cudnnlite_adam_master_multi", "cudnnlite_adam_steps",
                     "cudnnlite_sync_master", "cudnnlite_adam_master", "cudnnlite_dropout",
                     "cudnnlite_first_nonfinite_multi", "cudnnlite_first_nonfinite_words",
                     "cudnnlite_normal", "lstm_cell_bwd", "cudnnlite_erf"):
        assert expected in names, (expected, sorted(names))
    for op in ("additive", "location"):   # (named by compute and memory types)
        for direction in ("fwd", "bwd"):
            assert any(n.startswith(f"cudnnlite_{op}_attention_{direction}_") for n in names)
    make = {"elementwise": _elementwise_source, "reduction": _reduction_source,
            "raw": _raw_source}
    source = "#include <cassert>\n#include <cupy/carray.cuh>\n#include <cupy/float16.cuh>\n#include <cupy/bfloat16.cuh>\n" + \
        "".join(make[k.kind](k, dtype, uid) for uid, k in enumerate(harvest))
    source = re.sub(r'extern "C" ', "", source)      # (raw kernels sit in a namespace here)
    path = tmp_path / f"kernels_{dtype}.cu"
    path.write_text(source)
    include = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
    r = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", f"-I{include}", "-c", str(path),
                        "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert r.returncode == 0, f"{len(harvest)} kernels for {dtype}:\n{r.stderr[-6000:]}"

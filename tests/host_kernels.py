"""CuPy's kernels run on the host, so their arithmetic is checked in CI with no GPU.

`HOST` stands in for the cupy module: its ElementwiseKernel, ReductionKernel and RawKernel take
the same CUDA C the layers give CuPy, compile it with the host C++ compiler (a prelude maps
CUDA's qualifiers and math functions, and CuPy's float16 / bfloat16 types, onto host C++) and
run it on NumPy arrays with CuPy's calling conventions:

- ElementwiseKernel: type placeholders resolved by CuPy itself (`_decide_params_type`, from
  the arrays only: a scalar fixes no placeholder, as in CuPy), non-raw
  arguments broadcast, scalars by value, `raw` arguments indexed in C order through their
  strides (CuPy's CArray), `i` the element index, `size=` for kernels with no
  non-raw array; outputs allocated when not given (and written back when given non-contiguous).
- ReductionKernel: map, reduce and post-map per output element over `axis`, in order.
- RawKernel: the blocks of the grid one after another, each with its blockDim.x threads run
  as real threads (threadIdx thread-local, __shared__ arrays shared by the block's threads,
  __syncthreads a barrier of them), so a block-level reduction, a stride that forgets
  blockDim or a missing barrier computes here what it would on a GPU.

The rest of the module (empty, empty_like, broadcast_to, ...) is NumPy returning HostArray, an
ndarray with CuPy's `.data.ptr`, `.device.id` and `.get()`, so tables of device pointers
(multi-tensor kernels) hold host pointers the host kernels can follow. As in CuPy, a NumPy array
among the arguments of those routines or of a ufunc on HostArrays is a TypeError (cupy.asarray /
array take host data), and a whole reduction gives a 0-d HostArray, not a NumPy scalar: a GPU
path that hands NumPy data to CuPy fails here as on a GPU (L.tensor did, unseen for twelve
sessions without a GPU, failing 1,227 GPU tests). The other way round too: the engine's own
code converting a HostArray with np.asarray / np.array / ... is CuPy's TypeError (CuPy's
ndarray refuses implicit conversion; see NUMPY_CONVERSIONS), and so is a NumPy spelling CuPy
lacks: the engine's calls of HOST's functions, of NumPy's functions on HostArrays and of their
methods are bound to CuPy 14's own signatures (no `where=` on a reduction, no `clip(min=)`, no
`item(i)`), and a name CuPy has not (errstate, nanpercentile, ndarray.ctypes) is CuPy's error.

Not a CUDA emulator: warp-level behaviour, real thread interleaving and CUDA's exact math
library are out of reach; half-precision math here converts to float, computes and rounds, as
CuPy's float16 / bfloat16 classes do."""
import collections
import ctypes
import functools
import hashlib
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from types import SimpleNamespace

import numpy as np

CXX = shutil.which("g++") or shutil.which("c++")

# a NumPy dtype's name -> the C type CuPy's kernel sources call it (test_kernel_sources too)
C_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float", "float64": "double",
           "int8": "signed char", "uint8": "unsigned char", "int16": "short",
           "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
           "int64": "long long", "uint64": "unsigned long long", "bool": "bool"}

PRELUDE = r"""
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstddef>
#include <cstring>
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#include <pthread.h>
// a block's threads are real threads: thread-local threadIdx, a barrier for __syncthreads
static pthread_barrier_t host_barrier;
static bool host_barrier_made = false;
#define __syncthreads() pthread_barrier_wait(&host_barrier)
struct host_dim3 { unsigned int x, y, z; };
static thread_local host_dim3 threadIdx = {0, 0, 0};
static host_dim3 blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
extern "C" void host_set_block(unsigned int b, unsigned int grid, unsigned int threads) {
    blockIdx.x = b; gridDim.x = grid; blockDim.x = threads;
    if (host_barrier_made) pthread_barrier_destroy(&host_barrier);
    pthread_barrier_init(&host_barrier, 0, threads);
    host_barrier_made = true;
}
extern "C" void host_set_thread(unsigned int t) { threadIdx.x = t; }

// a `raw` argument: element i is the i-th in C order of its shape, read through its strides
template <typename T> struct host_raw {
    T* p; int ndim; const long long* layout;     // layout: shape[ndim], then byte strides[ndim]
    T& operator[](ptrdiff_t i) const {
        long long off = 0;
        for (int d = ndim - 1; d >= 0; --d) {
            const long long n = layout[d];
            off += (i % n) * layout[ndim + d];
            i /= n;
        }
        return *reinterpret_cast<T*>(reinterpret_cast<char*>(p) + off);
    }
};

// CuPy's half types: stored in 16 bits, converted to float for arithmetic, rounded (to nearest
// even) when a float is stored back -- as cupy/float16.cuh and cupy/bfloat16.cuh behave (but for
// a NaN's bits: kept quiet with its payload here, 0x7fff from CUDA's __float2bfloat16)
typedef _Float16 float16;
struct bfloat16 {
    uint16_t bits;
    bfloat16() = default;
    bfloat16(float f) {
        uint32_t u; std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) { bits = (uint16_t)((u >> 16) | 0x40u); return; }
        u += 0x7fffu + ((u >> 16) & 1u);
        bits = (uint16_t)(u >> 16);
    }
    bfloat16(double d) : bfloat16((float)d) {}
    bfloat16(int i) : bfloat16((float)i) {}
    bfloat16(long long i) : bfloat16((float)i) {}
    bfloat16(float16 h) : bfloat16((float)h) {}
    operator float() const { uint32_t u = (uint32_t)bits << 16; float f; std::memcpy(&f, &u, 4); return f; }
};
#define HALF_MATH(T) \
    inline T exp(T x) { return (T)::expf((float)x); } \
    inline T log(T x) { return (T)::logf((float)x); } \
    inline T log1p(T x) { return (T)::log1pf((float)x); } \
    inline T tanh(T x) { return (T)::tanhf((float)x); } \
    inline T sqrt(T x) { return (T)::sqrtf((float)x); } \
    inline bool isfinite(T x) { return std::isfinite((float)x); } \
    inline bool isnan(T x) { return std::isnan((float)x); }
HALF_MATH(float16)
HALF_MATH(bfloat16)
using std::isfinite;
using std::isnan;
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline float cospif(float x) { return (float)std::cos(M_PI * (double)x); }
inline double cospi(double x) { return std::cos(M_PI * x); }
inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
    unsigned long long old = *a; if (v < old) *a = v; return old;
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
    unsigned long long old = *a; *a += v; return old;
}
inline float atomicAdd(float* a, float v) { float old = *a; *a += v; return old; }
inline double atomicAdd(double* a, double v) { double old = *a; *a += v; return old; }
"""

_LIBS = {}
CALLS = collections.Counter()   # launches of each host kernel and calls of each cuDNN stand-in


def _build_dir():
    """Compiled kernels are kept across runs (keyed by their source), so a rerun compiles
    nothing: $CUDNNLITE_HOST_KERNELS, else ~/.cache/cudnnlite/host_kernels."""
    d = os.environ.get("CUDNNLITE_HOST_KERNELS") or \
        os.path.join(os.path.expanduser("~"), ".cache", "cudnnlite", "host_kernels")
    os.makedirs(d, exist_ok=True)
    return d


def _compile(source):
    """A ctypes library of `source` (prelude prepended), cached by its text."""
    key = hashlib.sha1((PRELUDE + source).encode()).hexdigest()[:20]
    if key not in _LIBS:
        if CXX is None:
            raise RuntimeError("no host C++ compiler (g++ / c++) to run CuPy kernels on the host")
        lib = os.path.join(_build_dir(), f"{key}.so")
        if not os.path.exists(lib):
            work = tempfile.mkdtemp(prefix="host_kernel_")
            try:
                src, tmp = os.path.join(work, "k.cpp"), os.path.join(work, "k.so")
                with open(src, "w") as f:
                    f.write(PRELUDE + source)
                r = subprocess.run([CXX, "-std=c++17", "-pthread", "-O1", "-shared", "-fPIC", "-w", src,
                                    "-o", tmp], capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(f"host compile of a CuPy kernel failed:\n"
                                       f"{r.stderr[-4000:]}\n--- source ---\n{source}")
                os.replace(tmp, lib)        # atomic: a concurrent run sees all of it or none
            finally:
                shutil.rmtree(work, ignore_errors=True)
        _LIBS[key] = ctypes.CDLL(lib)
    return _LIBS[key]


_CUPY = []
STRICT = {"indexing": False}     # (install(strict=True) sets it for the test's duration)


def _real_cupy():
    """The cupy module itself (kept: install_cudnn puts HOST in its place for cudnnlite)."""
    if not _CUPY:
        import cupy
        _CUPY.append(cupy)
    return _CUPY[0]


def _real_cupy_or_none():
    try:
        return _real_cupy()
    except ImportError:
        return None


# ---- CuPy's own signatures ----------------------------------------------------------------------
# HOST's functions are NumPy's and HostArray's methods ndarray's: both take arguments CuPy's do
# not (NumPy 2's clip(min=, max=), a reduction's where= or initial=, item(i)), and NumPy has
# functions CuPy lacks (errstate, nanpercentile, insert, ...). A GPU path using one would pass here
# and fail on a GPU, so each call is bound to CuPy's own signature first: cupy.<name>'s as
# inspect reads it, cupy.ndarray's methods' as their Cython docstrings state it.

@functools.lru_cache(maxsize=None)
def _cupy_signature(name):
    """inspect.Signature of cupy.<name>, None where CuPy's gives none to read (or CuPy is not
    installed); AttributeError where CuPy has no such function (CuPy's own error)."""
    cp = _real_cupy_or_none()
    if cp is None or name.startswith("__"):
        return None
    if not hasattr(cp, name):
        raise AttributeError(f"module 'cupy' has no attribute {name!r} (NumPy's {name} has no "
                             f"CuPy counterpart: the host harness refuses it as CuPy would)")
    try:
        return inspect.signature(getattr(cp, name))
    except (TypeError, ValueError):
        return None


def _method_signature(name):
    """inspect.Signature of cupy.ndarray.<name>: inspect's, else its docstring's first line as
    Cython writes it ("_ndarray_base.sort(self, int axis=-1, kind=None)"; C types dropped), or None."""
    method = getattr(_real_cupy_or_none().ndarray, name)
    try:
        return inspect.signature(method)            # (the few written in Python: view)
    except (TypeError, ValueError):
        pass
    doc = method.__doc__ or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    head = f"_ndarray_base.{name}("
    if not first.startswith(head) or ")" not in first:
        return None
    params = []
    for p in first[len(head):first.rindex(")")].split(","):
        words = p.strip().split("=")[0].split()
        params.append(p.strip() if len(words) < 2 else p.strip()[p.strip().index(words[-1]):])
    scope = {}
    try:
        exec(f"def {name}({', '.join(params)}): pass", scope)
    except SyntaxError:
        return None
    return inspect.signature(scope[name])


def _bind(what, signature, args, kwargs):
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what}{signature}: {e} (CuPy's own signature: the host harness binds "
                        f"each call to it, as a GPU would refuse the call)") from None


def _engine_caller(depth=2):
    """Whether the code `depth` frames up is the engine's own (not NumPy, the harness, a test)."""
    return sys._getframe(depth).f_globals.get("__name__", "").split(".")[0] in ENGINE


def _cupy_method(name, signature, method):
    def checked(self, *args, **kwargs):
        if _engine_caller():
            _bind(f"cupy.ndarray.{name}", signature, (self,) + args, kwargs)
        return method(self, *args, **kwargs)
    checked.__name__, checked.__wrapped__ = name, method
    return checked


def _cupy_array_function(self, func, types, args, kwargs):
    """NumPy's functions handed a HostArray by the engine's code, as CuPy's ndarray takes
    them: CuPy's function of the same name (NumPy's TypeError where CuPy has none), bound to
    CuPy's signature, its arrays device arrays (0-d for a whole reduction)."""
    if not _engine_caller():
        return np.ndarray.__array_function__(self, func, types, args, kwargs)
    counterpart = _real_cupy_or_none()             # numpy.linalg.norm -> cupy.linalg.norm
    for part in func.__module__.split(".")[1:] + [func.__name__]:
        counterpart = getattr(counterpart, part, None)
    if counterpart is None and _real_cupy_or_none() is not None:
        raise TypeError(f"no implementation found for '{func.__module__}.{func.__name__}' on "
                        f"types that implement __array_function__: [<class "
                        f"'cupy.ndarray'>] (CuPy has no {func.__name__}: the host harness "
                        f"refuses it as a GPU would)")
    try:
        signature = inspect.signature(counterpart)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        _bind(f"cupy.{func.__name__} (numpy.{func.__name__} of a device array)", signature,
              args, kwargs)
    return _device_results(np.ndarray.__array_function__(self, func, types, args, kwargs))


def _device_results(r):
    """A CuPy function's results: its arrays device arrays (0-d ones where NumPy gives a scalar
    of an array), in the tuple, list or namedtuple NumPy gives them in (nonzero, split, ...)."""
    if isinstance(r, (tuple, list)) and r and all(isinstance(a, np.ndarray) for a in r):
        made = [host(a) for a in r]
        return type(r)(*made) if hasattr(r, "_fields") else type(r)(made)
    return host(r) if isinstance(r, (np.ndarray, np.generic)) else r


def _wrapped_index(index, shape):
    """CuPy's integer-array indexing: an index array's entries taken modulo its axis's size,
    where NumPy raises IndexError ("CuPy handles out-of-bounds indices differently by default
    from NumPy ... CuPy wraps around them"). Everything else as it is (a Python int: CuPy checks
    it); the index is returned unchanged where it holds no integer array, so views stay views.
    Entries before an Ellipsis count axes from the front, entries after it from the back."""
    entries = list(index) if isinstance(index, tuple) else [index]
    if not any(_is_int_array(e) for e in entries):
        return index
    at = next((i for i, e in enumerate(entries) if e is Ellipsis), len(entries))
    out = list(entries)
    axis = 0
    for i in range(at):                                 # (front to back, up to an Ellipsis)
        out[i], axis = _wrap_entry(entries[i], axis, shape, +1)
    axis = len(shape) - 1
    for i in range(len(entries) - 1, at, -1):           # (back to front, after it)
        out[i], axis = _wrap_entry(entries[i], axis, shape, -1)
    return out[0] if not isinstance(index, tuple) else tuple(out)


def _wrap_entry(e, axis, shape, step):
    """(e wrapped for `axis`, the next axis): None and a Python bool add an axis (none used),
    a mask uses its number of axes, anything else one."""
    if e is None or isinstance(e, (bool, np.bool_)):
        return e, axis
    if _is_mask(e):
        return e, axis + step * np.ndim(e)
    if _is_int_array(e) and 0 <= axis < len(shape) and shape[axis] > 0:
        e = _plain(e) % shape[axis]
    return e, axis + step


def _plain(e):
    """An index entry (list, NumPy or device array) as a NumPy array."""
    return np.asarray(e.view(np.ndarray) if isinstance(e, HostArray) else e)


def _is_int_array(e):
    return isinstance(e, (list, np.ndarray)) and _plain(e).dtype.kind in "iu"


def _is_mask(e):
    return isinstance(e, (list, np.ndarray)) and _plain(e).dtype == np.bool_


def _cupy_take(a, indices, axis=None, out=None):
    """cupy.take: indices wrapped modulo the axis's size (the flat size with no axis)."""
    n = a.size if axis is None else a.shape[axis]
    i = np.asarray(indices.view(np.ndarray) if isinstance(indices, HostArray) else indices)
    return host(np.take(a.view(np.ndarray), i % n if n else i, axis=axis, out=out))


def _cupy_take_along_axis(a, indices, axis):
    n = a.shape[axis] if axis is not None else a.size
    i = indices.view(np.ndarray)
    return host(np.take_along_axis(a.view(np.ndarray), i % n if n else i, axis=axis))


def _cupy_put_along_axis(a, indices, values, axis):
    i = indices.view(np.ndarray)
    np.put_along_axis(a.view(np.ndarray), i % a.shape[axis] if a.shape[axis] else i,
                      values.view(np.ndarray) if isinstance(values, HostArray) else values,
                      axis=axis)


# the cupy module's index routines wrap an index out of range (always, as CuPy's do)
_WRAPPING = {"take": _cupy_take, "take_along_axis": _cupy_take_along_axis,
             "put_along_axis": _cupy_put_along_axis}


def _no_cupy_attribute(name):
    def refused(self):
        if _engine_caller():
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r} (NumPy's "
                                 f"ndarray.{name}: the host harness refuses it as CuPy would)")
        return getattr(super(HostArray, self), name)
    return property(refused)


def _cupy_ndarray_methods(monkeypatch):
    """HostArray's public ndarray methods checked against cupy.ndarray's when the engine calls
    them; ndarray attributes CuPy's ndarray lacks refused to the engine."""
    cp = _real_cupy_or_none()
    if cp is None:
        return
    for name in dir(np.ndarray):
        if name.startswith("_") or name in HostArray.__dict__:
            continue
        if not hasattr(cp.ndarray, name):
            monkeypatch.setattr(HostArray, name, _no_cupy_attribute(name))
            continue
        signature = _method_signature(name)
        if signature is not None and callable(getattr(np.ndarray, name)):
            monkeypatch.setattr(HostArray, name,
                                _cupy_method(name, signature, getattr(np.ndarray, name)))


class HostArray(np.ndarray):
    """An ndarray with the attributes of a CuPy array the layers read (`data` made once per
    array, `device` a constant: CuPy's are C attributes, so a host timing of the GPU path should
    not be dominated by them)."""

    @property
    def data(self):
        d = self.__dict__.get("_data")
        if d is None:
            d = self.__dict__["_data"] = SimpleNamespace(ptr=self.__array_interface__["data"][0])
        return d

    @property
    def device(self):
        return _DEVICE0

    @property
    def __cuda_array_interface__(self):       # so layers.backend.is_gpu takes it for a device array
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.ctypes.data, False), "strides": self.strides}

    def get(self):
        return np.array(self, order="C")          # CuPy's .get(): C-ordered, whatever the strides

    def __getitem__(self, index):
        """(CuPy's x[i, j] of every axis is a 0-d device array, where NumPy gives a scalar; and
        with STRICT["indexing"], the engine's index arrays wrap as CuPy's: _wrapped_index.)"""
        if STRICT["indexing"] and _engine_caller():
            index = _wrapped_index(index, self.shape)
        r = super().__getitem__(index)
        return host(np.asarray(r)) if isinstance(r, np.generic) else r

    def __setitem__(self, index, value):
        if STRICT["indexing"] and _engine_caller():
            index = _wrapped_index(index, self.shape)
        super().__setitem__(index, value)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufunc on the host arrays, after CuPy's refusal of a NumPy array among them
        (`cupy_array + numpy_array` is a TypeError on a GPU, so it must be one here too: the
        host path would otherwise compute what the GPU refuses)."""
        outs = kwargs.get("out") or ()
        refuse_host_arrays(f"cupy.{ufunc.__name__}", inputs + tuple(outs))
        args = [a.view(np.ndarray) if isinstance(a, HostArray) else a for a in inputs]
        if outs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, HostArray) else o
                                  for o in outs)
        r = super().__array_ufunc__(ufunc, method, *args, **kwargs)
        if r is NotImplemented or r is None:
            return r
        if outs:
            return outs[0] if len(outs) == 1 else tuple(outs)
        # (CuPy gives 0-d arrays where NumPy gives scalars: a whole reduction stays on the device)
        if isinstance(r, tuple):
            return tuple(host(v) if isinstance(v, (np.ndarray, np.generic)) else v for v in r)
        return host(r) if isinstance(r, (np.ndarray, np.generic)) else r


def refuse_host_arrays(name, args):
    """CuPy's TypeError for a NumPy array where it takes device arrays (lists of arrays, as
    concatenate's, looked into)."""
    for a in args:
        if isinstance(a, (list, tuple)):
            refuse_host_arrays(name, a)
        elif type(a) is np.ndarray:
            raise TypeError(f"{name}: a numpy.ndarray {a.shape} {a.dtype} among device arrays "
                            f"(CuPy refuses it: Unsupported type <class 'numpy.ndarray'>)")


_DEVICE0 = SimpleNamespace(id=0)


def host(a):
    return np.asarray(a).view(HostArray)


def _c_name(dtype):
    return C_NAMES[np.dtype(dtype).name]


def _pointer(a):
    return ctypes.c_void_p(np.asarray(a).ctypes.data)


def _scalar_pointer(value, dtype, keep):
    """A pointer to `value` stored as `dtype` (scalars go by pointer: ctypes has no half types)."""
    cell = np.array([value], dtype=dtype)
    keep.append(cell)
    return _pointer(cell)


def _typedefs(pairs):
    return "".join(f"typedef {_c_name(t)} {name};\n" for name, t in pairs)


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="kernel", preamble="", **_):
        self._cupy = _real_cupy().ElementwiseKernel(in_params, out_params, operation, name,
                                            preamble=preamble)
        self.params = [p for p in self._cupy.params if p.name != "_ind"]
        self.nin, self.nout = self._cupy.nin, self._cupy.nout
        self.operation, self.name, self.preamble = operation, name, preamble

    def __call__(self, *args, size=None, **_):
        args = list(args)
        if len(args) not in (self.nin, self.nin + self.nout):
            raise TypeError(f"{self.name}: {len(args)} arguments for {self.nin} inputs and "
                            f"{self.nout} outputs")
        ins, outs = args[:self.nin], args[self.nin:]

        def kind(a):
            return np.asarray(a).dtype.type

        in_types = tuple(kind(a) if isinstance(a, np.ndarray) else None for a in ins)
        out_types = tuple(kind(a) for a in outs)
        in_t, out_t, type_map = self._cupy._decide_params_type(in_types, out_types)
        types = dict(type_map._pairs)

        def resolved(p):
            return np.dtype(p.dtype if p.dtype is not None else types[p.ctype])

        arrays = [a for a, p in zip(args, self.params) if not p.raw and isinstance(a, np.ndarray)]
        if size is None:
            if not arrays:
                raise ValueError(f"{self.name}: no non-raw array and no size")
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
            size = int(np.prod(shape))
        else:
            shape = (size,)
        if not outs:
            outs = [host(np.empty(shape, resolved(p))) for p in self.params[self.nin:]]
        keep, call, decls, binds, writeback, head = [], [], [], [], [], []
        for k, (a, p) in enumerate(zip(list(ins) + list(outs), self.params)):
            t = resolved(p)
            c = p.ctype if p.ctype in types else _c_name(t)
            is_in = k < self.nin
            if p.raw:               # indexed in C order through its strides, as CuPy's CArray
                if not isinstance(a, np.ndarray):     # (a number has no memory to index:
                    raise TypeError(f"{self.name}: raw parameter {p.name!r} takes an array, "
                                    f"got {type(a).__name__}")  # CuPy's CArray fails to compile)
                layout = np.array(a.shape + a.strides, np.int64)
                keep.append(layout)
                decls += [f"{c}* _r_{p.name}", f"const long long* _l_{p.name}"]
                head.append(f"host_raw<{c}> {p.name}{{_r_{p.name}, {a.ndim}, _l_{p.name}}};")
                call += [_pointer(a), _pointer(layout)]
            elif not isinstance(a, np.ndarray):
                decls.append(f"const {c}* _s_{p.name}")
                binds.append(f"const {c} {p.name} = *_s_{p.name};")
                call.append(_scalar_pointer(a, t, keep))
            elif is_in:
                flat = np.ascontiguousarray(np.broadcast_to(a, shape), dtype=t)
                keep.append(flat)
                decls.append(f"const {c}* _in_{p.name}")
                binds.append(f"const {c} {p.name} = _in_{p.name}[i];")
                call.append(_pointer(flat))
            else:
                if a.shape != tuple(shape) and a.size != size:
                    raise ValueError(f"{self.name}: output {p.name} has shape {a.shape}, the "
                                     f"call's is {tuple(shape)}")
                buf = a if a.flags.c_contiguous else np.ascontiguousarray(a)
                if buf is not a:
                    writeback.append((a, buf))
                decls.append(f"{c}* _out_{p.name}")
                binds.append(f"{c}& {p.name} = _out_{p.name}[i];")
                call.append(_pointer(buf))
        source = (f"namespace {{\n{_typedefs(sorted(types.items()))}{self.preamble}\n}}\n"
                  f"extern \"C\" void run({', '.join(decls + ['long long _n'])}) {{\n"
                  f"  struct {{ long long n; long long size() const {{ return n; }} }} _ind = {{_n}};\n"
                  f"  {' '.join(head)}\n"
                  f"  for (long long _j = 0; _j < _n; ++_j) {{\n"
                  f"    const ptrdiff_t i = _j;\n    {' '.join(binds)}\n"
                  f"    {self.operation};\n  }}\n}}\n")
        _compile(source).run(*call, ctypes.c_longlong(size))
        CALLS[self.name] += 1
        for a, buf in writeback:
            a[...] = buf
        return outs[0] if len(outs) == 1 else tuple(outs)


class ReductionKernel:
    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
                 name="reduce_kernel", reduce_type=None, preamble="", **_):
        self._cupy = _real_cupy().ReductionKernel(in_params, out_params, map_expr, reduce_expr,
                                          post_map_expr, identity, name, reduce_type,
                                          preamble=preamble)
        self.map_expr, self.reduce_expr, self.post_map_expr = map_expr, reduce_expr, post_map_expr
        self.identity, self.name, self.preamble = identity, name, preamble

    def __call__(self, *args, out=None, axis=None, keepdims=False, **_):
        CALLS[self.name] += 1
        types = {}          # placeholders from the array arguments, which must agree (as CuPy)
        for a, p in zip(args, self._cupy.in_params):
            if p.dtype is None and isinstance(a, np.ndarray):
                if types.setdefault(p.ctype, a.dtype) != a.dtype:
                    raise TypeError(f"{self.name}: type is mismatched: {p.name} is {a.dtype}, "
                                    f"{p.ctype} is {types[p.ctype]}")
        ins = [np.asarray(a) for a in args]
        shape = np.broadcast_shapes(*(a.shape for a in ins))
        ndim = len(shape)
        axes = tuple(range(ndim)) if axis is None else \
            tuple(sorted(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,))))
        kept = [d for d in range(ndim) if d not in axes]
        O = int(np.prod([shape[d] for d in kept]))
        R = int(np.prod([shape[d] for d in axes]))
        (po,) = self._cupy.out_params
        out_dtype = np.dtype(po.dtype if po.dtype is not None else
                             (out.dtype if out is not None else types[po.ctype]))
        if po.dtype is None:
            types.setdefault(po.ctype, out_dtype)
        reduce_c = self._cupy.reduce_type
        keep, call, decls, binds = [], [], [], []
        for a, p in zip(ins, self._cupy.in_params):
            t = np.dtype(p.dtype) if p.dtype is not None else types[p.ctype]
            moved = np.moveaxis(np.broadcast_to(a, shape), axes, tuple(range(ndim - len(axes), ndim)))
            flat = np.ascontiguousarray(moved, dtype=t).reshape(O, R)
            keep.append(flat)
            c = p.ctype if p.ctype in types else _c_name(t)
            decls.append(f"const {c}* _in_{p.name}")
            binds.append(f"const {c} {p.name} = _in_{p.name}[_o * _R + _r];")
            call.append(_pointer(flat))
        result = np.empty(O, out_dtype)
        c_out = po.ctype if po.ctype in types else _c_name(out_dtype)
        source = (f"namespace {{\n{_typedefs(sorted(types.items()))}{self.preamble}\n"
                  f"typedef {reduce_c} _type_reduce;\n"
                  f"inline _type_reduce _reduce(const _type_reduce& a, const _type_reduce& b) "
                  f"{{ return ({self.reduce_expr}); }}\n}}\n"
                  f"extern \"C\" void run({', '.join(decls)}, {c_out}* _out, long long _O, "
                  f"long long _R) {{\n"
                  f"  for (long long _o = 0; _o < _O; ++_o) {{\n"
                  f"    _type_reduce _acc = (_type_reduce)({self.identity});\n"
                  f"    for (long long _r = 0; _r < _R; ++_r) {{\n"
                  f"      {' '.join(binds)}\n"
                  f"      _acc = _reduce(_acc, (_type_reduce)({self.map_expr}));\n    }}\n"
                  f"    {{ _type_reduce a = _acc; {c_out}& {po.name} = _out[_o]; "
                  f"{self.post_map_expr}; }}\n  }}\n}}\n")
        _compile(source).run(*call, _pointer(result), ctypes.c_longlong(O), ctypes.c_longlong(R))
        out_shape = tuple(1 if d in axes else shape[d] for d in range(ndim)) if keepdims else \
            tuple(shape[d] for d in kept)
        result = result.reshape(out_shape)
        if out is not None:
            out[...] = result
            return out
        return host(result)


class RawKernel:
    def __init__(self, code, name, **_):
        self.code, self.name = code, name

    def __call__(self, grid, block, args, **_):
        CALLS[self.name] += 1
        lib = _compile(self.code)
        fn = getattr(lib, self.name)
        keep, call = [], []
        for a in args:
            if isinstance(a, np.ndarray) and a.ndim:
                call.append(_pointer(a))
            else:
                cell = np.array([a], np.asarray(a).dtype)
                keep.append(cell)
                call.append({4: ctypes.c_int32, 8: ctypes.c_int64}[cell.itemsize](int(a))
                            if cell.dtype.kind in "iu" else
                            {4: ctypes.c_float, 8: ctypes.c_double}[cell.itemsize](float(a)))
        n = int(np.prod(grid)) if isinstance(grid, tuple) else int(grid)
        threads = int(np.prod(block)) if isinstance(block, tuple) else int(block)

        def thread(t):
            lib.host_set_thread(ctypes.c_uint(t))
            fn(*call)               # (ctypes lets go of the GIL: the block's threads interleave)

        for b in range(n):
            lib.host_set_block(ctypes.c_uint(b), ctypes.c_uint(n), ctypes.c_uint(threads))
            running = [threading.Thread(target=thread, args=(t,), daemon=True)
                       for t in range(threads)]
            for t in running:
                t.start()
            for t in running:
                t.join(timeout=60)
            if any(t.is_alive() for t in running):
                raise RuntimeError(f"{self.name}: block {b} did not finish in 60 s -- a "
                                   f"__syncthreads() that not every thread of the block reaches?")


def _wrap(fn, name):
    signature = _cupy_signature(name)

    def made(*args, **kwargs):
        refuse_host_arrays(f"cupy.{name}", args + tuple(kwargs.values()))
        if signature is not None:
            _bind(f"cupy.{name}", signature, args, kwargs)
        r = fn(*args, **kwargs)
        return _device_results(r) if isinstance(r, (tuple, list)) else \
            host(r) if isinstance(r, np.ndarray) else r
    return made


class _Device:
    def __init__(self, id=0):
        self.id = id
        self.attributes = {"MultiProcessorCount": 2}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _HostCupy:
    """The cupy module as the layers use it, on the host."""
    ElementwiseKernel = ElementwiseKernel
    ReductionKernel = ReductionKernel
    RawKernel = RawKernel
    ndarray = HostArray
    cuda = SimpleNamespace(Device=_Device, runtime=SimpleNamespace(getDevice=lambda: 0),
                           get_current_stream=lambda: SimpleNamespace(is_capturing=lambda: False))

    def __getattr__(self, name):
        if name in _WRAPPING:                     # (CuPy's: an index out of range wraps)
            return _wrap(_WRAPPING[name], name)
        attr = getattr(np, name)     # (ufuncs as they are: they keep HostArray, and have .at)
        if name in ("array", "asanyarray"):       # (CuPy's take host data; asarray is below)
            signature = _cupy_signature(name)

            def made(*a, **k):
                if signature is not None:
                    _bind(f"cupy.{name}", signature, a, k)
                return host(attr(*a, **k))
            return made
        if isinstance(attr, (type, np.ufunc)) or not callable(attr):
            _cupy_signature(name)         # (CuPy's AttributeError where it has no such name)
        return _wrap(attr, name) if callable(attr) and not isinstance(attr, (type, np.ufunc)) \
            else attr

    @staticmethod
    def asnumpy(a):
        return np.array(a, order="C")

    @staticmethod
    def asarray(a, dtype=None):
        """CuPy's: a device array as it is; a host array copied C-ordered (F-ordered if it is),
        so a channels-last NumPy array arrives C-ordered, as cupy.asarray makes it."""
        if isinstance(a, HostArray) and (dtype is None or a.dtype == np.dtype(dtype)):
            return a
        a = np.asarray(a, dtype=dtype)
        return host(np.array(a, order="F" if a.flags.f_contiguous and a.ndim > 1 else "C"))


HOST = _HostCupy()


def _host_mm(a, b, bias=None, out=None):
    """layers.ops.linalg.mm on host arrays, "device" ones included, in cuBLASLt's manner: the
    product of half data in float32, rounded once to a's dtype (out += it with `out`)."""
    if isinstance(a, HostArray):
        return _host_matmul(a, b, out, bias=bias, beta=0.0 if out is None else 1.0)
    y = a @ b
    if bias is not None:
        y = y + bias
    if out is None:
        return y
    out += y
    return out


def install(monkeypatch, strict=True):
    """Point the layers' GPU path at HOST (a generator: yields once installed, clears the
    kernel caches after): layers.backend's cupy, the device pointer tables, the LSTM cell's
    products; fresh device random generators. strict: CuPy's refusals of the engine's NumPy
    spellings on device arrays too (NUMPY_CONVERSIONS, HostArray's methods bound to CuPy's
    signatures, NumPy functions as CuPy's __array_function__ takes them, x[index arrays] that
    wrap); tools.bench_host leaves them out, as the host time they take is the harness's, not
    the engine's. (HOST's own functions -- the cupy module's -- always take CuPy's names and
    signatures, and its take / take_along_axis / put_along_axis always wrap, for any caller;
    bench_host times them apart with the stubs.)"""
    from layers import backend, finite, kernels, optim
    from layers import random as lrandom
    from layers.ops import attention as ops_attention
    from layers.ops import rnn as ops_rnn

    def clear():
        ops_attention._kernel.cache_clear()
        kernels.elementwise.cache_clear()
        kernels.pointwise.cache_clear()
        kernels._vector_kernel.cache_clear()
        finite._word_kernel.cache_clear()
        finite._multi_word_kernel.cache_clear()
        kernels.reduction.cache_clear()
        kernels._sumsq_kernel.cache_clear()
        kernels._blocks_for.cache_clear()
        ops_rnn._kernel.__dict__.pop("cache", None)
    clear()
    monkeypatch.setattr(backend, "_cupy", HOST)
    table = lambda rows: host(np.asarray(rows, np.int64).ravel())      # noqa: E731
    monkeypatch.setattr(optim, "device_table", table)
    monkeypatch.setattr(finite, "device_table", table)
    monkeypatch.setattr(ops_rnn, "mm", _host_mm)
    monkeypatch.setattr(lrandom, "_devices", {})
    if strict:
        for name in NUMPY_CONVERSIONS:
            monkeypatch.setattr(np, name, _no_implicit_conversion(getattr(np, name)))
        _cupy_ndarray_methods(monkeypatch)
        monkeypatch.setattr(HostArray, "__array_function__", _cupy_array_function)
        monkeypatch.setitem(STRICT, "indexing", True)
    yield
    clear()


# NumPy's conversions, which CuPy's ndarray refuses (its __array__ raises: "Implicit conversion to
# a NumPy array is not allowed"). A HostArray is an ndarray subclass, so NumPy converts it without
# asking; while the harness is installed these names refuse one handed over by the engine's own
# code (NumPy's internals, the harness and the tests convert host arrays freely).
NUMPY_CONVERSIONS = ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray")
ENGINE = ("layers", "cudnnlite", "train", "tools")


def _holds_device_array(a):
    return isinstance(a, HostArray) or isinstance(a, (list, tuple)) and any(
        _holds_device_array(e) for e in a)


def _no_implicit_conversion(convert):
    def conversion(a, *args, **kwargs):
        if _holds_device_array(a) and _engine_caller():
            raise TypeError(f"numpy.{convert.__name__} of a device array (or a list holding "
                            f"one): "
                            f"Implicit conversion to a NumPy array is not allowed. Please use "
                            f"`.get()` to construct a NumPy array explicitly. (CuPy's refusal)")
        return convert(a, *args, **kwargs)
    conversion.__wrapped__ = convert
    return conversion


# ---- cuDNN's batch norm and activations on the host --------------------------------------------
# The cudnnlite functions run as they are -- boundary checks, packing, descriptors, output
# allocation -- up to the C call; the call is answered here from what cuDNN itself reports of
# each descriptor (cudnnGetTensorNdDescriptor / cudnnGetActivationDescriptor, which work with no
# GPU) and the memory each pointer names. So a wrong dims / strides / dtype in a descriptor, or a
# pointer to the wrong array, gives a wrong result here as it would on a GPU.

_NP_OF = {0: np.float32, 1: np.float64, 2: np.float16, 9: None}     # cudnnDataType_t


def _np_dtype(data_type):
    if int(data_type) == 9:
        from layers.backend import bfloat16
        return np.dtype(bfloat16)
    return np.dtype(_NP_OF[int(data_type)])


def _at(ptr, desc):
    """The array a tensor descriptor says lives at device pointer `ptr` (host memory here)."""
    data_type, dims, strides = desc.setup()
    dtype = _np_dtype(data_type)
    extent = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    raw = (ctypes.c_char * (extent * dtype.itemsize)).from_address(int(ptr))
    flat = np.frombuffer(raw, dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, dims, [s * dtype.itemsize for s in strides])


def _param(ptr, desc):
    """A batch-norm parameter / statistic array (C values) at `ptr`, flat."""
    return _at(ptr, desc).reshape(-1)


def _value(scalar_ref):
    return scalar_ref._obj.value


def _blend(out, alpha, beta, result, rounds_first=False):
    """out = alpha * result + beta * out (cuDNN's scaling; beta 0 never reads out), rounded
    once to out's dtype -- or, rounds_first, with alpha * result rounded to a half-precision
    out's dtype before beta * out is added: what cuDNN's bfloat16 convolutions gave on the H100
    (2026-11-22; the bias then adds a second rounding, as on the GPU)."""
    a, b = _value(alpha), _value(beta)
    if rounds_first and b and out.dtype.itemsize == 2:
        result = (a * result).astype(out.dtype).astype(np.float64)
        a = 1.0
    out[...] = (a * result + (b * out.astype(np.float64) if b else 0)).astype(out.dtype)


def _bn_forward_training(h, mode, alpha, beta, xdesc, x, ydesc, y, bdesc, gamma, bias, factor,
                         run_mean, run_var, eps, save_mean, save_invstd,
                         call="cudnnBatchNormalizationForwardTraining"):
    CALLS[call] += 1
    assert int(mode) == 1, "host stand-in: spatial batch norm only"
    xa = _at(x, xdesc).astype(np.float64)
    axes = (0,) + tuple(range(2, xa.ndim))
    shape = [1, xa.shape[1]] + [1] * (xa.ndim - 2)
    mean, var = xa.mean(axis=axes), xa.var(axis=axes)
    invstd = 1 / np.sqrt(var + eps)
    g, b = _param(gamma, bdesc), _param(bias, bdesc)
    _blend(_at(y, ydesc), alpha, beta,
           (xa - mean.reshape(shape)) * (invstd * g).reshape(shape) + b.reshape(shape))
    n = xa.size // xa.shape[1]
    if run_mean:
        rm, rv = _param(run_mean, bdesc), _param(run_var, bdesc)
        rm[...] = (1 - factor) * rm + factor * mean
        rv[...] = (1 - factor) * rv + factor * var * n / (n - 1)
    if save_mean:
        _param(save_mean, bdesc)[...] = mean
        _param(save_invstd, bdesc)[...] = invstd


def _bn_forward_inference(h, mode, alpha, beta, xdesc, x, ydesc, y, bdesc, gamma, bias, mean,
                          var, eps):
    CALLS["cudnnBatchNormalizationForwardInference"] += 1
    assert int(mode) == 1, "host stand-in: spatial batch norm only"
    xa = _at(x, xdesc).astype(np.float64)
    shape = [1, xa.shape[1]] + [1] * (xa.ndim - 2)
    scale = _param(gamma, bdesc) / np.sqrt(_param(var, bdesc) + eps)
    _blend(_at(y, ydesc), alpha, beta,
           (xa - _param(mean, bdesc).reshape(shape)) * scale.reshape(shape)
           + _param(bias, bdesc).reshape(shape))


def _bn_backward(h, mode, alpha_d, beta_d, alpha_p, beta_p, xdesc, x, dydesc, dy, dxdesc, dx,
                 bdesc, gamma, dgamma, dbeta, eps, save_mean, save_invstd,
                 call="cudnnBatchNormalizationBackward"):
    CALLS[call] += 1
    assert int(mode) == 1, "host stand-in: spatial batch norm only"
    xa, gy = _at(x, xdesc).astype(np.float64), _at(dy, dydesc).astype(np.float64)
    axes = (0,) + tuple(range(2, xa.ndim))
    shape = [1, xa.shape[1]] + [1] * (xa.ndim - 2)
    mean, invstd = _param(save_mean, bdesc), _param(save_invstd, bdesc)
    xhat = (xa - mean.reshape(shape)) * invstd.reshape(shape)
    gb, gg = gy.sum(axis=axes), (gy * xhat).sum(axis=axes)
    n = xa.size // xa.shape[1]
    scale = (_param(gamma, bdesc) * invstd).reshape(shape)
    _blend(_at(dx, dxdesc), alpha_d, beta_d,
           scale / n * (n * gy - gb.reshape(shape) - xhat * gg.reshape(shape)))
    _blend(_param(dgamma, bdesc), alpha_p, beta_p, gg)
    _blend(_param(dbeta, bdesc), alpha_p, beta_p, gb)


# the *Ex calls (batch norm alone, no activation; SPATIAL or SPATIAL_PERSISTENT): the same
# arithmetic, a workspace and a reserve space of EX_RESERVE bytes asked for, the reserve space
# checked to be the one forward was given
EX_RESERVE = 48
_ex_reserves = {}       # reserve pointer -> x pointer of the forward that filled it


def _ex_size(*args):
    args[-1]._obj.value = EX_RESERVE


def _bn_forward_training_ex(h, mode, ops, alpha, beta, xdesc, x, zdesc, z, ydesc, y, bdesc, gamma,
                            bias, factor, run_mean, run_var, eps, save_mean, save_invstd, act,
                            ws, ws_size, reserve, reserve_size):
    assert int(ops) == 0 and zdesc is None and act is None and int(mode) in (1, 2), (ops, mode)
    assert reserve_size == EX_RESERVE and reserve, (reserve, reserve_size)
    _ex_reserves[int(reserve)] = int(x)
    _bn_forward_training(h, 1, alpha, beta, xdesc, x, ydesc, y, bdesc, gamma, bias, factor,
                         run_mean, run_var, eps, save_mean, save_invstd,
                         call="cudnnBatchNormalizationForwardTrainingEx")


def _bn_backward_ex(h, mode, ops, alpha_d, beta_d, alpha_p, beta_p, xdesc, x, ydesc, y, dydesc,
                    dy, dzdesc, dz, dxdesc, dx, bdesc, gamma, bias, dgamma, dbeta, eps, save_mean,
                    save_invstd, act, ws, ws_size, reserve, reserve_size):
    assert int(ops) == 0 and dzdesc is None and act is None and int(mode) in (1, 2), (ops, mode)
    assert reserve_size == EX_RESERVE and _ex_reserves.get(int(reserve)) == int(x), \
        "backward_ex given a reserve space its forward did not fill for this x"
    _bn_backward(h, 1, alpha_d, beta_d, alpha_p, beta_p, xdesc, x, dydesc, dy, dxdesc, dx, bdesc,
                 gamma, dgamma, dbeta, eps, save_mean, save_invstd,
                 call="cudnnBatchNormalizationBackwardEx")


def _conv_backward_bias(h, alpha, dydesc, dy, beta, dbdesc, db):
    CALLS["cudnnConvolutionBackwardBias"] += 1
    g = _at(dy, dydesc).astype(np.float64)
    _blend(_at(db, dbdesc), alpha, beta,
           g.sum(axis=(0,) + tuple(range(2, g.ndim))).reshape(_at(db, dbdesc).shape))


def _relu(x, propagate):
    y = np.maximum(x, 0)                       # NaN stays NaN
    return y if propagate else np.where(np.isnan(x), 0.0, y)


_ACT = {0: (lambda x, p: 1 / (1 + np.exp(-x)), lambda x, y: y * (1 - y)),
        1: (_relu, lambda x, y: (x > 0).astype(np.float64)),
        2: (lambda x, p: np.tanh(x), lambda x, y: 1 - y * y)}


def _act_forward(h, adesc, alpha, xdesc, x, beta, ydesc, y):
    CALLS["cudnnActivationForward"] += 1
    mode, nan, _ = adesc.setup()
    f, _ = _ACT[int(mode)]
    _blend(_at(y, ydesc), alpha, beta, f(_at(x, xdesc).astype(np.float64), int(nan) == 1))


def _act_backward(h, adesc, alpha, ydesc, y, dydesc, dy, xdesc, x, beta, dxdesc, dx):
    CALLS["cudnnActivationBackward"] += 1
    _, df = _ACT[int(adesc.setup()[0])]
    xa, ya = _at(x, xdesc).astype(np.float64), _at(y, ydesc).astype(np.float64)
    _blend(_at(dx, dxdesc), alpha, beta, df(xa, ya) * _at(dy, dydesc))


def _filter_at(ptr, wdesc):
    """The (K, C/groups, R, S) filter a filter descriptor says lives at `ptr` (its format NCHW
    or NHWC: packed in that order)."""
    data_type, fmt, dims = wdesc.setup()
    dtype = _np_dtype(data_type)
    count = int(np.prod(dims))
    flat = np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(int(ptr)),
                         dtype=dtype)
    if int(fmt) == 1:                  # CUDNN_TENSOR_NHWC: (K, R, S, C) in memory
        K, C = dims[0], dims[1]
        return flat.reshape((K,) + tuple(dims[2:]) + (C,)).transpose(0, 3, 1, 2)
    return flat.reshape(dims)


def _geometry(convdesc):
    pad, stride, dilation, mode, _, groups, _ = convdesc.setup()
    assert int(mode) == 1, "host stand-in: cross-correlation only (cudnnlite's mode)"
    return dict(stride=tuple(stride), pad=tuple(pad), dilation=tuple(dilation), groups=groups)


def _conv_reference():
    """The NumPy convolutions of layers.ops.conv (NCHW), as imported before any patch."""
    from layers.ops import conv
    return _REFERENCE.setdefault("conv", (conv.conv_forward, conv.conv_backward_data,
                                          conv.conv_backward_filter))


_REFERENCE = {}


def _conv_forward(h, alpha, xdesc, x, wdesc, w, convdesc, algo, ws, ws_size, beta, ydesc, y):
    CALLS["cudnnConvolutionForward"] += 1
    g = _geometry(convdesc)
    fwd, _, _ = _conv_reference()
    r = fwd(_at(x, xdesc).astype(np.float64), _filter_at(w, wdesc).astype(np.float64),
            g["stride"], g["pad"], g["dilation"], g["groups"])
    _blend(_at(y, ydesc), alpha, beta, r, rounds_first=True)


def _conv_backward_data(h, alpha, wdesc, w, dydesc, dy, convdesc, algo, ws, ws_size, beta,
                        dxdesc, dx):
    CALLS["cudnnConvolutionBackwardData"] += 1
    g = _geometry(convdesc)
    _, bwd_data, _ = _conv_reference()
    out = _at(dx, dxdesc)
    r = bwd_data(_filter_at(w, wdesc).astype(np.float64), _at(dy, dydesc).astype(np.float64),
                 out.shape, g["stride"], g["pad"], g["dilation"], g["groups"])
    _blend(out, alpha, beta, r, rounds_first=True)


def _conv_backward_filter(h, alpha, xdesc, x, dydesc, dy, convdesc, algo, ws, ws_size, beta,
                          dwdesc, dw):
    CALLS["cudnnConvolutionBackwardFilter"] += 1
    g = _geometry(convdesc)
    _, _, bwd_filter = _conv_reference()
    out = _filter_at(dw, dwdesc)                      # a view of dw's memory, in (K, C, R, S)
    r = bwd_filter(_at(x, xdesc).astype(np.float64), _at(dy, dydesc).astype(np.float64),
                   out.shape, g["stride"], g["pad"], g["dilation"], g["groups"])
    _blend(out, alpha, beta, r, rounds_first=True)


def _to_cudnnlite(name):
    """A layers.ops.conv function that sends host "device" arrays to its GPU branch (on_gpu:
    cudnnlite.conv, or cuBLASLt for a filter that covers its whole input), as it sends CuPy
    arrays (it takes its NumPy path for any ndarray, HostArray included)."""
    reference = getattr(__import__("layers.ops.conv", fromlist=["x"]), name)

    def conv(*args, **kwargs):
        if not any(isinstance(a, HostArray) for a in args):
            return reference(*args, **kwargs)
        from layers.ops import conv as ops_conv
        n = 2 if name == "conv_forward" else 3         # (x, W) or (W / x, gy, shape)
        stride, pad, dilation, groups, *layout = args[n:]
        into = {"into": kwargs["into"]} if "into" in kwargs else {}    # (backward-filter's)
        return ops_conv.on_gpu(name, *args[:n], stride, pad, dilation, groups,
                               kwargs.get("layout", layout[0] if layout else "NCHW"), **into)
    return conv


def _host_matmul(a, b, out=None, *, bias=None, alpha=1.0, beta=0.0, dtype=None, allow_tf32=None):
    """cudnnlite.blas.matmul's contract (out = alpha * a @ b + beta * out + bias; half data
    multiplied in float32, rounded once) computed by NumPy on host "device" arrays (float32:
    no TF32 here, whatever allow_tf32 says)."""
    CALLS["cublasLtMatmul"] += 1
    # the arguments cudnnlite.blas.matmul refuses, refused here too
    assert a.dtype == b.dtype and (bias is None or bias.dtype == a.dtype), (a.dtype, b.dtype)
    assert out is not None or beta == 0, "beta != 0 needs out"
    assert out is None or (out.dtype == a.dtype and out.flags.c_contiguous), out
    half = a.dtype.itemsize == 2
    f = (lambda x: np.asarray(x).astype(np.float32)) if half else np.asarray   # noqa: E731
    y = alpha * (f(a) @ f(b))
    if bias is not None:
        y = y + f(bias)
    if out is None:
        return host(y.astype(a.dtype))
    out[...] = (y + beta * f(out) if beta else y).astype(out.dtype)
    return out


def install_cudnn(monkeypatch):
    """cuDNN's convolution, batch-norm and activation calls answered on the host (see above),
    the layers' convolutions sent to cudnnlite.conv for host "device" arrays (_to_cudnnlite),
    algorithm 0 with no workspace in place of cuDNN's heuristics, a cudnnlite handle that is
    only a device id, and cuBLASLt's products by NumPy (_host_matmul)."""
    import sys
    from cudnnlite import api, blas, boundary
    from cudnnlite import conv as cconv
    from layers.ops import conv
    monkeypatch.setattr(blas, "matmul", _host_matmul)
    _real_cupy()
    _conv_reference()
    monkeypatch.setitem(sys.modules, "cupy", HOST)     # cudnnlite's own `import cupy` (outputs)
    for name in ("conv_forward", "conv_backward_data", "conv_backward_filter"):
        monkeypatch.setattr(conv, name, _to_cudnnlite(name))
    # no heuristics to ask: algorithm 0, no workspace (the host answer ignores both)
    monkeypatch.setattr(cconv, "_choose", lambda plan, d, handle, a, b, c, algo: cconv.Choice(
        0, cconv.requested_math(plan.dt), 0))
    # no graph-API engine on the host (finalizing a backend descriptor needs libcuda): the
    # layers' fused conv + bias + activation falls back to its three calls, as where none fuses
    def no_fusion(*args, **kwargs):
        raise cconv.NotSupported("cudnnBackendFinalize", {}, "no graph-API engine on the host")
    monkeypatch.setattr(cconv, "forward_fused", no_fusion)
    # and api="graph" falls back to the legacy calls, as for a problem no engine takes
    monkeypatch.setattr(cconv, "_new_graph_plan", lambda *args: no_fusion())
    monkeypatch.setattr(cconv, "graph_fallbacks", {"calls": 0, "last": None})
    monkeypatch.setattr(cconv, "_warn_fallback", lambda refusal: None)   # (every problem here)
    # the *Ex calls' sizes asked of the stand-ins are kept apart from those a GPU gave
    from cudnnlite import batchnorm
    from cudnnlite._cache import LRU
    monkeypatch.setattr(batchnorm, "_ex_sizes", LRU(64))
    from cudnnlite import activation
    for module in (batchnorm, cconv, activation):        # (and the calls seen: boundary.CallCache)
        monkeypatch.setattr(module, "_calls", boundary.CallCache(256))
    monkeypatch.setattr(boundary, "get_handle",
                        lambda: SimpleNamespace(device_id=0, workspace=lambda size: 0))
    for name, fn in (("cudnnBatchNormalizationForwardTraining", _bn_forward_training),
                     ("cudnnBatchNormalizationForwardInference", _bn_forward_inference),
                     ("cudnnBatchNormalizationBackward", _bn_backward),
                     ("cudnnConvolutionBackwardBias", _conv_backward_bias),
                     ("cudnnConvolutionForward", _conv_forward),
                     ("cudnnConvolutionBackwardData", _conv_backward_data),
                     ("cudnnConvolutionBackwardFilter", _conv_backward_filter),
                     ("cudnnActivationForward", _act_forward),
                     ("cudnnActivationBackward", _act_backward),
                     ("cudnnBatchNormalizationForwardTrainingEx", _bn_forward_training_ex),
                     ("cudnnBatchNormalizationBackwardEx", _bn_backward_ex),
                     ("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", _ex_size),
                     ("cudnnGetBatchNormalizationBackwardExWorkspaceSize", _ex_size),
                     ("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", _ex_size)):
        monkeypatch.setattr(api, name, fn)

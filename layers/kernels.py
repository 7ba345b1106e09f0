"""CuPy kernels of the GPU path, each fusing what would otherwise be several launches.
Compiled on first use (CuPy caches the binaries), so importing this costs nothing."""
import functools

import numpy as np

from .backend import cupy, dense_order, dtype_name, empty_like, flat_view, is_gpu


@functools.lru_cache(maxsize=None)
def elementwise(name, in_params, out_params, body, preamble=""):
    return cupy().ElementwiseKernel(in_params, out_params, body, name, preamble=preamble)


@functools.lru_cache(maxsize=None)
def pointwise(name, in_params, out_params, body, preamble=""):
    """An elementwise kernel for operations whose element i depends on element i of each operand
    alone (no `i`, raw parameters only for scalars and flags): its non-raw operands, when they
    share one shape and one dense layout that is not C order (channels-last, say), run as flat
    1-d arrays. CuPy merges only axes that are contiguous in their given order, so an (N, C, H,
    W) array stored channels-last costs a 4-d index computation per element: ~4x the time of the
    same kernel on its flat memory (H100, 8 M elements: 204 vs 50 us)."""
    params = [p.split() for p in (in_params + "," + out_params).split(",") if p.strip()]
    return _Pointwise(elementwise(name, in_params, out_params, body, preamble),
                      tuple(p[0] == "raw" for p in params))


class _Pointwise:
    def __init__(self, kernel, raw):
        self.kernel, self.raw = kernel, raw

    def __call__(self, *args, **kwargs):
        # (flat only with every output passed: one CuPy made would come back 1-d)
        flat = _flat_views(args, self.raw) if len(args) == len(self.raw) else None
        if flat is None:
            return self.kernel(*args, **kwargs)
        out = self.kernel(*flat, **kwargs)
        # the caller's arrays for the outputs it passed (the kernel returns the flat views)
        back = {id(f): a for f, a in zip(flat, args)}
        return tuple(back[id(o)] for o in out) if isinstance(out, tuple) else back[id(out)]


def _flat_views(args, raw):
    """args with each non-raw array as a 1-d view, when those arrays all have one shape and the
    same strides and the strides are a permutation of a dense layout; else None (C-ordered
    arrays, which CuPy runs flat already, included)."""
    arrays = [a for a, r in zip(args, raw) if not r and is_gpu(a)]
    if not arrays or arrays[0].ndim < 2 or arrays[0].flags.c_contiguous:
        return None
    a0 = arrays[0]
    if any(a.shape != a0.shape or a.strides != a0.strides for a in arrays):
        return None
    views = {id(a): flat_view(a) for a in arrays}
    if any(v is None for v in views.values()):
        return None
    return [views[id(a)] if not r and is_gpu(a) else a for a, r in zip(args, raw)]


def leaky_relu(x, slope):
    out = vector_pointwise("leaky_relu_fwd", slope, x)
    if out is not None:
        return out
    # the slope in float for half data (0.2 is 0.2002 in bfloat16), as the NumPy path has it;
    # its type is spelled out: CuPy infers a placeholder only from arrays, never from a scalar
    s = _scalar_type(x)
    return pointwise(f"leaky_relu_fwd_{s}", f"T x, {s} slope", "T y",
                     "y = x > (T)0 ? x : (T)(x * slope)")(x, np.dtype(s).type(slope), _like(x))


def leaky_relu_grad(x, gy, slope):
    out = vector_pointwise("leaky_relu_bwd", slope, x, gy)
    if out is not None:
        return out
    s = _scalar_type(x)
    return pointwise(f"leaky_relu_bwd_{s}", f"T x, T gy, {s} slope", "T gx",
                     "gx = x > (T)0 ? gy : (T)(gy * slope)")(x, gy, np.dtype(s).type(slope),
                                                             _like(x))


# GELU, y = x * Phi(x) (Phi the standard normal CDF) or torch's tanh approximation, and its
# gradient from x, in A (float for float32 and half data, double for float64), rounded once
_GELU = {
    "none": ("A v = (A)x; y = (T)(v * (A)0.5 * ((A)1 + erf(v * (A)0.7071067811865476)));",
             "A v = (A)x; A cdf = (A)0.5 * ((A)1 + erf(v * (A)0.7071067811865476)); "
             "A pdf = exp((A)-0.5 * v * v) * (A)0.3989422804014327; "
             "gx = (T)((A)gy * (cdf + v * pdf));"),
    "tanh": ("A v = (A)x; A t = tanh((A)0.7978845608028654 * (v + (A)0.044715 * v * v * v)); "
             "y = (T)((A)0.5 * v * ((A)1 + t));",
             "A v = (A)x; A t = tanh((A)0.7978845608028654 * (v + (A)0.044715 * v * v * v)); "
             "A dt = (A)0.7978845608028654 * ((A)1 + (A)3 * (A)0.044715 * v * v) * "
             "((A)1 - t * t); gx = (T)((A)gy * ((A)0.5 * ((A)1 + t) + (A)0.5 * v * dt));"),
}


def gelu(x, approximate):
    a = "double" if x.dtype == np.float64 else "float"
    return pointwise(f"cudnnlite_gelu_{approximate}_{a}", "T x", "T y", _GELU[approximate][0],
                     preamble=f"typedef {a} A;")(x, _like(x))


def gelu_grad(x, gy, approximate):
    a = "double" if x.dtype == np.float64 else "float"
    return pointwise(f"cudnnlite_gelu_{approximate}_grad_{a}", "T x, T gy", "T gx",
                     _GELU[approximate][1], preamble=f"typedef {a} A;")(x, gy, _like(x))


def erf(x):
    """The error function, in float for float32 and half data (double for float64), rounded
    once."""
    a = "double" if x.dtype == np.float64 else "float"
    return pointwise(f"cudnnlite_erf_{a}", "T x", "T y", "y = (T)erf((A)x);",
                     preamble=f"typedef {a} A;")(x, _like(x))


_FLOOR_DIVMOD = """
A x = (A)a, w = (A)b, mod, fl;
if (w == 0) {
    mod = fmod(x, w);
    fl = x / w;
} else {
    mod = fmod(x, w);
    A div = (x - mod) / w;
    if (mod != 0) {
        if ((w < 0) != (mod < 0)) { mod += w; div -= 1; }
    } else {
        mod = copysign((A)0, w);
    }
    if (div != 0) {
        fl = floor(div);
        if (div - fl > (A)0.5) fl += 1;
    } else {
        fl = copysign((A)0, x / w);
    }
}
out = (T)%s;
"""


def floor_divmod(a, b, part):
    """Floor division (part "quotient") or the remainder with the divisor's sign (part
    "remainder") of floating data, as Python, NumPy and torch compute them: from fmod(a, b), so
    that 1.0 // 0.1 is 9.0 and 1.0 % 0.1 is 0.09999999999999995 (a / b rounds to 10.0, and
    CuPy's floor_divide floors that: 10.0). Float math for half data (a Python number taken in
    float, not rounded to the half dtype first: float16 [1.0] // 0.1 is 9, as the NumPy path
    and torch give), rounded once; a zero divisor gives a / b and NaN, as NumPy's. (A float32
    subnormal operand is zero here, as in every CuPy kernel: CuPy compiles with -ftz=true, after
    the kernel's own options, so --ftz=false cannot undo it -- checked on an H100.)"""
    x = a if is_gpu(a) else b
    t = "double" if x.dtype == np.float64 else "float"
    number = "float64" if t == "double" else "float32"          # (a Python number's type)
    params = ", ".join(f"T {n}" if is_gpu(v) else f"{number} {n}"
                       for n, v in (("a", a), ("b", b)))
    kernel = elementwise(f"cudnnlite_floor_{part}_{t}", params, "T out",
                         _FLOOR_DIVMOD % ("fl" if part == "quotient" else "mod"),
                         preamble=f"typedef {t} A;")
    return kernel(a, b)


def _scalar_type(x):
    """The dtype name of a kernel's scalar for x's data: float32 for half data, else x's."""
    return "float32" if x.dtype.itemsize == 2 else dtype_name(x.dtype)


def _like(x):
    """The output of an elementwise kernel on x, stored as x is (CuPy's kernels make C-ordered
    outputs; this keeps a channels-last x's layout, so the next convolution reads it in place)."""
    return empty_like(x)


# ---- ReLU and LeakyReLU over 16-byte vectors ----------------------------------------------------

VECTOR_POINTWISE = True
"""True: float32 / bfloat16 ReLU and LeakyReLU, forward and backward, on dense 16-byte-aligned
arrays of one layout run as kernels that move 16 bytes a load (4 floats, 8 bfloat16s) instead of
CuPy's elementwise kernels, which move one element a thread (the H100 kernel table: LeakyReLU
forward on 8 M floats at 1.6 TB/s, where cuDNN's ReLU on the same size reaches 2.7). The same
arithmetic, element for element: float math, one rounding of each result (NaN in, NaN out, its
payload not kept; a subnormal kept, where CuPy's bfloat16 kernels flush it). On by default:
captured DCGAN step 4.13 -> 3.94 ms on an H100 (tools.bench_dcgan --vector-pointwise both,
2026-11-23)."""

# op -> (operands, the element's arithmetic on float x (first operand), g (second) and s, into y)
_VECTOR_OPS = {
    "leaky_relu_fwd": (1, "y = x > 0.0f ? x : x * s"),
    "leaky_relu_bwd": (2, "y = x > 0.0f ? g : g * s"),          # x, gy
    "relu_fwd": (1, "y = (x > 0.0f || x != x) ? x : 0.0f"),      # (NaN passes, as torch)
    "relu_grad": (2, "y = x <= 0.0f ? 0.0f : g"),                # x or y (same test), gy
}
# storage dtype -> (C type of an element, its value as float, a float stored back)
_VECTOR_TYPES = {"float32": ("float", "(v)", "(f)"),
                 "bfloat16": ("unsigned short", "__uint_as_float(((unsigned int)(v)) << 16)",
                              "cudnnlite_float_to_bf16(f)")}
VECTOR_THREADS = 256

_VECTOR_SOURCE = r"""
typedef %(T)s T;
#define LOAD(v) %(LOAD)s
#define STORE(f) %(STORE)s
__device__ inline unsigned short cudnnlite_float_to_bf16(float f) {
    // round to nearest even; a NaN becomes 0x7fff, as CUDA's __float2bfloat16 (CuPy's
    // bfloat16) makes it (an element passed through keeps no NaN payload: NaN stays NaN)
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
struct alignas(16) V { T v[16 / sizeof(T)]; };

extern "C" __global__ void %(NAME)s(const V* a, const V* b, V* out, long long n, float s) {
    // n 16-byte vectors of dense arrays of one layout: element j of vector i is the same element
    // of every operand (b unused by one-operand ops)
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const V va = a[i];
        %(LOAD_B)s
        V r;
        #pragma unroll
        for (int j = 0; j < (int)(16 / sizeof(T)); ++j) {
            const float x = LOAD(va.v[j]);
            %(G)s
            float y;
            %(OP)s;
            r.v[j] = STORE(y);
        }
        out[i] = r;
    }
}
"""


@functools.lru_cache(maxsize=None)
def _vector_kernel(op, dtype):
    operands, arithmetic = _VECTOR_OPS[op]
    T, load, store = _VECTOR_TYPES[dtype]
    name = f"cudnnlite_vector_{op}_{dtype}"
    return cupy().RawKernel(_VECTOR_SOURCE % {
        "T": T, "LOAD": load, "STORE": store, "NAME": name,
        "OP": arithmetic,
        "LOAD_B": "const V vb = b[i];" if operands == 2 else "",
        "G": "const float g = LOAD(vb.v[j]);" if operands == 2 else ""}, name)


def vectors16(a):
    """How many 16-byte vectors device array a's memory is, when a is dense in some axis order
    (C-ordered, channels-last), 16-byte aligned, non-empty and a whole number of vectors long;
    else None. What the kernels that read memory 16 bytes at a time take (vector_pointwise, the
    finite check's word kernel), handed the array itself: for a dense array with no negative
    stride its data pointer is its lowest address, so no view is made."""
    n = dense_vectors16(a)
    return None if n is None or a.data.ptr % 16 else n


def dense_vectors16(a):
    """vectors16 but for the alignment: what a's shape, strides and dtype alone decide (so a
    caller may keep it per kind of array and test each one's pointer)."""
    if a.size == 0 or a.nbytes % 16 or dense_order(a) is None:
        return None
    return a.nbytes // 16


def grid(n, threads, device_id):
    """Blocks for a grid-stride kernel over n items: enough for one item a thread, at most
    4 per multiprocessor."""
    return min(-(-n // threads), _blocks_for(device_id))


def vector_pointwise(op, s, a, b=None):
    """op (_VECTOR_OPS) on a (and b) over 16-byte vectors into a new array laid out as a, when
    VECTOR_POINTWISE is on and a (b) are float32 / bfloat16 device arrays of one dtype, shape and
    dense layout, 16-byte aligned and a whole number of vectors long; else None (the caller's
    elementwise kernel runs)."""
    if not VECTOR_POINTWISE or op not in _VECTOR_OPS:
        return None
    name = dtype_name(a.dtype)
    n = vectors16(a) if name in _VECTOR_TYPES and is_gpu(a) else None
    if n is None:
        return None
    if b is not None and (b.dtype != a.dtype or b.shape != a.shape or b.strides != a.strides or
                          not is_gpu(b) or b.data.ptr % 16):
        return None
    out = _like(a)
    if out.strides != a.strides or out.data.ptr % 16:
        return None
    _vector_kernel(op, name)((grid(n, VECTOR_THREADS, a.device.id),), (VECTOR_THREADS,),
                             (a, a if b is None else b, out, np.int64(n), np.float32(s)))
    return out


def join2(a, b, axis):
    """concatenate((a, b), axis) in one kernel (CuPy copies each array in with its own launch):
    Tacotron 2 joins two arrays three times a decoder frame. a and b of one dtype, any strides
    (read as raw arrays, element i in C order); the result C-ordered."""
    axis %= a.ndim
    n1, n2 = a.shape[axis], b.shape[axis]
    post = int(np.prod(a.shape[axis + 1:], dtype=np.int64))
    shape = a.shape[:axis] + (n1 + n2,) + a.shape[axis + 1:]
    out = cupy().empty(shape, a.dtype)
    return elementwise("cudnnlite_join2", "raw T a, raw T b, int64 n1, int64 n2, int64 post",
                       "T y", """
        const long long q = i % post, j = (i / post) % (n1 + n2), p = i / post / (n1 + n2);
        y = j < n1 ? a[(p * n1 + j) * post + q] : b[(p * n2 + j - n1) * post + q];
        """)(a, b, np.int64(n1), np.int64(n2), np.int64(post), out)


# ---- im2col / col2im of a channels-last convolution (layers.ops.conv.thin_input) ------------

def _geometry(H, W, C, P, Q, R, S, stride, pad, dilation, sizes):
    """The kernels' geometry as compile-time constants (kH, kW, ...: one kernel per problem,
    compiled once and cached by CuPy), so the index arithmetic divides by constants -- a
    multiply and a shift, where a division by a run-time 64-bit value is a long emulated
    sequence per element -- in 32-bit ints (I) unless an array has 2^31 elements or more."""
    index = "int" if max(sizes) < 2 ** 31 else "long long"
    values = dict(kH=H, kW=W, kC=C, kP=P, kQ=Q, kR=R, kS=S, kSH=stride[0], kSW=stride[1],
                  kPH=pad[0], kPW=pad[1], kDH=dilation[0], kDW=dilation[1])
    return f"typedef {index} I;\n" + "".join(f"static constexpr I {k} = {int(v)};\n"
                                             for k, v in values.items())


def im2col_nhwc(x, R, S, stride, pad, dilation, P, Q):
    """cols (N*P*Q, R*S*C) of a channels-last x (N, H, W, C): row (n, p, q) holds the window
    output position (p, q) reads, cols[(n, p, q), (r, s, c)] = x[n, p*sh - ph + r*dh,
    q*sw - pw + s*dw, c], 0 where that falls in the padding. (r, s, c) is an NHWC filter's
    (K, R, S, C) order, so the convolution is cols @ W.reshape(K, R*S*C).T, already (N, P, Q, K)."""
    N, H, W, C = x.shape
    cols = cupy().empty((N * P * Q, R * S * C), x.dtype)
    return elementwise("cudnnlite_im2col_nhwc", "raw T x", "T col", """
        const I j = (I)i, c = j % kC, s = j / kC % kS, r = j / (kC * kS) % kR;
        const I pos = j / (kC * kS * kR), q = pos % kQ, p = pos / kQ % kP, n = pos / (kQ * kP);
        const I h = p * kSH - kPH + r * kDH, w = q * kSW - kPW + s * kDW;
        col = (h >= 0 && h < kH && w >= 0 && w < kW) ? x[((n * kH + h) * kW + w) * kC + c] : (T)0;
        """, _geometry(H, W, C, P, Q, R, S, stride, pad, dilation, (x.size, cols.size)))(x, cols)


def col2im_nhwc(cols, x_shape, R, S, stride, pad, dilation, P, Q):
    """The adjoint of im2col_nhwc: gx (N, H, W, C) = x_shape, each element the sum of the
    columns entries read from it (at most R * S of them), gathered per output element (no
    atomics: the same sum in the same order every run); half data is summed in float
    and rounded once (its columns, a product's result, were rounded once already)."""
    N, H, W, C = x_shape
    gx = cupy().empty(x_shape, cols.dtype)
    _, a = _sum_type(cols.dtype)
    return elementwise(f"cudnnlite_col2im_nhwc_{a}", "raw T col", "T gx", """
        const I j = (I)i, c = j % kC, w = j / kC % kW, h = j / (kC * kW) % kH;
        const I n = j / (kC * kW * kH);
        A acc = 0;
        for (I r = 0; r < kR; ++r) {
            const I hp = h + kPH - r * kDH;                // = p * sh for the row p that read h
            if (hp < 0 || hp % kSH != 0 || hp / kSH >= kP) continue;
            const I p = hp / kSH;
            for (I s = 0; s < kS; ++s) {
                const I wq = w + kPW - s * kDW;
                if (wq < 0 || wq % kSW != 0 || wq / kSW >= kQ) continue;
                acc += (A)col[((((n * kP + p) * kQ + wq / kSW) * kR + r) * kS + s) * kC + c];
            }
        }
        gx = (T)acc;
        """, f"typedef {a} A;\n" + _geometry(H, W, C, P, Q, R, S, stride, pad, dilation,
                                            (gx.size, cols.size)))(cols, gx)


# The clamps below are comparisons, not max(): CUDA's max / fmax drop a NaN (fmax(NaN, -100) is
# -100), which would turn a NaN prediction into a finite loss; torch's clamp keeps the NaN.
_CLAMP_BELOW = "template <typename T> __device__ T clamp_below(T x, T lo) { return x < lo ? lo : x; }"


# PyTorch clamps each log term at -100 so p = 0 or 1 gives a finite loss
_BCE = ("-(t * clamp_below<T>(log(p), (T)-100) "
        "+ ((T)1 - t) * clamp_below<T>(log1p(-p), (T)-100))")


def bce(p, t, mode="none"):
    """BCE of p against t elementwise (mode 'none'), or its 'sum' / 'mean' in one reduction
    kernel (where the elementwise loss, CuPy's sum and the division by n were three launches);
    the mean divides each term by n as it sums it. p, t float32 or float64, one dtype."""
    if mode == "none":
        return elementwise("bce_fwd", "T p, T t", "T l", "l = " + _BCE, _CLAMP_BELOW)(p, t)
    if mode not in ("sum", "mean"):
        raise ValueError(f"bce: mode must be 'none', 'sum' or 'mean', got {mode!r}")
    if mode == "mean" and p.size == 0:     # no terms: NaN, as torch's (the sum's identity is 0)
        return cupy().full((), np.nan, p.dtype)
    divide = " / (T)n" if mode == "mean" else ""
    return reduction(f"cudnnlite_bce_{mode}", "T p, T t, int64 n", "T y", f"({_BCE}){divide}",
                     "a + b", "y = a", "0", _CLAMP_BELOW)(p, t, np.int64(p.size))


def bce_grad(p, t, gy, n=1):
    """d/dp times the upstream gradient gy (a device scalar or an array) divided by n (a mean's
    count, folded in here rather than launched on its own), with PyTorch's eps = 1e-12 guard on
    the denominator."""
    return elementwise("bce_bwd", "T p, T t, T gy, int64 n", "T g",
                       "g = gy / (T)n * (p - t) / clamp_below<T>(((T)1 - p) * p, (T)1e-12)",
                       _CLAMP_BELOW)(p, t, gy, np.int64(n))


# torch.optim.Adam's arithmetic for one element: p, g, m, v, step[0] and the hyper-parameters are
# in scope; A is the accumulation type. Shared by the per-tensor and the multi-tensor kernel.
_ADAM_ELEMENT = """
        A gr = (A)g, pw = (A)p, mm = (A)m, vv = (A)v;
        if (wd != (A)0) gr = gr + wd * pw;
        A w = (A)1 - beta1;
        mm = w < (A)0.5 ? mm + w * (gr - mm) : gr - (gr - mm) * ((A)1 - w);   // torch.lerp
        vv = vv * beta2 + ((A)1 - beta2) * gr * gr;
        double t = (double)step[0];
        double bc1 = 1.0 - pow((double)beta1, t);
        double bc2 = 1.0 - pow((double)beta2, t);
        A denom = sqrt(vv) / (A)sqrt(bc2) + eps;
        p = (T)(pw - (A)((double)lr / bc1) * mm / denom);
        m = (T)mm;
        v = (T)vv;
"""


def _accumulation(dtype):
    """(NumPy type, C name) Adam computes in: double for float64 parameters, else float."""
    return (np.float64, "double") if dtype == np.float64 else (np.float32, "float")


def adam(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.Adam's update in one pass; `step` is a device int64 scalar (already advanced),
    so the bias corrections are computed here and the launch has no host-side state. For float16
    parameters the update is computed in float32 (eps = 1e-8 is 0 in float16); m and v are stored
    in the parameter's dtype, as torch.optim.Adam keeps them."""
    A, c = _accumulation(p.dtype)
    a = np.dtype(A).name      # spelled out: CuPy infers no type placeholder from scalars
    elementwise(
        f"adam_{a}", f"T g, raw int64 step, {a} lr, {a} beta1, {a} beta2, {a} eps, {a} wd",
        "T p, T m, T v", f"typedef {c} A;" + _ADAM_ELEMENT,
    )(g, step, A(lr), A(beta1), A(beta2), A(eps), A(weight_decay), p, m, v)


def find_tensor(columns, start):
    """CUDA C for the multi-tensor kernels: with `tab` a table of n rows of `columns` int64 whose
    column `start` holds each tensor's first element (ascending), set `lo` to the row of element
    `i` and `k` to i's index within that tensor (a binary search)."""
    return f"""
        int lo = 0, hi = n;
        while (hi - lo > 1) {{
            int mid = (lo + hi) / 2;
            if (tab[mid * {columns} + {start}] <= (long long)i) lo = mid; else hi = mid;
        }}
        const long long k = (long long)i - tab[lo * {columns} + {start}];
"""


ADAM_COLUMNS = 6      # a multi-tensor Adam table row: p, g, m, v, step pointers, first element


def adam_rows(tensors):
    """The table rows of a multi-tensor Adam: tensors = [(p, g, m, v, step) device arrays];
    -> (rows, total elements). Element i of the launch belongs to the last row whose first
    element is <= i."""
    rows, start = [], 0
    for p, g, m, v, step in tensors:
        rows.append((p.data.ptr, g.data.ptr, m.data.ptr, v.data.ptr, step.data.ptr, start))
        start += p.size
    return rows, start


def adam_multi(table, n, total, like, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.Adam's update of n tensors of one dtype in one launch: `table` (device int64,
    n rows of ADAM_COLUMNS) names each tensor's p, g, m, v and step counter and its first
    element; every element finds its tensor by a binary search over those first elements, then
    does _ADAM_ELEMENT, as the per-tensor kernel does. The step counters are advanced first, by
    one more launch of n threads. `like`: any parameter of the table (it gives T)."""
    A, c = _accumulation(like.dtype)
    a = np.dtype(A).name
    _advance_steps(table, n, ADAM_COLUMNS, 4)
    elementwise(
        f"cudnnlite_adam_multi_{a}",
        f"raw int64 tab, int32 n, {a} lr, {a} beta1, {a} beta2, {a} eps, {a} wd",
        "raw T like", f"typedef {c} A;" + find_tensor(ADAM_COLUMNS, 5) + """
        T& p = reinterpret_cast<T*>(tab[lo * 6])[k];
        const T g = reinterpret_cast<const T*>(tab[lo * 6 + 1])[k];
        T& m = reinterpret_cast<T*>(tab[lo * 6 + 2])[k];
        T& v = reinterpret_cast<T*>(tab[lo * 6 + 3])[k];
        const long long* step = reinterpret_cast<const long long*>(tab[lo * 6 + 4]);
        """ + _ADAM_ELEMENT,
    )(table, np.int32(n), A(lr), A(beta1), A(beta2), A(eps), A(weight_decay), like, size=total)


def _advance_steps(table, n, cols, col):
    """step += 1 for the device step counter named in column `col` of each of n table rows."""
    elementwise("cudnnlite_adam_steps", "int32 cols, int32 col", "raw int64 tab",
                "long long* s = reinterpret_cast<long long*>(tab[i * cols + col]); *s += 1;"
                )(np.int32(cols), np.int32(col), table, size=n)


ADAM_MASTER_COLUMNS = 7   # a multi-tensor master-weight Adam row: q, g, master, m, v, step, first


def adam_master_rows(tensors):
    """The table rows of a multi-tensor master-weight Adam: tensors = [(q, g, master, m, v,
    step)] -- q and g half precision, master, m and v float32, all of one element order."""
    rows, start = [], 0
    for q, g, master, m, v, step in tensors:
        rows.append((q.data.ptr, g.data.ptr, master.data.ptr, m.data.ptr, v.data.ptr,
                     step.data.ptr, start))
        start += q.size
    return rows, start


def adam_master_multi(table, n, total, like, lr, beta1, beta2, eps, weight_decay):
    """adam_master for n half-precision parameters of one dtype in one launch (and one to
    advance their step counters): `table` (device int64, n rows of ADAM_MASTER_COLUMNS); each
    element finds its tensor as adam_multi's do. `like`: any parameter of the table (gives T)."""
    f = np.float32
    _advance_steps(table, n, ADAM_MASTER_COLUMNS, 5)
    elementwise(
        "cudnnlite_adam_master_multi",
        "raw int64 tab, int32 n, float32 lr, float32 beta1, float32 beta2, float32 eps, "
        "float32 wd", "raw T like",
        "typedef float A;" + find_tensor(ADAM_MASTER_COLUMNS, 6) + """
        T& q = reinterpret_cast<T*>(tab[lo * 7])[k];
        const T g = reinterpret_cast<const T*>(tab[lo * 7 + 1])[k];
        float& p = reinterpret_cast<float*>(tab[lo * 7 + 2])[k];
        float& m = reinterpret_cast<float*>(tab[lo * 7 + 3])[k];
        float& v = reinterpret_cast<float*>(tab[lo * 7 + 4])[k];
        const long long* step = reinterpret_cast<const long long*>(tab[lo * 7 + 5]);
        if ((T)p != q) p = (float)q;
        {
        typedef float T;""" + _ADAM_ELEMENT + """        }
        q = (T)p;""",
    )(table, np.int32(n), f(lr), f(beta1), f(beta2), f(eps), f(weight_decay), like, size=total)


def adam_master(p, g, master, m, v, step, lr, beta1, beta2, eps, weight_decay):
    """Adam on the float32 master of a half-precision parameter p, in one pass per element:
    the master re-synced from p where p no longer equals it rounded (as sync_master), updated
    from g in float32 by _ADAM_ELEMENT (m and v float32), then rounded into p -- what
    optim.Optimizer's master weights do around kernels.adam in four launches."""
    f = np.float32
    elementwise(
        "cudnnlite_adam_master",
        "T g, raw int64 step, float32 lr, float32 beta1, float32 beta2, float32 eps, float32 wd",
        "T q, float32 p, float32 m, float32 v",
        "typedef float A;\n        if ((T)p != q) p = (float)q;\n        {\n        typedef float T;"
        + _ADAM_ELEMENT + "        }\n        q = (T)p;",
    )(g, step, f(lr), f(beta1), f(beta2), f(eps), f(weight_decay), p, master, m, v)


def sync_master(master, p):
    """master = p where master rounded to p's dtype differs from p (optim.Optimizer's master
    weights: a weight loaded into the model replaces its stale master), in one pass."""
    elementwise("cudnnlite_sync_master", "T p", "float32 master",
                "if ((T)master != p) master = (float)p;")(p, master)


@functools.lru_cache(maxsize=None)
def reduction(name, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
              preamble=""):
    return cupy().ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr,
                                  identity, name, preamble=preamble)


def _sum_type(dtype):
    """(dtype name, C name) sums of `dtype` data accumulate in: double for float64, else float
    (a bfloat16 or float16 accumulator would round at every addition). CuPy's half types
    convert to float in arithmetic, so each kernel below computes in float and rounds once, at
    the store."""
    return ("float64", "double") if dtype == np.float64 else ("float32", "float")


def softmax(a, axis):
    """exp(a - max) / sum(exp(a - max)) along `axis`: the max, a fused exp-and-sum reduction and
    one elementwise kernel (three launches where composing CuPy's ops takes five)."""
    S, c = _sum_type(a.dtype)
    m = a.max(axis=axis, keepdims=True)
    s = reduction(f"cudnnlite_softmax_expsum_{S}", "T a, T m", f"{S} s",
                  f"exp(({c})a - ({c})m)", "a + b", "s = a", "0")(
        a, cupy().broadcast_to(m, a.shape), axis=axis, keepdims=True)
    return elementwise("cudnnlite_softmax_fwd", "T a, T m, S s", "T y",
                       "y = (T)(exp((S)a - (S)m) / s)")(a, m, s)


def softmax_grad(y, g, axis):
    """y * (g - sum(g * y)) along `axis`: one fused reduction and one elementwise kernel."""
    S, c = _sum_type(y.dtype)
    d = reduction(f"cudnnlite_softmax_dot_{S}", "T g, T y", f"{S} d", f"({c})g * ({c})y",
                  "a + b", "d = a", "0")(g, y, axis=axis, keepdims=True)
    return elementwise("cudnnlite_softmax_bwd", "T y, T g, S d", "T gx",
                       "gx = (T)((S)y * ((S)g - d))")(y, g, d)


# ---- multi-tensor gradient norm and scaling (clip_grad_norm_) --------------------------------

POINTER_COLUMNS = 2   # a one-pointer table row (norm, clip, finite check): pointer, first element
NORM_THREADS = 256

_SUMSQ = r"""
extern "C" __global__ void cudnnlite_multi_sumsq_%(T)s(
        const long long* tab, int n, long long total, double* partial) {
    // each block's share of sum(x * x) over every tensor of the table, in double, written to
    // partial[blockIdx.x] (summed afterwards in a fixed order: the result is reproducible)
    double acc = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
%(FIND)s
        double x = (double)reinterpret_cast<const %(T)s*>(tab[lo * 2])[k];
        acc += x * x;
    }
    __shared__ double part[%(THREADS)d];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}
"""


@functools.lru_cache(maxsize=None)
def _sumsq_kernel(ctype):
    return cupy().RawKernel(_SUMSQ % {"T": ctype, "THREADS": NORM_THREADS,
                                      "FIND": find_tensor(POINTER_COLUMNS, 1)},
                            f"cudnnlite_multi_sumsq_{ctype}")


@functools.lru_cache(maxsize=None)
def _blocks_for(device_id):
    return 4 * cupy().cuda.Device(device_id).attributes["MultiProcessorCount"]


def pointer_rows(arrays):
    """The rows of a one-pointer table (the multi-tensor norm, clip and finite check):
    (pointer, first element) per array; -> (rows, total elements)."""
    rows, start = [], 0
    for g in arrays:
        rows.append((g.data.ptr, start))
        start += g.size
    return rows, start


def multi_sumsq(table, n, total, like):
    """sum(g * g) over every gradient of the table, in float64 (a device 0-d array): one launch
    of a fixed number of blocks, then their partial sums added in a fixed order."""
    cp = cupy()
    blocks = int(max(1, min(_blocks_for(like.device.id), -(-total // NORM_THREADS))))
    partial = cp.empty(blocks, np.float64)
    ctype = "double" if like.dtype == np.float64 else "float"
    _sumsq_kernel(ctype)((blocks,), (NORM_THREADS,),
                         (table, np.int32(n), np.int64(total), partial))
    return partial.sum()


def multi_scale(table, n, total, like, norm, max_norm):
    """Every gradient of the table times min(max_norm / (norm + 1e-6), 1) (torch's clip
    coefficient; `norm` a device scalar in the gradients' accumulation type), in one launch."""
    A = np.float64 if like.dtype == np.float64 else np.float32
    elementwise("cudnnlite_multi_clip", "raw int64 tab, int32 n, raw A norm, A max_norm",
                "raw T like", find_tensor(POINTER_COLUMNS, 1) + """
        A coef = max_norm / (norm[0] + (A)1e-6);
        if (coef > (A)1) coef = (A)1;
        T& g = reinterpret_cast<T*>(tab[lo * 2])[k];
        g = (T)((A)g * coef);
        """)(table, np.int32(n), norm, A(max_norm), like, size=total)


# ---- activations after a convolution (layers.ops.conv.Conv2d's `activation`) -----------------
# NaN stays NaN, as torch's relu / tanh / sigmoid keep it

_ACT_FWD = {"relu": "y = (x > (T)0 || x != x) ? x : (T)0",
            "tanh": "y = tanh(x)",
            "sigmoid": "y = (T)1 / ((T)1 + exp(-x))"}
_ACT_BWD = {"relu": "gx = y <= (T)0 ? (T)0 : gy",         # from the output y (a NaN passes gy)
            "tanh": "gx = gy * ((T)1 - y * y)",
            "sigmoid": "gx = gy * y * ((T)1 - y)"}


def activation(name, x):
    out = vector_pointwise(f"{name}_fwd", 0.0, x)
    if out is not None:
        return out
    return pointwise(f"cudnnlite_{name}_fwd", "T x", "T y", _ACT_FWD[name])(x, _like(x))


# s (1 - s) = e / (1 + e)^2 with e = exp(-|x|), and 1 - tanh^2 = 1 / cosh^2: no cancellation
# near saturation (s (1 - s) in float loses the gradient's digits for |x| > ~10)
_ACT_BWD_FROM_X = {"relu": "gx = x <= (T)0 ? (T)0 : gy",              # (a NaN x passes gy)
                   "sigmoid": "A e = exp(-fabs((A)x)); gx = (T)((A)gy * e / (((A)1 + e) * ((A)1 + e)))",
                   "tanh": "A c = cosh((A)x); gx = (T)((A)gy / (c * c))"}


def activation_grad_from_x(name, x, gy):
    """The activation's gradient from its input x, in float (A) for half data and rounded once:
    a half-precision output would lose the sigmoid's and tanh's gradient near saturation."""
    out = vector_pointwise(f"{name}_grad", 0.0, x, gy)
    if out is not None:
        return out
    a = "double" if x.dtype == np.float64 else "float"
    return pointwise(f"cudnnlite_{name}_grad_from_x_{a}", "T x, T gy", "T gx",
                     _ACT_BWD_FROM_X[name], preamble=f"typedef {a} A;")(x, gy, _like(x))


def activation_grad(name, y, gy):
    """The activation's gradient from its output y (no input kept: the seed's fusion-friendly
    form)."""
    out = vector_pointwise(f"{name}_grad", 0.0, y, gy)
    if out is not None:
        return out
    return pointwise(f"cudnnlite_{name}_grad_from_y", "T y, T gy", "T gx",
                     _ACT_BWD[name])(y, gy, _like(y))

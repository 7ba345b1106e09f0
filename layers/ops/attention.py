"""Additive (Bahdanau / location-sensitive) attention after its projections, as one op:

    h[b, t, :] = tanh(q[b, :] + loc[b, t, :] + pm[b, t, :])       (B, L, A)
    e[b, t]    = h[b, t, :] . v                                   (-inf where mask[b, t])
    w[b, :]    = softmax(e[b, :])                                 (B, L)
    ctx[b, :]  = sum_t w[b, t] memory[b, t, :]                    (B, E)

Composed from single ops this is two additions, a tanh, a (B L, A) x (A, 1) product, a mask, a
softmax (three launches) and a batched product: nine launches a decoder frame forward and
more backward (Tacotron 2's kernel table, docs/tacotron2_step_kernels.md). On the GPU it is one
kernel forward and one backward, a block per batch item -- the work per item (L x A and L x E)
is tiny, so launches, not arithmetic, were the cost. Backward:

    gw~[b, t] = gw[b, t] + gctx[b, :] . memory[b, t, :]
    ge[b, t]  = w[b, t] (gw~[b, t] - sum_t' w[b, t'] gw~[b, t'])       (softmax's backward)
    gs        = ge[b, t] v (1 - h^2)          -> the gradient of loc and of pm
    gq[b, :]  = sum_t gs[b, t, :];   gmemory[b, t, :] = w[b, t] gctx[b, :]
    gv        = sum_{b,t} ge[b, t] h[b, t, :]  (Deferred: one GEMM over every frame)

LocationAttention computes loc in the same kernel, from the previous and cumulative weights
(B, L) and a (2 K, A) kernel -- NVIDIA's bias-free location conv and dense layer composed -- and
returns their gradients and the kernel's (Deferred, over the windows each position read).

float32 / float64 data compute in their own type; float16 / bfloat16 in float32 (h is kept in
float32 for backward, as the tanh's gradient from a rounded h would lose digits)."""
import functools

import numpy as np

from ..backend import accumulation_dtype, cupy
from ..tensor import Deferred, Function

THREADS = 256          # one block per batch item (B blocks: fewer than an H100 has SMs, so a
#                        block is made large); a power of two (the block reductions halve)
GROUP = 32             # threads a row's dot product is split over (adjacent: coalesced reads)

_COMMON = r"""
// the block's reductions over t: a max and a sum, in shared memory (every thread calls them)
__device__ F block_max(F x, F* part) {
    part[threadIdx.x] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && part[threadIdx.x + s] > part[threadIdx.x])
            part[threadIdx.x] = part[threadIdx.x + s];
        __syncthreads();
    }
    F r = part[0];
    __syncthreads();
    return r;
}
__device__ F block_sum(F x, F* part) {
    part[threadIdx.x] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    F r = part[0];
    __syncthreads();
    return r;
}
// the dot products out[t] = row t of X . y for t < L, each over GROUP adjacent threads (their
// reads of a row coalesced), blockDim / GROUP rows at a time, the GROUP partial sums of a row
// added in shared memory; every thread calls it, and out[] is complete when it returns.
// TERM(t, k) is the k-th product of row t; FINISH(t, dot) stores a row's result.
#define ROWS_DOT(L, K, TERM, FINISH)                                                   \
    for (long long t0 = 0; t0 < (L); t0 += blockDim.x / %(GROUP)d) {                   \
        const long long t = t0 + threadIdx.x / %(GROUP)d;                              \
        const int lane = threadIdx.x %% %(GROUP)d;                                     \
        F p = 0;                                                                       \
        if (t < (L))                                                                   \
            for (long long k = lane; k < (K); k += %(GROUP)d) p += TERM(t, k);         \
        part[threadIdx.x] = p;                                                         \
        __syncthreads();                                                               \
        for (int s = %(GROUP)d / 2; s > 0; s >>= 1) {                                  \
            if (lane < s) part[threadIdx.x] += part[threadIdx.x + s];                  \
            __syncthreads();                                                           \
        }                                                                              \
        if (lane == 0 && t < (L)) FINISH(t, part[threadIdx.x]);                        \
        __syncthreads();                                                               \
    }
"""

_FORWARD = _COMMON + r"""
extern "C" __global__ void cudnnlite_%(OP)s_fwd_%(NAME)s(
        const F* q, const F* loc, const F* xw, const F* xc, const F* Wl, long long K,
        const F* pm, const F* v, const M* mem, long long msb, long long mst, const bool* mask,
        int has_mask, F neg_inf, long long L, long long A, long long E, F* h, F* w, F* ctx) {
    // loc: (B, L, A), or (LOCATION) computed here: the location features of the previous
    // and cumulative weights xw, xc (B, L) under the composed kernel Wl (2 K, A: adjacent
    // threads, adjacent a, read adjacent taps), 'same' padding -- NVIDIA's location conv and
    // dense layer, both bias-free, as one correlation
    __shared__ F part[%(THREADS)d];
    const long long b = blockIdx.x;
    const F* qb = q + b * A;
    const long long la = b * L * A;
    for (long long i = threadIdx.x; i < L * A; i += blockDim.x) {    // h, coalesced
#ifdef LOCATION
        const long long t = i / A, a = i %% A, P = (K - 1) / 2;
        F l = 0;
        for (long long k = 0; k < K; ++k) {
            const long long s = t + k - P;
            if (s >= 0 && s < L)
                l += Wl[k * A + a] * xw[b * L + s] + Wl[(K + k) * A + a] * xc[b * L + s];
        }
#else
        const F l = loc[la + i];
#endif
        h[la + i] = tanh(qb[i %% A] + l + pm[la + i]);
    }
    __syncthreads();
#define H_V(t, a) h[la + (t) * A + (a)] * v[a]
#define ENERGY(t, dot) w[b * L + (t)] = (has_mask && mask[b * L + (t)]) ? neg_inf : (dot)
    ROWS_DOT(L, A, H_V, ENERGY)                                       // e = h . v
    F top = neg_inf;
    for (long long t = threadIdx.x; t < L; t += blockDim.x)
        if (w[b * L + t] > top) top = w[b * L + t];
    top = block_max(top, part);
    F s = 0;
    for (long long t = threadIdx.x; t < L; t += blockDim.x) {
        F x = exp(w[b * L + t] - top);
        w[b * L + t] = x;
        s += x;
    }
    s = block_sum(s, part);
    for (long long t = threadIdx.x; t < L; t += blockDim.x) w[b * L + t] /= s;
    __syncthreads();
    for (long long j = threadIdx.x; j < E; j += blockDim.x) {        // context, coalesced
        F c = 0;
        for (long long t = 0; t < L; ++t) c += w[b * L + t] * LOAD_M(mem[b * msb + t * mst + j]);
        ctx[b * E + j] = c;
    }
}
"""

_BACKWARD = _COMMON + r"""
extern "C" __global__ void cudnnlite_%(OP)s_bwd_%(NAME)s(
        const F* gctx, const F* gw, const F* w, const F* h, const F* v, const M* mem,
        long long msb, long long mst, const F* xw, const F* xc, const F* Wl, long long K,
        long long L, long long A, long long E, F* ge, F* gs, F* gq, F* gmem, F* gx, F* cols) {
    // LOCATION: also gx (B, 2, L), the gradient of xw and xc, and cols (B, L, 2 K), the
    // windows of xw and xc each position read (Wl's gradient is cols^T gs)
    __shared__ F part[%(THREADS)d];
    const long long b = blockIdx.x;
#define MEM_GCTX(t, j) LOAD_M(mem[b * msb + (t) * mst + (j)]) * gctx[b * E + (j)]
#define GW_TOTAL(t, dot) ge[b * L + (t)] = gw[b * L + (t)] + (dot)
    ROWS_DOT(L, E, MEM_GCTX, GW_TOTAL)                                // gw~ = gw + memory . gctx
    F d = 0;
    for (long long t = threadIdx.x; t < L; t += blockDim.x) d += w[b * L + t] * ge[b * L + t];
    d = block_sum(d, part);
    for (long long t = threadIdx.x; t < L; t += blockDim.x)
        ge[b * L + t] = w[b * L + t] * (ge[b * L + t] - d);
    for (long long i = threadIdx.x; i < L * E; i += blockDim.x)      // gmemory, coalesced
        gmem[b * L * E + i] = w[b * L + i / E] * gctx[b * E + i %% E];
    __syncthreads();
    const long long la = b * L * A;
    for (long long i = threadIdx.x; i < L * A; i += blockDim.x) {
        F y = h[la + i];
        gs[la + i] = ge[b * L + i / A] * v[i %% A] * (1 - y * y);
    }
    for (long long a = threadIdx.x; a < A; a += blockDim.x) {        // gq: gs summed over t
        F g = 0;
        for (long long t = 0; t < L; ++t) {
            F y = h[la + t * A + a];
            g += ge[b * L + t] * v[a] * (1 - y * y);
        }
        gq[b * A + a] = g;
    }
#ifdef LOCATION
    const long long P = (K - 1) / 2;
    for (long long i = threadIdx.x; i < L * 2 * K; i += blockDim.x) {    // cols
        const long long t = i / (2 * K), c = (i / K) %% 2, s = t + i %% K - P;
        cols[b * L * 2 * K + i] = (s >= 0 && s < L) ? (c ? xc : xw)[b * L + s] : (F)0;
    }
    __syncthreads();                                                  // (gs complete)
    // gx[c, s] = sum over k and a (m = k A + a) of gs[t = s - k + P, a] Wl[c K + k, a], a
    // row per (c, s) = (r / L, r %% L)
#define GS_WL(r, m) (((r) %% L) - (m) / A + P >= 0 && ((r) %% L) - (m) / A + P < L ?            \
        gs[la + (((r) %% L) - (m) / A + P) * A + (m) %% A] * Wl[(r) / L * K * A + (m)] : (F)0)
#define GX(r, dot) gx[b * 2 * L + (r)] = (dot)
    ROWS_DOT(2 * L, K * A, GS_WL, GX)
#endif
}
"""


# memory (the encoder's output, the same array every decoder frame) is read where it lies -- any
# batch and time strides, in its own storage type -- so no frame copies it, nor keeps a copy for
# backward: float / double, or bfloat16 as its 16 bits (the top half of a float)
_MEMORY_TYPES = {"float32": ("float", "#define LOAD_M(x) ((F)(x))"),
                 "float64": ("double", "#define LOAD_M(x) ((F)(x))"),
                 "bfloat16": ("unsigned short",
                              "#define LOAD_M(x) ((F)__uint_as_float(((unsigned int)(x)) << 16))")}


@functools.lru_cache(maxsize=None)
def _kernel(direction, F, memory_dtype, location=False):
    """The forward / backward kernel for compute type F and memory's storage; location: the
    location features computed in the kernel (LocationAttention), else read (AdditiveAttention)."""
    M, load = _MEMORY_TYPES[memory_dtype]
    name = f"{F}_{M.replace(' ', '_')}"
    op = "location_attention" if location else "additive_attention"
    source = (_FORWARD if direction == "fwd" else _BACKWARD) % {
        "NAME": name, "OP": op, "GROUP": GROUP, "THREADS": THREADS}
    defines = "#define LOCATION\n" if location else ""
    return cupy().RawKernel(f"{defines}typedef {F} F;\ntypedef {M} M;\n{load}\n" + source,
                            f"cudnnlite_{op}_{direction}_{name}")


def _device_memory(memory, F):
    """memory as the kernels read it: itself where its dtype is F's or bfloat16 (with F float)
    and its elements are adjacent (any batch and time strides), else a dense copy in F; ->
    (array, dtype name, batch stride, time stride) in elements."""
    name = memory.dtype.name
    if not ((memory.dtype == F or name == "bfloat16" and F == np.float32) and
            memory.strides[2] == memory.itemsize and
            all(s % memory.itemsize == 0 for s in memory.strides)):
        memory = cupy().ascontiguousarray(memory, dtype=F)
        name = memory.dtype.name
    return memory, name, memory.strides[0] // memory.itemsize, memory.strides[1] // memory.itemsize


class AdditiveAttention(Function):
    """inputs q (B, A), loc (B, L, A), pm (B, L, A), v (1, A) (a Linear's weight), memory
    (B, L, E), mask (B, L) bool (True: padding) or None; outputs context (B, E), weights (B, L)."""
    n_outputs = 2
    upcast_half = False         # both paths compute half data in float32 themselves
    location = False            # LocationAttention: loc computed from the weights, in the kernel

    def forward(self, q, loc, pm, v, memory, mask=None):
        return self._forward(q, loc, None, pm, v, memory, mask)

    def _forward(self, q, loc, xs, pm, v, memory, mask):
        """xs: None, or (xw, xc, Wl) for the location features computed here (loc None)."""
        xp = self.xp
        T, F = q.dtype, accumulation_dtype(q.dtype)
        q, pm, v = (xp.ascontiguousarray(a, dtype=F) for a in (q, pm, v))
        if xs is not None:
            xs = tuple(xp.ascontiguousarray(a, dtype=F) for a in xs)
            xw, xc, Wl = xs
            K = Wl.shape[0] // 2
        else:
            loc = xp.ascontiguousarray(loc, dtype=F)
            xw = xc = Wl = loc                # (not read: the kernel reads loc)
            K = 0
        B, L, A = pm.shape
        E = memory.shape[2]
        if self.gpu:
            cp = cupy()
            h, w, ctx = cp.empty((B, L, A), F), cp.empty((B, L), F), cp.empty((B, E), F)
            m = w if mask is None else cp.ascontiguousarray(mask)
            mem, kind, msb, mst = _device_memory(memory, F)
            _kernel("fwd", _c_name(F), kind, self.location)((B,), (THREADS,), (
                q, pm if xs is not None else loc, xw, xc, Wl, np.int64(K), pm, v, mem,
                np.int64(msb), np.int64(mst), m, np.int32(mask is not None), F.type(-np.inf),
                np.int64(L), np.int64(A), np.int64(E), h, w, ctx))
        else:
            if xs is not None:
                loc = _columns(xw, xc, K) @ Wl                              # (B, L, A)
            h = np.tanh(q[:, None, :] + loc + pm)
            e = h @ v[0]
            if mask is not None:
                e = np.where(mask, -np.inf, e)
            x = np.exp(e - e.max(axis=1, keepdims=True))
            w = x / x.sum(axis=1, keepdims=True)
            ctx = np.einsum("bt,bte->be", w, memory.astype(F, copy=False))
        self.saved = h, w, v, memory, xs      # (memory as given: the caller's array, no copy)
        return ctx.astype(T, copy=False), w.astype(T, copy=False)    # (half data: rounded once)

    def backward(self, gctx, gw):
        gq, gs, gv, gmem, _ = self._backward(gctx, gw)
        need = self.needs_input_grad
        return (gq if need[0] else None, gs if need[1] else None, gs if need[2] else None,
                gv if need[3] else None, gmem if need[4] else None, None)

    def _backward(self, gctx, gw):
        """-> (gq, gs, v's gradient (Deferred), gmemory, and for the location features:
        None, or (gxw, gxc, Wl's gradient (Deferred)))."""
        h, w, v, memory, xs = self.saved
        xp = self.xp
        F = h.dtype
        B, L, A = h.shape
        E = memory.shape[2]
        gctx = xp.zeros((B, E), F) if gctx is None else xp.ascontiguousarray(gctx, dtype=F)
        gw = xp.zeros((B, L), F) if gw is None else xp.ascontiguousarray(gw, dtype=F)
        xw, xc, Wl = xs if xs is not None else (h, h, h)      # (not read without LOCATION)
        K = Wl.shape[0] // 2 if xs is not None else 0
        if self.gpu:
            cp = cupy()
            ge, gs = cp.empty((B, L), F), cp.empty((B, L, A), F)
            gq, gmem = cp.empty((B, A), F), cp.empty((B, L, E), F)
            gx = cp.empty((B, 2, L), F) if xs is not None else gs
            cols = cp.empty((B, L, 2 * K), F) if xs is not None else gs
            mem, kind, msb, mst = _device_memory(memory, F)
            _kernel("bwd", _c_name(F), kind, self.location)((B,), (THREADS,), (
                gctx, gw, w, h, v, mem, np.int64(msb), np.int64(mst), xw, xc, Wl, np.int64(K),
                np.int64(L), np.int64(A), np.int64(E), ge, gs, gq, gmem, gx, cols))
        else:
            g = gw + np.einsum("be,bte->bt", gctx, memory.astype(F, copy=False))
            ge = w * (g - (w * g).sum(axis=1, keepdims=True))
            gs = ge[:, :, None] * v[0] * (1 - h * h)
            gq = gs.sum(axis=1)
            gmem = w[:, :, None] * gctx[:, None, :]
            if xs is not None:
                cols = _columns(xw, xc, K)
                gx = _columns_grad(gs @ Wl.T, L, K)
        # v's (and Wl's) gradient, sums over b, t, is Deferred: one GEMM over every decoder frame
        gv = Deferred(ge.reshape(B * L, 1), h.reshape(B * L, A))
        if xs is None:
            return gq, gs, gv, gmem, None
        gWl = Deferred(cols.reshape(B * L, 2 * K), gs.reshape(B * L, A))
        return gq, gs, gv, gmem, (gx[:, 0], gx[:, 1], gWl)


class LocationAttention(AdditiveAttention):
    """AdditiveAttention with the location features computed inside: inputs q (B, A), the
    previous and cumulative attention weights xw, xc (B, L), the location kernel Wl (2 K, A)
    (rows: K taps on xw, then K on xc; NVIDIA's location conv composed with its dense layer,
    both bias-free), pm, v, memory, mask; outputs context, weights. Wl's gradient is Deferred
    (the windows each position read, transposed, times gs)."""
    location = True

    def forward(self, q, xw, xc, Wl, pm, v, memory, mask=None):
        return self._forward(q, None, (xw, xc, Wl), pm, v, memory, mask)

    def backward(self, gctx, gw):
        gq, gs, gv, gmem, (gxw, gxc, gWl) = self._backward(gctx, gw)
        need = self.needs_input_grad
        return (gq if need[0] else None, gxw if need[1] else None, gxc if need[2] else None,
                gWl if need[3] else None, gs if need[4] else None, gv if need[5] else None,
                gmem if need[6] else None, None)


def _columns(xw, xc, K):
    """(B, L, 2 K): for each position t the windows xw[t - P : t - P + K] and xc[...] ('same'
    padding P = (K - 1) / 2, zeros outside), as the location correlation reads them."""
    B, L = xw.shape
    P = (K - 1) // 2
    pad = np.zeros((B, 2, L + K - 1), xw.dtype)
    pad[:, 0, P:P + L], pad[:, 1, P:P + L] = xw, xc
    idx = np.arange(L)[:, None] + np.arange(K)[None, :]                 # (L, K)
    return pad[:, :, idx].transpose(0, 2, 1, 3).reshape(B, L, 2 * K)


def _columns_grad(gcols, L, K):
    """The gradient of _columns' inputs, (B, 2, L), from the columns' gradient (B, L, 2 K)."""
    B = gcols.shape[0]
    P = (K - 1) // 2
    g = gcols.reshape(B, L, 2, K)
    gpad = np.zeros((B, 2, L + K - 1), gcols.dtype)
    for k in range(K):
        gpad[:, :, k:k + L] += g[:, :, :, k].transpose(0, 2, 1)
    return gpad[:, :, P:P + L]


def _c_name(dtype):
    return "double" if dtype == np.float64 else "float"

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

float32 / float64 data compute in their own type; float16 / bfloat16 in float32 (h is kept in
float32 for backward, as the tanh's gradient from a rounded h would lose digits)."""
import functools

import numpy as np

from ..backend import accumulation_dtype, cupy
from ..tensor import Deferred, Function

THREADS = 128          # one block per batch item; a power of two (the block reductions halve)
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
// ROW(t, k) reads X's element k of row t, Y(k) y's; FINISH(t, dot) stores a row's result.
#define ROWS_DOT(L, K, ROW, Y, FINISH)                                                 \
    for (long long t0 = 0; t0 < (L); t0 += blockDim.x / %(GROUP)d) {                   \
        const long long t = t0 + threadIdx.x / %(GROUP)d;                              \
        const int lane = threadIdx.x %% %(GROUP)d;                                     \
        F p = 0;                                                                       \
        if (t < (L))                                                                   \
            for (long long k = lane; k < (K); k += %(GROUP)d) p += ROW(t, k) * Y(k);   \
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
extern "C" __global__ void cudnnlite_additive_attention_fwd_%(NAME)s(
        const F* q, const F* loc, const F* pm, const F* v, const M* mem, long long msb,
        long long mst, const bool* mask, int has_mask, F neg_inf, long long L, long long A,
        long long E, F* h, F* w, F* ctx) {
    __shared__ F part[%(THREADS)d];
    const long long b = blockIdx.x;
    const F* qb = q + b * A;
    const long long la = b * L * A;
    for (long long i = threadIdx.x; i < L * A; i += blockDim.x)      // h, coalesced
        h[la + i] = tanh(qb[i %% A] + loc[la + i] + pm[la + i]);
    __syncthreads();
#define H_ROW(t, a) h[la + (t) * A + (a)]
#define V(a) v[a]
#define ENERGY(t, dot) w[b * L + (t)] = (has_mask && mask[b * L + (t)]) ? neg_inf : (dot)
    ROWS_DOT(L, A, H_ROW, V, ENERGY)                                  // e = h . v
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
extern "C" __global__ void cudnnlite_additive_attention_bwd_%(NAME)s(
        const F* gctx, const F* gw, const F* w, const F* h, const F* v, const M* mem,
        long long msb, long long mst, long long L, long long A, long long E, F* ge, F* gs,
        F* gq, F* gmem) {
    __shared__ F part[%(THREADS)d];
    const long long b = blockIdx.x;
#define MEM_ROW(t, j) LOAD_M(mem[b * msb + (t) * mst + (j)])
#define GCTX(j) gctx[b * E + (j)]
#define GW_TOTAL(t, dot) ge[b * L + (t)] = gw[b * L + (t)] + (dot)
    ROWS_DOT(L, E, MEM_ROW, GCTX, GW_TOTAL)                           // gw~ = gw + memory . gctx
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
def _kernel(direction, F, memory_dtype):
    M, load = _MEMORY_TYPES[memory_dtype]
    name = f"{F}_{M.replace(' ', '_')}"
    source = (_FORWARD if direction == "fwd" else _BACKWARD) % {"NAME": name, "GROUP": GROUP,
                                                               "THREADS": THREADS}
    return cupy().RawKernel(f"typedef {F} F;\ntypedef {M} M;\n{load}\n" + source,
                            f"cudnnlite_additive_attention_{direction}_{name}")


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

    def forward(self, q, loc, pm, v, memory, mask=None):
        xp = self.xp
        T, F = q.dtype, accumulation_dtype(q.dtype)
        q, loc, pm, v = (xp.ascontiguousarray(a, dtype=F) for a in (q, loc, pm, v))
        B, L, A = loc.shape
        E = memory.shape[2]
        if self.gpu:
            cp = cupy()
            h, w, ctx = cp.empty((B, L, A), F), cp.empty((B, L), F), cp.empty((B, E), F)
            m = w if mask is None else cp.ascontiguousarray(mask)
            mem, kind, msb, mst = _device_memory(memory, F)
            _kernel("fwd", _c_name(F), kind)((B,), (THREADS,), (
                q, loc, pm, v, mem, np.int64(msb), np.int64(mst), m, np.int32(mask is not None),
                F.type(-np.inf), np.int64(L), np.int64(A), np.int64(E), h, w, ctx))
        else:
            h = np.tanh(q[:, None, :] + loc + pm)
            e = h @ v[0]
            if mask is not None:
                e = np.where(mask, -np.inf, e)
            x = np.exp(e - e.max(axis=1, keepdims=True))
            w = x / x.sum(axis=1, keepdims=True)
            ctx = np.einsum("bt,bte->be", w, memory.astype(F, copy=False))
        self.saved = h, w, v, memory          # (memory as given: the caller's array, no copy)
        return ctx.astype(T, copy=False), w.astype(T, copy=False)    # (half data: rounded once)

    def backward(self, gctx, gw):
        h, w, v, memory = self.saved
        xp = self.xp
        F = h.dtype
        B, L, A = h.shape
        E = memory.shape[2]
        gctx = xp.zeros((B, E), F) if gctx is None else xp.ascontiguousarray(gctx, dtype=F)
        gw = xp.zeros((B, L), F) if gw is None else xp.ascontiguousarray(gw, dtype=F)
        if self.gpu:
            cp = cupy()
            ge, gs = cp.empty((B, L), F), cp.empty((B, L, A), F)
            gq, gmem = cp.empty((B, A), F), cp.empty((B, L, E), F)
            mem, kind, msb, mst = _device_memory(memory, F)
            _kernel("bwd", _c_name(F), kind)((B,), (THREADS,), (
                gctx, gw, w, h, v, mem, np.int64(msb), np.int64(mst), np.int64(L), np.int64(A),
                np.int64(E), ge, gs, gq, gmem))
        else:
            g = gw + np.einsum("be,bte->bt", gctx, memory.astype(F, copy=False))
            ge = w * (g - (w * g).sum(axis=1, keepdims=True))
            gs = ge[:, :, None] * v[0] * (1 - h * h)
            gq = gs.sum(axis=1)
            gmem = w[:, :, None] * gctx[:, None, :]
        need = self.needs_input_grad
        # v's gradient, sum over b, t of ge h, is Deferred: one GEMM over every decoder frame
        return (gq if need[0] else None, gs if need[1] else None, gs if need[2] else None,
                Deferred(ge.reshape(B * L, 1), h.reshape(B * L, A)) if need[3] else None,
                gmem if need[4] else None, None)


def _c_name(dtype):
    return "double" if dtype == np.float64 else "float"

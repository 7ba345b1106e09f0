"""Random numbers: a NumPy Generator for the CPU path (and for initialisation), and a device-side
counter-based generator for the GPU path whose (seed, offset) live in device memory -- no host
sync, and a captured CUDA graph draws new numbers on every replay.

    u(i) = top 24 bits of mix(seed ^ mix(offset + i)) / 2**24,  mix = splitmix64's finaliser
"""
import numpy as np

from .backend import accumulation_dtype, cupy

_seed = 0
_host = np.random.default_rng(_seed)
_devices = {}

_MIX = r"""
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float uniform24(const unsigned long long* state, long long i) {
    return (float)(mix64(state[0] ^ mix64(state[1] + (unsigned long long)i)) >> 40)
           * (1.0f / 16777216.0f);
}
"""


def manual_seed(seed):
    """Seed the host generator and every device generator (as torch.manual_seed). A device
    generator's (seed, offset) is rewritten in place, never replaced: a captured CUDA graph reads
    that buffer, so after manual_seed its replays draw from the new seed, as eager calls would."""
    global _seed, _host
    _seed = int(seed)
    _host = np.random.default_rng(_seed)
    for dev, gen in _devices.items():
        with cupy().cuda.Device(dev):
            gen.set_state([_seed + 1 + dev, 0])


def host_generator():
    return _host


def device_generator():
    """The generator of the current CuPy device."""
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    gen = _devices.get(dev)
    if gen is None:
        gen = _devices[dev] = DeviceGenerator(_seed + 1 + dev)
    return gen


class DeviceGenerator:
    def __init__(self, seed):
        cp = cupy()
        self.state = cp.array([seed, 0], dtype=cp.uint64)   # (seed, offset), on the device
        self._dropout = cp.ElementwiseKernel(          # (S: float for half data, else T)
            "T x, raw uint64 state, float32 p, S scale", "T y, S m",
            "m = uniform24(&state[0], i) >= p ? scale : (S)0; y = (T)(x * m);",
            "cudnnlite_dropout", preamble=_MIX)
        self._uniform = cp.ElementwiseKernel(
            "raw uint64 state", "T u", "u = (T)uniform24(&state[0], i);",
            "cudnnlite_uniform", preamble=_MIX)
        self._normal = cp.ElementwiseKernel(
            "raw uint64 state, int64 half", "T z",
            """float u1 = uniform24(&state[0], i), u2 = uniform24(&state[0], i + half);
               z = (T)(sqrtf(-2.0f * log1pf(-u1)) * cospif(2.0f * u2));""",
            "cudnnlite_normal", preamble=_MIX)
        self._advance = cp.ElementwiseKernel(
            "uint64 n", "raw uint64 state", "state[1] += n;", "cudnnlite_advance")

    def _next(self, n):
        self._advance(np.uint64(n), self.state, size=1)

    def dropout(self, x, p):
        """(x * mask, mask) with mask = 1/(1-p) with probability 1-p, else 0; the mask in float32
        for half-precision x (as the NumPy path computes it: 1/(1-p) is not rounded to 8 bits)."""
        S = accumulation_dtype(x.dtype)           # (the outputs given: CuPy infers S from m)
        y, m = self._dropout(x, self.state, np.float32(p), S.type(1 / (1 - p)),
                             cupy().empty_like(x), cupy().empty(x.shape, S))
        self._next(x.size)
        return y, m

    def uniform(self, shape, dtype="float32"):
        u = cupy().empty(shape, dtype=dtype)
        self._uniform(self.state, u)
        self._next(u.size)
        return u

    def normal(self, shape, dtype="float32"):
        """Standard normal by Box-Muller on two uniform draws, in one kernel."""
        z = cupy().empty(shape, dtype=dtype)
        self._normal(self.state, np.int64(z.size), z)
        self._next(2 * z.size)
        return z

    def get_state(self):
        """(seed, offset) as a host array, for checkpoints."""
        return self.state.get()

    def set_state(self, state):
        """Overwrite (seed, offset) in place (the buffer's address never changes)."""
        self.state[...] = cupy().asarray(np.asarray(state, dtype=np.uint64))

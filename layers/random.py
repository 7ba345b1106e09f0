"""Random numbers: a NumPy Generator for the CPU path (and for initialisation), and a device-side
counter-based generator for the GPU path whose (seed, offset) live in device memory -- no host
sync, and a captured CUDA graph draws new numbers on every replay.

    u(i) = top 24 bits of mix(seed ^ mix(offset + i)) / 2**24,  mix = splitmix64's finaliser
"""
import contextlib
import os

import numpy as np

from .backend import accumulation_dtype, cupy

_seed = 0
_device_seed = 0            # (device d's generator starts at _device_seed + 1 + d)
_host = np.random.default_rng(_seed)
_devices = {}
HOST_STATE_BYTES = 45       # PCG64's state and increment (16 bytes each), has_uint32, uinteger,
#                             then the seed (8 bytes: initial_seed() comes back with the state)
DEVICE_STATE_BYTES = 16     # a device generator's (seed, offset), two uint64

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
    _seed = _seed_value(seed)
    _host = np.random.default_rng(_seed)
    seed_devices(_seed)


def _seed_value(seed):
    """torch's reading of a seed: int(seed), from -2**63 up to 2**64, a negative one modulo
    2**64 (-1 is 2**64 - 1)."""
    s = int(seed)
    if not -2 ** 63 <= s < 2 ** 64:
        raise ValueError(f"Overflow when unpacking long long: seed {seed} (torch's range is "
                         f"-2**63 to 2**64 - 1)")
    return s % 2 ** 64


def _device_start(seed, device):
    """Device `device`'s generator's seed for a manual seed `seed` (seed + 1 + device, modulo
    2**64: its state is two uint64)."""
    return (seed + 1 + device) % 2 ** 64


def seed_devices(seed, device=None):
    """Seed the device generators -- `device`'s only (torch.cuda.manual_seed), or all, those
    made later too (torch.cuda.manual_seed_all) -- in place, as manual_seed does."""
    global _device_seed
    seed = _seed_value(seed)
    if device is None:
        _device_seed = seed
    for dev, gen in _devices.items():
        if device is None or dev == device:
            with cupy().cuda.Device(dev):
                gen.set_state([_device_start(seed, dev), 0])
    if device is not None and device not in _devices:
        with cupy().cuda.Device(device):
            device_generator().set_state([_device_start(seed, device), 0])


def initial_seed():
    """torch.initial_seed: the seed manual_seed (or seed) last set; 0 at start."""
    return _seed


def seed():
    """torch.seed: seed every generator from the operating system's entropy; returns the
    seed."""
    s = int.from_bytes(os.urandom(8), "little") >> 1      # (a non-negative int64, as torch's)
    manual_seed(s)
    return s


def get_rng_state():
    """torch.get_rng_state: the host generator's state as a uint8 Tensor (PCG64's state and
    increment, little-endian, its cached 32-bit half, then the seed), for set_rng_state."""
    return _host_state(_host, _seed)


def set_rng_state(new_state):
    """torch.set_rng_state: the host generator back where get_rng_state's Tensor was taken
    (initial_seed() too, as torch's)."""
    global _seed
    _seed = _set_host_state(_host, "set_rng_state", new_state)


def _host_state(rng, seed):
    """A NumPy Generator's (PCG64) state and its seed as get_rng_state's uint8 Tensor."""
    from .tensor import Tensor
    st = rng.bit_generator.state
    raw = b"".join(st["state"][k].to_bytes(16, "little") for k in ("state", "inc"))
    raw += bytes([st["has_uint32"]]) + int(st["uinteger"]).to_bytes(4, "little")
    raw += seed.to_bytes(8, "little")
    return Tensor(np.frombuffer(raw, np.uint8).copy())


def _set_host_state(rng, fn, new_state):
    """Put rng's state back from a get_rng_state Tensor; returns the seed it holds."""
    raw = _state_bytes(fn, new_state, HOST_STATE_BYTES)
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int.from_bytes(raw[:16], "little"),
                  "inc": int.from_bytes(raw[16:32], "little")},
        "has_uint32": raw[32], "uinteger": int.from_bytes(raw[33:37], "little")}
    return int.from_bytes(raw[37:45], "little")


class Generator:
    """torch.Generator: a stream of its own for what takes generator=. As torch's: made with its
    default seed, manual_seed(s) returns it, get_state / set_state give and take a uint8 Tensor.

    On the host (device "cpu", the default): DataLoader and the samplers' shuffles,
    random_split, randperm, rand, randn, randint, multinomial, the drawing initialisers. On a GPU
    (device 0, "cuda" -- device 0, as device="cuda" --, "cuda:1", ...): rand, randn and
    multinomial on that device, from a counter-based generator of its own, the same kind as the
    device's default one -- Generator(d) seeded s draws what the device's default generator
    draws after L.cuda.manual_seed(s); its state is torch's 16 bytes, the seed and the offset
    (L.cuda.get_rng_state's form). The draws made on the host (randint, randperm, the
    initialisers, the samplers) refuse a GPU generator."""
    DEFAULT_SEED = 67280421310721          # (torch.Generator().initial_seed(), a GPU's too)

    def __init__(self, device="cpu"):
        from .backend import parse_device
        self.device = parse_device(device)        # ('cuda': device 0, as device='cuda' is)
        self._device_gen = None
        self.manual_seed(self.DEFAULT_SEED)

    def manual_seed(self, seed):
        self._seed = _seed_value(seed)
        if self.device == "cpu":
            self.rng = np.random.default_rng(self._seed)       # (the NumPy Generator it draws from)
            return self
        state = [_device_start(self._seed, self.device), 0]
        with cupy().cuda.Device(self.device):
            if self._device_gen is None:
                self._device_gen = DeviceGenerator(state[0])
            else:
                self._device_gen.set_state(state)
        return self

    def initial_seed(self):
        return self._seed

    def seed(self):
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def get_state(self):
        if self.device == "cpu":
            return _host_state(self.rng, self._seed)
        return _device_state(self._device_gen, self.device)

    def set_state(self, new_state):
        if self.device == "cpu":
            self._seed = _set_host_state(self.rng, "Generator.set_state", new_state)
        else:
            self._seed = _set_device_state(self._device_gen, self.device,
                                           "Generator.set_state", new_state)
        return self

    def device_generator(self, device, who):
        """The DeviceGenerator a draw on `device` takes from this generator (one of the same
        device), else torch's refusal."""
        if device == "cpu" or self.device == "cpu" or device != self.device:
            where = lambda d: "cpu" if d == "cpu" else "cuda"          # noqa: E731
            raise RuntimeError(
                f"{who}: Expected a '{where(device)}' device type for generator but found "
                f"'{where(self.device)}'" + ("" if where(device) != where(self.device) else
                                             f" (generator on device {self.device}, the draw "
                                             f"on device {device})"))
        return self._device_gen

    def __repr__(self):
        where = "cpu" if self.device == "cpu" else f"cuda:{self.device}"
        return f"<layers.Generator on {where}, initial seed {self._seed}>"


def get_device_rng_state(device):
    """torch.cuda.get_rng_state(device): device `device`'s generator's (seed, offset) as a uint8
    Tensor on the host."""
    with cupy().cuda.Device(device):
        return _device_state(device_generator(), device)


def set_device_rng_state(new_state, device):
    """torch.cuda.set_rng_state(new_state, device): that generator's (seed, offset), in place."""
    with cupy().cuda.Device(device):
        _set_device_state(device_generator(), device, "cuda.set_rng_state", new_state)


def _device_state(gen, device):
    """A device generator's state as torch's: the seed and the offset, two uint64 in a uint8
    Tensor (the generator itself counts from seed + 1 + device: _device_start)."""
    from .tensor import Tensor
    with cupy().cuda.Device(device):
        start, offset = (int(v) for v in gen.get_state())
    seed = (start - 1 - device) % 2 ** 64
    return Tensor(np.array([seed, offset], "<u8").view(np.uint8))


def _set_device_state(gen, device, who, new_state):
    """_device_state's inverse, in place; returns the seed."""
    seed, offset = (int(v) for v in np.frombuffer(
        _state_bytes(who, new_state, DEVICE_STATE_BYTES), "<u8"))
    with cupy().cuda.Device(device):
        gen.set_state([_device_start(seed, device), offset])
    return seed


def _state_bytes(fn, state, n):
    """The bytes of a state Tensor (or array) of `n` uint8, refused otherwise."""
    from .tensor import Tensor
    a = state.numpy() if isinstance(state, Tensor) else np.asarray(state)
    if a.dtype != np.uint8 or a.shape != (n,):
        raise RuntimeError(f"{fn}: expected the uint8 Tensor of {n} bytes that "
                           f"{fn.replace('set_', 'get_')} gives, got {a.dtype} of shape "
                           f"{a.shape}")
    return bytes(a)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True):
    """torch.random.fork_rng: run the block, then put the host generator and those of `devices`
    (None: every device generator made so far) back as they were, so what the block draws
    changes nothing after it."""
    global _device_seed
    if not enabled:
        yield
        return
    devices = list(_devices) if devices is None else [cuda_index(d, "fork_rng") for d in devices]
    host, device_seed = get_rng_state(), _device_seed
    saved = [(d, get_device_rng_state(d)) for d in devices]
    try:
        yield
    finally:
        set_rng_state(host)
        _device_seed = device_seed          # (the seed of a device generator made later)
        for d, state in saved:
            set_device_rng_state(state, d)


def cuda_index(device, who):
    """A device argument of torch.cuda's: 'cuda' (or None) the current device, else its index;
    the CPU refused."""
    from .backend import parse_device
    if device is None or device == "cuda":
        return int(cupy().cuda.runtime.getDevice())
    d = parse_device(device)
    if d == "cpu":
        raise ValueError(f"{who}: expected a CUDA device, got {device!r} (the host generator "
                         f"is another)")
    return d


def host_generator():
    return _host


def host_rng(generator, who, numpy_ok=True):
    """The NumPy Generator host draws come from: generator= an L.Generator's (or, numpy_ok, a
    numpy.random.Generator itself), else manual_seed's host generator."""
    if generator is None:
        return _host
    if isinstance(generator, Generator):
        if generator.device != "cpu":
            raise RuntimeError(f"{who}: Expected a 'cpu' device type for generator but found "
                               f"'cuda' (this draw is made on the host)")
        return generator.rng
    if numpy_ok and isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"{who}: generator= takes an L.Generator"
                    + (" or a numpy.random.Generator" if numpy_ok else "")
                    + f", got {type(generator).__module__}.{type(generator).__name__}")


def device_generator():
    """The generator of the current CuPy device."""
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    gen = _devices.get(dev)
    if gen is None:
        gen = _devices[dev] = DeviceGenerator(_device_start(_device_seed, dev))
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

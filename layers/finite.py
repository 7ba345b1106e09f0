"""Where a non-finite value first appeared in a training step, found without a host sync: while a
FiniteCheck is active, each leaf module's output and each gradient checked before an optimizer
step is tested on the device, and the first non-finite one (its step and index) is kept in one
device int64; first() reads it back once, when the loss has already come out non-finite.

    with check:                  # a step: a fresh list of what is checked
        loss = model(x) ...      # Module.__call__ -> check.output(module, out)
        check.gradients(opt)     # before opt.step(): the gradients it is about to apply
        opt.step()
    check.first()                # 'output of netD.main.2 (Conv2d)', or None

Each step starts afresh, or -- keep_first=True, for a loop that reads its losses back every N
steps -- the first non-finite value is kept over steps until reset(), and first_step() says in
which step since the reset it appeared.
"""
import functools
import threading
import weakref

import numpy as np

from . import kernels, optim
from .backend import device_table, dtype_name, is_floating, is_gpu, to_device
from .tensor import Tensor

NONE = np.iinfo(np.int64).max       # `first` when nothing was non-finite
STEP = 1 << 32                      # first = step * STEP + event


class _Active(threading.local):
    check = None                    # the FiniteCheck in effect on this thread


active = _Active()


class FiniteCheck:
    """FiniteCheck({'netG': netG, 'netD': netD}) watches the leaf modules (those with no
    children) of these models, named by their named_modules() paths under the given names
    ('netD.main.2'), and their parameters' gradients ('netD.main.2.weight').

    The k-th tensor checked in a step is event k. A tensor checked alone (the NumPy path, a GPU
    tensor the queue below cannot take, FOREACH off) gets a device kernel of its own that does
    `if (!isfinite(x) && first == NONE) first = step * STEP + k` -- every thread writes the same
    value, kernels on one stream run in order, so `first` ends as the earliest non-finite event
    with no atomics and no sync; the queue's kernel offers its events to atomicMin, which keeps
    the earliest too. `step` is a device counter each step advances. The events of a
    step are the same every step, so a captured CUDA graph replays them with the list Python
    made while capturing. `first` and the counter are allocated here, outside any graph's pool,
    and the step function that uses this check keeps them alive as long as a graph captured from
    that function.

    A leaf whose module says `finite_preserving` (ReLU, LeakyReLU with |slope| <= 1, Tanh,
    Sigmoid: finite inputs give finite outputs) is not checked when each of its inputs is a
    Tensor already checked in this step: its output can be non-finite only where an input is,
    and that input's earlier event is the one `first` keeps. (DCGAN: 20 of 53 output checks,
    each a full read of an activation.)

    On a GPU the checks are queued and launched together (with layers.optim.FOREACH, as the
    optimizers' multi-tensor kernels): one launch reads every queued tensor's memory as 16-byte
    words, over a table of their pointers, and atomicMin keeps the smallest event. The queue is
    launched when backward() starts (the forward's outputs are all alive then), by gradients(),
    on leaving the step, and at QUEUE_LIMIT tensors; a tensor it cannot take (not dense and
    aligned, another dtype than the queue's) launches the queue first and is checked alone, so
    the kernels run in event order. The queue holds its tensors' arrays until its launch. DCGAN's
    eager step: 5 launches instead of 35 (33 outputs, then the gradients)."""

    def __init__(self, models, every_call=True, keep_first=False, device=None):
        """every_call=False checks each leaf's output on its first call of a step only: for a
        module called many times a step (Tacotron 2's decoder cells, once a frame), whose
        per-call checks would cost a launch each; its gradients are still all checked.
        keep_first=True keeps the first non-finite event over steps until reset(). `device`
        ('cpu' or a GPU index) is where the models run: their parameters' device unless given
        (models with no parameters must give it)."""
        self.every_call, self.keep_first = every_call, keep_first
        self._seen = set()
        self._checked = {}          # id(Tensor) -> weakref to it: outputs checked this step
        self._leaves, self._params = {}, {}
        for name, model in models.items():     # (the events' names, made once)
            for path, m in model.named_modules(prefix=name):
                if next(m.children(), None) is None:
                    self._leaves[id(m)] = f"output of {path} ({type(m).__name__})"
            for path, p in model.named_parameters(name):
                self._params[id(p)] = f"gradient of {path}"
        self._kinds = {}            # (type, shape, strides, dtype) -> how _check takes it
        if device is None:
            device = next((p.device for model in models.values() for p in model.parameters()),
                          None)
            if device is None:
                raise ValueError("FiniteCheck: the models have no parameters to say where they "
                                 "run; pass device= ('cpu' or a GPU index)")
        self.first_event = to_device(np.full((1,), NONE, np.int64), device)
        self.step = to_device(np.zeros((1,), np.int64), device)    # steps since the reset
        self.events = []            # event k -> 'output of netD.main.2 (Conv2d)'
        self._new_step = False      # the events are the last step's until the next check
        self._queue, self._queue_k0 = [], 0     # (array, 16-byte words) of events k0, k0 + 1..

    def reset(self):
        """Forget what was found and start counting steps from here (no sync)."""
        self.first_event.fill(NONE)
        self.step.fill(0)

    def __enter__(self):
        """Start a step: a fresh list of events from its first check on (and, unless keep_first,
        nothing found yet); make this the active check. A step that checks nothing from Python
        -- a CUDA graph's replay, inside this block -- keeps the events of the last step that
        did (the capture's), which name what the replay's kernels find."""
        if not self.keep_first:
            self.reset()
        self.step += 1
        self._new_step = True
        self._queue = []
        self._seen = set()
        self._checked = {}
        active.check = self
        return self

    def __exit__(self, exc_type, *exc):
        active.check = None
        if exc_type is None:
            self.flush()
            return
        try:                        # the step failed: what it queued is still checked, unless
            self.flush()            # the launch fails too (a broken capture), and then the
        except Exception:           # step's own error is the one raised
            self._queue = []

    def output(self, module, out, inputs=()):
        """Check what a leaf module returned (a Tensor, or tuples of Tensors) from `inputs` (its
        positional arguments): skipped for a finite-preserving module whose inputs were all
        checked (see the class)."""
        what = self._leaves.get(id(module))
        if what is None or (not self.every_call and id(module) in self._seen):
            return
        self._seen.add(id(module))
        if module.finite_preserving and inputs and \
                all(self._was_checked(t) for t in inputs):
            return
        if type(out) is Tensor:
            self._check(out.data, what)
            self._checked[id(out)] = weakref.ref(out)
            return
        for t in _tensors(out):
            self._check(t.data, what)
            self._checked[id(t)] = weakref.ref(t)

    def _was_checked(self, t):
        """t is a Tensor whose check this step is recorded (the same object: an id alone could
        be a freed Tensor's, reused)."""
        ref = self._checked.get(id(t)) if isinstance(t, Tensor) else None
        return ref is not None and ref() is t

    def gradients(self, optimizer):
        """Check the gradient of every parameter `optimizer` is about to update, last parameter
        first: backward computes a model's gradients from its last layer to its first, so a
        non-finite gradient that spread backwards is reported where it started."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for p in reversed(params):
            if p.grad is not None:
                self._check(p.grad.data, self._params.get(id(p), "gradient of a parameter"))
        self.flush()

    def flush(self):
        """Launch the queued checks (see the class): one kernel over a table of their pointers,
        or the one-tensor kernel for a queue of one."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        x = queue[0][0]
        with kernels.cupy().cuda.Device(x.device.id):   # (the current device may have changed)
            self._launch(queue, x)

    def _launch(self, queue, x):
        if len(queue) == 1:
            self._words(x, queue[0][1], self._queue_k0)
            return
        per_block = WORD_THREADS * UNROLL
        rows, blocks = [], 0
        for a, n in queue:
            rows.append((a.data.ptr, blocks, n))            # (QUEUE_COLUMNS)
            blocks += -(-n // per_block)
        _multi_word_kernel(dtype_name(x.dtype))((blocks,), (WORD_THREADS,),
                                 (device_table(rows), np.int32(len(rows)),
                                  np.int64(self._queue_k0), self.step, self.first_event))

    def _words(self, x, n, k):
        """The one-tensor kernel: x's n 16-byte words, event k."""
        _word_kernel(dtype_name(x.dtype))(
            (kernels.grid(n, WORD_THREADS, x.device.id),), (WORD_THREADS,),
            (x, np.int64(n), np.int64(k), self.step, self.first_event))

    def first(self):
        """What went non-finite first -- in the last step, or with keep_first since the reset --
        or None. Reads one int from the device: call it only once the step's results say
        something is wrong."""
        self.flush()
        code = int(self.first_event[0])
        if code == NONE:
            return None
        k = code % STEP
        # named from the event list of the last step Python ran (a captured step's: the
        # capture's); every step of a training loop checks the same tensors in the same order
        return self.events[k] if k < len(self.events) else f"checked tensor #{k} of its step"

    def first_step(self):
        """The step, counted from 1 since the reset (1: the last step without keep_first), in
        which first() went non-finite, or None."""
        self.flush()
        code = int(self.first_event[0])
        return None if code == NONE else code // STEP

    def _kind(self, x):
        """(floating, on a GPU, dtype name, kernels.dense_vectors16 -- 16-byte words when
        dense, the alignment of the first element aside) of arrays of x's type, shape, strides
        and dtype; made once per kind (a step checks the same kinds every step)."""
        key = (type(x), x.shape, x.strides, x.dtype)
        kind = self._kinds.get(key)
        if kind is None:
            if len(self._kinds) >= 4096:       # (variable-length batches: a bound)
                self._kinds.clear()
            name = dtype_name(x.dtype)
            kind = self._kinds[key] = (is_floating(x.dtype), is_gpu(x), name,
                                       kernels.dense_vectors16(x) if name in _NONFINITE_WORD
                                       else None)
        return kind

    def _check(self, x, what):
        floating, gpu, name, n = self._kind(x)
        if not floating:                   # integer outputs are always finite
            return
        if self._new_step:
            self.events, self._new_step = [], False
        k = len(self.events)
        self.events.append(what)
        if gpu:
            if n is not None and x.data.ptr % 16:      # (kernels.vectors16, in two parts)
                n = None
            if n is not None and optim.FOREACH:
                queue = self._queue
                if queue and (queue[0][0].dtype != x.dtype or
                              queue[0][0].device.id != x.device.id):
                    self.flush()
                    queue = self._queue
                if not queue:
                    self._queue_k0 = k
                queue.append((x, n))
                if len(queue) >= QUEUE_LIMIT:
                    self.flush()
                return
            self.flush()                   # the queue's events come first
            if n is None:
                _flag_kernel()(x, np.int64(k), self.step, self.first_event)
                return
            self._words(x, n, k)
            return
        self.flush()                       # (keeps the queue's events k0, k0 + 1, ...)
        if self.first_event[0] == NONE and not np.isfinite(x).all():
            self.first_event[0] = self.step[0] * STEP + k


WORD_THREADS = 256
UNROLL = 4            # 16-byte chunks a thread of the queue's kernel reads
QUEUE_COLUMNS = 3     # a queue table row: the words' address, the first block, the words
QUEUE_LIMIT = 64      # checks queued before a launch (a bound on the table and on what it holds)

# a 32-bit word of the data is non-finite where an element's exponent bits are all ones (inf and
# NaN); `odd`: the word is the high half of a float64
_NONFINITE_WORD = {
    "float32": "((w & 0x7f800000u) == 0x7f800000u)",
    "float64": "(odd && (w & 0x7ff00000u) == 0x7ff00000u)",
    "float16": "((w & 0x7c00u) == 0x7c00u || (w & 0x7c000000u) == 0x7c000000u)",
    "bfloat16": "((w & 0x7f80u) == 0x7f80u || (w & 0x7f800000u) == 0x7f800000u)",
}

_WORD_SOURCE = r"""
struct alignas(16) Words4 { unsigned int a, b, c, d; };

__device__ inline bool bad_word(unsigned int w, bool odd) { return %(BAD)s; }

extern "C" __global__ void cudnnlite_first_nonfinite_words_%(T)s(
        const Words4* x, long long n, long long k, const long long* step, long long* first) {
    // a dense tensor's memory as n 16-byte chunks, in any order: a finite check reads every
    // element once and needs no index arithmetic, so it runs at memory speed whatever the layout
    bool bad = false;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const Words4 v = x[i];
        bad |= bad_word(v.a, false) | bad_word(v.b, true) | bad_word(v.c, false) |
               bad_word(v.d, true);
    }
    if (bad && first[0] == %(NONE)dLL)
        first[0] = step[0] * %(STEP)dLL + k;
}
"""


_MULTI_WORD_SOURCE = r"""
struct alignas(16) Words4 { unsigned int a, b, c, d; };

__device__ inline bool bad_word(unsigned int w, bool odd) { return %(BAD)s; }

extern "C" __global__ void cudnnlite_first_nonfinite_multi_%(T)s(
        const long long* tab, int n, long long k0, const long long* step, long long* first) {
    // n dense tensors, row lo of the table: its words' address, its first block, its 16-byte
    // chunks. A block reads %(UNROLL)d * blockDim chunks of one tensor (found once a block:
    // no search per element), each thread %(UNROLL)d of them blockDim apart, loads in flight
    // together; a non-finite word makes the tensor's event k0 + lo a candidate for atomicMin
    const long long i = blockIdx.x;
%(FIND)s
    const Words4* x = reinterpret_cast<const Words4*>(tab[lo * %(COLUMNS)d]);
    const long long chunks = tab[lo * %(COLUMNS)d + 2];
    const long long base = k * blockDim.x * %(UNROLL)d + threadIdx.x;
    bool bad = false;
#pragma unroll
    for (int u = 0; u < %(UNROLL)d; ++u) {
        const long long j = base + (long long)u * blockDim.x;
        if (j < chunks) {
            const Words4 v = x[j];
            bad |= bad_word(v.a, false) | bad_word(v.b, true) | bad_word(v.c, false) |
                   bad_word(v.d, true);
        }
    }
    if (bad)
        atomicMin(reinterpret_cast<unsigned long long*>(first),
                  (unsigned long long)(step[0] * %(STEP)dLL + k0 + lo));
}
"""


@functools.lru_cache(maxsize=None)
def _multi_word_kernel(dtype):
    return kernels.cupy().RawKernel(
        _MULTI_WORD_SOURCE % {"BAD": _NONFINITE_WORD[dtype], "T": dtype, "NONE": NONE,
                              "STEP": STEP, "UNROLL": UNROLL,
                              "COLUMNS": QUEUE_COLUMNS,
                              "FIND": kernels.find_tensor(QUEUE_COLUMNS, 1)},
        f"cudnnlite_first_nonfinite_multi_{dtype}")


@functools.lru_cache(maxsize=None)
def _word_kernel(dtype):
    return kernels.cupy().RawKernel(
        _WORD_SOURCE % {"T": dtype, "BAD": _NONFINITE_WORD[dtype], "NONE": NONE, "STEP": STEP},
        f"cudnnlite_first_nonfinite_words_{dtype}")


def _flag_kernel():
    return kernels.pointwise(
        "cudnnlite_first_nonfinite", "T x, int64 k, raw int64 step", "raw int64 first",
        f"if (!isfinite(x) && first[0] == {NONE}LL) first[0] = step[0] * {STEP}LL + k;")


def _tensors(out):
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)

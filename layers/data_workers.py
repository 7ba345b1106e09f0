"""DataLoader's worker processes (num_workers > 0), as torch's: each worker holds the dataset,
fetches and collates whole batches, and sends them back over a queue; the loader hands them out
in the order of its sampler, whatever order they finish in, keeping prefetch_factor batches a
worker in flight. An IterableDataset is read by every worker in full (get_worker_info() says
which worker is reading, for a dataset to split itself), its batches taken from the workers in
turn. Each worker seeds layers.random's host generator with the epoch's base seed plus its id,
then calls worker_init_fn(id); an exception in a worker is raised in the loader's process,
naming the worker. Workers are forked (torch's default on Linux): a dataset should read files
and NumPy arrays, not touch the GPU, in them.
"""
import itertools
import multiprocessing
import queue
import traceback
from collections import namedtuple

WorkerInfo = namedtuple("WorkerInfo", ["id", "num_workers", "seed", "dataset"])
WorkerInfo.__doc__ = "torch's get_worker_info(): this worker's id, their number, its seed and " \
                     "its copy of the dataset."

_info = None            # this process's WorkerInfo (None in the loader's own process)


class _End:
    """A stream's end, as a worker answers it (a class: it is pickled across, so tested by
    type, not identity)."""


_END = _End()
POLL_S = 1.0            # how often a wait for a batch checks that the workers are alive


def get_worker_info():
    """In a DataLoader worker, its WorkerInfo; elsewhere None (torch.utils.data's)."""
    return _info


class _Failure:
    """An exception raised in a worker, carried back to be raised in the loader's process."""

    def __init__(self, worker_id, error):
        self.worker_id, self.type = worker_id, type(error)
        self.text = "".join(traceback.format_exception(error))

    def reraise(self):
        message = (f"Caught {self.type.__name__} in DataLoader worker process "
                   f"{self.worker_id}.\nOriginal {self.text}")
        try:
            error = self.type(message)
        except Exception:            # (an exception type that takes other arguments)
            error = RuntimeError(message)
        raise error


class Fetch:
    """What a worker does with a task: a batch of indices (or one index) into a map-style
    dataset, or the next batch (or sample) of its stream; collated."""

    def __init__(self, loader):
        self.collate_fn, self.batch_size = loader.collate_fn, loader.batch_size
        self.drop_last = loader.drop_last
        self.stream = isinstance(loader.dataset, _iterable_type())
        self.batched = loader.batch_sampler is not None or \
            (self.stream and loader.batch_size is not None)

    def start(self, dataset):
        """(again at each epoch, for a stream: it is read from its start)"""
        self.dataset = dataset
        self.items = iter(dataset) if self.stream else None

    def __call__(self, work):
        if not self.stream:
            if not self.batched:
                return self.collate_fn(self.dataset[work])
            getitems = getattr(self.dataset, "__getitems__", None)
            return self.collate_fn(getitems(work) if getitems else
                                   [self.dataset[i] for i in work])
        if not self.batched:
            return self.collate_fn(next(self.items))
        batch = list(itertools.islice(self.items, self.batch_size))
        if not batch or (self.drop_last and len(batch) < self.batch_size):
            raise StopIteration
        return self.collate_fn(batch)


def _iterable_type():
    from .data import IterableDataset
    return IterableDataset


def _worker(dataset, fetch, tasks, results, worker_id, num_workers, seed, init_fn):
    """A worker's life: seed, init_fn, then tasks until None. A task is (n, work), answered with
    (n, the batch | _END | a _Failure); ("start", None) restarts a stream."""
    global _info
    from . import random
    random.manual_seed(seed)
    _info = WorkerInfo(worker_id, num_workers, seed, dataset)
    failed = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
        fetch.start(dataset)
    except Exception as e:               # (every task then answers with it)
        failed = _Failure(worker_id, e)
    while True:
        task = tasks.get()
        if task is None:               # (shut down: answers not taken are dropped, so the
            results.cancel_join_thread()   # process ends without waiting to send them)
            return
        n, work = task
        if n == "start":
            if failed is None:
                fetch.start(dataset)
            continue
        if failed is not None:
            results.put((n, failed))
            continue
        try:
            results.put((n, fetch(work)))
        except StopIteration:
            results.put((n, _END))
        except Exception as e:
            results.put((n, _Failure(worker_id, e)))


class Pool:
    """The worker processes of one DataLoader (for an epoch, or every epoch: persistent)."""

    def __init__(self, loader, seed):
        ctx = loader.multiprocessing_context
        if ctx is None or isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx or "fork")
        n = loader.num_workers
        self.results, self.tasks = ctx.Queue(), [ctx.Queue() for _ in range(n)]
        self.outstanding, self.timeout = 0, loader.timeout
        self.processes = [ctx.Process(target=_worker, daemon=True, args=(
            loader.dataset, Fetch(loader), self.tasks[i], self.results, i, n, seed + i,
            loader.worker_init_fn)) for i in range(n)]
        for p in self.processes:
            p.start()

    def send(self, worker, n, work):
        self.tasks[worker].put((n, work))
        self.outstanding += 1

    def receive(self):
        """(n, answer) of the next task finished; refused on the loader's timeout, or when a
        worker has died."""
        waited = 0.0
        while True:
            step = POLL_S if not self.timeout else min(POLL_S, self.timeout - waited)
            try:
                answer = self.results.get(timeout=step)
                self.outstanding -= 1
                return answer
            except queue.Empty:
                waited += step
            dead = [p for p in self.processes if not p.is_alive()]
            if dead:
                self.close()
                raise RuntimeError(f"DataLoader worker (pid(s) "
                                   f"{', '.join(str(p.pid) for p in dead)}) exited "
                                   f"unexpectedly (exit code {dead[0].exitcode})")
            if self.timeout and waited >= self.timeout:
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")

    def drain(self):
        """Take the answers of an epoch left unfinished (a persistent pool's next epoch starts
        clean)."""
        while self.outstanding:
            self.receive()

    def close(self):
        for q in self.tasks:
            q.put(None)
        for p in self.processes:
            p.join(timeout=1.0)
            if p.is_alive():
                p.terminate()
        self.processes = []


def batches(loader, pool):
    """The loader's batches from the pool's workers, in order (see the module)."""
    n = loader.num_workers
    in_flight = loader.prefetch_factor * n
    stream = isinstance(loader.dataset, _iterable_type())
    if stream:
        for q in pool.tasks:
            q.put(("start", None))
        works = itertools.repeat(None)
    else:
        works = iter(loader.batch_sampler if loader.batch_sampler is not None
                     else loader.sampler)
    live = set(range(n))               # (the workers whose stream has not ended)
    cycle, owner = itertools.cycle(range(n)), {}
    sent, done, ready = 0, 0, {}

    def send():                        # the next task, to the next live worker in turn
        nonlocal sent
        if not live:
            return
        work = next(works, _END)
        if work is _END:
            return
        worker = next(w for w in cycle if w in live)
        pool.send(worker, sent, work)
        owner[sent] = worker
        sent += 1
    for _ in range(in_flight):
        send()
    while done < sent:
        while done not in ready:
            k, answer = pool.receive()
            ready[k] = answer
        answer = ready.pop(done)
        worker = owner.pop(done)
        done += 1
        if isinstance(answer, _End):  # (that worker's stream ended: the others go on)
            live.discard(worker)
            send()
            continue
        send()
        if isinstance(answer, _Failure):
            answer.reraise()
        yield answer

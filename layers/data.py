"""torch.utils.data's datasets, samplers and DataLoader (also `L.utils.data`, and
`from layers.utils.data import DataLoader`): batches a torch training loop iterates over, made
the way torch makes them -- the same order for the same indices, default_collate's stacking
rules and types -- with draws from this project's host generator (L.manual_seed), not torch's.

    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
    for xb, yb in loader:                  # CPU Tensors; model.to(0)'s input: xb.to(0)

Batches are loaded in the calling process: num_workers and pin_memory are taken (torch's
spellings) and give the same batches, without worker processes (train.data is the project's
own loader, with a pinned-memory prefetch on a side stream).
"""
import bisect
import collections.abc
import copy
import itertools
import math
import warnings

import numpy as np

from . import random
from .backend import is_floating
from .data_workers import get_worker_info
from .tensor import Tensor, as_tensor, tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset",
           "Subset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "BatchSampler", "DataLoader", "default_collate",
           "default_convert", "get_worker_info"]


# ---- datasets ----------------------------------------------------------------------------------

class Dataset:
    """A map-style dataset: __getitem__(index) and __len__; `a + b` concatenates."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: __iter__ gives its samples (no indices, no shuffling)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the i-th rows of each tensor (all of one first size), as a tuple."""

    def __init__(self, *tensors):
        if not tensors or any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError(f"TensorDataset: Size mismatch between tensors (first sizes "
                             f"{[t.shape[0] for t in tensors]})")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after another (negative indices from the end, as torch's)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index = len(self) + index
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """Streams one after another, read as they come (IterableDataset + IterableDataset)."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            _only_streams(d)
            yield from d

    def __len__(self):
        total = 0
        for d in self.datasets:
            _only_streams(d)
            total += len(d)
        return total


def _only_streams(d):
    if not isinstance(d, IterableDataset):
        raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__} "
                        f"(torch raises AssertionError)")


class Subset(Dataset):
    """The dataset at the given indices, in their order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices):
        """A batch of samples, with one call of the dataset's own __getitems__ where it has
        one (as torch's Subset)."""
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Non-overlapping Subsets of the given lengths (ints summing to len(dataset), or fractions
    summing to 1: floors, the remainder handed out one by one from the first, as torch's), over
    one random permutation of the indices."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * f)) for f in lengths]
        if any(f < 0 or f > 1 for f in lengths):
            raise ValueError(f"random_split: fractions must lie in [0, 1], got {lengths}")
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              f"empty dataset.", stacklevel=2)
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = _generator(generator, "random_split").permutation(n).tolist()
    out, start = [], 0
    for size in lengths:
        out.append(Subset(dataset, order[start:start + size]))
        start += size
    return out


# ---- samplers ----------------------------------------------------------------------------------

class Sampler:
    """Indices of a dataset, in some order (__iter__, and __len__ where known)."""

    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new permutation each pass (replacement=False), or num_samples draws with replacement;
    num_samples beyond the dataset's size without replacement: whole permutations, then part of
    one, as torch's."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, rng = len(self.data_source), _generator(self.generator, "RandomSampler")
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        whole, part = divmod(self.num_samples, n)
        order = [i for _ in range(whole) for i in rng.permutation(n).tolist()]
        return iter(order + rng.permutation(n).tolist()[:part])

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a new random order each pass."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        order = _generator(self.generator, "SubsetRandomSampler").permutation(len(self.indices))
        return (self.indices[i] for i in order.tolist())

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Lists of batch_size indices from `sampler` (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _generator(generator, who):
    """The NumPy Generator draws come from (layers.random.host_rng: an L.Generator's, a
    numpy.random.Generator, or manual_seed's)."""
    return random.host_rng(generator, who)


# ---- collation ---------------------------------------------------------------------------------

_COLLATE_ERROR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                  "lists; found {}")


def default_collate(batch):
    """torch's default_collate, dispatching as torch's on the type of the batch's first element:
    Tensors stacked along a new first axis (every element must be a Tensor); NumPy arrays each
    made a Tensor, then stacked; NumPy scalars one tensor of them all (torch.tensor's dtype
    over the batch); Python floats a float64 Tensor, ints (bools) torch.tensor's; strings as
    they are; a dict, namedtuple or sequence of such collated field by field (a tuple becomes
    a list, as torch's). What torch refuses (strings among numbers, an int beyond int64, a
    NumPy date ...) raises its kind of error."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        for i, b in enumerate(batch):
            if not isinstance(b, Tensor):
                raise TypeError(f"default_collate: expected Tensor as element {i} in argument "
                                f"0, but got {type(b).__module__}.{type(b).__name__}")
        from .functional import stack
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "SaUO":
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return default_collate([_numbers_as_tensor(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number, np.object_)):
        return as_tensor(list(batch))
    if isinstance(elem, float):
        return tensor(list(batch), dtype=np.float64)
    if isinstance(elem, int):
        return tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _mapping_like(elem, {key: default_collate([d[key] for d in batch])
                                    for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):         # a namedtuple
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(s) for s in zip(*batch)]   # (strings: zip's tuples, as torch)
        if isinstance(elem, tuple):
            return fields
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            clone[:] = fields
            return clone
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def _numbers_as_tensor(x):
    """torch.as_tensor as collation calls it: a NumPy array of other than numbers or bools
    (dates, bytes, strings, objects) refused with torch's TypeError."""
    if isinstance(x, np.ndarray) and x.dtype.kind not in "biufc" and not is_floating(x.dtype):
        raise TypeError(f"can't convert np.ndarray of type {x.dtype}: only numbers and bools "
                        f"(as torch)")
    return as_tensor(x)


def _mapping_like(original, items):
    """`items` (a dict) as a mapping of original's type, as torch's collation makes it: a
    mutable one copied and updated (a defaultdict keeps its factory), another rebuilt from the
    dict, a plain dict where neither can be."""
    if isinstance(original, collections.abc.MutableMapping):
        clone = copy.copy(original)
        clone.update(items)
        return clone
    try:
        return type(original)(items)
    except TypeError:
        return items


def default_convert(data):
    """torch's default_convert (batch_size=None: each sample as it is): NumPy arrays and
    scalars as Tensors (arrays of strings or objects, and NumPy strings, left as they are; a
    NumPy date or bytes refused, as torch), containers converted item by item, everything else
    as it is."""
    if isinstance(data, np.ndarray) and data.dtype.kind in "SaUO" or isinstance(data, np.str_):
        return data
    if isinstance(data, (np.ndarray, np.generic)):
        return _numbers_as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _mapping_like(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


# ---- the loader --------------------------------------------------------------------------------

class DataLoader:
    """torch's DataLoader: batches of `dataset` by its sampler (sequential, or a new random order
    each pass with shuffle=True), collated by collate_fn (default_collate; batch_size=None:
    samples one by one through default_convert). An IterableDataset is read as a stream and
    batched as it comes. num_workers > 0: batches are made in that many worker processes
    (layers.data_workers: prefetch_factor batches each in flight, handed out in order, each
    worker seeded and given to worker_init_fn, kept between epochs with persistent_workers,
    timeout seconds at most for a batch), an IterableDataset read by each worker in full
    (get_worker_info() tells a dataset which worker it is in). pin_memory is taken and changes
    nothing. A dataset with __getitems__ gives each batch from one call of it, as torch's."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set "
                             "prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.num_workers = dataset, num_workers
        self.pin_memory, self.timeout = pin_memory, timeout
        self.worker_init_fn, self.generator = worker_init_fn, generator
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        self.multiprocessing_context, self._pool = multiprocessing_context, None
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else \
                SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        # a stream is batched as it comes: a BatchSampler over its samples themselves
        self._stream_batches = BatchSampler(dataset, batch_size, drop_last) \
            if iterable and batch_size is not None else None
        auto_collation = batch_sampler is not None or self._stream_batches is not None
        self.collate_fn = collate_fn if collate_fn is not None else \
            default_collate if auto_collation else default_convert

    def __iter__(self):
        # an epoch's base seed (the workers' seeds), drawn as torch draws it, workers or not:
        # the shuffles are then the same with and without workers
        seed = int(_generator(self.generator, "DataLoader").integers(2 ** 62))
        return self._from_workers(seed) if self.num_workers > 0 else self._in_process()

    def _from_workers(self, seed):
        """The batches from worker processes (layers.data_workers)."""
        from . import data_workers
        pool = self._pool
        if pool is None or not pool.processes:
            pool = data_workers.Pool(self, seed)
            if self.persistent_workers:
                self._pool = pool
        else:
            pool.drain()                   # (what an epoch left unfinished)
        try:
            yield from data_workers.batches(self, pool)
        finally:
            if not self.persistent_workers:
                pool.close()

    def _in_process(self):
        if self._stream_batches is not None:
            for batch in self._stream_batches:
                yield self.collate_fn(batch)
        elif isinstance(self.dataset, IterableDataset):
            for sample in self.dataset:
                yield self.collate_fn(sample)
        elif self.batch_sampler is not None:
            getitems = getattr(self.dataset, "__getitems__", None)    # (one call a batch)
            for indices in self.batch_sampler:
                yield self.collate_fn(getitems(indices) if getitems else
                                      [self.dataset[i] for i in indices])
        else:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):   # (a stream with a __len__, as torch)
            return len(self.dataset if self._stream_batches is None else self._stream_batches)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

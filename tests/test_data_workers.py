"""DataLoader with num_workers > 0 (layers.data_workers) against torch's: the same batches in the
same order as without workers, made in other processes; worker_init_fn and get_worker_info; an
IterableDataset read by every worker, its batches taken in turn (torch's order, its sharding
recipe); a worker's exception raised here, naming it; the timeout; persistent workers kept
between epochs (and an epoch left unfinished not leaking into the next)."""
import os
import time

import numpy as np
import pytest
import torch
import torch.utils.data as TD

import layers as L
from layers import data as LD


class Numbers(LD.Dataset):
    """i -> (i, the pid of the process that read it, its worker id or -1)."""

    def __init__(self, n, fail_at=None, sleep=0.0):
        self.n, self.fail_at, self.sleep = n, fail_at, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"no item {i}")
        time.sleep(self.sleep)
        info = LD.get_worker_info()
        return np.array([i, os.getpid(), -1 if info is None else info.id])


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("shuffle,drop_last", [(False, False), (True, True)])
def test_batches_are_those_without_workers_made_in_the_workers(workers, shuffle, drop_last):
    got = []
    for n in (0, workers):
        L.manual_seed(5)
        loader = LD.DataLoader(Numbers(23), batch_size=4, shuffle=shuffle, drop_last=drop_last,
                               num_workers=n)
        got.append([b.numpy() for b in loader])
    (plain, threaded) = got
    assert len(plain) == len(threaded) == len(loader)
    for a, b in zip(plain, threaded):
        np.testing.assert_array_equal(a[:, 0], b[:, 0])
    pids = {int(p) for b in threaded for p in b[:, 1]}
    ids = {int(i) for b in threaded for i in b[:, 2]}
    assert os.getpid() not in pids and len(pids) == workers and ids == set(range(workers))
    assert LD.get_worker_info() is None


def test_worker_init_fn_runs_once_in_each_worker_with_its_seed(tmp_path):
    def init(worker_id):            # (the worker's host generator is seeded with its seed)
        info = LD.get_worker_info()
        assert L.initial_seed() == info.seed
        (tmp_path / f"w{worker_id}").write_text(f"{info.id} {info.num_workers} {info.seed}")
    L.manual_seed(0)
    list(LD.DataLoader(Numbers(10), batch_size=2, num_workers=3, worker_init_fn=init))
    seen = sorted(p.read_text().split() for p in tmp_path.iterdir())
    assert [s[:2] for s in seen] == [["0", "3"], ["1", "3"], ["2", "3"]]
    seeds = [int(s[2]) for s in seen]
    assert seeds[1] == seeds[0] + 1 and seeds[2] == seeds[0] + 2      # (base seed + id)


def _stream(lib):
    class Stream(lib.utils.data.IterableDataset):
        """torch's sharding recipe: each worker reads its own part of range(3, 20)."""

        def __iter__(self):
            info = lib.utils.data.get_worker_info()
            if info is None:
                return iter(range(3, 20))
            per = -(-17 // info.num_workers)
            start = 3 + info.id * per
            return iter(range(start, min(start + per, 20)))

    class Copy(lib.utils.data.IterableDataset):
        """No sharding: each worker reads it all."""

        def __iter__(self):
            return iter(range(5))
    return Stream(), Copy()


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("batch_size,drop_last", [(None, False), (2, False), (3, True)])
def test_an_iterable_dataset_is_read_by_every_worker_in_torchs_order(workers, batch_size,
                                                                     drop_last):
    for ours, theirs in zip(_stream(L), _stream(torch)):
        kw = dict(batch_size=batch_size, drop_last=drop_last, num_workers=workers)
        got = [b.tolist() if isinstance(b, L.Tensor) else b for b in LD.DataLoader(ours, **kw)]
        want = [b.tolist() if isinstance(b, torch.Tensor) else b
                for b in TD.DataLoader(theirs, **kw)]
        assert got == want


def test_a_workers_exception_is_raised_here_naming_the_worker():
    loader = LD.DataLoader(Numbers(12, fail_at=7), batch_size=2, num_workers=2)
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process 1"):
        list(loader)


def test_a_batch_slower_than_the_timeout_is_refused():
    loader = LD.DataLoader(Numbers(4, sleep=3.0), batch_size=2, num_workers=1, timeout=0.5)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.5 seconds"):
        list(loader)
    assert time.perf_counter() - t0 < 2.5


def test_persistent_workers_are_kept_between_epochs_and_an_unfinished_epoch_is_left_behind():
    def pids(loader, stop=None):
        out = []
        for k, b in enumerate(loader):
            out.append(b.numpy())
            if k == stop:
                break
        return out
    kept = LD.DataLoader(Numbers(16), batch_size=2, num_workers=2, persistent_workers=True,
                         shuffle=True)
    first = pids(kept, stop=1)                      # (an epoch left after 2 of 8 batches)
    second = pids(kept)
    assert sorted(i for b in second for i in b[:, 0].tolist()) == list(range(16))
    assert {int(p) for b in first + second for p in b[:, 1]} == \
        {int(p) for b in second for p in b[:, 1]}          # (the same two processes)
    fresh = LD.DataLoader(Numbers(16), batch_size=2, num_workers=2)
    a, b = pids(fresh), pids(fresh)
    assert not {int(p) for x in a for p in x[:, 1]} & {int(p) for x in b for p in x[:, 1]}

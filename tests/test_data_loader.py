"""layers.utils.data against torch.utils.data: the same indices give the same batches -- values,
dtypes, shapes and container types (default_collate's rules) --, the samplers' lengths and
orders where they are not random (and, where they are, each pass a permutation of one seeded
order), random_split's sizes, ConcatDataset / Subset indexing, IterableDataset batching and
chaining, batches fetched by one __getitems__ call, the option errors torch gives, and the
batches torch's collation refuses (dispatching, as torch's, on the first element's type)."""
import collections
import contextlib

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import layers as L
import layers.utils.data as lud
from layers.utils.data import DataLoader, TensorDataset

Point = collections.namedtuple("Point", "x label")


class Samples:
    """A map-style dataset of each kind default_collate takes; `lib` picks its base class."""

    def __init__(self, lib, kind, n=7):
        self.lib, self.kind, self.n = lib, kind, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        a = rng.standard_normal((2, 3)).astype(np.float32)
        tensor = (torch.tensor if self.lib is torch else L.tensor)(a)
        return {"tensor": tensor, "numpy": a, "float": float(a[0, 0]), "int": i, "bool": i % 2 == 0,
                "numpy scalar": np.float32(a[1, 1]), "string": f"s{i}",
                "tuple": (i, f"t{i}"), "list": [i, float(i) / 2],
                "dict": {"k": tensor, "name": f"n{i}"}, "namedtuple": Point(a, i),
                "ordered dict": collections.OrderedDict(b=i, a=tensor)}[self.kind]


KINDS = ["tensor", "numpy", "float", "int", "bool", "numpy scalar", "string", "tuple", "list",
         "dict", "namedtuple", "ordered dict"]


def _same(ours, theirs, where=""):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, L.Tensor), where
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", ""), where
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=where)
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs), where
        for k in theirs:
            _same(ours[k], theirs[k], f"{where}[{k!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), (where, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_batches_of_each_kind_are_torchs(kind, drop_last):
    order = [4, 0, 6, 2, 1, 5, 3]                    # (the same sampler for both)
    ours = list(DataLoader(Samples(L, kind), batch_size=3, sampler=order, drop_last=drop_last))
    theirs = list(tud.DataLoader(Samples(torch, kind), batch_size=3, sampler=order,
                                 drop_last=drop_last))
    assert len(ours) == len(theirs) == (2 if drop_last else 3)
    _same(ours, theirs)


@pytest.mark.parametrize("kind", KINDS)
def test_unbatched_loading_converts_as_torchs(kind):
    _same(list(DataLoader(Samples(L, kind), batch_size=None)),
          list(tud.DataLoader(Samples(torch, kind), batch_size=None)))


def test_tensor_dataset_and_lengths_are_torchs():
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    ds, tds = TensorDataset(L.tensor(x), L.tensor(y)), tud.TensorDataset(torch.tensor(x),
                                                                          torch.tensor(y))
    for kw in (dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=10),
               dict(batch_size=1), dict(batch_size=3, shuffle=False)):
        assert len(DataLoader(ds, **kw)) == len(tud.DataLoader(tds, **kw)), kw
        _same(list(DataLoader(ds, **kw)), list(tud.DataLoader(tds, **kw)), str(kw))
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(L.zeros(3), L.zeros(4))


def test_shuffling_is_a_new_permutation_each_pass_and_seeded():
    ds = TensorDataset(L.arange(50))
    L.manual_seed(0)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    passes = [np.concatenate([b.numpy() for b, in loader]) for _ in range(3)]
    for p in passes:
        assert sorted(p.tolist()) == list(range(50))
    assert not np.array_equal(passes[0], passes[1])
    L.manual_seed(0)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b, in loader]), passes[0])
    rng = lambda: np.random.default_rng(5)                            # noqa: E731
    a = [b.numpy() for b, in DataLoader(ds, batch_size=8, shuffle=True, generator=rng())]
    b = [b.numpy() for b, in DataLoader(ds, batch_size=8, shuffle=True, generator=rng())]
    np.testing.assert_array_equal(np.concatenate(a), np.concatenate(b))
    with pytest.raises(TypeError, match="generator= takes an L.Generator or a "
                                        "numpy.random.Generator"):
        list(DataLoader(ds, shuffle=True, generator=torch.Generator()))
    g = lambda: L.Generator().manual_seed(5)                          # noqa: E731
    a = [b.numpy() for b, in DataLoader(ds, batch_size=8, shuffle=True, generator=g())]
    b = [b.numpy() for b, in DataLoader(ds, batch_size=8, shuffle=True, generator=g())]
    np.testing.assert_array_equal(np.concatenate(a), np.concatenate(b))
    assert sorted(np.concatenate(a).tolist()) == list(range(50))


def test_random_sampler_with_replacement_and_num_samples():
    ds = list(range(5))
    for kw in (dict(replacement=True, num_samples=12), dict(num_samples=12), dict()):
        ours, theirs = lud.RandomSampler(ds, **kw), tud.RandomSampler(ds, **kw)
        drawn = list(ours)
        assert len(drawn) == len(ours) == len(theirs) == len(list(theirs))
        assert set(drawn) <= set(ds)
        if not kw.get("replacement"):           # whole permutations, then part of one
            for start in range(0, len(drawn) - len(ds) + 1, len(ds)):
                assert sorted(drawn[start:start + len(ds)]) == ds
    with pytest.raises(ValueError, match="num_samples should be a positive integer value, but "
                                         "got num_samples=0"):
        lud.RandomSampler(ds, num_samples=0)


def test_batch_sampler_and_subset_random_sampler():
    for n, bs, drop in ((10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False)):
        ours = list(lud.BatchSampler(range(n), bs, drop))
        assert ours == list(tud.BatchSampler(range(n), bs, drop))
        assert len(lud.BatchSampler(range(n), bs, drop)) == len(ours)
    got = list(lud.SubsetRandomSampler([3, 7, 9, 11]))
    assert sorted(got) == [3, 7, 9, 11]
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        lud.BatchSampler(range(3), 0, False)


@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.7], [0.5, 0.25, 0.25], [0.34, 0.33, 0.33],
                                     [1.0, 0.0]])
def test_random_split_sizes_are_torchs(lengths):
    ds = list(range(10))
    warns = (lambda: pytest.warns(UserWarning, match="Length of split at index 1 is 0")) \
        if 0.0 in lengths else contextlib.nullcontext
    with warns():
        ours = lud.random_split(ds, lengths)
    with warns():
        theirs = tud.random_split(ds, lengths)
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    flat = [ds_i for s in ours for ds_i in (s[i] for i in range(len(s)))]
    assert sorted(flat) == ds
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length"):
        lud.random_split(ds, [3, 3])


def test_concat_and_subset_index_as_torchs():
    a, b = list(range(3)), list(range(10, 15))
    ours = lud.ConcatDataset([_Listed(a), _Listed(b)])
    theirs = tud.ConcatDataset([a, b])
    assert len(ours) == len(theirs)
    for i in list(range(len(theirs))) + [-1, -8]:
        assert ours[i] == theirs[i], i
    assert (_Listed(a) + _Listed(b))[4] == 11
    sub = lud.Subset(_Listed(b), [4, 0, 2])
    assert [sub[i] for i in range(3)] == [14, 10, 12] and len(sub) == 3


class _Listed(lud.Dataset):
    def __init__(self, items):
        self.items = items

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)


@pytest.mark.parametrize("batch_size,drop_last", [(3, False), (3, True), (None, False)])
def test_an_iterable_dataset_is_batched_as_it_streams_as_torchs(batch_size, drop_last):
    def stream(lib):
        base = lud.IterableDataset if lib is L else tud.IterableDataset

        class Stream(base):
            def __iter__(self):
                return iter([{"i": i, "x": np.full(2, i, np.float32)} for i in range(8)])
        return Stream()
    _same(list(DataLoader(stream(L), batch_size=batch_size, drop_last=drop_last)),
          list(tud.DataLoader(stream(torch), batch_size=batch_size, drop_last=drop_last)))
    with pytest.raises(ValueError, match="expected unspecified shuffle option, but got "
                                         "shuffle=True"):
        DataLoader(stream(L), shuffle=True)


def test_option_errors_are_torchs():
    ds = list(range(4))
    cases = [dict(sampler=[0, 1], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_sampler=[[0]], drop_last=True), dict(batch_size=None, drop_last=True),
             dict(num_workers=-1), dict(persistent_workers=True), dict(prefetch_factor=2),
             dict(num_workers=2, prefetch_factor=-1)]
    for kw in cases:
        with pytest.raises(ValueError) as ours:
            DataLoader(ds, **kw)
        with pytest.raises(ValueError) as theirs:
            tud.DataLoader(ds, **kw)
        assert str(ours.value) == str(theirs.value), kw


def test_workers_and_pinned_memory_are_taken_and_give_the_same_batches():
    ds = TensorDataset(L.arange(6.0))
    plain = [b.numpy() for b, in DataLoader(ds, batch_size=4)]
    taken = [b.numpy() for b, in DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True,
                                            persistent_workers=True, prefetch_factor=2)]
    for a, b in zip(plain, taken):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch", [[1, 2.5], [True, 2], [2.5, 1], [0, 0.7, 1, 1.5], [True, False],
                                   [np.ones(2, np.int64), np.ones(2, np.float32)],
                                   [np.uint8(3), np.float16(0.5)]], ids=str)
def test_numbers_collate_as_torch_infers_them_over_the_whole_batch(batch):
    """The first element does not decide the dtype: [0, 0.7] is a float batch (a regression
    target of 0 then 0.7 kept its 0.7), NumPy arrays promoted by torch's rule."""
    _same(lud.default_collate(batch), tud.default_collate(batch))


def test_default_convert_keeps_a_mappings_type_as_torchs():
    d = collections.defaultdict(list, x=np.ones(2))
    ours, theirs = lud.default_convert(d), tud.default_convert(d)
    assert type(ours) is type(theirs) and ours.default_factory is list
    _same(dict(ours), dict(theirs))


# batches torch's collation refuses, made per library (some hold tensors)
REFUSED_BATCHES = {
    "int_above_int64": lambda m: [2 ** 63, 1],
    "string_among_ints": lambda m: [1, "a"],
    "string_among_floats": lambda m: [1.5, "a"],
    "array_after_tensor": lambda m: [m.tensor([1.0, 2.0]), np.ones(2)],
    "list_after_tensor": lambda m: [m.tensor([1.0, 2.0]), [1.0, 2.0]],
    "numpy_dates": lambda m: [np.datetime64("2020-01-01")] * 2,
    "numpy_void": lambda m: [np.void(b"a")] * 2,
    "array_of_dates_after_floats": lambda m: [np.ones(1), np.array([np.datetime64("2020-01-01")])],
    "array_of_strings_after_floats": lambda m: [np.ones(1), np.array(["a"])],
}


@pytest.mark.parametrize("case", list(REFUSED_BATCHES))
def test_collation_refuses_what_torchs_refuses_with_its_kind_of_error(case):
    with pytest.raises(Exception) as theirs:
        tud.default_collate(REFUSED_BATCHES[case](torch))
    with pytest.raises(theirs.type):
        lud.default_collate(REFUSED_BATCHES[case](L))


@pytest.mark.parametrize("batch", [[np.int32(1), 2.5], [np.float64(1), 2],
                                   [np.int8(1), np.uint8(1)], [np.float32(1), True],
                                   [np.ones(2, np.float32), [1.5, 2.0]], [np.str_("a"), "b"],
                                   [np.bytes_(b"a")] * 2], ids=str)
def test_collation_dispatches_on_the_first_elements_type_as_torchs(batch):
    """NumPy scalars: one tensor of the batch, torch.tensor's dtype over it (a Python float
    among them is the default dtype); arrays: each as torch.as_tensor makes it, then stacked;
    NumPy strings as they are."""
    _same(lud.default_collate(batch), tud.default_collate(batch))


@pytest.mark.parametrize("sample", [np.datetime64("2020-01-01"), np.bytes_(b"a"), np.uint64(3),
                                    np.array([np.datetime64("2020-01-01")])], ids=repr)
def test_default_convert_refuses_what_torchs_refuses(sample):
    with pytest.raises(Exception) as theirs:
        tud.default_convert(sample)
    with pytest.raises(theirs.type):
        lud.default_convert(sample)
    for kept in (np.str_("a"), np.array(["a"]), np.array([b"a"])):
        assert lud.default_convert(kept) is kept and tud.default_convert(kept) is kept


def test_iterable_datasets_add_up_to_a_chain_as_torchs():
    def stream(lib, items):
        class Stream(lib.IterableDataset):
            def __iter__(self):
                return iter(items)

            def __len__(self):
                return len(items)
        return Stream()
    ours, theirs = stream(lud, [0, 1]) + stream(lud, [5]), stream(tud, [0, 1]) + stream(tud, [5])
    assert isinstance(ours, lud.ChainDataset) and isinstance(theirs, tud.ChainDataset)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
    assert list(ours + stream(lud, [7])) == list(theirs + stream(tud, [7]))
    _same(list(DataLoader(ours, batch_size=2)), list(tud.DataLoader(theirs, batch_size=2)))


def test_a_dataset_with_getitems_gives_each_batch_from_one_call_as_torchs():
    def dataset(lib, calls):
        class Batched(lib.Dataset):
            def __len__(self):
                return 5

            def __getitem__(self, i):
                return float(i)

            def __getitems__(self, indices):
                calls.append(list(indices))
                return [float(10 * i) for i in indices]
        return Batched()
    ours_calls, their_calls = [], []
    ours = list(DataLoader(dataset(lud, ours_calls), batch_size=2))
    theirs = list(tud.DataLoader(dataset(tud, their_calls), batch_size=2))
    _same(ours, theirs)
    assert ours_calls == their_calls == [[0, 1], [2, 3], [4]]
    sub = lud.Subset(dataset(lud, ours_calls), [4, 0, 2])
    tsub = tud.Subset(dataset(tud, their_calls), [4, 0, 2])
    assert sub.__getitems__([0, 2]) == tsub.__getitems__([0, 2])
    assert ours_calls[-1] == their_calls[-1] == [4, 2]
    plain, tplain = lud.Subset(_Listed([3, 4, 5]), [2, 0]), tud.Subset([3, 4, 5], [2, 0])
    assert plain.__getitems__([0, 1]) == tplain.__getitems__([0, 1])

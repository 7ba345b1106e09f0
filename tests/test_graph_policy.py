"""Which captured graphs a CapturedStep keeps (layers.graph.evict): the most recently used, at
most max_graphs of them and max_bytes of pool memory in all, never fewer than the newest one."""
from collections import OrderedDict

from layers.graph import evict


def _graphs(*sizes):
    return OrderedDict((f"shape{k}", size) for k, size in enumerate(sizes))


def test_the_count_limit_drops_the_least_recently_used():
    g = _graphs(1, 1, 1, 1)
    evict(g, 2, None, lambda size: size)
    assert list(g) == ["shape2", "shape3"]


def test_the_byte_budget_drops_old_graphs_until_the_rest_fit():
    g = _graphs(4, 3, 2, 5)                  # 14 bytes in all
    evict(g, 8, 8, lambda size: size)
    assert list(g) == ["shape2", "shape3"]   # 2 + 5 = 7 <= 8; 3 + 2 + 5 = 10 was not


def test_the_newest_graph_stays_even_over_budget():
    g = _graphs(4, 9)
    evict(g, 8, 5, lambda size: size)
    assert list(g) == ["shape1"]


def test_within_both_limits_nothing_is_dropped():
    g = _graphs(1, 2, 3)
    evict(g, 3, 6, lambda size: size)
    assert list(g) == ["shape0", "shape1", "shape2"]


class _Stream:
    def wait_event(self, event):
        pass

    def record(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Graph:
    def __init__(self):
        self.launches = 0

    def launch(self, stream):
        self.launches += 1


class _Pool:
    def __init__(self, size):
        self.size = size

    def total_bytes(self):
        return self.size


class _Step(__import__("layers").graph.CapturedStep):
    """CapturedStep's own bookkeeping (warm-up, keys, eviction, replay), with the capture itself
    stood in for: fn runs once 'into' a graph whose pool holds `pool_bytes`."""
    pool_bytes = 10

    def _capture(self, arrays, inputs, host):
        return _Graph(), [], self.fn(*inputs, **host), (_Pool(self.pool_bytes), None, None)


def _fake_cupy(monkeypatch):
    from types import SimpleNamespace
    from layers import graph
    freed = []
    fake = SimpleNamespace(cuda=SimpleNamespace(Stream=lambda non_blocking: _Stream(),
                                                get_current_stream=_Stream),
                           get_default_memory_pool=lambda: SimpleNamespace(
                               free_all_blocks=lambda: freed.append(1)))
    monkeypatch.setattr(graph, "cupy", lambda: fake)
    return freed


def test_a_step_with_no_inputs_warms_up_captures_and_replays(monkeypatch):
    _fake_cupy(monkeypatch)
    calls = []
    step = _Step(lambda: calls.append(1) or "out", max_bytes=100)
    assert [step(), step(), step(), step()] == ["out"] * 4
    assert len(calls) == 2                        # the warm-up, then the capture
    (graph, *_), = step._graphs.values()
    assert graph.launches == 3                    # call 2 (a capture runs nothing), 3 and 4


def test_graphs_over_the_byte_budget_are_dropped_oldest_first(monkeypatch):
    _fake_cupy(monkeypatch)
    step = _Step(lambda shape: shape, warmup=0, max_bytes=25)     # 10 bytes a graph
    for shape in (1, 2, 3):
        step(shape=shape)
    assert [dict(key[5])["shape"] for key in step._graphs] == [2, 3]


def test_a_part_frozen_between_calls_is_captured_anew_not_replayed(monkeypatch):
    """A parameter's requires_grad decides which gradient kernels the step runs and writes: a
    model frozen after its step was captured must not replay the graph that still computes (and
    an optimizer would still apply) the frozen weights' gradients."""
    import layers as L
    _fake_cupy(monkeypatch)
    net, calls = L.nn.Linear(2, 2), []
    step = _Step(lambda: calls.append(net.weight.requires_grad) or "out", modules=(net,),
                 max_bytes=100)
    step(), step(), step()                      # warm-up, capture, replay
    net.weight.requires_grad_(False)
    step(), step()
    net.weight.requires_grad_(True)
    step()
    assert calls == [True, True, False, False] and len(step._graphs) == 2
    frozen, trained = (g for g, *_ in step._graphs.values())      # (most recently used last)
    assert (frozen.launches, trained.launches) == (1, 3)   # unfrozen again: the first replayed


def test_a_parameter_only_an_optimizer_holds_is_in_the_key_too(monkeypatch):
    """Parameters reach a step through its optimizers as well as its modules: freezing one that
    no module given holds must not replay the graph that still updates it."""
    import layers as L
    _fake_cupy(monkeypatch)
    w = L.nn.Parameter(L.zeros(2).data)
    opt, calls = L.optim.SGD([w], lr=0.1), []
    step = _Step(lambda: calls.append(w.requires_grad) or "out", optimizers=(opt,),
                 max_bytes=100)
    step(), step(), step()                      # warm-up, capture, replay
    w.requires_grad_(False)
    step(), step()
    assert calls == [True, True, False, False] and len(step._graphs) == 2
    # and a graph keeps the parameter's array alive, as it keeps a module's
    from types import SimpleNamespace
    from layers import random
    monkeypatch.setattr(random, "device_generator", lambda: SimpleNamespace(state="rng"))
    assert any(a is w.data for a in step._owned())


class OutOfMemoryError(Exception):
    """(named as CuPy's, which is what CapturedStep looks for)"""


def test_a_capture_that_runs_out_of_memory_drops_the_other_graphs_and_retries(monkeypatch):
    freed = _fake_cupy(monkeypatch)

    class Step(_Step):
        fail = 0

        def _capture(self, arrays, inputs, host):
            if self.fail:
                self.fail -= 1
                raise RuntimeError("CapturedStep: ...") from OutOfMemoryError("out of memory")
            return super()._capture(arrays, inputs, host)

    step = Step(lambda shape: shape, warmup=0, max_bytes=100)
    step(shape=1), step(shape=2)
    step.fail = 1
    assert step(shape=3) == 3                      # shape 2's graph, the last replayed, stays
    assert [dict(key[5])["shape"] for key in step._graphs] == [2, 3] and freed == [1]
    step.fail = 2                                  # out of memory with the room made: an error
    try:
        step(shape=4)
    except RuntimeError as e:
        assert type(e.__cause__) is OutOfMemoryError
    else:
        raise AssertionError("no error")
    class Failing(_Step):                          # any other failure is not retried
        tries = 0

        def _capture(self, arrays, inputs, host):
            self.tries += 1
            raise RuntimeError("CapturedStep: ...") from ValueError("a host read")

    other = Failing(lambda: 1, warmup=0)
    try:
        other()
    except RuntimeError as e:
        assert type(e.__cause__) is ValueError and other.tries == 1
    else:
        raise AssertionError("no error")


def test_a_captures_pool_never_hands_its_blocks_back_while_the_graph_lives():
    """CuPy's pool frees its cached blocks when a cudaMalloc fails and tries again; during a
    capture those blocks are addressed by kernels already captured. The capture's allocator
    keeps every block it made (in the graph's entry), so dropping them from the pool frees
    nothing."""
    import weakref
    from types import SimpleNamespace
    from layers.graph import keeping_allocator

    class Memory:
        def __init__(self, size):
            self.size = size

    cp = SimpleNamespace(cuda=SimpleNamespace(Memory=Memory, MemoryPointer=lambda mem, off: (mem, off)))
    malloc, blocks = keeping_allocator(cp)
    alive = [weakref.ref(malloc(n)[0]) for n in (512, 1024)]   # the pool's pointers dropped
    assert [b.size for b in blocks] == [512, 1024] and all(r() is not None for r in alive)


def test_static_inputs_and_first_gradients_keep_a_channels_last_layout_with_one_channel():
    """(copy(order='K') makes a C = 1 channels-last array C-ordered: its strides fit both.)"""
    import numpy as np
    import layers as L
    from layers.backend import is_channels_last
    from layers.backend import copy_like
    conv = L.nn.Conv2d(1, 4, 3).to(memory_format="channels_last")
    x = L.tensor(np.ones((2, 5, 5, 1), np.float32)).data.transpose(0, 3, 1, 2)
    assert is_channels_last(x) and is_channels_last(copy_like(x, x))
    L.functional.sum(conv(L.Tensor(x))).backward()
    assert is_channels_last(conv.weight.grad.data)


def test_an_open_finite_checks_queue_is_launched_on_the_right_side_of_each_capture_edge(
        monkeypatch):
    """A step captured inside an open `with check:`: what the check queued eagerly before the
    capture is launched before it begins (inside, every replay would read arrays the graph does
    not own), and what the step queued is launched before the capture ends (after it, the
    checks would run once, eagerly, and never on a replay). The real _capture, its CuPy stood
    in for by one that logs the stream's capture edges."""
    import contextlib
    from types import SimpleNamespace
    from layers import finite, graph
    log = []

    class Stream(_Stream):
        def synchronize(self):
            pass

        def begin_capture(self):
            log.append("begin")

        def end_capture(self):
            log.append("end")
            return _Graph()

    class Pool:
        def __init__(self, malloc):
            self.malloc = malloc

    fake = SimpleNamespace(cuda=SimpleNamespace(
        Stream=lambda non_blocking: Stream(), get_current_stream=Stream, MemoryPool=Pool,
        using_allocator=lambda malloc: contextlib.nullcontext()))
    monkeypatch.setattr(graph, "cupy", lambda: fake)

    class Check:                    # a FiniteCheck's queue, as flush() sees it
        queue = []

        def flush(self):
            log.append(("flush", self.queue))
            self.queue = []

    check = Check()
    check.queue = ["eager"]
    monkeypatch.setattr(finite.active, "check", check)

    def fn():
        log.append("fn")
        check.queue = ["step"]
        return "out"

    step = graph.CapturedStep(fn, warmup=0, max_bytes=None)
    monkeypatch.setattr(step, "_owned", lambda: [])
    assert step() == "out"
    assert log == [("flush", ["eager"]), "begin", "fn", ("flush", ["step"]), "end"]

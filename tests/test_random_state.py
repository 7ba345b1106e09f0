"""The generators' states as torch spells them: L.get_rng_state / set_rng_state (the host
generator's state as a uint8 Tensor), initial_seed / seed, L.cuda.get_rng_state /
set_rng_state / manual_seed / manual_seed_all (the device generators) and L.random.fork_rng:
a state put back draws the same numbers again (on the CPU, and the device generators on the
host GPU path and a GPU); seeds read as torch reads them."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F

DEVICES = [pytest.param(0, marks=pytest.mark.gpu), "host"]     # (conftest's `where`)


def draws(device="cpu"):
    """Numbers from each kind of draw the generator serves (of `device`)."""
    out = [L.rand(5), L.randn(4), L.randint(0, 100, (6,)), L.randperm(7), L.init.normal_(
        L.empty(3)), F.dropout(L.ones(50), 0.5, training=True)]
    if device != "cpu":
        out += [F.dropout(L.ones(50, device=device), 0.5, training=True), L.rand(5, device=device),
                L.randn(4, device=device)]
    return [np.asarray(t.numpy(), np.float64) for t in out]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_host_state_put_back_draws_the_same_numbers():
    L.manual_seed(5)
    L.random.host_generator().integers(0, 9, 3, dtype=np.uint32)   # (PCG64 keeps half a draw)
    state = L.get_rng_state()
    assert state.dtype == np.uint8 and state.shape == (45,) and state.device == "cpu"
    first = draws()
    assert not same(first, draws())
    L.set_rng_state(state)
    assert same(draws(), first)
    L.set_rng_state(state.numpy())                  # (an array of the same bytes too)
    assert same(draws(), first)
    for bad in (state[:44], state.astype(L.int64), L.zeros(45)):
        with pytest.raises(RuntimeError, match="set_rng_state: expected the uint8 Tensor of 45 "
                                               "bytes that get_rng_state gives"):
            L.set_rng_state(bad)


def test_seeds_as_torchs():
    L.manual_seed(7)
    assert L.initial_seed() == 7
    after_seven = draws()
    s = L.seed()
    assert isinstance(s, int) and 0 <= s < 2 ** 63 and L.initial_seed() == s
    from_seed = draws()
    L.manual_seed(s)
    assert same(draws(), from_seed) and not same(from_seed, after_seven)
    s2 = L.seed()
    assert s2 != s
    for seed in (-1, 2 ** 63, 2 ** 64 - 1, -2 ** 63, 1.5, "3", True, 2 ** 64, -2 ** 63 - 1):
        try:
            torch.manual_seed(seed)
        except ValueError as e:
            with pytest.raises(ValueError, match=str(e)):
                L.manual_seed(seed)
            continue
        L.manual_seed(seed)
        assert L.initial_seed() == torch.initial_seed(), seed


@pytest.mark.parametrize("device", DEVICES)
def test_a_seed_at_the_top_of_the_range_seeds_the_devices_too(where):
    L.manual_seed(-1)                     # (2**64 - 1: device 0's generator wraps to 0)
    assert list(L.cuda.get_rng_state().numpy().view("<u8")) == [2 ** 64 - 1, 0]   # (the seed)
    assert [int(v) for v in L.random.device_generator().get_state()] == [0, 0]
    a = draws(where)
    L.manual_seed(2 ** 64 - 1)
    assert same(draws(where), a)


@pytest.mark.parametrize("device", DEVICES)
def test_device_states_put_back_and_fork_rng_keeps_every_generator(where):
    L.manual_seed(11)
    host, dev = L.get_rng_state(), L.cuda.get_rng_state()
    assert dev.dtype == np.uint8 and dev.shape == (16,) and dev.device == "cpu"
    first = draws(where)
    L.set_rng_state(host)
    L.cuda.set_rng_state(dev, where)
    assert same(draws(where), first)
    L.set_rng_state(host)
    L.cuda.set_rng_state(dev)
    with L.random.fork_rng():
        inside = draws(where)
    assert same(inside, first) and same(draws(where), first)     # (the block drew nothing)
    with L.random.fork_rng(enabled=False):
        draws(where)
    assert not same(draws(where), first)
    with pytest.raises(RuntimeError, match="cuda.set_rng_state: expected the uint8 Tensor of "
                                           "16 bytes"):
        L.cuda.set_rng_state(host)


@pytest.mark.parametrize("device", DEVICES)
def test_cuda_manual_seed_seeds_the_device_generators_only(where, monkeypatch):
    L.manual_seed(3)
    host = L.get_rng_state()
    L.cuda.manual_seed(8)
    a = draws(where)
    L.set_rng_state(host)
    L.cuda.manual_seed_all(8)
    assert same(draws(where), a)
    L.set_rng_state(host)
    monkeypatch.setattr(L.random, "_devices", {})
    L.cuda.manual_seed_all(8)            # (no generator yet: the one made next starts from 8)
    assert same(draws(where), a)
    assert np.array_equal(L.get_rng_state().numpy(), host.numpy()) is False   # (host drew)
    L.set_rng_state(host)
    L.cuda.manual_seed(9)
    assert not same(draws(where), a)


def test_a_generator_object_is_a_stream_of_its_own_as_torchs():
    """L.Generator: torch's default seed, manual_seed returning it, get_state / set_state; the
    draws that take generator= come from it and leave manual_seed's generator alone."""
    g, tg = L.Generator(), torch.Generator()
    assert g.initial_seed() == tg.initial_seed() and g.device == "cpu"
    assert g.manual_seed(9) is g and g.initial_seed() == 9
    L.manual_seed(4)
    host = L.get_rng_state()

    def with_g():
        return [np.asarray(t.numpy(), np.float64) for t in (
            L.rand(3, generator=g), L.randn(2, generator=g), L.randint(0, 50, (4,), generator=g),
            L.randperm(6, generator=g), L.multinomial(L.ones(5), 3, generator=g))]
    state = g.get_state()
    first = with_g()
    assert np.array_equal(L.get_rng_state().numpy(), host.numpy())   # (manual_seed's: unmoved)
    assert not same(with_g(), first)
    assert g.set_state(state) is g and same(with_g(), first)
    g.manual_seed(9)
    assert same(with_g(), first)
    s = g.seed()
    assert g.initial_seed() == s and not same(with_g(), first)
    with pytest.raises(TypeError, match="generator= takes an L.Generator"):
        L.rand(2, generator=np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="Generator.set_state: expected the uint8 Tensor"):
        g.set_state(L.zeros(3))


@pytest.mark.parametrize("device", DEVICES)
def test_a_gpu_generator_is_a_stream_of_its_own_on_its_device(where, device, monkeypatch):
    """L.Generator(device): torch's default seed; seeded s, it draws what the device's own
    generator draws after L.cuda.manual_seed(s), and leaves that generator where it was; a state
    put back draws the same numbers and brings its seed back; a draw on the host refuses it in
    torch's words (on a GPU, checked against torch's own), one made on the host and copied to
    the device names itself."""
    g = L.Generator(where)
    assert g.initial_seed() == torch.Generator().initial_seed() and g.device == where
    assert g.manual_seed(5) is g and repr(g) == "<layers.Generator on cuda:0, initial seed 5>"
    L.cuda.manual_seed(5)
    ours = [L.randn(4, generator=g, device=where), L.rand(3, generator=g, device=where)]
    default = [L.randn(4, device=where), L.rand(3, device=where)]
    assert same([t.numpy() for t in ours], [t.numpy() for t in default])
    device_state = L.cuda.get_rng_state(where).numpy()
    state = g.get_state()
    first = L.rand(6, generator=g, device=where).numpy()
    assert np.array_equal(L.cuda.get_rng_state(where).numpy(), device_state)    # (unmoved)
    assert not np.array_equal(L.rand(6, generator=g, device=where).numpy(), first)
    g.manual_seed(77)
    assert g.set_state(state) is g and g.initial_seed() == 5
    np.testing.assert_array_equal(L.rand(6, generator=g, device=where).numpy(), first)
    cpu_draw = "Expected a 'cpu' device type for generator but found 'cuda'"
    for draw in (lambda: L.randn(2, generator=g), lambda: L.randperm(3, generator=g),
                 lambda: L.init.normal_(L.empty(3), generator=g)):
        with pytest.raises(RuntimeError, match=cpu_draw):
            draw()
    with pytest.raises(RuntimeError, match="randint draws on the host"):
        L.randint(0, 5, (2,), generator=g, device=where)
    if torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=cpu_draw):
            torch.randn(2, generator=torch.Generator("cuda"))
    assert L.Generator("cuda").device == 0            # (as device="cuda": device 0)
    if device == "host":                              # (a second device: the host path's)
        monkeypatch.setattr(L.backend.cupy().cuda.runtime, "getDevice", lambda: 1)
        assert L.Generator("cuda").device == 0        # (whatever the current device)
        other = L.Generator("cuda:1")
        assert other.set_state(g.manual_seed(5).get_state()).initial_seed() == 5


@pytest.mark.parametrize("device", DEVICES)
def test_a_host_generator_is_refused_for_a_gpu_tensors_draws_as_torchs(where):
    g = L.Generator()
    for draw in (lambda: L.rand(2, generator=g, device=where),
                 lambda: L.randint(0, 5, (2,), generator=g, device=where),
                 lambda: L.randperm(4, generator=g, device=where),
                 lambda: L.multinomial(L.ones(3, device=where), 2, generator=g)):
        with pytest.raises(RuntimeError, match="Expected a 'cuda' device type for generator"):
            draw()


def test_a_state_put_back_brings_its_seed_back_as_torchs():
    """initial_seed() after set_rng_state / fork_rng / Generator.set_state is the seed of the
    state put back, as torch's; L.cuda.manual_seed with no device is ignored, as torch's."""
    for lib in (L, torch):
        lib.manual_seed(1)
        state = lib.get_rng_state()
        lib.manual_seed(7)
        lib.set_rng_state(state)
        assert lib.initial_seed() == 1
        with lib.random.fork_rng():
            lib.manual_seed(99)
        assert lib.initial_seed() == 1
        g = lib.Generator().manual_seed(3)
        state = g.get_state()
        g.manual_seed(8)
        g.set_state(state)
        assert g.initial_seed() == 3
    if not L.cuda.is_available():
        L.cuda.manual_seed(5)
        torch.cuda.manual_seed(5)


@pytest.mark.parametrize("device", DEVICES)
def test_fork_rng_brings_back_the_seed_of_device_generators_made_later(where, monkeypatch):
    L.manual_seed(2)
    monkeypatch.setattr(L.random, "_devices", {})     # (none made yet)
    with L.random.fork_rng():
        L.manual_seed(50)
    a = draws(where)
    L.manual_seed(2)
    monkeypatch.setattr(L.random, "_devices", {})
    assert same(draws(where), a)

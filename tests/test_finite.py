"""layers.finite.FiniteCheck names the first layer output or gradient of a step that is not
finite (against a layer-by-layer reference), and train.dcgan stops there with status 1 and the
last good checkpoint in place."""
import json
import numpy as np
import pytest

import layers as L
from layers import F, nn
from layers.finite import FiniteCheck
from test_cli import SMALL, run
from test_dcgan import write_idx
from train import dcgan

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")   # on purpose


class Root(nn.Module):
    """y = sqrt(w * x): finite at x = 0, but dy/dw = x / (2 sqrt(w x)) = 0/0 there."""

    def __init__(self):
        super().__init__()
        self.w = L.Parameter(np.ones(4, np.float32))

    def forward(self, x):
        return (x * self.w) ** 0.5


def mlp(seed):
    L.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def first_nonfinite_layer(model, x):
    """The reference: each layer run by hand, the first whose output has a NaN or inf."""
    for i, layer in enumerate(model):
        x = layer(x)
        if not np.isfinite(x.numpy()).all():
            return f"output of net.{i} ({type(layer).__name__})"
    return None


@pytest.mark.parametrize("layer", [0, 2, 4])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_first_nonfinite_output_matches_the_layer_by_layer_reference(layer, bad):
    model = mlp(layer)
    model[layer].weight.data[0, 0] = bad
    x = L.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    check = FiniteCheck({"net": model})
    with check:
        model(x)
    assert check.first() == first_nonfinite_layer(model, x) is not None


def test_a_finite_step_reports_none_and_each_step_starts_afresh():
    model = mlp(0)
    x = L.tensor(np.ones((3, 4), np.float32))
    check = FiniteCheck({"net": model})
    model[2].bias.data[1] = np.inf
    with check:
        model(x)
    assert check.first() == "output of net.2 (Linear)"
    model[2].bias.data[1] = 0
    with check:
        model(x)
    # the three Linear outputs: Tanh's and ReLU's inputs were checked, so their outputs are not
    assert check.first() is None and check.events == [
        f"output of net.{i} (Linear)" for i in (0, 2, 4)]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("activation", [nn.ReLU(), nn.LeakyReLU(0.2), nn.Tanh(), nn.Sigmoid()])
def test_an_activation_of_a_checked_input_is_not_checked_again_and_nothing_is_missed(bad,
                                                                                      activation):
    """The skipped re-check loses nothing: a non-finite value reaching or leaving the activation
    is reported at the layer before it, as the layer-by-layer reference says."""
    L.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), activation, nn.Linear(8, 2))
    x = L.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    check = FiniteCheck({"net": model})
    with check:
        model(x)
    assert check.first() is None and check.events == ["output of net.0 (Linear)",
                                                      "output of net.2 (Linear)"]
    model[0].bias.data[1] = bad
    with check:
        model(x)
    assert check.first() == first_nonfinite_layer(model, x) == "output of net.0 (Linear)"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_an_activation_is_checked_where_its_input_was_not(bad):
    """An activation on the model's own input (checked by nobody), one called with a Tensor a
    layer outside the watched models made, and a LeakyReLU steep enough to overflow are each
    checked."""
    L.manual_seed(2)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x[0, 1] = bad
    model = nn.Sequential(nn.ReLU(), nn.Linear(4, 2))
    check = FiniteCheck({"net": model})
    with check:
        model(L.tensor(x))
    assert check.first() == "output of net.0 (ReLU)" and len(check.events) == 2

    outside, act = nn.Linear(4, 4), nn.Tanh()
    with pytest.raises(ValueError, match="no parameters to say where they run; pass device="):
        FiniteCheck({"act": act})
    check = FiniteCheck({"act": act}, device="cpu")
    with check:
        act(outside(L.tensor(np.ones((2, 4), np.float32))))
    assert check.events == ["output of act (Tanh)"]

    steep = nn.Sequential(nn.Linear(4, 4), nn.LeakyReLU(1e38))
    steep[0].weight.data[...] = -1e3                   # finite, but -4e3 * 1e38 overflows
    check = FiniteCheck({"net": steep})
    with check:
        steep(L.tensor(np.ones((2, 4), np.float32)))
    assert check.first() == "output of net.1 (LeakyReLU)"


def test_nonfinite_gradient_with_finite_outputs():
    model = nn.Sequential(nn.Linear(4, 4), Root())
    model[0].weight.data[...] = 0                     # so Root sees x = 0
    model[0].bias.data[...] = 0
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    check = FiniteCheck({"net": model})
    with check:
        model(L.tensor(np.ones((2, 4), np.float32))).sum().backward()
        check.gradients(opt)
    assert check.first() == "gradient of net.1.w"


def test_only_the_watched_models_and_only_while_active():
    watched, other = mlp(0), mlp(1)
    other[0].weight.data[0, 0] = np.nan
    x = L.tensor(np.ones((3, 4), np.float32))
    check = FiniteCheck({"net": watched})
    watched(x)
    assert check.events == []
    with check:
        other(x)
    assert check.first() is None and check.events == []


def test_keep_first_keeps_the_earliest_step_until_reset():
    """For a loop that reads losses back every N steps: later steps, whose first non-finite
    output is an earlier layer, do not overwrite the step where it started."""
    model = mlp(0)
    x = L.tensor(np.ones((3, 4), np.float32))
    check = FiniteCheck({"net": model}, keep_first=True)
    with check:
        model(x)                                   # step 1: finite
    model[2].bias.data[1] = np.inf
    with check:
        model(x)                                   # step 2: net.2 first
    model[0].bias.data[0] = np.nan
    with check:
        model(x)                                   # step 3: net.0 first
    assert (check.first(), check.first_step()) == ("output of net.2 (Linear)", 2)
    check.reset()
    assert check.first() is None and check.first_step() is None
    with check:
        model(x)
    assert (check.first(), check.first_step()) == ("output of net.0 (Linear)", 1)


def test_device_stats_names_the_step_where_it_started():
    from train.common import DeviceStats
    model = mlp(0)
    x = L.tensor(np.ones((3, 4), np.float32))
    check = FiniteCheck({"net": model}, keep_first=True)
    stats = DeviceStats(["loss"], every=2, finite=check, start_step=10)
    rows = []
    for step in range(11, 15):
        if step == 13:
            model[2].bias.data[1] = np.nan
        with check:
            loss = model(x).sum()
        rows += stats.add(step, loss.data.reshape(1))
    assert [r["step"] for r in rows] == [11, 12, 13, 14] and stats.base == 12
    assert stats.where(13, "none") == "output of net.2 (Linear)"
    assert stats.where(14, "none") == "output of net.2 (Linear) in step 13"


# ---- train.dcgan ------------------------------------------------------------------------------

@pytest.mark.parametrize("every_call", [True, False])
def test_a_module_called_twice_is_checked_on_each_call_or_only_the_first(every_call):
    lin = nn.Linear(4, 2)
    check = FiniteCheck({"lin": lin}, every_call=every_call)
    ok = L.tensor(np.ones((1, 4), np.float32))
    bad = L.tensor(np.full((1, 4), np.nan, np.float32))
    with check:
        lin(ok)
        lin(bad)
    assert check.first() == ("output of lin (Linear)" if every_call else None)


def test_dcgan_names_the_layer_and_step_and_exits_1(tmp_path):
    D = dcgan.Discriminator(ndf=8)
    sd = D.state_dict()
    sd["main.2.weight"][0, 0, 0, 0] = np.nan
    L.save(sd, tmp_path / "netD.npz")
    outf = tmp_path / "out"
    r = run("train.dcgan", *SMALL, "--netD", str(tmp_path / "netD.npz"), "--outf", str(outf))
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        "error: step 1: errD is nan; first non-finite: output of netD.main.2 (Conv2d); "
        f"stopped before any checkpoint was written; a new run needs another --outf (or the "
        f"log files in {outf} removed)"]
    assert not (outf / "checkpoint.npz").exists()


def _poison_dcgan_step(monkeypatch, bad):
    """train.dcgan's step number `bad` (from 1) runs with a NaN in netD.main[2]'s weight."""
    steps, real_step = [], dcgan.train_step_device

    def poisoned(netG, netD, *rest):
        steps.append(len(steps) + 1)
        if len(steps) == bad:
            netD.main[2].weight.data[0, 0, 0, 0] = np.nan
        return real_step(netG, netD, *rest)
    monkeypatch.setattr(dcgan, "train_step_device", poisoned)


def test_dcgan_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    """Step 3 (the first of epoch 2) gets a NaN weight: the epoch-1 checkpoint stays as it was."""
    write_idx(str(tmp_path / "train-images-idx3-ubyte"),
              np.random.default_rng(0).integers(0, 256, (12, 28, 28), dtype=np.uint8))
    args = [*SMALL, "--dataset", "mnist", "--dataroot", str(tmp_path), "--epochs", "3"]
    assert dcgan.main([*args, "--epochs", "1", "--outf", str(tmp_path / "good")]) == 0
    _poison_dcgan_step(monkeypatch, 3)
    capsys.readouterr()
    assert dcgan.main([*args, "--outf", str(tmp_path / "bad")]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: step 3: errD is nan; first non-finite: output of netD.main.2 (Conv2d); "
        f"stopped with the last checkpoint in place (--resume {tmp_path / 'bad'}/checkpoint.npz "
        f"continues from it)")
    good, kept = L.load(tmp_path / "good" / "checkpoint.npz"), L.load(tmp_path / "bad" /
                                                                      "checkpoint.npz")
    assert list(good) == list(kept)
    for k in good:
        if k == "meta":                 # (the same but for the --epochs each run was started for)
            a, b = (json.loads(str(m[k])) for m in (good, kept))
            assert (a.pop("epochs"), b.pop("epochs")) == (1, 3) and a == b
            continue
        np.testing.assert_array_equal(good[k], kept[k], err_msg=k)
    assert not (tmp_path / "bad" / "netD_epoch_002.npz").exists()


def test_a_step_that_checks_nothing_keeps_the_last_steps_events(on_host):
    """A CUDA graph's replay runs no Python: the step's events stay those of the last step that
    checked (the capture's), which name what the replay's kernels find; the next step that
    checks starts its own list."""
    import host_kernels
    check = FiniteCheck({}, device=0)
    with check:
        check._check(host_kernels.host(np.ones(8, np.float32)), "t0")
    with check:                             # a replay
        check.first_event[...] = check.step * (1 << 32)     # (its kernel's finding: event 0)
    assert check.events == ["t0"] and check.first() == "t0"
    with check:
        check._check(host_kernels.host(np.ones(8, np.float32)), "u0")
    assert check.events == ["u0"] and check.first() is None


def test_dcgan_logs_the_finite_steps_read_back_with_the_bad_one(tmp_path, monkeypatch, capsys):
    """Losses are read back every --log-every steps: the finite steps of the window that holds
    the bad step are still logged, the bad one is not."""
    write_idx(str(tmp_path / "train-images-idx3-ubyte"),
              np.random.default_rng(0).integers(0, 256, (12, 28, 28), dtype=np.uint8))
    _poison_dcgan_step(monkeypatch, 2)
    out = tmp_path / "out"
    assert dcgan.main([*SMALL, "--dataset", "mnist", "--dataroot", str(tmp_path), "--outf",
                       str(out), "--log-every", "10"]) == 1
    assert capsys.readouterr().err.startswith("error: step 2: errD is nan")
    import csv
    assert [r["step"] for r in csv.DictReader(open(out / "losses.csv"))] == ["1"]


@pytest.mark.gpu
def test_gpu_check_in_a_captured_dcgan_step():
    """The device kernel, recorded into a CUDA graph: replays flag a weight poisoned in place."""
    L.manual_seed(0)
    G, D = dcgan.Generator(ngf=8).to(0), dcgan.Discriminator(ndf=8).to(0)
    oG, oD = dcgan.make_optimizers(G, D)
    check = FiniteCheck({"netG": G, "netD": D})
    step = dcgan.make_step(G, D, oG, oD, 100, 0, None, cuda_graph=True, finite=check)
    real = L.random.device_generator().uniform((6, 1, 64, 64)) * 2 - 1
    for _ in range(4):           # warm-up (before and after Adam makes its state), capture, replay
        assert np.isfinite(list(step(real).values())).all() and check.first() is None
    D.main[2].weight.data[0, 0, 0, 0] = float("nan")
    assert np.isnan(step(real)["errD"])
    assert check.first() == "output of netD.main.2 (Conv2d)"


@pytest.mark.gpu
def test_gpu_check_eager_gradient():
    model = nn.Sequential(nn.Linear(4, 4), Root()).to(0)
    model[0].weight.data[...] = 0
    model[0].bias.data[...] = 0
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    check = FiniteCheck({"net": model})
    with check:
        F.mse_loss(model(L.tensor(np.ones((2, 4), np.float32), device=0)),
                   L.tensor(np.zeros((2, 4), np.float32), device=0)).backward()
        check.gradients(opt)
    assert check.first() == "gradient of net.1.w"


@pytest.mark.gpu
@pytest.mark.parametrize("foreach", [False, True])
def test_gpu_gradient_check_names_the_first_in_checking_order(foreach, monkeypatch):
    """The gradients are checked last parameter first, one launch per gradient or (foreach) one
    for all of them: with two poisoned gradients the one checked first is named either way."""
    monkeypatch.setattr(L.optim, "FOREACH", foreach)
    model = mlp(0).to(0)
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    check = FiniteCheck({"net": model})
    with check:
        model(L.tensor(np.ones((3, 4), np.float32), device=0)).sum().backward()
        model[0].weight.grad.data[0, 0] = np.nan
        model[2].weight.grad.data[1, 1] = np.inf
        check.gradients(opt)
    assert check.first() == "gradient of net.2.weight" and check.first_step() == 1
    model.zero_grad()
    with check:
        model(L.tensor(np.ones((3, 4), np.float32), device=0)).sum().backward()
        check.gradients(opt)
    assert check.first() is None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_gpu_queued_checks_name_the_first_bad_tensor(dtype):
    """The queue's one launch on a GPU (the compiled kernel, a pointer table in device memory):
    tensors of several sizes, a channels-last one and a strided one (checked alone, in order);
    the first bad tensor in checking order is named, as NumPy says."""
    import cupy
    from layers.backend import to_channels_last
    from layers.finite import FiniteCheck
    dt = np.dtype(L.backend.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    shapes = [((64, 8, 4, 4), "C"), ((2, 16, 8, 8), "channels_last"), ((4096,), "C"),
              ((4, 8), "strided"), ((8, 2), "C"), ((1 << 16,), "C")]
    for bad in ([], [0], [2], [5], [3, 1], [4, 3], [5, 4], [2, 5], [1, 0]):
        check = FiniteCheck({}, device=0)
        arrays = []
        for i, (shape, layout) in enumerate(shapes):
            a = (np.arange(int(np.prod(shape))) % 5 - 2.0).astype(dt).reshape(shape)
            if i in bad:
                a.reshape(-1)[(37 * i) % a.size] = np.nan if i % 2 else -np.inf
            if layout == "channels_last":
                a = to_channels_last(a)
            g = L.backend.to_device(a, 0)      # (keeps the channels-last layout)
            if layout == "strided":
                wide = cupy.zeros(shape[:-1] + (2 * shape[-1],), dt)
                wide[..., ::2] = g
                g = wide[..., ::2]
            arrays.append(g)
        with check:
            for i, g in enumerate(arrays):
                check._check(g, f"t{i}")
        assert check.first() == (f"t{min(bad)}" if bad else None), bad


@pytest.mark.gpu
def test_gpu_checks_of_a_step_captured_inside_an_open_check_run_on_every_replay():
    """The check opened around the CapturedStep rather than inside it, a step each: the outputs
    the captured call queued are launched inside the graph (layers.graph), so a replay with a
    NaN input flags the first layer, named from the capture's events (a replay checks nothing
    from Python, so the step keeps them)."""
    from layers.graph import CapturedStep
    model = mlp(0).to(0)
    check = FiniteCheck({"net": model})
    step = CapturedStep(lambda x: model(x).data, modules=(model,))
    good = L.tensor(np.ones((3, 4), np.float32), device=0)
    bad = L.tensor(np.full((3, 4), np.nan, np.float32), device=0)
    for x in (good, good, good, bad):       # warm-up, capture, replays
        with check:
            step(x)
        assert check.first() == (None if x is good else "output of net.0 (Linear)")

"""layers.optim.lr_scheduler against torch.optim.lr_scheduler: the lr each group gets over 25
steps (two groups, different starting lrs), get_last_lr, and a state_dict round trip that goes on
where it stopped; an optimizer trained under the schedule ends as torch's."""
import math

import numpy as np
import pytest
import torch

import layers as L
from layers import nn

SCHEDULES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=4, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[9, 3, 15], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=1e-4),
    "LambdaLR": lambda m, o: m.LambdaLR(o, [lambda e: 1 / (1 + e), lambda e: 0.95 ** e]),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=7),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.05], total_steps=40),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.2, total_iters=6),
    "CyclicLR": lambda m, o: m.CyclicLR(o, base_lr=[0.01, 0.002], max_lr=[0.1, 0.05],
                                        step_size_up=4, step_size_down=3),
    "CyclicLR, triangular2": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3,
                                                     mode="triangular2"),
    "CyclicLR, exp_range": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=2, gamma=0.9,
                                                   mode="exp_range", cycle_momentum=False),
    "CyclicLR, scale_fn by step": lambda m, o: m.CyclicLR(
        o, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 0.97 ** x, scale_mode="iterations"),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, [lambda e: 0.95,
                                                            lambda e: 1 - 0.01 * e]),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=15, power=2.0),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=1e-3),
    "SequentialLR, warm restarts after a warm-up": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=3),
            m.CosineAnnealingWarmRestarts(o, T_0=4)], milestones=[3]),
    "SequentialLR": lambda m, o: m.SequentialLR(          # warm-up, then cosine from step 5
        o, [m.LinearLR(o, start_factor=0.25, total_iters=5),
            m.CosineAnnealingLR(o, T_max=15, eta_min=1e-3)], milestones=[5]),
    "SequentialLR, three": lambda m, o: m.SequentialLR(   # (the resume at step 11 is in the 2nd)
        o, [m.ConstantLR(o, factor=0.1, total_iters=20), m.ExponentialLR(o, gamma=0.9),
            m.StepLR(o, step_size=2, gamma=0.5)], milestones=[4, 14]),
    "SequentialLR, milestone 0": lambda m, o: m.SequentialLR(   # (the 2nd schedule from 0)
        o, [m.ExponentialLR(o, gamma=0.5), m.LinearLR(o, start_factor=0.5, total_iters=3)],
        milestones=[0]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ExponentialLR(o, gamma=0.9), m.StepLR(o, step_size=3, gamma=0.5),
         m.LinearLR(o, start_factor=0.5, total_iters=4)]),
}


def groups(api, params):
    return [{"params": params[:1], "lr": 0.1}, {"params": params[1:], "lr": 0.02}]


@pytest.mark.parametrize("order", ["scheduler made first", "optimizer loaded first"])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_a_schedule_sets_torchs_lrs_and_resumes(name, order):
    ours_p = [L.Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2)]
    torch_p = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    opt = L.optim.SGD(groups(L, ours_p), lr=0.1)
    topt = torch.optim.SGD(groups(torch, torch_p), lr=0.1)
    sched = SCHEDULES[name](L.optim.lr_scheduler, opt)
    tsched = SCHEDULES[name](torch.optim.lr_scheduler, topt)
    for step in range(25):
        np.testing.assert_allclose(sched.get_last_lr(), tsched.get_last_lr(), rtol=1e-12)
        np.testing.assert_allclose([g["lr"] for g in opt.param_groups],
                                   [g["lr"] for g in topt.param_groups], rtol=1e-12)
        opt.step(), topt.step()
        sched.step()
        tsched.step()
        if step == 11:            # a resumed run: both made anew, then both loaded
            saved_opt, saved = opt.state_dict(), sched.state_dict()
            opt = L.optim.SGD(groups(L, ours_p), lr=0.1)
            if order == "scheduler made first":
                sched = SCHEDULES[name](L.optim.lr_scheduler, opt)
                opt.load_state_dict(saved_opt)
            else:                 # (the usual order in torch scripts)
                opt.load_state_dict(saved_opt)
                sched = SCHEDULES[name](L.optim.lr_scheduler, opt)
            sched.load_state_dict(saved)
    if hasattr(tsched, "last_epoch"):            # (torch's ChainedScheduler has none: its own)
        assert sched.last_epoch == tsched.last_epoch == 25
    for ours, theirs in zip(getattr(sched, "_schedulers", ()), getattr(tsched, "_schedulers", ())):
        assert ours.last_epoch == theirs.last_epoch
    state = sched.state_dict()                # numbers and lists only (LambdaLR's functions not)
    assert not any(callable(x) for v in state.values() for x in (v if isinstance(v, list) else
                                                                   [v])), state
    assert set(state) <= set(tsched.state_dict())      # (the same names as torch's)


def test_training_under_a_schedule_ends_as_torchs():
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2)
    m = nn.Linear(3, 2)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    opt, topt = L.optim.Adam(m.parameters(), lr=0.05), torch.optim.Adam(tm.parameters(), lr=0.05)
    sched = L.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    tsched = torch.optim.lr_scheduler.StepLR(topt, 2, gamma=0.5)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    for _ in range(6):
        for model, o, s, inp in ((m, opt, sched, L.tensor(x)), (tm, topt, tsched, torch.tensor(x))):
            o.zero_grad()
            (model(inp) ** 2).sum().backward()
            o.step()
            s.step()
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[k], v.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_scheduler_needs_an_optimizer_and_a_resumed_one_its_initial_lr():
    with pytest.raises(TypeError, match="StepLR: list is not an optimizer"):
        L.optim.lr_scheduler.StepLR([], 3)
    opt = L.optim.SGD([L.Tensor(np.zeros(2, np.float32), requires_grad=True)], lr=0.1)
    with pytest.raises(KeyError, match="'initial_lr' is not specified in param_groups\\[0\\]"):
        L.optim.lr_scheduler.ExponentialLR(opt, 0.9, last_epoch=4)
    assert math.isclose(L.optim.lr_scheduler.ExponentialLR(opt, 0.5).get_last_lr()[0], 0.1)


def _sgd(api, lr=0.1):
    p = (L.Tensor(np.zeros(2, np.float32), requires_grad=True) if api is L else
         torch.zeros(2, requires_grad=True))
    return (L.optim.SGD if api is L else torch.optim.SGD)([p], lr=lr)


@pytest.mark.parametrize("case", ["chained", "set by hand", "last_epoch given", "step(epoch)"])
def test_schedules_go_on_from_the_groups_lr_as_torchs(case):
    """torch's recursive form: two schedulers on one optimizer multiply, an lr set by hand is
    the one the schedule goes on from, a scheduler made at last_epoch=k keeps the group's lr."""
    lrs = {}
    for api in (L, torch):
        m, opt = api.optim.lr_scheduler, _sgd(api)
        if case == "last_epoch given":
            opt.param_groups[0]["initial_lr"] = 0.4
        scheds = {"chained": lambda: [m.ExponentialLR(opt, 0.9), m.StepLR(opt, 3, 0.1),
                                      m.MultiStepLR(opt, [2, 5, 5], 0.5),
                                      m.CosineAnnealingLR(opt, 4, 0.001)],
                  "set by hand": lambda: [m.StepLR(opt, 3, 0.5), m.CosineAnnealingLR(opt, 5)],
                  "last_epoch given": lambda: [m.StepLR(opt, 3, 0.5, last_epoch=4),
                                               m.ExponentialLR(opt, 0.7, last_epoch=2)],
                  "step(epoch)": lambda: [m.StepLR(opt, 3, 0.5), m.MultiStepLR(opt, [4], 0.1)],
                  }[case]()
        seen = []
        for step in range(12):
            opt.step()
            if case == "set by hand" and step == 2:
                opt.param_groups[0]["lr"] = 1.0
            for s in scheds:
                if case == "step(epoch)" and step == 6:
                    with pytest.warns(UserWarning, match="deprecated"):
                        s.step(2)
                else:
                    s.step()
            seen.append([opt.param_groups[0]["lr"]] + [s.get_last_lr()[0] for s in scheds])
        lrs[api.__name__] = seen
    np.testing.assert_allclose(lrs["layers"], lrs["torch"], rtol=1e-12)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_a_state_saved_by_torch_loads_and_goes_on_as_torchs(name):
    """torch's state_dicts load: MultiStepLR's milestones as a Counter, LambdaLR's functions as
    None (the loading scheduler keeps its own)."""
    ours_p = [L.Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2)]
    torch_p = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    topt = torch.optim.SGD(groups(torch, torch_p), lr=0.1)
    tsched = SCHEDULES[name](torch.optim.lr_scheduler, topt)
    for _ in range(5):
        topt.step()
        tsched.step()
    opt = L.optim.SGD(groups(L, ours_p), lr=0.1)
    opt.load_state_dict(topt.state_dict())
    sched = SCHEDULES[name](L.optim.lr_scheduler, opt)
    sched.load_state_dict(tsched.state_dict())
    for _ in range(12):
        opt.step(), topt.step()
        sched.step(), tsched.step()
        np.testing.assert_allclose([g["lr"] for g in opt.param_groups],
                                   [g["lr"] for g in topt.param_groups], rtol=1e-12)


# a metric that improves, stalls (by less than the relative threshold too), and improves again
METRIC = [5, 4, 4, 4, 4, 4, 4, 3.9999, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2] * 2
PLATEAUS = {
    "defaults, patience 2": dict(patience=2),
    "max, abs threshold, cooldown, min_lr per group": dict(
        mode="max", patience=1, cooldown=2, threshold_mode="abs", threshold=0.5,
        min_lr=[0.01, 0.005], factor=0.5),
}


@pytest.mark.parametrize("name", list(PLATEAUS))
def test_reduce_lr_on_plateau_is_torchs(name):
    sign = -1 if PLATEAUS[name].get("mode") == "max" else 1
    ours_p = [L.Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2)]
    torch_p = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    opt = L.optim.SGD(groups(L, ours_p), lr=0.1)
    topt = torch.optim.SGD(groups(torch, torch_p), lr=0.1)
    sched = L.optim.lr_scheduler.ReduceLROnPlateau(opt, **PLATEAUS[name])
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **PLATEAUS[name])
    for epoch, metric in enumerate(METRIC):
        sched.step(sign * metric)
        tsched.step(sign * metric)
        assert sched.get_last_lr() == tsched.get_last_lr(), epoch
        if epoch == 20:                       # a resumed run: made anew, then loaded
            saved = sched.state_dict()
            sched = L.optim.lr_scheduler.ReduceLROnPlateau(opt, **PLATEAUS[name])
            sched.load_state_dict(saved)
    assert sched.get_last_lr() != [0.1, 0.02]       # (it reduced)


def test_what_torch_refuses_of_the_new_schedules():
    opt = L.optim.SGD([L.Tensor(np.zeros(2), requires_grad=True)], lr=0.1)
    sched = L.optim.lr_scheduler
    for make in (lambda: sched.LinearLR(opt, start_factor=0), lambda: sched.LinearLR(opt, 1, 2),
                 lambda: sched.ReduceLROnPlateau(opt, factor=1.0),
                 lambda: sched.ReduceLROnPlateau(opt, mode="lowest"),
                 lambda: sched.ReduceLROnPlateau(opt, threshold_mode="relative"),
                 lambda: sched.ReduceLROnPlateau(opt, min_lr=[0.0, 0.0])):
        with pytest.raises(ValueError):
            make()


def test_what_torch_refuses_of_sequences_of_schedules():
    opt = L.optim.SGD([L.Tensor(np.zeros(2), requires_grad=True)], lr=0.1)
    other = L.optim.SGD([L.Tensor(np.zeros(2), requires_grad=True)], lr=0.1)
    m = L.optim.lr_scheduler
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        m.SequentialLR(opt, [m.ExponentialLR(opt, 0.9), m.ReduceLROnPlateau(opt)], [2])
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
        m.ChainedScheduler([m.ExponentialLR(opt, 0.9), m.ExponentialLR(other, 0.9)])
    with pytest.raises(ValueError, match="number of schedulers 2 and the number of milestones to "
                                         "be equal to 2"):
        m.SequentialLR(opt, [m.ExponentialLR(opt, 0.9), m.StepLR(opt, 2)], [2, 4])
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        m.ChainedScheduler([], optimizer=opt)
    with pytest.raises(ValueError, match="factor expected to be between 0 and 1"):
        m.ConstantLR(opt, factor=1.5)


@pytest.mark.parametrize("order", ["scheduler made first", "optimizer loaded first"])
def test_a_chain_with_a_schedule_that_moves_the_lr_at_construction_resumes_as_torchs(order):
    """LinearLR's constructor step multiplies the lr by start_factor: a load undoes that where
    it wrote over a loaded lr, and leaves a chain's lr (set by the other scheduler) alone."""
    def chain(m, o):
        return [m.LinearLR(o, start_factor=0.25, total_iters=4), m.ExponentialLR(o, 0.9)]
    ours_p = [L.Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2)]
    torch_p = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    opt, topt = L.optim.SGD(groups(L, ours_p), lr=0.1), torch.optim.SGD(groups(torch, torch_p),
                                                                         lr=0.1)
    scheds, tscheds = chain(L.optim.lr_scheduler, opt), chain(torch.optim.lr_scheduler, topt)
    for epoch in range(10):
        opt.step(), topt.step()
        for s in scheds + tscheds:
            s.step()
        if epoch == 2:
            saved_opt, saved = opt.state_dict(), [s.state_dict() for s in scheds]
            opt = L.optim.SGD(groups(L, ours_p), lr=0.1)
            if order == "optimizer loaded first":
                opt.load_state_dict(saved_opt)
            scheds = chain(L.optim.lr_scheduler, opt)
            if order == "scheduler made first":
                opt.load_state_dict(saved_opt)
            for s, state in zip(scheds, saved):
                s.load_state_dict(state)
        np.testing.assert_allclose([g["lr"] for g in opt.param_groups],
                                   [g["lr"] for g in topt.param_groups], rtol=1e-12)


RESUMES = {   # (the schedulers, the epoch saved after (-1: before any step), what is loaded)
    "LinearLR saved before its first step": (
        lambda m, o: [m.LinearLR(o, start_factor=0.1, total_iters=4)], -1, "both"),
    "LambdaLR at an epoch where f(k) == f(0)": (
        lambda m, o: [m.LambdaLR(o, lambda e: 0.1 if e < 4 else 1.0)], 1, "both"),
    "LambdaLR + LinearLR": (
        lambda m, o: [m.LambdaLR(o, lambda e: 0.5 ** e),
                      m.LinearLR(o, start_factor=0.25, total_iters=3)], 2, "both"),
    "SequentialLR of schedules that do not move the lr, saved before its first step": (
        lambda m, o: [m.SequentialLR(o, [m.ExponentialLR(o, 0.5), m.StepLR(o, 2, 0.1)], [3])],
        -1, "both"),
    "SequentialLR saved after its milestone, the scheduler alone": (
        lambda m, o: [m.SequentialLR(o, [m.ConstantLR(o, 0.5, 2), m.ExponentialLR(o, 0.7)],
                                     [2])], 3, "scheduler"),
    "ChainedScheduler with a LinearLR": (
        lambda m, o: [m.ChainedScheduler([m.LinearLR(o, 0.2, total_iters=5),
                                          m.ExponentialLR(o, 0.8)])], 1, "both"),
    "ChainedScheduler with a ConstantLR, the scheduler alone": (
        lambda m, o: [m.ChainedScheduler([m.ConstantLR(o, 0.1, 3), m.ExponentialLR(o, 0.9)])],
        4, "scheduler"),
    "LinearLR, the scheduler alone": (
        lambda m, o: [m.LinearLR(o, start_factor=0.5, total_iters=4)], 1, "scheduler"),
}


@pytest.mark.parametrize("order", ["scheduler made first", "optimizer loaded first"])
@pytest.mark.parametrize("name", list(RESUMES))
def test_a_resumed_run_goes_on_with_the_lr_it_stopped_at(name, order):
    make, saved_at, loaded = RESUMES[name]
    straight, resumed = [], []
    p = L.Tensor(np.zeros(2, np.float32), requires_grad=True)
    opt = L.optim.SGD([p], lr=0.1)
    scheds = make(L.optim.lr_scheduler, opt)
    saved = None
    if saved_at == -1:
        saved = opt.state_dict(), [s.state_dict() for s in scheds]
    for epoch in range(8):
        opt.step()
        for s in scheds:
            s.step()
        straight.append(opt.param_groups[0]["lr"])
        if epoch == saved_at:
            saved = opt.state_dict(), [s.state_dict() for s in scheds]
    opt = L.optim.SGD([p], lr=0.1)
    if order == "optimizer loaded first" and loaded == "both":
        opt.load_state_dict(saved[0])
    scheds = make(L.optim.lr_scheduler, opt)
    if order == "scheduler made first" and loaded == "both":
        opt.load_state_dict(saved[0])
    for s, state in zip(scheds, saved[1]):
        s.load_state_dict(state)
    for epoch in range(saved_at + 1, 8):
        opt.step()
        for s in scheds:
            s.step()
        resumed.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(resumed, straight[saved_at + 1:], rtol=1e-12)


CYCLES = {   # (Adam: OneCycleLR in three phases, linear; CyclicLR triangular2)
    "OneCycleLR": lambda m, o, adam: m.OneCycleLR(o, max_lr=0.5, total_steps=16,
                                                  three_phase=adam,
                                                  anneal_strategy="linear" if adam else "cos"),
    "CyclicLR": lambda m, o, adam: m.CyclicLR(o, 0.05, 0.5, step_size_up=3, step_size_down=2,
                                              mode="triangular2" if adam else "triangular",
                                              base_momentum=0.7, max_momentum=0.95),
}


@pytest.mark.parametrize("order", ["scheduler made first", "optimizer loaded first"])
@pytest.mark.parametrize("opt_name, settings", [("SGD", dict(lr=0.1, momentum=0.9)),
                                                ("Adam", dict(lr=0.01))])
@pytest.mark.parametrize("schedule", list(CYCLES))
def test_a_cycle_moves_momentum_and_resumes_as_torchs(schedule, opt_name, settings, order):
    """OneCycleLR's and CyclicLR's momentum (SGD's) or beta1 (Adam's) moves against the lr; a
    resumed run gets both back (its constructor sets them) and trains on as torch's
    uninterrupted run."""
    rng = np.random.default_rng(3)
    start = rng.standard_normal(4).astype(np.float32)
    p, tp = L.Tensor(start.copy(), requires_grad=True), torch.tensor(start, requires_grad=True)

    def make(api, params, opt=None):
        opt = opt or getattr(api.optim, opt_name)(params, **settings)
        return opt, CYCLES[schedule](api.optim.lr_scheduler, opt, opt_name == "Adam")
    opt, sched = make(L, [p])
    topt, tsched = make(torch, [tp])
    for step in range(16):
        g = rng.standard_normal(4).astype(np.float32)
        p.grad, tp.grad = L.tensor(g), torch.tensor(g)
        opt.step(), topt.step()
        sched.step(), tsched.step()
        if step == 6:
            saved = opt.state_dict(), sched.state_dict()
            if order == "optimizer loaded first":
                opt = getattr(L.optim, opt_name)([p], **settings)
                opt.load_state_dict(saved[0])
                opt, sched = make(L, [p], opt)
            else:
                opt, sched = make(L, [p])
                opt.load_state_dict(saved[0])
            sched.load_state_dict(saved[1])
        key = "betas" if opt_name == "Adam" else "momentum"
        assert opt.param_groups[0][key] == pytest.approx(topt.param_groups[0][key], rel=1e-12)
        assert opt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"], rel=1e-12)
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)
    if schedule == "OneCycleLR":
        with pytest.raises(ValueError, match="Tried to step 17 times"):
            sched.step()


class _Decay:
    """A scale_fn that is an object: CyclicLR's state_dict keeps its attributes (torch's)."""
    def __init__(self, rate):
        self.rate = rate

    def __call__(self, x):
        return self.rate ** x


def test_cyclic_lr_saves_a_callable_scale_fns_attributes_as_torchs():
    runs = {}
    for api in (L, torch):
        p = (L.Tensor if api is L else torch.tensor)(np.zeros(2, np.float32), requires_grad=True)
        opt = api.optim.SGD([p], lr=0.1, momentum=0.9)
        sched = api.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2,
                                                scale_fn=_Decay(0.8), scale_mode="iterations")
        for _ in range(3):
            opt.step()
            sched.step()
        saved = sched.state_dict()
        assert saved["_scale_fn_custom"] == {"rate": 0.8}
        opt = api.optim.SGD([p], lr=0.1, momentum=0.9)
        sched = api.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2,
                                                scale_fn=_Decay(0.5), scale_mode="iterations")
        sched.load_state_dict(saved)
        assert sched._scale_fn_custom.rate == 0.8
        lrs = []
        for _ in range(4):
            opt.step()
            sched.step()
            lrs.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
        runs[api] = lrs
    np.testing.assert_allclose(runs[L], runs[torch], rtol=1e-12)

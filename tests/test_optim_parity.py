"""Optimizers and schedulers where torch's behaviour is easy to miss, each case against torch run
alongside: a scheduler made at last_epoch = k (a resume), a parameter group added after the
scheduler or optimizer was made, the settings torch refuses (NaN ones too) with torch's words,
and step(closure). lrs compared to 1e-12 relative, parameters in float64."""
import numpy as np
import pytest
import torch

import layers as L


def _param(api, value, dtype=np.float64):
    a = np.asarray(value, dtype)
    return L.Tensor(a.copy(), requires_grad=True) if api is L else \
        torch.tensor(a.copy(), requires_grad=True)


def _outcome(fn):
    """What fn returns, or the type and message of what it raised."""
    try:
        return fn()
    except Exception as e:            # (the refusal is the outcome compared)
        return type(e), str(e)


def _assert_same(ours, theirs):
    """Two outcomes (lists of lrs, each list ending at the refusal that stopped it) alike: the
    same refusals, the same lrs to 1e-12."""
    assert len(ours) == len(theirs), (ours, theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, tuple):
            assert a == b
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12)


RESUMABLE = {   # made with last_epoch = k from groups holding 'initial_lr' (OneCycleLR's too)
    "LinearLR": lambda m, o, k: m.LinearLR(o, start_factor=0.5, total_iters=8, last_epoch=k),
    "ConstantLR": lambda m, o, k: m.ConstantLR(o, factor=0.5, total_iters=6, last_epoch=k),
    "StepLR": lambda m, o, k: m.StepLR(o, 3, 0.5, last_epoch=k),
    "MultiStepLR": lambda m, o, k: m.MultiStepLR(o, [2, 4, 6], 0.5, last_epoch=k),
    "LambdaLR": lambda m, o, k: m.LambdaLR(o, lambda e: 0.9 ** e, last_epoch=k),
    "MultiplicativeLR": lambda m, o, k: m.MultiplicativeLR(o, lambda e: 0.9, last_epoch=k),
    "ExponentialLR": lambda m, o, k: m.ExponentialLR(o, 0.9, last_epoch=k),
    "CosineAnnealingLR": lambda m, o, k: m.CosineAnnealingLR(o, 7, 0.01, last_epoch=k),
    "CosineAnnealingWarmRestarts": lambda m, o, k: m.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.01, last_epoch=k),
    "PolynomialLR": lambda m, o, k: m.PolynomialLR(o, total_iters=7, power=1.5, last_epoch=k),
    "OneCycleLR": lambda m, o, k: m.OneCycleLR(o, max_lr=1.0, total_steps=20, last_epoch=k),
    "SequentialLR": lambda m, o, k: m.SequentialLR(
        o, [m.ExponentialLR(o, 0.9, last_epoch=k), m.StepLR(o, 2, 0.5, last_epoch=k)], [4],
        last_epoch=k),
}


@pytest.mark.parametrize("last_epoch", [0, 1, 3, 5, 6])
@pytest.mark.parametrize("name", list(RESUMABLE))
def test_a_scheduler_made_at_last_epoch_k_sets_torchs_lrs(name, last_epoch):
    """torch's constructor step at last_epoch = k keeps the lrs where its get_lr says so
    (LinearLR's `_is_initial`), and moves them where it does not (StepLR at a multiple)."""
    lrs = {}
    for api in (L, torch):
        group = {"params": [_param(api, [1.0, 2.0])], "lr": 0.1, "initial_lr": 0.2,
                 "max_lr": 1.0, "min_lr": 1e-5, "max_momentum": 0.95, "base_momentum": 0.85}
        opt = api.optim.SGD([group], lr=0.1, momentum=0.9)
        sched = RESUMABLE[name](api.optim.lr_scheduler, opt, last_epoch)
        seen = [opt.param_groups[0]["lr"]]
        for _ in range(5):
            opt.step()
            sched.step()
            seen.append(opt.param_groups[0]["lr"])
        lrs[api.__name__] = seen
    np.testing.assert_allclose(lrs["layers"], lrs["torch"], rtol=1e-12)


ADDED_TO = {  # schedulers whose optimizer gets one more group after two steps
    "LambdaLR": lambda m, o: m.LambdaLR(o, lambda e: 0.5 ** e),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.5),
    "StepLR": lambda m, o: m.StepLR(o, 2, 0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, [3, 5], 0.5),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, 2, 0.01),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, 3),
    "ConstantLR": lambda m, o: m.ConstantLR(o, 0.5, 4),
    "LinearLR": lambda m, o: m.LinearLR(o, 0.5, total_iters=4),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=6),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=20),
}


@pytest.mark.filterwarnings("ignore:.*(deprecated|epoch parameter).*:UserWarning")
@pytest.mark.parametrize("jump", [False, True], ids=["step()", "step(epoch)"])
@pytest.mark.parametrize("name", list(ADDED_TO))
def test_a_group_added_after_the_scheduler_is_stepped_or_refused_as_torchs(name, jump):
    """torch zips the groups with its lists strictly: a closed form (base_lrs, made before the
    group) refuses the new group where a recursive step takes it along."""
    runs = {}
    for api in (L, torch):
        opt = api.optim.SGD([_param(api, [1.0])], lr=0.1, momentum=0.9)
        sched = ADDED_TO[name](api.optim.lr_scheduler, opt)
        seen = []
        for epoch in range(1, 9):
            if epoch == 3:
                opt.add_param_group({"params": [_param(api, [2.0])], "lr": 1.0})
            opt.step()
            seen.append(_outcome(lambda: (sched.step(epoch) if jump else sched.step(),
                                          [g["lr"] for g in opt.param_groups])[1]))
            if isinstance(seen[-1], tuple):
                break
        runs[api.__name__] = seen
    _assert_same(runs["layers"], runs["torch"])


@pytest.mark.parametrize("min_lr", [0.05, [0.05]], ids=["one min_lr", "a list"])
def test_reduce_lr_on_plateau_reduces_a_group_added_later_or_refuses_as_torchs(min_lr):
    runs = {}
    for api in (L, torch):
        opt = api.optim.SGD([_param(api, [1.0])], lr=0.1)
        sched = api.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5,
                                                         min_lr=min_lr)
        opt.add_param_group({"params": [_param(api, [2.0])], "lr": 1.0})
        runs[api.__name__] = [_outcome(lambda: (sched.step(1.0), sched.get_last_lr())[1])
                              for _ in range(4)]
    _assert_same(runs["layers"], runs["torch"])


def test_reduce_lr_on_plateau_takes_torchs_deprecated_epoch():
    runs = {}
    for api in (L, torch):
        opt = api.optim.SGD([_param(api, [1.0])], lr=0.1)
        sched = api.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
        seen = []
        for epoch, metric in ((5, 1.0), (9, 2.0), (None, 2.0), (12, 3.0)):
            if epoch is None:
                sched.step(metric)
            else:
                with pytest.warns(UserWarning, match="deprecated"):
                    sched.step(metric, epoch)
            seen.append((sched.last_epoch, sched.get_last_lr()))
        runs[api.__name__] = seen
    assert runs["layers"] == runs["torch"]


@pytest.mark.filterwarnings("ignore:.*(deprecated|epoch parameter).*:UserWarning")
@pytest.mark.parametrize("make", [
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4),
    lambda m, o: m.PolynomialLR(o, total_iters=5, power=0.5),
], ids=["warm restarts, T_mult 2", "warm restarts, T_mult 1", "PolynomialLR"])
def test_new_schedules_jump_to_an_epoch_as_torchs(make):
    """step(epoch): SGDR's fractional epochs (once a batch) and restarts, PolynomialLR's closed
    form past total_iters."""
    lrs = {}
    for api in (L, torch):
        opt = api.optim.SGD([_param(api, [1.0])], lr=0.1)
        sched = make(api.optim.lr_scheduler, opt)
        seen = []
        for epoch in (0.5, 1, 2.25, 3, 7.5, 9, 4, 20.75, 2):
            opt.step()
            sched.step(epoch)
            seen.append((sched.last_epoch, sched.get_last_lr()[0]))
            sched.step()
            seen.append((sched.last_epoch, sched.get_last_lr()[0]))
        lrs[api.__name__] = seen
    assert [e for e, _ in lrs["layers"]] == [e for e, _ in lrs["torch"]]
    np.testing.assert_allclose([lr for _, lr in lrs["layers"]], [lr for _, lr in lrs["torch"]],
                               rtol=1e-12)


NAN = float("nan")
REFUSED_SETTINGS = [
    ("Adam", dict(lr=NAN)), ("Adam", dict(eps=NAN)), ("Adam", dict(weight_decay=NAN)),
    ("Adam", dict(betas=(NAN, 0.999))), ("Adam", dict(betas=(0.9, NAN))),
    ("Adam", dict(lr=-1.0, eps=NAN)), ("Adam", dict(betas=(0.9, 1.0))),
    ("Adam", dict(betas=(0, 0.999))), ("AdamW", dict(betas=(0.5, np.float32(0.9)))),
    ("AdamW", dict(lr=NAN)), ("AdamW", dict(eps=NAN)), ("AdamW", dict(weight_decay=NAN)),
    ("RMSprop", dict(lr=NAN)), ("RMSprop", dict(alpha=NAN)), ("RMSprop", dict(eps=NAN)),
    ("RMSprop", dict(momentum=NAN)), ("RMSprop", dict(weight_decay=NAN)),
    ("RMSprop", dict(alpha=-0.5, momentum=-1.0)),
    ("Adagrad", dict(lr=NAN)), ("Adagrad", dict(lr_decay=NAN)), ("Adagrad", dict(eps=NAN)),
    ("Adagrad", dict(initial_accumulator_value=NAN)), ("Adagrad", dict(weight_decay=NAN)),
    ("SGD", dict(lr=-0.1)), ("SGD", dict(momentum=-0.5)), ("SGD", dict(weight_decay=-1.0)),
    ("SGD", dict(momentum=0.0, nesterov=True)),
]


@pytest.mark.parametrize("name, settings", REFUSED_SETTINGS,
                         ids=[f"{n}{s}" for n, s in REFUSED_SETTINGS])
def test_settings_torch_refuses_are_refused_in_its_words(name, settings):
    ours = _outcome(lambda: getattr(L.optim, name)([_param(L, [1.0])], **settings))
    theirs = _outcome(lambda: getattr(torch.optim, name)([_param(torch, [1.0])], **settings))
    assert isinstance(theirs, tuple) and ours == theirs


def test_sgd_takes_a_nan_lr_as_torchs():
    for api in (L, torch):
        assert isinstance(api.optim.SGD([_param(api, [1.0])], lr=NAN, momentum=NAN),
                          api.optim.SGD)


ONE_CYCLE_REFUSED = [
    dict(epochs=-2, steps_per_epoch=-5), dict(epochs=2, steps_per_epoch=-5),
    dict(total_steps=10.5), dict(total_steps=0), dict(epochs=2.5, steps_per_epoch=4),
    dict(epochs=2), dict(total_steps=10, pct_start=0), dict(total_steps=10, pct_start=1.5),
    dict(total_steps=10, anneal_strategy="step"), dict(total_steps=10, max_lr=[1.0, 2.0]),
    dict(total_steps=10, base_momentum=[0.8, 0.9]), dict(total_steps=10, max_momentum=(0.9,) * 3),
]


@pytest.mark.parametrize("settings", ONE_CYCLE_REFUSED, ids=[str(s) for s in ONE_CYCLE_REFUSED])
def test_one_cycle_refuses_what_torchs_refuses_in_its_words(settings):
    def make(api):
        opt = api.optim.SGD([_param(api, [1.0])], lr=0.1, momentum=0.9)
        return api.optim.lr_scheduler.OneCycleLR(opt, **{"max_lr": 1.0, **settings})
    theirs = _outcome(lambda: make(torch))
    assert isinstance(theirs, tuple) and _outcome(lambda: make(L)) == theirs


@pytest.mark.parametrize("make", [
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=0),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2.0),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, eta_min="0"),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2).step(-1),
    lambda m, o: m.MultiplicativeLR(o, 0.9),
    lambda m, o: m.CyclicLR(o, 0.01, 0.1, mode="triangular3"),
    lambda m, o: m.CyclicLR(o, [0.01, 0.02], 0.1),
    lambda m, o: m.CyclicLR(o, 0.01, 0.1, max_momentum=[0.9, 0.95]),
    lambda m, o: m.CyclicLR(m.__name__, 0.01, 0.1),
])
def test_new_schedules_refuse_what_torchs_refuse_in_its_words(make):
    def run(api):
        return make(api.optim.lr_scheduler, api.optim.SGD([_param(api, [1.0])], lr=0.1))
    theirs = _outcome(lambda: run(torch))
    assert isinstance(theirs, tuple) and _outcome(lambda: run(L)) == theirs


def test_cyclic_lr_refuses_momentum_cycling_without_momentum_as_torch():
    def run(api):
        opt = api.optim.Adagrad([_param(api, [1.0])], lr=0.1)
        return api.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1)
    theirs = _outcome(lambda: run(torch))
    assert isinstance(theirs, tuple) and _outcome(lambda: run(L)) == theirs


def test_adagrad_steps_a_group_added_later_as_torchs():
    """torch makes Adagrad's state for a group added later at its first step, its sum from the
    constructor's initial_accumulator_value (a group's own is not read)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4))
    params = {}
    for api in (L, torch):
        ps = [_param(api, w[i]) for i in range(3)]
        opt = api.optim.Adagrad([{"params": ps[:1], "initial_accumulator_value": 2.0}], lr=0.1,
                                lr_decay=0.01, initial_accumulator_value=0.5)
        opt.add_param_group({"params": ps[1:2], "lr": 0.3, "initial_accumulator_value": 5.0})
        opt.add_param_group({"params": ps[2:], "weight_decay": 0.1})
        params[api.__name__] = ps, opt
    for _ in range(4):
        g = rng.standard_normal((3, 4))
        for api in (L, torch):
            for p, gi in zip(params[api.__name__][0], g):
                p.grad = L.tensor(gi.copy()) if api is L else torch.tensor(gi.copy())
            params[api.__name__][1].step()
    for p, tp in zip(params["layers"][0], params["torch"][0]):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-15)


OPTIMIZERS = {"SGD": dict(lr=0.1, momentum=0.9, nesterov=True), "Adam": dict(lr=0.05),
              "AdamW": dict(lr=0.05), "RMSprop": dict(lr=0.01, centered=True, momentum=0.5),
              "Adagrad": dict(lr=0.1)}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_calls_a_closure_with_gradients_on_and_returns_its_loss_as_torchs(name):
    """step(closure) (torch's: LBFGS needs it, every optimizer takes it): the closure's loss is
    returned, its gradients are the ones applied, even when step is called under no_grad; plain
    step() returns None."""
    x = np.linspace(-1.0, 1.0, 4)
    runs = {}
    for api in (L, torch):
        w = _param(api, [0.3, -0.2, 0.5, 0.1])
        opt = getattr(api.optim, name)([w], **OPTIMIZERS[name])
        xs = L.tensor(x) if api is L else torch.tensor(x)

        def closure():
            opt.zero_grad()
            loss = ((w * xs).sum() - 1.0) ** 2
            loss.backward()
            return loss
        losses = []
        with api.no_grad():
            for _ in range(3):
                losses.append(float(opt.step(closure).item()))
        assert opt.step() is None
        runs[api.__name__] = losses, w.detach().numpy().copy()
    np.testing.assert_allclose(runs["layers"][0], runs["torch"][0], rtol=1e-12)
    np.testing.assert_allclose(runs["layers"][1], runs["torch"][1], rtol=1e-12)


def test_sequential_lr_hands_over_to_warm_restarts_as_torchs():
    """torch 2.13's SequentialLR starts a later schedule at its milestone with the base
    _update_lr(0), not its step(0): CosineAnnealingWarmRestarts's period and position stay
    where they were (here moved on before SequentialLR), as torch's do."""
    runs = []
    for api in (L, torch):
        m = api.optim.lr_scheduler
        o = api.optim.SGD([_param(api, [1.0])], lr=1.0)
        wr = m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01)
        for _ in range(4):
            wr.step()
        seq = m.SequentialLR(o, [m.ExponentialLR(o, 0.9), wr], milestones=[3])
        lrs = [o.param_groups[0]["lr"]]
        for _ in range(10):
            o.step()
            seq.step()
            lrs.append(o.param_groups[0]["lr"])
        runs.append(lrs)
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-12)

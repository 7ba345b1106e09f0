"""RMSprop and Adagrad against torch.optim's: every option, float64 to rounding and float32 to
its rounding over several steps, on the CPU, the GPU and the host GPU path; two parameter groups;
the state dict (torch's names, a step count) loaded from torch and stepped on; refusals."""
import numpy as np
import pytest
import torch

import layers as L

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)
SETTINGS = [
    ("RMSprop", {}),
    ("RMSprop", dict(lr=0.05, momentum=0.9)),
    ("RMSprop", dict(centered=True, weight_decay=0.1)),
    ("RMSprop", dict(centered=True, momentum=0.5, alpha=0.9, eps=1e-6)),
    ("Adagrad", {}),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1)),
    ("Adagrad", dict(weight_decay=0.1, initial_accumulator_value=0.5, eps=1e-6)),
]


def _run(name, settings, where, dtype, steps=6, opt_from=None):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
    ours = [L.Tensor(L.tensor(a.copy(), device=where).data, requires_grad=True) for a in (w0, b0)]
    theirs = [torch.tensor(a.copy(), requires_grad=True) for a in (w0, b0)]
    # two groups: the second at its own learning rate
    opt = getattr(L.optim, name)([{"params": ours[:1]}, {"params": ours[1:], "lr": 0.03}],
                                 **settings)
    topt = getattr(torch.optim, name)([{"params": theirs[:1]}, {"params": theirs[1:], "lr": 0.03}],
                                      **settings)
    for step in range(steps):
        for p, t in zip(ours, theirs):
            g = rng.standard_normal(p.shape).astype(dtype)
            p.grad, t.grad = L.tensor(g.copy(), device=where), torch.tensor(g)
        opt.step()
        topt.step()
        if step == 2 and opt_from == "torch":        # torch's state dict, loaded mid-run
            opt.load_state_dict(topt.state_dict())
    return ours, theirs, opt, topt


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(SETTINGS)))
@pytest.mark.parametrize("device", DEVICES)
def test_rmsprop_and_adagrad_step_as_torchs(where, case, dtype):
    name, settings = SETTINGS[case]
    ours, theirs, opt, topt = _run(name, settings, where, dtype)
    tol = 1e-14 if dtype == np.float64 else 2e-6
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=tol, atol=tol)
    state, tstate = opt.state_dict()["state"], topt.state_dict()["state"]
    assert set(state[0]) == set(tstate[0])                # (torch's state names)
    assert int(state[0]["step"]) == int(tstate[0]["step"]) == 6


@pytest.mark.parametrize("case", range(len(SETTINGS)))
def test_a_torch_state_dict_loads_and_steps_on(case):
    name, settings = SETTINGS[case]
    ours, theirs, _, _ = _run(name, settings, "cpu", np.float64, opt_from="torch")
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-14, atol=1e-14)


def test_what_torch_refuses_is_refused():
    p = L.tensor(np.zeros(2), requires_grad=True)
    tp = torch.zeros(2, requires_grad=True)
    for name, bad in (("RMSprop", dict(lr=-1.0)), ("RMSprop", dict(alpha=-0.1)),
                      ("RMSprop", dict(momentum=-0.5)), ("Adagrad", dict(lr_decay=-1.0)),
                      ("Adagrad", dict(initial_accumulator_value=-1.0))):
        with pytest.raises(ValueError) as want:
            getattr(torch.optim, name)([tp], **bad)
        with pytest.raises(ValueError, match=f"^{want.value}$"):      # (torch's words)
            getattr(L.optim, name)([p], **bad)


def test_a_device_step_counter_is_never_read_back(on_host):
    """(a host read of the counter would stop a CUDA-graph capture): the counter stands in for
    one whose int() raises, and each optimizer steps on it."""
    class Unreadable(type(L.tensor(np.zeros(()), device=0).data)):
        def __int__(self):
            raise AssertionError("the device step counter was read back")
        __index__ = __float__ = __bool__ = __int__
    for name, settings in SETTINGS:
        if settings.get("lr_decay"):
            continue                         # (the decayed rate: from the counter, on device)
        p = L.Tensor(L.tensor(np.ones(3), device=0).data, requires_grad=True)
        opt = getattr(L.optim, name)([p], **settings)
        for _ in range(2):
            p.grad = L.tensor(np.full(3, 0.5), device=0)
            opt.step()
            step = opt.state[p]["step"]
            opt.state[p]["step"] = step.view(Unreadable)

"""Optimizer parameter groups as torch.optim builds them: a Tensor as a group's params, (name,
Tensor) pairs from named_parameters(), add_param_group, the constructor's values as `defaults`;
what torch refuses (one bare Tensor, a parameter in two groups, a non-leaf, a non-Tensor) is
refused here too. Steps compared with torch's."""
import numpy as np
import pytest
import torch

import layers as L
from layers import nn

OPTIMIZERS = {"SGD": dict(lr=0.1, momentum=0.9), "Adam": dict(lr=0.05),
              "RMSprop": dict(lr=0.01, momentum=0.5), "Adagrad": dict(lr=0.1, lr_decay=0.01)}


def pair(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return nn.Parameter(a.copy()), torch.nn.Parameter(torch.tensor(a))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_groups_of_a_tensor_added_groups_and_named_parameters_step_as_torchs(name):
    (p, tp), (q, tq), (r, tr) = pair((2, 3), 0), pair((3,), 1), pair((4,), 2)
    lin, tlin = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    lin.load_state_dict({k: v.detach().numpy() for k, v in tlin.state_dict().items()})
    opts = []
    for api, (a, b, c, m) in ((L, (p, q, r, lin)), (torch, (tp, tq, tr, tlin))):
        opt = getattr(api.optim, name)([{"params": b}, {"params": a, "lr": 0.5}],
                                       **OPTIMIZERS[name])
        opt.add_param_group({"params": c, "lr": 0.02})
        opts.append(opt)
        named = getattr(api.optim, name)(m.named_parameters(), **OPTIMIZERS[name])
        opts.append(named)
    ours, ourn, theirs, theirn = opts
    assert ours.defaults["lr"] == theirs.defaults["lr"] == OPTIMIZERS[name]["lr"]
    assert [g["lr"] for g in ours.param_groups] == [g["lr"] for g in theirs.param_groups]
    assert ourn.state_dict()["param_groups"][0]["param_names"] == \
        theirn.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
    for step in range(3):
        for t, tt in ((p, tp), (q, tq), (r, tr), (lin.weight, tlin.weight), (lin.bias, tlin.bias)):
            g = np.full(t.shape, step + 1.0, np.float32)
            t.grad, tt.grad = L.tensor(g), torch.tensor(g)
        for o in opts:
            o.step()
    for t, tt in ((p, tp), (q, tq), (r, tr), (lin.weight, tlin.weight), (lin.bias, tlin.bias)):
        np.testing.assert_allclose(t.numpy(), tt.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_what_torch_refuses_is_refused():
    (p, _), (q, _) = pair((2,), 0), pair((3,), 1)
    with pytest.raises(TypeError, match="an iterable of Tensors or dicts"):
        L.optim.SGD(p, lr=0.1)                       # (it iterated the rows: nothing stepped)
    with pytest.raises(ValueError, match="more than one parameter group"):
        L.optim.SGD([{"params": [p]}, {"params": [p, q], "lr": 0.5}], lr=0.1)
    with pytest.raises(ValueError, match="duplicate parameters"):
        L.optim.Adam([p, q, p])
    with pytest.raises(TypeError, match="can only optimize Tensors, but one of the params is "
                                        "float"):
        L.optim.SGD([1.0], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        L.optim.SGD([p * 2], lr=0.1)
    with pytest.raises(TypeError, match="not a set"):
        L.optim.SGD([{"params": {p}}], lr=0.1)
    opt = L.optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": p})

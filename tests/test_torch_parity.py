"""Every op and layer against PyTorch on the CPU, forward and backward, float32."""
import os
import re

import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn
from reference import rel_err

TOL, TOL_REDUCTION = 1e-5, 1e-4
R = np.random.default_rng(0)


def f32(*shape, positive=False, low=None, high=None):
    if low is not None:
        return R.uniform(low, high, shape).astype(np.float32)
    a = R.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def run_both(ours, theirs, arrays, grad_inputs=None):
    """Forward both with the same float32 inputs and the same random output weights; return
    (our outputs, torch outputs, our input grads, torch input grads)."""
    idx = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grad_inputs is None \
        else grad_inputs
    ts = [L.Tensor(a.copy(), requires_grad=i in idx) for i, a in enumerate(arrays)]
    tt = [torch.tensor(a.copy(), requires_grad=i in idx) for i, a in enumerate(arrays)]
    y, ty = ours(*ts), theirs(*tt)
    w = f32(*y.shape)
    if idx:
        (y * L.Tensor(w)).sum().backward()
        (ty * torch.from_numpy(w)).sum().backward()
    return y.numpy(), ty.detach().numpy(), [ts[i].grad.numpy() for i in idx], \
        [tt[i].grad.numpy() for i in idx]


TF = torch.nn.functional
MASK = R.random((3, 4)) < 0.5
OPS = {  # name: (ours, torch, inputs, tolerance, which inputs get gradients)
    "add": (lambda a, b: a + b, torch.add, [f32(3, 4, 5), f32(4, 1)], TOL, None),
    "sub": (lambda a, b: a - b, torch.sub, [f32(3, 4), f32(4)], TOL, None),
    "mul": (lambda a, b: a * b, torch.mul, [f32(2, 3), f32(2, 1)], TOL, None),
    "div": (lambda a, b: a / b, torch.div, [f32(3, 4), f32(3, 4, positive=True)], TOL, None),
    "neg": (lambda a: -a, torch.neg, [f32(5)], TOL, None),
    "pow": (lambda a: a ** 3, lambda a: a ** 3, [f32(4, 3)], TOL, None),
    "exp": (F.exp, torch.exp, [f32(3, 4)], TOL, None),
    "log": (F.log, torch.log, [f32(3, 4, positive=True)], TOL, None),
    "relu": (F.relu, torch.relu, [f32(4, 5)], TOL, None),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2),
                   [f32(4, 5)], TOL, None),
    "tanh": (F.tanh, torch.tanh, [f32(4, 5)], TOL, None),
    "sigmoid": (F.sigmoid, torch.sigmoid, [f32(4, 5) * 4], TOL, None),
    "clamp": (lambda x: F.clamp(x, -0.5, 0.5), lambda x: torch.clamp(x, -0.5, 0.5),
              [f32(30)], TOL, None),
    "softmax": (lambda x: F.softmax(x, 1), lambda x: torch.softmax(x, 1), [f32(4, 7)], TOL, None),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1),
                    [f32(2, 3, 6)], TOL, None),
    "sum": (lambda x: x.sum(axis=(0, 2)), lambda x: x.sum(dim=(0, 2)), [f32(8, 3, 50)],
            TOL_REDUCTION, None),
    "mean": (lambda x: x.mean(axis=1, keepdims=True), lambda x: x.mean(1, keepdim=True),
             [f32(4, 300)], TOL_REDUCTION, None),
    "reshape": (lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), [f32(2, 2, 6)], TOL, None),
    "transpose": (lambda x: x.transpose(1, 2, 0), lambda x: x.permute(1, 2, 0), [f32(2, 3, 4)],
                  TOL, None),
    "where": (lambda a, b: F.where(MASK, a, b), lambda a, b: torch.where(torch.from_numpy(MASK), a, b),
              [f32(3, 4), f32(4)], TOL, None),
    "masked_fill": (lambda x: F.masked_fill(x, MASK[:, None, :], -np.inf).exp(),
                    lambda x: x.masked_fill(torch.from_numpy(MASK[:, None, :]), -np.inf).exp(),
                    [f32(3, 2, 4)], TOL, None),
    "masked_mse": (lambda a, b: F.masked_mse_loss(a, b, MASK[:, None, :]),
                   lambda a, b: ((a - b) ** 2 * torch.from_numpy(MASK[:, None, :])).sum()
                   / torch.from_numpy(MASK).sum() / 2,
                   [f32(3, 2, 4), f32(3, 2, 4)], TOL, None),
    "broadcast_to": (lambda x: F.broadcast_to(x, (2, 3, 4)), lambda x: x.expand(2, 3, 4),
                     [f32(3, 1)], TOL, None),
    "concat": (lambda a, b: F.concat([a, b], 0), lambda a, b: torch.cat([a, b], 0),
               [f32(2, 3), f32(4, 3)], TOL, None),
    "stack": (lambda a, b: F.stack([a, b], 2), lambda a, b: torch.stack([a, b], 2),
              [f32(2, 3), f32(2, 3)], TOL, None),
    "getitem": (lambda x: x[:, 1:3], lambda x: x[:, 1:3], [f32(3, 5)], TOL, None),
    "index_repeat": (lambda x: x[np.array([2, 0, 2])], lambda x: x[torch.tensor([2, 0, 2])],
                     [f32(4, 3)], TOL, None),
    "pad": (lambda x: F.pad(x, (1, 2, 3, 0)), lambda x: TF.pad(x, (1, 2, 3, 0)), [f32(2, 3, 4)],
            TOL, None),
    "embedding": (lambda w: F.embedding(np.array([[0, 2], [2, 1]]), w, padding_idx=1),
                  lambda w: TF.embedding(torch.tensor([[0, 2], [2, 1]]), w, padding_idx=1),
                  [f32(4, 3)], TOL, None),
    "linear": (F.linear, TF.linear, [f32(5, 20), f32(7, 20), f32(7)], TOL_REDUCTION, None),
    "matmul": (F.matmul, torch.matmul, [f32(2, 3, 16), f32(16, 5)], TOL_REDUCTION, None),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, 2, 1), lambda x, w, b: TF.conv2d(x, w, b, 2, 1),
               [f32(2, 3, 9, 9), f32(8, 3, 4, 4), f32(8)], TOL_REDUCTION, None),
    "conv2d_bias_relu": (lambda x, w, b: F.conv2d(x, w, b, 1, 1, activation="relu"),
                         lambda x, w, b: torch.relu(TF.conv2d(x, w, b, 1, 1)),
                         [f32(2, 3, 9, 9), f32(8, 3, 3, 3), f32(8)], TOL_REDUCTION, None),
    "conv2d_bias_tanh": (lambda x, w, b: F.conv2d(x, w, b, 2, 1, activation="tanh"),
                         lambda x, w, b: torch.tanh(TF.conv2d(x, w, b, 2, 1)),
                         [f32(2, 3, 9, 9), f32(8, 3, 4, 4), f32(8)], TOL_REDUCTION, None),
    "conv2d_sigmoid": (lambda x, w: F.conv2d(x, w, None, 1, 0, activation="sigmoid"),
                       lambda x, w: torch.sigmoid(TF.conv2d(x, w, None, 1, 0)),
                       [f32(2, 3, 6, 6), f32(4, 3, 3, 3)], TOL_REDUCTION, None),
    "conv2d_groups_dilation": (lambda x, w: F.conv2d(x, w, None, 1, 2, 2, 2),
                               lambda x, w: TF.conv2d(x, w, None, 1, 2, 2, 2),
                               [f32(2, 4, 8, 8), f32(6, 2, 3, 3)], TOL_REDUCTION, None),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, 1, 2), lambda x, w, b: TF.conv1d(x, w, b, 1, 2),
               [f32(2, 5, 12), f32(4, 5, 5), f32(4)], TOL_REDUCTION, None),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1),
                         lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1),
                         [f32(2, 8, 4, 4), f32(8, 3, 4, 4), f32(3)], TOL_REDUCTION, None),
    "conv_transpose2d_outpad": (lambda x, w: F.conv_transpose2d(x, w, None, (2, 3), (0, 1), (1, 2)),
                                lambda x, w: TF.conv_transpose2d(x, w, None, (2, 3), (0, 1), (1, 2)),
                                [f32(1, 3, 3, 4), f32(3, 2, 3, 3)], TOL_REDUCTION, None),
    "conv_transpose2d_dilated_op": (
        lambda x, w: F.conv_transpose2d(x, w, None, 1, 1, 1, 1, 2),
        lambda x, w: TF.conv_transpose2d(x, w, None, 1, 1, 1, 1, 2),
        [f32(1, 2, 5, 5), f32(2, 3, 3, 3)], TOL_REDUCTION, None),
    "batch_norm_train": (lambda x, g, b: F.batch_norm(x, None, None, g, b, True),
                         lambda x, g, b: TF.batch_norm(x, None, None, g, b, True),
                         [f32(8, 3, 4, 4) * 2 + 1, f32(3), f32(3)], TOL_REDUCTION, None),
    "bce": (F.binary_cross_entropy, TF.binary_cross_entropy,
            [f32(6, 2, low=0.01, high=0.99), f32(6, 2, low=0, high=1)], TOL, [0]),
    "bce_saturated": (F.binary_cross_entropy, TF.binary_cross_entropy,
                      [np.array([0.0, 1.0, 0.5], np.float32), np.array([1.0, 0.0, 1.0], np.float32)],
                      TOL, []),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
                        [f32(6, 2) * 5, f32(6, 2, low=0, high=1)], TOL, [0]),
    "mse": (F.mse_loss, TF.mse_loss, [f32(5, 4), f32(5, 4)], TOL, None),
    "l1": (F.l1_loss, TF.l1_loss, [f32(5, 4), f32(5, 4)], TOL, None),
    "cross_entropy": (lambda x: F.cross_entropy(x, np.array([3, -100, 0, 1])),
                      lambda x: TF.cross_entropy(x, torch.tensor([3, -100, 0, 1])),
                      [f32(4, 5)], TOL, None),
}


@pytest.mark.parametrize("p", [0.0, 0.3, 0.75])
def test_dropout_is_torchs_definition(p):
    """Dropout draws its own mask, so it is checked against torch's definition: each element is
    either 0 or x / (1 - p), zeros occur with probability p, and the gradient is the same mask
    and scale; p = 0 is the identity (torch.nn.functional.dropout(x, 0.0) returns x)."""
    x = R.uniform(0.5, 1.5, 40_000).astype(np.float32)           # no zeros of its own
    t = L.Tensor(x.copy(), requires_grad=True)
    y = F.dropout(t, p)
    w = f32(*x.shape)
    (y * L.Tensor(w)).sum().backward()
    kept = y.numpy() != 0
    scale = np.float32(1 / (1 - p))
    np.testing.assert_array_equal(y.numpy()[kept], x[kept] * scale)
    np.testing.assert_array_equal(t.grad.numpy(), np.where(kept, w * scale, 0))
    sigma = np.sqrt(p * (1 - p) / x.size)
    assert abs((~kept).mean() - p) <= 5 * sigma + 1e-12
    if p == 0:
        np.testing.assert_array_equal(y.numpy(), TF.dropout(torch.from_numpy(x), 0.0).numpy())


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_torch(name):
    ours, theirs, arrays, tol, grad_inputs = OPS[name]
    y, ty, g, tg = run_both(ours, theirs, arrays, grad_inputs)
    assert rel_err(y, ty) < tol
    for a, b in zip(g, tg):
        assert rel_err(a, b) < tol


# ---- layers: same weights in, same outputs, gradients and buffers out -----------------------

def _copy_torch_to_ours(tm, m):
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


LAYERS = {
    "Conv2d": (lambda: nn.Conv2d(3, 6, 3, 2, 1, groups=3, bias=True),
               lambda: torch.nn.Conv2d(3, 6, 3, 2, 1, groups=3, bias=True), (2, 3, 8, 8)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(4, 2, 4, 2, 1, bias=False),
                        lambda: torch.nn.ConvTranspose2d(4, 2, 4, 2, 1, bias=False), (2, 4, 5, 5)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(4, 6, 3, 2, 1, output_padding=1, groups=2,
                                                   dilation=2),
                        lambda: torch.nn.ConvTranspose1d(4, 6, 3, 2, 1, output_padding=1,
                                                         groups=2, dilation=2), (2, 4, 7)),
    "Conv1d": (lambda: nn.Conv1d(4, 3, 5, padding=2),
               lambda: torch.nn.Conv1d(4, 3, 5, padding=2), (3, 4, 11)),
    "Conv2d_same": (lambda: nn.Conv2d(3, 4, (4, 3), padding="same", dilation=(1, 2)),
                    lambda: torch.nn.Conv2d(3, 4, (4, 3), padding="same", dilation=(1, 2)),
                    (2, 3, 7, 9)),
    "Conv1d_same_even": (lambda: nn.Conv1d(4, 3, 4, padding="same"),
                         lambda: torch.nn.Conv1d(4, 3, 4, padding="same"), (3, 4, 11)),
    "Conv1d_valid": (lambda: nn.Conv1d(4, 3, 4, padding="valid"),
                     lambda: torch.nn.Conv1d(4, 3, 4, padding="valid"), (3, 4, 11)),
    "Linear": (lambda: nn.Linear(6, 4), lambda: torch.nn.Linear(6, 4), (5, 6)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), lambda: torch.nn.BatchNorm2d(3), (6, 3, 4, 4)),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(5, momentum=0.3),
                    lambda: torch.nn.BatchNorm1d(5, momentum=0.3), (7, 5)),
    "BatchNorm1d_3d": (lambda: nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3), (4, 3, 6)),
    "BatchNorm2d_cumulative": (lambda: nn.BatchNorm2d(2, momentum=None),
                               lambda: torch.nn.BatchNorm2d(2, momentum=None), (4, 2, 3, 3)),
    "Sequential": (lambda: nn.Sequential(nn.Conv2d(1, 4, 4, 2, 1, bias=False), nn.BatchNorm2d(4),
                                         nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(64, 1),
                                         nn.Sigmoid()),
                   lambda: torch.nn.Sequential(torch.nn.Conv2d(1, 4, 4, 2, 1, bias=False),
                                               torch.nn.BatchNorm2d(4), torch.nn.LeakyReLU(0.2),
                                               torch.nn.Flatten(), torch.nn.Linear(64, 1),
                                               torch.nn.Sigmoid()), (3, 1, 8, 8)),
}


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch(name, train):
    make, make_torch, shape = LAYERS[name]
    torch.manual_seed(0)
    tm, m = make_torch(), make()
    with torch.no_grad():                     # non-trivial running statistics to load
        for k, v in tm.state_dict().items():
            if "running" in k:
                v.copy_(torch.rand_like(v) + 0.5)
    _copy_torch_to_ours(tm, m)
    assert list(m.state_dict()) == list(tm.state_dict())
    tm.train(train), m.train(train)
    for step in range(2):                     # twice: running statistics and counters evolve
        x = f32(*shape)
        y, ty, g, tg = run_both(m, tm, [x])
        assert rel_err(y, ty) < TOL_REDUCTION
        assert rel_err(g[0], tg[0]) < TOL_REDUCTION
    for (k, p), (tk, tp) in zip(m.named_parameters(), tm.named_parameters()):
        assert k == tk and rel_err(p.grad.numpy(), tp.grad.numpy()) < TOL_REDUCTION, k
    for k, v in tm.state_dict().items():
        assert rel_err(m.state_dict()[k], v.numpy()) < TOL, k


def test_state_dict_round_trip_both_ways_and_errors():
    torch.manual_seed(1)
    tm = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    _copy_torch_to_ours(tm, m)
    back = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    back.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
    for k, v in tm.state_dict().items():
        assert torch.equal(back.state_dict()[k], v)
    assert m.state_dict()["1.num_batches_tracked"].dtype == np.int64
    bad = m.state_dict()
    bad["0.weight"] = np.zeros((3, 1, 3, 3), np.float32)
    with pytest.raises(RuntimeError, match=r"0.weight: copying a param with shape \(3, 1, 3, 3\)"
                                           r".*current model is \(2, 1, 3, 3\)"):
        m.load_state_dict(bad)
    with pytest.raises(RuntimeError, match='Missing key.*"1.running_var"'):
        m.load_state_dict({k: v for k, v in m.state_dict().items() if k != "1.running_var"})


def _load_error(module, state_dict, strict=True):
    try:
        module.load_state_dict(state_dict, strict=strict)
    except Exception as e:
        return type(e), re.sub(r"torch\.Size\(\[([\d, ]*)\]\)",    # torch's shapes as tuples
                               lambda s: repr(tuple(int(n) for n in s[1].split(",") if n)),
                               str(e))
    return None


def test_load_state_dict_refuses_as_torch_does_and_copies_nothing_when_it_refuses():
    """torch's RuntimeError and its message, line for line: missing and unexpected keys (strict
    only), every shape that differs (strict or not); a mapping is required. Nothing is copied
    when it refuses (torch's may copy part)."""
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    good = {k: v.numpy() for k, v in tm.state_dict().items()}
    cases = [
        {k: v for k, v in good.items() if k not in ("0.bias", "1.running_var")},
        {**good, "extra": np.zeros(1, np.float32), "2.weight": np.zeros(1, np.float32)},
        {**good, "0.weight": np.zeros((2, 4), np.float32), "1.bias": np.zeros(3, np.float32)},
        {**{k: v for k, v in good.items() if k != "0.bias"}, "x": np.zeros(1, np.float32),
         "0.weight": np.zeros((3, 3), np.float32)},
    ]
    for strict in (True, False):
        for sd in cases:
            before = {k: v.copy() for k, v in m.state_dict().items()}
            ours = _load_error(m, sd, strict)
            theirs = _load_error(tm, {k: torch.from_numpy(v) for k, v in sd.items()}, strict)
            assert ours == theirs, (strict, ours, theirs)
            if ours is not None:
                for k, v in m.state_dict().items():
                    np.testing.assert_array_equal(v, before[k])
    assert m.load_state_dict(cases[1], strict=False) == (
        [], ["extra", "2.weight"]) == tuple(tm.load_state_dict(
            {k: torch.from_numpy(v) for k, v in cases[1].items()}, strict=False))
    assert _load_error(m, [1]) == _load_error(tm, [1])[:1] + (
        "Expected state_dict to be dict-like, got <class 'list'>.",)


def test_save_load_npz(tmp_path):
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    L.save(m.state_dict(), tmp_path / "m.npz")
    loaded = L.load(tmp_path / "m.npz")
    assert list(loaded) == list(m.state_dict())
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(loaded[k], v)


def test_save_and_load_take_file_objects_as_torchs_do(tmp_path):
    """io.BytesIO and an open file: the same arrays, order and dtypes back (bfloat16 as float32,
    which holds it exactly), and a torch.save stream refused by name."""
    import io
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    sd = m.state_dict()
    sd["half"] = L.ones(2).astype(L.bfloat16).numpy()
    buf = io.BytesIO()
    L.save(sd, buf)
    buf.seek(0)
    with open(tmp_path / "m.npz", "wb") as f:
        L.save(sd, f)
    with open(tmp_path / "m.npz", "rb") as f:
        for loaded in (L.load(buf), L.load(f)):
            assert list(loaded) == list(sd)
            for k, v in sd.items():
                assert loaded[k].dtype == (np.float32 if k == "half" else v.dtype)
                np.testing.assert_array_equal(loaded[k], v.astype(loaded[k].dtype))
    stream = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, stream)
    stream.seek(0)
    with pytest.raises(ValueError, match="a file torch.save wrote"):
        L.load(stream)


def test_save_takes_any_key_and_gives_the_mode_a_plain_write_would(tmp_path):
    """Keys np.savez takes as its own arguments ('file', 'allow_pickle') are names like any
    other; the file's mode is a plain open()'s (0666 less the umask; a replaced file's own), not
    the temporary file's 0600."""
    import stat
    arrays = {"file": np.arange(3.0), "allow_pickle": np.ones(2, np.float32), "w": np.eye(2)}
    path = tmp_path / "m.npz"
    old = os.umask(0o022)
    try:
        L.save(arrays, path)
    finally:
        os.umask(old)
    loaded = L.load(path)
    assert list(loaded) == list(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(loaded[k], v)
        assert loaded[k].dtype == v.dtype
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    os.chmod(path, 0o640)
    L.save(arrays, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]       # no temporary file left
    # a private file stays private while its replacement is written
    from layers.serialization import write_atomically
    os.chmod(path, 0o600)
    seen = []
    write_atomically(path, lambda f: seen.append(stat.S_IMODE(os.fstat(f.fileno()).st_mode)))
    assert seen == [0o600] and stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_save_load_safetensors(tmp_path):
    pytest.importorskip("safetensors")
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    L.save(m.state_dict(), tmp_path / "m.safetensors")
    loaded = L.load(tmp_path / "m.safetensors")
    assert list(loaded) == list(m.state_dict())                  # the saved order
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(loaded[k], v)
        assert loaded[k].shape == v.shape and loaded[k].dtype == v.dtype  # (0-d stays 0-d)
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)).load_state_dict(loaded)
    # a strided array is saved by its values; a file written elsewhere loads in its own order
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    L.save({"z": a.T, "a": np.float64(2.5)}, tmp_path / "t.safetensors")
    back = L.load(tmp_path / "t.safetensors")
    assert list(back) == ["z", "a"] and back["a"].shape == ()
    np.testing.assert_array_equal(back["z"], a.T)
    from safetensors.numpy import save_file
    save_file({"b": a, "a": a}, str(tmp_path / "other.safetensors"))
    assert sorted(L.load(tmp_path / "other.safetensors")) == ["a", "b"]


def test_default_initialisation_matches_torch_distributions():
    L.manual_seed(0)
    lin, conv_t = nn.Linear(400, 300), nn.ConvTranspose2d(16, 8, 4)
    bound = 1 / np.sqrt(400)
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound and abs(w.std() - bound / np.sqrt(3)) < 0.02 * bound
    # ConvTranspose2d's fan_in is weight.shape[1] * R * S = 8 * 16, as torch computes it
    assert np.abs(conv_t.weight.numpy()).max() <= 1 / np.sqrt(8 * 16)


# ---- optimizers -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda p, O: O.Adam(p, lr=2e-3, betas=(0.5, 0.999)),
    lambda p, O: O.Adam(p, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1),
    lambda p, O: O.SGD(p, lr=0.1),
    lambda p, O: O.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    lambda p, O: O.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
])
def test_optimizer_matches_torch(make):
    w0 = [f32(4, 3), f32(3)]
    ps = [L.nn.Parameter(w.copy()) for w in w0]
    tps = [torch.nn.Parameter(torch.tensor(w.copy())) for w in w0]
    opt, topt = make(ps, L.optim), make(tps, torch.optim)
    for _ in range(6):
        grads = [f32(*w.shape) for w in w0]
        for p, tp, g in zip(ps, tps, grads):
            p.grad, tp.grad = L.Tensor(g.copy()), torch.tensor(g.copy())
        opt.step(), topt.step()
    for p, tp in zip(ps, tps):
        assert rel_err(p.numpy(), tp.detach().numpy()) < 1e-6


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kw", [{}, dict(momentum=0.9, dampening=0.1, weight_decay=0.01),
                                dict(momentum=0.9, nesterov=True, weight_decay=0.1)])
def test_sgd_is_torchs_to_the_bit(kw, dtype):
    """torch's SGD on the CPU adds with add(x, alpha=): alpha rounded to the data's dtype, one
    fused multiply-add in float32, rounded once; and scales with mul_(s) in float32. Two
    roundings (lr * g, then p - that) differed in ~9 % of the elements of one float32 update;
    NumPy's half arithmetic (s rounded to half first) in a few % of a float16 one's."""
    from layers.backend import bfloat16
    dt, tdt = {"float32": (np.float32, torch.float32), "float16": (np.float16, torch.float16),
               "bfloat16": (bfloat16, torch.bfloat16)}[dtype]
    w = f32(64, 65)
    p, tp = L.nn.Parameter(w.astype(dt)), torch.nn.Parameter(torch.tensor(w).to(tdt))
    opt, topt = L.optim.SGD([p], lr=0.1, **kw), torch.optim.SGD([tp], lr=0.1, **kw)
    for _ in range(3):
        g = f32(64, 65)
        p.grad, tp.grad = L.Tensor(g.astype(dt)), torch.tensor(g).to(tdt)
        opt.step(), topt.step()
        np.testing.assert_array_equal(p.numpy().astype(np.float32),
                                      tp.detach().float().numpy())


def test_sgd_in_float64_is_torchs_to_its_last_bit():
    """float64: the fused multiply-add is emulated in long double, rounded twice where the
    product's last bits decide it (a few elements in a thousand, a few ulps after three steps;
    rounding each product in float64 first differed in over a quarter of them)."""
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("long double is no wider than double here")
    w = np.random.default_rng(5).standard_normal((64, 65))
    p, tp = L.nn.Parameter(w.copy()), torch.nn.Parameter(torch.tensor(w.copy()))
    kw = dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
    opt, topt = L.optim.SGD([p], **kw), torch.optim.SGD([tp], **kw)
    for _ in range(3):
        g = np.random.default_rng(6).standard_normal((64, 65))
        p.grad, tp.grad = L.Tensor(g.copy()), torch.tensor(g.copy())
        opt.step(), topt.step()
    ours, theirs = p.numpy(), tp.detach().numpy()
    assert np.count_nonzero(ours != theirs) <= ours.size // 100     # a few in a thousand
    np.testing.assert_array_max_ulp(ours, theirs, maxulp=8)


def test_optimizer_state_dict_round_trip():
    p = L.nn.Parameter(f32(3))
    opt = L.optim.Adam([p], lr=0.1)
    p.grad = L.Tensor(f32(3))
    opt.step()
    sd = opt.state_dict()
    q = L.nn.Parameter(p.numpy().copy())
    opt2 = L.optim.Adam([q], lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.1
    g = f32(3)
    p.grad, q.grad = L.Tensor(g.copy()), L.Tensor(g.copy())
    opt.step(), opt2.step()
    np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_torch_optimizers_state_dict_loads_and_the_runs_go_on_equal():
    """torch's Adam / SGD state_dict (tensors, its own extra keys off) loads; the next steps
    equal torch's (Adam's arithmetic is torch's, operation for operation)."""
    for make, tmake in ((lambda ps: L.optim.Adam(ps, lr=0.5), lambda ps: torch.optim.Adam(
                         ps, lr=0.1, betas=(0.8, 0.99), eps=1e-6)),
                        (lambda ps: L.optim.SGD(ps, lr=0.5), lambda ps: torch.optim.SGD(
                         ps, lr=0.1, momentum=0.9, foreach=True))):     # (a kernel choice)
        w = f32(4)
        tp, p = torch.nn.Parameter(torch.tensor(w)), L.nn.Parameter(w.copy())
        topt, opt = tmake([tp]), make([p])
        for _ in range(2):
            tp.grad = torch.tensor(f32(4))
            topt.step()
        p.data[...] = tp.detach().numpy()
        opt.load_state_dict(topt.state_dict())
        assert opt.param_groups[0]["lr"] == 0.1
        for _ in range(2):
            g = f32(4)
            tp.grad, p.grad = torch.tensor(g), L.Tensor(g.copy())
            topt.step(), opt.step()
        assert rel_err(p.numpy(), tp.detach().numpy()) < 1e-6, type(opt).__name__


def test_a_state_torch_keeps_as_none_is_no_state():
    """Older torch SGDs saved momentum_buffer None at momentum 0: loaded as no buffer, not
    refused as an array of the wrong shape."""
    p = L.nn.Parameter(f32(3))
    opt = L.optim.SGD([p], lr=0.1)
    opt.load_state_dict({"state": {0: {"momentum_buffer": None}}, "param_groups": [
        dict(lr=0.2, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False,
             foreach=None, params=[0])]})
    assert opt.param_groups[0]["lr"] == 0.2 and opt.state[p] == {}


def test_optimizer_state_is_keyed_by_the_parameter_as_torchs():
    """opt.state[p] (p itself the key, a parameter not stepped yet reading as {}), with torch's
    names for each optimizer's state and the same values after a step."""
    for name, kw in (("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", {}), ("AdamW", {}),
                     ("RMSprop", dict(momentum=0.5, centered=True)), ("Adagrad", {})):
        w, g = f32(3).astype(np.float64), f32(3).astype(np.float64)
        p, idle = L.nn.Parameter(w.copy()), L.nn.Parameter(f32(2))
        tp, tidle = torch.nn.Parameter(torch.tensor(w)), torch.nn.Parameter(torch.zeros(2))
        opt, topt = getattr(L.optim, name)([p, idle], **kw), \
            getattr(torch.optim, name)([tp, tidle], **kw)
        p.grad, tp.grad = L.Tensor(g.copy()), torch.tensor(g)
        opt.step(), topt.step()
        assert (p in opt.state) == (tp in topt.state) and \
            (idle in opt.state) == (tidle in topt.state), name
        assert sorted(opt.state[p]) == sorted(topt.state[tp]), name
        assert sorted(opt.state[idle]) == sorted(topt.state[tidle]), name   # ({} but Adagrad)
        for k, v in topt.state[tp].items():
            np.testing.assert_allclose(np.asarray(opt.state[p][k], np.float64),
                                       v.detach().numpy(), rtol=1e-12, err_msg=f"{name} {k}")


def test_an_optimizer_state_dict_it_cannot_follow_is_refused_and_nothing_changes():
    tps = [torch.nn.Parameter(torch.tensor(f32(n))) for n in (3, 2)]
    p, q = L.nn.Parameter(f32(3)), L.nn.Parameter(f32(2))
    opt = L.optim.Adam([p, q], lr=0.001)
    p.grad, q.grad = L.Tensor(f32(3)), L.Tensor(f32(2))
    opt.step()
    before = opt.state_dict()

    def refused(sd, *words):
        with pytest.raises(ValueError) as e:
            opt.load_state_dict(sd)
        for w in words:
            assert w in str(e.value), str(e.value)
        after = opt.state_dict()        # as it was: nothing half-applied
        assert after["param_groups"] == before["param_groups"]
        for i in before["state"]:
            for k, v in before["state"][i].items():
                np.testing.assert_array_equal(after["state"][i][k], v)
    for flag in ("amsgrad", "maximize"):
        topt = torch.optim.Adam(tps, lr=0.5, **{flag: True})
        for tp in tps:
            tp.grad = torch.ones(tp.shape)
        topt.step()
        refused(topt.state_dict(), f"{flag}=True", "Adam does not do")
    tw = torch.optim.AdamW(tps, lr=0.5)
    tw.step()
    refused(tw.state_dict(), "decoupled_weight_decay=True")
    one = L.optim.Adam([L.nn.Parameter(f32(3))], lr=0.5)       # one parameter, not two
    refused(one.state_dict(), "saved 1 parameters", "has 2")
    swapped = L.optim.Adam([L.nn.Parameter(f32(2)), L.nn.Parameter(f32(3))], lr=0.5)
    for a in swapped.param_groups[0]["params"]:
        a.grad = L.Tensor(np.ones(a.shape, np.float32))
    swapped.step()
    refused(swapped.state_dict(), "'exp_avg' of parameter 0 has shape (2,)", "(3,)")


def test_clip_grad_norm_matches_torch():
    grads = [f32(5, 3) * 3, f32(4)]
    ps = [L.nn.Parameter(np.zeros_like(g)) for g in grads]
    tps = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, tp, g in zip(ps, tps, grads):
        p.grad, tp.grad = L.Tensor(g.copy()), torch.tensor(g.copy())
    n = L.optim.clip_grad_norm_(ps, 1.0)
    tn = torch.nn.utils.clip_grad_norm_(tps, 1.0)
    assert rel_err(n.numpy(), tn.numpy()) < TOL
    for p, tp in zip(ps, tps):
        assert rel_err(p.grad.numpy(), tp.grad.numpy()) < TOL


def test_adam_rows_number_each_tensors_first_element():
    from fake_device import FakeDeviceArray as Dev
    from layers import kernels
    tensors = [tuple(Dev(shape, ptr=base + 16 * k) for k in range(4)) + (Dev((), "int64",
               ptr=base + 99),) for shape, base in (((3, 4), 1 << 20), ((5,), 1 << 21))]
    rows, total = kernels.adam_rows(tensors)
    assert total == 17 and len(rows[0]) == kernels.ADAM_COLUMNS
    assert rows == [((1 << 20), (1 << 20) + 16, (1 << 20) + 32, (1 << 20) + 48, (1 << 20) + 99, 0),
                    ((1 << 21), (1 << 21) + 16, (1 << 21) + 32, (1 << 21) + 48, (1 << 21) + 99,
                     12)]


def test_adam_foreach_is_a_hyper_parameter_torch_also_keeps():
    p = L.nn.Parameter(np.ones(3, np.float32))
    opt = L.optim.Adam([p], foreach=True)
    p.grad = L.Tensor(np.ones(3, np.float32))
    opt.step()
    assert opt.state_dict()["param_groups"][0]["foreach"] is True
    assert "foreach" in torch.optim.Adam([torch.nn.Parameter(torch.ones(3))]).param_groups[0]


def test_norm_rows_number_each_gradients_first_element():
    from fake_device import FakeDeviceArray as Dev
    from layers import kernels
    rows, total = kernels.pointer_rows([Dev((3, 4), ptr=4096), Dev((5,), ptr=8192), Dev((1,))])
    assert rows == [(4096, 0), (8192, 12), (1 << 20, 17)] and total == 18
    assert len(rows[0]) == kernels.POINTER_COLUMNS


def test_conv_with_activation_backpropagates_twice_with_retain_graph():
    x = L.tensor(np.random.default_rng(0).standard_normal((1, 2, 5, 5)), requires_grad=True)
    w = L.tensor(np.random.default_rng(1).standard_normal((3, 2, 3, 3)), requires_grad=True)
    b = L.tensor(np.zeros(3), requires_grad=True)
    y = F.conv2d(x, w, b, activation="relu").sum()
    y.backward(retain_graph=True)
    first = w.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * first)


def test_relu_gradient_at_nan_passes_as_torch():
    x = L.tensor(np.full((1, 1, 3, 3), np.nan), requires_grad=True)
    w = L.tensor(np.ones((1, 1, 1, 1)), requires_grad=True)
    F.conv2d(x, w, L.tensor(np.zeros(1)), activation="relu").sum().backward()
    xt = torch.full((1, 1, 3, 3), float("nan"), dtype=torch.float64, requires_grad=True)
    torch.relu(TF.conv2d(xt, torch.ones((1, 1, 1, 1), dtype=torch.float64),
                         torch.zeros(1, dtype=torch.float64))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())      # 1 where y is NaN


@pytest.mark.parametrize("init", ["kaiming_uniform_", "kaiming_normal_"])
def test_kaiming_refuses_a_mode_it_does_not_know_as_torch(init):
    with pytest.raises(ValueError, match="Mode fan-in not supported"):
        getattr(torch.nn.init, init)(torch.empty(3, 3), mode="fan-in")
    with pytest.raises(ValueError, match="Mode fan-in not supported"):  # (it took fan_out)
        getattr(L.init, init)(nn.Parameter(np.zeros((3, 3), np.float32)), mode="fan-in")


@pytest.mark.parametrize("shape,gain", [((7, 3), 1.0), ((3, 7), 2.0), ((4, 2, 3, 3), 0.5)])
def test_orthogonal_init_is_the_sign_fixed_q_of_a_normal_draw(shape, gain):
    """torch's rule: the flattened rows (columns, when wider than tall) orthonormal times gain,
    Q of the QR of a normal draw with R's diagonal made positive: so Q^T A is upper triangular
    with a positive diagonal, A the draw (made again from the same seed)."""
    w = nn.Parameter(np.zeros(shape, np.float32))
    L.manual_seed(5)
    L.init.orthogonal_(w, gain=gain)
    L.manual_seed(5)
    rows, cols = shape[0], int(np.prod(shape[1:]))
    a = L.random.host_generator().standard_normal((rows, cols))
    q = w.numpy().reshape(rows, cols).astype(np.float64) / gain
    if rows < cols:
        a, q = a.T, q.T
    np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-6)
    r = q.T @ a
    np.testing.assert_allclose(np.tril(r, -1), 0, atol=1e-5)
    assert (np.diag(r) > 0).all()
    with pytest.raises(ValueError, match="only tensors with 2 or more dimensions"):
        L.init.orthogonal_(nn.Parameter(np.zeros(3, np.float32)))


def test_load_state_dict_takes_tensors_and_a_refused_one_changes_nothing():
    src, dst = nn.Linear(3, 2), nn.Linear(3, 2)
    dst.load_state_dict(dict(src.named_parameters()))           # this engine's Tensors
    for k, v in src.state_dict().items():
        np.testing.assert_array_equal(dst.state_dict()[k], v)
    before = {k: np.array(v) for k, v in dst.state_dict().items()}
    bad = {"weight": np.ones((2, 3), np.float32), "bias": np.ones(5, np.float32)}
    with pytest.raises(RuntimeError, match="bias: copying a param with shape \\(5,\\)"):
        dst.load_state_dict(bad)
    for k, v in dst.state_dict().items():                        # (weight was not copied)
        np.testing.assert_array_equal(v, before[k])

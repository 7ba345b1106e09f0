"""ParameterList / ParameterDict (torch's state_dict names, Tensors wrapped as Parameters, seen by
optimizers and by load_state_dict from torch), Embedding.from_pretrained, and Dropout2d (whole
channels dropped, the kept ones scaled, the gradient the same mask) on the CPU, the GPU and the
host GPU path."""
import numpy as np
import pytest
import torch

import layers as L
from layers import F, nn

DEVICES = ["cpu", pytest.param(0, marks=pytest.mark.gpu), "host"]   # (conftest's `where`)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(np.ones(2, np.float32)),
                                        L.tensor(np.zeros(3, np.float32))])
        self.scales.append(np.full(1, 2.0, np.float32))
        self.named = nn.ParameterDict({"a": np.ones((2, 2), np.float32)})
        self.named["b"] = nn.Parameter(np.zeros(1, np.float32))


class TorchHolder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.zeros(3)])
        self.scales.append(torch.full((1,), 2.0))
        self.named = torch.nn.ParameterDict({"a": torch.ones(2, 2)})
        self.named["b"] = torch.nn.Parameter(torch.zeros(1))


def test_parameter_containers_are_torchs():
    ours, theirs = Holder(), TorchHolder()
    assert list(ours.state_dict()) == list(theirs.state_dict()) == [
        "scales.0", "scales.1", "scales.2", "named.a", "named.b"]
    assert all(type(p) is nn.Parameter and p.requires_grad for p in ours.parameters())
    assert len(ours.scales) == 3 and "b" in ours.named and list(ours.named) == ["a", "b"]
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(torch.rand(p.shape))
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    for (k, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        np.testing.assert_array_equal(a, b.numpy(), err_msg=k)
    opt = L.optim.SGD(ours.parameters(), lr=0.5)          # (an optimizer steps every one)
    loss = sum((p * p).sum() for p in ours.parameters())
    loss.backward()
    before = [p.numpy().copy() for p in ours.parameters()]
    opt.step()
    for b, p in zip(before, ours.parameters()):
        np.testing.assert_allclose(p.numpy(), b - 0.5 * 2 * b, rtol=1e-6)
    with pytest.raises(KeyError, match="non-empty string"):
        ours.named["x.y"] = np.ones(1)
    assert ours.named.get("c") is None and ours.named.setdefault("c", np.ones(1)) is \
        ours.named["c"]


def test_containers_take_torchs_argument_names():
    lin = nn.Linear(2, 2)
    blocks = nn.ModuleList(modules=[lin]).append(module=nn.ReLU()).extend(modules=[nn.Tanh()])
    assert len(blocks) == 3
    named = nn.ModuleDict(modules={"a": lin})
    named.update(modules={"b": nn.ReLU()})
    assert list(named) == ["a", "b"]
    params = nn.ParameterDict(parameters={"w": np.ones(2, np.float32)})
    params.update(parameters={"v": np.zeros(1, np.float32)})
    assert list(params) == ["w", "v"]


@pytest.mark.parametrize("kw", [dict(max_norm=1.0), dict(max_norm=0.5, norm_type=1.0),
                                dict(padding_idx=-2, max_norm=2.0),
                                dict(max_norm=0.7, norm_type=float("inf")), dict(padding_idx=0),
                                dict(scale_grad_by_freq=True),
                                dict(scale_grad_by_freq=True, padding_idx=4, max_norm=1.5)])
@pytest.mark.parametrize("device", DEVICES)
def test_embedding_options_are_torchs(where, kw):
    """max_norm renorms the rows used, in place, before the lookup (twice: the second call sees
    the first's renormed rows); a negative padding_idx counts from the end; repr."""
    torch.manual_seed(0)
    t, e = torch.nn.Embedding(6, 4, **kw), nn.Embedding(6, 4, **kw)
    assert repr(e) == repr(t) and e.padding_idx == t.padding_idx
    e.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    e.to(where)
    for i in (np.array([[1, 2, 1], [5, 4, 3]]), np.array([0, 4, 4])):
        y, ty = e(L.tensor(i, device=where)), t(torch.tensor(i))
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(e.weight.numpy(), t.weight.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(e.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-6,
                               atol=1e-7)
    if kw.get("max_norm"):           # float64: torch's renorm to its last term (its + 1e-7)
        t64, e64 = torch.nn.Embedding(6, 4, **kw).double(), nn.Embedding(6, 4, **kw).double()
        e64.load_state_dict({k: v.detach().numpy() for k, v in t64.state_dict().items()})
        i = np.array([1, 2, 5])
        np.testing.assert_allclose(e64(L.tensor(i)).numpy(), t64(torch.tensor(i)).detach(),
                                   rtol=1e-14)
    with pytest.raises(ValueError, match="padding_idx 6 must be within num_embeddings 6"):
        nn.Embedding(6, 4, padding_idx=6)
    if kw.get("max_norm") and where == "cpu":      # a bad index is refused before any renorm
        before = e.weight.numpy().copy()
        for bad in (-1, 6):
            with pytest.raises(IndexError, match=f"index {bad} is out of range for 6"):
                e(L.tensor(np.array([0, bad])))
        np.testing.assert_array_equal(e.weight.numpy(), before)
    with pytest.raises(NotImplementedError, match="sparse gradients are not done here"):
        nn.Embedding(6, 4, sparse=True)


REPRS = [("ReLU", (), {"inplace": True}), ("ReLU", (), {}),
         ("LeakyReLU", (0.2,), {"inplace": True}), ("LeakyReLU", (), {}), ("Dropout", (0.3,), {}),
         ("Dropout2d", (0.3,), {"inplace": True}),
         ("Dropout1d", (), {}), ("Dropout3d", (), {}), ("Softmax", (1,), {}), ("Softmax", (), {}),
         ("LogSoftmax", (1,), {}), ("Upsample", (), {"scale_factor": 2}),
         ("Upsample", (), {"scale_factor": (2, 3)}), ("Upsample", (), {"size": (4, 4),
                                                                    "mode": "bilinear"}),
         ("Upsample", (), {"size": 4}), ("UpsamplingNearest2d", (), {"scale_factor": 2}),
         ("UpsamplingBilinear2d", (), {"scale_factor": 2}), ("AvgPool1d", (2,), {}),
         ("AvgPool1d", (3, 2, 1), {}), ("Conv1d", (3, 4, 3), {"padding_mode": "reflect",
                                                            "padding": 1}),
         ("Conv2d", (3, 4, 3), {"padding_mode": "circular", "padding": 1}),
         ("Conv2d", (4, 4, 3), {"padding": "same", "dilation": 2, "groups": 2, "bias": False,
                                "padding_mode": "reflect"}),
         ("ConvTranspose2d", (4, 2, 4), {"stride": 2, "padding": 1, "output_padding": 1,
                                         "groups": 2, "dilation": 1}),
         ("Conv1d", (2, 4, 3), {"padding": "valid", "dilation": 2}),
         ("BatchNorm2d", (4,), {}), ("BatchNorm2d", (4,), {"bias": False}),
         ("BatchNorm1d", (4,), {"affine": False}), ("InstanceNorm2d", (4,), {}),
         ("InstanceNorm1d", (4,), {"affine": True, "bias": False}),
         ("LayerNorm", (4,), {"bias": False}), ("LayerNorm", ([3, 4],), {}),
         ("GroupNorm", (2, 4), {}), ("GroupNorm", (2, 4), {"bias": False})]


def _torch_takes(name, kw):
    """Skip where this torch's module lacks an argument (the norms' bias=: torch 2.13's; the GPU
    machine has 2.11)."""
    import inspect
    params = inspect.signature(getattr(torch.nn, name).__init__).parameters
    missing = [k for k in kw if k not in params]
    if missing:
        pytest.skip(f"torch {torch.__version__}'s {name} takes no {missing}")


@pytest.mark.parametrize("name,args,kw", REPRS)
def test_module_reprs_and_state_dict_names_are_torchs(name, args, kw):
    _torch_takes(name, dict(kw, bias=True) if "Norm" in name else kw)   # (the reprs name it)
    ours, theirs = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("name,args,shape", [("BatchNorm2d", (3,), (4, 3, 2, 2)),
                                             ("GroupNorm", (1, 3), (4, 3, 2, 2)),
                                             ("LayerNorm", (5,), (4, 5)),
                                             ("InstanceNorm1d", (3,), (4, 3, 5))])
@pytest.mark.parametrize("device", DEVICES)
def test_norms_without_bias_are_torchs(where, name, args, shape):
    kw = dict(bias=False, **({"affine": True} if name.startswith("Instance") else {}))
    _torch_takes(name, kw)
    torch.manual_seed(0)
    theirs, ours = getattr(torch.nn, name)(*args, **kw), getattr(nn, name)(*args, **kw)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ours.to(where)
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x, tx = L.tensor(a, device=where, requires_grad=True), torch.tensor(a, requires_grad=True)
    w = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    (ours(x) * L.tensor(w, device=where)).sum().backward()
    ty = theirs(tx)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ours(x).numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-5)
    assert ours.bias is None


def test_reprs_are_torchs():
    """A module with an extra_repr and children prints both (it printed the children only);
    a ParameterList / ParameterDict its parameters (dtypes named as here, not torch.float32)."""
    def block(lib):
        class Block(lib.Module):
            def __init__(self):
                super().__init__()
                self.scale, self.lin = 3, lib.Linear(2, 2)

            def extra_repr(self):
                return f"scale={self.scale}"
        return Block()
    assert repr(block(nn)) == repr(block(torch.nn))
    for cls, args in ((nn.ParameterList, ([np.zeros((2, 3), np.float32), np.zeros(4)],)),
                      (nn.ParameterDict, ({"w": np.zeros((2, 3), np.float32)},))):
        theirs_cls = getattr(torch.nn, cls.__name__)
        targs = [{k: torch.nn.Parameter(torch.tensor(v)) for k, v in a.items()}
                 if isinstance(a, dict) else [torch.nn.Parameter(torch.tensor(v)) for v in a]
                 for a in args]
        theirs = repr(theirs_cls(*targs)).replace("torch.", "")
        if cls is nn.ParameterDict:                            # (torch.typename's FloatTensor)
            theirs = theirs.replace("FloatTensor", "float32")
        assert repr(cls(*args)) == theirs


def test_embedding_from_pretrained_is_torchs():
    table = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    for freeze in (True, False):
        ours = nn.Embedding.from_pretrained(L.tensor(table), freeze=freeze, padding_idx=1)
        theirs = torch.nn.Embedding.from_pretrained(torch.tensor(table), freeze=freeze,
                                                    padding_idx=1)
        assert ours.weight.requires_grad == theirs.weight.requires_grad == (not freeze)
        np.testing.assert_array_equal(ours(L.tensor([3, 1, 1])).numpy(),
                                      theirs(torch.tensor([3, 1, 1])).detach().numpy())
    ours = nn.Embedding.from_pretrained(L.tensor(table), freeze=False, scale_grad_by_freq=True)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(table), freeze=False,
                                                scale_grad_by_freq=True)
    assert repr(ours) == repr(theirs)
    ours(L.tensor([3, 3, 0])).sum().backward()
    theirs(torch.tensor([3, 3, 0])).sum().backward()
    np.testing.assert_array_equal(ours.weight.grad.numpy(), theirs.weight.grad.numpy())
    source, theirs_source = L.tensor(table), torch.tensor(table)
    ours = nn.Embedding.from_pretrained(source)
    theirs = torch.nn.Embedding.from_pretrained(theirs_source)
    source.data[0, 0], theirs_source[0, 0] = -1.0, -1.0     # (the same memory, as torch's)
    assert ours.weight.numpy()[0, 0] == theirs.weight[0, 0].item() == -1.0
    with pytest.raises(ValueError, match="2-dimensional"):
        nn.Embedding.from_pretrained(np.zeros(3))


@pytest.mark.parametrize("shape", [(16, 32, 3, 3), (16, 32, 5)])
@pytest.mark.parametrize("device", DEVICES)
def test_dropout2d_drops_whole_channels(where, shape):
    L.manual_seed(0)
    x = L.Tensor(L.tensor(np.ones(shape, np.float32), device=where).data, requires_grad=True)
    y = F.dropout2d(x, 0.25)
    out = y.numpy().reshape(shape[0], shape[1], -1)
    dropped = (out == 0).all(-1)
    assert np.all(dropped | np.isclose(out, 1 / 0.75).all(-1))     # (a channel: all or none)
    assert 0.15 < dropped.mean() < 0.35                      # (512 channels, p = 0.25)
    y.backward(L.tensor(np.full(shape, 2.0, np.float32), device=where))
    np.testing.assert_allclose(x.grad.numpy(), 2 * y.numpy())        # (the same mask)
    layer = nn.Dropout2d(0.25)
    layer.eval()
    assert layer(x) is x


@pytest.mark.parametrize("fn,shape,mask,warns", [
    ("dropout1d", (16, 32, 5), (16, 32), False), ("dropout1d", (64, 5), (64,), False),
    ("dropout2d", (16, 32, 2, 2, 2), (16, 32), True), ("dropout2d", (32, 16), (32, 16), True),
    ("dropout3d", (16, 32, 2, 2, 2), (16, 32), False), ("dropout3d", (64, 2, 2, 2), (64,), False),
    ("dropout3d", (64, 2, 3), (64,), True), ("dropout3d", (64,), (64,), True),
    ("dropout2d", (16, 32, 5), (16, 32), True)])
@pytest.mark.parametrize("device", DEVICES)
def test_channel_dropouts_draw_what_torchs_draw_and_warn_where_torch_warns(where, fn, shape, mask,
                                                                          warns):
    """The elements sharing one draw are torch's (its noise shape, batched or not), seen as a
    mask constant over them; torch's deprecation warning for the ranks it still takes."""
    import warnings
    L.manual_seed(1)
    x = L.tensor(np.ones(shape, np.float32), device=where)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = getattr(F, fn)(x, 0.5).numpy()
        getattr(torch.nn.functional, fn)(torch.ones(shape), 0.5)
    said = [str(w.message) for w in seen if f"{fn}: Received a" in str(w.message)]
    ours = [m for m in said if "(as torch's)" in m]
    theirs = [m for m in said if "(as torch's)" not in m]
    assert bool(ours) == bool(theirs) == warns
    groups = y.reshape(mask + (-1,))
    assert (groups == groups[..., :1]).all()                  # one draw per group
    assert 0.35 < (groups[..., 0] == 0).mean() < 0.65          # (p = 0.5, 64+ groups)
    np.testing.assert_array_equal(np.unique(y), [0.0, 2.0])
    layer = getattr(nn, fn.replace("dropout", "Dropout"))(0.5)
    assert layer.eval()(x) is x
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(L.zeros(2, 3, 4, 5), 0.5)

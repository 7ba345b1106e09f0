"""set_default_dtype / get_default_dtype as torch's: with float64 the default, everything torch
makes in its default dtype -- Python floats, the floating factories, new modules' parameters and
buffers, integer data meeting a float or a floating function -- is float64 here too, and a net
built so trains in float64 as torch's does; half-precision defaults are refused by name."""
import numpy as np
import pytest
import torch

import layers as L

# what torch makes in its default dtype: (name, fn(lib) -> tensor)
MADE = [
    ("tensor(float)", lambda lib: lib.tensor(1.5)),
    ("tensor(list)", lambda lib: lib.tensor([1.0, 2.0])),
    ("tensor(complex)", lambda lib: lib.tensor(1 + 2j)),
    ("tensor(NumPy float32 scalars)", lambda lib: lib.tensor([np.float32(1.5)])),
    ("Tensor(list)", lambda lib: lib.Tensor([1, 2])),
    ("zeros", lambda lib: lib.zeros(2)),
    ("ones", lambda lib: lib.ones(2)),
    ("empty", lambda lib: lib.empty(2)),
    ("full(float)", lambda lib: lib.full((2,), 1.5)),
    ("full(int)", lambda lib: lib.full((2,), 1)),
    ("rand", lambda lib: lib.rand(2)),
    ("randn", lambda lib: lib.randn(2)),
    ("arange(float)", lambda lib: lib.arange(3.0)),
    ("arange(int)", lambda lib: lib.arange(3)),
    ("linspace", lambda lib: lib.linspace(0, 1, 3)),
    ("eye", lambda lib: lib.eye(2)),
    ("int * float", lambda lib: lib.tensor([1, 2]) * 1.5),
    ("int / int", lambda lib: lib.tensor([1, 2]) / lib.tensor([2, 2])),
    ("exp(int)", lambda lib: lib.exp(lib.tensor([1, 2]))),
    ("sigmoid(int)", lambda lib: lib.sigmoid(lib.tensor([1, 2]))),
    ("atan2(int, int)", lambda lib: lib.atan2(lib.tensor([1]), lib.tensor([2]))),
    ("float32 * float", lambda lib: lib.ones(2, dtype=lib.float32) * 1.5),
    ("Linear.weight", lambda lib: lib.nn.Linear(2, 3).weight),
    ("Conv2d.bias", lambda lib: lib.nn.Conv2d(1, 2, 3).bias),
    ("ConvTranspose2d.weight", lambda lib: lib.nn.ConvTranspose2d(2, 1, 3).weight),
    ("BatchNorm2d.weight", lambda lib: lib.nn.BatchNorm2d(2).weight),
    ("BatchNorm2d.running_var", lambda lib: lib.nn.BatchNorm2d(2).running_var),
    ("BatchNorm2d.num_batches_tracked", lambda lib: lib.nn.BatchNorm2d(2).num_batches_tracked),
    ("LayerNorm.bias", lambda lib: lib.nn.LayerNorm(3).bias),
    ("GroupNorm.weight", lambda lib: lib.nn.GroupNorm(1, 2).weight),
    ("Embedding.weight", lambda lib: lib.nn.Embedding(4, 2).weight),
    ("LSTM.weight_hh_l0", lambda lib: lib.nn.LSTM(2, 3).weight_hh_l0),
    ("GRUCell.bias_ih", lambda lib: lib.nn.GRUCell(2, 3).bias_ih),
    ("MultiheadAttention.in_proj_bias", lambda lib: lib.nn.MultiheadAttention(4, 2).in_proj_bias),
    ("square_subsequent_mask",
     lambda lib: lib.nn.Transformer.generate_square_subsequent_mask(3)),
    ("clip_grad_norm_(no gradients)",
     lambda lib: lib.nn.utils.clip_grad_norm_([lib.nn.Parameter(lib.zeros(1))], 1.0)),
]


@pytest.fixture
def default_float64():
    L.set_default_dtype(L.float64)
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        L.set_default_dtype(L.float32)
        torch.set_default_dtype(torch.float32)


def _name(dtype):
    return str(dtype).replace("torch.", "")


@pytest.mark.parametrize("name,make", MADE, ids=[n for n, _ in MADE])
def test_each_default_made_tensor_has_torchs_dtype(name, make, default_float64):
    assert L.get_default_dtype() == np.float64 and torch.get_default_dtype() == torch.float64
    assert _name(make(L).dtype) == _name(make(torch).dtype), name


@pytest.mark.parametrize("name,make", MADE, ids=[n for n, _ in MADE])
def test_float32_is_the_default_again_after(name, make):
    assert L.get_default_dtype() == np.float32
    assert _name(make(L).dtype) == _name(make(torch).dtype), name


def test_the_default_dtype_is_the_one_repr_leaves_out(default_float64):
    assert repr(L.zeros(1)) == "Tensor([0.])"
    assert repr(L.zeros(1, dtype=L.float32)) == "Tensor([0.], dtype=float32)"


def test_a_net_built_with_a_float64_default_trains_as_torchs(default_float64):
    L.manual_seed(0)
    net = L.nn.Sequential(L.nn.Linear(3, 4), L.nn.Tanh(), L.nn.Linear(4, 1))
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    tnet.load_state_dict({k: torch.tensor(v) for k, v in net.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3)).tolist()      # (Python floats)
    opt = L.optim.Adam(net.parameters(), lr=0.1)
    topt = torch.optim.Adam(tnet.parameters(), lr=0.1)
    for _ in range(3):
        for o, n, lib in ((opt, net, L), (topt, tnet, torch)):
            o.zero_grad()
            (n(lib.tensor(x)) ** 2).mean().backward()
            o.step()
    for (k, v), tv in zip(net.state_dict().items(), tnet.state_dict().values()):
        assert v.dtype == np.float64, k
        np.testing.assert_allclose(v, tv.numpy(), rtol=1e-13, atol=1e-15, err_msg=k)


@pytest.mark.parametrize("dtype,message", [
    (L.float16, r"set_default_dtype\(float16\): a half-precision default dtype is not done here"),
    ("bfloat16", r"set_default_dtype\(bfloat16\): a half-precision default dtype is not done"),
    (L.int64, "only floating-point types are supported as the default type, got dtype"),
    (None, "only floating-point types are supported as the default type, got None"),
    (float, "only floating-point types are supported as the default type, got <class 'float'>"),
    ("no such dtype", "only floating-point types are supported as the default type, got 'no"),
])
def test_other_defaults_are_refused_and_change_nothing(dtype, message):
    with pytest.raises(TypeError, match=message):
        L.set_default_dtype(dtype)
    assert L.get_default_dtype() == np.float32 and L.tensor(1.5).dtype == np.float32

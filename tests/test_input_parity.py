"""Input handling against torch 2.13: L.tensor infers torch.tensor's dtype from Python and NumPy
values (each value's own dtype, promoted over the data) and refuses what torch refuses with its
kind of error; arange with an integer dtype truncates its arguments as torch does; the
initialisers refuse what torch refuses (integer tensors, a NaN std) and read their arguments
as torch's."""
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.init as tinit

import layers as L


def _torch_dtype(name):
    return getattr(torch, name)


def _same(ours, theirs):
    assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def _outcomes(expr, *scopes):
    """eval(expr) with each scope's names (ours, then torch's): its result, or the message of
    the RuntimeError it raised."""
    outcomes = []
    for scope in scopes:
        try:
            outcomes.append(eval(expr, globals(), scope))
        except RuntimeError as e:
            outcomes.append(str(e))
    return outcomes


def _raises_as_torch(ours, theirs, names):
    """Both calls raise, the same exception type; ours names the offending value or type."""
    with pytest.raises(Exception) as their_error:
        theirs()
    with pytest.raises(their_error.type) as our_error:
        ours()
    assert names in str(our_error.value), (names, str(our_error.value))


# data for torch.tensor, made per library (some hold tensors): dtype and values must be torch's
INFERRED = {
    "numpy_float64_scalar": lambda m: [np.float64(1.5)],
    "numpy_float64_array": lambda m: [np.ones(2)],
    "numpy_float64_nested": lambda m: [[np.float64(1)]],
    "numpy_float32_scalar": lambda m: [np.float32(1.5), np.float32(2)],
    "numpy_float16_scalar": lambda m: [np.float16(1)],
    "numpy_int32_scalar": lambda m: [np.int32(1)],
    "numpy_int32_with_int": lambda m: [np.int32(2), 1],
    "numpy_int32_with_float": lambda m: [np.int32(2), 1.5],
    "float_with_numpy_float32": lambda m: [1.5, np.float32(2)],
    "int_with_numpy_float32": lambda m: [1, np.float32(2)],
    "numpy_float64_with_int": lambda m: [np.float64(1), 2],
    "numpy_int8_with_uint8": lambda m: [np.uint8(1), np.int8(-1)],
    "numpy_int16_with_float16": lambda m: [np.ones(2, np.float16), np.ones(2, np.int16)],
    "numpy_bool_with_int32": lambda m: [True, np.int32(1)],
    "int_with_numpy_complex64": lambda m: [1, np.complex64(1)],
    "numpy_array_then_list": lambda m: [np.ones(2, np.float32), [1.5, 2]],
    "numpy_scalar_alone": lambda m: np.float64(1.5),
    "python_floats": lambda m: [[1, 2.5], [3, 4]],
    "empty": lambda m: [[], []],
    "range": lambda m: [range(2), range(2)],
    "one_element_tensors": lambda m: [m.tensor([1.0]), m.tensor([[2.0]]), m.tensor(3.0)],
    "one_element_int_tensor_with_int": lambda m: [m.tensor(np.array([1], np.int32)), 2],
    "big_int_as_float": lambda m: [2 ** 63, 1.5],
}


@pytest.mark.parametrize("default", ["float32", "float64"])
@pytest.mark.parametrize("case", list(INFERRED))
def test_tensor_infers_torchs_dtype_from_python_and_numpy_values(case, default):
    L.set_default_dtype(default)
    torch.set_default_dtype(_torch_dtype(default))
    try:
        _same(L.tensor(INFERRED[case](L)), torch.tensor(INFERRED[case](torch)))
    finally:
        L.set_default_dtype("float32")
        torch.set_default_dtype(torch.float32)


# (data for torch.tensor made per library, the text our error must hold)
REFUSED = {
    "int_above_int64": (lambda m: [2 ** 63], "9223372036854775808"),
    "int_below_int64": (lambda m: [-2 ** 63 - 1], "-9223372036854775809"),
    "int_above_int64_alone": (lambda m: 2 ** 63, "9223372036854775808"),
    "string_first": (lambda m: ["a"], "'a'"),
    "string_later": (lambda m: [1, "a"], "'a'"),
    "string_alone": (lambda m: "a", "'a'"),
    "string_first_of_rows": (lambda m: [["a"], [1]], "'a'"),
    "none": (lambda m: None, "NoneType"),
    "none_in_list": (lambda m: [1, None], "NoneType"),
    "none_in_rows": (lambda m: [[1, 2], [3, None]], "NoneType"),
    "set": (lambda m: {1, 2}, "set"),
    "dict": (lambda m: {1: 2}, "dict"),
    "bytes": (lambda m: b"ab", "bytes"),
    "bytes_in_list": (lambda m: [b"ab"], "bytes"),
    "object": (lambda m: [object()], "object"),
    "numpy_uint64": (lambda m: [np.uint64(3)], "uint64"),
    "numpy_date": (lambda m: [np.datetime64("2020-01-01")], "datetime64"),
    "numpy_0d_array_in_list": (lambda m: [np.array(1.5)], "0-d"),
    "many_element_tensor": (lambda m: [m.tensor([1.0, 2.0])], "only one element tensors"),
    "numpy_strings": (lambda m: np.array(["a"]), "np.ndarray of type"),
    "numpy_objects": (lambda m: np.array([object()]), "np.ndarray of type"),
    "numpy_dates": (lambda m: np.array(["2020-01-01"], "datetime64[D]"), "np.ndarray of type"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_tensor_refuses_what_torch_refuses_with_its_kind_of_error(case):
    data, names = REFUSED[case]
    _raises_as_torch(lambda: L.tensor(data(L)), lambda: torch.tensor(data(torch)), names)


def test_a_given_dtype_still_refuses_a_non_number_as_torch():
    for data in ([1.5, None], [1, {1}]):
        _raises_as_torch(lambda: L.tensor(data, dtype=np.float64),
                         lambda: torch.tensor(data, dtype=torch.float64), type(data[1]).__name__)
    _same(L.tensor([2 ** 63], dtype=np.float32), torch.tensor([2 ** 63], dtype=torch.float32))


# ---- arange ------------------------------------------------------------------------------------

ARANGE = [(0, 5, 1.5), (-2.5, 2.5, 1), (0, 5, 2.5), (0.5, 3.7, 1), (-0.9, -3.9, -1),
          (0, -3.5, -1.5), (0.5, 0.7, 1), (1, 10, 2.9), (-3.7, 3.7, 2.2), (0, 300, 100),
          (3, 10, 2), (10, -3, -4)]


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "int8", "float32", "float64"])
@pytest.mark.parametrize("args", ARANGE, ids=str)
def test_arange_with_an_integer_dtype_truncates_its_arguments_as_torch(args, dtype):
    _same(L.arange(*args, dtype=dtype), torch.arange(*args, dtype=_torch_dtype(dtype)))


@pytest.mark.parametrize("args", [(True,), (0, True), (0, 5, True), (False, 3),
                                  (np.bool_(True),), (np.int32(3),), (np.float32(3),)], ids=str)
def test_arange_infers_int64_as_torch(args):
    """Python bools are ints to torch's arange; NumPy's bool is not."""
    _same(L.arange(*args), torch.arange(*args))


@pytest.mark.parametrize("args,dtype,names", [
    ((0, 1, 0.3), "int64", "step"), ((0, 5, 0.5), "int64", "step"),
    ((0, 5), "bool", "bool"), ((float("nan"), 3), None, "nan"), ((0, float("inf")), None, "inf"),
    ((0, 1e20, 1), "int64", "1e+20")], ids=str)
def test_arange_refuses_as_torch(args, dtype, names):
    _raises_as_torch(lambda: L.arange(*args, dtype=dtype),
                     lambda: torch.arange(*args, dtype=dtype and _torch_dtype(dtype)), names)


# ---- init --------------------------------------------------------------------------------------

DRAWING = ["uniform_", "normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
@pytest.mark.parametrize("fn", DRAWING)
def test_an_initialiser_refuses_an_integer_tensor_as_torch(fn, dtype):
    _raises_as_torch(lambda: getattr(L.init, fn)(L.zeros(3, 4, dtype=dtype)),
                     lambda: getattr(tinit, fn)(torch.zeros(3, 4, dtype=_torch_dtype(dtype))),
                     dtype)


@pytest.mark.parametrize("fn", DRAWING)
def test_an_initialiser_of_a_zero_element_tensor_is_torchs(fn):
    """torch's normal_ / kaiming_* / orthogonal_ take an empty integer tensor (nothing drawn);
    its uniform_ refuses it."""
    def call(m, init):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(init, fn)(m.zeros(0, 4, dtype=m.int64 if m is torch else "int64"))
    try:
        theirs = call(torch, tinit)
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            call(L, L.init)
        return
    _same(call(L, L.init), theirs)


@pytest.mark.parametrize("fn,args,names", [
    ("normal_", (0.0, float("nan")), "nan"), ("normal_", (0.0, -1.0), "-1"),
    ("uniform_", (3.0, -2.0), "from=3"), ("uniform_", (float("nan"), 1.0), "nan"),
    ("uniform_", (0.0, float("inf")), "inf")], ids=str)
def test_an_initialisers_bad_arguments_are_refused_as_torch(fn, args, names):
    _raises_as_torch(lambda: getattr(L.init, fn)(L.zeros(2), *args),
                     lambda: getattr(tinit, fn)(torch.zeros(2), *args), names)


@pytest.mark.parametrize("nonlinearity,param", [
    ("conv3d", None), ("conv_transpose1d", None), ("conv_transpose3d", None),
    ("leaky_relu", 1), ("leaky_relu", 0.2), ("leaky_relu", np.float64(0.3)),
    ("leaky_relu", True), ("leaky_relu", np.float32(0.3)), ("leaky_relu", "x"),
    ("leaky_relu", np.int64(2)), ("Linear", None)], ids=str)
def test_calculate_gain_is_torchs(nonlinearity, param):
    try:
        theirs = tinit.calculate_gain(nonlinearity, param)
    except ValueError:
        _raises_as_torch(lambda: L.init.calculate_gain(nonlinearity, param),
                         lambda: tinit.calculate_gain(nonlinearity, param),
                         str(param if nonlinearity == "leaky_relu" else nonlinearity))
        return
    assert L.init.calculate_gain(nonlinearity, param) == pytest.approx(theirs, rel=1e-15)


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
def test_kaiming_mode_is_read_as_torch(fn):
    """torch lower-cases the mode ('FAN_OUT' is fan_out), and returns a zero-element tensor
    before looking at the mode."""
    for mode in ("FAN_OUT", "Fan_In"):
        assert getattr(L.init, fn)(L.zeros(4, 4), mode=mode).shape == \
            tuple(getattr(tinit, fn)(torch.zeros(4, 4), mode=mode).shape)
    with pytest.warns(UserWarning, match="zero-element"):
        assert getattr(L.init, fn)(L.zeros(0, 4), mode="bad").shape == (0, 4)
    with pytest.warns(UserWarning, match="zero-element"):
        getattr(tinit, fn)(torch.zeros(0, 4), mode="bad")
    _raises_as_torch(lambda: getattr(L.init, fn)(L.zeros(4, 4), mode="bad"),
                     lambda: getattr(tinit, fn)(torch.zeros(4, 4), mode="bad"), "bad")


@pytest.mark.parametrize("call,names", [
    (lambda m: m.zeros(), '"size"'), (lambda m: m.rand(), '"size"'),
    (lambda m: m.randint(5, 3), "'size'"),
    (lambda m: m.full((2,), 1e40), "1e+40"),
    (lambda m: m.full((2,), 7e4, dtype=m.float16), "70000.0"),
    (lambda m: m.full_like(m.zeros(1), -1e40), "-1e+40"),
    (lambda m: m.full((2,), -256, dtype=m.uint8), "-256"),
    (lambda m: m.full((2,), 128, dtype=m.int8), "128"),
    (lambda m: m.tensor([1, 300], dtype=m.uint8), "300"),
    (lambda m: m.zeros(2, dtype=m.uint8).fill_(256), "256"),
    (lambda m: m.full_like(m.zeros(2, dtype=m.int16), -40000), "-40000")])
def test_creation_refuses_what_torch_refuses(call, names):
    _raises_as_torch(lambda: call(L), lambda: call(torch), names)


def test_creation_takes_what_torch_takes_at_those_edges():
    for call in (lambda m: m.zeros(()), lambda m: m.full((2,), 1e40, dtype=m.float64),
                 lambda m: m.full((1,), float("inf")), lambda m: m.full_like(m.zeros(1), 6e4,
                                                                           dtype=m.float16)):
        ours, theirs = call(L), call(torch)
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(np.asarray(ours.numpy(), np.float64),
                                      theirs.double().numpy())


@pytest.mark.parametrize("call", [
    lambda m: m.full((2,), -255, dtype=m.uint8), lambda m: m.tensor([-1, 2], dtype=m.uint8),
    lambda m: m.zeros(2, dtype=m.uint8).fill_(-3),
    lambda m: m.full_like(m.zeros(2, dtype=m.uint8), -1),
    lambda m: m.full((2,), -128, dtype=m.int8), lambda m: m.full((1,), True, dtype=m.uint8)])
def test_a_negative_integer_fill_wraps_in_an_unsigned_dtype_as_torch(call):
    """torch takes negatives down to -max in an unsigned dtype, as two's complement (-1 is 255
    in uint8), and refuses what lies further out (above)."""
    _same(call(L), call(torch))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
def test_a_python_int_meeting_an_integer_tensor_is_cast_to_its_dtype_as_torch(dtype):
    """torch casts the int to the tensor's dtype, wrapping: uint8 + 300 adds 44, uint8 > -1
    compares with 255, int8 % 200 divides by -56 (NumPy 2 raises OverflowError instead)."""
    a = np.array([100, 3, 7], dtype)
    for n in (300, -3, -1, 356, 200, 70000, 2 ** 40 + 5, -2 ** 31 - 7):
        for op in ("+", "-", "*", "<", ">", "==", "%", "//"):
            if op in ("%", "//") and n % 2 ** (8 * a.itemsize) == 0:
                continue                            # (a divisor that wraps to 0)
            ours, theirs = eval(f"L.tensor(a) {op} n"), eval(f"torch.from_numpy(a) {op} n")
            _same(ours, theirs)
            _same(eval(f"n {op} L.tensor(a)") if op in "+-*" else ours,
                  eval(f"n {op} torch.from_numpy(a)") if op in "+-*" else theirs)


STORED = [("u.clamp(max=300)", "clamp()"), ("u.clamp(min=-1)", ""),
          ("u.masked_fill(u > 5, 300)", "masked_fill()"), ("u.masked_fill(u > 5, -1)", ""),
          ("M.where(u > 5, u, -1)", ""), ("M.where(u > 5, 300, u)", "where()"),
          ("(lambda v: (v.__setitem__(0, 300), v)[1])(u.clone())", "x[...] = value"),
          ("(lambda v: (v.__setitem__(0, -1), v)[1])(u.clone())", ""),
          ("u.clone().__iadd__(300)", ""), ("u.clone().__imul__(-3)", ""), ("u / 300", ""),
          ("300 / u", "")]


@pytest.mark.parametrize("expr, name", STORED)
def test_a_python_int_stored_into_an_integer_tensor_is_checked_as_torch(expr, name):
    """A value stored (clamp's bounds, masked_fill, where, x[i] = v) is checked, as torch's:
    -1 into uint8 is 255, 300 refused, naming the function; in-place arithmetic casts, as the
    operators do; true division takes the int as it is."""
    a = np.array([100, 3, 7], np.uint8)
    ours, theirs = _outcomes(expr, dict(M=L, u=L.tensor(a.copy())),
                             dict(M=torch, u=torch.from_numpy(a.copy())))
    if isinstance(theirs, str):
        assert isinstance(ours, str) and ours.startswith(f"{name}: value 300 cannot be "
                                                         f"converted to type uint8"), ours
    else:
        _same(ours, theirs)


@pytest.mark.parametrize("expr", [
    "M.tensor([1, 2]) == 2 ** 64 + 1", "M.tensor([1, 2]) + 2 ** 64", "U + 2 ** 64",
    "U + (-2 ** 63 - 1)", "M.full((2,), 2 ** 64, dtype=M.int8)",
    "M.zeros(2, dtype=M.int8).fill_(2 ** 64)", "M.tensor([-1, 5], dtype=np.uint64)"])
def test_an_int_beyond_64_bits_is_an_overflow_error_as_torch(expr):
    """torch takes no Python int outside [-2**63, 2**64), wrapped or not (nor a negative into a
    uint64 tensor()): OverflowError, where a wrap would be silently wrong."""
    u = np.array([100, 3, 7], np.uint8)
    for M, U in ((L, L.tensor(u)), (torch, torch.from_numpy(u))):
        if M is torch:
            expr = expr.replace("dtype=np.uint64", "dtype=torch.uint64")
        with pytest.raises(OverflowError):
            eval(expr)


@pytest.mark.parametrize("expr", [
    "U > np.int64(-1)", "U.clamp(min=np.int64(-1))", "U + np.int64(300)", "np.int64(300) - U",
    "(lambda v: (v.__setitem__(0, np.int64(-1)), v)[1])(U.clone())"])
def test_a_numpy_int_meeting_an_integer_tensor_is_a_python_ints_as_torch(expr):
    u = np.array([100, 3, 7], np.uint8)
    _same(*(eval(expr) for M, U in ((L, L.tensor(u.copy())), (torch, torch.from_numpy(u.copy())))))


@pytest.mark.parametrize("expr", [
    "U.clone().sub_(1, alpha=-1)", "U.clone().add_(U, alpha=-1)", "300 ** U", "(-1) ** U",
    "U ** 300", "U ** -1", "U ** 2", "U.scatter(0, I, value=-1)", "U.scatter(0, I, value=300)",
    "M.tensor([2, 3]) ** -1", "M.tensor([True, False]) ** 2", "M.tensor([True]) ** -1",
    "U.clone().add_(2, alpha=3)"])
def test_powers_alphas_and_scattered_values_take_ints_as_torch(expr):
    """A base meeting an integer exponent tensor is cast (300 ** uint8 takes 44), an exponent
    of integer data checked (300 refused, a negative one refused in torch's words), add_ /
    sub_'s alpha cast (-1 on uint8 is 255), scatter's value checked; bool ** 2 is int64."""
    u = np.array([100, 3, 7], np.uint8)
    ours, theirs = _outcomes(expr, dict(M=L, U=L.tensor(u.copy()), I=L.tensor(np.array([0, 2]))),
                             dict(M=torch, U=torch.from_numpy(u.copy()), I=torch.tensor([0, 2])))
    if isinstance(theirs, str):
        assert isinstance(ours, str), ours
    else:
        _same(ours, theirs)


FLOATS_STORED = [
    # floats into integer data: truncated toward zero; NaN, inf and values outside the dtype's
    # range (before truncating) refused -- NumPy would store -1.0 into uint8 as 255
    "M.full((2,), -1.0, dtype=M.uint8)", "M.full((2,), 2.7, dtype=M.uint8)",
    "M.full((2,), -0.5, dtype=M.uint8)", "M.full((2,), 255.5, dtype=M.uint8)",
    "M.full((2,), float('nan'), dtype=M.int32)", "M.full((2,), float('inf'), dtype=M.int64)",
    "M.full((2,), 1e19, dtype=M.int64)", "M.full_like(U, -1.0)",
    "U.clone().fill_(-1.0)", "U.clone().fill_(np.float32(-1))", "S.clone().fill_(-2.7)",
    "S.clone().fill_(127.9)", "S.clone().fill_(-128.5)",
    "(lambda v: (v.__setitem__(0, -1.0), v)[1])(U.clone())",
    "(lambda v: (v.__setitem__(slice(None), 2.5), v)[1])(U.clone())",
    "(lambda v: (v.__setitem__(0, float('nan')), v)[1])(U.clone())",
    "U.masked_fill(U > 5, -1.0)", "U.masked_fill(U > 5, 2.5)", "U.scatter(0, I, -0.5)",
    "U.scatter(0, I, 2.7)", "M.tensor([-1.0, 2.0], dtype=M.uint8)",
    "M.tensor([2.7, 3], dtype=M.uint8)", "M.tensor([float('nan')], dtype=M.int32)",
    "M.tensor(-0.5, dtype=M.uint8)", "M.tensor([[1.5], [300.0]], dtype=M.uint8)",
    "M.tensor([1.5, 2 ** 63 - 1], dtype=M.int64)", "M.tensor([2 ** 63 - 1, -0.5], dtype=M.int64)",
    "M.zeros(2, dtype=M.bool).fill_(-1.0)", "M.full((2,), float('nan'), dtype=M.bool)",
    "M.zeros(2, dtype=M.bool).masked_fill(M.tensor([True, False]), 2.5)",
    "U.masked_fill(U > 5, M.tensor(-1.0))", "U.masked_fill(U > 5, M.tensor(2.5))",
    "U.masked_fill(U > 5, M.tensor(300))", "U.masked_fill(U > 5, M.tensor(-1))",
    "H.masked_fill(H > 0, M.tensor(7e4))", "H.masked_fill(H > 0, M.tensor(3))",
    # a finite value a floating dtype rounds to infinity: refused where torch refuses it
    "H.clone().fill_(70000.0)", "M.full((2,), 1e39)", "H.clamp(max=70000.0)",
    "H.clamp(min=-70000)", "H.masked_fill(H > 0, 70000.0)", "H.scatter(0, I, -7e4)",
    "H.clone().fill_(float('inf'))", "H.masked_fill(H >= 0, float('-inf'))",
    "M.full((2,), 65504.0, dtype=M.float16)", "H.clamp(max=float('inf'))",
    "M.full((2,), 65510.0, dtype=M.float16)", "H.clamp(max=65510.0)", "M.full((2,), 3.40282356e38)",
    "(lambda v: (v.__setitem__(0, 1e39), v)[1])(M.zeros(2))",
    "(lambda v: (v.__setitem__(0, 1e39), v)[1])(M.zeros(2, dtype=M.float64))",
    "M.where(M.zeros(2) > 0, M.zeros(2), 1e39)", "M.where(H > 0, 1e39, H)",
    "M.where(U > 5, U, 1e39)", "M.where(U > 5, 1e39, U)", "M.where(U > 5, U > 6, 1e39)",
    "M.where(U > 5, 1e39, 1.0)", "M.where(U > 5, 1.0, 1e39)", "M.where(U > 5, 1e39, 1)",
    "M.tensor([np.array([-1.0, 2.0])], dtype=M.uint8)",
    "M.tensor([np.array([float('nan'), 2.0])], dtype=M.int64)",
    "M.tensor([np.int64(300), 2.5], dtype=M.uint8)", "M.tensor([np.int64(300), 2], dtype=M.uint8)",
    "M.tensor([np.array([300, 2]), [1.5, 2]], dtype=M.uint8)",
    "M.tensor([np.int64(-1), 2], dtype=M.uint8)", "M.tensor([M.tensor(300)], dtype=M.uint8)",
    "M.where(H > 0, H, 7e4)", "(lambda v: (v.__setitem__(0, 7e4), v)[1])(H.clone())",
    "M.tensor([7e4], dtype=M.float16)"]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")   # (NumPy's, storing inf)
@pytest.mark.parametrize("expr", FLOATS_STORED)
def test_a_float_stored_is_truncated_or_refused_as_torch(expr):
    """A Python (or NumPy) float stored into a tensor (full, fill_, x[i] = v, masked_fill,
    scatter, tensor(dtype=), clamp's bound) gives torch's value or torch's refusal, never a
    silently wrong value; our error names the function and the value."""
    ours, theirs = _outcomes(expr, *(dict(
        M=M, U=M.tensor(np.array([100, 3, 7], np.uint8)), S=M.tensor(np.array([1, 2], np.int8)),
        H=M.tensor(np.array([1.0, 0.0], np.float16)), I=M.tensor(np.array([0])))
        for M in (L, torch)))
    if isinstance(theirs, str):
        assert isinstance(ours, str) and "cannot be converted to type" in ours and \
            re.match(r"[\w\[\]. =_]+\(?\)?: value [-\w.+]+ cannot", ours), ours
    else:
        _same(ours, theirs)


def test_masked_fill_takes_a_0d_tensor_value_in_the_tensors_dtype_with_its_gradient():
    """torch's masked_fill keeps x's dtype for a 0-d Tensor value of another dtype, sends the
    masked positions' gradient to the value, and refuses a value of more dimensions."""
    grads = []
    for M in (L, torch):
        v = M.tensor(2.0, requires_grad=True)
        y = M.zeros(3, dtype=M.float16).masked_fill(M.tensor([True, False, True]), v)
        assert str(y.dtype).endswith("float16")
        (y * M.tensor(np.array([1.0, 5.0, 3.0], np.float16))).sum().backward()
        grads.append(float(v.grad))
        with pytest.raises(RuntimeError, match="only supports a 0-dimensional value tensor"):
            M.zeros(2).masked_fill(M.tensor([True, False]), M.tensor([1.0]))
    assert grads == [4.0, 4.0]


def test_masked_fill_in_place_with_a_value_that_requires_grad_is_refused_not_dropped():
    """torch records x.masked_fill_(mask, v) for a v that requires grad; this engine changes no
    tensor in place inside a recorded graph, so it refuses, where the value's gradient was
    dropped silently."""
    v = L.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="masked_fill_"):
        L.zeros(3).masked_fill_(L.tensor([True, False, True]), v)
    with L.no_grad():
        y = L.zeros(3).masked_fill_(L.tensor([True, False, True]), v)
    np.testing.assert_array_equal(y.numpy(), [2.0, 0.0, 2.0])

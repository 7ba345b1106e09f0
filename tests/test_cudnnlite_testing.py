"""cudnnlite.testing and tools.check_conv with no GPU: good set-ups pass, bad ones are caught with
cuDNN's own status and the function that refused them, and every assert fails when the spec and
the descriptors disagree."""
import pytest
from hypothesis import given, settings, strategies as st

import cudnnlite as cl
from cudnnlite import testing
from cudnnlite.testing import ConvSpec
from tools import check_conv

GOOD = [
    ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), pad=1),
    ConvSpec((2, 3, 9, 7), (4, 3, 3, 2), pad=(1, 0), stride=(2, 3), layout="NHWC"),
    ConvSpec((1, 8, 16, 16), (6, 2, 3, 3), pad=2, dilation=2, groups=4),
    ConvSpec((2, 4, 6, 6, 6), (2, 4, 3, 3, 3), pad=(1, 0, 1), stride=2),         # 3-d
    ConvSpec((2, 16, 8, 8), (16, 16, 1, 1), layout="NHWC", dtype="float16",
             math_type=cl.MathType.TENSOR_OP),
    ConvSpec((1, 2, 5, 5), (3, 2, 3, 3), dtype="float64"),                       # DOUBLE compute
    ConvSpec((1, 2, 5, 5), (3, 2, 3, 3), mode=cl.ConvMode.CONVOLUTION, math_type=cl.MathType.FMA),
    ConvSpec((1, 128, 16, 16), (256, 128, 2, 2), stride=2, layout="NHWC"),      # the forum's dgrad
]


@pytest.mark.parametrize("spec", GOOD)
def test_good_setups_pass(spec):
    descs = testing.assert_descriptors(spec)
    assert testing.assert_output_shape(spec) == descs.y.dims == testing.expected_output_shape(spec)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 3),
       st.integers(1, 3), st.integers(1, 2), st.integers(5, 12),
       st.sampled_from(["NCHW", "NHWC"]), st.sampled_from(["float32", "float16", "float64"]))
def test_closed_form_equals_cudnn(groups, cg, kg, pad, stride, dilation, size, layout, dtype):
    spec = ConvSpec((2, groups * cg, size, size + 1), (groups * kg, cg, 3, 2), pad, stride,
                    dilation, groups, layout, dtype)
    testing.assert_descriptors(spec)
    testing.assert_output_shape(spec)


# (spec, the error cuDNN gives, the C function that gives it, a regex its message matches)
BAD = [
    (ConvSpec((2, 6, 8, 8), (4, 4, 3, 3), groups=2), cl.BadParam,           # 2 x 4 channels != 6
     "cudnnGetConvolutionNdForwardOutputDim", r"dimA\[1\] != convDesc->groupCount"),
    (ConvSpec((2, 3, 8, 8), (4, 6, 3, 3)), cl.BadParam,                       # filter C > x's C
     "cudnnGetConvolutionNdForwardOutputDim", r"groupCount \* filterDesc"),
    (ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), pad=(-1, 0)), cl.BadParam,
     "cudnnSetConvolutionNdDescriptor", "padding.* is negative"),
    (ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), stride=(1, 0)), cl.BadParam,
     "cudnnSetConvolutionNdDescriptor", r"stride\[1\] = 0 must be > 0"),
    (ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), dilation=0), cl.BadParam,
     "cudnnSetConvolutionNdDescriptor", "dilation"),
    (ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), groups=0), cl.BadParam,
     "cudnnSetConvolutionGroupCount", "group count must be >= 1"),
    (ConvSpec((2, 3, 8, 8, 8), (4, 3, 3, 3)), cl.BadParam,                    # 5-d x, 4-d W
     "cudnnGetConvolutionNdForwardOutputDim", "nbDims != filterDesc->nbDims"),
    (ConvSpec((1, 1, 2, 2), (1, 1, 5, 5)), cl.BadParam,                       # kernel > padded x
     "cudnnGetConvolutionNdForwardOutputDim", "dims=\\(1, 1, 5, 5\\)"),
    (ConvSpec((0, 3, 8, 8), (4, 3, 3, 3)), cl.BadParam,
     "cudnnSetTensorNdDescriptor", "invalid size 0"),
    (ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), dtype="complex64"), cl.NotSupportedDataType,
     "cudnnSetTensorNdDescriptor", "no cuDNN data type for complex64"),
]


@pytest.mark.parametrize("spec,error,function,match", BAD)
def test_bad_setups_rejected_with_cudnns_status(spec, error, function, match):
    e = testing.assert_rejected(spec, error, match=match, function=function)
    assert type(e) is error and e.function == function


def test_rejected_by_exact_status():
    e = testing.assert_rejected(BAD[0][0], cl.Status.BAD_PARAM)
    assert e.status == cl.Status.BAD_PARAM


def test_pad_of_the_wrong_length_rejected():
    testing.assert_rejected(ConvSpec((2, 3, 8, 8), (4, 3, 3, 3), pad=(1, 1, 1)), cl.BadParam,
                            function="cudnnSetConvolutionNdDescriptor", match="differ in length")


# ---- the asserts fail when they should ----------------------------------------------------------

def test_assert_rejected_fails_when_cudnn_accepts():
    with pytest.raises(AssertionError, match="cuDNN accepted the set-up, expected BadParam"):
        testing.assert_rejected(GOOD[0], cl.BadParam)


@pytest.mark.parametrize("kwargs,message", [
    (dict(error=cl.NotSupported), "expected NotSupported, got BadParam"),
    (dict(error=cl.Status.BAD_PARAM_SHAPE_MISMATCH),
     "expected CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, got BadParam"),
    (dict(error=cl.BadParam, function="cudnnSetConvolutionNdDescriptor"),
     "expected it from cudnnSetConvolutionNdDescriptor, got BadParam .* from "
     "cudnnGetConvolutionNdForwardOutputDim"),
    (dict(error=cl.BadParam, match="negative"), "'negative' not found"),
])
def test_assert_rejected_fails_on_another_error(kwargs, message):
    with pytest.raises(AssertionError, match=message):
        testing.assert_rejected(BAD[0][0], **kwargs)


SPEC = ConvSpec((2, 4, 8, 8), (6, 2, 3, 3), pad=1, stride=2, dilation=1, groups=2)


@pytest.mark.parametrize("other,fields", [
    (dict(dtype="float16"), ["x data type", "w data type", "y data type"]),
    (dict(layout="NHWC"), ["x strides", "w format", "y strides"]),
    (dict(x=(2, 4, 9, 8)), ["x dims", "x strides"]),
    (dict(w=(6, 4, 3, 3), groups=1), ["w dims", "conv groups"]),
    (dict(pad=0), ["conv pad", "y dims"]),
    (dict(stride=1), ["conv stride", "y dims"]),
    (dict(dilation=2), ["conv dilation", "y dims"]),
    (dict(mode=cl.ConvMode.CONVOLUTION), ["conv mode"]),
    (dict(math_type=cl.MathType.FMA), ["conv math type"]),
    (dict(compute_type=cl.DataType.DOUBLE), ["conv compute type"]),
])
def test_assert_descriptors_names_each_disagreement(other, fields):
    descs = testing.build(SPEC.__class__(**{**SPEC.__dict__, **other}))
    with pytest.raises(AssertionError) as e:
        testing.assert_descriptors(SPEC, descs)
    for field in fields:
        assert f"\n  {field}: cuDNN holds" in str(e.value)


def test_assert_descriptors_checks_your_own_descriptors():
    x = cl.TensorDescriptor(SPEC.x)                               # packed NCHW: right
    w = cl.FilterDescriptor(SPEC.w, "float32", "NHWC")            # wrong format
    testing.assert_descriptors(SPEC, (x, None, None, None))
    with pytest.raises(AssertionError,
                       match="w format: cuDNN holds TensorFormat.NHWC, the spec says "
                             "TensorFormat.NCHW"):
        testing.assert_descriptors(SPEC, (x, w, None, None))


def test_assert_output_shape_fails_on_a_wrong_expectation():
    with pytest.raises(AssertionError,
                       match=r"cudnnGetConvolutionNdForwardOutputDim gives \(2, 6, 4, 4\), "
                             r"expected \(2, 6, 3, 3\)"):
        testing.assert_output_shape(SPEC, (2, 6, 3, 3))


def test_algorithms_say_a_device_is_needed(monkeypatch):
    def no_device():
        raise cl.NotInitialized("cudnnCreate", {}, "no CUDA device is visible (test)")
    monkeypatch.setattr("cudnnlite.handle.get_handle", no_device)
    with pytest.raises(cl.NotInitialized,
                       match="cudnnlite.testing.algorithms needs a CUDA device: no CUDA device"):
        testing.algorithms(GOOD[0])


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [GOOD[0], GOOD[1], GOOD[7]])
def test_algorithms_list_each_direction(spec):
    rows = testing.algorithms(spec)
    for direction in ("fwd", "bwd-data", "bwd-filter"):
        usable = [r for r in rows if r.direction == direction and r.status == "SUCCESS"]
        assert usable and all(r.workspace >= 0 for r in usable), rows


# ---- python -m tools.check_conv -----------------------------------------------------------------

@pytest.mark.parametrize("layout", ["NHWC", "nhwc"])
def test_check_conv_prints_the_read_back(capsys, layout):
    assert check_conv.main(["--input", "2", "3", "8", "8", "--filter", "4", "3", "3", "3",
                            "--pad", "1", "--layout", layout]) == 0
    out = capsys.readouterr().out
    assert "W     FilterDescriptor(FLOAT, NHWC, dims=(4, 3, 3, 3))" in out
    assert "y     TensorDescriptor(FLOAT, dims=(2, 4, 8, 8), strides=(256, 1, 32, 4))" in out
    assert "read back: every value equals the spec" in out
    assert "\nalgorithms" in out


def test_check_conv_bad_setup_exits_2(capsys):
    assert check_conv.main(["--input", "2", "6", "8", "8", "--filter", "4", "4", "3", "3",
                            "--groups", "2"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("rejected: cudnnGetConvolutionNdForwardOutputDim returned "
                          "CUDNN_STATUS_BAD_PARAM")
    assert "groups=2" in out


@pytest.mark.parametrize("tool", ["check_conv", "explain_transpose"])
def test_a_missing_cudnn_is_one_line_and_exit_2(tool, tmp_path):
    """With libcudnn not loadable (CUDNNLITE_LIBCUDNN naming a file that is not there), the
    cuDNN tools print the loader's one-line error -- where it looked, what to install -- and exit
    2, as every other command-line mistake, not a traceback."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, CUDNNLITE_LIBCUDNN=str(tmp_path / "libcudnn.so.9"))
    args = ["--input", "2", "3", "8", "8", "--filter", "4", "3", "3", "3"] \
        if tool == "check_conv" else []
    r = subprocess.run([sys.executable, "-m", f"tools.{tool}", *args], capture_output=True,
                       text=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: CUDNNLITE_LIBCUDNN=") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # --help needs no cuDNN (a CPU-only install, `pip install -e ".[train]"`, has none)
    r = subprocess.run([sys.executable, "-m", f"tools.{tool}", "--help"], capture_output=True,
                       text=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr


def test_check_conv_refuses_an_unknown_layout_as_a_flag_error(capsys):
    with pytest.raises(SystemExit) as e:
        check_conv.main(["--input", "2", "3", "8", "8", "--filter", "4", "3", "3", "3",
                         "--layout", "NCWH"])
    assert e.value.code == 2 and "--layout" in capsys.readouterr().err

"""A convolution set-up as cuDNN holds it: the descriptors read back, the output shape it computes
and, on a GPU, the algorithms it offers per direction. A rejected set-up prints cuDNN's status and
the function that refused it, and exits 2. Dims are in cuDNN's logical order, whatever the layout.

    python -m tools.check_conv --input 2 3 8 8 --filter 4 3 3 3 --pad 1 [--stride 1] [--dilation 1]
        [--groups 1] [--layout NCHW|NHWC] [--dtype float32] [--math default|tensor_op|fma]
"""
from train import cli

MATH = ["default", "tensor_op", "tensor_op_allow_conversion", "fma"]   # cudnnMathType_t's


def _cudnn():
    """(testing, MathType, Status, CudnnError, NotInitialized) from cudnnlite, imported after
    the flags are read (so --help needs no cuDNN); where libcudnn cannot be loaded, the loader's
    one line -- where it looked, what to install -- and exit 2."""
    try:
        from cudnnlite import testing
        from cudnnlite.enums import MathType, Status
        from cudnnlite.errors import CudnnError, NotInitialized
    except OSError as e:
        cli.fail(e)
    return testing, MathType, Status, CudnnError, NotInitialized


def _geometry(values):
    return values[0] if len(values) == 1 else tuple(values)


def algorithm_table(rows):
    lines = [f"  {'direction':<11}{'algorithm':<24}{'status':<24}{'workspace':>12}  "
             f"{'deterministic':<14}math"]
    lines += [f"  {r.direction:<11}{r.algo:<24}{r.status:<24}{r.workspace:>12,}  "
              f"{'yes' if r.deterministic else 'no':<14}{r.math_type}" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("--input", type=int, nargs="+", required=True, help="x dims: N C *spatial")
    ap.add_argument("--filter", type=int, nargs="+", required=True,
                    help="W dims: K C/groups *filter")
    ap.add_argument("--pad", type=int, nargs="+", default=[0])
    ap.add_argument("--stride", type=int, nargs="+", default=[1])
    ap.add_argument("--dilation", type=int, nargs="+", default=[1])
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--layout", default="NCHW", type=str.upper, choices=["NCHW", "NHWC"],
                    help="[NCHW]")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--math", default="default", choices=MATH)
    args = ap.parse_args(argv)
    testing, MathType, Status, CudnnError, NotInitialized = _cudnn()
    spec = testing.ConvSpec(tuple(args.input), tuple(args.filter), _geometry(args.pad),
                            _geometry(args.stride), _geometry(args.dilation), args.groups,
                            args.layout, args.dtype, math_type=MathType[args.math.upper()])
    try:
        descs = testing.build(spec)
    except CudnnError as e:
        status = e.status.name if isinstance(e.status, Status) else e.status
        print(f"rejected: {e.function} returned CUDNN_STATUS_{status}\n\n{e}")
        return 2
    for name, desc in zip(("x", "W", "conv", "y"), descs):
        print(f"{name:<5} {desc!r}")
    closed = testing.expected_output_shape(spec)
    print(f"\noutput dims (cudnnGetConvolutionNdForwardOutputDim): {descs.y.dims}; closed form "
          f"(in + 2p - d(k-1) - 1) // s + 1: {closed}")
    try:
        testing.assert_descriptors(spec, descs)
    except AssertionError as e:
        print(f"\n{e}")
        return 1
    print("read back: every value equals the spec")
    try:
        rows = testing.algorithms(spec)
    except NotInitialized as e:
        print(f"\nalgorithms: skipped ({e.detail})")
        return 0
    print(f"\nalgorithms cuDNN's heuristics offer (best first):\n{algorithm_table(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

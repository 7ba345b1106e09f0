"""One training step, one row per GPU kernel: the seeds' PyProf tables, for this engine.

    python -m tools.kernels dcgan --device 0 [--batch-size 128] [--conv-api graph|legacy]
                                  [--markdown F] [--csv F]
    python -m tools.kernels tacotron2 --device 0 [--text "In his defense."] [--markdown F] [--csv F]

Each row: index, direction (fprop / bprop / optimizer), layer path ('netD.main.2',
'model.decoder.attention_rnn'), op, the parameters in cuDNN's letters (N,C,H,W,K,P,Q,R,S, pads,
strides) or GEMM M,N,K, dtype, the cuDNN function and algorithm (or cuBLASLt / CuPy), the kernel's
name and its GPU time. Then totals by layer and direction, by op, and kernels per step.

How: the step runs under a layers.trace.Trace, which opens a scope for every op's forward, every
op's backward and every parameter's optimizer update. Each scope -- and each cuDNN call inside
it -- pushes a CUPTI external-correlation id; CUPTI's activity records (read with NVIDIA's
cupti-python) give every kernel, memcpy and memset with its GPU start / end and the id that was
pushed when it was launched. The same scopes are also pushed as NVTX ranges (`nvtx` package,
domain 'cudnnlite') for tools that read NVTX while CUPTI is in this process's hands. Steps before
the traced one warm up (algorithm choice, allocations, kernel compilation), so the table is a
steady-state step.
"""
import collections
import contextlib
import csv
import functools
import math
import shutil
import subprocess
import sys
import time

from train import cli

SEED_COUNTS = {   # the seeds' PyProf tables (PyTorch, V100): what the totals are compared with
    "dcgan": "~500 kernels per DCGAN training step (the PyProf table of PyTorch's DCGAN this "
             "project started from)",
    "tacotron2": "~12,000 kernels per second of audio for a Tacotron 2 step (the PyProf table of "
                 "NVIDIA's PyTorch Tacotron 2 this project started from)",
}


# ---- cuDNN calls: every compute entry point, wrapped while tracing ------------------------------

def _is_compute(name):
    """The calls a step's kernels come from (not set-up, queries or the algorithm search)."""
    return name.startswith("cudnn") and not name.startswith(
        ("cudnnGet", "cudnnCreate", "cudnnDestroy", "cudnnSet", "cudnnDerive", "cudnnFind",
         "cudnnBackendCreate", "cudnnBackendDestroy", "cudnnBackendSet", "cudnnBackendGet",
         "cudnnBackendFinalize"))


@contextlib.contextmanager
def cudnn_calls_recorded(on_call):
    """Replace each cuDNN compute function in cudnnlite.api, and cublasLtMatmul in
    cudnnlite.blas, by a wrapper that hands on_call(name, {argument: value}) the call before
    making it and is a context for it (the callers look the function up in their module at
    call time)."""
    from cudnnlite import api, blas
    saved = {}

    def wrap(name, fn):
        names = fn.arg_names

        @functools.wraps(fn, assigned=("__name__",), updated=())
        def wrapper(*args):
            with on_call(name, dict(zip(names, args))):
                return fn(*args)
        return wrapper

    for name in dir(api):
        fn = getattr(api, name)
        if _is_compute(name) and hasattr(fn, "arg_names"):
            saved[(api, name)] = fn
            setattr(api, name, wrap(name, fn))
    saved[(blas, "cublasLtMatmul")] = blas.cublasLtMatmul
    blas.cublasLtMatmul = wrap("cublasLtMatmul", blas.cublasLtMatmul)
    try:
        yield
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)


def _dims(d):
    return getattr(d, "dims", None)


def describe_call(name, args):
    """(parameters in cuDNN's letters, algorithm) of one recorded cuDNN call; ('', '') for a call
    it cannot read (describing must never stop the call itself)."""
    try:
        return _describe_call(name, args)
    except Exception:
        return "", ""


# what a graph-API plan's row says it computes (cudnnlite.conv sets plan.problem)
GRAPH_DIRECTIONS = {"cudnnConvolutionForward": "forward",
                    "cudnnConvolutionBackwardData": "backward-data",
                    "cudnnConvolutionBackwardFilter": "backward-filter"}


def _conv_params(x, w, y, pad, stride, dilation, groups):
    """A convolution in cuDNN's letters: N, C, H, W of x, K and the filter's R, S, the output's
    P, Q, then pad / stride (dilation and groups where not 1)."""
    if len(x) == 4:        # C from x: the filter's is C / groups
        letters = dict(zip("KCRS", w)) | dict(zip("NKPQ", y)) | dict(zip("NCHW", x))
        text = ",".join(f"{k}={letters[k]}" for k in "NCHWKPQRS")
    else:                  # 3-d: the shapes as they are
        text = f"x={'x'.join(map(str, x))} w={'x'.join(map(str, w))} y={'x'.join(map(str, y))}"
    return (text + f" pad={','.join(map(str, pad))} stride={','.join(map(str, stride))}"
            + ("" if all(d == 1 for d in dilation) else f" dil={','.join(map(str, dilation))}")
            + ("" if groups == 1 else f" groups={groups}"))


def _describe_call(name, args):
    from cudnnlite import enums
    if name == "cublasLtMatmul":
        return _describe_matmul(args)
    conv = args.get("convDesc")
    if conv is not None:
        if name == "cudnnConvolutionForward":
            x, w, y, algo = _dims(args["xDesc"]), _dims(args["wDesc"]), _dims(args["yDesc"]), \
                enums.ConvFwdAlgo(args["algo"]).name
        elif name == "cudnnConvolutionBackwardData":
            x, w, y, algo = _dims(args["dxDesc"]), _dims(args["wDesc"]), _dims(args["dyDesc"]), \
                enums.ConvBwdDataAlgo(args["algo"]).name
        else:
            x, w, y, algo = _dims(args["xDesc"]), _dims(args["dwDesc"]), _dims(args["dyDesc"]), \
                enums.ConvBwdFilterAlgo(args["algo"]).name
        return _conv_params(x, w, y, conv.pad, conv.stride, conv.dilation, conv.groups), \
            f"{algo} {conv.math_type.name}"
    if name == "cudnnBackendExecute":                  # a graph-API plan: its engine and notes,
        plan = args.get("executionPlan")              # and the convolution it was built for
        summary = getattr(plan, "summary", "")
        problem = getattr(plan, "problem", None)
        if problem is None:
            return "", summary
        what, x, w, y, (pad, stride, dilation, groups) = problem
        return (f"{GRAPH_DIRECTIONS.get(what, what)}: "
                + _conv_params(x, w, y, pad, stride, dilation, groups), summary)
    if name == "cudnnConvolutionBackwardBias":
        return ",".join(f"{k}={v}" for k, v in zip("NKPQ", _dims(args["dyDesc"]))), ""
    if name.startswith("cudnnBatchNormalization"):
        return (",".join(f"{k}={v}" for k, v in zip("NCHW", _dims(args["xDesc"]))),
                enums.BatchNormMode(args["mode"]).name)
    if name.startswith("cudnnActivation"):
        a = args["activationDesc"]
        return (",".join(f"{k}={v}" for k, v in zip("NCHW", _dims(args["xDesc"]))),
                a.mode.name)
    if name.startswith("cudnnRNN"):
        r, x = args["rnnDesc"], args["xDesc"]
        return (f"T={x.max_seq_length},N={len(x.seq_lengths)},C={x.vector_size},"
                f"hidden={r.hidden_size},layers={r.num_layers},dirs={r.directions}",
                f"{r.mode.name}")
    for key in ("aDesc", "yDesc", "xDesc", "cDesc"):
        if key in args and _dims(args[key]) is not None:
            return "x".join(map(str, _dims(args[key]))), ""
    return "", ""


def _describe_matmul(args):
    """M,N,K (and batch) of the row-major product y (M, N) = a (M, K) @ b (K, N) a cublasLtMatmul
    computes: cuBLAS's D is y transposed (cudnnlite.blas), and the matmul descriptor's
    epilogue and compute type."""
    from cudnnlite.blas import LayoutAttr, MatmulDescAttr, Op
    d, a, desc = args["Ddesc"], args["Adesc"], args["computeDesc"]
    N, M = d.get(LayoutAttr.ROWS), d.get(LayoutAttr.COLS)
    K = a.get(LayoutAttr.COLS) if desc.get(MatmulDescAttr.TRANSA) == Op.N \
        else a.get(LayoutAttr.ROWS)
    batch = d.get(LayoutAttr.BATCH_COUNT)
    setup = dict(desc.setup())
    return (f"M={M},N={N},K={K}" + (f" batch={batch}" if batch > 1 else ""),
            f"{setup['compute_type'].name} {setup['epilogue'].name}")


def describe_scope(scope):
    """Parameters of an op scope that made no cuDNN call: GEMM M,N,K for products, else shapes."""
    s = scope.shapes
    if scope.op == "Linear" and len(s) >= 2:        # x (..., K) @ W (N, K).T
        return f"M={math.prod(s[0][:-1])},N={s[1][0]},K={s[1][1]}", "cuBLASLt"
    if scope.op == "MatMul" and len(s) == 2 and len(s[0]) >= 2 and len(s[1]) >= 2:
        batch = math.prod(s[0][:-2]) if len(s[0]) > 2 else 1
        return (f"M={s[0][-2]},N={s[1][-1]},K={s[0][-1]}" + (f" batch={batch}" if batch > 1
                                                             else ""), "cuBLASLt")
    return " ".join("x".join(map(str, t)) for t in s), "CuPy"


# ---- CUPTI ----------------------------------------------------------------------------------------

class Cupti:
    """CUPTI activity records of kernels, memcpys and memsets with the external-correlation id
    each was launched under."""

    def __init__(self):
        from cupti import cupti
        self.cupti = cupti
        K = cupti.ActivityKind
        self.kinds = [K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET, K.EXTERNAL_CORRELATION,
                      K.DRIVER, K.RUNTIME]
        self.gpu = []          # (start, end, correlation id, name)
        self.external = {}     # correlation id -> external id
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)

    @staticmethod
    def _buffer_requested():
        return 8 * 1024 * 1024, 0

    def _buffer_completed(self, activities):
        K = self.cupti.ActivityKind
        for a in activities:          # the records live only as long as this callback: copy
            if a.kind == K.CONCURRENT_KERNEL:
                self.gpu.append((a.start, a.end, a.correlation_id, a.name))
            elif a.kind == K.MEMCPY:
                kind = self.cupti.ActivityMemcpyKind(a.copy_kind).name
                self.gpu.append((a.start, a.end, a.correlation_id, f"[memcpy {kind} {a.bytes} B]"))
            elif a.kind == K.MEMSET:
                self.gpu.append((a.start, a.end, a.correlation_id, f"[memset {a.bytes} B]"))
            elif a.kind == K.EXTERNAL_CORRELATION:
                self.external[a.correlation_id] = a.external_id

    def __enter__(self):
        for k in self.kinds:
            self.cupti.activity_enable(k)
        return self

    def __exit__(self, *exc):
        self.cupti.activity_flush_all(1)
        for k in self.kinds:
            self.cupti.activity_disable(k)

    def push(self, ident):
        self.cupti.activity_push_external_correlation_id(
            self.cupti.ExternalCorrelationKind.CUSTOM0, ident)

    def pop(self):
        self.cupti.activity_pop_external_correlation_id(self.cupti.ExternalCorrelationKind.CUSTOM0)


def _nvtx():
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


# ---- one traced step -------------------------------------------------------------------------------

Row = collections.namedtuple("Row", "index direction layer op params dtype function algo kernel "
                                    "us start")


def trace_step(step, models, sync):
    """Run step() once under a Trace with CUPTI and NVTX; rows sorted by GPU start time."""
    from layers.trace import Trace, Scope
    prof = Cupti()
    nvtx = _nvtx()
    segments = {}                     # external id -> (scope, call record or None)

    def enter(scope, call=None):
        ident = len(segments) + 1
        segments[ident] = (scope, call)
        prof.push(ident)
        if nvtx is not None:
            nvtx.push_range(f"{scope.direction} {scope.layer} {scope.op}" if call is None
                            else call["function"], domain="cudnnlite")

    def leave(_scope=None):
        prof.pop()
        if nvtx is not None:
            nvtx.pop_range(domain="cudnnlite")

    trace = Trace(models, on_enter=enter, on_exit=leave)
    outside = Scope(-1, "-", "", "(outside ops)")

    @contextlib.contextmanager
    def on_call(name, args):
        scope = trace.current or outside
        params, algo = describe_call(name, args)
        call = {"function": name, "params": params, "algo": algo}
        scope.calls.append(call)
        enter(scope, call)
        try:
            yield
        finally:
            leave()

    sync()
    with cudnn_calls_recorded(on_call), prof:
        enter(outside)
        with trace:
            step()
        sync()
        leave()
    rows = []
    for start, end, corr, name in sorted(prof.gpu):
        scope, call = segments.get(prof.external.get(corr), (outside, None))
        if call is not None:
            params, function, algo = call["params"], call["function"], call["algo"]
            params = params or describe_scope(scope)[0]
        else:
            params, function = describe_scope(scope)
            algo = ""
            if name.startswith("[mem"):
                function = "CUDA runtime"
        rows.append(Row(len(rows), scope.direction, scope.layer or "-", scope.op, params,
                        scope.dtype, function, algo, name, (end - start) / 1e3, start))
    return rows, trace.scopes


# ---- output ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _demangle_all(names):
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool:
        return dict(zip(names, names))
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout
    lines = out.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else dict(zip(names, names))


def short_kernel_name(name, width=90):
    """A kernel's demangled name without its template arguments and parameter list."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
            if depth == 1:
                out.append("<>" if ch == "<" else "")
            continue
        if ch in ">)":
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    text = "".join(out).replace("void ", "").strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def with_readable_names(rows):
    names = _demangle_all(tuple(sorted({r.kernel for r in rows})))
    return [r._replace(kernel=short_kernel_name(names[r.kernel])) for r in rows]


def busy_us(rows):
    """GPU-busy time: the union of the rows' [start, end) intervals, in µs."""
    total, cur_s, cur_e = 0, None, None
    for r in sorted(rows, key=lambda r: r.start):
        s, e = r.start, r.start + int(r.us * 1e3)
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1e3


def totals(rows, key):
    """{key: (kernels, µs)} in order of first appearance."""
    out = {}
    for r in rows:
        k = key(r)
        n, t = out.get(k, (0, 0.0))
        out[k] = (n + 1, t + r.us)
    return out


def top_layer(layer, depth=3):
    return ".".join(layer.split(".")[:depth])


def markdown(rows, title, notes, max_rows=None):
    lines = [f"# {title}", ""] + notes + [""]
    total_us = sum(r.us for r in rows)
    lines += ["## Totals by direction", "", "| direction | kernels | GPU time (µs) | share |",
              "| --- | ---: | ---: | ---: |"]
    for d, (n, t) in totals(rows, lambda r: r.direction).items():
        lines.append(f"| {d} | {n} | {t:.1f} | {100 * t / total_us:.1f} % |")
    lines += ["", "## Totals by layer and direction", "",
              "| layer | direction | kernels | GPU time (µs) |", "| --- | --- | ---: | ---: |"]
    for (layer, d), (n, t) in totals(rows, lambda r: (top_layer(r.layer), r.direction)).items():
        lines.append(f"| {layer} | {d} | {n} | {t:.1f} |")
    lines += ["", "## Totals by op and direction", "",
              "| op | direction | library | kernels | GPU time (µs) |",
              "| --- | --- | --- | ---: | ---: |"]
    by_op = totals(rows, lambda r: (r.op, r.direction, r.function))
    for (op, d, fn), (n, t) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {op} | {d} | {fn} | {n} | {t:.1f} |")
    shown = rows if max_rows is None else rows[:max_rows]
    lines += ["", "## Kernels" + ("" if len(shown) == len(rows) else
                                   f" (the first {len(shown)} of {len(rows)}; `--csv` has all)"),
              "", "| # | dir | layer | op | params | dtype | function | algo | kernel | µs |",
              "| ---: | --- | --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for r in shown:
        lines.append(f"| {r.index} | {r.direction} | {r.layer} | {r.op} | {r.params} | "
                     f"{r.dtype} | {r.function} | {r.algo} | `{r.kernel}` | {r.us:.1f} |")
    return "\n".join(lines) + "\n"


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(Row._fields[:-1])
        for r in rows:
            w.writerow([*r[:-2], f"{r.us:.3f}"])


# ---- the two jobs -----------------------------------------------------------------------------------

def dcgan_step(args):
    import cupy
    import layers as L
    from tools import workloads
    from train import dcgan
    G, D, oG, oD, real, finite = workloads.dcgan(args.device, args.batch_size, args.precision,
                                                 args.memory_format)
    real = L.Tensor(real)
    noise = L.Tensor(L.random.device_generator().normal((args.batch_size, 100, 1, 1)))

    def step():
        dcgan.train_step_device(G, D, oG, oD, real, noise, finite)
    info = [f"DCGAN (pytorch/examples' netG / netD, 1 channel, 64×64, nz=100, ngf=ndf=64), batch "
            f"{args.batch_size}: one training step of train.dcgan (D on real and fake, G, two Adam "
            f"updates, the on-device non-finite check); precision {args.precision}, "
            f"{args.memory_format}, convolutions through cuDNN's "
            + ("graph API (train.dcgan's default: each plan's row reads cudnnBackendExecute, "
               "with the convolution it computes and its engine)." if args.conv_api == "graph"
               else "legacy calls (train.dcgan --conv-api legacy).")]
    return step, {"netG": G, "netD": D}, cupy.cuda.get_current_stream().synchronize, info, None


def tacotron2_step(args):
    import cupy
    import layers as L
    from layers.finite import FiniteCheck
    from train.tacotron2 import HParams, Tacotron2, make_optimizer, train_step_device
    from train.common import set_precision
    from train.tacotron2 import audio, data
    hp = HParams()
    L.manual_seed(0)
    try:
        examples = data.overfit_dataset(args.text, batch_size=args.batch_size, hparams=hp)
    except data.DatasetError as e:
        cli.fail(f"--text {args.text!r}: {e}")
    b = data.collate(examples, hp.n_frames_per_step)
    model = Tacotron2(hp).to(args.device)
    set_precision([model], args.precision)
    opt = make_optimizer(model, master_weights=args.precision != "fp32")
    finite = FiniteCheck({"model": model}, every_call=False)   # as train.tacotron2's step
    batch = (L.backend.to_device(b.text_padded, args.device), b.input_lengths,
             L.backend.to_device(b.mel_padded, args.device),
             L.backend.to_device(b.gate_padded, args.device), b.output_lengths)

    def step():
        train_step_device(model, opt, batch, finite)
    frames = int(b.output_lengths[0])
    seconds = frames * audio.HOP / audio.SAMPLE_RATE
    info = [f"Tacotron 2 (NVIDIA's hparams), {args.text!r} ({int(b.input_lengths[0])} symbols, "
            f"{frames} mel frames = {seconds:.2f} s of audio; espeak-ng's speech) repeated to "
            f"batch {args.batch_size}: one teacher-forced training step of train.tacotron2 "
            f"(forward, loss, backward, clip_grad_norm, Adam, the non-finite check); precision "
            f"{args.precision}."]
    return step, {"model": model}, cupy.cuda.get_current_stream().synchronize, info, seconds


def _traced(args):
    """Warm the job's step up, time one untraced, trace one: (rows, scopes, wall ms, info,
    seconds of audio)."""
    make = dcgan_step if args.job == "dcgan" else tacotron2_step
    step, models, sync, info, seconds = make(args)
    for _ in range(args.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    wall_ms = (time.perf_counter() - t0) * 1e3
    rows, scopes = trace_step(step, models, sync)
    return rows, scopes, wall_ms, info, seconds


def main(argv=None):
    ap = cli.ArgumentParser(description=cli.description(__doc__))
    ap.add_argument("job", choices=["dcgan", "tacotron2"])
    ap.add_argument("--device", type=cli.device, default=0, help="GPU index [0]")
    ap.add_argument("--batch-size", type=cli.positive_int, default=None,
                    help="[128 for dcgan, 64 for tacotron2]")
    ap.add_argument("--text", default="In his defense.", help="tacotron2's sentence")
    ap.add_argument("--warmup", type=cli.nonnegative_int, default=3,
                    help="untraced steps first [3]")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="the training jobs' --precision [fp32]")
    ap.add_argument("--memory-format", default="channels_last",
                    choices=["contiguous", "channels_last"],
                    help="dcgan's --memory-format [channels_last, train.dcgan's default on a "
                         "GPU]")
    ap.add_argument("--algo", default=None, choices=["benchmark", "heuristic"],
                    help="cuDNN's convolution algorithm choice [the job's default: benchmark "
                         "for dcgan, heuristic for tacotron2]")
    ap.add_argument("--conv-api", default=None, choices=["graph", "legacy"],
                    help="the convolutions through cuDNN's graph API (cudnnBackendExecute rows) "
                         "or its legacy calls [the job's default: graph for dcgan, as "
                         "train.dcgan; the library's, legacy, for tacotron2]")
    ap.add_argument("--markdown", default=None, help="write the tables to this .md file")
    ap.add_argument("--csv", default=None, help="write every row to this .csv file")
    ap.add_argument("--rows", type=cli.nonnegative_int, default=None,
                    help="kernel rows in the markdown [all]")
    args = ap.parse_args(argv)
    if args.job == "tacotron2" and not args.text.strip():
        cli.fail(f"--text {args.text!r}: expected a sentence to say")
    cli.use_device(args.device, gpu_only="this tool lists the GPU kernels of a step")
    try:
        from cupti import cupti  # noqa: F401  (the package imports even when its binding cannot)
    except Exception as e:
        cli.fail(f"CUPTI is not usable ({type(e).__name__}: {e}); install cupti-python with the "
                 f"driver's CUDA major: pip install -e '.[profile-cuda13]' (or profile-cuda12)")
    for path in (args.markdown, args.csv):   # fail now, not after the profile has run
        if path:
            try:
                open(path, "w").close()
            except OSError as e:
                cli.fail(f"{path}: cannot write it ({e.strerror})")
    if args.batch_size is None:
        args.batch_size = 128 if args.job == "dcgan" else 64
    from cudnnlite import conv
    algo = args.algo or ("benchmark" if args.job == "dcgan" else "heuristic")
    if args.conv_api is None:
        args.conv_api = "graph" if args.job == "dcgan" else conv.settings.api
    # (for this job only: the process keeps its own settings)
    with conv.using(algo_mode=algo, api=args.conv_api):
        rows, scopes, wall_ms, info, seconds = _traced(args)
    rows = with_readable_names(rows)
    n, busy = len(rows), busy_us(rows)
    summary = [f"- kernels (and memcpy / memset) per step: **{n}**",
               f"- GPU-busy time: **{busy / 1e3:.2f} ms**; the same step untraced took "
               f"{wall_ms:.1f} ms of wall time",
               f"- op scopes: {len(scopes)} (forward ops, backward ops, parameter updates)"]
    if seconds:
        summary.append(f"- kernels per second of audio: **{n / seconds:,.0f}**")
    summary.append(f"- the seed, for comparison: {SEED_COUNTS[args.job]}")
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(args.device)
    from cudnnlite import version
    notes = info + [f"Device: {props['name'].decode()}; cuDNN {'.'.join(map(str, version()))}; "
                    f"CuPy {cupy.__version__}. Command: `python -m tools.kernels {args.job} "
                    f"--device {args.device} --batch-size {args.batch_size} --precision "
                    f"{args.precision}"
                    + (f" --memory-format {args.memory_format}" if args.job == "dcgan" else "")
                    + f" --conv-api {args.conv_api}"
                    + f" --algo {algo}`."] + [""] + summary
    for line in summary:
        print(line)
    for (d, (k, t)) in totals(rows, lambda r: r.direction).items():
        print(f"  {d:10s} {k:6d} kernels {t / 1e3:9.3f} ms")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(rows, f"{args.job}: the GPU kernels of one training step", notes,
                             args.rows))
        print(f"wrote {args.markdown}")
    if args.csv:
        write_csv(args.csv, rows)
        print(f"wrote {args.csv}")
    if not args.markdown and not args.csv:
        sys.stdout.write(markdown(rows, f"{args.job}: the GPU kernels of one training step",
                                  notes, args.rows if args.rows is not None else 200))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Command-line plumbing shared by the training jobs and the tools: every mistake in an argument
is one line on stderr, `error: --flag value: what was expected`, and exit status 2 -- never a
traceback, never argparse's usage block -- and --device is parsed and checked in one place."""
import argparse
import os
import shlex
import tempfile
import sys

import layers as L


def fail(message):
    """Print `error: message` as one line on stderr and exit with status 2 (a usage error)."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)


def description(doc):
    """A --help description: the first paragraph of a module docstring, on one line."""
    return " ".join(doc.strip().split("\n\n")[0].split())


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors go through fail(): 'argument --x: ...' becomes '--x: ...'; a tool
    run as `python -m tools.x` is named so in its usage line (not 'x.py'). Flags are spelt in
    full (no abbreviations): a stopped run's printed resume command drops its --max-steps by
    name, which an abbreviated --max-step would slip past."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        if "prog" not in kwargs:
            spec = getattr(sys.modules.get("__main__"), "__spec__", None)
            name = getattr(spec, "name", "") or ""
            if name.startswith(("tools.", "train.")):
                kwargs["prog"] = f"python -m {name.removesuffix('.__main__')}"
        super().__init__(*args, **kwargs)

    def error(self, message):
        fail(message.removeprefix("argument "))


def _argument_type(convert, accept, expected):
    """An argparse type: convert(text), which accept() must pass, else the error says `expected`."""
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


positive_int = _argument_type(int, lambda n: n >= 1, "a positive integer (1, 2, ...)")
nonnegative_int = _argument_type(int, lambda n: n >= 0, "an integer >= 0")
channels = _argument_type(int, lambda n: n in (1, 3), "1 (greyscale) or 3 (RGB)")
seed = _argument_type(int, lambda n: 0 <= n < 2 ** 63, "a seed, an integer in [0, 2^63)")
positive_float = _argument_type(float, lambda x: 0 < x < float("inf"),
                                "a positive number (e.g. 1e-3)")   # a learning rate
positive_int_pair = _argument_type(lambda t: tuple(int(v) for v in t.split(",")),
                                   lambda p: len(p) == 2 and min(p) >= 1,
                                   "two positive integers 'A,B' (e.g. 16,64)")


def batch_size(given, default, resume_meta=None, resume=None):
    """The run's batch size: --batch-size, else the checkpoint's when resuming (an exact resume
    needs the same one), else `default`."""
    return saved_setting("--batch-size", "batch size", "batch_size", given, default,
                         resume_meta, resume)


def precision(given, resume_meta=None, resume=None):
    """--precision (fp32 | bf16), else the checkpoint's when resuming, else fp32 (a checkpoint
    from before --precision existed is fp32)."""
    return saved_setting("--precision", "precision", "precision", given, "fp32", resume_meta,
                         resume, missing="fp32")


def memory_format(given, resume_meta=None, resume=None, default="contiguous"):
    """--memory-format (contiguous | channels_last), else the checkpoint's (contiguous for one
    from before the flag), else `default`."""
    return saved_setting("--memory-format", "memory format", "memory_format", given,
                         default, resume_meta, resume, missing="contiguous")


def saved_setting(flag, what, key, given, default, resume_meta=None, resume=None, missing=None):
    """A setting an exact resume must keep: the flag's value, else the checkpoint's (meta[key])
    when resuming, else `default`; a flag that differs from the checkpoint is an error.
    `missing`: the value of a checkpoint whose meta predates the setting. (None is "not given":
    0 is a value, a seed's say.)"""
    saved = None if resume_meta is None else resume_meta.get(key, missing)
    if given is not None and saved is not None and given != saved:
        fail(f"{flag} {given}: the checkpoint {resume} was trained with {what} {saved}; "
             f"expected that (or no {flag}), to continue exactly")
    return given if given is not None else saved if saved is not None else default


def epochs(given, default, resume_meta=None):
    """--epochs: as given (a resumed run extended, or ended sooner), else the checkpoint's (the
    run goes on to the epochs it was started for), else `default`."""
    if given is not None:
        return given
    return (resume_meta or {}).get("epochs", default)


def run_outf(outf, resume, default):
    """--outf as given; else a resumed run's own folder (the checkpoint's: its log, samples and
    checkpoint go on there; spelled as --resume spelled it, so the stop line's command does),
    else `default`."""
    if outf is not None:
        return outf
    return (os.path.dirname(os.fspath(resume)) or os.curdir) if resume else default


def check_outf(outf):
    """--outf, checked before any work (nothing is made or written yet): a folder, or a path
    that can be made one, as far as the file system's permissions say."""
    path = os.path.abspath(outf)
    if os.path.exists(path) and not os.path.isdir(path):
        fail(f"--outf {outf}: exists and is not a folder; expected a folder, made if missing")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        fail(f"--outf {outf}: {parent} is a file, so no folder can be made under it")
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--outf {outf}: {parent} is not writable; expected a folder this user can write")


def make_outf(outf):
    """--outf made where missing, and a file written and removed there: where the file system
    still refuses (read-only media, an immutable folder, a full disk), one error line."""
    try:
        os.makedirs(outf, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=outf, prefix=".write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        fail(f"--outf {outf}: cannot be made a folder or written in ({e.strerror}); expected a "
             f"writable folder, made if missing")


def resume_command(prog, argv, checkpoint, drop=()):
    """The command that continues a stopped run: its own flags (`argv`), less --resume,
    --max-steps, --dry-run and the flags named in `drop` (each taking a value: the starting
    weights --netG / --netD, which the checkpoint holds), plus --resume CHECKPOINT;
    shell-quoted."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--resume", "--max-steps", *drop):
            skip = "=" not in arg
            continue
        if arg != "--dry-run":
            kept.append(arg)
    return f"{prog} {shlex.join(kept + ['--resume', checkpoint])}"


def stop_line(prog, argv, checkpoint, step, why, finished, drop=()):
    """What a run stopped early by --max-steps / --dry-run prints: the command that continues it
    (resume_command), or, where that step was the run's last (`finished`: every epoch done),
    that nothing is left to continue."""
    if finished:
        return f"stopped after step {step} ({why}), the run's last: the run is complete"
    return f"stopped after step {step} ({why}); " \
           f"{resume_command(prog, argv, checkpoint, drop)} " \
           f"continues the run"


def saved_dataroot(given, resume_meta):
    """--dataroot as given; else a resumed run's (its checkpoint keeps the folder it read, as an
    absolute path: a moved corpus is given again)."""
    return given if given is not None or resume_meta is None else resume_meta.get("dataroot")


def new_run_outf(outf, resume):
    """A new run (no --resume) refuses an --outf that holds an earlier run (its checkpoint.npz or
    losses.csv): it would replace the checkpoint and mix the two runs' logs in one CSV. So does
    a resumed one, unless --outf is its checkpoint's own folder."""
    from .common import earlier_run
    found = earlier_run(outf)
    if resume and found and os.path.realpath(os.path.dirname(os.path.abspath(resume))) != \
            os.path.realpath(outf):
        fail(f"--outf {outf}: holds another run ({', '.join(found)}) than --resume {resume}'s; "
             f"expected the checkpoint's own folder or another --outf")
    if resume:
        return
    if found:
        ckpt = os.path.join(outf, "checkpoint.npz")
        fail(f"--outf {outf}: holds an earlier run ({', '.join(found)}); expected another "
             f"--outf for a new run (or those files removed)"
             + (f", or --resume {ckpt} to continue it" if "checkpoint.npz" in found else ""))


def check_max_steps(max_steps, step, resume):
    """--max-steps counts every step of the run: a resumed one must have steps left."""
    if max_steps and step >= max_steps:
        fail(f"--max-steps {max_steps}: the checkpoint {resume} is at step {step} already; "
             f"expected a larger --max-steps (it counts every step of the run) or 0")


def device(text):
    """argparse type: 'cpu' or a GPU index ('cuda', 'cuda:N' too), as layers.parse_device."""
    try:
        return L.parse_device(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'cpu' or a GPU index (0, 1, ...), got {text!r}") from None


def use_device(device, gpu_only=None):
    """Make `device` (from the `device` type) current. A GPU index that no visible CUDA device
    answers, or 'cpu' for a tool that says why it needs a GPU in `gpu_only`, is a fail()."""
    if device == "cpu":
        if gpu_only:
            fail(f"--device cpu: {gpu_only}; expected a GPU index (0, 1, ...)")
        return device
    try:
        import cupy
    except ImportError as e:
        fail(f"--device {device}: CuPy is not installed ({e}); install the GPU extra: "
             f"pip install -e '.[cuda12]' (or '.[cuda13]' for a CUDA 13 driver)"
             + (f" ({gpu_only})" if gpu_only else ", or use --device cpu for the NumPy path"))
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:       # CUDARuntimeError when there is no driver
        from cudnnlite.handle import why_no_device
        count, why = 0, why_no_device(e)
    else:
        why = "0 visible"
    if count == 0:
        fail(f"--device {device}: no CUDA device is visible ({why}); "
             + (gpu_only if gpu_only else "use --device cpu for the NumPy path"))
    if device >= count:
        fail(f"--device {device}: expected a GPU index from 0 to {count - 1} "
             f"({count} CUDA device{'s' if count > 1 else ''} visible)")
    cupy.cuda.Device(device).use()
    return device

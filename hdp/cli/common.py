"""Helpers shared by the ``hdp`` command modules: user-error handling, --target, the caches,
and the input/output path check every command runs before doing any work."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import typing
import warnings
from pathlib import Path

import click
import msgspec

from hdp.base.cache import default_cache_dir
from hdp.base.errors import HdpError, InputError
from hdp.base.fsutil import (
    NAME_MAX,
    clean_stale,
    declare_outputs,
    outputs_together,
    path_problem,
    space_problem,
    temp_name,
)
from hdp.base.validation import AtLeastOne, TimeLimit, convert
from hdp.ir.shapes import parse_request
from hdp.passes.cache import PassCache
from hdp.runtime.measure.cache import cache_scope
from hdp.runtime.measure.worker_client import worker_reuse
from hdp.target.capacity import parse_overrides
from hdp.target.target import devices_target, load_target, target_file


def fail(msg: str, code: int = 2) -> None:
    click.echo(f"hdp: error: {msg}", err=True)
    sys.exit(code)


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"hdp: warning: {message}\n"


#: Exit code of a command interrupted by SIGINT (128 + the signal, as shells report it).
INTERRUPTED = 130


def interrupted() -> None:
    """One line and exit 130, with further SIGINTs ignored while this process winds down."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    click.echo("hdp: interrupted", err=True)
    if _exiting():
        _forget_unhandled_interrupt()
    sys.exit(INTERRUPTED)


def _forget_unhandled_interrupt() -> None:
    """CPython notes a KeyboardInterrupt that leaves code run through ``PyRun_String`` (by one of the
    libraries hdp loads; which one was not traced) as unhandled even when a caller handles it, and
    then ends the program by SIGINT instead of its exit code (seen: exit -2 after ``hdp: interrupted``,
    with the note set at exit). Running any code that way clears the note: each run starts by that."""
    import ctypes  # lazy: only on the way out of an interrupted program

    ctypes.pythonapi.PyRun_SimpleString(b"pass")


def user_errors(fn):
    """Run a command: HdpError (a user mistake) is one line on stderr and exit code 2, SIGINT one
    line and exit 130; warnings print as ``hdp: warning: ...`` lines. Its outputs (the paths
    :func:`check_paths` names) are committed together when it succeeds, none when it fails or is
    interrupted (:func:`hdp.base.fsutil.outputs_together`), and every temporary file it or a
    library makes lives in a private directory removed when it ends (:func:`private_temp`)."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        saved = warnings.formatwarning
        warnings.formatwarning = _format_warning
        handler = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
        _COMMAND["depth"] += 1
        _COMMAND["interrupted"] = False
        try:
            with private_temp(), outputs_together():
                result = fn(*a, **kw)
                if _COMMAND["interrupted"]:  # a KeyboardInterrupt raised where Python ignores exceptions
                    raise KeyboardInterrupt  # (a weakref or ctypes callback): its outputs are not committed
                return result
        except HdpError as e:
            fail(str(e))
        except KeyboardInterrupt:
            interrupted()
        except Exception as e:
            if was_interrupted(e) or _COMMAND["interrupted"]:  # after SIGINT, a failure is its doing
                interrupted()  # (a C extension's import turns it into ImportError, losing the cause)
            raise
        finally:
            _COMMAND["depth"] -= 1
            warnings.formatwarning = saved
            if handler is not None and not _exiting():
                signal.signal(signal.SIGINT, handler)

    return wrapper


def was_interrupted(e: BaseException) -> bool:
    """Whether ``e`` is SIGINT in another guise: a library that was running when it came reports
    it as its own error with the KeyboardInterrupt as the cause (a Numba kernel: ``SystemError:
    ... returned a result with an exception set``)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


#: How many commands (:func:`user_errors`) are running in this process: SIGINT outside one (while
#: click reads the options, or after the command) ends the program at once (:func:`_on_sigint`).
_COMMAND = {"depth": 0, "interrupted": False}


def _on_sigint(signum, frame) -> None:
    """SIGINT under :class:`HdpGroup`: inside a command a KeyboardInterrupt (the command discards
    its outputs and says so); outside one, the one line and exit 130 right away (click would say
    ``Aborted!`` and exit 1)."""
    if _COMMAND["depth"]:
        _COMMAND["interrupted"] = True  # noted: Python drops an exception raised in a callback (below)
    if _drops_exceptions(frame):  # Python would print "Exception ignored" and drop it (a KeyboardInterrupt
        threading.Timer(RESIGNAL, os.kill, (os.getpid(), signal.SIGINT)).start()  # or the exit): again soon
        return
    if _COMMAND["depth"]:
        raise KeyboardInterrupt
    interrupted()


def _drops_exceptions(frame) -> bool:
    """Whether an exception raised in ``frame`` would be printed as "Exception ignored" and
    dropped: LLVM (compiling a Numba kernel) calling back into Python through ctypes, a finaliser
    (``__del__``, run wherever the garbage collector happens to run it) or a fork hook
    (:data:`_FORK_HOOKS`, run around ``os.fork`` by a library starting a process) on the stack."""
    depth = 0
    while frame is not None and depth < 64:
        code = frame.f_code
        if (f"{os.sep}llvmlite{os.sep}" in code.co_filename or code.co_name == "__del__"
                or (os.path.basename(os.path.dirname(code.co_filename)), code.co_name) in _FORK_HOOKS):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


#: The standard library's ``os.register_at_fork`` hooks in the parent (package directory, function):
#: Python reports an exception raised in one as "Exception ignored" and goes on.
_FORK_HOOKS = {("logging", "_acquireLock"), ("logging", "_releaseLock")}


#: Seconds after which a SIGINT that came during a callback from LLVM is sent again (:func:`_on_sigint`).
RESIGNAL = 0.05


def _exiting() -> bool:
    """Whether this is the ``hdp`` program itself ending (not a command run in-process)."""
    return _PROGRAM["running"]


#: Set while ``hdp`` runs as a program (:class:`HdpGroup`'s ``main`` with the process's arguments).
_PROGRAM = {"running": False}


@contextlib.contextmanager
def private_temp():
    """A private temporary directory for the block: ``tempfile``'s default and ``TMPDIR`` (which the
    measuring worker and other children inherit) point into it, so what libraries leave there
    (torch_geometric's generated ``GCNConv_propagate`` modules, a worker's stderr) goes when the
    block ends. Nested blocks share the outer one's."""
    if _TEMP["dir"] is not None:
        yield _TEMP["dir"]
        return
    d = tempfile.mkdtemp(prefix="hdp-")
    saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"], _TEMP["dir"] = d, d, d
    try:
        yield d
    finally:
        tempfile.tempdir, _TEMP["dir"] = saved_dir, None
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(d, ignore_errors=True)


_TEMP: dict = {"dir": None}


class HdpGroup(click.Group):
    """The command group: a user mistake found while click reads the options (a number out of its
    range, :class:`Bounded`) is one ``hdp: error:`` line and exit 2, as in the command itself, and
    SIGINT one line and exit 130. Run as the program (its arguments from the process), SIGINT is
    ignored once the command is done: the interpreter's exit runs libraries' atexit handlers
    (torch's dynamo), which an interrupt there would end in a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HdpError as e:
            fail(str(e))
        except KeyboardInterrupt:
            interrupted()

    def main(self, args=None, *a, **kw):
        main_thread = threading.current_thread() is threading.main_thread()
        program = args is None  # else in-process (tests, click's CliRunner): the caller's process goes on
        _PROGRAM["running"] = program
        saved = signal.getsignal(signal.SIGINT)
        try:
            if main_thread:  # in the try: a SIGINT in the instant before the handler is in place is one line too
                signal.signal(signal.SIGINT, _on_sigint)
            return super().main(args, *a, **kw)
        except KeyboardInterrupt:  # raised before our handler was in place
            interrupted()
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, signal.SIG_IGN if program else saved)


class Bounded(click.ParamType):
    """A number read once into its declared type, bounds included (``Annotated[int, Meta(...)]``:
    the declaration of the field it fills, :func:`field_type`): out of range it is refused while
    the options are read, in one line naming the option and the range."""

    name = "number"

    def __init__(self, typ, metavar: str | None = None):
        self.typ = typ
        bare = typing.get_args(typ)[0] if typing.get_origin(typ) is typing.Annotated else typ
        self.name = metavar or ("integer" if bare is int else "number")

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value  # a default, already typed
        label = param.opts[0] if param is not None and param.opts else "value"
        return convert(value.strip(), self.typ, lambda path, what: f"{label}: {what}", strict=False)


class DeviceSize(click.ParamType):
    """``DEVICE=SIZE`` (``GPU=16GiB``) read once into ``(device, bytes)``."""

    name = "DEV=SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        return parse_overrides([value])[0]


def field_type(cls, name: str):
    """The declared type of field ``name`` of Struct ``cls`` (its bounds with it)."""
    return next(f.type for f in msgspec.structs.fields(cls) if f.name == name)


def target_from(target: str | None, devices: str | None):
    if target and devices:
        raise click.UsageError("give --target or --devices, not both")
    if devices:
        return devices_target([d.strip() for d in devices.split(",") if d.strip()])
    return load_target(target or "host")


def target_path(target: str | None) -> Path | None:
    """The TOML file ``--target`` names, if it names a file rather than a built-in target."""

    return target_file(target) if target else None


timeout_option = click.option(
    "--timeout", type=Bounded(TimeLimit), default=None,
    help="Seconds a device may take to answer a support query, or to compile and run the model when "
         "profiling or measuring, before its worker process is killed (default: 600 for support and "
         "profile, 120 per measured placement).")


def pass_cache(cache_dir: str | None, no_cache: bool):
    if no_cache:
        return None
    root = Path(cache_dir or default_cache_dir())
    why = path_problem(root, room=_DIR_ROOM)  # a given --cache-dir was checked with the other paths
    if why:
        raise InputError(f"cache directory {_show(root)}: cannot be used: {why}; give --cache-dir or --no-cache")
    return PassCache(root)


#: The specialisation options of ``compile``, ``lower`` and ``profile`` (see hdp.ir.openvino_frontend).
shape_options = [
    click.option("--input-shape", multiple=True,
                 help="NAME:D0,D1,...[:TYPE] static shape (and, for a 'dynamic' one, element type) of "
                      "an input or a state variable that hdp costs at (repeatable; NAME: for a scalar). "
                      "The written model keeps the original's dynamic shapes."),
    click.option("--seq-len", type=Bounded(AtLeastOne), default=None,
                 help="Sequence length for dynamic input_ids/attention_mask/position_ids/token_type_ids "
                      "[default: 128]."),
    click.option("--phase", type=click.Choice(["prefill", "decode"]), default="prefill", show_default=True,
                 help="Stateful (KV-cache) models: cost the prompt (seq-len tokens, empty cache) or one "
                      "generation step (1 token after a seq-len cache)."),
]


def cache_options(stored: str, no_cache: str) -> list:
    """``--cache-dir`` and ``--no-cache``, with what this command keeps there and what ``--no-cache``
    means for it (use with :func:`with_options`)."""
    return [click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                         help=f"Cache root; {stored} (default: ~/.cache/hdp)."),
            click.option("--no-cache", is_flag=True, help=no_cache)]


def with_options(opts):
    """Apply a list of click options to a command, in order."""
    def deco(fn):
        for o in reversed(opts):
            fn = o(fn)
        return fn

    return deco


def shape_request(input_shape, seq_len, phase):
    return parse_request(input_shape, seq_len, phase)


def cache_scoped(fn):
    """Make every measurement cache of the command follow its ``--cache-dir`` / ``--no-cache``
    (``<cache-dir>/measure``, or nothing), including measurers created inside passes."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        with cache_scope(kw.get("cache_dir"), enabled=not kw.get("no_cache")):
            return fn(*a, **kw)

    return wrapper


def worker_scoped(fn):
    """Let the measurers of the command share one worker process where they measure the same model
    on the same target (:func:`hdp.runtime.measure.worker_client.worker_reuse`); stopped when the command ends."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        with worker_reuse():
            return fn(*a, **kw)

    return wrapper


# --------------------------------------------------------------------------- paths


def _identity(p: Path) -> tuple:
    """What makes two paths the same file: the resolved path, and the inode when it exists."""
    real = os.path.realpath(p)
    try:
        st = os.stat(p)
        return (real, (st.st_dev, st.st_ino))
    except OSError:
        return (real, None)


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _nearest_existing(p: Path) -> Path:
    p = Path(os.path.abspath(p))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _probe_dir(d: Path) -> str | None:
    """Why files cannot be created in existing directory ``d`` (None: they can)."""

    probe = d / temp_name("probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def _check_writable(label: str, p: Path, is_dir: bool, probed: dict) -> None:
    """An output file (or directory) ``p`` can be created: it is not of the other kind, and its
    nearest existing ancestor is a directory hdp can write in."""
    if os.path.isdir(p) and not is_dir:
        raise InputError(f"{label} {p}: is a directory, expected a file path")
    if os.path.lexists(p) and not os.path.isdir(p) and is_dir:
        raise InputError(f"{label} {p}: exists and is not a directory")
    base = p if is_dir and os.path.isdir(p) else _nearest_existing(p.parent)
    if not os.path.isdir(base):
        raise InputError(f"{label} {p}: cannot be created, {base} is not a directory")
    key = os.path.realpath(base)
    if key not in probed:
        probed[key] = _probe_dir(base)
    if probed[key]:
        fs = _fs_type(base)
        if fs in _NOT_STORAGE:
            raise InputError(f"{label} {p}: {base} takes no new files: it is a {fs} file system (the kernel's "
                             f"state, not storage); write to a directory on a disk")
        raise InputError(f"{label} {p}: cannot create a file in {base} ({probed[key]}); choose a directory you can "
                         f"write to")


#: File systems that hold the kernel's state, never a user's files.
_NOT_STORAGE = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "securityfs", "tracefs",
                "configfs", "pstore", "bpf", "mqueue", "hugetlbfs", "fusectl", "binfmt_misc"}


def _fs_type(p: Path) -> str:
    """The type of the file system that holds ``p`` (the longest mount point above it in
    /proc/self/mounts; empty where that cannot be read)."""
    real = os.path.realpath(p)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        return ""
    return kind


_DUMP_RE = re.compile(r"^\d\d-.+\.hdp$")

#: Output/input pairs that may be one file: a training checkpoint resumed and updated in place.
_MAY_SHARE = {("--set checkpoint", "--policy"), ("--set checkpoint", "--set policy")}


def _with_weights(paths: dict[str, object] | None) -> list[tuple[str, Path]]:
    """(label, path) of the given paths, each ``.xml`` followed by the ``.bin`` beside it."""
    out: list[tuple[str, Path]] = []
    for label, p in (paths or {}).items():
        if p is None or str(p) == "":
            continue
        p = Path(p)
        out.append((label, p))
        if p.suffix.lower() == ".xml":
            out.append((f"{label} (its weights)", p.with_suffix(".bin")))
    return out


def check_paths(inputs: dict[str, object] | None = None, outputs: dict[str, object] | None = None,
                out_dirs: dict[str, object] | None = None, space: dict[str, int] | None = None) -> None:
    """Refuse, before any work, outputs that would overwrite an input or each other, or that
    cannot be written; then remove temporaries that killed hdp runs left where outputs go.

    ``inputs``/``outputs``/``out_dirs`` map an option label (``"MODEL"``, ``"-o"``,
    ``"--dump-ir"``) to a path or None. The ``.bin`` beside an input or output ``.xml`` counts as
    an input or output of its own. Paths are compared after resolving symlinks, and by inode (hard
    links). Raises InputError naming both options. Also refused: paths too long for the file
    system (a name over NAME_MAX, a path over PATH_MAX counting the temporaries and entries hdp
    writes under it), inputs that are not regular files (a FIFO would block the read), and, for
    the outputs named in ``space`` (label -> bytes), a file system with less room than that or no
    free inode (a rough check; a late ENOSPC is still reported, see :class:`hdp.base.fsutil.WriteError`).
    """

    ins, outs = _with_weights(inputs), _with_weights(outputs)
    dirs = [(label, Path(p)) for label, p in (out_dirs or {}).items() if p is not None and str(p) != ""]
    _check_lengths_and_kinds(ins, outs, dirs)

    in_ids = [(label, p, _identity(p)) for label, p in ins]
    out_ids = [(label, p, _identity(p)) for label, p in outs]
    for i, (lo, po, io) in enumerate(out_ids):
        for li, pi, ii in in_ids:
            if _same(io, ii) and (lo.split(" (")[0], li.split(" (")[0]) not in _MAY_SHARE:
                raise InputError(f"{lo} {po}: is the input {li} ({pi}); refusing to overwrite an input")
        for lo2, po2, io2 in out_ids[:i]:
            if _same(io, io2):
                raise InputError(f"{lo} {po}: is also the output {lo2} ({po2}); give them different paths")
    for ld, pd in dirs:
        idd = _identity(pd)
        for lo, po, io in out_ids + in_ids:
            if _same(idd, io):
                raise InputError(f"{ld} {pd}: is the file {lo} ({po}); give a directory of its own")
        for li, pi, _ in in_ids:
            if ld == "--dump-ir" and _DUMP_RE.match(pi.name) and _same(_identity(pi.parent), idd):
                raise InputError(f"{ld} {pd}: would overwrite the input {li} ({pi})")
    declare_outputs(p for _, p in outs)  # committed together at the command's end (user_errors)
    probed: dict = {}
    for lo, po in outs:
        _check_writable(lo, po, False, probed)
    for ld, pd in dirs:
        _check_writable(ld, pd, True, probed)
    for d in {os.path.realpath(p.parent) for _, p in outs} | {os.path.realpath(p) for _, p in dirs}:
        clean_stale(d)
    if space:
        _check_space(space, outs)


#: Bytes of names hdp may put under an output directory (a cache shard, a temporary of at most
#: NAME_MAX bytes, a file in it).
_DIR_ROOM = 300


def _show(p: Path) -> str:
    """A path for a one-line message: in full unless it is very long."""
    s = str(p)
    return s if len(s) <= 160 else f"{s[:60]}...{s[-60:]} ({len(os.fsencode(s))} bytes)"


def _check_lengths_and_kinds(ins, outs, dirs) -> None:

    for label, p in ins:
        why = path_problem(p)
        if why:
            raise InputError(f"{label} {_show(p)}: cannot be read: {why}")
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue  # missing: the command says so in its own words
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"{label} {_show(p)}: is not a regular file (a FIFO, socket or device); give a file")
    for label, p in outs:  # the file, and the temporary directory beside it that holds it until the rename
        why = path_problem(p) or path_problem(p.parent, room=2 + NAME_MAX + len("placed.xml"))
        if why:
            raise InputError(f"{label} {_show(p)}: cannot be written: {why}")
    for label, p in dirs:
        why = path_problem(p, room=_DIR_ROOM)
        if why:
            raise InputError(f"{label} {_show(p)}: cannot be used: {why}")


#: Room an output needs beyond its estimate: a file system with less free is full for hdp.
SPACE_SLACK = 1 << 20


def _check_space(space: dict[str, int], outs: list[tuple[str, Path]]) -> None:
    """Refuse when the outputs named in ``space`` (label -> estimated bytes) do not fit, with
    :data:`SPACE_SLACK` to spare, on their file systems (summed per file system), or when a
    file system has fewer free inodes than they need (each file, and a temporary directory)."""

    need: dict[int, list] = {}
    for label, p in outs:
        base = label.split(" (")[0]
        if base not in space:
            continue
        d = _nearest_existing(p.parent)
        try:
            dev = os.stat(d).st_dev
        except OSError:
            continue
        entry = need.setdefault(dev, [d, SPACE_SLACK, 1, label, p])
        entry[1] += space[base] if p.suffix.lower() != ".bin" else 0  # an .xml's estimate counts its .bin
        entry[2] += 1
    for d, nbytes, inodes, label, p in need.values():
        why = space_problem(d, nbytes, need_inodes=inodes)
        if why:
            raise InputError(f"{label} {_show(p)}: cannot be written: {why}")
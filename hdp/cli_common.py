"""Helpers shared by the ``hdp`` command modules: user-error handling, --target, the caches,
and the input/output path check every command runs before doing any work."""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from pathlib import Path

import click

from hdp.errors import HdpError, InputError


def fail(msg: str) -> None:
    click.echo(f"hdp: error: {msg}", err=True)
    sys.exit(2)


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"hdp: warning: {message}\n"


def user_errors(fn):
    """Turn HdpError (a user mistake) into one line on stderr and exit code 2; print warnings
    as ``hdp: warning: ...`` lines."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        saved = warnings.formatwarning
        warnings.formatwarning = _format_warning
        try:
            return fn(*a, **kw)
        except HdpError as e:
            fail(str(e))
        except KeyboardInterrupt:
            fail("interrupted")
        finally:
            warnings.formatwarning = saved

    return wrapper


def target_from(target: str | None, devices: str | None):
    from hdp.runtime.target import devices_target, load_target

    if target and devices:
        raise click.UsageError("give --target or --devices, not both")
    if devices:
        return devices_target([d.strip() for d in devices.split(",") if d.strip()])
    return load_target(target or "host")


def target_path(target: str | None) -> Path | None:
    """The TOML file ``--target`` names, if it names a file rather than a built-in target."""
    from hdp.runtime.target import target_file

    return target_file(target) if target else None


timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Seconds a device may take to answer a support query, or to compile and run the model when "
         "profiling or measuring, before its worker process is killed (default: 600 for support and "
         "profile, 120 per measured placement).")


def pass_cache(cache_dir: str | None, no_cache: bool):
    from hdp.cache import default_cache_dir
    from hdp.fsutil import path_problem
    from hdp.passes.cache import PassCache

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
    click.option("--seq-len", type=click.IntRange(1), default=None,
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
    from hdp.ir.specialise import parse_request

    return parse_request(input_shape, seq_len, phase)


def cache_scoped(fn):
    """Make every measurement cache of the command follow its ``--cache-dir`` / ``--no-cache``
    (``<cache-dir>/measure``, or nothing), including measurers created inside passes."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        from hdp.runtime.measure_cache import cache_scope

        with cache_scope(kw.get("cache_dir"), enabled=not kw.get("no_cache")):
            return fn(*a, **kw)

    return wrapper


def worker_scoped(fn):
    """Let the measurers of the command share one worker process where they measure the same model
    on the same target (:func:`hdp.runtime.worker_client.worker_reuse`); stopped when the command ends."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        from hdp.runtime.worker_client import worker_reuse

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
    from hdp.fsutil import temp_name

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
        raise InputError(f"{label} {p}: cannot write in {base} ({probed[key]})")


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
    free inode (a rough check; a late ENOSPC is still reported, see :class:`hdp.fsutil.WriteError`).
    """
    from hdp.fsutil import clean_stale

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
    import stat

    from hdp.fsutil import NAME_MAX, path_problem

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
    from hdp.fsutil import space_problem

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
"""The one way hdp writes files: atomically, durably, with the usual permissions, never half-written.

Every writer in hdp goes through this module::

    atomic_write(path, data)            # bytes -> path
    with atomic_path(path) as tmp:      # a library writes the file itself (torch.save, ...)
        torch.save(obj, tmp)
    with temp_dir(parent) as d:         # several files that are committed together
        ov.save_model(model, d / "m.xml")
        commit_pair(d / "m.xml", out_xml)

A temporary file or directory lives next to its destination (so the final ``rename`` is atomic) and
is named ``.<name>.hdp-<host>-<pid>-<random>.tmp``: unique per writer, recognisable as hdp's, and
carrying the writer's process id. On every exit path the temporary is removed; a writer killed by
SIGKILL cannot do that, so :func:`clean_stale` (run by the next hdp command on the directories it
writes to) removes temporaries whose process is gone. Files are ``fsync``-ed before the rename and the
directory after it, and get mode ``0o666 & ~umask`` like any file a program creates
(``mkstemp`` alone would leave them 0600).

A temporary's name stays within ``NAME_MAX`` (255 bytes) whatever the destination's: a long name
is cut and ends in a hash of the whole (:func:`temp_name`). A write that fails (a full disk, no
inodes left, a read-only file system) raises :class:`WriteError`, one line naming the destination,
and leaves the old file in place; :func:`path_problem` and :func:`space_problem` tell the command
line before any work whether a path is too long or a file system too full.

Test hook: ``HDP_KILL_AT=<point>[:<file name>]`` sends SIGKILL to this process when it reaches
``<point>`` (``atomic-before-rename``, ``placed-saved``, ``pair-xml-removed``, ``pair-bin-renamed``;
see :func:`kill_point`); used by the tests that kill a compile mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from hdp.errors import HdpError

KILL_ENV = "HDP_KILL_AT"
#: Longest file name (one path component) and path, in bytes, that Linux file systems accept.
NAME_MAX = 255
PATH_MAX = 4096

_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
_TEMP_RE = re.compile(r"^\..*\.hdp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
_umask_lock = threading.Lock()


def kill_point(name: str, detail: str = "") -> None:
    """Die by SIGKILL here when ``HDP_KILL_AT`` is ``name`` or ``name:detail`` (test hook; a no-op
    otherwise)."""
    want = os.environ.get(KILL_ENV)
    if want and (want == name or want == f"{name}:{detail}"):
        os.kill(os.getpid(), signal.SIGKILL)


class WriteError(HdpError, OSError):
    """A file could not be written (no space, no inodes, read-only, name too long ...); the
    message names the destination, and whatever was there before is still there. ``reason``
    is the why alone."""

    reason: str = ""


def temp_name(dest_name: str) -> str:
    """A unique hidden name for a temporary that will become ``dest_name``, at most
    :data:`NAME_MAX` bytes: a destination name too long to fit is cut and ends in ``~`` and a hash
    of the whole name (still unique per writer: the process id and a random part follow)."""
    tail = f".hdp-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    room = NAME_MAX - 1 - len(tail)
    raw = os.fsencode(dest_name)
    if len(raw) > room:
        digest = hashlib.blake2b(raw, digest_size=8).hexdigest()
        dest_name = raw[: room - 1 - len(digest)].decode("utf-8", "ignore") + "~" + digest
        while len(os.fsencode(dest_name)) > room:  # a surrogate-escaped name may re-encode longer
            dest_name = dest_name[1:]
    return f".{dest_name}{tail}"


def is_temp(name: str) -> bool:
    """Whether ``name`` is a temporary made by :func:`temp_name`."""
    return _TEMP_RE.match(name) is not None


def file_mode() -> int:
    """``0o666 & ~umask``: the mode ``open(path, "w")`` would give a new file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:  # os.umask can only be read by setting it
        mask = os.umask(0o22)
        os.umask(mask)
    return 0o666 & ~mask


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def clean_stale(directory: str | os.PathLike) -> int:
    """Remove hdp temporaries in ``directory`` left by processes of this host that are gone.

    Returns how many were removed. Never raises for an unreadable or missing directory.
    """
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for e in entries:
        m = _TEMP_RE.match(e.name)
        if m is None or m.group("host") != _HOST:
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.unlink(e.path)
            removed += 1
        except OSError:
            pass
    return removed


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename in ``directory`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _finish(tmp: Path) -> None:
    """Permissions and durability of a complete temporary before it is renamed."""
    os.chmod(tmp, file_mode())
    _fsync_file(tmp)


def _unlink_quietly(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


def ensure_parent(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; when the block ends without an exception, the
    file written there replaces ``path`` (fsync, mode, rename, directory fsync). On any exception
    (KeyboardInterrupt included) the temporary is removed and ``path`` is untouched."""
    path = Path(path)
    try:
        ensure_parent(path)
    except OSError as e:
        raise write_error(path, e) from None
    tmp = path.parent / temp_name(path.name)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"{tmp}: the writer did not create the file")
        _finish(tmp)
        kill_point("atomic-before-rename", path.name)
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        if isinstance(e, WriteError):
            raise
        raise write_error(path, e) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the new one, never a
    part; an existing file survives a failed write; nothing is left behind."""
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


@contextlib.contextmanager
def temp_dir(parent: str | os.PathLike, dest_name: str = "hdp") -> Iterator[Path]:
    """A private temporary directory inside ``parent`` (same filesystem as the destination),
    removed with its contents when the block ends."""
    parent = Path(parent)
    d = parent / temp_name(dest_name)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        d.mkdir(mode=0o700)
    except OSError as e:
        raise write_error(parent / dest_name, e) from None
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def commit_pair(tmp_xml: Path, out_xml: Path) -> None:
    """Move a complete ``.xml``/``.bin`` pair (written next to each other as ``tmp_xml`` and its
    ``.bin``) onto ``out_xml`` and its ``.bin`` so that a reader never opens a mismatched pair.

    Order: fsync both, remove the old ``.xml``, rename the ``.bin``, rename the ``.xml``. At every
    instant the destination is the old pair, no ``.xml`` at all, or the new pair; the ``.bin``
    digest recorded in a placed ``.xml`` lets its loader catch a reader that raced the commit.
    A pair without a ``.bin`` (a model with no weights) removes a stale destination ``.bin``.
    """
    tmp_bin, out_bin = tmp_xml.with_suffix(".bin"), out_xml.with_suffix(".bin")
    has_bin = tmp_bin.exists()
    for f in ([tmp_bin] if has_bin else []) + [tmp_xml]:
        _finish(f)
    try:
        os.unlink(out_xml)
    except FileNotFoundError:
        pass
    kill_point("pair-xml-removed")
    if has_bin:
        os.replace(tmp_bin, out_bin)
    else:
        try:
            os.unlink(out_bin)
        except FileNotFoundError:
            pass
    kill_point("pair-bin-renamed")
    os.replace(tmp_xml, out_xml)
    fsync_dir(out_xml.parent)


# --------------------------------------------------------------------------- failures and limits


def space_problem(directory: str | os.PathLike, need_bytes: int = 0, need_inodes: int = 1) -> str | None:
    """Why ``directory``'s file system cannot take ``need_bytes`` in ``need_inodes`` new files (None:
    it can, or the file system does not say). Only a rough check: others write too, and a file
    system's own overhead is not counted."""
    try:
        st = os.statvfs(_nearest_dir(directory))
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if st.f_files and st.f_favail < need_inodes:  # f_files == 0: the file system has no inode limit
        return f"no free inodes ({st.f_favail} left)"
    if free < need_bytes:
        return f"no space left on device ({human_size(free)} free, about {human_size(need_bytes)} needed)"
    return None


def write_error(path: str | os.PathLike, cause: BaseException) -> WriteError:
    """A :class:`WriteError` for a failed write of ``path``: the OS reason, or for a library's
    message (OpenVINO says ``basic_ios::clear: iostream error`` on a full disk) what the file
    system reports."""
    path = Path(path)
    if isinstance(cause, OSError) and cause.strerror:
        reason = cause.strerror
        if cause.errno == errno.ENAMETOOLONG:
            reason += f" (a name over {NAME_MAX} bytes or a path over {PATH_MAX})"
    else:  # a library's words: say what the file system reports beside them
        lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]  # OpenVINO: source locations
        said = re.sub(r"^Exception from \S+:\s*", "", lines[-1] if lines else type(cause).__name__)  # then the reason
        reason = said
        try:
            st = os.statvfs(_nearest_dir(path.parent))
        except OSError:
            st = None
        if st is not None and st.f_files and st.f_favail == 0:
            reason = f"no free inodes ({said})"
        elif st is not None and st.f_bavail * st.f_frsize < 1 << 20:  # under a MiB left: a full disk
            reason = f"no space left on device ({human_size(st.f_bavail * st.f_frsize)} free; {said})"
    kept = "the old file is kept" if os.path.lexists(path) else "nothing was written"
    err = WriteError(f"{path}: cannot write it: {reason}; {kept}")
    err.reason = reason  # (not strerror: setting it would turn str(err) into "[Errno n] ...")
    return err


def path_problem(path: str | os.PathLike, room: int = 0) -> str | None:
    """Why ``path`` (absolute, plus ``room`` more bytes for what goes under it) is too long for
    the file system (None: it is not): a component over :data:`NAME_MAX` or the whole over
    :data:`PATH_MAX`."""
    full = os.fsencode(os.path.abspath(path))
    for part in full.split(b"/"):
        if len(part) > NAME_MAX:
            return (f"a file name in it is {len(part)} bytes, over the {NAME_MAX} the file system allows "
                    f"({os.fsdecode(part[:24])}...)")
    if len(full) + room >= PATH_MAX:
        extra = f" with the {room} bytes of names hdp puts under it" if room else ""
        return f"it is {len(full)} bytes long{extra}, over PATH_MAX ({PATH_MAX} bytes)"
    return None


def _nearest_dir(p: str | os.PathLike) -> str:
    p = os.path.abspath(p)
    while not os.path.isdir(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def human_size(n: float) -> str:
    """``1.5 GiB``, ``300.0 MiB``, ``512 bytes``."""
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"

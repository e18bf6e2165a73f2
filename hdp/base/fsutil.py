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

The outputs of one command are committed together or not at all (:class:`OutputSet`,
:func:`outputs_together`): each is written whole beside its destination, and the renames come last,
all of them, with SIGINT held back until they are done.

Test hook: ``HDP_KILL_AT=<point>[:<file name>]`` sends SIGKILL to this process when it reaches
``<point>`` (``atomic-before-rename``, ``group-before-rename``, ``placed-saved``, ``pair-xml-removed``, ``pair-bin-renamed``;
see :func:`kill_point`); used by the tests that kill a compile mid-write. ``HDP_INTERRUPT_AT``
sends SIGINT at the same points instead (the tests of interrupted commands).

The module is over 600 lines because the atomic writes, the output set and the failure messages
share the temporaries' naming, the kill points and the clean-up that their tests drive together.
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

from hdp.base.errors import HdpError

KILL_ENV = "HDP_KILL_AT"
INTERRUPT_ENV = "HDP_INTERRUPT_AT"
#: Longest file name (one path component) and path, in bytes, that Linux file systems accept.
NAME_MAX = 255
PATH_MAX = 4096

_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
_TEMP_RE = re.compile(r"^\..*\.hdp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
_umask_lock = threading.Lock()


def kill_point(name: str, detail: str = "") -> None:
    """Die by SIGKILL here when ``HDP_KILL_AT`` is ``name`` or ``name:detail``; send this process
    SIGINT here when ``HDP_INTERRUPT_AT`` is (test hooks; no-ops otherwise)."""
    for env, sig in ((KILL_ENV, signal.SIGKILL), (INTERRUPT_ENV, signal.SIGINT)):
        want = os.environ.get(env)
        if want and (want == name or want == f"{name}:{detail}"):
            os.kill(os.getpid(), sig)


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
    group = _group_of(path)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"{tmp}: the writer did not create the file")
        _finish(tmp)
        kill_point("atomic-before-rename", path.name)  # complete, not yet in place
        if group is not None:  # one of the command's outputs: renamed with the others at its end
            group.hold_file(tmp, path)
            return
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
    group = _group_of(out_xml)
    if group is not None:  # one of the command's outputs: committed with the others at its end
        group.hold_pair(tmp_xml, out_xml)
        return
    _replace_pair(tmp_xml, out_xml)


def _replace_pair(tmp_xml: Path, out_xml: Path) -> None:
    tmp_bin, out_bin = tmp_xml.with_suffix(".bin"), out_xml.with_suffix(".bin")
    has_bin = tmp_bin.exists()
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


def commit_dir(tmp: Path, out: Path, marker: str) -> None:
    """Move a complete directory ``tmp`` (made beside ``out``, on its file system) onto ``out``:
    a reader sees the old directory or the new one, never a part. An existing ``out`` must hold
    ``marker`` (a file an earlier commit left: hdp replaces only what it wrote); it is renamed
    aside, the new one renamed in, the old one removed. Inside an open :class:`OutputSet` the
    directory waits beside ``out`` (:func:`output_now` finds it) and is committed with the others."""
    for f in tmp.iterdir():
        if f.is_file():
            _finish(f)
    os.chmod(tmp, file_mode() | (file_mode() & 0o444) >> 2)  # a directory: searchable where readable
    if out.exists() and not (out.is_dir() and (out / marker).is_file()):
        raise WriteError(f"{out}: exists and is not a directory hdp wrote (no {marker} in it); not replaced")
    group = _group_of(out)
    if group is not None:  # one of the command's outputs (a candidate written elsewhere is not)
        group.hold_dir(tmp, out, marker)
        return
    _replace_dir(tmp, out, marker)


def _replace_dir(tmp: Path, out: Path, marker: str) -> None:
    old = None
    if out.exists() or out.is_symlink():
        if not out.is_dir() or not (out / marker).is_file():
            raise WriteError(f"{out}: exists and is not a directory hdp wrote (no {marker} in it); not replaced")
        old = out.parent / temp_name(out.name + ".old")
        os.replace(out, old)
    kill_point("dir-old-moved")
    try:
        os.replace(tmp, out)
    except OSError:
        if old is not None:
            os.replace(old, out)
        raise
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- outputs committed together


class OutputSet:
    """The outputs of one command, committed together or not at all (:func:`outputs_together`).

    An output is a path :meth:`declare` d (``hdp.cli.common.check_paths`` declares every output a
    command names). While the set is open, a write of a declared path (:func:`atomic_path`,
    :func:`atomic_write`, :func:`commit_pair`) leaves the complete file in a temporary beside its
    destination (a pair in a temporary directory, under its own names) instead of renaming it;
    :meth:`where` says where it is meanwhile (a command that reads an output it wrote, such as the
    blob export reading the placed model). :meth:`commit` renames them all, in the order written,
    with SIGINT held back until the last; :meth:`discard` removes them, and the old files stay."""

    def __init__(self):
        self.declared: set[str] = set()
        self.files: dict[str, tuple[str, Path]] = {}  # destination -> ("file" | "pair" | "dir", where it waits)
        self.markers: dict[str, str] = {}  # a directory's marker file (commit_dir)
        #: directories an output's writing may create (missing when declared): removed again, when
        #: empty, if the outputs are discarded
        self._made: set[Path] = set()

    @staticmethod
    def _key(path) -> str:
        p = Path(os.path.abspath(path))
        return os.path.join(os.path.realpath(p.parent), p.name)

    def declare(self, paths) -> None:
        for p in paths:
            if p is not None and str(p) != "":
                self.declared.add(self._key(p))
                d = Path(os.path.abspath(p)).parent
                while not os.path.lexists(d) and d != d.parent:
                    self._made.add(d)
                    d = d.parent

    def holds(self, path) -> bool:
        return self._key(path) in self.declared

    def where(self, path) -> Path:
        """Where the content written to ``path`` is now (``path`` itself when nothing waits)."""
        held = self.files.get(self._key(path))
        return held[1] if held is not None else Path(path)

    def _drop(self, key: str) -> None:
        old = self.files.pop(key, None)
        if old is not None:
            _unlink_quietly(old[1] if old[0] in ("file", "dir") else old[1].parent)

    def hold_file(self, tmp: Path, path: Path) -> None:
        key = self._key(path)
        self._drop(key)  # written twice: the last one counts
        self.files[key] = ("file", tmp)

    def hold_pair(self, tmp_xml: Path, out_xml: Path) -> None:
        key = self._key(out_xml)
        self._drop(key)
        d = out_xml.parent / temp_name(out_xml.name)
        xml = d / out_xml.name
        try:  # a directory of its own takes an inode (and a block): a full disk refuses it here
            d.mkdir(mode=0o700)
            self.files[key] = ("pair", xml)  # held from its first instant: an interrupt discards it
            if tmp_xml.with_suffix(".bin").exists():
                os.replace(tmp_xml.with_suffix(".bin"), xml.with_suffix(".bin"))
            os.replace(tmp_xml, xml)
        except OSError as e:
            self._drop(key)
            for f in (tmp_xml, tmp_xml.with_suffix(".bin"), d):
                _unlink_quietly(f)
            raise write_error(out_xml, e) from None

    def hold_dir(self, tmp: Path, out: Path, marker: str) -> None:
        key = self._key(out)
        self._drop(key)
        held = out.parent / temp_name(out.name)
        os.replace(tmp, held)
        self.files[key] = ("dir", held)
        self.markers[key] = marker

    def _put(self, key: str, kind: str, tmp: Path) -> None:
        dest = Path(key)
        if kind == "file":
            kill_point("group-before-rename", dest.name)
            os.replace(tmp, dest)
            fsync_dir(dest.parent)
        elif kind == "dir":
            _replace_dir(tmp, dest, self.markers[key])
        else:
            _replace_pair(tmp, dest)
            _unlink_quietly(tmp.parent)

    def commit(self) -> None:
        """Rename every waiting output onto its destination (SIGINT waits until the last is done)."""
        with _sigint_held():
            items, self.files = list(self.files.items()), {}
            for key, (kind, tmp) in items:
                try:
                    self._put(key, kind, tmp)
                except OSError as e:
                    for _, (k2, t2) in items:
                        _unlink_quietly(t2 if k2 in ("file", "dir") else t2.parent)
                    raise write_error(Path(key), e) from None

    def release(self, path) -> None:
        """``path`` is no output of the command after all but an intermediate it goes on to read (a
        phase's placed model, written into the command's temporary directory): put it in place now
        and leave it out of the commit."""
        key = self._key(path)
        self.declared.discard(key)
        held = self.files.pop(key, None)
        if held is not None:
            try:
                self._put(key, *held)
            except OSError as e:
                raise write_error(Path(key), e) from None

    def discard(self) -> None:
        for key in list(self.files):
            self._drop(key)
        for d in sorted(self._made, key=lambda x: len(x.parts), reverse=True):  # deepest first
            try:
                d.rmdir()
            except OSError:
                pass  # not empty (someone else's files), or never made


_GROUP: OutputSet | None = None
_group_lock = threading.Lock()


def _group_of(path) -> OutputSet | None:
    g = _GROUP
    return g if g is not None and g.holds(path) else None


def declare_outputs(paths) -> None:
    """Count ``paths`` among the outputs of the open :class:`OutputSet` (none open: nothing)."""
    if _GROUP is not None:
        _GROUP.declare(paths)


def release_output(path) -> None:
    """:meth:`OutputSet.release` in the open set (none open: nothing to do)."""
    if _GROUP is not None:
        _GROUP.release(path)


def output_now(path) -> Path:
    """Where an output written by this command is to be read before its commit."""
    return _GROUP.where(path) if _GROUP is not None else Path(path)


@contextlib.contextmanager
def outputs_together() -> Iterator[OutputSet]:
    """Open an :class:`OutputSet` for the block: its outputs are committed when the block ends
    without an exception, removed when it raises (KeyboardInterrupt included). Inside an open set
    this joins it (the outermost commits)."""
    global _GROUP
    with _group_lock:
        outer = _GROUP
        if outer is None:
            _GROUP = OutputSet()
        group = _GROUP
    if outer is not None:
        yield group
        return
    try:
        yield group
        group.commit()
    except BaseException:
        group.discard()
        raise
    finally:
        with _group_lock:
            _GROUP = None


@contextlib.contextmanager
def _sigint_held():
    """SIGINT held back for the block (main thread only): an interrupt during it raises after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []
    old = signal.signal(signal.SIGINT, lambda *a: got.append(a))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            raise KeyboardInterrupt


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

"""hdp's on-disk caches: one entry store, several namespaces, one size cap.

Layout under the cache root (``--cache-dir``, default ``$XDG_CACHE_HOME/hdp`` or ``~/.cache/hdp``)::

    <root>/<kk>/<key>.hdp             pass outputs (encoded Modules)       hdp.passes.cache
    <root>/measure/<kk>/<key>.json    measured latencies                   hdp.runtime.measure.cache
    <root>/support/<kk>/<key>.json    query_model answers per device       hdp.passes.support
    <root>/calibrate/<kk>/<key>.json  fitted boundary models per host       hdp.runtime.costs.calibrate
    <root>/zoo/<model>-<key>/         generated benchmark models           hdp.zoo.models

An entry file is ``MAGIC``, then a blake2b checksum of the key and the payload together, then the
payload: a damaged entry, or an intact entry moved under another key, fails the check and is
discarded (never used). Entries are written with :func:`hdp.base.fsutil.atomic_write`. Reading an entry
touches its modification time, so pruning removes the least recently used first. The store never
fails its caller: an unreadable or unwritable entry is a miss (with a warning), not an error.

A zoo entry is a directory (the model's ``.xml`` and ``.bin``); using it touches its ``.xml``, so
it is pruned least recently used first like the others, as one entry.

Size cap: ``HDP_CACHE_MAX_BYTES`` (default 2 GiB) over every namespace, the zoo included; the first
time a process opens a cache root it removes temporaries of dead writers and, when the entries
exceed the cap, prunes them to 80 % of it, least recently used first, sparing entries used in the
last :data:`IN_USE_SECONDS` (another process may be reading them: a zoo model exported a moment ago
and larger than the cap once pruned itself, and every other model, before its compile began). ``hdp cache info`` and ``hdp cache prune`` show and
prune by hand.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import shutil
import stat
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from hdp.base.fsutil import atomic_write, clean_stale, is_temp
from hdp.base.validation import MAX_BYTES

MAGIC = b"HDPC\x01"
_CHECK = 16
DEFAULT_MAX_BYTES = 2 << 30
MAX_BYTES_ENV = "HDP_CACHE_MAX_BYTES"
#: (namespace, subdirectory of the root, entry suffix) of the entry stores; the zoo (directories) apart.
NAMESPACES = (("passes", "", ".hdp"), ("measure", "measure", ".json"), ("support", "support", ".json"),
              ("calibrate", "calibrate", ".json"))
#: Generated zoo models: one directory per model under ``<root>/zoo`` (:mod:`hdp.zoo.models`).
ZOO = "zoo"
_KEY_RE = re.compile(r"^[0-9a-f]{4,128}$")
_opened: set = set()
_opened_lock = threading.Lock()


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hdp"


def max_bytes() -> int:
    """The size cap: ``HDP_CACHE_MAX_BYTES`` (accepts 500M, 2G ...) or 2 GiB."""
    v = os.environ.get(MAX_BYTES_ENV, "")
    try:
        return parse_size(v) if v else DEFAULT_MAX_BYTES
    except ValueError as e:
        warnings.warn(f"{MAX_BYTES_ENV}: {e}; using {DEFAULT_MAX_BYTES} bytes", stacklevel=2)
        return DEFAULT_MAX_BYTES


#: What :func:`parse_size` says of a size over the largest.
OVER_SIZE = "over the largest size, 1 EiB (2^60 bytes)"


def shown(text, limit: int = 40) -> str:
    """A value for a one-line message: whole, or its start and its length."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit - 16]}... ({len(text)} characters)"


def parse_size(text: str) -> int:
    """``"1.5G"`` -> bytes (K, M, G, T are powers of 1024; a bare number is bytes). ValueError
    saying why for what is not a size or is over
    :data:`~hdp.base.validation.MAX_BYTES` (1 EiB)."""
    m = re.fullmatch(r"\s*([0-9]+)(?:\.([0-9]*))?\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    whole, frac, unit = m.group(1), m.group(2) or "", m.group(3) or " "
    if len(whole.lstrip("0")) > 20:  # read no further: far over the largest size
        raise ValueError(OVER_SIZE)
    mult = 1024 ** " kmgt".index(unit)
    n = int(whole) * mult + (int(float("0." + frac) * mult) if frac.strip("0") else 0)
    if n > MAX_BYTES:
        raise ValueError(OVER_SIZE)
    return n


def _checksum(key: str, payload: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=_CHECK)
    h.update(key.encode())
    h.update(b"\0")
    h.update(payload)
    return h.digest()


class Store:
    """Checksummed ``key -> bytes`` entries in ``<directory>/<key[:2]>/<key><suffix>``."""

    def __init__(self, directory: str | os.PathLike, suffix: str):
        self.dir = Path(directory)
        self.suffix = suffix

    def path(self, key: str) -> Path:
        if not _KEY_RE.match(key):
            raise ValueError(f"invalid cache key {key!r}")
        return self.dir / key[:2] / f"{key}{self.suffix}"

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (missing, unreadable or corrupt: discarded).
        Only a regular file is opened: a FIFO, socket, device or symlink in an entry's place is
        discarded unread (a FIFO would block the read forever)."""
        path = self.path(key)
        try:
            data = read_regular(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except NotRegular as e:
            self.discard(path, f"{e}, not a regular file")
            return None
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:  # the directory's path, not the entry, is at fault
                _warn_once(("long", str(self.dir)), f"cannot use the cache entries in {self.dir} "
                           f"({e.strerror}); continuing without them")
                return None
            self.discard(path, f"unreadable ({e.strerror or e})")  # a directory in its place, I/O error
            return None
        head = len(MAGIC) + _CHECK
        if not data.startswith(MAGIC):  # written by an older hdp (or damaged at its start): recompute
            self.discard(path, "not in this hdp's entry format", quiet=True)
            return None
        if len(data) < head or data[len(MAGIC):head] != _checksum(key, data[head:]):
            self.discard(path, "checksum mismatch")
            return None
        try:
            os.utime(path)  # least recently used goes first when pruning
        except OSError:
            pass
        return data[head:]

    def put(self, key: str, payload: bytes) -> bool:
        """Store ``payload`` under ``key``; False (with a warning, once per reason and directory)
        when the entry cannot be written."""
        path = self.path(key)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            atomic_write(path, MAGIC + _checksum(key, payload) + payload)
            return True
        except OSError as e:
            why = getattr(e, "reason", None) or e.strerror or str(e)
            _warn_once(("put", str(self.dir), why), f"cannot write cache entries in {self.dir} ({why}); "
                       f"continuing without them")
            return False

    def open(self) -> None:
        """Once per process: remove temporaries left in this store by writers that died."""
        if _first_open(("store", os.path.abspath(self.dir))):
            for shard in _shards(self.dir):
                clean_stale(shard)

    def discard(self, path: Path, why: str, quiet: bool = False) -> None:
        """Remove an unusable entry (with a warning unless ``quiet``)."""
        if not quiet:
            warnings.warn(f"discarding corrupt cache entry {path} ({why}); recomputing", stacklevel=3)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            pass


class NotRegular(OSError):
    """An entry's path holds something other than a regular file (its kind is the message)."""


def read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (not followed through a symlink); raises
    NotRegular otherwise, without opening a FIFO or device for reading (``O_NONBLOCK``)."""
    kind = _kind(os.lstat(path).st_mode)
    if kind:
        raise NotRegular(kind)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        kind = _kind(os.fstat(fd).st_mode)  # replaced between the lstat and the open
        if kind:
            raise NotRegular(kind)
        return f.read()


def _kind(mode: int) -> str:
    """"" for a regular file, else what it is."""
    if stat.S_ISREG(mode):
        return ""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


_warned: set = set()


def _warn_once(key, message: str) -> None:
    with _opened_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, stacklevel=3)


# --------------------------------------------------------------------------- whole-root maintenance


@dataclass
class Entry:
    namespace: str
    path: Path
    size: int
    mtime: float


def _first_open(key) -> bool:
    with _opened_lock:
        if key in _opened:
            return False
        _opened.add(key)
        return True


def _shards(base: Path) -> list[str]:
    try:
        return [e.path for e in os.scandir(base) if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _zoo_entries(root: Path, clean: bool) -> tuple[list[Entry], int]:
    """The zoo's model directories as entries (size: their files; time: the newest file's, so that
    using a model, which touches its ``.xml``, makes it recent)."""
    zoo = root / ZOO
    removed = clean_stale(zoo) if clean else 0
    out: list[Entry] = []
    try:
        dirs = [e for e in os.scandir(zoo) if e.is_dir(follow_symlinks=False) and not is_temp(e.name)]
    except OSError:
        return out, removed
    for d in dirs:
        size, mtime = 0, 0.0
        for dirpath, _, files in os.walk(d.path):
            for f in files:
                try:
                    st = os.lstat(os.path.join(dirpath, f))
                except OSError:
                    continue
                size += st.st_size
                mtime = max(mtime, st.st_mtime)
        out.append(Entry(ZOO, Path(d.path), size, mtime))
    return out, removed


def _entries(root: Path, clean: bool = True) -> tuple[list[Entry], int]:
    """Every entry of every namespace (the zoo's models included), and how many stale temporaries
    were removed."""
    out: list[Entry] = []
    removed = 0
    for ns, sub, suffix in NAMESPACES:
        for shard in _shards(root / sub if sub else root):
            if clean:
                removed += clean_stale(shard)
            try:
                files = list(os.scandir(shard))
            except OSError:
                continue
            for f in files:
                if f.name.endswith(suffix) and _KEY_RE.match(f.name[: -len(suffix)]) and not is_temp(f.name):
                    try:
                        st = f.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append(Entry(ns, Path(f.path), st.st_size, st.st_mtime))
    zoo, zremoved = _zoo_entries(root, clean)
    return out + zoo, removed + zremoved


#: Entries used this recently are never pruned automatically (``hdp cache prune`` may remove them).
IN_USE_SECONDS = 600.0


def open_root(root: str | os.PathLike) -> None:
    """Once per process and root: remove dead writers' temporaries; prune when over the cap
    (entries used in the last :data:`IN_USE_SECONDS` are spared)."""
    if not _first_open(("root", os.path.abspath(root))):
        return
    cap = max_bytes()
    entries, _ = _entries(Path(root))
    if sum(e.size for e in entries) > cap:
        _prune(entries, int(cap * 0.8), spare_after=time.time() - IN_USE_SECONDS)


def _prune(entries: list[Entry], limit: int, spare_after: float = math.inf) -> tuple[int, int]:
    """Remove the least recently used entries until ``limit`` bytes remain, never one used after
    ``spare_after`` (a time stamp)."""
    total = sum(e.size for e in entries)
    removed = freed = 0
    for e in sorted(entries, key=lambda e: e.mtime):
        if total <= limit or e.mtime > spare_after:
            break
        try:
            if e.namespace == ZOO:
                shutil.rmtree(e.path)
            else:
                e.path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= e.size
        freed += e.size
        removed += 1
    return removed, freed


def prune(root: str | os.PathLike, limit: int | None = None) -> dict:
    """Remove least recently used entries until they take at most ``limit`` bytes (default: the
    cap), and dead writers' temporaries. Returns counts."""
    entries, temps = _entries(Path(root))
    removed, freed = _prune(entries, max_bytes() if limit is None else limit)
    return {"removed": removed, "freed_bytes": freed, "stale_temporaries": temps,
            "kept": len(entries) - removed, "kept_bytes": sum(e.size for e in entries) - freed}


def info(root: str | os.PathLike) -> dict:
    """Entries and bytes per namespace (the zoo's models included), without changing anything."""
    root = Path(root)
    entries, _ = _entries(root, clean=False)
    out = {"root": str(root), "max_bytes": max_bytes(), "namespaces": {}}
    for ns in [n for n, _, _ in NAMESPACES] + [ZOO]:
        mine = [e for e in entries if e.namespace == ns]
        out["namespaces"][ns] = {"entries": len(mine), "bytes": sum(e.size for e in mine)}
    out["zoo"] = out["namespaces"][ZOO]
    out["total_bytes"] = sum(e.size for e in entries)
    return out

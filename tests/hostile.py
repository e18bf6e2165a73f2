"""Hostile environments and inputs of issue 23, built for tests (tests/test_reliability.py), the fuzz
campaign (tests/test_fuzz.py) and the probe counts (bench/probe_hostile.py): a small file system
that fills up, names near NAME_MAX and paths over PATH_MAX, special files in the cache, forged but
valid cache entries, pathologically nested XML, huge dimensions and long op chains.

Everything here builds files; nothing runs hdp.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np

# --------------------------------------------------------------------------- a small file system


class MountRefused(Exception):
    """``mount -t tmpfs`` is not permitted here (not root, or a container without CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def small_fs(directory: str | os.PathLike, size: str = "1m", inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size`` (and at most ``inodes`` inodes) mounted on ``directory`` for the block;
    raises MountRefused where mounting is not permitted."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], capture_output=True, text=True)
    except OSError as e:
        raise MountRefused(str(e)) from None
    if r.returncode != 0:
        raise MountRefused(r.stderr.strip() or f"mount exited {r.returncode}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def fill(directory: str | os.PathLike, leave: int = 0) -> None:
    """Fill the file system of ``directory`` until at most ``leave`` bytes are free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    path = Path(directory) / "filler"
    with open(path, "ab") as f:
        chunk = bytes(1 << 16)
        while free > leave:
            n = min(len(chunk), free - leave)
            try:
                f.write(chunk[:n])
                f.flush()
            except OSError:
                break
            st = os.statvfs(directory)
            free = st.f_bavail * st.f_frsize


def use_inodes(directory: str | os.PathLike) -> int:
    """Create empty files in ``directory`` until its file system has no inode left; returns how many."""
    d = Path(directory) / "inodes"
    d.mkdir(exist_ok=True)
    n = 0
    while True:
        try:
            (d / str(n)).touch()
        except OSError:
            return n
        n += 1


# --------------------------------------------------------------------------- long names


def long_name(nbytes: int, suffix: str = ".xml") -> str:
    """A file name of exactly ``nbytes`` bytes ending in ``suffix``."""
    return "n" * (nbytes - len(suffix)) + suffix


def long_path(base: str | os.PathLike, nbytes: int, leaf: str = "p.xml") -> Path:
    """A path under ``base`` of at least ``nbytes`` bytes made of 200-byte directory names (not
    created: a path over PATH_MAX cannot be)."""
    p = Path(os.path.abspath(base))
    while len(os.fsencode(str(p / leaf))) < nbytes:
        p = p / ("d" * 200)
    return p / leaf


# --------------------------------------------------------------------------- models


def save(model, path: str | os.PathLike) -> Path:
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return Path(path)


def chain_model(n_ops: int, shared: bool = True, width: int = 16):
    """A Parameter, then ``n_ops // 2`` Relu/Add pairs, then a Result. ``shared``: every Add reads
    one Constant (the issue's chain); else each Add has its own (seven distinct values)."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, width], np.float32, name="x")
    c = ops.constant(np.ones((1, width), np.float32), name="c")
    h = x
    for i in range(n_ops // 2):
        h = ops.relu(h, name=f"relu{i}")
        k = c if shared else ops.constant(np.full((1, width), 1.0 + i % 7, np.float32), name=f"c{i}")
        h = ops.add(h, k, name=f"add{i}")
    return ov.Model([ops.result(h, name="out")], [x], "chain")


def chain_file(work: str | os.PathLike, n_ops: int, shared: bool) -> Path:
    """:func:`chain_model` saved once in ``work`` (``chain-N-shared.xml`` / ``chain-N-own.xml``)."""
    xml = Path(work) / f"chain-{n_ops}-{'shared' if shared else 'own'}.xml"
    return xml if xml.exists() else save(chain_model(n_ops, shared=shared), xml)


def relu_model(shape, dtype=np.float32, name: str = "relu"):
    """x (``shape``) -> Relu -> Result."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(list(shape), dtype, name="x")
    return ov.Model([ops.result(ops.relu(x, name="r"), name="out")], [x], name)


def broadcast_model(n: int):
    """x [1, n] -> Broadcast to [n, n] -> Relu: small input, an op output of n*n floats."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, n], np.float32, name="x")
    b = ops.broadcast(x, ops.constant(np.array([n, n], np.int64), name="target"), name="wide")
    return ov.Model([ops.result(ops.relu(b, name="r"), name="out")], [x], "broadcast")


def nest(xml: str | os.PathLike, depth: int, where: str = "model") -> Path:
    """Insert ``depth`` nested elements into ``xml`` (in place): in the model's ``<rt_info>``
    (``where="model"``) or in the first layer (``"layer"``, an ``<rt_info>`` of its own)."""
    xml = Path(xml)
    text = xml.read_text()
    inner = "<n>" * (depth - 1) + '<n value="1"/>' + "</n>" * (depth - 1)
    if where == "model":
        i = text.rindex("<rt_info>") + len("<rt_info>")
        text = text[:i] + inner + text[i:]
    else:
        i = text.index("<layer ")
        j = text.index(">", i) + 1
        text = text[:j] + f'<rt_info><user_data name="deep">{inner}</user_data></rt_info>' + text[j:]
    xml.write_text(text)
    return xml


# --------------------------------------------------------------------------- the cache


def entries(cache: str | os.PathLike, suffix: str = ".hdp") -> list[Path]:
    """Pass-cache entries (``<root>/<kk>/<key>.hdp``), sorted."""
    return sorted(p for p in Path(cache).glob(f"??/*{suffix}") if not p.name.startswith("."))


def special_file(path: str | os.PathLike, kind: str) -> Path:
    """Replace ``path`` by a ``fifo``, a ``socket`` (a socket inode with no listener), a ``chardev``
    (/dev/null's numbers; needs root) or a ``symlink`` to /dev/zero."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # What a bound-then-closed listener leaves; mknod needs no privilege for a socket, and no
        # AF_UNIX address either (those stop at 108 bytes, shorter than pytest's tmp paths).
        os.mknod(path, 0o600 | stat.S_IFSOCK)
    elif kind == "chardev":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "symlink":
        path.symlink_to("/dev/zero")
    else:
        raise ValueError(kind)
    return path


def forge_entry(cache_root: str | os.PathLike, key: str, module) -> Path:
    """Store ``module`` under ``key`` with a valid checksum: what a checksum cannot refuse."""
    from hdp.passes.cache import PassCache

    c = PassCache(cache_root)
    c.put(key, module)
    return c._path(key)


def lower_key(cache_root: str | os.PathLike, xml: str | os.PathLike, request=None) -> str:
    """The pass-cache key of the lowered ``xml`` (as ``hdp compile`` computes it)."""
    from hdp.ir import serde
    from hdp.ir.openvino_read import file_digest
    from hdp.ir.shapes import as_request
    from hdp.pipeline.stages import FRONTEND_VERSION

    xml = Path(xml)
    return serde.digest_bytes(serde.encode_any(
        ["lower", FRONTEND_VERSION, str(xml.resolve()), file_digest(xml), as_request(request)]))


def poison_lower_entry(cache_root: str | os.PathLike, xml: str | os.PathLike, other_xml: str | os.PathLike) -> Path:
    """The lowered module of ``other_xml``, claiming to be ``xml``'s (its source and digest), stored
    with a valid checksum under ``xml``'s lower key: it decodes and verifies, but its ops are not
    the file's."""
    from hdp.ir.openvino_frontend import lower

    mine = lower(xml)
    forged = lower(other_xml).replace(meta=mine.meta)
    return forge_entry(cache_root, lower_key(cache_root, xml), forged)


def copy_tree(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)

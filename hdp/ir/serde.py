"""Deterministic encoding, hashing and file I/O for Modules.

A ``.hdp`` file is ``MAGIC`` followed by the msgpack encoding of a :class:`Module`. The schema
version is checked before the full decode so a file from a newer hdp gets a clear message, and
every decoded Module is checked by :func:`hdp.ir.verify.verify` before anyone uses it: bytes from a
file or a cache may be forged, and the Numba kernels trust their arrays.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_write
from hdp.ir.types import SCHEMA_VERSION, Module
from hdp.ir.verify import VerifyError, verify

MAGIC = b"HDPIR\x00"

_encoder = msgspec.msgpack.Encoder(order="deterministic")
_decoder = msgspec.msgpack.Decoder(Module)


class _Header(msgspec.Struct):
    schema: int


_header_decoder = msgspec.msgpack.Decoder(_Header)


def encode(module: Module) -> bytes:
    return _encoder.encode(module)


def encode_any(value) -> bytes:
    """Deterministic msgpack encoding of any msgspec-supported value (pass options, keys)."""
    return _encoder.encode(value)


def decode(data: bytes, source: str = "<bytes>") -> Module:
    """The Module encoded in ``data``, verified; InputError naming ``source`` otherwise."""
    try:
        header = _header_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise InputError(f"{source}: not an hdp module or corrupt ({e})") from None
    if header.schema > SCHEMA_VERSION:
        raise InputError(
            f"{source}: written with IR schema {header.schema}, this hdp reads up to "
            f"{SCHEMA_VERSION}; upgrade hdp"
        )
    if header.schema < 1:
        raise InputError(f"{source}: invalid IR schema {header.schema}")
    try:
        module = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise InputError(f"{source}: corrupt hdp module ({e})") from None
    try:
        verify(module)
    except VerifyError as e:
        raise InputError(f"{source}: invalid hdp module: {e}") from None
    return module


def digest_bytes(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def digest(module: Module) -> str:
    """Content hash of a Module: same Module, same digest."""
    return digest_bytes(encode(module))


def save(module: Module, path: str | os.PathLike) -> None:
    """Write ``module`` to ``path`` atomically (see :mod:`hdp.base.fsutil`)."""
    atomic_write(path, MAGIC + encode(module))


def load(path: str | os.PathLike) -> Module:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected an .hdp file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if not data.startswith(MAGIC):
        raise InputError(f"{path}: not an hdp module file (bad magic bytes)")
    return decode(data[len(MAGIC):], str(path))

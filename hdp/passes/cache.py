"""Content-addressed on-disk cache of pass outputs.

An entry is ``<dir>/<key[:2]>/<key>.hdp``: a blake2b checksum of the payload, then the payload
(an encoded Module). A corrupt entry (bad checksum or undecodable) is deleted and reported as a miss.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from hdp.errors import InputError
from hdp.ir import serde
from hdp.ir.types import Module

_CHECK = 16  # bytes of checksum


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hdp"


class PassCache:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.hdp"

    def get(self, key: str) -> Module | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        payload = data[_CHECK:]
        ok = len(data) > _CHECK and bytes.fromhex(serde.digest_bytes(payload)) == data[:_CHECK]
        if ok:
            try:
                return serde.decode(payload, str(path))
            except InputError:
                ok = False
        warnings.warn(f"discarding corrupt cache entry {path}; recomputing", stacklevel=2)
        path.unlink(missing_ok=True)
        return None

    def put(self, key: str, module: Module, encoded: bytes | None = None) -> None:
        payload = serde.encode(module) if encoded is None else encoded
        serde.atomic_write(self._path(key), bytes.fromhex(serde.digest_bytes(payload)) + payload)

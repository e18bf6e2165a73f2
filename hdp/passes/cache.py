"""Content-addressed on-disk cache of pass outputs.

An entry is ``<dir>/<key[:2]>/<key>.hdp`` in the :class:`hdp.cache.Store` format: a checksum of the
key and the payload (an encoded Module), then the payload. A corrupt entry (bad checksum, an entry
stored under another key, undecodable, or failing :func:`hdp.ir.verify.verify`) is deleted with a
warning and reported as a miss; the cache never stops a run.
"""

from __future__ import annotations

import os
from pathlib import Path

from hdp.cache import Store, default_cache_dir, open_root
from hdp.errors import InputError
from hdp.ir import serde
from hdp.ir.types import Module

__all__ = ["PassCache", "default_cache_dir"]


class PassCache:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.store = Store(self.dir, ".hdp")
        open_root(self.dir)

    def _path(self, key: str) -> Path:
        return self.store.path(key)

    def get(self, key: str) -> Module | None:
        payload = self.store.get(key)
        if payload is None:
            return None
        try:
            return serde.decode(payload, str(self._path(key)))
        except InputError as e:
            self.store.discard(self._path(key), str(e))
            return None

    def put(self, key: str, module: Module, encoded: bytes | None = None) -> None:
        self.store.put(key, serde.encode(module) if encoded is None else encoded)

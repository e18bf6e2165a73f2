"""Content-addressed on-disk cache of pass outputs.

An entry is ``<dir>/<key[:2]>/<key>.hdp`` in the :class:`hdp.base.cache.Store` format: a checksum of the
key and the payload (an encoded Module), then the payload. A corrupt entry (bad checksum, an entry
stored under another key, undecodable, or failing :func:`hdp.ir.verify.verify`) is deleted with a
warning and reported as a miss; the cache never stops a run.

An entry that decodes but belongs to another model is what a checksum cannot see. The pass manager
checks a hit against its input (:func:`hdp.passes.manager.consistent`); a lowered module is checked
against its file by whatever reads the model next, and :func:`hdp.pipeline.recompute_if_stale`
discards the entries a command read (:attr:`PassCache.hits`) and recomputes once.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from hdp.base.cache import Store, open_root
from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.ir.types import Module

__all__ = ["PassCache"]


class PassCache:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.store = Store(self.dir, ".hdp")
        self.hits: list[str] = []  # keys of the modules this process read, in order
        self.reading = True  # False: every get is a miss (a recomputation after a stale hit)
        self._discarded: set[str] = set()
        open_root(self.dir)

    def _path(self, key: str) -> Path:
        return self.store.path(key)

    def get(self, key: str) -> Module | None:
        if not self.reading:
            return None
        payload = self.store.get(key)
        if payload is None:
            return None
        try:
            module = serde.decode(payload, str(self._path(key)))
        except InputError as e:
            self.store.discard(self._path(key), str(e))
            return None
        self.hits.append(key)
        return module

    def discard(self, keys, why: str) -> None:
        """Remove the entries of ``keys`` (with one warning saying ``why``; keys discarded before
        are skipped)."""
        keys = [k for k in dict.fromkeys(keys) if k not in self._discarded]
        self._discarded.update(keys)
        if keys:
            one = len(keys) == 1
            warnings.warn(f"discarding {len(keys)} cache entr{'y' if one else 'ies'} that decoded but "
                          f"do{'es' if one else ''} not match {'its' if one else 'their'} model ({why}); "
                          f"recomputing", stacklevel=2)
        for k in keys:
            self.store.discard(self._path(k), why, quiet=True)

    def put(self, key: str, module: Module, encoded: bytes | None = None) -> None:
        self.store.put(key, serde.encode(module) if encoded is None else encoded)

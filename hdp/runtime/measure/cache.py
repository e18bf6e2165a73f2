"""Where measurements are kept: successful single measurements as JSON, keyed by what was measured.

A :class:`MeasureCache` keeps a :class:`~hdp.runtime.measure.measurement.Measurement` under a key the
:class:`~hdp.runtime.measure.measurer.Measurer` derives from the model's digest, the placement, the target,
runs and warm-up, :data:`MEASURE_VERSION` and :func:`host_key` (CPU model and flags, OpenVINO
version). Failures and interleaved comparisons are never cached. The directory is the hdp cache
root of the current :func:`cache_scope` + ``/measure`` (:func:`measure_cache_dir`; the CLI sets the
scope from ``--cache-dir`` and ``--no-cache``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from pathlib import Path

import msgspec

from hdp.base.cache import Store, default_cache_dir, open_root
from hdp.runtime.measure.measurement import Measurement
from hdp.target.host import host_fingerprint

#: Bump when the meaning of a cached measurement changes.
MEASURE_VERSION = 2

__all__ = ["MEASURE_VERSION", "MeasureCache", "cache_scope", "host_key", "measure_cache_dir"]

_CACHE_SCOPE: contextvars.ContextVar[tuple[bool, Path | None]] = contextvars.ContextVar(
    "hdp_measure_cache", default=(True, None))


@contextlib.contextmanager
def cache_scope(cache_dir: str | os.PathLike | None = None, *, enabled: bool = True):
    """Within the block, ``Measurer(cache=True)`` (the default, also inside passes and placers)
    keeps measurements under ``<cache_dir>/measure`` (``cache_dir``: the hdp cache root, default
    ``~/.cache/hdp``), or caches nothing when not ``enabled``. The CLI sets it from ``--cache-dir``
    and ``--no-cache`` for the whole command."""
    token = _CACHE_SCOPE.set((bool(enabled), Path(cache_dir) if cache_dir else None))
    try:
        yield
    finally:
        _CACHE_SCOPE.reset(token)


def measure_cache_dir() -> Path | None:
    """The directory ``Measurer(cache=True)`` uses here and now (None: caching is off)."""

    enabled, root = _CACHE_SCOPE.get()
    return ((root or default_cache_dir()) / "measure") if enabled else None


class MeasureCache:
    """Successful measurements as JSON entries ``<dir>/<key[:2]>/<key>.json`` of a
    :class:`hdp.base.cache.Store` (checksummed with their key; corrupt ones are measured again)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.dir = Path(directory) if directory else (measure_cache_dir() or default_cache_dir() / "measure")
        self.store = Store(self.dir, ".json")
        if directory is None:
            open_root(self.dir.parent)  # cleans and prunes every namespace of the default root
        self.store.open()

    def _path(self, key: str) -> Path:
        return self.store.path(key)

    def get(self, key: str) -> Measurement | None:
        data = self.store.get(key)
        if data is None:
            return None
        try:
            m = msgspec.json.decode(data, type=Measurement)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.store.discard(self._path(key), "undecodable")  # measure again
            return None
        return msgspec.structs.replace(m, cached=True)

    def put(self, key: str, m: Measurement) -> None:
        if m.ok:
            self.store.put(key, msgspec.json.encode(msgspec.structs.replace(m, cached=False)))


def host_key() -> list[str]:
    """What a measurement key holds of this host (measurements taken elsewhere do not apply)."""
    return [host_fingerprint()]  # CPU model, flags and count, OpenVINO version

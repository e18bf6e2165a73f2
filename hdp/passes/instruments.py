"""Instruments observe passes from the outside (timing, IR dumps, progress)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from hdp.fsutil import atomic_write
from hdp.ir import serde


class Instrument:
    def before(self, name: str, key: str) -> None:
        pass

    def after(self, name: str, key: str, hit: bool, module) -> None:
        pass


class Timing(Instrument):
    """Per-pass wall time and cache hits: rows of {pass, key, seconds, cache_hit}."""

    def __init__(self):
        self.rows: list[dict] = []
        self._t0 = 0.0

    def before(self, name, key):
        self._t0 = time.perf_counter()

    def after(self, name, key, hit, module):
        self.rows.append({"pass": name, "key": key, "seconds": time.perf_counter() - self._t0,
                          "cache_hit": hit})

    def write(self, path: str | Path) -> None:
        atomic_write(path, (json.dumps(self.rows, indent=2) + "\n").encode())


class DumpIR(Instrument):
    """Write the Module after each pass to ``<dir>/<index>-<pass>.hdp``."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.i = 0

    def after(self, name, key, hit, module):
        self.i += 1
        serde.save(module, self.dir / f"{self.i:02d}-{name}.hdp")


class Progress(Instrument):
    """One line per pass on stderr."""

    def before(self, name, key):
        self._t0 = time.perf_counter()

    def after(self, name, key, hit, module):
        dt = time.perf_counter() - self._t0
        took = "cached" if hit else f"{dt:.2f}s"
        print(f"[hdp] {name:<10} {took}", file=sys.stderr, flush=True)

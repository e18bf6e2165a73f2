"""Instruments observe stages from the outside (timing, IR dumps, progress).

The manager calls ``before(name, key)`` and ``after(name, key, hit, module)`` around every stage it
runs: lower, each pass, check, raise. Calls nest: a check that repairs a placement runs
``partition`` and ``assign`` again inside its own ``before``/``after``, so an instrument that
times keeps a stack of start times.
"""

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
    """Per-stage wall time and cache hits: rows of {pass, key, seconds, cache_hit}, in the order
    the stages end (a nested stage's row comes before the row of the stage around it)."""

    def __init__(self):
        self.rows: list[dict] = []
        self._starts: list[float] = []

    def before(self, name, key):
        self._starts.append(time.perf_counter())

    def after(self, name, key, hit, module):
        self.rows.append({"pass": name, "key": key, "seconds": time.perf_counter() - self._starts.pop(),
                          "cache_hit": hit})

    def write(self, path: str | Path) -> None:
        atomic_write(path, (json.dumps(self.rows, indent=2) + "\n").encode())


class DumpIR(Instrument):
    """Write the Module after each stage to ``<dir>/<index>-<stage>.hdp``."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.i = 0

    def after(self, name, key, hit, module):
        self.i += 1
        serde.save(module, self.dir / f"{self.i:02d}-{name}.hdp")


class Progress(Instrument):
    """One line per stage on stderr."""

    def __init__(self):
        self._starts: list[float] = []

    def before(self, name, key):
        self._starts.append(time.perf_counter())

    def after(self, name, key, hit, module):
        dt = time.perf_counter() - self._starts.pop()
        took = "cached" if hit else f"{dt:.2f}s"
        print(f"[hdp] {name:<10} {took}", file=sys.stderr, flush=True)

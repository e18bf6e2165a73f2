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

from hdp.base.fsutil import atomic_write
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
    """One line per stage on stderr; ``live``: one status line on a terminal, rewritten in place as
    stages start and finish and cleared by :meth:`close` (what a compile without ``-v`` shows, so
    that its report stays short)."""

    def __init__(self, live: bool = False):
        self._starts: list[float] = []
        self.live = live
        self._shown = 0

    def _status(self, text: str) -> None:
        pad = max(self._shown - len(text), 0)
        print(f"\r{text}{' ' * pad}\r" if text else f"\r{' ' * self._shown}\r", end="", file=sys.stderr, flush=True)
        self._shown = len(text)

    def before(self, name, key):
        self._starts.append(time.perf_counter())
        if self.live:
            self._status(f"[hdp] {name} ...")

    def after(self, name, key, hit, module):
        dt = time.perf_counter() - self._starts.pop()
        took = "cached" if hit else f"{dt:.2f}s"
        if self.live:
            self._status(f"[hdp] {name} {took}")
        else:
            print(f"[hdp] {name:<10} {took}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Clear a live status line."""
        if self.live and self._shown:
            self._status("")

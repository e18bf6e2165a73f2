"""What measuring a placement gives: run times, and the candidates of an interleaved comparison.

- :class:`Measurement`: the wall times of ``runs`` inferences of one compiled placement or plain
  compile (or its ``error``), with the median and spread;
- :class:`Candidate` (built with :func:`unplaced`, :func:`placed`, :func:`placed_file`) and
  :func:`graph_of`: one thing to run in a head-to-head, and the identity of the graph it runs;
- :class:`HeadToHead` and :class:`BestOf`: candidates measured interleaved in one worker
  (:meth:`hdp.runtime.measure.measurer.Measurer.head_to_head` and ``best_of``), compared and chosen by
  :mod:`hdp.runtime.measure.stats`.

These are values: nothing here starts a worker or compiles anything.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from hdp.base import glossary
from hdp.base.errors import HdpError, InputError
from hdp.ir.op_identity import op_structure
from hdp.runtime.measure import stats
from hdp.runtime.measure.load import HostLoad
from hdp.runtime.measure.selection import Selection, select_best
from hdp.runtime.measure.stats import compare, hodges_lehmann
from hdp.runtime.placed.model import read_placed
from hdp.target.target import Target

__all__ = ["MeasureError", "Measurement", "Candidate", "HeadToHead", "BestOf", "default_config", "default_plain",
           "default_text", "graph_of",
           "placed", "placed_file", "unplaced"]


class MeasureError(HdpError):
    """A placement could not be measured: its compile or run failed, crashed or timed out."""


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    """Wall times of ``runs`` inferences of one compiled placement (or of an ``error``)."""

    what: str  # "HETERO:CPU,CPU_B" for a placement, "plain:CPU" for the unplaced model
    target: str
    runs: int
    warmup: int
    times: tuple[float, ...] = ()
    error: str = ""
    compile_seconds: float = 0.0
    cached: bool = False
    submodels: int = 0  # HETERO_NUMBER_OF_SUBMODELS of a placement (0: plain compile, or not known)
    properties: dict[str, str] = {}  # what a default plain compile chose (see default_plain)

    @property
    def ok(self) -> bool:
        return not self.error and len(self.times) > 0

    def _q(self, q: float) -> float:
        return float(np.quantile(self.times, q)) if self.ok else float("nan")

    @property
    def median(self) -> float:
        return self._q(0.5)

    @property
    def min(self) -> float:
        return min(self.times) if self.ok else float("nan")

    @property
    def max(self) -> float:
        return max(self.times) if self.ok else float("nan")

    @property
    def q1(self) -> float:
        return self._q(0.25)

    @property
    def q3(self) -> float:
        return self._q(0.75)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.times) if self.ok and len(self.times) > 1 else 0.0

    def to_dict(self) -> dict:
        """Plain data for JSON (seconds; statistics included)."""
        d = msgspec.to_builtins(self)
        d.update(ok=self.ok)
        if self.ok:
            d.update(median=self.median, min=self.min, max=self.max, q1=self.q1, q3=self.q3,
                     iqr=self.q3 - self.q1, stdev=self.stdev)
        return d

    def summary(self) -> str:
        """One line: ``latency median 1.234 ms (min .., IQR .. - .., max ..; stdev ..) over 10 runs``."""
        if not self.ok:
            return f"error: {self.error}"
        ms = 1e3
        return (f"latency median {self.median * ms:.3f} ms (min {self.min * ms:.3f}, IQR {self.q1 * ms:.3f}-"
                f"{self.q3 * ms:.3f}, max {self.max * ms:.3f}; stdev {self.stdev * ms:.3f}) over "
                f"{len(self.times)} runs" + (" [cached]" if self.cached else ""))



# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True, eq=False)
class Candidate:
    """One thing to run in a head-to-head comparison: the unplaced model compiled on ``unplaced_on``
    (no HETERO), the placement ``device_of`` (an index into ``devices`` per op, or a device name
    per op, as for :meth:`Measurer.measure`) compiled with HETERO, or a placed model file ``xml``
    (another placement of the measured model, compiled as the file has it). Build with
    :func:`unplaced`, :func:`placed` or :func:`placed_file`."""

    name: str
    unplaced_on: str | None = None
    device_of: Any = None
    devices: tuple[str, ...] | None = None
    xml: str | None = None
    used: tuple[str, ...] = ()  # of ``xml``: the devices its ops are on
    graph: tuple[str, str] | None = None  # of ``xml``: see graph_of and placed_file
    execution: str = "sequential"  # of a placement or a file: HETERO, or hdp's concurrent executor
    defaults: bool = False  # of ``unplaced_on``: OpenVINO's own defaults, not the target's device
    config: dict | None = None  # of a default plain compile: its compile options (hints)
    target: Target | None = None  # of ``xml``: compiled on this target's devices (None: the measurer's)


def graph_of(device_of, devices: Sequence[str]) -> tuple[str, str]:
    """The identity of the graph a placement runs (:attr:`HeadToHead.graphs`): ``("one", device)``
    when every op is on one device, else ``("mixed", digest of every op's device)``."""
    dev = np.asarray(device_of)
    used = [d for k, d in enumerate(devices) if (dev == k).any()]
    if len(used) == 1:
        return ("one", used[0])
    per_op = "\n".join(devices[int(k)] for k in dev)
    return ("mixed", hashlib.blake2b(per_op.encode(), digest_size=16).hexdigest())


def placed_file(xml: str | os.PathLike, name: str | None = None, target: Target | None = None,
                execution: str = "sequential", own: bool = False) -> Candidate:
    """A placed model file (from ``hdp compile``) as a head-to-head candidate, compiled with
    HETERO as the file has it. Its graph identity is ``("one", device)`` when every op is on one
    device, else ``("file", digest)`` of its op structure and every op's device: two files with
    equal identities run the same graph on the same devices. With ``target``, every device the
    file uses must be one of its (InputError otherwise). ``own``: compiled on the target the file
    records (its devices as it was placed for), whatever the measurer's; its identity then
    includes that target, so files of two targets are never the same graph."""

    pm = read_placed(xml)
    if target is not None:
        for d in pm.used:
            if d not in target.device_names:
                raise InputError(f"{xml}: ops are placed on '{d}', which target '{target.name}' does not have "
                                 f"(it has {', '.join(target.device_names)})")
    ops = pm.model.get_ordered_ops()
    if len(pm.used) == 1:
        graph = ("one", pm.used[0])
    else:
        h = hashlib.blake2b(op_structure(ops).digest().encode(), digest_size=16)
        h.update("\n".join(op.get_rt_info()["affinity"].astype(str) for op in ops).encode())
        graph = ("file", h.hexdigest())
    if execution != "sequential" and len(pm.used) > 1:
        graph = (execution, graph[1])  # another way of running it: never the same as HETERO's
    if own:
        graph = (graph[0], f"{graph[1]}@{pm.target.name}")
    return Candidate(name=name or str(xml), xml=str(Path(xml).resolve()), used=tuple(pm.used), graph=graph,
                     execution=execution, target=pm.target if own else None)


def unplaced(device: str, name: str | None = None) -> Candidate:
    """The unplaced model compiled directly on ``device`` (named ``plain <device>``)."""
    return Candidate(name=name or f"plain {device}", unplaced_on=device)


def default_config(device: str, objective: str = "latency") -> dict[str, str]:
    """The compile options of the host's default plain compile on device kind ``device``: none
    but the throughput hint under ``objective="throughput"`` (what a user asks OpenVINO for to
    serve), and, on the CPU plugin, its thread pinning off: hdp measures every candidate in one
    process, and there a pinned compile slowed the models compiled after it 10-30× (gpt2-tiny on
    the 2-core VM, 0.25 ms against 2.5-7.3 ms for whichever was compiled last, and the process
    stayed so after the pinned model was released)."""
    out = {"ENABLE_CPU_PINNING": "NO"} if device.split(".")[0] == "CPU" else {}
    if objective == "throughput":
        out["PERFORMANCE_HINT"] = "THROUGHPUT"
    return out


def default_plain(device: str, objective: str = "latency", name: str | None = None) -> Candidate:
    """The host's default plain compile on device kind ``device`` (``CPU``, ``GPU``, ``NPU``): the
    unplaced model compiled by a Core with OpenVINO's own defaults (every core, its default
    precision, e.g. bf16 on a CPU with AVX-512 BF16, its default latency hint), with
    :func:`default_config` only: what a user gets without hdp. Named ``default <device>``."""
    return Candidate(name=name or f"default {device}", unplaced_on=device, defaults=True,
                     config=default_config(device, objective))


def default_text(properties: dict) -> str:
    """What a default plain compile chose, briefly: ``bf16, 2 threads`` (streams when more than
    one, the hint when not the latency one)."""
    parts = []
    if properties.get("INFERENCE_PRECISION_HINT"):
        parts.append(properties["INFERENCE_PRECISION_HINT"])
    if properties.get("INFERENCE_NUM_THREADS"):
        parts.append(f"{properties['INFERENCE_NUM_THREADS']} threads")
    if properties.get("NUM_STREAMS", "1") != "1":
        parts.append(f"{properties['NUM_STREAMS']} streams")
    if properties.get("PERFORMANCE_HINT", "LATENCY") != "LATENCY":
        parts.append(f"{properties['PERFORMANCE_HINT']} hint")
    return ", ".join(parts) or "OpenVINO's defaults"


def placed(device_of, devices: Sequence[str] | None = None, name: str = "placement",
           execution: str = "sequential") -> Candidate:
    """A placement, compiled with HETERO (``execution="concurrent"``: run by hdp's concurrent executor)."""
    return Candidate(name=name, device_of=device_of, devices=None if devices is None else tuple(devices),
                     execution=execution)


@dataclass(frozen=True, eq=False)
class HeadToHead:
    """Candidates measured interleaved in the same worker (see :meth:`Measurer.head_to_head`).

    ``measurements[i].times[r]`` is candidate ``i``'s time in round ``r`` (the same rounds for
    every candidate that ran; a failed one has ``error`` set). ``graphs[i]`` identifies the graph
    a candidate runs: ``("one", device)`` for a plain compile and for a placement with every op on
    that device (the same graph), ``("default", device)`` for the host's default plain compile,
    ``("mixed", digest)`` otherwise. ``blocks[r]``: the block of round ``r`` (every comparison's
    interval covers each block's); ``load``: what other processes did on the host meanwhile.
    """

    names: tuple[str, ...]
    measurements: tuple[Measurement, ...]
    graphs: tuple[tuple[str, str], ...]
    rounds: int
    seconds: float
    reason: str
    plan: stats.SequentialPlan
    blocks: tuple[int, ...] = ()
    load: HostLoad | None = None

    @property
    def n_blocks(self) -> int:
        return len(set(self.blocks)) if self.blocks else 1

    @property
    def loaded(self) -> bool:
        return self.load is not None and self.load.loaded

    def _blocks(self):
        return np.asarray(self.blocks) if self.blocks and len(self.blocks) == self.rounds else None

    def index(self, c: int | str) -> int:
        if isinstance(c, str):
            if c not in self.names:
                raise KeyError(f"no candidate '{c}' (have: {', '.join(self.names)})")
            return self.names.index(c)
        return int(c)

    @property
    def ok(self) -> list[int]:
        """Indices of the candidates that compiled and ran."""
        return [i for i, m in enumerate(self.measurements) if m.ok]

    def same_graph(self, i: int | str, j: int | str) -> bool:
        return self.graphs[self.index(i)] == self.graphs[self.index(j)]

    def _need(self, *idx: int) -> None:
        bad = [self.measurements[i] for i in idx if not self.measurements[i].ok]
        if bad:
            raise MeasureError(bad[0].error or f"{bad[0].what}: no times")

    def compare(self, a: int | str, b: int | str, *, level: float | None = None, family: int = 1) -> stats.Comparison:
        """B against A (see :func:`hdp.runtime.measure.stats.compare`), at the plan's level and margin
        (``family``: one of that many comparisons holding together at that level); raises
        MeasureError if either failed. B is never called faster than A when both run the same
        graph."""
        i, j = self.index(a), self.index(b)
        self._need(i, j)
        return stats.compare(self.measurements[i].times, self.measurements[j].times,
                             level=level or self.plan.level, margin=self.plan.margin,
                             names=(self.names[i], self.names[j]), same_graph=self.same_graph(i, j), family=family,
                             blocks=self._blocks(), load=self.load)

    @property
    def family(self) -> int:
        """How many comparisons a report of this head-to-head makes at once: one per candidate
        that ran, but one (each against the kept or the placement)."""
        return max(len(self.ok) - 1, 1)

    def select(self, preference: Sequence[int | str] = ()) -> Selection:
        """The best candidate (see :func:`hdp.runtime.measure.selection.select_best`) among those that ran;
        indices in the result are into :attr:`names`. Raises MeasureError if none ran."""
        ok = self.ok
        if not ok:
            self._need(*range(len(self.names)))
        pos = {i: p for p, i in enumerate(ok)}
        times = np.array([self.measurements[i].times for i in ok]).T
        pref = [pos[self.index(c)] for c in preference if self.index(c) in pos]
        sel = select_best(times, [self.names[i] for i in ok], pref, level=self.plan.level,
                                margin=self.plan.margin, same_graph=lambda p, q: self.same_graph(ok[p], ok[q]),
                                blocks=self._blocks(), load=self.load)
        return msgspec.structs.replace(sel, winner=ok[sel.winner], fastest=ok[sel.fastest],
                                       tied=tuple(ok[t] for t in sel.tied))

    def header(self, clock: bool = True) -> str:
        """``measured interleaved, 64 rounds in 3.2 s (resolved to 3 %); medians: a 1.234 ms, b ...;
        CI: 95 % for the 2 comparisons together`` (``clock=False``: without the wall time, for text
        that must not vary run to run)."""
        meds = ", ".join(f"{n} {m.median * 1e3:.3f} ms" if m.ok else f"{n} failed"
                         for n, m in zip(self.names, self.measurements))
        took = f" in {self.seconds:.1f} s" if clock else ""
        blk = f" in {self.n_blocks} blocks" if self.n_blocks > 1 else ""
        return (f"measured interleaved, {self.rounds} rounds{blk}{took} ({self.reason}); latency medians: {meds}; "
                f"{self.ci_note()}" + (f"; {self.load_note()}" if clock and self.load is not None else ""))

    def load_note(self) -> str:
        """What other processes did meanwhile, and whether it leaves a claim possible."""
        if self.load is None:
            return ""
        return self.load.describe() + (f": {glossary.NO_CLAIM}" if self.loaded else "")

    def ci_note(self) -> str:
        """The level every interval of this head-to-head's report is at, said once, and the
        threshold a claim must pass."""
        lvl = stats.pct(self.plan.level)
        thr = f"; differences under {self.plan.margin * 100:g} % are not claimed"
        if self.family <= 1:
            return f"CI: {lvl} confidence interval{thr}"
        return (f"CI: {lvl} for the {self.family} comparisons together "
                f"({stats.pct(stats.family_level(self.plan.level, self.family + 1))} each){thr}")


@dataclass(frozen=True, eq=False)
class BestOf:
    """The outcome of :meth:`Measurer.best_of`: ``winner`` indexes the candidates given."""

    winner: int
    finalists: tuple[int, ...]
    estimates: tuple[float, ...] | None
    head: HeadToHead
    selection: Selection

    def text(self) -> str:
        lines = [self.head.header()]
        lines += [f"  {c.b} vs {c.a}: {c.describe(level=False)}" for c in self.selection.comparisons]
        lines.append(f"kept {self.selection.reason}")
        return "\n".join(lines)


class Served(msgspec.Struct, frozen=True, kw_only=True):
    """Throughput of one compile with ``requests`` inferences in flight: the rate (inferences per
    second) of each of ``len(rates)`` windows of ``per_batch`` inferences (or an ``error``)."""

    what: str
    target: str
    requests: int
    per_batch: int
    rates: tuple[float, ...] = ()
    error: str = ""
    compile_seconds: float = 0.0
    submodels: int = 0
    pinning: str = ""  # a placement's CPU devices: "unpinned" (the target pins them) or ""
    #: what other processes did on the host while serving (None: not measured)
    load: HostLoad | None = None
    #: the block of each window (served again, compiled afresh: see hdp.runtime.measure.stats)
    blocks: tuple[int, ...] = ()
    properties: dict[str, str] = {}  # what a default plain compile chose

    @property
    def ok(self) -> bool:
        return not self.error and len(self.rates) > 0

    def estimate(self) -> tuple[float, float, float]:
        """(estimate, low, high): the Hodges-Lehmann pseudo-median of the window rates with its
        95 % interval (corrected for serial correlation), :func:`hdp.runtime.measure.stats.hodges_lehmann`."""

        if not self.ok:
            return float("nan"), float("nan"), float("nan")
        if len(self.rates) < 2:
            r = float(self.rates[0])
            return r, float("nan"), float("nan")
        return tuple(float(x) for x in hodges_lehmann(np.asarray(self.rates)))

    def period_ratio(self, beside: "Served", names: tuple[str, str] = ("beside", "served")):
        """This compile's seconds per inference over ``beside``'s, window by window (the two served
        side by side, :meth:`hdp.runtime.measure.measurer.Measurer.serve_beside`): the ratio, its 95 %
        interval and verdict (:func:`hdp.runtime.measure.stats.compare`)."""

        blocks = np.asarray(self.blocks) if self.blocks and len(self.blocks) == len(self.rates) else None
        return compare(1 / np.asarray(beside.rates), 1 / np.asarray(self.rates), names=names,
                       margin=stats.THRESHOLD, blocks=blocks, load=self.load)

    def summary(self) -> str:
        if not self.ok:
            return f"failed: {self.error}"
        est, lo, hi = self.estimate()
        ci = (f"95 % CI {lo:.1f}–{hi:.1f}" if math.isfinite(lo) and math.isfinite(hi)
              else "no 95 % interval of its own: its windows drift together, too few independent ones")
        return (f"{glossary.rate(est)} ({glossary.per_request(1 / est) if est > 0 else '-'}) with {self.requests} "
                f"in flight ({ci}; {len(self.rates)} windows of {self.per_batch} requests)")


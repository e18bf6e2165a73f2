"""The words of ``hdp compile``'s reports about measurements.

- How far the simulator is from a measurement (:func:`sim_vs_measured`): the simulator
  (:mod:`hdp.placement.simulate`) prices a placement from the profile; a measurement of the same
  placement in the same run says how far that price is from what the devices did. The profile
  corrects itself to its own whole-model wall times (:func:`hdp.runtime.costs.profile.profile_costs`),
  so on one device the remaining gap is mostly load that changed between the profile and the
  measurement; on a mixed placement it is also the boundary model (the target's guess until
  ``hdp calibrate`` fits it on this host).
- A placement against the plain compiles: :func:`compare_with_plain` measures the placement head
  to head against the unplaced model compiled on each real device of the target
  (:meth:`hdp.runtime.measure.measurer.Measurer.head_to_head`); :func:`plain_from_heads` takes that
  comparison from a head-to-head a placer already ran when one measured the same graphs;
  :func:`plain_report` turns either into a :class:`PlainComparison` (each comparison, the
  same-graph note and what to do about it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hdp.base import glossary
from hdp.base.errors import InputError
from hdp.ir.types import Module
from hdp.runtime.measure import stats
from hdp.runtime.measure.measurement import (
    HeadToHead,
    default_plain,
    default_text,
    graph_of,
    placed,
    unplaced,
)
from hdp.runtime.measure.measurer import Measurer
from hdp.target.devices import host_kinds
from hdp.target.target import Target, load_target

__all__ = ["SIM_ERROR_WARN", "PlainComparison", "compare_with_plain", "default_verdict", "plain_from_heads",
           "plain_report", "reused_head", "sim_vs_measured"]

#: Simulated/measured ratios further than this from 1 are called out, with the way to fix them.
SIM_ERROR_WARN = 0.15


def sim_vs_measured(pairs: Sequence[tuple[str, float, float]], calibrated: bool = False) -> str:
    """One line from ``(name, simulated seconds, measured seconds)`` triples::

        simulator vs measurement: single:CPU 89.3 ms simulated / 73.0 ms measured = 1.22, ...;
        off by more than 15 %: the profile ran under other load, or the boundary model is the
        target's guess (`hdp calibrate MODEL --target T` fits it on this host)

    ``calibrated``: the boundary model was fitted on this host (the hint then says so)."""
    parts, worst = [], 0.0
    for name, sim, meas in pairs:
        if not (sim > 0 and meas > 0 and math.isfinite(sim) and math.isfinite(meas)):
            continue
        r = sim / meas
        worst = max(worst, abs(r - 1))
        parts.append(f"{name} {sim * 1e3:.3f} ms simulated / {meas * 1e3:.3f} ms measured = {r:.2f}")
    if not parts:
        return "simulator vs measurement: nothing measured to compare with"
    line = "simulator vs measurement: " + ", ".join(parts)
    if worst > SIM_ERROR_WARN:
        why = ("the host's speed moved since the calibration (`hdp calibrate` again, close to the compile)"
               if calibrated else "the boundary model is the target's guess (`hdp calibrate MODEL --target TARGET` "
               "fits it on this host)")
        line += (f"; off by up to {worst * 100:.0f} % (more than {SIM_ERROR_WARN * 100:.0f} %): the profile ran under "
                 f"other load than the measurement, or {why}")
    else:
        line += f"; within {SIM_ERROR_WARN * 100:.0f} %"
    return line


@dataclass(frozen=True, eq=False)
class PlainComparison:
    """A placement against the plain compile on each real device of its target and against the
    host's default plain compile on each device kind of this host, measured head to head:
    ``comparisons[device]`` is the placement against ``plain <device>``, ``defaults[kind]``
    against ``default <kind>``; ``verdict`` is the one line a compile prints (against the
    default, beside the target's devices), ``text`` every line (``-v``)."""

    text: str
    comparisons: dict[str, stats.Comparison]
    head: HeadToHead | None = None
    defaults: dict[str, stats.Comparison] = field(default_factory=dict)
    verdict: str = ""

    def __str__(self) -> str:
        return self.text


def _versus(c: stats.Comparison) -> str:
    """The placement against one reference, briefly: ``1.01× the time (equal within noise)``."""
    if c.loaded:
        return f"{glossary.ratio(c.ratio)} the time ({glossary.NO_CLAIM})"
    if c.verdict == "faster":
        return f"{glossary.ratio(c.ratio)} the time (faster)"
    if c.verdict == "slower":
        return f"{glossary.ratio(c.ratio)} slower"
    return f"{glossary.ratio(c.ratio)} the time (equal)"


def default_verdict(head: HeadToHead, placement: int, defaults: dict[str, int], what: str = "the placement") -> str:
    """The verdict of ``placement`` against the host's default plain compiles (``defaults``: kind ->
    candidate index in ``head``): against the fastest of them, with both latencies, the time ratio
    and its interval; nothing claimed when the host was loaded. Empty when none ran."""
    pm = head.measurements[placement]
    ran = {k: i for k, i in defaults.items() if head.measurements[i].ok}
    if not ran or not pm.ok:
        failed = [head.measurements[i].error for i in defaults.values() if not head.measurements[i].ok]
        return f"the default plain compile could not be measured ({failed[0]})" if failed else ""
    kind = min(ran, key=lambda k: head.measurements[ran[k]].median)
    i = ran[kind]
    c = head.compare(i, placement, family=head.family)
    ref = f"the default plain {kind} compile ({default_text(head.measurements[i].properties)})"
    times = f"{glossary.latency(pm.median)} vs {glossary.milliseconds(head.measurements[i].median)}"
    ci = f"{stats.pct(c.level)} CI {glossary.interval(c.low, c.high)}" + (f", {c.blocks} blocks" if c.blocks > 1 else "")
    if c.loaded:
        return f"{glossary.NO_CLAIM} against {ref}: {c.load.describe()}; measured {glossary.ratio(c.ratio)} its time ({times})"
    if c.verdict == "faster":
        return f"{what} is faster than {ref}: {glossary.ratio(c.ratio)} its time ({times}; {ci})"
    if c.verdict == "slower":
        return (f"{ref} is faster: {what} takes {glossary.ratio(c.ratio)} its time ({times}; {ci}); "
                f"without hdp, compile the unplaced model on {kind} with OpenVINO's defaults")
    small = c.high < 1.0 or c.low > 1.0
    how = f"no practical difference (under {c.margin * 100:g} %)" if small else "equal within noise"
    return f"{what} is as fast as {ref}: {how}, {glossary.ratio(c.ratio)} its time ({times}; {ci})"


def plain_report(head: HeadToHead, placement: int | str = 0, *, stand_ins: bool = False,
                 restate: bool = True, defaults_head: HeadToHead | None = None) -> PlainComparison:
    """Words for a head-to-head of one placement against plain compiles (candidates named
    ``plain <device>``) and the host's default plain compiles (``default <kind>``, in ``head`` or
    in ``defaults_head``, a head-to-head of the same placement beside them): each comparison once
    (one line, its interval at the level the header states), the same-graph note, what to do
    about it, and the one :attr:`PlainComparison.verdict` line.

    ``stand_ins``: a candidate with every op on a device (through HETERO) stands for that device's
    plain compile when the head has none (the same graph; the lines say it was measured so); the
    placement itself may be one of them. ``restate=False``: the comparisons were already printed
    (a placer's head-to-head in the same output): only what follows from them."""
    p = head.index(placement)
    pm = head.measurements[p]
    lines = [head.header()] if restate else []
    if not pm.ok:
        text = f"the placement could not be measured: {pm.error}"
        return PlainComparison(text, {}, head, verdict=f"verdict: {text}")
    index: dict[str, int] = {}  # device -> the candidate measured as its plain compile
    for i, (kind, dev) in enumerate(head.graphs):
        if kind != "one" or not head.measurements[i].ok:
            continue
        if head.names[i].startswith("plain ") and i != p:
            index[dev] = i
        elif stand_ins and dev not in index:
            index[dev] = i
    kind, one = head.graphs[p]
    fam = head.family

    def label(dev: str) -> str:
        i = index[dev]
        return f"plain {dev}" if head.names[i].startswith("plain ") else f"plain {dev} (as {head.names[i]})"

    comps: dict[str, stats.Comparison] = {}
    for dev, i in index.items():
        if i != p:
            comps[dev] = head.compare(i, p, family=fam)
            if restate:
                lines.append(f"placement vs {label(dev)}: {comps[dev].describe(level=False)}")
    for i, (k, dev) in enumerate(head.graphs):  # a plain compile that failed, with nothing in its place
        if k == "one" and dev not in index and head.names[i].startswith("plain "):
            lines.append(f"plain {dev}: {head.measurements[i].error}")
    # the host's default plain compiles: in this head, or in one of their own beside the placement
    dh = defaults_head or head
    dp = p if defaults_head is None else defaults_head.index("placement")
    dflt = {dev: i for i, (k, dev) in enumerate(dh.graphs) if k == "default"}
    dcomps = {dev: dh.compare(i, dp, family=dh.family) for dev, i in dflt.items()
              if dh.measurements[i].ok and dh.measurements[dp].ok}
    if defaults_head is not None:
        lines.append(defaults_head.header())
    for dev in dcomps:  # its comparison is the verdict's (said once, there)
        m = dh.measurements[dflt[dev]]
        lines.append(f"default plain {dev} compile: OpenVINO's defaults ({default_text(m.properties)}, "
                     f"{m.properties.get('PERFORMANCE_HINT', 'LATENCY')} hint), its thread pinning off "
                     f"({glossary.latency(m.median)})")
    main = default_verdict(dh, dp, dflt)
    itself = kind == "one" and index.get(one) == p  # the placement is the stand-in for its device
    beside = []
    for dev, c in comps.items():
        same = " (the same graph)" if c.same_graph else ""
        beside.append(f"plain {dev}{same} {_versus(c)}")
    if itself:
        beside.append(f"it is plain {one} (measured only as such)")
    if not comps and not itself and not dcomps:
        lines.append("no plain compile could be measured")
        return PlainComparison("\n".join(lines), comps, head, dcomps, "verdict: no plain compile could be measured")
    where = "" if restate else " (compared above)"
    advice = ""
    if kind == "one":
        lines.append(f"all ops on {one}: same graph as the plain {one} compile")
        own = comps.get(one)
        what = ("HETERO's own cost is the difference" + where if own is not None and own.verdict == "slower"
                else "no difference beyond noise" + where if own is not None
                else "measured only as such" if itself else f"plain {one} not measured")
        lines.append(f"against the target's devices: the placement is the plain {one} compile through HETERO ({what})")
        others = [d for d in comps if d != one]
        if (own is not None or itself) and others:
            ref = p if itself else index[one]
            vs = {d: head.compare(ref, index[d], family=fam) for d in others}
            faster = [d for d in others if vs[d].verdict == "faster"]
            if faster:
                d = min(faster, key=lambda x: vs[x].ratio)
                said = "" if itself and not restate else f" ({vs[d].describe(level=False)})"
                lines.append(f"plain {d} is faster than plain {one}{said}: consider --method single:{d}")
                advice = f"; consider --method single:{d}"
    elif comps and all(c.verdict == "faster" for c in comps.values()):  # one device never beats its own
        lines.append(f"against the target's devices: the placement beats every plain compile beyond the threshold{where}")
    elif comps:
        best = max((d for d, c in comps.items() if c.verdict != "faster"), key=lambda d: comps[d].ratio)
        lines.append(f"against the target's devices: the placement does not beat plain {best} beyond the "
                     f"threshold{where}: consider --method single:{best}")
        advice = f"; consider --method single:{best}"
    side = f"beside the target's devices: {', '.join(beside)}" if beside else ""
    if head.loaded:
        advice = ""  # nothing is claimed: no advice follows from it
    verdict = "verdict: " + "; ".join(x for x in (main, side) if x) + advice
    lines.append(verdict)
    return PlainComparison("\n".join(lines), comps, head, dcomps, verdict)


def plain_from_heads(heads: Sequence[HeadToHead], module: Module, target: Target) -> PlainComparison | None:
    """``module.placement`` against every real device's plain compile, taken from a head-to-head a
    placer measured in this run (:func:`hdp.placers.note_head`) when one ran this very placement
    beside every op on each real device of ``target`` (the same graphs as the plain compiles);
    None when none did (then :func:`compare_with_plain` measures). The host's default plain
    compiles are not in a placer's head-to-head: :func:`compare_with_plain` measures them beside
    the placement alone (``reuse``) and :func:`plain_report` joins the two."""
    got = reused_head(heads, module, target)
    return plain_report(got[0], got[1], stand_ins=True, restate=False) if got is not None else None


def reused_head(heads: Sequence[HeadToHead], module: Module, target: Target) -> tuple[HeadToHead, int] | None:
    """(the placer's head-to-head, the placement's index in it) that :func:`plain_from_heads`
    would take its comparison from, or None."""
    pl = module.placement
    if pl is None:
        return None
    want = graph_of(pl.device_of.numpy(), pl.devices)
    real = [d.name for d in target.devices if d.kind == "real"]
    for head in reversed(heads):
        ok = [i for i in head.ok if head.graphs[i] == want]
        singles = {head.graphs[i][1] for i in head.ok if head.graphs[i][0] == "one"}
        if ok and real and all(d in singles for d in real):
            return head, ok[0]
    return None


def compare_with_plain(module: Module, target: Target | str, *, plan: stats.SequentialPlan | None = None,
                       warmup: int = 3, timeout: float = 120.0, execution: str = "sequential",
                       kinds: Sequence[str] | None = None, reuse: tuple[HeadToHead, int] | None = None
                       ) -> PlainComparison:
    """``module.placement`` against the unplaced model compiled on each real device of the target
    and against the host's default plain compile on each device kind of this host (``kinds``,
    default :func:`hdp.target.devices.host_kinds`), measured head to head (interleaved, in
    separated blocks, fresh, never cached; ``plan`` defaults to ``SequentialPlan()``: resolve
    3 %, at most 30 s of running). For ``hdp compile`` to print after placing. A placement with
    every op on one device runs the same graph as that device's plain compile and is never called
    faster than it. ``execution="concurrent"``: the placement is run by hdp's concurrent executor
    (as ``--execution concurrent`` placed it). ``reuse``: a placer's head-to-head that measured the
    target's devices already (:func:`reused_head`): only the default compiles are measured, beside
    the placement."""
    tgt = load_target(target) if isinstance(target, str) else target
    pl = module.placement
    if pl is None:
        raise InputError("the module has no placement to compare")
    real = [d.name for d in tgt.devices if d.kind == "real"]
    used = {pl.devices[int(k)] for k in np.unique(pl.device_of.numpy())}
    modeled = sorted(d for d in used if tgt.device(d).kind != "real")
    if modeled or not real:
        text = (f"not measured: target '{tgt.name}' has modeled devices "
                f"({', '.join(modeled or [d.name for d in tgt.devices])}); compare with the simulator")
        return PlainComparison(text, {})
    kinds = list(host_kinds() if kinds is None else kinds)
    me = placed(pl.device_of.numpy(), pl.devices, execution=execution)
    defaults = [default_plain(k) for k in kinds]
    with Measurer(module, tgt, warmup=warmup, timeout=timeout, cache=False) as m:
        if reuse is not None:
            dhead = m.head_to_head([me] + defaults, plan) if defaults else None
            return plain_report(reuse[0], reuse[1], stand_ins=True, restate=False, defaults_head=dhead)
        head = m.head_to_head([me] + [unplaced(d) for d in real] + defaults, plan)
    return plain_report(head, 0)

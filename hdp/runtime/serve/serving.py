"""The plain compile a served placement is measured beside (``hdp evaluate --objective throughput
--plain DEV``, and ``hdp compile --objective throughput``'s final comparison): how it is compiled,
the rate the simulator gives it, and the two served side by side (:func:`serve_against_plain`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import msgspec

from hdp.base import glossary
from hdp.runtime.measure.load import HostLoad
from hdp.runtime.measure.measurement import Served, default_config, default_text
from hdp.runtime.measure.measurer import Measurer
from hdp.runtime.measure.stats import BLOCKS, Comparison


def plain_streams(requests: int) -> int:
    """Streams of a plain CPU compile serving ``requests`` in flight: one per request, at most one
    per core."""
    return max(1, min(requests, os.cpu_count() or 1))


def plain_streams_config(device, requests: int) -> dict[str, str]:
    """Compile options of a plain device serving ``requests`` in flight with its own streams: for
    the CPU plugin, up to one stream per core over every core, unpinned and unreserved (whatever
    the target's per-device thread settings)."""
    if not device.plugin_name.startswith("CPU"):
        return {"PERFORMANCE_HINT": "THROUGHPUT", "PERFORMANCE_HINT_NUM_REQUESTS": str(requests)}
    return {"NUM_STREAMS": str(plain_streams(requests)), "INFERENCE_NUM_THREADS": "0",
            "ENABLE_CPU_RESERVATION": "NO", "ENABLE_CPU_PINNING": "NO"}


def simulated_plain_rate(device, singles: str | None, requests: int) -> float | None:
    """The rate the simulator gives ``device``'s plain compile with its own streams
    (:func:`plain_streams_config`): :func:`plain_streams` streams, each as fast as the target's
    device alone (``singles``: each device's simulated latency, recorded when placed). Only for a
    CPU-plugin device the target caps at one thread, whose plain streams are such threads (on
    virtual-2x1 two streams served 1.95-1.98x one one-thread device); None otherwise."""
    if not (singles and device.plugin_name.startswith("CPU")
            and str(device.config.get("INFERENCE_NUM_THREADS", "")) == "1"):
        return None
    seconds = singles_seconds(singles).get(device.name, 0.0)
    return plain_streams(requests) / seconds if seconds > 0 else None


def singles_seconds(singles: str | None) -> dict[str, float]:
    """Each device's simulated single-device latency from the placed model's record
    (``DEV=SECONDS,...``); unreadable entries are left out."""
    out: dict[str, float] = {}
    for item in (singles or "").split(","):
        name, _, value = item.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def served_lines(served: Served, simulated: float | None = None) -> list[str]:
    """A served compile's rate in one line, and (``simulated``: the rate the simulator gave it)
    measured over simulated with its interval."""
    how = f" ({default_text(served.properties)})" if served.properties else ""
    where = "this host" if served.what.startswith("default:") else served.target  # not the target's device
    out = [f"{served.what}{how} on {where}: {served.summary()}"
           + (f"; compile {served.compile_seconds:.2f} s" if served.ok else "")
           + (f"; CPU devices {served.pinning}" if served.ok and served.pinning else "")]
    if simulated and served.ok:
        est, lo, hi = served.estimate()
        ci = (f" (95 % CI {lo / simulated:.3f}–{hi / simulated:.3f})" if math.isfinite(lo) and math.isfinite(hi)
              else " (no interval)")
        out.append(f"simulated when placed: {glossary.rate(simulated)}; measured/simulated {est / simulated:.3f}{ci}")
    return out


def fastest_plain(target, singles: str | None) -> str | None:
    """The real device a placement served for throughput is compared with: the one with the lowest
    simulated single-device latency in ``singles`` (recorded when placed, ``DEV=SECONDS,...``), else
    the target's first real device; None when the target has no real device."""
    real = [d.name for d in target.devices if d.kind == "real"]
    if not real:
        return None
    sec = singles_seconds(singles)
    known = [d for d in real if d in sec and sec[d] > 0]
    return min(known, key=sec.get) if known else real[0]


@dataclass(frozen=True, eq=False)
class AgainstPlain:
    """A placement served with ``requests`` in flight beside ``plain_on``'s plain compile with its
    own streams (:func:`plain_streams_config`), or (``default``) beside the host's default plain
    compile on device kind ``plain_on`` with the throughput hint, windows alternating, in
    separated blocks: both rates, and ``versus`` (placed over plain seconds per request, paired
    window by window, its interval covering each block's; None when either failed)."""

    placed: Served
    plain: Served
    plain_on: str
    requests: int
    versus: Comparison | None
    plain_config: dict[str, str] | None = None  #: how the plain compile was compiled
    default: bool = False

    def _how(self) -> str:
        cfg = self.plain_config or {}
        if "NUM_STREAMS" in cfg:
            return f"{cfg['NUM_STREAMS']} streams"
        return ", ".join(f"{k}={v}" for k, v in cfg.items()) or "its defaults"

    def reference(self) -> str:
        """``the default plain CPU compile (bf16, 2 streams, THROUGHPUT hint)`` or ``the plain CPU
        compile with its own streams``."""
        if self.default:
            return f"the default plain {self.plain_on} compile ({default_text(self.plain.properties)})"
        return f"the plain {self.plain_on} compile with its own streams"

    def lines(self, simulated: float | None = None, plain_sim: float | None = None) -> list[str]:
        """Each compile's rate, the paired ratio, and (``simulated``: the rate the simulator gave
        the placement; ``plain_sim``: the plain compile's, :func:`simulated_plain_rate`) the
        measured rate against the simulated one, the host's drift divided out of both."""
        placed = served_lines(self.placed, simulated)
        out = placed[:1] + served_lines(self.plain)
        name = f"{'default' if self.default else 'plain'} {self.plain_on}"
        if self.versus is not None:
            out.append(f"placed vs {name} (windows side by side, time per request): {self.versus.describe()}")
        out += placed[1:]
        if simulated and self.placed.ok and not self.default:
            if plain_sim and self.versus is not None and self.versus.low > 0:
                want, got = simulated / plain_sim, 1 / self.versus.ratio
                out.append(f"simulated placed/plain {self.plain_on} rate: {want:.3f}; measured {got:.3f} (95 % CI "
                           f"{1 / self.versus.high:.3f}–{1 / self.versus.low:.3f}): {got / want - 1:+.1%} off, both "
                           f"measured side by side (the plain compile priced as {plain_streams(self.requests)} "
                           f"streams each as fast as {self.plain_on} alone: true on an otherwise idle host, not when "
                           f"other work takes a core)")
        return out

    def verdict(self, prefix: str = "verdict: ") -> str:
        """One line: does the placement serve faster than the reference?"""
        ref = self.reference()
        if self.versus is None:
            failed = next((v.error for v in (self.placed, self.plain) if not v.ok), "no paired windows")
            return f"{prefix}not compared with {ref}: {failed}"
        v = self.versus
        rates = f"{glossary.rate(self.placed.estimate()[0])} vs {glossary.rate(self.plain.estimate()[0])}"
        ci = f"95 % CI {glossary.interval(v.low, v.high)}" + (f", {v.blocks} blocks" if v.blocks > 1 else "")
        if v.loaded:
            return (f"{prefix}{glossary.NO_CLAIM} against {ref}: {v.load.describe()}; measured "
                    f"{glossary.ratio(v.ratio)} its time per request ({rates})")
        if v.verdict == "faster":
            return (f"{prefix}the placement serves {self.requests} requests in flight faster than {ref}: "
                    f"{glossary.ratio(v.ratio)} its time per request ({rates}; {ci})")
        if v.verdict == "equal":
            return (f"{prefix}the placement serves as fast as {ref}: equal within noise, {glossary.ratio(v.ratio)} its "
                    f"time per request ({rates}; {ci})")
        how = (f"compile the unplaced model on {self.plain_on} with OpenVINO's throughput hint" if self.default
               else f"compile the unplaced model on {self.plain_on} with {self._how()}")
        return (f"{prefix}{ref} serves {self.requests} requests in flight faster: the placement takes "
                f"{glossary.ratio(v.ratio)} its time per request ({rates}; {ci}); for throughput alone on this "
                f"host, {how}")

    def brief(self) -> str:
        """``plain CPU 1.02× the time per request (equal)``, for a verdict that names another reference."""
        if self.versus is None:
            return f"plain {self.plain_on} not compared"
        v = self.versus
        word = glossary.NO_CLAIM if v.loaded else {"faster": "faster", "slower": "slower", "equal": "equal"}[v.verdict]
        return f"plain {self.plain_on} with its own streams {glossary.ratio(v.ratio)} the time per request ({word})"


def serve_against_plain(source, target, device_of, devices, plain_on: str, requests: int, *, batches: int,
                        warmup: int = 3, timeout: float = 120.0, default: bool = False,
                        blocks: int = BLOCKS) -> AgainstPlain:
    """Serve the placement ``device_of`` (over ``devices``; None: the devices ``source`` was placed
    on) of ``source`` (a module or a placed ``.xml``) beside ``plain_on``'s plain compile with its
    own streams (``default``: beside the host's default plain compile on device kind
    ``plain_on``, with the throughput hint), ``batches`` windows each, alternating in one worker,
    in ``blocks`` separated blocks (both compiled afresh for each; never cached)."""

    blocks = max(1, min(blocks, batches // 6))  # six windows at least per block: a 95 % interval of each
    per = [batches // blocks + (1 if b < batches % blocks else 0) for b in range(blocks)]
    got: list[tuple[Served, Served]] = []
    with Measurer(source, target, runs=1, warmup=warmup, timeout=timeout, cache=False) as m:
        if default:
            config = default_config(plain_on, "throughput")
        else:
            config = plain_streams_config(m.target.device(plain_on), requests)
        for n in per:
            got.append(m.serve_beside(device_of, devices, plain_on, config, requests=requests, batches=n,
                                      defaults=default))
            if not (got[-1][0].ok and got[-1][1].ok):
                break
    placed, plain = _joined([g[0] for g in got]), _joined([g[1] for g in got])
    versus = None
    if placed.ok and plain.ok and len(placed.rates) == len(plain.rates):
        versus = placed.period_ratio(plain, names=(f"{'default' if default else 'plain'} {plain_on}", "placed"))
    return AgainstPlain(placed, plain, plain_on, int(requests), versus, config, default)


def _joined(parts: list[Served]) -> Served:
    """Served blocks as one, each window labelled with its block, the load over all of them."""
    bad = next((p for p in parts if not p.ok), None)
    if bad is not None:
        return bad
    first = parts[0]
    loads = [p.load for p in parts if p.load is not None]
    load = None
    if loads:
        wall = sum(x.seconds for x in loads)
        others = sum(x.others * x.seconds for x in loads) / wall if wall > 0 else float("nan")
        load = HostLoad(others=others, cores=loads[0].cores, seconds=wall)
    return msgspec.structs.replace(first, rates=tuple(r for p in parts for r in p.rates), load=load,
                                   blocks=tuple(b for b, p in enumerate(parts) for _ in p.rates))

"""The plain compile a served placement is measured beside (``hdp evaluate --objective throughput
--plain DEV``, and ``hdp compile --objective throughput``'s final comparison): how it is compiled,
the rate the simulator gives it, and the two served side by side (:func:`serve_against_plain`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from hdp.runtime.measurement import Served
from hdp.runtime.stats import Comparison


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
    out = [f"{served.what} on {served.target}: {served.summary()}"
           + (f"; compile {served.compile_seconds:.2f} s" if served.ok else "")
           + (f"; CPU devices {served.pinning}" if served.ok and served.pinning else "")]
    if simulated and served.ok:
        est, lo, hi = served.estimate()
        ci = (f" (95 % CI {lo / simulated:.3f}-{hi / simulated:.3f})" if math.isfinite(lo) and math.isfinite(hi)
              else " (no interval)")
        out.append(f"simulated when placed: {simulated:.1f} inferences/s; measured/simulated {est / simulated:.3f}{ci}")
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
    own streams (:func:`plain_streams_config`), windows alternating: both rates, and ``versus``
    (placed over plain seconds per inference, paired window by window; None when either failed)."""

    placed: Served
    plain: Served
    plain_on: str
    requests: int
    versus: Comparison | None
    plain_config: dict[str, str] | None = None  #: how the plain compile was compiled

    def _how(self) -> str:
        cfg = self.plain_config or {}
        if "NUM_STREAMS" in cfg:
            return f"{cfg['NUM_STREAMS']} streams"
        return ", ".join(f"{k}={v}" for k, v in cfg.items()) or "its defaults"

    def lines(self, simulated: float | None = None, plain_sim: float | None = None) -> list[str]:
        """Each compile's rate, the paired ratio, and (``simulated``: the rate the simulator gave
        the placement; ``plain_sim``: the plain compile's, :func:`simulated_plain_rate`) the
        measured rate against the simulated one, with and without the host's drift."""
        placed = served_lines(self.placed, simulated)
        out = placed[:1] + served_lines(self.plain)
        if self.versus is not None:
            out.append(f"placed vs plain {self.plain_on} (windows side by side, time per inference): "
                       f"{self.versus.describe()}")
        out += placed[1:]
        if simulated and self.placed.ok:
            if plain_sim and self.versus is not None and self.versus.low > 0:
                want, got = simulated / plain_sim, 1 / self.versus.ratio
                out.append(f"simulated placed/plain {self.plain_on}: {want:.3f}; measured {got:.3f} (95 % CI "
                           f"{1 / self.versus.high:.3f}-{1 / self.versus.low:.3f}): {got / want - 1:+.1%} with the "
                           f"host's drift divided out (the plain compile priced as {plain_streams(self.requests)} "
                           f"streams each as fast as {self.plain_on} alone: true on an otherwise idle host, not when "
                           f"other work takes a core)")
        return out

    def verdict(self) -> str:
        """One line: does the placement serve faster than the plain compile with its own streams?"""
        streams = f"the plain {self.plain_on} compile with its own streams"
        if self.versus is None:
            failed = next((v.error for v in (self.placed, self.plain) if not v.ok), "no paired windows")
            return f"verdict: not compared with {streams}: {failed}"
        if self.versus.verdict == "faster":
            return f"verdict: the placement serves {self.requests} requests in flight faster than {streams} beyond noise"
        if self.versus.verdict == "equal":
            return f"verdict: the placement serves as fast as {streams} (no difference beyond noise)"
        return (f"verdict: {streams} serves {self.requests} requests in flight faster beyond noise: for throughput "
                f"alone on this host, compile the unplaced model on {self.plain_on} with {self._how()}")


def serve_against_plain(source, target, device_of, devices, plain_on: str, requests: int, *, batches: int,
                        warmup: int = 3, timeout: float = 120.0) -> AgainstPlain:
    """Serve the placement ``device_of`` (over ``devices``; None: the devices ``source`` was placed
    on) of ``source`` (a module or a placed ``.xml``) beside ``plain_on``'s plain compile with its
    own streams, ``batches`` windows each, alternating in one worker (never cached)."""
    from hdp.runtime.measure import Measurer

    with Measurer(source, target, runs=1, warmup=warmup, timeout=timeout, cache=False) as m:
        config = plain_streams_config(m.target.device(plain_on), requests)
        placed, plain = m.serve_beside(device_of, devices, plain_on, config, requests=requests, batches=batches)
    versus = None
    if placed.ok and plain.ok and len(placed.rates) == len(plain.rates):
        versus = placed.period_ratio(plain, names=(f"plain {plain_on}", "placed"))
    return AgainstPlain(placed, plain, plain_on, int(requests), versus, config)

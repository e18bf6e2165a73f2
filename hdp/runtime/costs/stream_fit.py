"""Each real device's stream efficiency, fitted by ``hdp calibrate`` for serving plans
(:mod:`hdp.placement.plan`): its plain compile served with one stream and with two, windows in turn
(:func:`hdp.pipeline.calibrate.calibrate_streams`); two streams serve ``2 E`` times one. Stored in
the calibration (:class:`hdp.runtime.costs.calibrate.Calibration`'s ``streams``)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np


class StreamObservation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One device's plain compile served with one and with two streams (requests/s of each window,
    alternating), and what the two give: ``efficiency`` = rate with two / (2 × rate with one)."""

    model: str
    device: str
    requests: int
    one: tuple[float, ...]
    two: tuple[float, ...]
    efficiency: float


def stream_efficiency(one: Sequence[float], two: Sequence[float]) -> float:
    """``median(two) / (2 median(one))`` clipped to [0.5, 1] (one stream's work split over two
    never serves less than one stream, and never more than twice)."""
    a, b = float(np.median(one)), float(np.median(two))
    return float(min(max(b / (2 * a), 0.5), 1.0)) if a > 0 else 0.5


def with_streams(cal, observations: Sequence[StreamObservation]):
    """``cal`` with each device's stream efficiency: the median over its observations' efficiencies."""
    per: dict[str, list[float]] = {}
    for o in observations:
        per.setdefault(o.device, []).append(o.efficiency)
    return msgspec.structs.replace(cal, streams={d: float(np.median(v)) for d, v in per.items()},
                                   stream_observations=tuple(observations))


def streams_report(cal) -> list[str]:
    """Lines for ``hdp calibrate``: each device's stream efficiency and the windows it came from."""
    out = []
    for o in cal.stream_observations:
        out.append(f"streams: {o.device} on {o.model}: one stream {np.median(o.one):.1f}/s, two "
                   f"{np.median(o.two):.1f}/s ({len(o.one)} windows each, {o.requests} in flight): efficiency "
                   f"{o.efficiency:.3f}")
    if cal.streams:
        out.append("stream efficiency used by serving plans (--objective throughput): "
                   + ", ".join(f"{d} {e:.3f}" for d, e in cal.streams.items()))
    return out

"""The plain compile a served placement is measured beside (``hdp evaluate --objective throughput
--plain DEV``): how it is compiled, and the rate the simulator gives it."""

from __future__ import annotations

import os


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
    seconds = dict(item.split("=", 1) for item in singles.split(",") if "=" in item).get(device.name)
    try:
        return plain_streams(requests) / float(seconds) if seconds and float(seconds) > 0 else None
    except ValueError:
        return None

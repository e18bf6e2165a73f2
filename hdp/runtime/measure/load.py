"""What the host's cores did while a measurement ran: the busy CPU time of the whole host (from
``/proc/stat``) and of this process (``getrusage``), sampled around a measuring request by the
worker (:mod:`hdp.runtime.measure.worker`). Their difference per wall second is the number of
cores other processes kept busy (:class:`HostLoad`), which decides whether a verdict of
:mod:`hdp.runtime.measure.stats` may claim anything."""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass

import msgspec

#: Where Linux says how long every CPU was busy.
PROC_STAT = "/proc/stat"
#: Other processes keeping more than this share of the host's cores busy, on average over the
#: measurement, make it loaded: no claim (0.1: 0.2 of a core on a 2-core host; a quiet host's own
#: daemons stay under 0.02).
LOAD_LIMIT = 0.1


class HostLoad(msgspec.Struct, frozen=True, kw_only=True):
    """What other processes did on the host's cores while a measurement ran: ``others`` cores
    kept busy on average (the host's busy CPU time, from ``/proc/stat``, less the measuring
    process's own, per wall second), of ``cores``, over ``seconds`` of measuring. ``others`` is
    NaN where the host does not say (no ``/proc/stat``): then nothing is claimed about load."""

    others: float
    cores: int
    seconds: float
    limit: float = LOAD_LIMIT

    @property
    def loaded(self) -> bool:
        """More than :data:`LOAD_LIMIT` of the cores busy with other work: no claim."""
        return math.isfinite(self.others) and self.others > self.limit * max(self.cores, 1)

    def describe(self) -> str:
        """``other processes kept 0.9 of 2 cores busy (over 0.2)``: over :attr:`limit` of the cores,
        the host was loaded."""
        if not math.isfinite(self.others):
            return "the host's load is unknown (no /proc/stat)"
        busy = max(self.others, 0.0)
        return (f"other processes kept {busy:.2g} of {self.cores} cores busy"
                + (f" (over {self.limit * self.cores:.2g})" if self.loaded else ""))

    @staticmethod
    def of(busy: float, own: float, wall: float, cores: int) -> "HostLoad":
        """From the host's busy core-seconds ``busy`` (negative: unknown), the measuring process's
        own ``own`` and the ``wall`` seconds they were counted over."""
        if busy < 0 or wall <= 0:
            return HostLoad(others=math.nan, cores=cores, seconds=max(wall, 0.0))
        return HostLoad(others=max(busy - own, 0.0) / wall, cores=cores, seconds=wall)


def host_busy_seconds(path: str = PROC_STAT) -> float:
    """Seconds of CPU time the host's cores spent busy since boot, summed over the cores: user,
    nice, system, irq, softirq and steal (another guest on the hypervisor takes the core just
    the same) from the first line of ``/proc/stat``; -1 where it cannot be read."""
    try:
        with open(path, "rb") as f:
            first = f.readline().split()
    except OSError:
        return -1.0
    if len(first) < 5 or first[0] != b"cpu":
        return -1.0
    try:
        v = [int(x) for x in first[1:9]] + [0] * max(0, 9 - len(first))
    except ValueError:
        return -1.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process (all its threads: OpenVINO's included) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Sampled:
    """The host's and this process's busy seconds and the wall time between :func:`start` and
    :meth:`stop`; ``busy`` -1 when the host does not say."""

    busy: float = -1.0
    own: float = 0.0
    wall: float = 0.0


class Sampler:
    """``with Sampler() as s: ...`` then ``s.result``: the busy seconds over the block."""

    def __enter__(self) -> "Sampler":
        self._busy, self._own, self._t = host_busy_seconds(), own_seconds(), time.monotonic()
        self.result = Sampled()
        return self

    def __exit__(self, *exc) -> None:
        busy = host_busy_seconds()
        known = busy >= 0 and self._busy >= 0
        self.result = Sampled(busy=busy - self._busy if known else -1.0, own=own_seconds() - self._own,
                              wall=time.monotonic() - self._t)

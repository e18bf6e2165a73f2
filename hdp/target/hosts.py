"""A target's hosts as the placement problem sees them (:class:`hdp.placement.problem.Hosts`), and
fitted links put in place of the target's.

:func:`problem_hosts` turns a target's ``[[hosts]]`` and ``[[links]]`` (:class:`hdp.target.target.Host`,
:class:`~hdp.target.target.HostLink`) into the problem's arrays, in the problem's device order: the
host of every device, each pair's latency and bandwidth, each host's memory. A target with no hosts,
or with one, gives None (the problem prices every crossing by ``[link]``, as before).

:func:`with_links` is the target with some links replaced (``hdp calibrate --link A,B`` fits a link
on the hosts; ``hdp compile`` uses the fit in place of the target's ``[[links]]`` entry and says so).
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from hdp.placement.problem import Hosts
from hdp.target.target import HostLink, Target


def problem_hosts(target: Target, devices=None) -> Hosts | None:
    """The :class:`~hdp.placement.problem.Hosts` of ``devices`` (names, default the target's) on
    ``target``; None when the target has fewer than two hosts."""
    if not target.multi_host:
        return None
    devices = tuple(target.device_names if devices is None else devices)
    names = tuple(h.name for h in target.hosts)
    index = {n: i for i, n in enumerate(names)}
    host_of = np.array([index[target.host_of(d)] for d in devices], np.int64)
    nh = len(names)
    lat = np.zeros((nh, nh))
    bw = np.full((nh, nh), math.inf)
    for ln in target.links:
        a, b = index[ln.hosts[0]], index[ln.hosts[1]]
        lat[a, b] = lat[b, a] = float(ln.latency)
        bw[a, b] = bw[b, a] = float(ln.bandwidth)
    cap = np.array([math.inf if h.memory is None else float(h.memory_bytes) for h in target.hosts])
    for a in (host_of, lat, bw, cap):
        a.setflags(write=False)
    return Hosts(names=names, host_of=host_of, latency=lat, bandwidth=bw, capacity=cap)


def with_links(target: Target, fitted: dict[tuple[str, str], tuple[float, float]]) -> Target:
    """``target`` with the link between each pair of hosts in ``fitted`` (``(a, b) -> (latency
    seconds, bandwidth bytes/s)``) replaced by the fitted one; pairs the target does not join are
    ignored."""
    if not fitted:
        return target
    links = []
    for ln in target.links:
        fit = fitted.get(tuple(ln.hosts)) or fitted.get(tuple(reversed(ln.hosts)))
        if fit is None:
            links.append(ln)
        else:
            links.append(HostLink(hosts=list(ln.hosts), latency=float(fit[0]), bandwidth=float(fit[1]),
                                  description=f"fitted by hdp calibrate --link (target's: {ln.latency:g} s, "
                                              f"{ln.bandwidth:g} B/s)"))
    return msgspec.structs.replace(target, links=links)


def link_text(latency: float, bandwidth: float) -> str:
    """``1.0 Gbit/s, 100 us``: a link for people."""
    return f"{bandwidth * 8 / 1e9:.3g} Gbit/s ({bandwidth / 1e6:.4g} MB/s), latency {latency * 1e6:.3g} us"

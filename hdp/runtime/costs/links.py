"""A link between two hosts, measured: ``hdp calibrate --link A,B``.

Two Ray actors, one pinned to each host (the custom resource ``hdp_host_<name>`` each host's Ray
node is started with, ``ray start --resources '{"hdp_host_a": 1000}'``), hand numpy arrays of several
sizes (4 KiB to 16 MiB by default) back and forth: actor ``A`` is asked to send an array to ``B``,
which returns its size; the time of one such request, less that of the same request with an empty
array (Ray's own cost of a call between the actors), is one crossing of the link. The crossings are
fitted by least squares to ``latency + bytes / bandwidth`` (``numpy.linalg.lstsq``), and the
residual of the fit is reported with it. On one machine whose Ray has no such resources both actors
run locally, and the fit is the loopback's (the output says so).

The fit is stored in the hdp cache (namespace ``links``, :class:`LinkStore`) under the target's
name, the two hosts and their addresses; ``hdp compile`` puts it in place of the target's
``[[links]]`` entry (:func:`fitted_links`, :func:`hdp.target.hosts.with_links`) and says which it
uses. Ray is imported when a link is measured (a heavy third party, an optional extra).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.cache import Store
from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.target.target import Target

#: Bytes of the arrays moved by default: 4 KiB to 16 MiB, powers of 4.
SIZES = tuple(4096 * 4 ** i for i in range(7))
#: Requests timed per size (the median is kept).
REPEATS = 7
RESOURCE = "hdp_host_{}"
RAY_HINT = "--link needs Ray: pip install 'hdp[ray]'"


class LinkFit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A link fitted on the hosts: ``latency + bytes / bandwidth`` and what it came from."""

    target: str
    hosts: tuple[str, str]
    latency: float  # seconds
    bandwidth: float  # bytes/s
    residual: float  # root mean square of the fit's residuals, seconds
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]  # median seconds of one crossing per size
    placed: str  # "hosts": each actor on its host; "local": both on this machine (no host resources)
    created: str = ""


def fit_link(sizes, seconds) -> tuple[float, float, float]:
    """``(latency, bandwidth, rms residual)`` of ``seconds ≈ latency + bytes / bandwidth`` by least
    squares; InputError when the times do not grow with the bytes (no bandwidth to fit)."""
    x = np.asarray(sizes, np.float64)
    y = np.asarray(seconds, np.float64)
    a = np.stack([np.ones_like(x), x], axis=1)
    (lat, per_byte), *_ = np.linalg.lstsq(a, y, rcond=None)
    if not per_byte > 0:
        raise InputError(f"the link's times do not grow with the bytes moved ({', '.join(f'{s:.3g}' for s in y)} s "
                         f"for {', '.join(str(int(b)) for b in x)} bytes): nothing to fit a bandwidth to")
    res = y - (lat + per_byte * x)
    return float(max(lat, 0.0)), float(1.0 / per_byte), float(np.sqrt(np.mean(res ** 2)))


class LinkStore:
    """Fitted links in the hdp cache: ``<root>/links/<kk>/<key>.json``, one per target name, pair of
    hosts and their addresses."""

    def __init__(self, root: str | os.PathLike):
        self.store = Store(Path(root) / "links", ".json")

    @staticmethod
    def key(target: Target, a: str, b: str) -> str:
        pair = sorted((a, b))
        where = [next((h.address or "" for h in target.hosts if h.name == n), "") for n in pair]
        return serde.digest_bytes(serde.encode_any(["link", 1, target.name, pair, where]))

    def get(self, target: Target, a: str, b: str) -> LinkFit | None:
        data = self.store.get(self.key(target, a, b))
        if data is None:
            return None
        try:
            return msgspec.json.decode(data, type=LinkFit)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    def put(self, target: Target, fit: LinkFit) -> Path:
        key = self.key(target, *fit.hosts)
        self.store.put(key, msgspec.json.encode(fit))
        return self.store.path(key)


def fitted_links(target: Target, cache_root) -> dict[tuple[str, str], LinkFit]:
    """The stored fits of ``target``'s links (``(a, b)`` as the target names them -> fit)."""
    if cache_root is None or not target.links:
        return {}
    store = LinkStore(cache_root)
    out = {}
    for ln in target.links:
        fit = store.get(target, *ln.hosts)
        if fit is not None:
            out[tuple(ln.hosts)] = fit
    return out


def check_pair(target: Target, spec: str) -> tuple[str, str]:
    """``"a,b"`` -> ``("a", "b")``, two hosts of ``target`` joined by a link; InputError otherwise."""
    names = [x.strip() for x in spec.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise InputError(f"--link {spec}: expected two hosts of the target, like --link a,b")
    have = [h.name for h in target.hosts]
    for n in names:
        if n not in have:
            raise InputError(f"--link {spec}: target '{target.name}' has no host '{n}' "
                             f"(hosts: {', '.join(have) or 'none declared'})")
    return names[0], names[1]


def _ray():
    try:
        import ray  # heavy third party, an optional extra: imported when a link is measured
    except ImportError:
        raise InputError(RAY_HINT) from None
    return ray


def measure_link(target: Target, a: str, b: str, *, sizes=SIZES, repeats: int = REPEATS, address: str | None = None,
                 say=lambda s: None) -> LinkFit:
    """Measure the link between hosts ``a`` and ``b`` of ``target`` (see the module docstring) on
    the Ray cluster at ``address`` (None: a local Ray started for this and shut down after)."""
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        kw = {"address": address} if address else {"num_cpus": 2, "include_dashboard": False}
        try:
            ray.init(log_to_driver=False, logging_level="ERROR", **kw)
        except Exception as e:  # noqa: BLE001 - Ray's errors of a missing or refused cluster: one line
            first = (str(e).splitlines() or [""])[0]
            raise InputError(f"--link: cannot start or reach Ray ({type(e).__name__}: {first})") from None
    try:
        have = ray.cluster_resources()
        res = [RESOURCE.format(a), RESOURCE.format(b)]
        placed = "hosts" if all(r in have for r in res) else "local"
        if placed == "local":
            say(f"Ray has no resources {res[0]} and {res[1]}: both actors run on this machine (the loopback's fit)")

        @ray.remote(num_cpus=0)
        class End:
            def __init__(self):
                self.peer = None

            def pair(self, peer):
                self.peer = peer
                return True

            def size(self, x) -> int:
                return int(x.nbytes)

            def send(self, nbytes: int, repeats: int) -> list[float]:
                x = np.ones(max(nbytes // 8, 0), np.float64)
                out = []
                for _ in range(repeats + 1):
                    t0 = time.perf_counter()
                    ray.get(self.peer.size.remote(x))
                    out.append(time.perf_counter() - t0)
                return out[1:]  # the first warms the path

        opts = [{"resources": {r: 0.001}} if placed == "hosts" else {} for r in res]
        src, dst = End.options(**opts[0]).remote(), End.options(**opts[1]).remote()
        ray.get(src.pair.remote(dst))
        base = float(np.median(ray.get(src.send.remote(0, repeats))))
        seconds = []
        for n in sizes:
            t = float(np.median(ray.get(src.send.remote(int(n), repeats))))
            seconds.append(max(t - base, 0.0))
            say(f"{n} bytes: {seconds[-1] * 1e3:.3f} ms a crossing (call {base * 1e3:.3f} ms taken off)")
        for h in (src, dst):
            ray.kill(h)
    finally:
        if started:
            ray.shutdown()
    lat, bw, rms = fit_link(sizes, seconds)
    return LinkFit(target=target.name, hosts=(a, b), latency=lat, bandwidth=bw, residual=rms,
                   sizes=tuple(int(s) for s in sizes), seconds=tuple(seconds), placed=placed,
                   created=_dt.datetime.now().isoformat(timespec="seconds"))

"""Measuring placements on the real devices of a target.

A placement is compiled with HETERO (every op's affinity set, see DESIGN §4), warmed up and run
``runs`` times on fixed random inputs of the right element types and shapes; the result is every
run's wall time, summarised by the median and its spread. All OpenVINO work happens in a worker
process (:mod:`hdp.runtime.worker`) with a timeout per request, so a compile that crashes
(segfault), hangs or raises becomes a :class:`Measurement` with ``error`` set, and the next
measurement starts a fresh worker. One worker serves many placements of the same model::

    from hdp.runtime.measure import Measurer
    with Measurer(module, "virtual", runs=10) as m:     # module: a lowered Module (or .xml, ov.Model)
        seconds = m.latency(device_of)                  # int16 per op, indices into m.devices
        row = m.measure(device_of)                      # Measurement: never raises for a failed run
        base = m.plain("CPU")                           # the unplaced model compiled on one device

``latency`` raises :class:`MeasureError` (an HdpError) when the placement fails to compile or run,
crashes or times out; ``measure`` returns the failure as ``Measurement.error`` instead. Mistakes
in the request (a device index out of range, a device the target lacks or this host does not
have, a modeled device) raise :class:`~hdp.errors.InputError` from both.

Comparisons are never made from separate measurements: :meth:`Measurer.head_to_head` compiles
several candidates in the same worker and runs them interleaved, run by run, until the statistics
of :mod:`hdp.runtime.stats` resolve the differences or a time cap is hit::

        h = m.head_to_head([placed(device_of), plain("CPU"), plain("CPU_B")])
        h.compare("plain CPU_B", "placement").describe()   # 'faster by 4.1 % (95 % CI 2.0…6.1 %)'
        m.compare(plain("CPU"), plain("CPU_B"))           # a Comparison
        m.best_of(candidates, preference=[0])             # the best, or the preferred among equals

Successful single measurements are cached as JSON under :func:`measure_cache_dir` (the hdp cache
root of the current :func:`cache_scope` + ``/measure``; the CLI sets it from ``--cache-dir`` and
``--no-cache``) keyed by the model's digest, the placement (device name per op), the target, runs
and warm-up, and the host fingerprint (CPU model and flags, OpenVINO version); failures and
interleaved comparisons are never cached.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from hdp.errors import HdpError, InputError, StaleInput
from hdp.ir import serde
from hdp.ir.types import Module
from hdp.runtime import stats
from hdp.runtime.host import host_fingerprint
from hdp.runtime.target import Target, load_target
from hdp.runtime.worker import FAULT_ENV, PARENT_ENV, decode_msg, write_msg

#: Bump when the meaning of a cached measurement changes.
MEASURE_VERSION = 2
#: Seconds a worker may take to start and read the model (the per-request timeout, if larger).
LOAD_TIMEOUT = 60.0

__all__ = ["MeasureError", "Measurement", "Measurer", "Candidate", "HeadToHead", "BestOf", "PlainComparison",
           "placed_file", "measure_blob",
           "measure_plain", "evaluate_placed", "compare_with_plain", "plain_from_heads", "graph_of", "cache_scope",
           "measure_cache_dir", "worker_reuse", "prestart_worker", "FAULT_ENV"]


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
        """One line: ``median 1.234 ms (min .., IQR .. - .., max ..; stdev ..) over 10 runs``."""
        if not self.ok:
            return f"error: {self.error}"
        ms = 1e3
        return (f"median {self.median * ms:.3f} ms (min {self.min * ms:.3f}, IQR {self.q1 * ms:.3f}-"
                f"{self.q3 * ms:.3f}, max {self.max * ms:.3f}; stdev {self.stdev * ms:.3f}) over "
                f"{len(self.times)} runs" + (" [cached]" if self.cached else ""))


# --------------------------------------------------------------------------- the worker process


class _WorkerFailure(Exception):
    pass


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


class WorkerProcess:
    """``python -m hdp.runtime.worker`` with framed requests and a deadline per request.

    The worker is told this process's pid and dies with it (parent-death signal and a watchdog,
    see :mod:`hdp.runtime.worker`). On Linux the parent-death signal follows the *thread* that
    started the worker: start and use a WorkerProcess from one long-lived thread.
    """

    def __init__(self, env: dict | None = None):
        self.env = env  # None: this process's environment at each (re)start
        self.proc = None
        self.stderr = None
        self.pending: list[str] = []  # ops sent with send() whose replies are not read yet
        self._buf = bytearray()  # bytes read past the last reply (the start of the next one)

    def start(self) -> None:
        import hdp

        env = dict(os.environ if self.env is None else self.env)
        root = str(Path(hdp.__file__).resolve().parent.parent)  # the worker imports this same hdp
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
        env["PYTHONSAFEPATH"] = "1"  # python -m must not put the current directory (another hdp checkout) first
        env[PARENT_ENV] = str(os.getpid())
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "hdp.runtime.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0, env=env)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write(self, req: dict) -> None:
        """Send ``req``, (re)starting the worker if it is not running."""
        if not self.alive:
            self.close()
            self.start()
        try:
            write_msg(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            raise _WorkerFailure(self._death("before the request")) from None

    def send(self, req: dict) -> None:
        """Send a request without waiting: its reply is read and dropped before the next
        :meth:`call`'s (for work the worker may do ahead, such as ``preload``)."""
        self._write(req)
        self.pending.append(str(req.get("op")))

    def call(self, req: dict, timeout: float) -> dict:
        """Send one request and wait up to ``timeout`` seconds; a dead or late worker raises
        _WorkerFailure with the reason (and is gone afterwards)."""
        self._write(req)
        while self.pending:  # replies to requests sent ahead come first; the work was wanted, not the reply
            self._reply(max(timeout, LOAD_TIMEOUT), self.pending.pop(0))
        return self._reply(timeout, str(req.get("op")))

    def _reply(self, timeout: float, op: str) -> dict:
        # One read may return the end of this reply and the start of the next (a reply to a request
        # sent ahead arrives together with the one after it): what lies past this reply is kept.
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = self._buf
        need = 4
        while True:
            if need == 4 and len(buf) >= 4:
                need = 4 + int.from_bytes(buf[:4], "little")
            if len(buf) >= need:
                break
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                raise _WorkerFailure(f"timed out after {timeout:g} s; worker killed")
            chunk = os.read(fd, max(need - len(buf), 1 << 16))
            if not chunk:
                raise _WorkerFailure(self._death(f"during '{op}'"))
            buf += chunk
        msg = bytes(buf[4:need])
        del buf[:need]
        return decode_msg(msg)

    def _death(self, when: str) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        tail = self._stderr_tail()
        self.close()
        how = ("was killed by " + _signal_name(rc) if rc is not None and rc < 0
               else f"exited with code {rc}" if rc is not None else "stopped answering")
        return f"worker {how} {when}" + (f" (stderr: {tail})" if tail else "")

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - 4000))
            lines = [ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-3:])

    def close(self, kill: bool = False) -> None:
        """Stop the worker: end its input and let it exit, or kill it at once."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    if kill:
                        raise OSError
                    self.proc.stdin.close()
                    self.proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self.proc = None
        self.pending = []
        self._buf = bytearray()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


# --------------------------------------------------------------------------- one worker through a pipeline

#: The spare worker (at most one): "worker", "load" (the msgpack of the load request it answered;
#: None: started, nothing loaded), "reply" (its answer), "env" (this process's environment at start).
_SPARE: dict[str, Any] = {}
_REUSE = [0]  # depth of worker_reuse blocks


@contextlib.contextmanager
def worker_reuse():
    """Within the block, a Measurer that closes hands its worker, model loaded, to the next Measurer
    of the same model and target instead of stopping it (``support``, ``profile`` and the placer's
    measurements of one ``hdp compile`` then share a worker: starting one and reading the model
    costs about 0.5 s each time). The spare worker is stopped when the outermost block ends."""
    _REUSE[0] += 1
    try:
        yield
    finally:
        _REUSE[0] -= 1
        if not _REUSE[0]:
            _drop_spare()


def prestart_worker(xml: str | os.PathLike | None = None, request=None) -> None:
    """Inside :func:`worker_reuse`, start a worker now for the next Measurer to take, so that
    OpenVINO's import in it overlaps the caller's own work (``hdp compile`` lowers meanwhile).
    With ``xml``, the worker also reads and specialises that model for ``request`` (a
    :class:`~hdp.ir.openvino_frontend.ShapeRequest`) as lowering will, so the first load of it
    takes no time; a mistake there is left for lowering to report."""
    if _REUSE[0] and not _SPARE:
        w = WorkerProcess()
        w.start()
        if xml is not None:
            try:
                w.send({"op": "preload", "xml": str(xml), "request": msgspec.to_builtins(request) if request else None})
            except _WorkerFailure:
                w.close()
                return
        _SPARE.update(worker=w, load=None, reply=None, env=dict(os.environ))


def _drop_spare() -> None:
    w = _SPARE.get("worker")
    _SPARE.clear()
    if w is not None:
        w.close()


def _park(worker: WorkerProcess, load: bytes, reply: dict) -> None:
    _drop_spare()
    _SPARE.update(worker=worker, load=load, reply=reply, env=dict(os.environ))


def _take_spare(load: bytes) -> tuple[WorkerProcess, dict | None] | None:
    """The spare worker for a Measurer whose load request is ``load``, with its load reply (None:
    nothing loaded yet), if it is alive, was started with this environment (a test's fault
    injection, say) and has no other model loaded; else None (the spare stays for another)."""
    w = _SPARE.get("worker")
    if w is None:
        return None
    if not w.alive or _SPARE["env"] != dict(os.environ):
        _drop_spare()
        return None
    if _SPARE["load"] is not None and _SPARE["load"] != load:
        return None
    reply = _SPARE["reply"]
    _SPARE.clear()
    return w, reply


# --------------------------------------------------------------------------- cache


_CACHE_SCOPE: contextvars.ContextVar[tuple[bool, Path | None]] = contextvars.ContextVar(
    "hdp_measure_cache", default=(True, None))


@contextlib.contextmanager
def cache_scope(cache_dir: str | os.PathLike | None = None, *, enabled: bool = True):
    """Within the block, ``Measurer(cache=True)`` (the default, also inside passes and placers)
    keeps measurements under ``<cache_dir>/measure`` (``cache_dir``: the hdp cache root, default
    ``~/.cache/hdp``), or caches nothing when not ``enabled``. The CLI sets it from ``--cache-dir``
    and ``--no-cache`` for the whole command."""
    token = _CACHE_SCOPE.set((bool(enabled), Path(cache_dir) if cache_dir else None))
    try:
        yield
    finally:
        _CACHE_SCOPE.reset(token)


def measure_cache_dir() -> Path | None:
    """The directory ``Measurer(cache=True)`` uses here and now (None: caching is off)."""
    from hdp.passes.cache import default_cache_dir

    enabled, root = _CACHE_SCOPE.get()
    return ((root or default_cache_dir()) / "measure") if enabled else None


class MeasureCache:
    """Successful measurements as JSON entries ``<dir>/<key[:2]>/<key>.json`` of a
    :class:`hdp.cache.Store` (checksummed with their key; corrupt ones are measured again)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        from hdp.cache import Store, default_cache_dir, open_root

        self.dir = Path(directory) if directory else (measure_cache_dir() or default_cache_dir() / "measure")
        self.store = Store(self.dir, ".json")
        if directory is None:
            open_root(self.dir.parent)  # cleans and prunes every namespace of the default root
        self.store.open()

    def _path(self, key: str) -> Path:
        return self.store.path(key)

    def get(self, key: str) -> Measurement | None:
        data = self.store.get(key)
        if data is None:
            return None
        try:
            m = msgspec.json.decode(data, type=Measurement)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.store.discard(self._path(key), "undecodable")  # measure again
            return None
        return msgspec.structs.replace(m, cached=True)

    def put(self, key: str, m: Measurement) -> None:
        if m.ok:
            self.store.put(key, msgspec.json.encode(msgspec.structs.replace(m, cached=False)))


def _host_key() -> list[str]:
    return [host_fingerprint()]  # CPU model, flags and count, OpenVINO version


# --------------------------------------------------------------------------- sources


def _file_digest(xml: Path) -> str:
    from hdp.ir.openvino_frontend import file_digest

    return file_digest(xml)


class _Source(msgspec.Struct, frozen=True):
    xml: str
    spec: str  # JSON Specialisation; "" for the one a placed model records, else the defaults
    structure: str | None  # digest of the caller's op structure (ops are identified by position)
    n_ops: int | None
    digest: str
    roles: bytes | None = None  # int8 per op (hdp.placement.structure.roles): placements are legalized


def _source_of(source, tmpdir_factory) -> _Source:
    if isinstance(source, Module):
        from hdp.ir.openvino_frontend import checked_source, graph_structure

        xml, digest = checked_source(source)
        spec = source.meta.get("specialisation", "")
        if not spec:
            raise InputError("this module records no specialisation (lowered by an older hdp); lower it again")
        from hdp.placement.structure import roles

        return _Source(str(xml), spec, graph_structure(source.graph).digest(), source.graph.n_ops,
                       f"{digest}:{spec}", roles(source.graph).tobytes())
    if isinstance(source, (str, os.PathLike)):
        xml = Path(source)
        if not xml.is_file():
            raise InputError(f"{xml}: no such file")
        return _Source(str(xml.resolve()), "", None, None, _file_digest(xml))
    if hasattr(source, "get_ordered_ops"):  # an ov.Model: saved for the worker to read
        import openvino as ov

        from hdp.ir.openvino_frontend import op_structure

        xml = Path(tmpdir_factory()) / "model.xml"
        ov.save_model(source, str(xml), compress_to_fp16=False)
        ops = source.get_ordered_ops()
        return _Source(str(xml), "", op_structure(ops).digest(), len(ops), _file_digest(xml))
    raise TypeError(f"cannot measure a {type(source).__name__}: give a Module, an .xml path or an ov.Model")


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True, eq=False)
class Candidate:
    """One thing to run in a head-to-head comparison: the unplaced model compiled on ``plain``
    (no HETERO), the placement ``device_of`` (an index into ``devices`` per op, or a device name
    per op, as for :meth:`Measurer.measure`) compiled with HETERO, or a placed model file ``xml``
    (another placement of the measured model, compiled as the file has it). Build with
    :func:`plain`, :func:`placed` or :func:`placed_file`."""

    name: str
    plain: str | None = None
    device_of: Any = None
    devices: tuple[str, ...] | None = None
    xml: str | None = None
    used: tuple[str, ...] = ()  # of ``xml``: the devices its ops are on
    graph: tuple[str, str] | None = None  # of ``xml``: see graph_of and placed_file


def graph_of(device_of, devices: Sequence[str]) -> tuple[str, str]:
    """The identity of the graph a placement runs (:attr:`HeadToHead.graphs`): ``("one", device)``
    when every op is on one device, else ``("mixed", digest of every op's device)``."""
    dev = np.asarray(device_of)
    used = [d for k, d in enumerate(devices) if (dev == k).any()]
    if len(used) == 1:
        return ("one", used[0])
    per_op = "\n".join(devices[int(k)] for k in dev)
    return ("mixed", hashlib.blake2b(per_op.encode(), digest_size=16).hexdigest())


def placed_file(xml: str | os.PathLike, name: str | None = None, target: Target | None = None) -> Candidate:
    """A placed model file (from ``hdp compile``) as a head-to-head candidate, compiled with
    HETERO as the file has it. Its graph identity is ``("one", device)`` when every op is on one
    device, else ``("file", digest)`` of its op structure and every op's device: two files with
    equal identities run the same graph on the same devices. With ``target``, every device the
    file uses must be one of its (InputError otherwise)."""
    from hdp.ir.openvino_frontend import op_structure
    from hdp.runtime.placed import read_placed

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
    return Candidate(name=name or str(xml), xml=str(Path(xml).resolve()), used=tuple(pm.used), graph=graph)


def plain(device: str, name: str | None = None) -> Candidate:
    """The unplaced model compiled directly on ``device`` (named ``plain <device>``)."""
    return Candidate(name=name or f"plain {device}", plain=device)


def placed(device_of, devices: Sequence[str] | None = None, name: str = "placement") -> Candidate:
    """A placement, compiled with HETERO."""
    return Candidate(name=name, device_of=device_of, devices=None if devices is None else tuple(devices))


@dataclass(frozen=True, eq=False)
class HeadToHead:
    """Candidates measured interleaved in the same worker (see :meth:`Measurer.head_to_head`).

    ``measurements[i].times[r]`` is candidate ``i``'s time in round ``r`` (the same rounds for
    every candidate that ran; a failed one has ``error`` set). ``graphs[i]`` identifies the graph
    a candidate runs: ``("one", device)`` for a plain compile and for a placement with every op on
    that device (the same graph), ``("mixed", digest)`` otherwise.
    """

    names: tuple[str, ...]
    measurements: tuple[Measurement, ...]
    graphs: tuple[tuple[str, str], ...]
    rounds: int
    seconds: float
    reason: str
    plan: stats.SequentialPlan

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
        """B against A (see :func:`hdp.runtime.stats.compare`), at the plan's level and margin
        (``family``: one of that many comparisons holding together at that level); raises
        MeasureError if either failed. B is never called faster than A when both run the same
        graph."""
        i, j = self.index(a), self.index(b)
        self._need(i, j)
        return stats.compare(self.measurements[i].times, self.measurements[j].times,
                             level=level or self.plan.level, margin=self.plan.margin,
                             names=(self.names[i], self.names[j]), same_graph=self.same_graph(i, j), family=family)

    @property
    def family(self) -> int:
        """How many comparisons a report of this head-to-head makes at once: one per candidate
        that ran, but one (each against the kept or the placement)."""
        return max(len(self.ok) - 1, 1)

    def select(self, preference: Sequence[int | str] = ()) -> stats.Selection:
        """The best candidate (see :func:`hdp.runtime.stats.select_best`) among those that ran;
        indices in the result are into :attr:`names`. Raises MeasureError if none ran."""
        ok = self.ok
        if not ok:
            self._need(*range(len(self.names)))
        pos = {i: p for p, i in enumerate(ok)}
        times = np.array([self.measurements[i].times for i in ok]).T
        pref = [pos[self.index(c)] for c in preference if self.index(c) in pos]
        sel = stats.select_best(times, [self.names[i] for i in ok], pref, level=self.plan.level,
                                margin=self.plan.margin, same_graph=lambda p, q: self.same_graph(ok[p], ok[q]))
        return msgspec.structs.replace(sel, winner=ok[sel.winner], fastest=ok[sel.fastest],
                                       tied=tuple(ok[t] for t in sel.tied))

    def header(self, clock: bool = True) -> str:
        """``measured interleaved, 64 rounds in 3.2 s (resolved to 3 %); medians: a 1.234 ms, b ...;
        CI: 95 % for the 2 comparisons together`` (``clock=False``: without the wall time, for text
        that must not vary run to run)."""
        meds = ", ".join(f"{n} {m.median * 1e3:.3f} ms" if m.ok else f"{n} failed"
                         for n, m in zip(self.names, self.measurements))
        took = f" in {self.seconds:.1f} s" if clock else ""
        return f"measured interleaved, {self.rounds} rounds{took} ({self.reason}); medians: {meds}; {self.ci_note()}"

    def ci_note(self) -> str:
        """The level every interval of this head-to-head's report is at, said once."""
        lvl = stats.pct(self.plan.level)
        if self.family <= 1:
            return f"CI: {lvl} confidence interval"
        return (f"CI: {lvl} for the {self.family} comparisons together "
                f"({stats.pct(stats.family_level(self.plan.level, self.family + 1))} each)")


@dataclass(frozen=True, eq=False)
class BestOf:
    """The outcome of :meth:`Measurer.best_of`: ``winner`` indexes the candidates given."""

    winner: int
    finalists: tuple[int, ...]
    estimates: tuple[float, ...] | None
    head: HeadToHead
    selection: stats.Selection

    def text(self) -> str:
        lines = [self.head.header()]
        lines += [f"  {c.b} vs {c.a}: {c.describe(level=False)}" for c in self.selection.comparisons]
        lines.append(f"kept {self.selection.reason}")
        return "\n".join(lines)


class _RoundsFailed(Exception):
    pass


class _OutOfTime(Exception):
    """A head-to-head's deadline passed between requests."""


# --------------------------------------------------------------------------- the measurer


class Measurer:
    """Measures placements of one model on one target, reusing one worker process.

    ``source`` is a lowered :class:`~hdp.ir.types.Module` (its source model is read), an OpenVINO
    ``.xml`` (plain or placed), or an ``ov.Model``. ``target`` is a Target or a target spec.
    ``timeout`` bounds each compile + warm-up + runs (starting the worker and reading the model
    may take up to ``max(timeout, LOAD_TIMEOUT)``). ``cache``: True for the directory of the
    current :func:`cache_scope` (default ``~/.cache/hdp/measure``; none when the scope disables
    caching), a path, or False. Interleaved comparisons (:meth:`head_to_head`) are never cached.
    """

    def __init__(self, source, target: Target | str, *, runs: int = 10, warmup: int = 3,
                 timeout: float = 120.0, cache: bool | str | os.PathLike = True):
        if runs < 1 or warmup < 0:
            raise InputError(f"runs must be >= 1 and warmup >= 0 (got {runs}, {warmup})")
        if not timeout > 0:
            raise InputError(f"timeout must be > 0 (got {timeout})")
        self.target = load_target(target) if isinstance(target, str) else target
        self.runs, self.warmup, self.timeout = int(runs), int(warmup), float(timeout)
        self._tmp: str | None = None
        self.source = _source_of(source, self._tmpdir)
        if cache is True:
            where = measure_cache_dir()
            self.cache = MeasureCache(where) if where is not None else None
        else:
            self.cache = None if cache is False else MeasureCache(cache)
        self._worker: WorkerProcess | None = None
        self._loaded: dict | None = None
        self._base_key = [MEASURE_VERSION, self.source.digest, msgspec.json.encode(self.target).decode(),
                          self.runs, self.warmup] + _host_key()

    def _tmpdir(self) -> str:
        from hdp.fsutil import clean_stale, temp_name

        base = tempfile.gettempdir()
        clean_stale(base)  # model copies of measurers that were killed
        self._tmp = os.path.join(base, temp_name("measure"))
        os.mkdir(self._tmp, 0o700)
        return self._tmp

    @property
    def devices(self) -> tuple[str, ...]:
        """Device names that ``device_of`` indices refer to (the target's, in order)."""
        return self.target.device_names

    # ---- worker

    def _load_request(self) -> dict:
        return {"op": "load", "xml": self.source.xml, "spec": self.source.spec, "structure": self.source.structure,
                "roles": self.source.roles, "target": msgspec.to_builtins(self.target)}

    def _ensure_loaded(self) -> dict:
        """Start the worker and load the model if needed; raises _WorkerFailure or InputError."""
        if self._worker is None:
            load = self._load_request()
            self._worker, self._loaded = _take_spare(msgspec.msgpack.encode(load)) or (WorkerProcess(), None)
        if self._loaded is not None and self._worker.alive:
            return self._loaded
        self._loaded = None
        load = self._load_request()
        reply = self._worker.call(load, max(self.timeout, LOAD_TIMEOUT))
        if not reply["ok"]:
            self._worker.close()
            if reply.get("input"):
                raise (StaleInput if reply.get("stale") else InputError)(reply["error"])
            raise _WorkerFailure(f"cannot load the model: {reply['error']}")
        self._loaded = reply
        return reply

    def _call(self, req: dict) -> dict:
        """The worker's reply to ``req``; raises _WorkerFailure (crash, timeout) or InputError."""
        self._ensure_loaded()
        reply = self._worker.call(req, self.timeout)
        if not reply["ok"] and reply.get("input"):
            raise (StaleInput if reply.get("stale") else InputError)(reply["error"])
        return reply

    def loaded(self) -> dict:
        """The worker's view of the model: ``n_ops``, ``names`` and each op's recorded affinity."""
        try:
            return self._ensure_loaded()
        except _WorkerFailure as e:
            raise MeasureError(f"{self.source.xml}: {e}") from None

    def close(self) -> None:
        """Stop the worker (inside :func:`worker_reuse`: keep it, model loaded, for the next
        Measurer of the same model and target) and remove temporary files."""
        if self._worker is not None:
            if _REUSE[0] and not self._tmp and self._loaded is not None and self._worker.alive:
                _park(self._worker, msgspec.msgpack.encode(self._load_request()), self._loaded)
            else:
                self._worker.close()
            self._worker = None
        self._loaded = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ---- requests

    def _placement(self, device_of, devices) -> tuple[np.ndarray, list[str]]:
        devices = list(self.devices if devices is None else devices)
        if len(device_of) and isinstance(np.asarray(device_of).flat[0], str):
            names = [str(d) for d in device_of]
            unknown = sorted(set(names) - set(self.devices))
            if unknown:
                self.target.device(unknown[0])  # raises InputError naming the device
            devices = list(self.devices)
            dev = np.array([devices.index(n) for n in names], np.int16)
        else:
            dev = np.asarray(device_of)
            if dev.ndim != 1 or not np.issubdtype(dev.dtype, np.integer):
                raise InputError("a placement is one integer device index per op")
            dev = dev.astype(np.int16)
            if dev.size and (dev.min() < 0 or dev.max() >= len(devices)):
                bad = int(dev[(dev < 0) | (dev >= len(devices))][0])
                raise InputError(f"placement uses device index {bad}; there are {len(devices)} devices "
                                 f"({', '.join(devices)})")
        if self.source.n_ops is not None and dev.shape[0] != self.source.n_ops:
            raise InputError(f"placement has {dev.shape[0]} ops, the model has {self.source.n_ops}")
        for k in np.unique(dev):
            d = self.target.device(devices[int(k)])  # unknown device -> InputError
            if d.kind != "real":
                raise InputError(f"device '{d.name}' of target '{self.target.name}' is modeled; "
                                 f"a placement using it cannot be measured (use the simulator)")
        return dev, devices

    def _key(self, what: list) -> str:
        return serde.digest_bytes(serde.encode_any(self._base_key + what))

    def measure(self, device_of, devices=None) -> Measurement:
        """Measure one placement: ``device_of`` holds an index into ``devices`` (default
        :attr:`devices`) per op, or a device name per op. Failures come back as ``error``."""
        dev, devices = self._placement(device_of, devices)
        used = [d for k, d in enumerate(devices) if (dev == k).any()]
        what = "HETERO:" + ",".join(used)
        per_op = "\n".join(devices[int(k)] for k in dev)
        key = self._key(["placed", hashlib.blake2b(per_op.encode(), digest_size=16).hexdigest()])
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return hit
        req = {"op": "measure", "devices": devices, "device_of": dev.tobytes(), "runs": self.runs,
               "warmup": self.warmup}
        m = self._run(req, what)
        if self.cache is not None:
            self.cache.put(key, m)
        return m

    def latency(self, device_of, devices=None) -> float:
        """Median seconds of one placement; raises MeasureError if it fails, crashes or times out."""
        m = self.measure(device_of, devices)
        if not m.ok:
            raise MeasureError(m.error)
        return m.median

    def support(self, device: str) -> list[bool]:
        """OpenVINO's ``query_model`` on one real device, answered by the worker: whether each op
        (in the source's op order) is supported. Raises MeasureError when the query fails,
        crashes or times out (e.g. a plugin running out of memory on huge shapes)."""
        return self.support_of([device])[device]

    def support_of(self, devices: Sequence[str]) -> dict[str, list[bool]]:
        """:meth:`support` for several devices at once, queried in parallel by the worker."""
        for device in devices:
            if self.target.device(device).kind != "real":
                raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot be queried")
        try:
            reply = self._call({"op": "query", "devices": list(devices)})
        except _WorkerFailure as e:
            raise MeasureError(f"query_model on {', '.join(devices)}: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"query_model on {reply.get('device') or ', '.join(devices)}: {reply['error']}")
        return {d: [bool(x) for x in reply["supported"][d]] for d in devices}

    def signatures(self) -> tuple[np.ndarray, list[str]]:
        """Each op's signature in the worker's model (:mod:`hdp.runtime.query`): an int32 per op
        (an index into the digests; -1: not asked, -2: asked in its model) and the hex digests."""
        try:
            reply = self._call({"op": "signatures"})
        except _WorkerFailure as e:
            raise MeasureError(f"op signatures: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"op signatures: {reply['error']}")
        return np.frombuffer(reply["sig_of"], np.int32), list(reply["digests"])

    def query_signatures(self, ask: dict[str, list[int]]) -> dict:
        """``query_model`` on each device of ``ask`` about the op signatures listed for it, on
        small models cut out of the worker's (see :mod:`hdp.runtime.query`): the worker's reply
        (``answers``, ``in_context``, ``queries``, ``seconds``)."""
        for device in ask:
            if self.target.device(device).kind != "real":
                raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot be queried")
        try:
            reply = self._call({"op": "query_signatures", "ask": {d: list(map(int, ks)) for d, ks in ask.items()}})
        except _WorkerFailure as e:
            raise MeasureError(f"query_model on {', '.join(ask)}: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"query_model on {reply.get('device') or ', '.join(ask)}: {reply['error']}")
        return reply

    def plain(self, device: str) -> Measurement:
        """The unplaced model compiled directly on ``device`` (no HETERO)."""
        d = self.target.device(device)
        if d.kind != "real":
            raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot run here")
        key = self._key(["plain", device])
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return hit
        m = self._run({"op": "plain", "device": device, "runs": self.runs, "warmup": self.warmup},
                      f"plain:{device}")
        if self.cache is not None:
            self.cache.put(key, m)
        return m

    def profile(self, devices: Sequence[str], *, runs: int | None = None, warmup: int | None = None,
                seconds: float = 0.0, min_runs: int = 1) -> dict:
        """Compile the unplaced model on each of ``devices`` with PERF_COUNT, warm each up, then
        run them in interleaved rounds (one run per device per round): ``min_runs`` rounds, then
        more while the next (judged by the last) keeps the timed runs within ``seconds`` (0: no
        budget), at most ``runs`` (default: this Measurer's). Returns the worker's raw reply (per
        device ``times`` and the runtime graph ``nodes``, see :mod:`hdp.runtime.worker`). Raises
        MeasureError on failure; never cached (the profile pass is)."""
        for d in devices:
            if self.target.device(d).kind != "real":
                raise InputError(f"device '{d}' of target '{self.target.name}' is modeled; it cannot be profiled")
        req = {"op": "profile", "devices": list(devices), "runs": runs or self.runs,
               "warmup": self.warmup if warmup is None else warmup, "seconds": float(seconds),
               "min_runs": int(min_runs)}
        what = ", ".join(devices)
        try:
            reply = self._call(req)
        except _WorkerFailure as e:
            raise MeasureError(f"profiling on {what}: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"profiling on {what}: {reply['error']}")
        return reply

    # ---- interleaved comparisons

    def _candidate(self, c: Candidate) -> tuple[dict, str, tuple[str, str]]:
        """(request fields, description, graph identity) of a candidate; InputError if unusable."""
        if (c.plain is not None) + (c.device_of is not None) + (c.xml is not None) != 1:
            raise InputError(f"candidate '{c.name}': give one of a plain device, a placement or a placed "
                             f"file (not both or neither)")
        if c.xml is not None:
            for name in c.used:
                if self.target.device(name).kind != "real":
                    raise InputError(f"{c.xml}: placed on '{name}', a modeled device of target "
                                     f"'{self.target.name}'; it cannot run here")
            return {"xml": c.xml}, "HETERO:" + ",".join(c.used), c.graph or ("file", c.xml)
        if c.plain is not None:
            d = self.target.device(c.plain)
            if d.kind != "real":
                raise InputError(f"device '{c.plain}' of target '{self.target.name}' is modeled; it cannot run here")
            return {"plain": c.plain}, f"plain:{c.plain}", ("one", c.plain)
        dev, devices = self._placement(c.device_of, c.devices)
        used = [d for k, d in enumerate(devices) if (dev == k).any()]
        return {"devices": devices, "device_of": dev.tobytes()}, "HETERO:" + ",".join(used), graph_of(dev, devices)

    def head_to_head(self, candidates: Sequence[Candidate], plan: stats.SequentialPlan | None = None, *,
                     warmup: int | None = None, deadline: float | None = None) -> HeadToHead:
        """Compile every candidate in the same worker, run each ``warmup`` times (default: this
        Measurer's), then run them interleaved, one run of each per round in a rotating order
        (:func:`hdp.runtime.stats.round_order`), until ``plan`` (default
        ``SequentialPlan()``: resolve 3 %, at most 30 s of running) says stop. Never cached.

        A candidate that fails to compile (or crashes the worker) gets ``error`` set and the others
        go on; a mistake in a candidate (unknown device, wrong op count) raises InputError.
        Memory: every candidate stays compiled until the end (a 500-op model compiled 3-4 times
        is fine; dozens of large models at once are not: see :meth:`best_of`).

        ``deadline`` (``time.monotonic()``): candidates not yet compiled when it passes are not run
        (``error`` says so), and the rounds stop by then (the plan's ``max_seconds`` is cut to
        what is left, requests are sized to end by it, and one in flight finishes); stopped before
        the plan's first look, the comparison keeps the rounds that ran, too few perhaps for an
        interval ("not resolved": candidates count as equal within noise).
        """
        plan = plan or stats.SequentialPlan()
        warm = self.warmup if warmup is None else int(warmup)
        names = tuple(c.name for c in candidates)
        if len(set(names)) != len(names):
            raise InputError(f"candidate names must differ (got {', '.join(names)})")
        specs = [self._candidate(c) for c in candidates]
        k = len(specs)
        errors = [""] * k
        compile_s = [0.0] * k
        submodels = [0] * k
        handles: dict[int, int] = {}
        pending = list(range(k))
        while pending:
            i = pending.pop(0)
            fields, what, _ = specs[i]
            if deadline is not None and time.monotonic() >= deadline:
                errors[i] = f"{what}: not run (the time budget ran out)"
                continue
            try:
                reply = self._call({"op": "prepare", **fields, "warmup": warm})
            except _WorkerFailure as e:
                errors[i] = f"{what}: {e}"
                pending = sorted(set(pending) | set(handles))  # they died with the worker
                handles.clear()
                continue
            if not reply["ok"]:
                errors[i] = f"{what}: {reply['error']}"
                continue
            handles[i] = reply["handle"]
            compile_s[i] = reply["compile_seconds"]
            submodels[i] = int(reply.get("submodels", 0))
        ok = sorted(handles)
        times = np.zeros((0, len(ok)))
        seconds, reason = 0.0, "nothing ran"

        per_round = [0.0]  # seconds, from the last request: sizes requests to a quarter of the timeout
        done: list = []  # every round run so far (what a deadline leaves)

        def run_rounds(orders):
            out, i = [], 0
            while i < len(orders):
                span = self.timeout / 4
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _OutOfTime()
                    # at most half of what is left per request: a request in flight finishes, and
                    # rounds can run slower than the last ones did
                    span = min(span, left / 2)
                size = max(1, int(span / per_round[0])) if per_round[0] > 0 else 1
                chunk = orders[i:i + size]
                t0 = time.monotonic()
                try:
                    reply = self._worker.call({"op": "rounds", "handles": [handles[j] for j in ok],
                                               "orders": chunk}, self.timeout)
                except _WorkerFailure as e:
                    raise _RoundsFailed(str(e)) from None
                if not reply["ok"]:
                    raise _RoundsFailed(reply["error"])
                per_round[0] = (time.monotonic() - t0) / len(chunk)
                out.extend(reply["times"])
                done.extend(reply["times"])
                i += len(chunk)
            return np.asarray(out, np.float64)

        if ok:
            t0 = time.monotonic()
            if deadline is not None:
                plan = msgspec.structs.replace(plan, max_seconds=max(1e-3, min(plan.max_seconds, deadline - t0)))
            run_plan = plan  # the anchor indexes the candidates; the rounds run only those that compiled
            if plan.anchor >= 0:
                run_plan = msgspec.structs.replace(plan, anchor=ok.index(plan.anchor) if plan.anchor in ok else -1)
            try:
                times, reason = stats.run_sequential(run_plan, len(ok), run_rounds)
            except _OutOfTime:  # before the plan's first look: keep what ran (an interval may not be possible)
                times = np.asarray(done[plan.discard:], np.float64).reshape(-1, len(ok))
                reason = f"time budget ({times.shape[0]} rounds)"
            except _RoundsFailed as e:
                for i in ok:
                    errors[i] = f"{specs[i][1]}: interleaved runs failed: {e}"
                reason = "failed"
            seconds = time.monotonic() - t0
            if self._worker is not None and self._worker.alive:
                try:
                    self._worker.call({"op": "release", "handles": [handles[i] for i in ok]}, self.timeout)
                except _WorkerFailure:
                    pass
        col = {i: p for p, i in enumerate(ok)}
        ms = []
        for i, (_, what, _) in enumerate(specs):
            base = dict(what=what, target=self.target.name, runs=int(times.shape[0]), warmup=warm,
                        compile_seconds=compile_s[i], submodels=submodels[i])
            if errors[i] or i not in col:
                ms.append(Measurement(**base, error=errors[i] or f"{what}: not run"))
            else:
                ms.append(Measurement(**base, times=tuple(float(t) for t in times[:, col[i]])))
        return HeadToHead(names=names, measurements=tuple(ms), graphs=tuple(g for _, _, g in specs),
                          rounds=int(times.shape[0]), seconds=seconds, reason=reason, plan=plan)

    def compare(self, a: Candidate, b: Candidate, plan: stats.SequentialPlan | None = None) -> stats.Comparison:
        """B against A, measured head to head (see :meth:`head_to_head`); raises MeasureError if
        either fails."""
        return self.head_to_head([a, b], plan).compare(0, 1)

    def best_of(self, candidates: Sequence[Candidate], *, preference: Sequence[int] = (), top: int = 3,
                plan: stats.SequentialPlan | None = None, estimates: Sequence[float] | None = None,
                deadline: float | None = None, anchored: bool = False) -> BestOf:
        """The best of ``candidates``, never the minimum of noisy samples.

        With more than ``top + 1`` candidates, each is first screened (``estimates``, e.g.
        simulated latencies, or else one :meth:`measure`/:meth:`plain` each: the median of
        ``runs`` runs, cached); the ``top`` lowest plus the first of ``preference`` go to a
        head-to-head (:meth:`head_to_head`), and :func:`hdp.runtime.stats.select_best` keeps the
        fastest only if it beats the others beyond noise, otherwise the first of ``preference``
        (indices into ``candidates``, most preferred first, e.g. the best single device) among
        those equal within noise. ``deadline``: see :meth:`head_to_head`. ``anchored``: the rounds
        may stop as soon as no finalist can beat the first of ``preference`` by the plan's
        resolution (:attr:`hdp.runtime.stats.SequentialPlan.anchor`)."""
        k = len(candidates)
        if k == 0:
            raise InputError("best_of: no candidates")
        if estimates is not None and len(estimates) != k:
            raise InputError(f"best_of: {len(estimates)} estimates for {k} candidates")
        if estimates is None and k > top + 1:
            estimates = []
            for c in candidates:
                m = self.plain(c.plain) if c.plain is not None else self.measure(c.device_of, c.devices)
                estimates.append(m.median if m.ok else float("inf"))
        if estimates is None:
            finalists = list(range(k))
        else:
            finalists = stats.shortlist(estimates, top, list(preference))
            if not finalists:
                raise MeasureError("best_of: no candidate could be measured")
        if anchored and preference and preference[0] in finalists:
            plan = msgspec.structs.replace(plan or stats.SequentialPlan(), anchor=finalists.index(preference[0]))
        head = self.head_to_head([candidates[i] for i in finalists], plan, deadline=deadline)
        sel = head.select([finalists.index(p) for p in preference if p in finalists])
        return BestOf(winner=finalists[sel.winner], finalists=tuple(finalists),
                      estimates=None if estimates is None else tuple(float(e) for e in estimates),
                      head=head, selection=sel)

    def check(self, device_of=None, devices=None, *, xml=None, rename: dict | None = None) -> dict:
        """Run a placement (``device_of``, indices into ``devices``; or the placed model file
        ``xml``) with HETERO against the original on the plain CPU plugin (worker ``check``
        request). Returns the worker's verdict: ``passed``, ``error`` or ``max_error``/``where``,
        ``runs``; a crashed or hung worker is a failed check, not an exception."""
        req = {"op": "check", "rename": dict(rename or {})}
        if xml is not None:
            req["xml"] = str(xml)
        else:
            dev, devices = self._placement(device_of, devices)
            req.update(devices=list(devices), device_of=dev.tobytes())
        try:
            reply = self._call(req)
        except _WorkerFailure as e:
            return {"passed": False, "error": str(e)}
        if not reply["ok"]:
            return {"passed": False, "error": reply["error"]}
        return reply

    def _run(self, req: dict, what: str) -> Measurement:
        base = dict(what=what, target=self.target.name, runs=self.runs, warmup=self.warmup)
        try:
            reply = self._call(req)
        except _WorkerFailure as e:
            return Measurement(**base, error=f"{what}: {e}")
        if not reply["ok"]:
            return Measurement(**base, error=f"{what}: {reply['error']}")
        return Measurement(**base, times=tuple(reply["times"]), compile_seconds=reply["compile_seconds"],
                           submodels=int(reply.get("submodels", 0)))


# --------------------------------------------------------------------------- conveniences


def measure_plain(source, target: Target | str, device: str, *, runs: int = 10, warmup: int = 3,
                  timeout: float = 120.0, cache: bool | str | os.PathLike = True) -> Measurement:
    """Time the unplaced model compiled directly on one device of the target."""
    with Measurer(source, target, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        return m.plain(device)


def measure_blob(blob: str | os.PathLike, *, runs: int = 10, warmup: int = 3, timeout: float = 120.0) -> Measurement:
    """Time an exported placement (:func:`hdp.runtime.blob.export_blob`) as an application runs it:
    imported in a worker with its devices registered from its record, ``runs`` inferences on seeded
    inputs at the recorded shapes. Never cached. Raises InputError for a blob whose record is
    missing or does not match it, or whose devices this host lacks."""
    from hdp.runtime.blob import read_record

    rec = read_record(blob)
    base = dict(what=f"{rec.device} (imported {Path(blob).name})", target=rec.target, runs=runs, warmup=warmup)
    w = WorkerProcess()
    try:
        reply = w.call({"op": "blob", "blob": str(Path(blob).resolve()), "device": rec.device,
                        "target": msgspec.to_builtins(rec.target_of()), "spec": rec.specialisation,
                        "runs": int(runs), "warmup": int(warmup)}, max(timeout, LOAD_TIMEOUT))
    except _WorkerFailure as e:
        return Measurement(**base, error=f"{blob}: {e}")
    finally:
        w.close()
    if not reply["ok"]:
        if reply.get("input"):
            raise InputError(f"{blob}: {reply['error']}")
        return Measurement(**base, error=f"{blob}: {reply['error']}")
    return Measurement(**base, times=tuple(reply["times"]), compile_seconds=reply["compile_seconds"],
                       submodels=int(reply.get("submodels", 0)))


def placed_device_of(xml: str | os.PathLike, target: Target | None = None):
    """(device_of, devices, target) of a placed model written by ``hdp compile``: the affinity of
    every op in the file's op order, and the target given or recorded in the file."""
    from hdp.runtime.placed import read_placed

    pm = read_placed(xml)
    tgt = target or pm.target
    for d in pm.devices:
        if d not in tgt.device_names:
            raise InputError(f"{xml}: ops are placed on '{d}', which target '{tgt.name}' does not have "
                             f"(it has {', '.join(tgt.device_names)})")
    index = {d: k for k, d in enumerate(pm.devices)}
    dev = np.array([index[op.get_rt_info()["affinity"].astype(str)] for op in pm.model.get_ordered_ops()],
                   np.int16)
    return dev, list(pm.devices), tgt


def evaluate_placed(xml: str | os.PathLike, target: Target | str | None = None, *, runs: int = 10,
                    warmup: int = 3, timeout: float = 120.0, plain: str | None = None,
                    cache: bool | str | os.PathLike = True, plan: stats.SequentialPlan | None = None) -> dict:
    """Measure a placed model; with ``plain``, head to head against the model compiled on that one
    device instead.

    Without ``plain``: ``{"placed": Measurement}`` (``runs`` runs, cached). With ``plain``:
    ``{"placed": Measurement, "plain": Measurement, "comparison": Comparison}`` from interleaved
    rounds (never cached; ``plan`` defaults to ``SequentialPlan(min_rounds=max(runs, 6))``); the
    comparison is the placement against the plain compile.
    """
    tgt = load_target(target) if isinstance(target, str) else target
    dev, devices, tgt = placed_device_of(xml, tgt)
    with Measurer(xml, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        if not plain:
            return {"placed": m.measure(dev, devices)}
        plan = plan or stats.SequentialPlan(min_rounds=max(runs, 6), max_rounds=max(runs, 1000))
        h = m.head_to_head([Candidate(name=f"plain {plain}", plain=plain), placed(dev, devices)], plan)
    out = {"placed": h.measurements[1], "plain": h.measurements[0]}
    if all(x.ok for x in h.measurements):
        out["comparison"] = h.compare(0, 1)
    return out


@dataclass(frozen=True, eq=False)
class PlainComparison:
    """A placement against the plain compile on each real device, measured head to head:
    ``comparisons[device]`` is the placement against ``plain <device>``; ``text`` says it in words."""

    text: str
    comparisons: dict[str, stats.Comparison]
    head: HeadToHead | None = None

    def __str__(self) -> str:
        return self.text


def plain_report(head: HeadToHead, placement: int | str = 0, *, stand_ins: bool = False,
                 restate: bool = True) -> PlainComparison:
    """Words for a head-to-head of one placement against plain compiles (candidates named
    ``plain <device>``): each comparison once (one line, its interval at the level the header
    states), the same-graph note, and what to do about it.

    ``stand_ins``: a candidate with every op on a device (through HETERO) stands for that device's
    plain compile when the head has none (the same graph; the lines say it was measured so); the
    placement itself may be one of them. ``restate=False``: the comparisons were already printed
    (a placer's head-to-head in the same output): only the verdict, which refers to them."""
    p = head.index(placement)
    pm = head.measurements[p]
    lines = [head.header()] if restate else []
    if not pm.ok:
        return PlainComparison(f"the placement could not be measured: {pm.error}", {}, head)
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
    itself = kind == "one" and index.get(one) == p  # the placement is the stand-in for its device
    if not comps and not itself:
        lines.append("no plain compile could be measured")
        return PlainComparison("\n".join(lines), comps, head)
    where = "" if restate else " (compared above)"
    if kind == "one":
        lines.append(f"all ops on {one}: same graph as the plain {one} compile")
    if kind != "one" and all(c.verdict == "faster" for c in comps.values()):  # one device never beats its own
        lines.append(f"verdict: the placement beats every plain compile beyond noise{where}")
    elif kind == "one":
        own = comps.get(one)
        what = ("HETERO's own cost is the difference" + where if own is not None and own.verdict == "slower"
                else "no difference beyond noise" + where if own is not None
                else "measured only as such" if itself else f"plain {one} not measured")
        lines.append(f"verdict: the placement is the plain {one} compile through HETERO ({what})")
        others = [d for d in comps if d != one]
        if (own is not None or itself) and others:
            ref = p if itself else index[one]
            vs = {d: head.compare(ref, index[d], family=fam) for d in others}
            faster = [d for d in others if vs[d].verdict == "faster"]
            if faster:
                d = min(faster, key=lambda x: vs[x].ratio)
                said = "" if itself and not restate else f" ({vs[d].describe(level=False)})"
                lines.append(f"plain {d} is faster than plain {one}{said}: consider --method single:{d}")
    else:
        best = max((d for d, c in comps.items() if c.verdict != "faster"), key=lambda d: comps[d].ratio)
        lines.append(f"verdict: the placement does not beat plain {best} beyond noise{where}: "
                     f"consider --method single:{best}")
    return PlainComparison("\n".join(lines), comps, head)


def plain_from_heads(heads: Sequence[HeadToHead], module: Module, target: Target) -> PlainComparison | None:
    """``module.placement`` against every real device's plain compile, taken from a head-to-head a
    placer measured in this run (:func:`hdp.placers.note_head`) when one ran this very placement
    beside every op on each real device of ``target`` (the same graphs as the plain compiles);
    None when none did (then :func:`compare_with_plain` measures)."""
    pl = module.placement
    if pl is None:
        return None
    want = graph_of(pl.device_of.numpy(), pl.devices)
    real = [d.name for d in target.devices if d.kind == "real"]
    for head in reversed(heads):
        ok = [i for i in head.ok if head.graphs[i] == want]
        singles = {head.graphs[i][1] for i in head.ok if head.graphs[i][0] == "one"}
        if ok and real and all(d in singles for d in real):
            return plain_report(head, ok[0], stand_ins=True, restate=False)
    return None


def compare_with_plain(module: Module, target: Target | str, *, plan: stats.SequentialPlan | None = None,
                       warmup: int = 3, timeout: float = 120.0) -> PlainComparison:
    """``module.placement`` against the unplaced model compiled on each real device of the target,
    measured head to head (interleaved, fresh, never cached; ``plan`` defaults to
    ``SequentialPlan()``: resolve 3 %, at most 30 s of running). For ``hdp compile`` to print
    after placing. A placement with every op on one device runs the same graph as that device's
    plain compile and is never called faster than it."""
    tgt = load_target(target) if isinstance(target, str) else target
    pl = module.placement
    if pl is None:
        raise InputError("the module has no placement to compare")
    real = [d.name for d in tgt.devices if d.kind == "real"]
    used = {pl.devices[int(k)] for k in np.unique(pl.device_of.numpy())}
    modeled = sorted(d for d in used if tgt.device(d).kind != "real")
    if modeled or not real:
        return PlainComparison(f"not measured: target '{tgt.name}' has modeled devices "
                               f"({', '.join(modeled or [d.name for d in tgt.devices])}); compare with the simulator",
                               {})
    with Measurer(module, tgt, warmup=warmup, timeout=timeout, cache=False) as m:
        head = m.head_to_head([placed(pl.device_of.numpy(), pl.devices)] + [plain(d) for d in real], plan)
    return plain_report(head, 0)

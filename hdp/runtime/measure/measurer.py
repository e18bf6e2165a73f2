"""Measuring placements on the real devices of a target: the :class:`Measurer`.

A placement is compiled with HETERO (every op's affinity set, see DESIGN §4), warmed up and run
``runs`` times on fixed random inputs of the right element types and shapes; the result is every
run's wall time, summarised by the median and its spread. All OpenVINO work happens in a worker
process (:mod:`hdp.runtime.measure.worker`, spoken to through :mod:`hdp.runtime.measure.worker_client` in the
messages of :mod:`hdp.runtime.measure.protocol`) with a timeout per request, so a compile that crashes
(segfault), hangs or raises becomes a :class:`~hdp.runtime.measure.measurement.Measurement` with ``error``
set, and the next measurement starts a fresh worker. One worker serves many placements of the same
model::

    from hdp.runtime.measure.measurer import Measurer
    with Measurer(module, "virtual", runs=10) as m:     # module: a lowered Module (or .xml, ov.Model)
        seconds = m.latency(device_of)                  # int16 per op, indices into m.devices
        row = m.measure(device_of)                      # Measurement: never raises for a failed run
        base = m.measure_unplaced("CPU")                # the unplaced model compiled on one device

``latency`` raises :class:`~hdp.runtime.measure.measurement.MeasureError` (an HdpError) when the placement
fails to compile or run, crashes or times out; ``measure`` returns the failure as
``Measurement.error`` instead. Mistakes in the request (a device index out of range, a device the
target lacks or this host does not have, a modeled device) raise :class:`~hdp.base.errors.InputError`
from both.

Comparisons are never made from separate measurements: :meth:`Measurer.head_to_head` compiles
several candidates (:mod:`hdp.runtime.measure.measurement`: ``placed``, ``plain``, ``placed_file``) in the
same worker and runs them interleaved, run by run, until the statistics of
:mod:`hdp.runtime.measure.stats` resolve the differences or a time cap is hit::

        h = m.head_to_head([placed(device_of), unplaced("CPU"), unplaced("CPU_B")])
        h.compare("plain CPU_B", "placement").describe()   # '0.96× the time, faster (95 % CI 0.94–0.97×, 2 blocks)'
        m.compare(unplaced("CPU"), unplaced("CPU_B"))     # a Comparison
        m.best_of(candidates, preference=[0])             # the best, or the preferred among equals

Successful single measurements are cached (:mod:`hdp.runtime.measure.cache`: the directory of the
current ``cache_scope``), keyed by the model's digest, the placement (device name per op), the
target, runs and warm-up, and the host fingerprint; failures and interleaved comparisons are never
cached. Inside :func:`~hdp.runtime.measure.worker_client.worker_reuse` a Measurer that closes hands its
worker, model loaded, to the next one of the same model and target.

This module is a little over 600 lines because :class:`Measurer` is one class of about 500: its
methods share the worker, the cache keys and the checks of a placement against the target.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.errors import InputError, StaleInput
from hdp.base.fsutil import clean_stale, temp_name
from hdp.ir import serde
from hdp.ir.op_identity import graph_structure, op_structure
from hdp.ir.openvino_frontend import checked_source
from hdp.ir.openvino_read import file_digest
from hdp.ir.types import Module
from hdp.placement.structure import roles
from hdp.runtime.measure import protocol as P
from hdp.runtime.measure import stats
from hdp.runtime.measure.cache import (
    MEASURE_VERSION,
    MeasureCache,
    host_key,
    measure_cache_dir,
)
from hdp.runtime.measure.load import HostLoad
from hdp.runtime.measure.measurement import (
    BestOf,
    Candidate,
    HeadToHead,
    MeasureError,
    Measurement,
    Served,
    default_plain,
    graph_of,
    placed,
    unplaced,
)
from hdp.runtime.measure.selection import shortlist
from hdp.runtime.measure.worker_client import (
    LOAD_TIMEOUT,
    WorkerFailure,
    WorkerProcess,
    current_pool,
)
from hdp.runtime.placed.model import read_placed
from hdp.target.devices import host_kinds
from hdp.target.target import Target, load_target

__all__ = ["Measurer", "evaluate_placed", "measure_plain", "placed_device_of"]


# --------------------------------------------------------------------------- sources


def _file_digest(xml: Path) -> str:
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
        xml, digest = checked_source(source)
        spec = source.meta.get("specialisation", "")
        if not spec:
            raise InputError("this module records no specialisation (lowered by an older hdp); lower it again")

        return _Source(str(xml), spec, graph_structure(source.graph).digest(), source.graph.n_ops,
                       f"{digest}:{spec}", roles(source.graph).tobytes())
    if isinstance(source, (str, os.PathLike)):
        xml = Path(source)
        if not xml.is_file():
            raise InputError(f"{xml}: no such file")
        return _Source(str(xml.resolve()), "", None, None, _file_digest(xml))
    if hasattr(source, "get_ordered_ops"):  # an ov.Model: saved for the worker to read
        import openvino as ov


        xml = Path(tmpdir_factory()) / "model.xml"
        ov.save_model(source, str(xml), compress_to_fp16=False)
        ops = source.get_ordered_ops()
        return _Source(str(xml), "", op_structure(ops).digest(), len(ops), _file_digest(xml))
    raise TypeError(f"cannot measure a {type(source).__name__}: give a Module, an .xml path or an ov.Model")


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
    ``worker``: what answers the requests (default: a :class:`~hdp.runtime.measure.worker_client.WorkerProcess`,
    or the spare of the current :func:`~hdp.runtime.measure.worker_client.worker_reuse` block); anything
    with the same ``call``/``send``/``alive``/``close`` (a test's scripted fake) will do.
    """

    def __init__(self, source, target: Target | str, *, runs: int = 10, warmup: int = 3,
                 timeout: float = 120.0, cache: bool | str | os.PathLike = True, worker=None):
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
        self._worker: WorkerProcess | None = worker
        self._loaded: P.Loaded | None = None
        self._base_key = [MEASURE_VERSION, self.source.digest, msgspec.json.encode(self.target).decode(),
                          self.runs, self.warmup] + host_key()

    def _tmpdir(self) -> str:
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

    def _load_request(self) -> P.Load:
        return P.Load(xml=self.source.xml, spec=self.source.spec, structure=self.source.structure,
                      roles=self.source.roles, target=self.target)

    def _ensure_loaded(self) -> P.Loaded:
        """Start the worker and load the model if needed; raises WorkerFailure or InputError."""
        if self._worker is None:
            pool = current_pool()
            taken = pool.take(P.encode(self._load_request())) if pool is not None else None
            self._worker, self._loaded = taken or (WorkerProcess(), None)
        if self._loaded is not None and self._worker.alive:
            return self._loaded
        self._loaded = None
        reply = self._worker.call(self._load_request(), max(self.timeout, LOAD_TIMEOUT))
        if isinstance(reply, P.Failed):
            self._worker.close()
            if reply.input:
                raise (StaleInput if reply.stale else InputError)(reply.error)
            raise WorkerFailure(f"cannot load the model: {reply.error}")
        self._loaded = reply
        return reply

    def _call(self, req: P.Request) -> P.Reply:
        """The worker's reply to ``req`` (the protocol's reply type, or a Failed that is not the
        user's mistake); raises WorkerFailure (crash, timeout) or InputError."""
        self._ensure_loaded()
        reply = self._worker.call(req, self.timeout)
        if isinstance(reply, P.Failed) and reply.input:
            raise (StaleInput if reply.stale else InputError)(reply.error)
        return reply

    def loaded(self) -> P.Loaded:
        """The worker's view of the model: ``n_ops``, ``names`` and each op's recorded
        ``affinity``, the ``spec`` it runs at (:class:`~hdp.runtime.measure.protocol.Loaded`)."""
        try:
            return self._ensure_loaded()
        except WorkerFailure as e:
            raise MeasureError(f"{self.source.xml}: {e}") from None

    def close(self) -> None:
        """Stop the worker (inside :func:`worker_reuse`: keep it, model loaded, for the next
        Measurer of the same model and target) and remove temporary files."""
        if self._worker is not None:
            pool = current_pool()
            if pool is not None and not self._tmp and self._loaded is not None and self._worker.alive:
                pool.park(self._worker, P.encode(self._load_request()), self._loaded)
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
        m = self._run(P.Measure(placement=P.Placement(devices=list(devices), device_of=dev.tobytes()),
                                runs=self.runs, warmup=self.warmup), what)
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
            reply = self._call(P.Query(devices=list(devices)))
        except WorkerFailure as e:
            raise MeasureError(f"query_model on {', '.join(devices)}: {e}") from None
        if isinstance(reply, P.Failed):
            raise MeasureError(f"query_model on {reply.device or ', '.join(devices)}: {reply.error}")
        return {d: list(reply.supported[d]) for d in devices}

    def signatures(self) -> tuple[np.ndarray, list[str]]:
        """Each op's signature in the worker's model (:mod:`hdp.runtime.measure.query`): an int32 per op
        (an index into the digests; -1: not asked, -2: asked in its model) and the hex digests."""
        try:
            reply = self._call(P.Signatures())
        except WorkerFailure as e:
            raise MeasureError(f"op signatures: {e}") from None
        if isinstance(reply, P.Failed):
            raise MeasureError(f"op signatures: {reply.error}")
        return np.frombuffer(reply.sig_of, np.int32), list(reply.digests)

    def query_signatures(self, ask: dict[str, list[int]]) -> P.SignatureAnswers:
        """``query_model`` on each device of ``ask`` about the op signatures listed for it, on
        small models cut out of the worker's (see :mod:`hdp.runtime.measure.query`): the worker's
        :class:`~hdp.runtime.measure.protocol.SignatureAnswers` (``answers``, ``in_context``, ``queries``,
        ``seconds``)."""
        for device in ask:
            if self.target.device(device).kind != "real":
                raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot be queried")
        try:
            reply = self._call(P.QuerySignatures(ask={d: [int(k) for k in ks] for d, ks in ask.items()}))
        except WorkerFailure as e:
            raise MeasureError(f"query_model on {', '.join(ask)}: {e}") from None
        if isinstance(reply, P.Failed):
            raise MeasureError(f"query_model on {reply.device or ', '.join(ask)}: {reply.error}")
        return reply

    def measure_unplaced(self, device: str) -> Measurement:
        """The unplaced model compiled directly on ``device`` (no HETERO)."""
        d = self.target.device(device)
        if d.kind != "real":
            raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot run here")
        key = self._key(["plain", device])
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return hit
        m = self._run(P.Unplaced(device=device, runs=self.runs, warmup=self.warmup), f"plain:{device}")
        if self.cache is not None:
            self.cache.put(key, m)
        return m

    def profile(self, devices: Sequence[str], *, runs: int | None = None, warmup: int | None = None,
                seconds: float = 0.0, min_runs: int = 1, chunk: int = 0, whole_max: int = 0) -> dict:
        """Compile the unplaced model on each of ``devices`` with PERF_COUNT, warm each up, then
        run them in interleaved rounds (one run per device per round): ``min_runs`` rounds, then
        more while the next (judged by the last) keeps the timed runs within ``seconds`` (0: no
        budget), at most ``runs`` (default: this Measurer's). A model of more than ``whole_max`` ops
        is profiled in chunks of ``chunk`` ops (:mod:`hdp.runtime.measure.chunks`; 0: whole). Returns the worker's
        :class:`~hdp.runtime.measure.protocol.Profiled` reply as plain data (per device ``times`` and the
        runtime graph ``nodes``, each node a dict). Raises MeasureError on failure; never cached
        (the profile pass is)."""
        for d in devices:
            if self.target.device(d).kind != "real":
                raise InputError(f"device '{d}' of target '{self.target.name}' is modeled; it cannot be profiled")
        req = P.Profile(devices=list(devices), runs=int(runs or self.runs),
                        warmup=int(self.warmup if warmup is None else warmup), seconds=float(seconds),
                        min_runs=int(min_runs), chunk=int(chunk), whole_max=int(whole_max))
        what = ", ".join(devices)
        try:
            reply = self._call(req)
        except WorkerFailure as e:
            raise MeasureError(f"profiling on {what}: {e}") from None
        if isinstance(reply, P.Failed):
            raise MeasureError(f"profiling on {what}: {reply.error}")
        return msgspec.to_builtins(reply)

    # ---- interleaved comparisons

    def _candidate(self, c: Candidate) -> tuple[P.Prepare, str, tuple[str, str]]:
        """(the request that prepares it without its warm-up, description, graph identity) of a
        candidate; InputError if unusable."""
        if (c.unplaced_on is not None) + (c.device_of is not None) + (c.xml is not None) != 1:
            raise InputError(f"candidate '{c.name}': give one of a plain device, a placement or a placed "
                             f"file (not both or neither)")
        if c.xml is not None:
            tgt = c.target or self.target
            for name in c.used:
                if tgt.device(name).kind != "real":
                    raise InputError(f"{c.xml}: placed on '{name}', a modeled device of target "
                                     f"'{tgt.name}'; it cannot run here")
            how = "concurrent:" if c.execution == "concurrent" else "HETERO:"
            return (P.Prepare(xml=c.xml, execution=c.execution, target=c.target), how + ",".join(c.used)
                    + (f" ({tgt.name})" if c.target is not None else ""), c.graph or ("file", c.xml))
        if c.unplaced_on is not None and c.defaults:  # OpenVINO's own defaults: any device of the host
            return (P.Prepare(unplaced_on=c.unplaced_on, defaults=True, config=_text_config(c.config)),
                    f"default:{c.unplaced_on}", ("default", c.unplaced_on))
        if c.unplaced_on is not None:
            d = self.target.device(c.unplaced_on)
            if d.kind != "real":
                raise InputError(f"device '{c.unplaced_on}' of target '{self.target.name}' is modeled; "
                                 f"it cannot run here")
            return P.Prepare(unplaced_on=c.unplaced_on), f"plain:{c.unplaced_on}", ("one", c.unplaced_on)
        dev, devices = self._placement(c.device_of, c.devices)
        used = [d for k, d in enumerate(devices) if (dev == k).any()]
        graph = graph_of(dev, devices)
        if c.execution != "sequential" and len(used) > 1:
            graph = (c.execution, graph[1])  # another way of running it: never the same as HETERO's
        how = "concurrent:" if c.execution == "concurrent" else "HETERO:"
        return (P.Prepare(placement=P.Placement(devices=list(devices), device_of=dev.tobytes()), execution=c.execution),
                how + ",".join(used), graph)

    def head_to_head(self, candidates: Sequence[Candidate], plan: stats.SequentialPlan | None = None, *,
                     warmup: int | None = None, deadline: float | None = None) -> HeadToHead:
        """Compile every candidate in the same worker, run each ``warmup`` times (default: this
        Measurer's), then run them interleaved, one run of each per round in a rotating order
        (:func:`hdp.runtime.measure.stats.round_order`), until ``plan`` (default
        ``SequentialPlan()``: resolve 3 %, at most 30 s of running) says stop; then, for each
        further block of ``plan.blocks``, release them, compile them again (in the reverse order)
        and run them under the plan again: every comparison's interval covers each block's
        (:func:`hdp.runtime.measure.stats.compare`). The worker reports what other processes did on
        the host's cores meanwhile (:attr:`HeadToHead.load`). Never cached.

        A candidate that fails to compile (or crashes the worker) gets ``error`` set and the others
        go on; a mistake in a candidate (unknown device, wrong op count) raises InputError.
        Memory: every candidate stays compiled until the end of its block (a 500-op model compiled
        3-4 times is fine; dozens of large models at once are not: see :meth:`best_of`).

        ``deadline`` (``time.monotonic()``): candidates not yet compiled when it passes are not run
        (``error`` says so), and the rounds stop by then (the plan's ``max_seconds`` is cut to
        what is left, requests are sized to end by it, and one in flight finishes); stopped before
        the plan's first look, the comparison keeps the rounds that ran, too few perhaps for an
        interval ("not resolved": candidates count as equal within noise). A block that cannot
        start before the deadline is left out, and ``reason`` says so.
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
        props: list[dict] = [{} for _ in range(k)]
        parts: list[np.ndarray] = []  # per block: rounds x k (NaN where a candidate did not run)
        reasons: list[str] = []
        seconds = 0.0
        busy = [0.0, 0.0, 0.0, True]  # host busy, own, wall core-seconds; all known
        block_plan = plan.block()
        for b in range(plan.blocks):
            if b and deadline is not None and time.monotonic() >= deadline:
                reasons.append(f"block {b + 1} of {plan.blocks} not run (the time budget ran out)")
                break
            order = list(range(k)) if b % 2 == 0 else list(range(k))[::-1]
            alive = [i for i in order if not errors[i]]
            if not alive:
                break
            got = self._block(specs, alive, block_plan, warm, deadline, busy)
            for i, (err, cs, sm, pr) in got["candidates"].items():
                if err:
                    errors[i] = err
                elif b == 0:
                    compile_s[i], submodels[i], props[i] = cs, sm, pr
            rows = np.full((got["times"].shape[0], k), np.nan)
            for p, i in enumerate(got["ok"]):
                rows[:, i] = got["times"][:, p]
            parts.append(rows)
            reasons.append(got["reason"])
            seconds += got["seconds"]
            if got["reason"] == "failed":
                break
        ok = [i for i in range(k) if not errors[i]]
        allrows = np.concatenate(parts) if parts else np.zeros((0, k))
        block_of = np.concatenate([np.full(x.shape[0], j, np.int16) for j, x in enumerate(parts)]) if parts \
            else np.zeros(0, np.int16)
        keep = np.all(np.isfinite(allrows[:, ok]), axis=1) if ok else np.zeros(allrows.shape[0], bool)
        times, block_of = allrows[keep], block_of[keep]
        ms = []
        for i, (_, what, _) in enumerate(specs):
            base = dict(what=what, target=self.target.name, runs=int(times.shape[0]), warmup=warm,
                        compile_seconds=compile_s[i], submodels=submodels[i], properties=props[i])
            if errors[i] or i not in ok or not times.shape[0]:
                ms.append(Measurement(**base, error=errors[i] or f"{what}: not run"))
            else:
                ms.append(Measurement(**base, times=tuple(float(t) for t in times[:, i])))
        reason = reasons[0] if len(reasons) == 1 else "; ".join(f"block {j + 1}: {r}" if not r.startswith("block ")
                                                                 else r for j, r in enumerate(reasons))
        load = HostLoad.of(busy[0] if busy[3] else -1.0, busy[1], busy[2], os.cpu_count() or 1)
        return HeadToHead(names=names, measurements=tuple(ms), graphs=tuple(g for _, _, g in specs),
                          rounds=int(times.shape[0]), seconds=seconds, reason=reason or "nothing ran", plan=plan,
                          blocks=tuple(int(x) for x in block_of), load=load)

    def _block(self, specs, order: list[int], plan: stats.SequentialPlan, warm: int, deadline, busy: list) -> dict:
        """One block of :meth:`head_to_head`: the candidates ``order`` (indices into ``specs``)
        compiled in that order and warmed up, run under ``plan``, released. ``busy`` accumulates
        the worker's load report. Returns ``candidates`` (index -> (error, compile seconds,
        submodels)), ``ok`` (the indices that ran, ascending), ``times`` (rounds x ok), ``reason``
        and ``seconds``."""
        out: dict[int, tuple[str, float, int, dict]] = {}
        handles: dict[int, int] = {}
        pending = list(order)
        while pending:
            i = pending.pop(0)
            prepare, what, _ = specs[i]
            if deadline is not None and time.monotonic() >= deadline:
                out[i] = (f"{what}: not run (the time budget ran out)", 0.0, 0, {})
                continue
            try:
                reply = self._call(msgspec.structs.replace(prepare, warmup=warm))
            except WorkerFailure as e:
                out[i] = (f"{what}: {e}", 0.0, 0, {})
                pending = [j for j in order if j in set(pending) | set(handles)]  # they died with the worker
                handles.clear()
                continue
            if isinstance(reply, P.Failed):
                out[i] = (f"{what}: {reply.error}", 0.0, 0, {})
                continue
            handles[i] = reply.handle
            out[i] = ("", reply.compile_seconds, reply.submodels, dict(reply.properties))
        ok = sorted(handles)
        times = np.zeros((0, len(ok)))
        seconds, reason = 0.0, "nothing ran"

        per_round = [0.0]  # seconds, from the last request: sizes requests to a quarter of the timeout
        done: list = []  # every round run so far (what a deadline leaves)

        def run_rounds(orders):
            out_, i = [], 0
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
                    reply = self._worker.call(P.Rounds(handles=[handles[j] for j in ok], orders=chunk), self.timeout)
                except WorkerFailure as e:
                    raise _RoundsFailed(str(e)) from None
                if isinstance(reply, P.Failed):
                    raise _RoundsFailed(reply.error)
                per_round[0] = (time.monotonic() - t0) / len(chunk)
                if reply.busy < 0:
                    busy[3] = False
                busy[0] += max(reply.busy, 0.0)
                busy[1] += reply.own
                busy[2] += reply.wall
                out_.extend(reply.times)
                done.extend(reply.times)
                i += len(chunk)
            return np.asarray(out_, np.float64)

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
                    out[i] = (f"{specs[i][1]}: interleaved runs failed: {e}", 0.0, 0, {})
                reason = "failed"
            seconds = time.monotonic() - t0
            if self._worker is not None and self._worker.alive:
                try:
                    self._worker.call(P.Release(handles=[handles[i] for i in ok]), self.timeout)
                except WorkerFailure:
                    pass
        return {"candidates": out, "ok": [i for i in ok if not out[i][0]] if reason != "failed" else [],
                "times": times if reason != "failed" else np.zeros((0, 0)), "reason": reason, "seconds": seconds}

    def compare(self, a: Candidate, b: Candidate, plan: stats.SequentialPlan | None = None) -> stats.Comparison:
        """B against A, measured head to head (see :meth:`head_to_head`); raises MeasureError if
        either fails."""
        return self.head_to_head([a, b], plan).compare(0, 1)

    def best_of(self, candidates: Sequence[Candidate], *, preference: Sequence[int] = (), top: int = 3,
                plan: stats.SequentialPlan | None = None, estimates: Sequence[float] | None = None,
                deadline: float | None = None, anchored: bool = False) -> BestOf:
        """The best of ``candidates``, never the minimum of noisy samples.

        With more than ``top + 1`` candidates, each is first screened (``estimates``, e.g.
        simulated latencies, or else one :meth:`measure`/:meth:`measure_unplaced` each: the median of
        ``runs`` runs, cached); the ``top`` lowest plus the first of ``preference`` go to a
        head-to-head (:meth:`head_to_head`), and :func:`hdp.runtime.measure.selection.select_best` keeps the
        fastest only if it beats the others beyond noise, otherwise the first of ``preference``
        (indices into ``candidates``, most preferred first, e.g. the best single device) among
        those equal within noise. ``deadline``: see :meth:`head_to_head`. ``anchored``: the rounds
        may stop as soon as no finalist can beat the first of ``preference`` by the plan's
        resolution (:attr:`hdp.runtime.measure.stats.SequentialPlan.anchor`)."""
        k = len(candidates)
        if k == 0:
            raise InputError("best_of: no candidates")
        if estimates is not None and len(estimates) != k:
            raise InputError(f"best_of: {len(estimates)} estimates for {k} candidates")
        if estimates is None and k > top + 1:
            estimates = []
            for c in candidates:
                m = (self.measure_unplaced(c.unplaced_on) if c.unplaced_on is not None
                     else self.measure(c.device_of, c.devices))
                estimates.append(m.median if m.ok else float("inf"))
        if estimates is None:
            finalists = list(range(k))
        else:
            finalists = shortlist(estimates, top, list(preference))
            if not finalists:
                raise MeasureError("best_of: no candidate could be measured")
        if anchored and preference and preference[0] in finalists:
            plan = msgspec.structs.replace(plan or stats.SequentialPlan(), anchor=finalists.index(preference[0]))
        head = self.head_to_head([candidates[i] for i in finalists], plan, deadline=deadline)
        sel = head.select([finalists.index(p) for p in preference if p in finalists])
        return BestOf(winner=finalists[sel.winner], finalists=tuple(finalists),
                      estimates=None if estimates is None else tuple(float(e) for e in estimates),
                      head=head, selection=sel)

    def check(self, device_of=None, devices=None, *, xml=None, rename: dict | None = None,
              execution: str = "sequential", tolerance: float = 0.0) -> dict:
        """Run a placement (``device_of``, indices into ``devices``; or the placed model file
        ``xml``) with HETERO against the original on the plain CPU plugin (the worker's
        :class:`~hdp.runtime.measure.protocol.Check`). Returns its verdict as plain data: ``passed``,
        ``error`` or ``max_error``/``where``, ``runs``, and ``device_errors`` when ``max_error``
        is above ``tolerance``; a crashed or hung worker is a failed check, not an exception."""
        if xml is not None:
            req = P.Check(xml=str(xml), rename=dict(rename or {}), execution=execution, tolerance=tolerance)
        else:
            dev, devices = self._placement(device_of, devices)
            req = P.Check(placement=P.Placement(devices=list(devices), device_of=dev.tobytes()),
                          rename=dict(rename or {}), execution=execution, tolerance=tolerance)
        try:
            reply = self._call(req)
        except WorkerFailure as e:
            return {"passed": False, "error": str(e)}
        if isinstance(reply, P.Failed):
            return {"passed": False, "error": reply.error}
        return msgspec.to_builtins(reply)

    def serve(self, device_of=None, devices=None, *, requests: int, batches: int = 10, per_batch: int = 0,
              unplaced_on: str | None = None, unplaced_config: dict | None = None) -> Served:
        """Throughput with ``requests`` inferences in flight (:class:`~hdp.runtime.measure.protocol.Serve`)
        of a placement, or with ``unplaced_on`` of the unplaced model on that device
        (``unplaced_config``: its compile options). ``per_batch`` inferences per window (0: the worker sizes windows of
        about a quarter second), ``batches`` windows after ``warmup`` rounds. Never cached; failures
        come back as ``error``."""
        if unplaced_on is not None:
            self._real(unplaced_on)
            req = P.Serve(unplaced_on=unplaced_on, unplaced_config=_text_config(unplaced_config), requests=requests,
                          batches=batches, per_batch=int(per_batch), warmup=self.warmup)
            return self._served(req, f"plain:{unplaced_on}")[0]
        req, what = self._serve_placement(device_of, devices, requests, batches, per_batch)
        return self._served(req, what)[0]

    def serve_beside(self, device_of, devices, plain_on: str, plain_config: dict | None = None, *, requests: int,
                     batches: int = 10, per_batch: int = 0, defaults: bool = False) -> tuple[Served, Served]:
        """:meth:`serve` of a placement and of ``plain_on``'s plain compile (``plain_config``) in one
        worker, their windows alternating (ABBA), so that both see the same host: (placed, plain).
        ``defaults``: the plain compile is the host's default one on device kind ``plain_on``
        (OpenVINO's own defaults with ``plain_config`` only), not the target's device."""
        if not defaults:
            self._real(plain_on)
        req, what = self._serve_placement(device_of, devices, requests, batches, per_batch, plain_on=plain_on,
                                          plain_config=_text_config(plain_config), plain_defaults=defaults)
        return self._served(req, what, f"{'default' if defaults else 'plain'}:{plain_on}")

    def _real(self, device: str) -> None:
        if self.target.device(device).kind != "real":
            raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot run here")

    def _serve_placement(self, device_of, devices, requests, batches, per_batch, **plain) -> tuple[P.Serve, str]:
        dev, devices = self._placement(device_of, devices)
        what = "HETERO:" + ",".join(d for k, d in enumerate(devices) if (dev == k).any())
        return (P.Serve(placement=P.Placement(devices=list(devices), device_of=dev.tobytes()), requests=requests,
                        batches=batches, per_batch=int(per_batch), warmup=self.warmup, **plain), what)

    def _served(self, req: P.Serve, what: str, plain_what: str | None = None) -> tuple[Served, ...]:
        """The worker's answer to ``req`` as :class:`Served` (and, with ``plain_what``, the plain
        compile served beside it); a failure is each one's ``error``."""
        base = dict(target=self.target.name, requests=int(req.requests), per_batch=int(req.per_batch))
        names = (what,) if plain_what is None else (what, plain_what)
        try:
            reply = self._call(req)
        except WorkerFailure as e:
            reply = P.Failed(error=str(e))
        if isinstance(reply, P.Failed):
            return tuple(Served(**base, what=w, error=f"{w}: {reply.error}") for w in names)
        load = HostLoad.of(reply.busy, reply.own, reply.wall, os.cpu_count() or 1)
        out = [Served(**{**base, "per_batch": reply.per_batch or req.per_batch}, what=what, rates=tuple(reply.rates),
                      compile_seconds=reply.compile_seconds, submodels=reply.submodels, pinning=reply.pinning,
                      load=load)]
        if plain_what is not None:
            out.append(Served(**{**base, "per_batch": reply.plain_per_batch}, what=plain_what,
                              rates=tuple(reply.plain_rates), compile_seconds=reply.plain_compile_seconds, load=load,
                              properties=dict(reply.plain_properties)))
        return tuple(out)

    def _run(self, req: P.Measure | P.Unplaced, what: str) -> Measurement:
        base = dict(what=what, target=self.target.name, runs=self.runs, warmup=self.warmup)
        try:
            reply = self._call(req)
        except WorkerFailure as e:
            return Measurement(**base, error=f"{what}: {e}")
        return _timed(reply, base, what)


# --------------------------------------------------------------------------- conveniences


def _text_config(config: dict | None) -> dict[str, str]:
    """Compile options as the worker protocol carries them (text values)."""
    return {k: str(v) for k, v in (config or {}).items()}


def measure_plain(source, target: Target | str, device: str, *, runs: int = 10, warmup: int = 3,
                  timeout: float = 120.0, cache: bool | str | os.PathLike = True) -> Measurement:
    """Time the unplaced model compiled directly on one device of the target."""
    with Measurer(source, target, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        return m.measure_unplaced(device)


def _timed(reply: P.Timed | P.Failed, base: dict, what: str) -> Measurement:
    """The Measurement of a worker's reply to Measure or Plain."""
    if isinstance(reply, P.Failed):
        return Measurement(**base, error=f"{what}: {reply.error}")
    return Measurement(**base, times=tuple(reply.times), compile_seconds=reply.compile_seconds,
                       submodels=reply.submodels)


def placed_device_of(xml: str | os.PathLike, target: Target | None = None):
    """(device_of, devices, target) of a placed model written by ``hdp compile``: the affinity of
    every op in the file's op order, and the target given or recorded in the file."""

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
                    warmup: int = 3, timeout: float = 120.0, unplaced_on: str | None = None,
                    cache: bool | str | os.PathLike = True, plan: stats.SequentialPlan | None = None) -> dict:
    """Measure a placed model; with ``unplaced_on``, head to head against the unplaced model
    compiled on that one device instead.

    Without ``unplaced_on``: ``{"placed": Measurement}`` (``runs`` runs, cached). With it:
    ``{"placed": Measurement, "plain": Measurement, "comparison": Comparison}`` from interleaved
    rounds in separated blocks (never cached; ``plan`` defaults to
    ``SequentialPlan(min_rounds=max(runs, 6))``); the comparison is the placement against the
    plain compile. ``unplaced_on="default"`` (or ``default:KIND``): against the host's default
    plain compile (:func:`~hdp.runtime.measure.measurement.default_plain`) on this host's first
    device kind (or KIND).
    """
    tgt = load_target(target) if isinstance(target, str) else target
    dev, devices, tgt = placed_device_of(xml, tgt)
    with Measurer(xml, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        if not unplaced_on:
            return {"placed": m.measure(dev, devices)}
        plan = plan or stats.SequentialPlan(min_rounds=max(runs, 6), max_rounds=max(runs, 1000))
        kind, _, on = unplaced_on.partition(":")
        ref = default_plain(on or host_kinds()[0]) if kind == "default" else unplaced(unplaced_on)
        h = m.head_to_head([ref, placed(dev, devices)], plan)
    out = {"placed": h.measurements[1], "plain": h.measurements[0]}
    if all(x.ok for x in h.measurements):
        out["comparison"] = h.compare(0, 1)
    return out

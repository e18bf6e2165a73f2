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

Successful measurements are cached as JSON under ``default_cache_dir()/"measure"`` keyed by the
model's digest, the placement (device name per op), the target, runs and warm-up, this host and
the OpenVINO version; failures are never cached.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

from hdp.errors import HdpError, InputError
from hdp.ir import serde
from hdp.ir.types import Module
from hdp.runtime.target import Target, load_target
from hdp.runtime.worker import FAULT_ENV, PARENT_ENV, decode_msg, write_msg

#: Bump when the meaning of a cached measurement changes.
MEASURE_VERSION = 1
#: Seconds a worker may take to start and read the model (the per-request timeout, if larger).
LOAD_TIMEOUT = 60.0

__all__ = ["MeasureError", "Measurement", "Measurer", "measure_plain", "evaluate_placed",
           "compare_with_plain", "FAULT_ENV"]


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

    def start(self) -> None:
        import hdp

        env = dict(os.environ if self.env is None else self.env)
        root = str(Path(hdp.__file__).resolve().parent.parent)  # the worker imports this same hdp
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
        env[PARENT_ENV] = str(os.getpid())
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "hdp.runtime.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0, env=env)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, req: dict, timeout: float) -> dict:
        """Send one request and wait up to ``timeout`` seconds; a dead or late worker raises
        _WorkerFailure with the reason (and is gone afterwards)."""
        if not self.alive:
            self.close()
            self.start()
        try:
            write_msg(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            raise _WorkerFailure(self._death("before the request")) from None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        need = 4
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                raise _WorkerFailure(f"timed out after {timeout:g} s; worker killed")
            chunk = os.read(fd, max(need - len(buf), 1 << 16))
            if not chunk:
                raise _WorkerFailure(self._death(f"during '{req.get('op')}'"))
            buf += chunk
            if need == 4 and len(buf) >= 4:
                need = 4 + int.from_bytes(buf[:4], "little")
        return decode_msg(bytes(buf[4:need]))

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
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


# --------------------------------------------------------------------------- cache


class MeasureCache:
    """Successful measurements as JSON entries ``<dir>/<key[:2]>/<key>.json`` of a
    :class:`hdp.cache.Store` (checksummed with their key; corrupt ones are measured again)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        from hdp.cache import Store, default_cache_dir, open_root

        self.dir = Path(directory) if directory else default_cache_dir() / "measure"
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
    try:
        ov_version = importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        ov_version = ""
    return [platform.node(), ov_version]


# --------------------------------------------------------------------------- sources


def _file_digest(xml: Path) -> str:
    from hdp.ir.openvino_frontend import file_digest

    return file_digest(xml)


class _Source(msgspec.Struct, frozen=True):
    xml: str
    shapes: str
    names: list[str] | None
    digest: str


def _source_of(source, tmpdir_factory) -> _Source:
    if isinstance(source, Module):
        from hdp.ir.openvino_frontend import checked_source

        xml, digest = checked_source(source)
        shapes = source.meta.get("input_shapes", "")
        return _Source(str(xml), shapes, [op.name for op in source.graph.ops], f"{digest}:{shapes}")
    if isinstance(source, (str, os.PathLike)):
        xml = Path(source)
        if not xml.is_file():
            raise InputError(f"{xml}: no such file")
        return _Source(str(xml.resolve()), "", None, _file_digest(xml))
    if hasattr(source, "get_ordered_ops"):  # an ov.Model: saved for the worker to read
        import openvino as ov

        from hdp.ir.openvino_frontend import unique_names

        xml = Path(tmpdir_factory()) / "model.xml"
        ov.save_model(source, str(xml), compress_to_fp16=False)
        names, _ = unique_names(source.get_ordered_ops())
        return _Source(str(xml), "", names, _file_digest(xml))
    raise TypeError(f"cannot measure a {type(source).__name__}: give a Module, an .xml path or an ov.Model")


# --------------------------------------------------------------------------- the measurer


class Measurer:
    """Measures placements of one model on one target, reusing one worker process.

    ``source`` is a lowered :class:`~hdp.ir.types.Module` (its source model is read), an OpenVINO
    ``.xml`` (plain or placed), or an ``ov.Model``. ``target`` is a Target or a target spec.
    ``timeout`` bounds each compile + warm-up + runs (starting the worker and reading the model
    may take up to ``max(timeout, LOAD_TIMEOUT)``). ``cache``: True for the default directory, a
    path, or False.
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
        self.cache = None if cache is False else MeasureCache(None if cache is True else cache)
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

    def _ensure_loaded(self) -> dict:
        """Start the worker and load the model if needed; raises _WorkerFailure or InputError."""
        if self._worker is None:
            self._worker = WorkerProcess()
        if self._loaded is not None and self._worker.alive:
            return self._loaded
        self._loaded = None
        load = {"op": "load", "xml": self.source.xml, "shapes": self.source.shapes,
                "names": self.source.names, "target": msgspec.to_builtins(self.target)}
        reply = self._worker.call(load, max(self.timeout, LOAD_TIMEOUT))
        if not reply["ok"]:
            self._worker.close()
            if reply.get("input"):
                raise InputError(reply["error"])
            raise _WorkerFailure(f"cannot load the model: {reply['error']}")
        self._loaded = reply
        return reply

    def _call(self, req: dict) -> dict:
        """The worker's reply to ``req``; raises _WorkerFailure (crash, timeout) or InputError."""
        self._ensure_loaded()
        reply = self._worker.call(req, self.timeout)
        if not reply["ok"] and reply.get("input"):
            raise InputError(reply["error"])
        return reply

    def loaded(self) -> dict:
        """The worker's view of the model: ``n_ops``, ``names`` and each op's recorded affinity."""
        try:
            return self._ensure_loaded()
        except _WorkerFailure as e:
            raise MeasureError(f"{self.source.xml}: {e}") from None

    def close(self) -> None:
        """Stop the worker and remove temporary files."""
        if self._worker is not None:
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
        if self.source.names is not None and dev.shape[0] != len(self.source.names):
            raise InputError(f"placement has {dev.shape[0]} ops, the model has {len(self.source.names)}")
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
        d = self.target.device(device)
        if d.kind != "real":
            raise InputError(f"device '{device}' of target '{self.target.name}' is modeled; it cannot be queried")
        try:
            reply = self._call({"op": "query", "device": device})
        except _WorkerFailure as e:
            raise MeasureError(f"query_model on {device}: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"query_model on {device}: {reply['error']}")
        return [bool(x) for x in reply["supported"]]

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

    def profile(self, device: str, runs: int | None = None, warmup: int | None = None) -> dict:
        """Compile the unplaced model on ``device`` with PERF_COUNT and return the worker's raw
        reply (``times`` and the runtime graph ``nodes``, see :mod:`hdp.runtime.worker`).
        Raises MeasureError on failure; never cached (the profile pass is)."""
        self.target.device(device)
        req = {"op": "plain", "device": device, "perf": True, "runs": runs or self.runs,
               "warmup": self.warmup if warmup is None else warmup}
        try:
            reply = self._call(req)
        except _WorkerFailure as e:
            raise MeasureError(f"profiling on {device}: {e}") from None
        if not reply["ok"]:
            raise MeasureError(f"profiling on {device}: {reply['error']}")
        return reply

    def _run(self, req: dict, what: str) -> Measurement:
        base = dict(what=what, target=self.target.name, runs=self.runs, warmup=self.warmup)
        try:
            reply = self._call(req)
        except _WorkerFailure as e:
            return Measurement(**base, error=f"{what}: {e}")
        if not reply["ok"]:
            return Measurement(**base, error=f"{what}: {reply['error']}")
        return Measurement(**base, times=tuple(reply["times"]), compile_seconds=reply["compile_seconds"])


# --------------------------------------------------------------------------- conveniences


def measure_plain(source, target: Target | str, device: str, *, runs: int = 10, warmup: int = 3,
                  timeout: float = 120.0, cache: bool | str | os.PathLike = True) -> Measurement:
    """Time the unplaced model compiled directly on one device of the target."""
    with Measurer(source, target, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        return m.plain(device)


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
                    cache: bool | str | os.PathLike = True) -> dict[str, Measurement]:
    """Measure a placed model (and, with ``plain``, the same model on one device).

    Returns ``{"placed": Measurement, "plain": Measurement}`` (``plain`` only when asked).
    """
    tgt = load_target(target) if isinstance(target, str) else target
    dev, devices, tgt = placed_device_of(xml, tgt)
    with Measurer(xml, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        out = {"placed": m.measure(dev, devices)}
        if plain:
            out["plain"] = m.plain(plain)
    return out


def compare_with_plain(module: Module, target: Target | str, *, runs: int = 10, warmup: int = 3,
                       timeout: float = 120.0, cache: bool | str | os.PathLike = True) -> str:
    """One line saying whether ``module.placement`` beats the unplaced model compiled on each real
    device of the target (measured). For ``hdp compile`` to print after placing."""
    tgt = load_target(target) if isinstance(target, str) else target
    pl = module.placement
    if pl is None:
        raise InputError("the module has no placement to compare")
    real = [d.name for d in tgt.devices if d.kind == "real"]
    used = {pl.devices[int(k)] for k in np.unique(pl.device_of.numpy())}
    modeled = sorted(d for d in used if tgt.device(d).kind != "real")
    if modeled or not real:
        return (f"not measured: target '{tgt.name}' has modeled devices "
                f"({', '.join(modeled or [d.name for d in tgt.devices])}); compare with the simulator")
    with Measurer(module, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=cache) as m:
        placed = m.measure(pl.device_of.numpy(), pl.devices)
        plains = {d: m.plain(d) for d in real}
    if not placed.ok:
        return f"the placement could not be measured: {placed.error}"
    ok = {d: p for d, p in plains.items() if p.ok}
    if not ok:
        return f"placement {placed.median * 1e3:.3f} ms; no plain compile could be measured"
    best = min(ok, key=lambda d: ok[d].median)
    b, p = ok[best].median, placed.median
    others = ", ".join(f"{d} {x.median * 1e3:.3f} ms" for d, x in ok.items())
    if p < b:
        return (f"placement {p * 1e3:.3f} ms beats the best plain compile ({best}) by {(1 - p / b) * 100:.1f}% "
                f"(plain: {others}; medians of {runs} runs)")
    return (f"placement {p * 1e3:.3f} ms does not beat plain {best} ({b * 1e3:.3f} ms; {(p / b - 1) * 100:.1f}% "
            f"slower; plain: {others}; medians of {runs} runs): consider --method single:{best}")

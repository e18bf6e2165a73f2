"""Running a serving plan in one process (``hdp serve plan.json``, ``hdp evaluate plan.json``).

A plan (:class:`hdp.ir.plan.ServingPlan`) runs on what OpenVINO offers where it expresses it, and on
hdp's own lanes where it does not:

- a stage's replica is its compiled blob, imported with ``core.import_model`` on its device
  (:class:`ReplicaRunner`, the piece a runtime across hosts reuses: load one stage's blob, run
  requests with ids); ``S`` streams are the device's own (``NUM_STREAMS=S`` at import) fed by
  ``S`` lanes;
- a *lane* is a thread with its own infer request calling the blocking ``infer()``: OpenVINO
  releases the GIL, and a one-thread CPU compile runs on the calling thread, so a lane pinned to a
  core (a device of ``ENABLE_CPU_PINNING=YES`` and ``INFERENCE_NUM_THREADS=n``:
  :func:`hdp.runtime.placed.executor.lane_cores`) runs its device there, its compile's own pinning
  off (two pinned one-thread compiles of one process land on one core: measured, issue 30);
- every stage has one queue its replicas' lanes take requests from (work-conserving: a request goes
  to the first lane free, whichever replica it belongs to), a request goes through the stages in
  order, each stage's outputs copied out of its infer request before the lane takes the next;
  at most ``N`` requests are in the plan at once (:meth:`PlanRunner.submit` waits), so no queue
  between stages ever holds more than ``N``;
- a pipeline plan (``placed.xml``) runs under HETERO, ``N`` lanes each with a HETERO infer request
  (HETERO's stages then overlap across requests); its CPU devices' pinning is turned off as the
  measuring worker does for a served placement.

Whole-model replicas could be left to ``AUTO:<devices>`` with ``PERFORMANCE_HINT=CUMULATIVE_THROUGHPUT``,
but AUTO may run fewer devices than asked (``AUTO:CPU,CPU_B`` ran on CPU_B alone, issue 30):
:func:`auto_devices` reports what ``EXECUTION_DEVICES`` says AUTO runs, and the plan's own lanes
drive the replicas from their blobs whatever it says.

Serving a plan, measured (windows, latencies, the plain compile beside it, ``hdp serve``) is
:mod:`hdp.runtime.serve.plan_serve`'s; its windows are :func:`plan_window`'s. A window (:func:`plan_window`) is timed as the measuring worker times a served placement
(:meth:`hdp.runtime.measure.worker.Worker._serving`): ``per_batch`` completions with ``N`` in
flight, timed between completions, with the latencies' p50 and p99, each stage's utilisation and
the process's CPU seconds per wall second. The first requests of a plan run on the seeded inputs it
recorded (``check.npz``) and are compared with the unsplit model's outputs recorded beside them
(:func:`check_outputs`).
"""

from __future__ import annotations

import math
import os
import queue
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hdp.base.errors import InputError
from hdp.ir.plan import PLAN_FILE, PlanPort, ServingPlan, plan_file, read_plan
from hdp.runtime.measure.worker import ov_message
from hdp.runtime.placed.executor import lane_cores
from hdp.runtime.placed.model import compile_placed, read_placed
from hdp.runtime.serve.blob import blob_digest
from hdp.target.devices import device_status, make_core
from hdp.target.target import Device, Target

#: Seeded requests recorded beside a plan with the unsplit model's outputs (inputs and outputs).
CHECK_FILE = "check.npz"
#: Seconds one window lasts about, when its size is judged by the warm-up.
WINDOW_SECONDS = 0.25


def plan_target(plan: ServingPlan) -> Target:
    """The plan's devices as a Target (for :func:`hdp.target.devices.make_core`)."""
    return Target(name=plan.target or "plan", devices=[
        Device(name=d.name, kind="real", plugin=d.plugin if d.alias else "", alias=d.alias, config=dict(d.config))
        for d in plan.devices])


def check_host(plan: ServingPlan, source: str, available: list[str]) -> None:
    """InputError naming the field when a replica's device is not on this host."""
    tgt = plan_target(plan)
    for s, st in enumerate(plan.stages):
        for j, r in enumerate(st.replicas):
            if r.host is not None:
                raise InputError(f"{source}: stages[{s}].replicas[{j}].host: '{r.host}': this runtime serves one "
                                 f"host's plans (a replica on another host needs a runtime across hosts)")
            if device_status(tgt.device(r.device), available) != "present":
                raise InputError(f"{source}: stages[{s}].replicas[{j}].device: '{r.device}' is not present on this "
                                 f"host (OpenVINO sees: {', '.join(available) or 'nothing'})")


def check_blobs(plan: ServingPlan, directory: Path, ov_version: str) -> None:
    """Every blob is there, of the size and digest recorded, from this OpenVINO version;
    InputError naming the file otherwise."""
    for s, st in enumerate(plan.stages):
        for b in st.blobs:
            f = directory / b.file
            if not f.is_file():
                raise InputError(f"{f}: missing (stages[{s}].blobs names it); write the plan again")
            size = f.stat().st_size
            if size != b.bytes:
                raise InputError(f"{f}: {size} bytes, {PLAN_FILE} records {b.bytes}: "
                                 f"{'truncated' if size < b.bytes else 'another blob'}; write the plan again")
            if blob_digest(f) != b.digest:
                raise InputError(f"{f}: its contents are not the ones {PLAN_FILE} records; write the plan again")
            if plan.openvino and plan.openvino != ov_version:
                raise InputError(f"{f}: compiled by OpenVINO {plan.openvino}, this host runs {ov_version}: a blob "
                                 f"imports only into the version that wrote it; write the plan again here")


def replica_config(target: Target, device: str, streams: int) -> dict[str, str]:
    """Import options of one replica: its streams, and a CPU device's own pinning and reservation
    off when its lanes pin it (see the module docstring)."""
    d = target.device(device)
    cfg: dict[str, str] = {}
    if d.plugin_name.startswith("CPU"):
        cfg["NUM_STREAMS"] = str(streams)
        if str(d.config.get("ENABLE_CPU_PINNING", "")).upper() == "YES":
            cfg.update(ENABLE_CPU_PINNING="NO", ENABLE_CPU_RESERVATION="NO")
    elif streams > 1:
        cfg["NUM_STREAMS"] = str(streams)
    return cfg


# --------------------------------------------------------------------------- the runtime


class Job:
    """One request going through the plan: its id, inputs, the stage outputs made so far."""

    __slots__ = ("rid", "inputs", "values", "t0", "t1", "outputs", "error", "keep")

    def __init__(self, rid: int, inputs: list, keep: bool = False):
        self.rid = rid
        self.inputs = inputs
        self.values: dict[tuple[int, int], np.ndarray] = {}
        self.t0 = time.perf_counter()
        self.t1 = 0.0
        self.outputs: list | None = None
        self.error: BaseException | None = None
        self.keep = keep


class ReplicaRunner:
    """One replica of one stage: a compiled model (an imported blob, or a HETERO compile for a
    pipeline) on ``device`` with ``streams`` lanes, each a thread with its own infer request
    taking :class:`Job` s from ``take`` and handing them to ``done`` (see the module docstring)."""

    def __init__(self, compiled, device: str, streams: int, cores: list[int] | None = None, name: str = ""):
        self.compiled = compiled
        self.device = device
        self.streams = int(streams)
        self.cores = cores
        self.name = name or device
        self.busy = np.zeros(self.streams)  # seconds each lane spent in infer()
        self._threads: list[threading.Thread] = []
        self.requests = [compiled.create_infer_request() for _ in range(self.streams)]

    def start(self, take, done, ports: list[PlanPort], n_out: int, stage: int) -> None:
        for k in range(self.streams):
            t = threading.Thread(target=self._lane, args=(k, take, done, ports, n_out, stage),
                                 name=f"hdp-plan-{self.name}-{k}", daemon=True)
            t.start()
            self._threads.append(t)

    def _lane(self, k, take, done, ports, n_out, stage) -> None:
        import openvino as ov

        if self.cores:
            os.sched_setaffinity(threading.get_native_id(), self.cores)
        req = self.requests[k]
        while True:
            job = take()
            if job is None:
                return
            try:
                if job.error is None:
                    for i, p in enumerate(ports):
                        a = job.inputs[p.index] if p.source == "input" else job.values[(p.index, p.output)]
                        req.set_input_tensor(i, ov.Tensor(a, shared_memory=True))
                    t0 = time.perf_counter()
                    req.infer()
                    self.busy[k] += time.perf_counter() - t0
                    for j in range(n_out):
                        job.values[(stage, j)] = np.array(req.get_output_tensor(j).data, copy=True)
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the request
                job.error = e
            done(job)

    def join(self, timeout: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout)


class PlanRunner:
    """A plan's stages, each with its replicas, running requests (see the module docstring).
    ``stages``: per stage ``(replicas, input ports, number of outputs)``; ``outputs``: where each
    model output comes from; ``requests``: at most this many in the plan at once."""

    def __init__(self, stages: list[tuple[list[ReplicaRunner], list[PlanPort], int]], outputs: list[PlanPort],
                 requests: int):
        self.stages = stages
        self.outputs = outputs
        self.requests = int(requests)
        self.queues = [queue.SimpleQueue() for _ in stages]
        self.slots = threading.Semaphore(self.requests)
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self._next_id = 0
        self._started = False

    def start(self) -> "PlanRunner":
        if not self._started:
            for s, (reps, ports, n_out) in enumerate(self.stages):
                for r in reps:
                    r.start(self.queues[s].get, lambda job, s=s: self._advance(job, s), ports, n_out, s)
            self._started = True
        return self

    def _advance(self, job: Job, s: int) -> None:
        if s + 1 < len(self.stages) and job.error is None:
            self.queues[s + 1].put(job)
            return
        job.t1 = time.perf_counter()
        if job.error is None and job.keep:
            job.outputs = [job.inputs[p.index] if p.source == "input" else job.values[(p.index, p.output)]
                           for p in self.outputs]
        job.values = {}
        self.slots.release()
        self.finished.put(job)

    def submit(self, inputs: list, keep: bool = False) -> int:
        """Start one request (waits while ``requests`` are in the plan); returns its id. Its
        :class:`Job` comes out of :attr:`finished`, with ``outputs`` when ``keep``."""
        self.slots.acquire()
        rid = self._next_id
        self._next_id += 1
        self.queues[0].put(Job(rid, inputs, keep))
        return rid

    def run(self, inputs: list) -> list[np.ndarray]:
        """One request alone, its outputs (nothing else in flight)."""
        self.start()
        self.submit(inputs, keep=True)
        job = self.finished.get()
        if job.error is not None:
            raise job.error
        return job.outputs

    def busy(self) -> list[float]:
        """Seconds every stage's lanes spent in ``infer()`` so far, summed per stage."""
        return [float(sum(r.busy.sum() for r in reps)) for reps, _, _ in self.stages]

    def lanes(self) -> list[int]:
        return [sum(r.streams for r in reps) for reps, _, _ in self.stages]

    def close(self) -> None:
        if self._started:
            for s, (reps, _, _) in enumerate(self.stages):
                for r in reps:
                    for _ in range(r.streams):
                        self.queues[s].put(None)
            for reps, _, _ in self.stages:
                for r in reps:
                    r.join()
            self._started = False


@dataclass
class Window:
    """One window of a served plan: requests/s between completions, latencies, busy shares."""

    rate: float
    p50: float
    p99: float
    utilisation: list[float]  # per stage: its lanes' share of the window in infer()
    cpu: float  # CPU seconds of this process per wall second
    errors: int = 0


def plan_window(runner: PlanRunner, inputs: list, per_batch: int) -> Window:
    """``per_batch + 2 N`` requests with ``N`` in flight; the ``per_batch`` completions after the
    first ``N`` timed between completions (as :func:`hdp.runtime.measure.worker.steady_window`)."""
    n = runner.requests
    total = per_batch + 2 * n
    busy0 = runner.busy()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    done: list[Job] = []
    submitted = 0

    def feeder():
        nonlocal submitted
        for _ in range(total):
            runner.submit(inputs)
            submitted += 1

    t = threading.Thread(target=feeder, name="hdp-plan-feeder", daemon=True)
    t.start()
    for _ in range(total):
        done.append(runner.finished.get())
    t.join()
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    busy1 = runner.busy()
    errors = [j for j in done if j.error is not None]
    stamps = sorted(j.t1 for j in done)[n:n + per_batch + 1]
    rate = per_batch / max(stamps[-1] - stamps[0], 1e-12)
    lat = np.array([j.t1 - j.t0 for j in sorted(done, key=lambda j: j.t1)[n:n + per_batch]])
    util = [(b1 - b0) / (wall * lanes) for b0, b1, lanes in zip(busy0, busy1, runner.lanes())]
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / max(wall, 1e-12)
    if errors:
        raise errors[0].error
    return Window(rate, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), util, cpu)


# --------------------------------------------------------------------------- loading a plan


@dataclass
class LoadedPlan:
    """A plan read, checked and imported: its runner (not started) and what loading took."""

    plan: ServingPlan
    directory: Path
    runner: PlanRunner
    seconds: float
    core: object
    notes: list[str] = field(default_factory=list)
    check_inputs: list | None = None  # per recorded request, its inputs
    check_outputs: list | None = None  # ... and the unsplit model's outputs


def load_plan(path, requests: int | None = None) -> LoadedPlan:
    """Read ``path`` (``plan.json`` or its directory), check it against this host (devices, blobs,
    OpenVINO version) and import every replica's blob (a pipeline: compile its placed model under
    HETERO). ``requests``: in flight at most (default: the plan's). InputError naming the field or
    file for a user's mistake."""
    import openvino as ov

    f = plan_file(path)
    plan = read_plan(f)
    directory = f.parent
    n = plan.requests if requests is None else int(requests)
    if n < 1:
        raise InputError(f"--requests {n}: must be at least 1")
    core0 = ov.Core()
    check_host(plan, str(f), list(core0.available_devices))
    tgt = plan_target(plan)
    notes: list[str] = []
    t0 = time.perf_counter()
    if plan.placed:
        xml = directory / plan.placed
        if not xml.is_file():
            raise InputError(f"{xml}: missing ({PLAN_FILE} names it as its placed model)")
        pm = read_placed(xml)
        used = [d for d in pm.devices if d in pm.used]
        core = make_core(tgt, used)
        pinned = [d for d in used if tgt.device(d).plugin_name.startswith("CPU")
                  and str(tgt.device(d).config.get("ENABLE_CPU_PINNING", "")).upper() == "YES"]
        for d in pinned:
            core.set_property(d, {"ENABLE_CPU_PINNING": "NO"})
        try:
            compiled = compile_placed(xml, tgt, core=core, placed=pm, devices=used)
        except RuntimeError as e:
            raise InputError(f"{xml}: does not compile under HETERO here: {ov_message(e)}") from None
        rep = ReplicaRunner(compiled, "HETERO:" + ",".join(used), n, None, "hetero")
        ports = [PlanPort(source="input", index=i) for i in range(len(compiled.inputs))]
        runner = PlanRunner([([rep], ports, len(compiled.outputs))],
                            [PlanPort(source="stage", index=0, output=j) for j in range(len(compiled.outputs))], n)
        notes.append(f"pipeline under HETERO ({', '.join(used)}), {n} infer requests")
    else:
        check_blobs(plan, directory, ov.get_version())
        devices = plan.device_names()
        core = make_core(tgt, devices)
        cores = lane_cores(tgt, devices)
        stages = []
        for s, st in enumerate(plan.stages):
            reps = []
            for r in st.replicas:
                b = st.blob(r.device)
                data = (directory / b.file).read_bytes()
                try:
                    compiled = core.import_model(data, r.device, replica_config(tgt, r.device, r.streams))
                except RuntimeError as e:
                    raise InputError(f"{directory / b.file}: does not import on {r.device}: {ov_message(e)}") from None
                reps.append(ReplicaRunner(compiled, r.device, r.streams, cores.get(r.device), f"s{s}-{r.device}"))
            stages.append((reps, list(st.inputs), len(st.outputs)))
        runner = PlanRunner(stages, list(plan.outputs), n)
        if cores:
            notes.append("lanes pinned: " + ", ".join(f"{d} core {'+'.join(map(str, c))}" for d, c in cores.items()))
    loaded = LoadedPlan(plan, directory, runner, time.perf_counter() - t0, core, notes)
    loaded.check_inputs, loaded.check_outputs = read_check(directory)
    return loaded


def read_check(directory: Path) -> tuple[list | None, list | None]:
    """The seeded requests recorded beside a plan (:data:`CHECK_FILE`): per request its inputs, and
    the unsplit model's outputs; (None, None) when the plan has none."""
    chk = Path(directory) / CHECK_FILE
    if not chk.is_file():
        return None, None
    with np.load(chk, allow_pickle=False) as z:
        k = int(z["requests"])
        ins = [[z[f"in{r}_{i}"] for i in range(int(z["inputs"]))] for r in range(k)]
        outs = [[z[f"out{r}_{j}"] for j in range(int(z["outputs"]))] for r in range(k)]
    return ins, outs


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """Relative L2 error of ``a`` against the reference ``b`` (as hdp's check measures it)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    den = float(np.linalg.norm(b))
    num = float(np.linalg.norm(a - b))
    return num / den if den > 0 else num


def check_outputs(loaded: LoadedPlan, tolerance: float) -> tuple[bool, float, int]:
    """(passed, largest relative error, requests checked): the recorded seeded requests run
    through the plan, several in flight at once, each compared with the unsplit model's outputs."""
    if loaded.check_inputs is None:
        return True, 0.0, 0
    runner = loaded.runner.start()
    ids = {}
    for r, inp in enumerate(loaded.check_inputs):
        ids[runner.submit(inp, keep=True)] = r
    worst = 0.0
    for _ in ids:
        job = runner.finished.get()
        if job.error is not None:
            raise InputError(f"{loaded.directory}: request {job.rid} failed: {ov_message(job.error)}")
        for got, want in zip(job.outputs, loaded.check_outputs[ids[job.rid]]):
            worst = max(worst, relative_error(got, want))
    return worst <= tolerance, worst, len(ids)

"""Serving a plan on Ray (``hdp serve PLAN_DIR --ray auto|ADDRESS``): one actor per stage replica, on
the host the plan names.

The pieces, each the plan's in-process runtime (:mod:`hdp.runtime.serve.plan_run`) spread over Ray:

- :func:`actor_layout` turns a :class:`~hdp.ir.plan.ServingPlan` into one :class:`ActorSpec` per stage
  replica: its device, streams, and the Ray custom resource that pins it to its host
  (``hdp_host_<name>``; a node of host ``a`` is started with ``ray start --resources
  '{"hdp_host_a": 1000}'``); a replica of host None runs on the driver's node;
- :class:`StageActor` holds one stage's compiled blob, imported with ``core.import_model`` on its
  device as :func:`~hdp.runtime.serve.plan_run.load_plan` does (the plan's devices registered by
  :func:`~hdp.target.devices.make_core`, an aliased device from its plugin library; the blob's
  digest checked on the bytes it received), ``streams`` infer requests and as many concurrent calls;
  its :meth:`StageActor.run` takes a request id, the request's inputs and the messages of the stages
  it reads, and returns its own message: the id, its outputs, and the seconds every stage so far
  spent inferring (utilisation) and which replica ran it (faults);
- :class:`RayRunner` wires the actors. When every actor landed on one node and every stage is one
  replica of one stream, by a Compiled Graph (``ray.dag.InputNode``, ``actor.run.bind``,
  ``experimental_compile`` with ``requests`` executions in flight): measured here (ray 2.60, 2
  cores), 555 us per request against 2,580 us by ordinary calls. Otherwise by ordinary actor calls,
  each stage's call given the object refs of the stages it reads (Ray moves the tensors from actor
  to actor, not through the driver): a Compiled Graph routes every request through the same
  actors (no replicas), and across two nodes (network namespaces joined by a veth) its first
  request timed out ("Timed out acquiring the read lock") where actor calls worked. The output
  says which wiring ran and why.
- Requests carry ids. A replica whose actor dies (``ray.kill``, its node gone) fails the requests
  it held; the runner names it, drops it, and submits each of those requests again from the stage
  that failed to the remaining replicas of that stage (the earlier stages' outputs are kept), so no
  request is lost or answered twice; when a stage has no replica left it stops with one line
  (:class:`RayServeError`). A Compiled Graph has one replica per stage: a dead actor there stops it.

:func:`serve_on_ray` is the measured run (windows as :func:`~hdp.runtime.serve.plan_run.plan_window`
times them: ``per_batch`` completions with ``requests`` in flight, timed between completions; the
first requests are the seeded ones recorded beside the plan, checked against the unsplit model's
outputs), returning :class:`RayServed`. ``--ray auto`` starts a local Ray of its own
(:func:`start_ray`: ``num_cpus`` of this host, no dashboard, its temporary directory a fresh one
and its auth token in the environment, not ``~/.ray``) and shuts it down after; an ADDRESS joins a
running cluster (its token where Ray looks: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
``~/.ray/auth_token``). ``python -m hdp.runtime.serve.ray_run`` serves in a process of its own
(:func:`serve_ray_in_subprocess`): Ray ends a driver whose head node died, and the caller still
prints one line; the temporary directory is removed whatever happened. Ray is imported lazily
(:func:`import_ray`): without it ``--ray`` says in one line how to install it.

The module is over 600 lines because it was written in one piece with its fault drills (the
layout, the actor, the runner that resubmits past a dead replica, the session and the measured run
are driven together by the slow tests against one local Ray); its sections are the lines along
which it is to be split, the runner (about 320 lines) first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import queue
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.plan import PLAN_FILE, ServingPlan, encode_plan, plan_file, read_plan
from hdp.runtime.measure.protocol import PARENT_ENV
from hdp.runtime.measure.worker import die_with_parent, ov_message
from hdp.runtime.serve.plan_run import (
    WINDOW_SECONDS,
    check_blobs,
    plan_target,
    read_check,
    relative_error,
    replica_config,
)
from hdp.runtime.serve.plan_serve import PlanServed, served_lines
from hdp.target.devices import device_status, make_core

RAY_MISSING = "--ray needs Ray: pip install 'hdp[ray]'"
#: Seconds an actor may wait for a node with its host's resource and load its blob.
PLACEMENT_TIMEOUT = 120.0
#: Seconds one request may take before the run is declared stuck.
REQUEST_TIMEOUT = 120.0
#: The prefix of the Ray custom resource that pins a replica to its host.
HOST_RESOURCE = "hdp_host_"
#: Inputs larger than this go to the object store once per request (smaller ones travel in each call).
INLINE_BYTES = 100 * 1024
#: What one actor asks of its host's resource (a node offers 1000: room for many replicas).
HOST_SHARE = 0.001
#: How the actors may be wired: a Compiled Graph where it works (auto), never, or also across nodes
#: (always: for checking whether it works there yet; a plan with replicas still gets actor calls).
WIRINGS = ("auto", "never", "always")
COMPILED = "compiled graph"
CALLS = "actor calls"


class RayServeError(Exception):
    """Serving on Ray stopped: one line saying why (a stage left without replicas, a request failing)."""


def import_ray():
    """The ``ray`` module, or InputError :data:`RAY_MISSING`."""
    try:
        import ray  # lazy: a heavy third party (a cluster runtime, a second to import), only for --ray
    except ImportError:
        raise InputError(RAY_MISSING) from None
    return ray


def ray_available() -> bool:
    """Whether Ray can be imported, without importing it (the command line checks ``--ray`` with it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def host_resource(host: str) -> str:
    """The Ray custom resource of host ``host``: ``hdp_host_<host>``."""
    return HOST_RESOURCE + host


@dataclass(frozen=True)
class ActorSpec:
    """One replica of one stage as an actor: its device and streams, its host (None: the driver's
    node) and the Ray resources that pin it there."""

    stage: int
    replica: int
    device: str
    streams: int
    host: str | None
    resources: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"stage {self.stage} replica {self.replica} ({self.device}" + (f" on {self.host})" if self.host
                                                                             else ")")


def actor_layout(plan: ServingPlan) -> list[ActorSpec]:
    """One :class:`ActorSpec` per stage replica, stage by stage (see the module docstring).
    InputError for a pipeline plan written as a placed model (HETERO runs it in one process)."""
    if plan.placed:
        raise InputError(f"{PLAN_FILE}: placed: a pipeline written as a placed model runs under HETERO in one "
                         f"process; serve it without --ray (or write it with a blob per stage)")
    return [ActorSpec(stage=s, replica=j, device=r.device, streams=r.streams, host=r.host,
                      resources={host_resource(r.host): HOST_SHARE} if r.host is not None else {})
            for s, st in enumerate(plan.stages) for j, r in enumerate(st.replicas)]


def producers(plan: ServingPlan, s: int) -> list[int]:
    """The earlier stages stage ``s`` reads, in order (the messages its ``run`` is given)."""
    return sorted({p.index for p in plan.stages[s].inputs if p.source == "stage"})


def driver_stages(plan: ServingPlan) -> list[int]:
    """The stages whose messages come back to the driver: those the model's outputs read, and any
    stage no later stage reads."""
    read = {p.index for st in plan.stages for p in st.inputs if p.source == "stage"}
    out = {p.index for p in plan.outputs if p.source == "stage"}
    return sorted(out | (set(range(len(plan.stages))) - read))


def compiled_graph_refusal(plan: ServingPlan, nodes: list[str]) -> str:
    """Why a Compiled Graph does not wire this plan ('' when it does): actors on more than one
    node, a stage with replicas or streams."""
    if len(set(nodes)) > 1:
        return (f"actors on {len(set(nodes))} nodes (a Compiled Graph across nodes timed out on its first request "
                f"here, ray 2.60)")
    for s, st in enumerate(plan.stages):
        if len(st.replicas) > 1 or st.replicas[0].streams > 1:
            return (f"stage {s} has {len(st.replicas)} replicas, {sum(r.streams for r in st.replicas)} streams (a "
                    f"Compiled Graph sends every request through the same actors, one at a time each)")
    return ""


# --------------------------------------------------------------------------- the actor


class StageActor:
    """One stage replica (see the module docstring); made a Ray actor by :class:`RayRunner`."""

    def __init__(self):
        self.compiled = None
        self.free: queue.SimpleQueue = queue.SimpleQueue()

    def load(self, plan_json: bytes, stage: int, replica: int, blob: bytes, host: str | None) -> dict:
        """Import this replica's blob; ``{"error": one line}`` or where it runs and what it took."""
        import openvino as ov  # lazy: the actor's process, not the driver, runs OpenVINO
        import ray  # lazy: only inside a Ray worker

        t0 = time.perf_counter()
        ctx = ray.get_runtime_context()
        where = f"host '{host}'" if host is not None else "the driver's node"
        where += f" (node {ray.util.get_node_ip_address()})"
        plan = msgspec.json.decode(plan_json, type=ServingPlan)
        st = plan.stages[stage]
        r = st.replicas[replica]
        b = st.blob(r.device)
        if hashlib.blake2b(blob, digest_size=16).hexdigest() != b.digest:
            return {"error": f"{b.file}: the bytes {where} received are not the ones {PLAN_FILE} records"}
        tgt = plan_target(plan)
        available = list(ov.Core().available_devices)
        if device_status(tgt.device(r.device), available) != "present":
            return {"error": f"{where} has no device '{r.device}' (stages[{stage}].replicas[{replica}]; OpenVINO "
                             f"there sees: {', '.join(available) or 'nothing'})"}
        try:
            core = make_core(tgt, [r.device])
            self.compiled = core.import_model(blob, r.device, replica_config(tgt, r.device, r.streams))
        except (RuntimeError, InputError) as e:
            return {"error": f"{b.file}: does not import on {r.device} at {where}: {ov_message(e)}"}
        for _ in range(r.streams):
            self.free.put(self.compiled.create_infer_request())
        self.stage, self.replica, self.ports = stage, replica, list(st.inputs)
        self.producers = producers(plan, stage)
        self.n_out = len(st.outputs)
        self.label = f"{stage}.{replica}"
        return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid(),
                "seconds": time.perf_counter() - t0}

    def run(self, rid: int, inputs: list, *upstream: dict) -> dict:
        """Run request ``rid``: its inputs, the messages of :func:`producers`; its message back."""
        import openvino as ov  # lazy: see load

        req = self.free.get()
        try:
            for i, p in enumerate(self.ports):
                a = inputs[p.index] if p.source == "input" else upstream[self.producers.index(p.index)]["out"][p.output]
                # Ray hands over read-only views of its object store: those are copied into the request
                a = np.ascontiguousarray(a)
                req.set_input_tensor(i, ov.Tensor(a, shared_memory=bool(a.flags.writeable)))
            t0 = time.perf_counter()
            req.infer()
            busy = time.perf_counter() - t0
            outs = [np.array(req.get_output_tensor(j).data, copy=True) for j in range(self.n_out)]
        finally:
            self.free.put(req)
        spent: dict = {}
        by: dict = {}
        for m in upstream:
            spent.update(m["busy"])
            by.update(m["by"])
        spent[self.stage] = busy
        by[self.stage] = self.label
        return {"rid": rid, "out": outs, "busy": spent, "by": by}

    def ping(self) -> int:
        return os.getpid()


# --------------------------------------------------------------------------- the runner


@dataclass
class Done:
    """A request answered: its id, the model's outputs (when kept), the replica of each stage that
    ran it (``"stage.replica"``), when it was submitted and answered."""

    rid: int
    outputs: list | None
    by: dict
    t0: float
    t1: float
    busy: dict


@dataclass
class _Pending:
    rid: int
    inputs: object  # the inputs list, or (actor calls, large inputs) an object ref of it
    keep: bool
    t0: float
    refs: dict = field(default_factory=dict)  # stage -> object ref of its message
    chosen: dict = field(default_factory=dict)  # stage -> replica index
    arrived: set = field(default_factory=set)  # the driver stages' refs that are ready
    resubmits: int = 0


class RayRunner:
    """The plan's actors, wired (see the module docstring); a context manager that kills them.
    ``submit`` starts a request (at most ``requests`` in flight: the caller waits with ``next_done``
    before submitting more), ``next_done`` returns the next answered :class:`Done`; ``events`` are
    the lines faults made ("stage 1 replica 0 (CPU) died: ...")."""

    def __init__(self, ray, plan: ServingPlan, directory: Path, requests: int, *,
                 placement_timeout: float = PLACEMENT_TIMEOUT, compiled: str = "auto"):
        self.ray = ray
        self.plan = plan
        self.directory = Path(directory)
        self.requests = int(requests)
        self.specs = actor_layout(plan)
        self.by_stage: list[list[ActorSpec]] = [[a for a in self.specs if a.stage == s] for s in range(len(plan.stages))]
        self.handles: dict[tuple[int, int], object] = {}
        self.alive: list[list[int]] = [[a.replica for a in reps] for reps in self.by_stage]
        self.outstanding: Counter = Counter()
        self.pending: dict[int, _Pending] = {}
        self.order: list[int] = []  # compiled graph: rids in submission order
        self.events: list[str] = []
        self.placed: list[str] = []
        self.answered: Counter = Counter()
        self.resubmitted = 0
        self.dag = None
        self.mode = CALLS
        self.why = ""
        self.load_seconds = 0.0
        self._refs: dict = {}  # object ref -> rid (actor calls: the driver stages' refs)
        self.request_timeout = REQUEST_TIMEOUT
        self.sinks = driver_stages(plan)
        if compiled not in WIRINGS:
            raise ValueError(f"compiled={compiled!r}: one of {', '.join(WIRINGS)}")
        try:
            self._start(placement_timeout, compiled)
        except BaseException:
            self.close()  # the actors made so far
            raise

    # ---------------------------------------------------------------- starting

    def _check_resources(self) -> None:
        have = self.ray.cluster_resources()
        for a in self.specs:
            for res in a.resources:
                if have.get(res, 0) <= 0:
                    raise RayServeError(f"host '{a.host}': no node of the Ray cluster offers the resource '{res}' "
                                        f"({a.name}; a node of host '{a.host}' joins with ray start --resources "
                                        f"'{{\"{res}\": 1000}}')")

    def _start(self, placement_timeout: float, compiled: str) -> None:
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: ray (see import_ray)

        self._check_resources()
        t0 = time.perf_counter()
        here = ray.get_runtime_context().get_node_id()
        plan_json = encode_plan(self.plan)
        blobs = {}
        loads = {}
        for a in self.specs:
            b = self.plan.stages[a.stage].blob(a.device)
            if b.file not in blobs:
                blobs[b.file] = ray.put((self.directory / b.file).read_bytes())
            opts = dict(num_cpus=0, max_concurrency=max(a.streams, 1), max_restarts=0, max_task_retries=0)
            if a.resources:
                opts["resources"] = dict(a.resources)
            else:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=here, soft=False)
            h = ray.remote(StageActor).options(**opts).remote()
            self.handles[(a.stage, a.replica)] = h
            loads[(a.stage, a.replica)] = h.load.remote(plan_json, a.stage, a.replica, blobs[b.file], a.host)
        nodes = []
        deadline = time.monotonic() + placement_timeout  # for all of them: they are placed and load at once
        for a in self.specs:
            key = (a.stage, a.replica)
            try:
                got = ray.get(loads[key], timeout=max(deadline - time.monotonic(), 0.0))
            except ray.exceptions.GetTimeoutError:
                what = (f"no node with the resource '{next(iter(a.resources))}' took it" if a.resources
                        else "the driver's node did not take it")
                raise RayServeError(f"{a.name}: not placed and loaded within {placement_timeout:g} s ({what}; the "
                                    f"host may lack room or its node is gone)") from None
            except ray.exceptions.RayError as e:
                raise RayServeError(f"{a.name}: its actor failed to start: {_first_line(e)}") from None
            if "error" in got:
                raise RayServeError(got["error"])
            nodes.append(got["node"])
            self.placed.append(f"{a.name}: node {got['ip']} pid {got['pid']}, blob imported in {got['seconds']:.1f} s")
        self.load_seconds = time.perf_counter() - t0
        self.why = compiled_graph_refusal(self.plan, nodes)
        if compiled == "never":
            self.why = "a Compiled Graph was not asked for"
        elif compiled == "always" and self.why.startswith("actors on"):
            self.why = f"a Compiled Graph asked for with {self.why}"
            self._compile()
        elif not self.why:
            self._compile()

    def _compile(self) -> None:
        from ray.dag import InputNode, MultiOutputNode  # lazy: ray (see import_ray)

        nodes = {}
        with InputNode() as inp:
            for s in range(len(self.plan.stages)):
                h = self.handles[(s, 0)]
                nodes[s] = h.run.bind(inp[0], inp[1], *[nodes[p] for p in producers(self.plan, s)])
            outs = [nodes[s] for s in driver_stages(self.plan)]
            dag = MultiOutputNode(outs)
        self.dag = dag.experimental_compile(_max_inflight_executions=self.requests)
        self.mode = COMPILED

    # ---------------------------------------------------------------- requests

    def in_flight(self) -> int:
        return len(self.pending)

    def submit(self, rid: int, inputs: list, keep: bool = False) -> None:
        """Start request ``rid`` (ids unique per runner)."""
        if rid in self.pending or rid in self.answered:
            raise ValueError(f"request id {rid} used twice")
        job = _Pending(rid, inputs, keep, time.perf_counter())
        self.pending[rid] = job
        if self.dag is not None:
            try:
                job.refs[-1] = self.dag.execute(rid, inputs)
            except self.ray.exceptions.RayError as e:
                raise self._compiled_failure(rid, e) from None
            self.order.append(rid)
            return
        # the inputs once in the object store when large (every stage reading them gets the ref),
        # else inline in each call (Ray's own threshold for putting an argument is 100 KB)
        job.inputs = self.ray.put(inputs) if sum(np.asarray(a).nbytes for a in inputs) > INLINE_BYTES else inputs
        self._route(job, 0)

    def _pick(self, s: int) -> int:
        reps = self.alive[s]
        if not reps:
            raise RayServeError(self._no_replica(s))
        spec = {a.replica: a for a in self.by_stage[s]}
        return min(reps, key=lambda j: (self.outstanding[(s, j)] / spec[j].streams, j))

    def _no_replica(self, s: int) -> str:
        dead = "; ".join(e for e in self.events if e.startswith(f"stage {s} "))
        return f"stage {s} has no replica left ({dead or 'every replica died'}): serving stopped"

    def _route(self, job: _Pending, first: int) -> None:
        """Calls for stages ``first``.. of ``job`` (earlier stages' refs kept)."""
        for s in range(first, len(self.plan.stages)):
            old = job.chosen.pop(s, None)
            if old is not None:
                self.outstanding[(s, old)] -= 1
            ref = job.refs.pop(s, None)
            if ref is not None:
                self._refs.pop(ref, None)
                job.arrived.discard(ref)
        for s in range(first, len(self.plan.stages)):
            j = self._pick(s)
            job.chosen[s] = j
            self.outstanding[(s, j)] += 1
            job.refs[s] = self.handles[(s, j)].run.remote(job.rid, job.inputs,
                                                          *[job.refs[p] for p in producers(self.plan, s)])
        for s in self.sinks:
            self._refs[job.refs[s]] = job.rid

    def next_done(self, timeout: float | None = None) -> Done:
        """The next answered request (actor calls: whichever completes first; a Compiled Graph: in
        submission order) within ``timeout`` seconds (default :attr:`request_timeout`). A replica
        found dead is dropped and its requests submitted again."""
        timeout = self.request_timeout if timeout is None else timeout
        if self.dag is not None:
            return self._next_compiled(timeout)
        ray = self.ray
        deadline = time.perf_counter() + timeout
        while True:
            if not self._refs:
                raise RayServeError("no request in flight to wait for")
            left = deadline - time.perf_counter()
            if left <= 0:
                raise RayServeError(f"no request answered within {timeout:g} s ({len(self.pending)} in flight)")
            ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=min(left, 1.0))
            if not ready:
                continue
            job = self.pending[self._refs.pop(ready[0])]
            job.arrived.add(ready[0])
            refs = [job.refs[s] for s in self.sinks]
            if not all(r in job.arrived for r in refs):
                continue
            try:
                msgs = ray.get(refs)  # ready: ray.wait fetched them here
            except ray.exceptions.RayError as e:
                failed = self._failed_stage(job) or (self._stage_of(job, ready[0]), e)
                self._recover(job, *failed)
                continue
            return self._answer(job, dict(zip(self.sinks, msgs)))

    def _stage_of(self, job: _Pending, ref) -> int:
        return next(s for s, r in job.refs.items() if r == ref)

    def _failed_stage(self, job: _Pending):
        """(stage, error) of the first stage of ``job`` whose call failed, or None."""
        ray = self.ray
        for s in range(len(self.plan.stages)):
            ref = job.refs[s]
            done, _ = ray.wait([ref], timeout=0)
            if not done:
                continue
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayError as e:
                return s, e
        return None

    def _recover(self, job: _Pending, s: int, err) -> None:
        ray = self.ray
        j = job.chosen[s]
        if not isinstance(err, ray.exceptions.RayActorError):
            raise RayServeError(f"request {job.rid}: stage {s} replica {j} failed: {_first_line(err)}")
        if j in self.alive[s]:
            self.alive[s].remove(j)
            spec = next(a for a in self.by_stage[s] if a.replica == j)
            left = len(self.alive[s])
            self.events.append(f"{spec.name} died ({type(err).__name__}); {left} replica{'s' if left != 1 else ''} of "
                               f"stage {s} left" + (", its requests submitted to them again" if left else ""))
        if not self.alive[s]:
            raise RayServeError(self._no_replica(s))
        job.resubmits += 1
        self.resubmitted += 1
        self._route(job, s)

    def _answer(self, job: _Pending, msgs: dict) -> Done:
        t1 = time.perf_counter()
        del self.pending[job.rid]
        for s, j in job.chosen.items():
            self.outstanding[(s, j)] -= 1
        self.answered[job.rid] += 1
        busy: dict = {}
        by: dict = {}
        for m in msgs.values():
            busy.update({int(k): v for k, v in m["busy"].items()})
            by.update({int(k): v for k, v in m["by"].items()})
        outputs = None
        if job.keep:
            ins = job.inputs if isinstance(job.inputs, list) else self.ray.get(job.inputs)
            outputs = [ins[p.index] if p.source == "input" else msgs[p.index]["out"][p.output]
                       for p in self.plan.outputs]
        return Done(job.rid, outputs, by, job.t0, t1, busy)

    def _next_compiled(self, timeout: float) -> Done:
        ray = self.ray
        if not self.order:
            raise RayServeError("no request in flight to wait for")
        rid = self.order.pop(0)
        job = self.pending[rid]
        try:
            got = ray.get(job.refs[-1], timeout=timeout)
        except ray.exceptions.RayChannelTimeoutError:
            raise RayServeError(f"request {rid}: the Compiled Graph did not answer within {timeout:g} s") from None
        except ray.exceptions.RayError as e:
            raise self._compiled_failure(rid, e) from None
        got = got if isinstance(got, list) else [got]
        return self._answer(job, dict(zip(self.sinks, got)))

    def _compiled_failure(self, rid: int, e) -> RayServeError:
        """The one line a failed Compiled Graph stops with: the actor that died, else the error."""
        dead = self._dead_actors()
        if dead:
            self.events += [f"{a.name} died; a Compiled Graph has no other replica of stage {a.stage}" for a in dead]
            return RayServeError(f"{dead[0].name} died: the Compiled Graph has no replica left for stage "
                                 f"{dead[0].stage}: serving stopped")
        return RayServeError(f"request {rid}: {_first_line(e)}")

    def _dead_actors(self) -> list[ActorSpec]:
        """The actors that no longer answer (the Compiled Graph torn down first: its actors loop in it)."""
        ray = self.ray
        if self.dag is not None:
            try:
                self.dag.teardown()
            except Exception:  # noqa: BLE001 - a graph whose actor died tears down with errors
                pass
            self.dag = None
        dead = []
        for a in self.specs:
            try:
                ray.get(self.handles[(a.stage, a.replica)].ping.remote(), timeout=10)
            except ray.exceptions.RayError:
                dead.append(a)
        return dead

    def kill(self, stage: int, replica: int) -> None:
        """Kill one replica's actor (a fault drill: ``ray.kill``, no restart)."""
        self.ray.kill(self.handles[(stage, replica)], no_restart=True)

    def lanes(self) -> list[int]:
        spec = {(a.stage, a.replica): a.streams for a in self.specs}
        return [sum(spec[(s, j)] for j in self.alive[s]) for s in range(len(self.plan.stages))]

    def close(self) -> None:
        """Tear the Compiled Graph down and kill every actor (idempotent)."""
        if self.dag is not None:
            try:
                self.dag.teardown()
            except Exception:  # noqa: BLE001 - a graph whose actor died tears down with errors; kill follows
                pass
            self.dag = None
        for h in self.handles.values():
            try:
                self.ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.handles = {}

    def __enter__(self) -> "RayRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _first_line(e) -> str:
    text = str(e).strip().splitlines()
    text = [t for t in text if t.strip()]
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


# --------------------------------------------------------------------------- starting and joining Ray


@dataclass
class RaySession:
    """A connection to Ray: a local cluster of its own (``auto``) or a running one (an address)."""

    ray: object
    address: str
    own: bool
    temp_dir: str = ""
    remove: bool = False  # the temporary directory was made for it: removed after shutdown

    def close(self) -> None:
        self.ray.shutdown()
        if self.remove and self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


#: Seconds a driver waits for a head node that stopped answering before it ends (Ray's own default is 60).
HEAD_TIMEOUT = 20
#: Characters a local cluster's temporary directory may have (Ray's socket paths below it: 107 bytes).
TEMP_DIR_MAX = 40
#: Seconds the address of a running cluster has to accept a connection.
CONNECT_TIMEOUT = 10.0


def probe(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """RayServeError in one line unless ``address`` (``host:port``) accepts a TCP connection within
    ``timeout`` (``ray.init`` waits minutes for a dead head node)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RayServeError(f"--ray {address}: not auto and not an address (host:port of a Ray head node)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayServeError(f"--ray {address}: no Ray head node answers there ({e.strerror or type(e).__name__}"
                            f"{'' if e.strerror else f' after {timeout:g} s'})") from None


def own_token() -> None:
    """A token for a local cluster of this process alone, in the environment its processes inherit
    (not ``~/.ray/auth_token``, which Ray writes otherwise), unless one is set already. Ray reads
    the environment when it is imported; an imported Ray is told again."""
    if os.environ.get("RAY_AUTH_MODE", "token") != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    if "ray" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config  # lazy: ray (see import_ray)

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def start_ray(address: str, temp_dir: str | None = None) -> RaySession:
    """``auto``: a local Ray of its own (this host's CPUs, no dashboard, temporary files in
    ``temp_dir``, an auth token made for it in the environment); an address: join that cluster.
    RayServeError in one line when it cannot."""
    remove = False
    if address == "auto":
        if not temp_dir:
            base = tempfile.gettempdir()
            temp_dir, remove = tempfile.mkdtemp(prefix="hdp-ray-", dir=base if len(base) <= 20 else "/tmp"), True
        if len(temp_dir) > TEMP_DIR_MAX:
            raise RayServeError(f"--ray auto: the temporary directory {temp_dir} is longer than {TEMP_DIR_MAX} "
                                f"characters: Ray's sockets below it would pass the 107 bytes a socket path has")
        own_token()
    else:
        probe(address)
    ray = import_ray()
    if address == "auto":
        try:
            ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, _temp_dir=temp_dir,
                     log_to_driver=False, configure_logging=False, namespace="hdp")
        except Exception as e:  # noqa: BLE001 - whatever Ray raises, one line
            if remove:
                shutil.rmtree(temp_dir, ignore_errors=True)
            raise RayServeError(f"--ray auto: a local Ray did not start: {_first_line(e)}") from None
        return RaySession(ray, "a local Ray started for this run", True, temp_dir, remove)
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False, namespace="hdp")
    except ConnectionError as e:
        raise RayServeError(f"--ray {address}: no Ray cluster answers there ({_first_line(e)})") from None
    except Exception as e:  # noqa: BLE001 - an auth error, a version mismatch: one line
        raise RayServeError(f"--ray {address}: cannot join the cluster: {_first_line(e)}") from None
    return RaySession(ray, f"the Ray cluster at {address}", False)


# --------------------------------------------------------------------------- serving, measured


class RayServed(msgspec.Struct, kw_only=True):
    """What :func:`serve_on_ray` measured: the in-process result's fields (:class:`PlanServed`),
    the wiring and why, where each actor ran, the faults and the request ledger."""

    served: PlanServed
    cluster: str = ""
    mode: str = ""
    why: str = ""
    placed: list[str] = []
    events: list[str] = []
    submitted: int = 0
    answered: int = 0
    twice: list[int] = []
    missing: list[int] = []
    resubmitted: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.served.ok


def ray_lines(r: RayServed) -> list[str]:
    """What ``hdp serve --ray`` prints: the cluster, the wiring and why, each actor's node, the
    faults, the request ledger, then what ``hdp serve`` prints (:func:`served_lines`); of a run
    that failed, what it got to (the error is the caller's one line), nothing when no actor ran."""
    if r.error and not r.placed:
        return []
    out = [f"on Ray ({r.cluster}): {len(r.placed)} actors wired by {r.mode or '?'}" + (f" ({r.why})" if r.why else
                                                                                        " (every actor on one node)")]
    out += [f"  {p}" for p in r.placed]
    out += [f"fault: {e}" for e in r.events]
    if r.submitted:
        out.append(f"requests: {r.submitted} submitted, {r.answered} answered"
                   + (" once each" if not r.twice and not r.missing and r.answered == r.submitted else "")
                   + (f", {r.resubmitted} submitted again after a replica died" if r.resubmitted else "")
                   + (f"; answered twice: {r.twice[:10]}" if r.twice else "")
                   + (f"; never answered: {r.missing[:10]}" if r.missing else ""))
    if r.served.ok and not r.error:
        out += served_lines(r.served)
    return out


def _window(runner: RayRunner, state: dict, inputs: list, per_batch: int, kill=None) -> tuple:
    """``per_batch + 2 N`` requests with ``N`` in flight, the ``per_batch`` after the first ``N``
    timed between completions: (rate, p50, p99, per-stage utilisation, CPU/s of the driver)."""
    n = runner.requests
    total = per_batch + 2 * n
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    done: list[Done] = []
    sub = 0
    while len(done) < total:
        while sub < total and runner.in_flight() < n:
            runner.submit(state["next"], inputs)
            state["next"] += 1
            sub += 1
        d = runner.next_done()
        done.append(d)
        state["answers"] += 1
        if kill is not None and not state["killed"] and state["answers"] >= kill[2]:
            runner.kill(kill[0], kill[1])
            state["killed"] = True
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    stamps = sorted(d.t1 for d in done)[n:n + per_batch + 1]
    rate = per_batch / max(stamps[-1] - stamps[0], 1e-12)
    lat = np.array([d.t1 - d.t0 for d in sorted(done, key=lambda d: d.t1)[n:n + per_batch]])
    lanes = runner.lanes()
    util = [sum(d.busy.get(s, 0.0) for d in done) / (wall * max(lanes[s], 1)) for s in range(len(lanes))]
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / max(wall, 1e-12)
    return rate, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), util, cpu


def check_on_ray(runner: RayRunner, state: dict, check_in: list, check_out: list, tolerance: float):
    """(passed, largest relative error, requests checked): the seeded requests through the actors,
    several in flight, each against the unsplit model's outputs."""
    for r, x in enumerate(check_in):
        runner.submit(state["next"] + r, x, keep=True)
    base = state["next"]
    state["next"] += len(check_in)
    worst = 0.0
    for _ in check_in:
        d = runner.next_done()
        state["answers"] += 1
        for got, want in zip(d.outputs, check_out[d.rid - base]):
            worst = max(worst, relative_error(got, want))
    return worst <= tolerance, worst, len(check_in)


def serve_on_ray(path, *, ray: str = "auto", requests: int | None = None, seconds: float = 10.0, batches: int = 0,
                 per_batch: int = 0, tolerance: float = 1e-3, warmup: int = 2, temp_dir: str | None = None,
                 placement_timeout: float = PLACEMENT_TIMEOUT, kill: tuple[int, int, int] | None = None,
                 compiled: str = "auto", request_timeout: float = REQUEST_TIMEOUT) -> RayServed:
    """Serve the plan in ``path`` on Ray (``ray``: ``auto`` or a cluster's address) with
    ``requests`` in flight (default the plan's) for ``seconds`` (or ``batches`` windows when > 0)
    of ``per_batch`` requests (0: about :data:`WINDOW_SECONDS` each, judged by the warm-up).
    ``kill=(stage, replica, k)``: kill that replica's actor when ``k`` requests have been answered
    (a fault drill). ``compiled``: the wiring (:data:`WIRINGS`); ``request_timeout``: seconds a
    request may take before the run stops. InputError for the plan's mistakes (blobs, digests); a
    run Ray stops is the result's ``error``; Ray is shut down and every actor killed either way."""
    f = plan_file(path)
    plan = read_plan(f)
    n = plan.requests if requests is None else int(requests)
    if n < 1:
        raise InputError(f"--requests {n}: must be at least 1")
    actor_layout(plan)  # refuses a placed pipeline before Ray starts
    import openvino as ov  # lazy: the plan's blobs name the OpenVINO version that wrote them

    check_blobs(plan, f.parent, ov.get_version())
    check_in, check_out = read_check(f.parent)
    if not check_in:
        raise InputError(f"{f.parent}: no check.npz (the seeded requests hdp records with a plan); write the plan again")
    base = PlanServed(what=str(f), shape=plan.shape, requests=n, per_batch=0)
    session = None
    runner = None
    state = {"next": 0, "answers": 0, "killed": False}
    try:
        session = start_ray(ray, temp_dir)
        runner = RayRunner(session.ray, plan, f.parent, n, placement_timeout=placement_timeout,
                           compiled=compiled)
        runner.request_timeout = float(request_timeout)
        passed, err, checked = check_on_ray(runner, state, check_in, check_out, tolerance)
        inputs = check_in[0]
        for _ in range(max(warmup, 1)):
            _window(runner, state, inputs, max(n, 1), kill)
        t0 = time.perf_counter()
        _window(runner, state, inputs, 4 * n, kill)
        first = time.perf_counter() - t0
        if per_batch <= 0:
            per_batch = max(4 * n, int(WINDOW_SECONDS * 6 * n / max(first, 1e-9)))
        windows = []
        start = time.perf_counter()
        while (batches > 0 and len(windows) < batches) or (batches <= 0 and (time.perf_counter() - start < seconds
                                                                             or len(windows) < 2)):
            windows.append(_window(runner, state, inputs, per_batch, kill))
        if kill is not None and not state["killed"]:
            raise RayServeError(f"the fault drill never ran: {state['answers']} requests answered, fewer than "
                                f"{kill[2]}")
        served = PlanServed(what=str(f), shape=plan.shape, requests=n, per_batch=per_batch,
                            rates=[w[0] for w in windows], p50=[w[1] for w in windows], p99=[w[2] for w in windows],
                            utilisation=[w[3] for w in windows], cpu=[w[4] for w in windows],
                            load_seconds=runner.load_seconds, checked=checked, check_error=err, check_passed=passed,
                            tolerance=tolerance)
        return _result(served, session, runner, state)
    except RayServeError as e:
        return _result(base, session, runner, state, error=str(e))
    finally:
        if runner is not None:
            runner.close()
        if session is not None:
            session.close()


def _result(served: PlanServed, session, runner, state, error: str = "") -> RayServed:
    if runner is None:
        return RayServed(served=served, cluster=session.address if session else "", error=error)
    answered = runner.answered
    return RayServed(served=served, cluster=session.address, mode=runner.mode, why=runner.why, placed=runner.placed,
                     events=runner.events, submitted=state["next"], answered=sum(answered.values()),
                     twice=sorted(k for k, v in answered.items() if v > 1),
                     missing=sorted(set(range(state["next"])) - set(answered)) if not error else [], resubmitted=runner.resubmitted, error=error)


# --------------------------------------------------------------------------- in a process of its own


def serve_ray_in_subprocess(path, *, timeout: float = 3600.0, **kwargs) -> RayServed:
    """:func:`serve_on_ray` in a process of its own (``python -m hdp.runtime.serve.ray_run``) that
    dies with this one; a crash or a timeout is the result's ``error``, an InputError is raised.
    The local cluster's temporary directory is made here and removed after, whatever happened."""
    base = tempfile.gettempdir()
    tmp = tempfile.mkdtemp(prefix="hdp-ray-", dir=base if len(base) <= 20 else "/tmp")
    req = json.dumps({"path": str(path), "temp_dir": tmp, **kwargs}).encode()
    env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
    # a driver whose head node died ends itself after this many seconds (Ray's default: 60)
    env.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(HEAD_TIMEOUT))
    what = str(plan_file(path))
    base = PlanServed(what=what, shape="", requests=int(kwargs.get("requests") or 0), per_batch=0)
    try:
        try:
            done = subprocess.run([sys.executable, "-m", "hdp.runtime.serve.ray_run"], input=req, capture_output=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return RayServed(served=base, error=f"timed out after {timeout:g} s")
        if done.returncode != 0:
            lines = [x for x in done.stderr.decode(errors="replace").strip().splitlines() if x.strip()]
            if any("Failed to connect to GCS" in x for x in lines):
                return RayServed(served=base, error=f"the head node stopped answering (its GCS: no answer within "
                                                    f"{env['RAY_gcs_rpc_server_reconnect_timeout_s']} s); the Ray "
                                                    f"driver ended, and with it its actors")
            return RayServed(served=base, error=f"the Ray driver died (exit {done.returncode}): "
                                                f"{lines[-1][:300] if lines else 'no message'}")
        out = json.loads(done.stdout.decode())
        if "input_error" in out:
            raise InputError(out["input_error"])
        return msgspec.convert(out, RayServed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    die_with_parent()
    args = json.loads(sys.stdin.buffer.read().decode())
    path = args.pop("path")
    if args.get("kill") is not None:
        args["kill"] = tuple(args["kill"])
    try:
        res = serve_on_ray(path, **args)
        text = json.dumps(msgspec.to_builtins(res))
    except InputError as e:
        text = json.dumps({"input_error": str(e)})
    sys.stdout.write(text)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

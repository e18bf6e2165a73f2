"""``partition``: a device per tie group of the placement problem, by the chosen method."""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from typing import Annotated

from msgspec import Meta

from hdp.ir.types import Array, Module, Partition
from hdp.passes.base import Pass
from hdp.placement.objective import EXECUTOR_COSTS, KINDS, Concurrent, Latency, Objective, Throughput
from hdp.placers.options import HeteroAuto, Method, method_from
from hdp.runtime.target import Target


class PartitionPass(Pass, tag="partition"):
    """Place the graph's tie groups with ``placer`` (``hdp passes`` lists the methods and options)."""

    target: Target
    placer: Method = HeteroAuto()
    seed: int = 0
    #: pairs of op ids that must share a device beyond the graph's own rules (learned by
    #: ``hdp compile`` when a placement failed its check)
    extra_ties: tuple[tuple[int, int], ...] = ()
    timeout: float = 120.0  # seconds per measured placement (hsdag:measure); not in the key
    #: what the placement optimises (--objective, --requests)
    objective: Objective = Latency()
    #: (device, bytes) capacities overriding the target's (--memory DEV=SIZE)
    memory: tuple[tuple[str, Annotated[int, Meta(ge=0)]], ...] = ()
    #: tokens of state (KV cache) a stateful model holds (--context); 0: as specialised
    context: Annotated[int, Meta(ge=0)] = 0
    requires = ("graph", "support")
    provides = ("partition",)
    key_exclude = ("timeout",)
    version = 12  # replicated chains priced once per device; placements untangled for HETERO's state rule (hdp.placement.subgraphs); objectives and device memory; cost graphs under their own caps and rule; each device's memory model (overhead, weight copies); the executor's conversions; throughput: two-stage pipeline candidates; the served hand-off, each single device's latency recorded; auto serves its throughput candidates, simplest split first; optimal under throughput never above the best two-stage pipeline

    def needs(self) -> tuple[str, ...]:
        """``graph`` and ``support``, and the stages the method needs on this target."""
        return type(self).requires + tuple(s for s in self.placer.stages(self.target) if s not in type(self).requires)

    @staticmethod
    def objective_from(name: str = "latency", requests=None, execution: str = "sequential",
                       executor=None, handoff: float | None = None) -> Objective:
        """The objective of ``--objective NAME [--requests N] [--execution E]``; InputError naming the
        bad option. ``--execution concurrent`` is one request's latency run by hdp's concurrent
        executor, with the executor's costs ``executor`` measured by ``hdp calibrate`` (when known);
        ``handoff`` is the throughput objective's cost of a served subgraph (``hdp calibrate``'s)."""
        if name not in KINDS:
            raise InputError(f"--objective {name}: must be one of {', '.join(KINDS)}")
        if execution not in ("sequential", "concurrent"):
            raise InputError(f"--execution {execution}: must be sequential or concurrent")
        if execution == "concurrent" or name == "concurrent":
            if name not in ("latency", "concurrent"):
                raise InputError(f"--execution concurrent optimises one request's latency run by hdp's executor; "
                                 f"not with --objective {name}")
            if requests is not None:
                raise InputError(f"--requests {requests}: only with --objective throughput")
            if executor is None:
                return Concurrent()
            return Concurrent(**{k: getattr(executor, k) for k in EXECUTOR_COSTS if hasattr(executor, k)})
        if requests is not None:
            try:
                requests = int(requests)
            except (TypeError, ValueError):
                raise InputError(f"--requests {requests!r}: must be an integer") from None
            if requests < 1:
                raise InputError(f"--requests {requests}: must be at least 1")
        if name == "throughput":
            extra = {} if handoff is None else {"handoff": handoff}
            return Throughput(**extra) if requests is None else Throughput(requests=requests, **extra)
        if requests is not None:
            raise InputError(f"--requests {requests}: only with --objective throughput")
        return Latency()

    @classmethod
    def goal_fields(cls, opts: dict) -> dict:
        """``objective``, ``memory`` and ``context`` from the flat options ``objective``,
        ``requests``, ``memory`` (``"GPU=16GiB,CPU=8GiB"``) and ``context`` (popped from ``opts``);
        InputError naming the bad one."""
        objective = opts.pop("objective", None)
        requests = opts.pop("requests", None)
        execution = str(opts.pop("execution", "sequential"))
        # seconds, hdp calibrate's: the concurrent executor's own costs, and a served subgraph's hand-off
        vals = {}
        for k in (*EXECUTOR_COSTS, "handoff"):
            if k not in opts:
                continue
            v = opts.pop(k)
            try:
                vals[k] = float(v)
            except (TypeError, ValueError):
                raise InputError(f"pass 'partition': {k} must be a number of seconds, not {v!r}") from None
            if not 0 <= vals[k] <= 10:
                raise InputError(f"pass 'partition': {k} must be between 0 and 10 seconds, not {v!r}")
        handoff = vals.pop("handoff", None)
        throughput = isinstance(objective, Throughput) or str(objective or "latency") == "throughput"
        if handoff is not None and not throughput:
            raise InputError("pass 'partition': handoff prices a served pipeline; only with objective throughput")
        executor = None
        if vals:
            from types import SimpleNamespace

            executor = SimpleNamespace(**vals)
        if not isinstance(objective, (Latency, Throughput, Concurrent)):
            objective = cls.objective_from(str(objective or "latency"), requests, execution, executor, handoff)
        memory = opts.pop("memory", ())
        if isinstance(memory, str):
            from hdp.runtime.capacity import parse_overrides

            memory = parse_overrides(a for a in memory.split(",") if a)
        context = opts.pop("context", 0)
        try:
            context = int(context)
        except (TypeError, ValueError):
            raise InputError(f"--context {context!r}: must be an integer") from None
        if context < 0:
            raise InputError(f"--context {context}: must be 0 or more tokens")
        return {"objective": objective, "memory": tuple(memory), "context": context}

    @classmethod
    def from_options(cls, options: dict) -> "PartitionPass":
        """From flat options, as ``--set`` gives them: ``method`` (``name[:arg]``), ``seed``,
        ``target`` and the method's own options."""
        opts = dict(options)
        target = opts.pop("target", None)
        if target is None:
            raise InputError("pass 'partition' needs a target (--target or --devices)")
        seed = opts.pop("seed", 0)
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise InputError(f"pass 'partition': seed must be an integer, not {seed!r}") from None
        extra = {k: opts.pop(k) for k in ("timeout",) if k in opts}
        goal = cls.goal_fields(opts)
        placer = method_from(str(opts.pop("method", "hetero-auto")), opts)
        try:
            return cls(target=target, placer=placer, seed=seed, **goal, **{k: float(v) for k, v in extra.items()})
        except ValueError:
            raise InputError(f"pass 'partition': timeout must be a number, not {extra['timeout']!r}") from None

    def run(self, module: Module) -> Module:
        from hdp.placement.problem import problem_of
        from hdp.placers import PlaceContext, place

        devices = self.target.device_names
        if module.support.devices != devices:
            raise InputError(f"support was computed for devices {module.support.devices}, "
                             f"not for target {devices}")
        from hdp.costgraph.graph import capacities as costgraph_capacities
        from hdp.costgraph.graph import is_costgraph, throughput_objective
        from hdp.runtime.capacity import capacities, device_memory

        cap, objective = capacities(self.target, self.memory), self.objective
        dm = None if is_costgraph(module) else device_memory(self.target)
        if is_costgraph(module):  # an abstract problem states its own caps and communication rule
            cap = np.minimum(cap, costgraph_capacities(module, devices))
            if isinstance(objective, Throughput):
                objective = throughput_objective(module, devices)
        problem = problem_of(module, devices, self.extra_ties, objective=objective, capacity=cap,
                             context=self.context, device_memory=dm)
        placed = place(self.placer, PlaceContext(module=module, problem=problem, target=self.target, seed=self.seed,
                                                  timeout=self.timeout))
        label = self.placer.label()
        goal = {"goal": self.objective.kind()}
        if self.memory:  # --memory overrides: written into the placed model, read back by show and evaluate
            from hdp.runtime.capacity import caps_record

            goal["memory_caps"] = caps_record(self.memory)
        if isinstance(self.objective, Throughput):
            goal["requests"] = str(self.objective.requests)
            if self.objective.handoff:
                goal["handoff"] = str(self.objective.handoff)
            from hdp.placement.simulate import Simulator

            # each single device's simulated latency: hdp evaluate prices a plain compile beside it
            goal["singles"] = ",".join(f"{devices[j]}={t:.6g}" for j, t in Simulator(problem).singles().items())
        if isinstance(self.objective, Concurrent):
            ob = self.objective
            goal.update(execution="concurrent", **{k: str(getattr(ob, k)) for k in EXECUTOR_COSTS})
            if ob.launch is None:
                goal["launch"] = str(problem.subgraph_overhead)
        info = {"method": label, **goal, **{k: str(v) for k, v in placed.info.items()}}
        part = Partition(method=label, devices=devices,
                         group_of=Array.of(problem.structure.anchor, np.int32),
                         group_device=Array.of(placed.group_device, np.int16), info=info,
                         extra_ties=Array.of(np.asarray(self.extra_ties, np.int32).reshape(-1, 2)) if self.extra_ties else None)
        return module.replace(partition=part)

"""``partition``: a device per tie group of the placement problem, by the chosen method."""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import Bytes, Seed, TimeLimit
from hdp.costgraph.graph import capacities as costgraph_capacities
from hdp.costgraph.graph import is_costgraph, throughput_objective
from hdp.ir.types import Array, Module, Partition
from hdp.passes.base import Pass
from hdp.placement.objective import EXECUTOR_COSTS, KINDS, Concurrent, Energy, Latency, Objective, Throughput
from hdp.placement.problem import problem_of
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import METHODS, HeteroAuto, Method, PlacerOptions, method_data
from hdp.target.capacity import capacities, caps_record, device_memory, max_allocations, parse_overrides
from hdp.target.hosts import problem_hosts
from hdp.target.target import Target, energy_of

#: Tokens of state (KV cache) the ``context`` option takes at most: 16 Mi (no model holds more).
MAX_CONTEXT = 1 << 24
#: The flat options of ``partition`` itself; every other option is its method's.
OWN_OPTIONS = ("method", "seed", "timeout", "objective", "requests", "memory", "context", "execution", "handoff",
               "dispatch", "streams", *EXECUTOR_COSTS)
#: The flat options that make the objective (``dispatch`` and ``streams``: a serving plan's costs).
GOAL_OPTIONS = ("objective", "execution", "requests", "handoff", "dispatch", "streams", *EXECUTOR_COSTS)
#: The throughput objective's options that price a serving plan (hdp.placement.plan)
PLAN_COSTS = ("dispatch", "streams")


class PartitionPass(Pass, tag="partition"):
    """Place the graph's tie groups with ``placer`` (``hdp passes`` lists the methods and options)."""

    target: Target
    placer: Method = HeteroAuto()
    seed: Seed = 0
    #: pairs of op ids that must share a device beyond the graph's own rules (learned by
    #: ``hdp compile`` when a placement failed its check)
    extra_ties: tuple[tuple[int, int], ...] = ()
    timeout: TimeLimit = 120.0  # seconds per measured placement (hsdag:measure); not in the key
    #: what the placement optimises (--objective, --requests)
    objective: Objective = Latency()
    #: (device, bytes) capacities overriding the target's (--memory DEV=SIZE)
    memory: tuple[tuple[str, Bytes], ...] = ()
    #: tokens of state (KV cache) a stateful model holds (--context); 0: as specialised
    context: Annotated[int, Meta(ge=0, le=MAX_CONTEXT, description="tokens of state")] = 0
    requires = ("graph", "support")
    provides = ("partition",)
    key_exclude = ("timeout",)
    version = 14

    def needs(self) -> tuple[str, ...]:
        """``graph`` and ``support``, and the stages the method needs on this target."""
        return type(self).requires + tuple(s for s in self.placer.stages(self.target) if s not in type(self).requires)

    @classmethod
    def fields_from(cls, options: dict) -> dict:
        """The fields from flat options (``--set``, a pipeline text, compile's flags): ``method``
        (``NAME[:ARG]``) and the method's options make ``placer``; ``objective``, ``execution``,
        ``requests``, ``handoff`` and the executor's costs make ``objective`` (``requests`` alone
        means throughput; a contradiction is an InputError); ``memory`` given as text
        (``GPU=16GiB,CPU=8GiB``) becomes (device, bytes) pairs. The values are converted and
        bounded by the fields' declarations afterwards, as every pass's."""
        opts = dict(options)
        out = {k: opts.pop(k) for k in ("target", "seed", "timeout", "context", "extra_ties") if k in opts}
        goal = {k: opts.pop(k) for k in GOAL_OPTIONS if k in opts}
        if goal:
            out["objective"] = _objective_data(goal)
        memory = opts.pop("memory", None)
        if memory is not None:
            out["memory"] = parse_overrides(a for a in memory.split(",") if a) if isinstance(memory, str) else memory
        method = opts.pop("method", None)
        if isinstance(method, PlacerOptions):
            out["placer"] = msgspec.to_builtins(method) | opts
        elif method is not None or opts:
            out["placer"] = method_data(method or "hetero-auto", opts)
        return out

    @classmethod
    def known_options(cls, options: dict) -> tuple[tuple[str, ...], str]:
        name = _method_name(options)
        if name not in METHODS:
            return OWN_OPTIONS, "pass 'partition'"
        return OWN_OPTIONS + tuple(METHODS[name].__struct_fields__), f"pass 'partition' with method '{name}'"

    @classmethod
    def option_message(cls, options: dict, path: str, what: str) -> tuple[str, str]:
        """A method's option in the method's words (``optimal option 'margin' ...``), an objective's
        under its flat name (``requests``)."""
        head, _, rest = path.partition(".")
        if head in ("placer", "objective") and rest:
            option = rest.split(".")[0].split("[")[0]
            who = _method_name(options) if head == "placer" else "pass 'partition'"
            return option, f"{who} option '{rest}' {what}"
        return head.split("[")[0], f"pass 'partition' option '{path}' {what}"

    def run(self, module: Module) -> Module:
        devices = self.target.device_names
        if module.support.devices != devices:
            raise InputError(f"support was computed for devices {module.support.devices}, "
                             f"not for target {devices}")

        cap, objective = capacities(self.target, self.memory), self.objective
        if isinstance(objective, Energy) and not objective.active:
            objective = energy_of(self.target)
        dm = None if is_costgraph(module) else device_memory(self.target)
        if is_costgraph(module):  # an abstract problem states its own caps and communication rule
            cap = np.minimum(cap, costgraph_capacities(module, devices))
            if isinstance(objective, Throughput):
                objective = throughput_objective(module, devices)
        problem = problem_of(module, devices, self.extra_ties, objective=objective, capacity=cap,
                             context=self.context, device_memory=dm)
        problem = problem.with_max_allocation(max_allocations(self.target), module.graph)  # one tensor per device
        problem = problem.with_hosts(problem_hosts(self.target, devices))  # several hosts: links and host memory
        placed = place(self.placer, PlaceContext(module=module, problem=problem, target=self.target, seed=self.seed,
                                                  timeout=self.timeout))
        label = self.placer.label()
        goal = {"goal": self.objective.kind()}
        if self.memory:  # --memory overrides: written into the placed model, read back by show and evaluate

            goal["memory_caps"] = caps_record(self.memory)
        if problem.multi_host:  # the assign pass prices the placement on the same hosts
            goal["hosts_table"] = problem.hosts.to_text()
        if self.context:  # the report prices the memory under the same state
            goal["context"] = str(self.context)
        if isinstance(self.objective, Throughput):
            goal["requests"] = str(self.objective.requests)
            if self.objective.handoff:
                goal["handoff"] = str(self.objective.handoff)

            # each single device's simulated latency: hdp evaluate prices a plain compile beside it
            goal["singles"] = ",".join(f"{devices[j]}={t:.6g}" for j, t in Simulator(problem).singles().items())
        if isinstance(objective, Energy):
            goal["watts"] = ",".join(f"{d}={a:g}/{b:g}" for d, a, b in zip(devices, objective.active, objective.idle))
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


def _method_name(options: dict) -> str:
    method = options.get("method")
    return method.name() if isinstance(method, PlacerOptions) else str(method or "hetero-auto").partition(":")[0]


def _objective_data(goal: dict) -> dict:
    """The objective's builtins from the flat options ``objective``, ``execution``, ``requests``,
    ``handoff`` and the executor's costs; InputError for a contradiction between them."""
    goal = dict(goal)
    given = goal.pop("objective", None)
    base = msgspec.to_builtins(given) if isinstance(given, msgspec.Struct) else {}
    kind = base.get("kind") if base else (None if given is None else str(given))
    execution = goal.pop("execution", None)
    if execution is not None and str(execution) not in ("sequential", "concurrent"):
        raise InputError(f"--execution {execution}: must be sequential or concurrent")
    if kind is not None and kind not in KINDS:
        raise InputError(f"--objective {kind}: must be one of {', '.join(KINDS)}")
    requests = goal.get("requests")
    if str(execution) == "concurrent" or kind == "concurrent":
        if kind not in (None, "latency", "concurrent"):
            raise InputError(f"--execution concurrent optimises one request's latency run by hdp's executor; "
                             f"not with --objective {kind}")
        if requests is not None:
            raise InputError(f"--requests {requests}: requests in flight are served by HETERO's pipeline; "
                             f"not with --execution concurrent")
        kind = "concurrent"
    elif kind is None:
        kind = "throughput" if requests is not None else "latency"  # the request count says what is meant
    if requests is not None and kind != "throughput":
        raise InputError(f"--requests {requests}: requests in flight are what --objective throughput serves; "
                         f"not with --objective {kind}")
    if "handoff" in goal and kind != "throughput":
        raise InputError("pass 'partition': handoff prices a served pipeline; only with objective throughput")
    plan_costs = [k for k in PLAN_COSTS if k in goal]
    if plan_costs and kind != "throughput":
        raise InputError(f"pass 'partition': {plan_costs[0]} prices a serving plan; only with objective throughput")
    if isinstance(goal.get("streams"), str):  # "CPU=0.61,CPU_B=0.6": each device's stream efficiency
        pairs = []
        for item in (x for x in goal["streams"].split(",") if x):
            name, eq, eff = item.partition("=")
            if not eq or not name.strip():
                raise InputError(f"pass 'partition': streams: expected DEVICE=EFFICIENCY, not {item!r}")
            pairs.append([name.strip(), _number(eff, "streams")])
        goal["streams"] = pairs
    costs = [k for k in EXECUTOR_COSTS if k in goal]
    if costs and kind != "concurrent":
        raise InputError(f"pass 'partition': {costs[0]} is a cost of hdp's concurrent executor; only with "
                         f"execution concurrent")
    return base | goal | {"kind": kind}


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"pass 'partition': {option}: {text!r} is not a number") from None

"""What a placement optimises: a value in the :class:`~hdp.placement.problem.PlacementProblem`.

:data:`Objective` is a tagged union (``kind``). Every variant is priced by the simulator
(:meth:`hdp.placement.simulate.Simulator.cost`) in **seconds per request, lower is better**:

- :class:`Latency` — one request under HETERO's sequential semantics (its subgraphs run one after
  another): compute + copies + one overhead per subgraph.
- :class:`Throughput` — ``requests`` requests in flight. HETERO pipelines them: every subgraph is
  a stage with its own executor and a device runs one stage at a time, so at steady state a
  request completes every ``max(latency / requests, max_d load[d])`` seconds, where ``load[d]``
  is the device's share of one request: the compute of its groups (replicated chains once per
  device), the copies it sends and receives, and one subgraph overhead per subgraph on it.

The communication rule of the throughput load is a parameter, not a code path: a tensor cut
from its producer's device to distinct receiving devices ``R`` charges ``send × copy`` once to the
producer's device and ``receive × copy`` to each device of ``R``; devices named in
``free_comm`` pay neither. HETERO's default (``send=0, receive=1``): the receiving stage copies
its inputs in. The peer's workloads (Tarnawski et al., msr-fiddle/dnn-partitioning) use
``send=1, receive=1, free_comm=("CPU",)``.

- :class:`Concurrent` — one request run by hdp's concurrent executor: the list-scheduled makespan
  of its device subgraphs (per-device serial, copies on crossing edges, a launch per subgraph).

- :class:`Energy` — joules of one request under HETERO's sequential semantics: every device of the
  target draws its idle power for the whole latency, and a device its active power instead while it
  computes its groups. So ``energy = P_idle · latency + Σ_d (active[d] - idle[d]) · compute[d]``
  (``P_idle``: the idle watts of all devices together; copies and subgraph overheads at idle power),
  which is the sequential latency of the same problem with each group's time on ``d`` weighted by
  ``P_idle + active[d] - idle[d]`` and every copy and overhead by ``P_idle``
  (:meth:`~hdp.placement.problem.PlacementProblem.as_latency`): every latency method places for it,
  and ``optimal`` is exact for it as it is for latency.

Placers read the objective from the problem; a method that cannot optimise one declares the
kinds it serves (:attr:`hdp.placers.options.PlacerOptions.serves`) and refuses the others.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
from msgspec import Meta


class _Objective(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="kind"):
    @classmethod
    def kind(cls) -> str:
        return cls.__struct_config__.tag

    def label(self) -> str:
        """One short phrase for tables and messages."""
        return self.kind()


class Latency(_Objective, tag="latency"):
    """The latency of one request under HETERO's sequential semantics (the default)."""


class Throughput(_Objective, tag="throughput"):
    """Seconds per request with ``requests`` requests in flight (see the module docstring)."""

    requests: Annotated[int, Meta(ge=1, le=4096, description="requests in flight, at least 1")] = 2
    #: share of a cut tensor's copy seconds its producer's device pays, once per tensor
    send: Annotated[float, Meta(ge=0, le=10)] = 0.0
    #: share of a cut tensor's copy seconds each distinct receiving device pays
    receive: Annotated[float, Meta(ge=0, le=10)] = 1.0
    #: devices whose communication is free (neither sending nor receiving costs them)
    free_comm: tuple[str, ...] = ()
    #: seconds each HETERO subgraph costs a served request beyond the subgraph overhead of one
    #: request's latency: the hand-over between the pipeline's stage executors (``hdp calibrate``
    #: fits it on placements served with requests in flight; 0 when not calibrated)
    handoff: Annotated[float, Meta(ge=0, le=10)] = 0.0
    #: a serving plan's costs (:mod:`hdp.placement.plan`), fitted by ``hdp calibrate`` on real devices:
    #: each device's stream efficiency (two streams serve ``2 E`` times one; devices left out: their
    #: kind's default) and the seconds hdp's runtime spends routing a request to a stage's replica
    #: (None: :data:`hdp.placement.plan.DISPATCH`)
    streams: tuple[tuple[str, Annotated[float, Meta(ge=0.5, le=1)]], ...] = ()
    dispatch: Annotated[float, Meta(ge=0, le=1)] | None = None

    def label(self) -> str:
        return f"throughput ({self.requests} in flight)"


class Concurrent(_Objective, tag="concurrent"):
    """The latency of one request run by hdp's concurrent executor (:mod:`hdp.runtime.placed.executor`):
    its device subgraphs at once, each device running one at a time
    (:meth:`~hdp.placement.simulate.Simulator.latency_concurrent`). ``launch`` seconds per subgraph
    (None: the cost table's subgraph overhead), ``handover`` per edge between subgraphs, ``request``
    per inference, ``convert`` per byte of a tensor crossing between two subgraphs, paid by the
    producer's device (out of the plugin's internal layout) and again by each consumer subgraph's
    (into it): what ``hdp calibrate`` measured of the executor on this host, when it did."""

    launch: Annotated[float, Meta(ge=0, le=10)] | None = None
    handover: Annotated[float, Meta(ge=0, le=10)] = 0.0
    request: Annotated[float, Meta(ge=0, le=10)] = 0.0
    convert: Annotated[float, Meta(ge=0, le=1e-6)] = 0.0

    def label(self) -> str:
        return "concurrent latency"


Watts = Annotated[float, Meta(ge=0, le=1e5, description="watts, at least 0")]


class Energy(_Objective, tag="energy"):
    """Joules of one request (see the module docstring): ``active`` and ``idle`` watts per device,
    in the problem's device order (:func:`energy_of` builds them from a target's devices)."""

    active: tuple[Watts, ...] = ()
    idle: tuple[Watts, ...] = ()

    def __post_init__(self):
        if len(self.active) != len(self.idle):
            raise ValueError(f"idle: {len(self.idle)} figures for {len(self.active)} active ones")
        for i, (a, b) in enumerate(zip(self.active, self.idle)):
            if not (0 <= b <= a):
                raise ValueError(f"idle: device {i} idles at {b:g} W, more than its {a:g} W active (or below 0)")

    def label(self) -> str:
        return "energy per request"

    def weights(self) -> tuple[float, list[float]]:
        """``(P_idle, [P_idle + active[d] - idle[d] per device])``: joules per second of a copy or
        overhead, and of compute on each device."""
        p0 = float(sum(self.idle))
        return p0, [p0 + a - b for a, b in zip(self.active, self.idle)]


#: The fields of :class:`Concurrent` that are the executor's own costs (``hdp calibrate`` measures
#: them; partition options and a placement's record carry them by these names).
EXECUTOR_COSTS = ("launch", "handover", "request", "convert")

Objective = Union[Latency, Throughput, Concurrent, Energy]
KINDS: dict[str, type] = {c.kind(): c for c in (Latency, Throughput, Concurrent, Energy)}

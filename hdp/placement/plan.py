"""Serving plans over a placement problem: stages × replicas × streams, and their price.

A *plan* cuts the tie groups into stages (each stage a subgraph: in a topological order of the
stages, every tensor goes from an earlier stage to a later one) and gives every stage one or more
*replicas*, each on a device with its streams (:class:`GroupPlan`). Its shape is named
(:func:`shape_of`): ``single`` (one stage, one replica, S streams), ``replicas`` (one stage on
several devices), ``pipeline`` (several stages, one replica with one stream each: what HETERO runs
from a placed model) and ``mixed`` (a pipeline with a replicated or multi-stream stage). The IR form,
with the stages' sub-models and blobs, is :class:`hdp.ir.plan.ServingPlan`.

The price (:class:`PlanPricer`, seconds per request at steady state with ``N`` requests in flight,
lower is better) extends the throughput model of :mod:`hdp.placement.simulate` to replicas and
streams::

    L[s, d]   = the load of stage s on device d: its groups' compute, each replicated chain it
                feeds once, receive × the copy of every tensor it gets from another stage, send ×
                every tensor it gives, one served subgraph overhead (subgraph overhead + hand-off)
    sp_d(S)   = S / (1 + a_d (S - 1)),  a_d = 1 / E_d - 1        (streams on one device)
    rate_r    = sp_d(S) / L[s, d]                                (replica r of s on d with S streams)
    period_s  = 1 / Σ_r rate_r + dispatch · [s has several replicas]
    λ_s       = Σ_r w_r · L[s, d_r] · S_r / sp(S_r) + dispatch · [...],   w_r = rate_r / Σ rate
    busy_c    = Σ_(replicas r on devices of compute resource c) w_r · L[s_r, d_r] / sp_c(S_c)
    period    = max(Σ_s λ_s / N,  max_s period_s,  max_c busy_c)

``E_d`` (:attr:`PlanDevices.efficiency`) is the device's *stream efficiency*: two streams serve
``2 E`` times one (two streams on two cores are not twice one stream that already used both;
``hdp calibrate`` fits it on real devices, :mod:`hdp.target.streams` gives the defaults). A
replicated stage is priced as its load over its replicas plus a ``dispatch`` cost per request
(hdp's runtime routes each request to a replica; what OpenVINO runs itself, streams of one compiled
model and a HETERO pipeline, costs none). Devices that share compute (a target's ``[[shares]]``,
``resource = "compute"``: ``virtual``'s CPU and CPU_B are the same cores) are one resource ``c``:
their replicas' work adds up against the resource's streams ``S_c`` (all streams of its replicas).
A plan fits when every device holds its replicas (each replica holds its stage's weights and state,
and S streams hold S times the state and activations) and every shared memory its devices.

**Hosts** (a problem with several :attr:`~hdp.placement.problem.PlacementProblem.hosts`): a tensor
a replica on device ``d`` receives from a stage whose replicas sit on other hosts costs the link
between the hosts (``latency + bytes / bandwidth``) in place of its copy, averaged over the sending
stage's replicas (requests are spread over them); a sender pays its slowest crossing. So ``L`` is a
load per replica then (:meth:`PlanPricer.host_loads`), and :meth:`PlanPricer.price` uses it; a
host's memory caps the bytes of all its devices together. One host: everything as above.

Nothing here imports openvino; the target's words come in as plain arrays (:class:`PlanDevices`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from hdp.placement.objective import Throughput
from hdp.placement.problem import PlacementProblem

SHAPES = ("single", "replicas", "pipeline", "mixed")
#: Seconds hdp's plan runtime spends routing one request to a replica of a stage (a Python hand-off
#: between threads: queue put/get and an infer-request start), when the target's calibration has none.
DISPATCH = 60e-6
#: Streams per replica the planner considers at most (and never more than the requests in flight).
MAX_STREAMS = 8


def speedup(efficiency: float, streams: int) -> float:
    """What ``streams`` streams serve in units of one stream on a device of stream efficiency
    ``efficiency`` (two serve ``2 efficiency``): ``S / (1 + (1/E - 1)(S - 1))``."""
    if streams <= 1:
        return float(max(streams, 0))
    a = 1.0 / max(float(efficiency), 1e-9) - 1.0
    return streams / (1.0 + a * (streams - 1))


@dataclass(frozen=True)
class Replica:
    """One copy of a stage: on device index ``device`` of the problem, with ``streams`` streams."""

    device: int
    streams: int = 1


def shape_of(replicas: tuple[tuple[Replica, ...], ...]) -> str:
    """The named shape of a plan with these replicas per stage (see the module docstring)."""
    if len(replicas) == 1:
        return "single" if len(replicas[0]) == 1 else "replicas"
    if all(len(r) == 1 and r[0].streams == 1 for r in replicas):
        return "pipeline"
    return "mixed"


@dataclass(frozen=True)
class GroupPlan:
    """A plan over a problem's tie groups: ``stage_of[g]`` (stages numbered in a topological order)
    and each stage's replicas."""

    stage_of: np.ndarray  # int64 per group
    replicas: tuple[tuple[Replica, ...], ...]

    @property
    def n_stages(self) -> int:
        return len(self.replicas)

    @property
    def shape(self) -> str:
        return shape_of(self.replicas)

    def representative(self) -> np.ndarray:
        """A device per group: each stage on its first replica's device (the placement HETERO
        runs for a pipeline, and what the check of a written plan compiles)."""
        first = np.array([r[0].device for r in self.replicas], np.int16)
        return first[np.asarray(self.stage_of, np.int64)] if len(self.stage_of) else np.zeros(0, np.int16)

    def key(self) -> tuple:
        return (np.asarray(self.stage_of, np.int64).tobytes(), self.replicas)

    def describe(self, devices) -> str:
        """``CPU x2 | GPU.0+GPU.1``: each stage's replicas (``xS``: streams), stages left to right."""
        return " | ".join("+".join(devices[r.device] + (f" x{r.streams}" if r.streams > 1 else "") for r in reps)
                          for reps in self.replicas)

    def to_text(self) -> str:
        """The plan as compact JSON (a placement's ``info["plan"]``): ``{"stages": [...], "replicas":
        [[[device, streams], ...], ...]}``."""
        return json.dumps({"stages": np.asarray(self.stage_of, np.int64).tolist(),
                           "replicas": [[[r.device, r.streams] for r in reps] for reps in self.replicas]},
                          separators=(",", ":"))

    @staticmethod
    def from_text(text: str, n_groups: int | None = None) -> "GroupPlan":
        """The inverse of :meth:`to_text`; ValueError when it is not one (or not of ``n_groups``)."""
        try:
            d = json.loads(text)
            stage_of = np.asarray(d["stages"], np.int64)
            reps = tuple(tuple(Replica(int(a), int(b)) for a, b in r) for r in d["replicas"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a plan record: {e}") from None
        if n_groups is not None and stage_of.shape != (n_groups,):
            raise ValueError(f"a plan of {stage_of.shape[0]} groups, the problem has {n_groups}")
        if stage_of.size and (stage_of.min() < 0 or stage_of.max() >= len(reps)):
            raise ValueError("a group's stage is not one of the plan's")
        return GroupPlan(stage_of, reps)

    @staticmethod
    def single(n_groups: int, device: int, streams: int = 1) -> "GroupPlan":
        return GroupPlan(np.zeros(n_groups, np.int64), ((Replica(device, streams),),))

    @staticmethod
    def from_placement(group_device) -> "GroupPlan":
        """The pipeline a placement is: one stage per device used, in the order the devices'
        first groups come (every device a stage; for a placement whose devices form an acyclic
        chain of blocks, as a contiguous split does)."""
        gd = np.asarray(group_device, np.int64)
        order = list(dict.fromkeys(gd.tolist()))
        idx = {d: s for s, d in enumerate(order)}
        return GroupPlan(np.array([idx[d] for d in gd.tolist()], np.int64),
                         tuple((Replica(int(d)),) for d in order))


@dataclass(frozen=True)
class PlanDevices:
    """What a plan's price needs of each device besides the problem (arrays in device order):
    its stream efficiency (two streams serve ``2 E`` times one; 0.5: no gain, 1: twice), the
    streams it may run, the compute resource and the memory it shares with other devices (equal
    ids: one resource), each shared memory's capacity (``inf``: none besides the devices' own) and
    the dispatch cost per request of a replicated stage."""

    efficiency: np.ndarray  # float per device, in [0.5, 1]
    max_streams: np.ndarray  # int per device
    compute: np.ndarray  # int per device: compute resource id
    memory: np.ndarray  # int per device: memory resource id
    memory_capacity: np.ndarray  # float per memory resource id
    dispatch: float = DISPATCH

    @staticmethod
    def independent(n_devices: int, efficiency: float = 0.5, max_streams: int = MAX_STREAMS,
                    dispatch: float = DISPATCH) -> "PlanDevices":
        """Devices that share nothing, each of ``efficiency``."""
        ids = np.arange(n_devices, dtype=np.int64)
        return PlanDevices(np.full(n_devices, float(efficiency)), np.full(n_devices, int(max_streams), np.int64),
                           ids, ids.copy(), np.full(n_devices, np.inf), float(dispatch))

    def compute_groups(self) -> list[list[int]]:
        """The devices of each compute resource, in device order of their first."""
        out: dict[int, list[int]] = {}
        for d, c in enumerate(self.compute.tolist()):
            out.setdefault(c, []).append(d)
        return list(out.values())


@dataclass
class PlanPrice:
    """What :meth:`PlanPricer.price` finds: the period (seconds per request) and its parts."""

    period: float
    latency: float  # one request's latency through the plan (Σ λ_s)
    stage_period: np.ndarray  # per stage
    resource_busy: dict[int, float]  # compute resource id -> its bound on the period
    memory: np.ndarray  # bytes per device
    feasible: bool
    over: list = field(default_factory=list)  # (what, bytes needed, capacity) of every overfilled one
    bound_by: str = ""  # "latency", "stage i", "resource DEV+DEV"

    @property
    def rate(self) -> float:
        return 1.0 / self.period if self.period > 0 else float("inf")


class PlanPricer:
    """Prices plans of one problem (see the module docstring); ``requests``: in flight (default:
    the problem's throughput objective's, else 2)."""

    def __init__(self, problem: PlacementProblem, devices: PlanDevices, requests: int | None = None):
        p = problem
        self.problem = p
        self.devs = devices
        thr = p.objective if isinstance(p.objective, Throughput) else Throughput()
        self.requests = int(requests if requests is not None else thr.requests)
        self.receive, self.send = float(thr.receive), float(thr.send)
        self.served_overhead = float(p.subgraph_overhead) + float(thr.handoff)
        self.free = np.array([n in thr.free_comm for n in p.devices], bool)
        st = p.structure
        self.time = np.where(p.allowed, p.time, np.inf)
        self.t_prod = st.t_prod.astype(np.int64)
        self.t_ptr = st.t_ptr.astype(np.int64)
        self.t_cons = st.t_cons.astype(np.int64)
        self.t_cost = np.asarray(p.t_cost, np.float64)
        self.t_per = np.repeat(np.arange(st.n_tensors, dtype=np.int64), np.diff(self.t_ptr))
        self.r_unit = np.repeat(np.arange(p.r_time.shape[0], dtype=np.int64), np.diff(p.r_ptr))
        self.r_groups = np.asarray(p.r_groups, np.int64)
        self.r_time = np.asarray(p.r_time, np.float64)
        needs = p.needs
        self.m_fixed, self.m_units, self.m_over = p.memory_terms()
        self.m_state = np.asarray(needs.state, np.float64)
        self.m_act = np.asarray(needs.activation, np.float64)
        self.u_unit = np.repeat(np.arange(needs.u_bytes.shape[0], dtype=np.int64), np.diff(needs.u_ptr))
        self.u_groups = np.asarray(needs.u_groups, np.int64)
        self.caps = np.asarray(p.caps, np.float64)
        self.hosts = p.hosts if p.multi_host else None

    # ------------------------------------------------------------------ per stage and device

    def stage_loads(self, stage_of: np.ndarray, n_stages: int) -> np.ndarray:
        """``L[s, d]``: seconds of one request stage ``s`` works on device ``d`` (``inf`` where a group
        of it may not run there)."""
        s_of = np.asarray(stage_of, np.int64)
        nd = self.problem.n_devices
        L = np.zeros((n_stages, nd))
        np.add.at(L, s_of, self.time)
        if self.r_unit.size:  # every replicated chain once per stage that feeds one of its groups
            key = np.unique(self.r_unit * n_stages + s_of[self.r_groups])
            np.add.at(L, key % n_stages, self.r_time[key // n_stages])
        if self.t_per.size:
            home = s_of[self.t_prod]
            cs = s_of[self.t_cons]
            cross = cs != home[self.t_per]
            recv = np.unique(self.t_per[cross] * n_stages + cs[cross])
            comm = np.zeros(n_stages)
            np.add.at(comm, recv % n_stages, self.receive * self.t_cost[recv // n_stages])
            if self.send:
                sent = np.unique(self.t_per[cross])
                np.add.at(comm, home[sent], self.send * self.t_cost[sent])
            L += np.where(self.free[None, :], 0.0, comm[:, None])
        L += self.served_overhead
        return L

    def stage_memory(self, stage_of: np.ndarray, n_stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(base[s, d], state[s], activation[s])``: the bytes one replica of stage ``s`` with one
        stream needs on device ``d`` (its overhead, weights at the device's precision, constants
        shared among its groups once, state, its largest activation), and the state and
        activation each further stream adds."""
        s_of = np.asarray(stage_of, np.int64)
        nd = self.problem.n_devices
        base = np.zeros((n_stages, nd))
        np.add.at(base, s_of, self.m_fixed)
        if self.u_unit.size:
            key = np.unique(self.u_unit * n_stages + s_of[self.u_groups])
            np.add.at(base, key % n_stages, self.m_units[key // n_stages])
        act = np.zeros(n_stages)
        np.maximum.at(act, s_of, self.m_act)
        state = np.bincount(s_of, weights=self.m_state, minlength=n_stages)
        base += act[:, None] + self.m_over[None, :]
        return base, state, act

    def host_loads(self, plan: GroupPlan) -> np.ndarray:
        """:meth:`stage_loads` with every crossing between hosts priced by the link between them
        (see the module docstring): ``L[s, d]`` for the replicas' devices of each stage."""
        ns = plan.n_stages
        L = self.stage_loads(plan.stage_of, ns)
        if self.hosts is None or not self.t_per.size or ns < 2:
            return L
        p = self.problem
        s_of = np.asarray(plan.stage_of, np.int64)
        home = s_of[self.t_prod]
        cs = s_of[self.t_cons]
        cross = cs != home[self.t_per]
        pairs = np.unique(self.t_per[cross] * ns + cs[cross])
        if not pairs.size:
            return L
        devs = [np.array([r.device for r in reps], np.int64) for reps in plan.replicas]
        L = np.array(L)
        sent_worst: dict[tuple[int, int], float] = {}
        for key in pairs.tolist():
            t, c = divmod(key, ns)
            h = int(home[t])
            src = devs[h]
            for d in devs[c].tolist():
                cost = p.transfer(np.full(src.size, t), src, np.full(src.size, d))
                if not self.free[d]:
                    L[c, d] += self.receive * (float(cost.mean()) - float(self.t_cost[t]))
                for e, x in zip(src.tolist(), cost.tolist()):
                    sent_worst[(t, e)] = max(sent_worst.get((t, e), -np.inf), x)
        if self.send:
            for (t, e), worst in sent_worst.items():
                if not self.free[e]:
                    L[int(home[t]), e] += self.send * (worst - float(self.t_cost[t]))
        return L

    # ------------------------------------------------------------------ the price

    def price(self, plan: GroupPlan, loads: np.ndarray | None = None) -> PlanPrice:
        """The plan's period and its parts (see the module docstring); ``loads``: the plan's
        :meth:`stage_loads` when the caller has them (on several hosts they are the plan's
        :meth:`host_loads`, which a multi-stage plan's price computes itself)."""
        ns = plan.n_stages
        if self.hosts is not None and ns > 1:
            loads = self.host_loads(plan)
        L = self.stage_loads(plan.stage_of, ns) if loads is None else loads
        devs = self.devs
        n = max(self.requests, 1)
        stage_period = np.zeros(ns)
        latency = 0.0
        busy: dict[int, float] = {}
        streams_on: dict[int, int] = {}
        eff_on: dict[int, float] = {}
        for s, reps in enumerate(plan.replicas):
            rates, lats, works = [], [], []
            for r in reps:
                load = float(L[s, r.device])
                sp = speedup(devs.efficiency[r.device], r.streams)
                rates.append(sp / load if load > 0 else np.inf)
                lats.append(load * r.streams / sp if sp > 0 else np.inf)
                works.append(load)
            total = float(np.sum(rates))
            delta = devs.dispatch if len(reps) > 1 else 0.0
            stage_period[s] = (1.0 / total if total > 0 else np.inf) + delta
            if not np.isfinite(total):  # a replica of zero load: the stage costs nothing
                stage_period[s] = delta
                w = [1.0 / len(reps)] * len(reps)
            else:
                w = [x / total for x in rates]
            latency += float(np.dot(w, lats)) + delta
            for r, wr, work in zip(reps, w, works):
                c = int(devs.compute[r.device])
                busy[c] = busy.get(c, 0.0) + wr * work
                streams_on[c] = streams_on.get(c, 0) + r.streams
                eff_on[c] = min(eff_on.get(c, 1.0), float(devs.efficiency[r.device]))
        resource = {c: b / speedup(eff_on[c], streams_on[c]) for c, b in busy.items()}
        parts = [("latency", latency / n)] + [(f"stage {s}", float(v)) for s, v in enumerate(stage_period)]
        parts += [(f"resource {c}", v) for c, v in resource.items()]
        bound_by, period = max(parts, key=lambda x: x[1]) if parts else ("", 0.0)
        mem, over = self.memory(plan)
        return PlanPrice(float(period), latency, stage_period, resource, mem, not over, over, bound_by)

    def memory(self, plan: GroupPlan) -> tuple[np.ndarray, list]:
        """(bytes per device, overfilled ``(what, bytes, capacity)``) of a plan: every replica holds
        its stage (S streams: S times its state and activation), a device's overhead once."""
        ns = plan.n_stages
        base, state, act = self.stage_memory(plan.stage_of, ns)
        nd = self.problem.n_devices
        mem = np.zeros(nd)
        held = np.zeros(nd, bool)
        for s, reps in enumerate(plan.replicas):
            for r in reps:
                extra = (r.streams - 1) * (state[s] + act[s])
                mem[r.device] += base[s, r.device] + extra - (self.m_over[r.device] if held[r.device] else 0.0)
                held[r.device] = True
        over = [(self.problem.devices[d], float(mem[d]), float(self.caps[d])) for d in range(nd)
                if mem[d] > self.caps[d] * (1 + 1e-12)]
        for m in np.unique(self.devs.memory):
            cap = float(self.devs.memory_capacity[m])
            on = np.flatnonzero(self.devs.memory == m)
            if np.isfinite(cap) and mem[on].sum() > cap * (1 + 1e-12):
                over.append(("+".join(self.problem.devices[d] for d in on), float(mem[on].sum()), cap))
        if self.hosts is not None:
            for i, name in enumerate(self.hosts.names):
                cap = float(self.hosts.capacity[i])
                on = float(mem[self.hosts.devices_of(i)].sum())
                if np.isfinite(cap) and on > cap * (1 + 1e-12):
                    over.append((f"host {name}", on, cap))
        return mem, over

    def period(self, plan: GroupPlan) -> float:
        """The plan's seconds per request (``inf`` when it does not fit)."""
        pr = self.price(plan)
        return pr.period if pr.feasible else np.inf

    def allowed(self, plan: GroupPlan) -> bool:
        """Every group allowed on every replica's device of its stage."""
        ok = self.problem.allowed
        s_of = np.asarray(plan.stage_of, np.int64)
        for s, reps in enumerate(plan.replicas):
            g = s_of == s
            if not all(ok[g, r.device].all() for r in reps):
                return False
        return True

    def acyclic(self, plan: GroupPlan) -> bool:
        """Every edge of the written model between placed ops goes to the same or a later stage."""
        st = self.problem.structure
        s_of = np.asarray(plan.stage_of, np.int64)
        g = st.group_of.astype(np.int64)
        a, b = g[st.h_src], g[st.h_dst]
        keep = (a >= 0) & (b >= 0)
        return bool((s_of[a[keep]] <= s_of[b[keep]]).all())

    def report(self, plan: GroupPlan) -> dict:
        """Simulated figures of a plan for a placement's ``info``: ``plan_period``, ``plan_shape``,
        ``plan`` (stages and replicas as text), ``plan_bound_by`` and ``plan_memory``."""
        pr = self.price(plan)
        dev = self.problem.devices
        return {"plan_period": pr.period, "plan_shape": plan.shape, "plan": plan.describe(dev),
                "plan_latency": pr.latency, "plan_bound_by": self.bound_text(pr, plan),
                "plan_fits": pr.feasible}

    def bound_text(self, pr: PlanPrice, plan: GroupPlan) -> str:
        """What bounds a plan's period, in words."""
        if pr.bound_by.startswith("resource "):
            c = int(pr.bound_by.split()[1])
            on = [self.problem.devices[d] for d in np.flatnonzero(self.devs.compute == c)]
            return f"the compute {'+'.join(on)} share"
        if pr.bound_by == "latency":
            return f"the latency of one request over the {self.requests} in flight"
        return pr.bound_by if plan.n_stages > 1 else "its replicas' rate"

"""``cp-sat``: placement and schedule for hdp's concurrent executor, solved by CP-SAT (OR-Tools).

The problem's tie groups (not a coarsened graph: the bound is a bound of the problem itself) are
placed and scheduled under the executor's semantics as the simulator prices them
(:meth:`~hdp.placement.simulate.Simulator.latency_concurrent`, :mod:`hdp.placement._kernels`):

- the executor's *subgraphs* are modelled exactly: ``fwd[g]`` and ``bwd[g]`` are the longest
  paths of :func:`~hdp.placement._kernels.concurrent_labels` (an edge counts 1 where it crosses
  devices, leaves a *sender* — a group with a consumer on another device — or, backwards, enters
  a *receiver*), and an edge joins one subgraph iff both ends share the device, ``fwd`` and
  ``bwd``; a subgraph is a connected region of such edges;
- a subgraph runs whole on its device, one at a time per device (two ``NoOverlap`` per device:
  the subgraphs, and the groups inside them): it starts at ``S`` once every input has arrived —
  its producer subgraph's end ``F`` plus ``handover`` per edge between subgraphs plus the copy
  time of an edge that crosses devices — pays ``launch`` once (one *payer* per subgraph, found
  by a spanning forest of its edges with depths, so no cycle can excuse a subgraph from it), then
  runs its groups; every output leaves at ``F``;
- the executor's per-byte conversions (``Concurrent.convert``) are not modelled: the model can
  only under-price a placement, so its bound stays a bound, and the simulator's price, which the
  cuts below use, includes them;
- Parameter/Result-only groups take no time and hand over for free; memory caps of the problem
  (weights and state per group, shared constants once per device, the largest activation) are
  constraints when some device has one; the makespan (plus the objective's ``request``) is
  minimised.

What the model does *not* copy is the executor's order: its lanes run the ready subgraphs of a
device earliest first, the lowest label among equals (the simulator's event loop), where CP-SAT
chooses the best order, idling a device when that pays. For a given placement the model's makespan
is therefore at most the simulator's, so CP-SAT's proven bound is a lower bound of the simulator's
optimum over every placement. The gap is closed by lazy cuts (logic-based Benders): every
placement CP-SAT proposes is priced by the simulator in a solution callback; when CP-SAT is
optimal but the executor runs its placement slower than CP-SAT scheduled it, each placement seen is
given the cut "this placement costs at least its simulated price" and CP-SAT solves again (warm
started from the best placement), until the optimum's placement is priced as scheduled — proven
optimal for the simulator — or the time runs out (the last bound still bounds the simulator's
optimum). Modelling the order itself (who is ready first, ties by label, no idling) as constraints
was tried: exact, but CP-SAT found no feasible schedule in 20 s for 12 groups with the devices
fixed.

The placement returned is the best *simulated* one among every solution CP-SAT found and the warm
start. ``info``: ``cp_sat_status`` (CP-SAT's last status, OPTIMAL or FEASIBLE...), ``rounds`` and
``cuts`` (of the loop above), ``cp_sat_objective`` and ``cp_sat_bound`` (seconds, the model's),
``concurrent`` (the simulator's price of the placement returned), ``gap`` = (price − bound) /
price, and ``proven_optimal`` = ``yes`` when the gap is within the model's time resolution
(``resolution_s``: times are integers of one tick, rounded down so the bound stays a bound; one
tick = the warm start's makespan / 10^7). A placement HETERO needs changed for its states
(:func:`hdp.placement.subgraphs.untangle`) is re-priced and said so (``untangled_groups``).

Options (:class:`~hdp.placers.options.CpSat`): ``time_limit`` (seconds for the whole method:
warm start, model and every round; default 60), ``workers`` (CP-SAT's search workers, default 2: one worker's search stalled for 30 s
on a 9-group problem two workers solve in 0.5 s; with more than one, the placement among equally
good ones, and any result cut short by the time limit, may differ run to run), ``warm_start``
(``heft``: heft's placement, or the best single device when that runs faster, and the executor's
run of it as the hint, its price as the horizon; ``none``).
"""

from __future__ import annotations

import time as _time
from collections import deque

import numpy as np

from hdp.base.errors import InputError
from hdp.placement import _kernels as K
from hdp.placement.objective import Concurrent
from hdp.placement.simulate import Simulator
from hdp.placement.subgraphs import untangle
from hdp.placers import PlaceContext, Placed, note_time
from hdp.placers.classical import heft
from hdp.placers.options import CpSat, Heft

#: the warm start's makespan in model ticks (the time resolution is its makespan / TICKS)
TICKS = 10**7


class ConcurrentModel:
    """The CP-SAT model of one problem under the :class:`Concurrent` objective (see the module docstring).

    ``x[g][d]``: group ``g`` on device ``d`` (allowed devices only); times are integer ticks of
    ``unit`` seconds; :meth:`hint` sets every variable from a placement as the executor runs it."""

    def __init__(self, problem, ub_seconds: float | None = None):
        from ortools.sat.python import cp_model

        ob = problem.objective
        if not isinstance(ob, Concurrent):
            raise ValueError("the CP-SAT model prices the concurrent objective")
        self.problem = p = problem
        self.sim = sim = Simulator(problem)
        self.m = m = cp_model.CpModel()
        k, nd = p.n_groups, p.n_devices
        self.k, self.nd = k, nd
        launch = sim.overhead if ob.launch is None else float(ob.launch)
        self.launch_s, self.handover_s, self.request_s = launch, float(ob.handover), float(ob.request)
        zero = sim.zero
        self.nz = nz = ~zero
        ok = p.allowed & np.isfinite(sim.time_full)
        self.ok = ok
        # edges of the kernels: u (subgraph labels, over non-zero groups) and p (timing, with copy seconds)
        ue = [(int(a), int(b)) for a, b in zip(sim.u_src, sim.u_dst) if nz[a] and nz[b]]
        pe = []
        for b in range(k):
            for j in range(sim.p_ptr[b], sim.p_ptr[b + 1]):
                pe.append((int(sim.p_src[j]), b, float(sim.p_cost[j])))
        self.ue = ue
        self.pe = [(a, b, c) for a, b, c in pe if nz[a] and nz[b]]
        self.zpairs = self._through_zero(pe)
        if ub_seconds is None or not np.isfinite(ub_seconds) or ub_seconds <= 0:
            ub_seconds = self._crude_bound()
        self.unit = ub_seconds / TICKS if ub_seconds > 0 else 1.0
        tick = self.ticks
        self.dur = np.where(ok, np.floor(np.where(ok, sim.time_full, 0.0) / self.unit), 0).astype(np.int64)
        self.launch_t, self.handover_t = tick(launch), tick(self.handover_s)
        self.horizon = int(np.where(ok, self.dur, 0).max(axis=1, initial=0)[nz].sum()) + \
            int(nz.sum()) * self.launch_t + sum(self.handover_t + tick(c) for _, _, c in self.pe) + 1
        self._build()

    # ------------------------------------------------------------------ building

    def ticks(self, seconds: float) -> int:
        """Seconds as model ticks, rounded down (so the model never overcharges)."""
        return int(np.floor(seconds / self.unit))

    def _crude_bound(self) -> float:
        """Seconds no placement's executor run exceeds: every group on its slowest allowed device
        with a launch, every edge paid, one after another."""
        t = np.where(self.ok, self.sim.time_full, 0.0).max(axis=1, initial=0.0)[self.nz].sum()
        return float(t + self.nz.sum() * self.launch_s + sum(self.handover_s + c for _, _, c in self.pe))

    def _through_zero(self, pe) -> list[tuple[int, int]]:
        """Pairs of non-zero groups joined by a path through zero-time groups only (cost 0)."""
        nz = self.nz
        if nz.all():
            return []
        zin: dict[int, set[int]] = {}
        out = set()
        for a, b, _ in sorted(pe, key=lambda e: e[1]):  # consumers in topological order
            src = {a} if nz[a] else zin.get(a, set())
            if nz[b]:
                out.update((s, b) for s in src if not nz[a])
            else:
                zin.setdefault(b, set()).update(src)
        return sorted(out)

    def _build(self) -> None:
        m, k, nd, ok, nz = self.m, self.k, self.nd, self.ok, self.nz
        H = self.horizon
        n_nz = int(nz.sum())
        mem = self.problem.memory_binds
        self.x = x = [dict() for _ in range(k)]
        for g in range(k):
            if not (nz[g] or mem):
                continue
            for d in np.flatnonzero(ok[g]):
                x[g][int(d)] = m.new_bool_var(f"x{g}_{d}")
            m.add_exactly_one(x[g].values())
        G = [int(g) for g in np.flatnonzero(nz)]
        nv = lambda lo, hi, name: m.new_int_var(lo, hi, name)  # noqa: E731
        self.S = {g: nv(0, H, f"S{g}") for g in G}  # subgraph start
        self.F = {g: nv(0, H, f"F{g}") for g in G}  # subgraph end
        self.s = {g: nv(0, H, f"s{g}") for g in G}  # the group's own run
        self.e = {g: nv(0, H, f"e{g}") for g in G}
        self.fwd = {g: nv(0, n_nz, f"fwd{g}") for g in G}
        self.bwd = {g: nv(0, n_nz, f"bwd{g}") for g in G}
        self.depth = {g: nv(0, n_nz, f"depth{g}") for g in G}
        self.L = {g: m.new_bool_var(f"L{g}") for g in G}  # pays the subgraph's launch
        self.sender = {g: m.new_bool_var(f"snd{g}") for g in G}
        self.receiver = {g: m.new_bool_var(f"rcv{g}") for g in G}
        self.M = nv(0, H, "makespan")
        self.cross, self.same, self.eqf, self.eqb, self.par = {}, {}, {}, {}, {}
        succ: dict[int, list] = {g: [] for g in G}
        pred: dict[int, list] = {g: [] for g in G}
        for a, b in self.ue:
            c = self._cross(a, b)
            succ[a].append((b, c))
            pred[b].append((a, c))
        for g in G:
            outs = [c for _, c in succ[g]]
            ins = [c for _, c in pred[g]]
            self._or(self.sender[g], outs)
            self._or(self.receiver[g], ins)
        for g in G:  # the longest paths of concurrent_labels
            m.add_max_equality(self.fwd[g], [0] + [self.fwd[a] + self.sender[a] for a, _ in pred[g]])
            m.add_max_equality(self.bwd[g], [0] + [self.bwd[b] + self.receiver[b] for b, _ in succ[g]])
        into: dict[int, list] = {g: [] for g in G}
        for a, b in self.ue:
            c = self.cross[a, b]
            f = self.eqf[a, b] = m.new_bool_var(f"eqf{a}_{b}")
            m.add(self.fwd[b] <= self.fwd[a]).only_enforce_if(f)
            m.add(self.fwd[b] >= self.fwd[a] + 1).only_enforce_if(~f)
            w = self.eqb[a, b] = m.new_bool_var(f"eqb{a}_{b}")
            m.add(self.bwd[a] <= self.bwd[b]).only_enforce_if(w)
            m.add(self.bwd[a] >= self.bwd[b] + 1).only_enforce_if(~w)
            s = self.same[a, b] = m.new_bool_var(f"same{a}_{b}")
            m.add_bool_and([~c, f, w]).only_enforce_if(s)
            m.add_bool_or([c, ~f, ~w]).only_enforce_if(~s)
            # one subgraph: one start, one end; the consumer's run after the producer's
            m.add(self.S[a] == self.S[b]).only_enforce_if(s)
            m.add(self.F[a] == self.F[b]).only_enforce_if(s)
            # a spanning forest of the subgraph's edges: every group but its payer has a parent
            for child, parent in ((b, a), (a, b)):
                q = self.par[parent, child] = m.new_bool_var(f"par{parent}_{child}")
                m.add_implication(q, s)
                m.add(self.depth[child] >= self.depth[parent] + 1).only_enforce_if(q)
                into[child].append(q)
        for g in G:
            m.add_bool_or([self.L[g]] + into[g])
        same_label = self._labels_for_timing()
        for a, b, cost in self.pe:
            cr = self.cross.get((a, b))
            if cr is None:
                cr = self._cross(a, b)
            sl = same_label[a, b]
            delay = self.handover_t + self.ticks(cost) * cr
            m.add(self.S[b] >= self.F[a] + delay).only_enforce_if(~sl)
            m.add(self.s[b] >= self.e[a])  # either way (another subgraph: after its end): the critical path
        for a, b in self.zpairs:
            m.add(self.S[b] >= self.F[a])

        self.y = [dict() for _ in range(k)]
        self.size = {}
        for d in range(nd):
            runs, subs = [], []
            for g in G:
                if d not in x[g]:
                    continue
                runs.append(m.new_optional_interval_var(self.s[g], int(self.dur[g, d]), self.e[g], x[g][d],
                                                        f"run{g}_{d}"))
                y = self.y[g][d] = m.new_bool_var(f"y{g}_{d}")  # pays the launch on d
                m.add_bool_and([self.L[g], x[g][d]]).only_enforce_if(y)
                m.add_bool_or([~self.L[g], ~x[g][d]]).only_enforce_if(~y)
                size = self.size[g, d] = m.new_int_var(0, H, f"sz{g}_{d}")
                subs.append(m.new_optional_interval_var(self.S[g], size, self.F[g], y, f"sub{g}_{d}"))
            m.add_no_overlap(runs)
            m.add_no_overlap(subs)
            # redundant, for the linear relaxation's bound: a device's work fits in the makespan
            m.add(self.M >= sum(int(self.dur[g, d]) * x[g][d] for g in G if d in x[g])
                  + self.launch_t * sum(self.y[g][d] for g in G if d in self.y[g]))
        for g in G:
            m.add(self.s[g] >= self.S[g] + self.launch_t)
            m.add(self.e[g] <= self.F[g])
            m.add(self.M >= self.F[g])
        if mem:
            self._memory()
        m.minimize(self.M)

    def _cross(self, a: int, b: int):
        """The literal 'a and b on different devices' (made once per pair)."""
        key = (a, b)
        if key in self.cross:
            return self.cross[key]
        m, x = self.m, self.x
        c = self.cross[key] = m.new_bool_var(f"cross{a}_{b}")
        for d in range(self.nd):
            xa, xb = x[a].get(d), x[b].get(d)
            if xa is not None and xb is not None:
                m.add_bool_or([~xa, ~xb]).only_enforce_if(c)
                m.add(xa == xb).only_enforce_if(~c)
            elif xa is not None:
                m.add_implication(xa, c)
            elif xb is not None:
                m.add_implication(xb, c)
        return c

    def _or(self, target, lits) -> None:
        if not lits:
            self.m.add(target == 0)
            return
        self.m.add_max_equality(target, lits)

    def _labels_for_timing(self) -> dict:
        """For each timing edge, the literal 'both ends in one subgraph' (absent: never). A timing
        edge that is no label edge (it runs through a replicated chain) compares the subgraphs'
        payers (``cid``: the payer's index, equal along joined edges)."""
        out = {(a, b): self.same[a, b] for a, b in self.ue}
        extra = [(a, b) for a, b, _ in self.pe if (a, b) not in out]
        if not extra:
            return out
        m = self.m
        cid = {g: m.new_int_var(0, self.k - 1, f"cid{g}") for g in self.S}
        for g in cid:
            m.add(cid[g] == g).only_enforce_if(self.L[g])
        for (a, b), s in self.same.items():
            m.add(cid[a] == cid[b]).only_enforce_if(s)
        for a, b in extra:
            sl = m.new_bool_var(f"sl{a}_{b}")
            m.add(cid[a] == cid[b]).only_enforce_if(sl)
            m.add(cid[a] != cid[b]).only_enforce_if(~sl)
            out[a, b] = sl
        self.cid = cid
        return out

    def _memory(self) -> None:
        """Every device's bytes within its capacity (see :func:`hdp.placement._kernels.device_memory`)."""
        m, x, sim = self.m, self.x, self.sim
        fixed = np.ceil(sim.m_fixed).astype(np.int64)
        act = np.ceil(sim.m_act).astype(np.int64)
        ub = np.ceil(sim.mu_bytes).astype(np.int64)
        for d in range(self.nd):
            cap = sim.capacity[d]
            if not np.isfinite(cap):
                continue
            room = cap - sim.m_overhead[d]  # a device that runs any group pays its overhead
            if room < 0:
                for g in range(self.k):
                    if d in x[g]:
                        m.add(x[g][d] == 0)
                continue
            terms = [int(fixed[g, d]) * x[g][d] for g in range(self.k) if d in x[g] and fixed[g, d]]
            peak = m.new_int_var(0, int(act.max(initial=0)), f"peak{d}")
            for g in range(self.k):
                if d in x[g] and act[g]:
                    m.add(peak >= int(act[g]) * x[g][d])
            for u in range(ub.shape[0]):
                gs = [int(g) for g in sim.mu_grp[sim.mu_ptr[u]:sim.mu_ptr[u + 1]] if d in x[int(g)]]
                if not gs or not ub[u, d]:
                    continue
                w = m.new_bool_var(f"unit{u}_{d}")
                for g in gs:
                    m.add_implication(x[g][d], w)
                terms.append(int(ub[u, d]) * w)
            m.add(sum(terms) + peak <= int(np.floor(room)))

    # ------------------------------------------------------------------ reading and hinting

    def placement(self, value, fill: np.ndarray) -> np.ndarray:
        """The device per group of a solution (``value``: a literal's value); groups with no
        variable (zero-time groups when no memory binds) take the device of a neighbour."""
        gd = np.asarray(fill, np.int64).copy()
        for g in range(self.k):
            for d, v in self.x[g].items():
                if value(v):
                    gd[g] = d
                    break
        return self._neighbours(gd)

    def _neighbours(self, gd: np.ndarray) -> np.ndarray:
        """Zero-time groups without a variable on the device of their first non-zero neighbour
        (where allowed): they cost nothing anywhere, and there they add no cut."""
        sim = self.sim
        for g in np.flatnonzero(~self.nz):
            if self.x[g]:
                continue
            nbrs = list(sim.p_src[sim.p_ptr[g]:sim.p_ptr[g + 1]]) + list(sim.s_dst[sim.s_ptr[g]:sim.s_ptr[g + 1]])
            for h in nbrs:
                if self.nz[h] and self.problem.allowed[g, gd[h]]:
                    gd[g] = gd[h]
                    break
        return gd

    def executor_schedule(self, gd: np.ndarray) -> dict:
        """The executor's run of placement ``gd`` in model ticks: per group its subgraph's start and
        end and its own run (groups of a subgraph one after another in index order after the
        launch), subgraphs started earliest first per device like
        :func:`~hdp.placement._kernels.concurrent_makespan`; and the labels' ``fwd``/``bwd``."""
        sim, k = self.sim, self.k
        eff = np.asarray(gd, np.int64)
        label = np.empty(k, np.int64)
        parent, fwd, bwd = (np.empty(k, np.int64) for _ in range(3))
        n_lab = K.concurrent_labels(eff, sim.zero, sim.u_src, sim.u_dst, label, parent, fwd, bwd)
        nz = self.nz
        lab_dev = np.full(n_lab, -1, np.int64)
        lab_time = np.zeros(n_lab, np.int64)
        for g in np.flatnonzero(nz):
            lab_dev[label[g]] = eff[g]
            lab_time[label[g]] += self.dur[g, eff[g]]
        edges = [[] for _ in range(n_lab)]
        pending = np.zeros(n_lab, np.int64)
        for b in range(k):
            for j in range(sim.p_ptr[b], sim.p_ptr[b + 1]):
                a = int(sim.p_src[j])
                if label[a] == label[b]:
                    continue
                c = 0
                if nz[a] and nz[b]:
                    c = self.handover_t + (self.ticks(float(sim.p_cost[j])) if eff[a] != eff[b] else 0)
                edges[label[a]].append((label[b], c))
                pending[label[b]] += 1
        ready = np.zeros(n_lab, np.int64)
        avail = np.zeros(self.nd, np.int64)
        start = np.zeros(n_lab, np.int64)
        end = np.zeros(n_lab, np.int64)
        done = np.zeros(n_lab, bool)
        big = np.iinfo(np.int64).max
        for _ in range(n_lab):
            cand = np.where(lab_dev >= 0, np.maximum(ready, avail[np.maximum(lab_dev, 0)]), ready)
            cand = np.where(done | (pending > 0), big, cand)
            a = int(np.argmin(cand))
            if cand[a] == big:
                raise AssertionError("the executor's subgraphs have a cycle")
            done[a] = True
            start[a] = cand[a]
            end[a] = start[a] + (self.launch_t + lab_time[a] if lab_dev[a] >= 0 else 0)
            if lab_dev[a] >= 0:
                avail[lab_dev[a]] = end[a]
            for b, c in edges[a]:
                ready[b] = max(ready[b], end[a] + c)
                pending[b] -= 1
        s, e = {}, {}
        at = start + self.launch_t
        for g in np.flatnonzero(nz):
            la = label[g]
            s[int(g)] = int(at[la])
            at[la] += self.dur[g, eff[g]]
            e[int(g)] = int(at[la])
        return {"label": label, "fwd": fwd, "bwd": bwd, "start": start, "end": end, "s": s, "e": e,
                "makespan": int(end.max(initial=0))}

    def hint(self, gd: np.ndarray) -> int:
        """Hint every variable with the executor's run of ``gd`` (feasible in the model); returns
        its makespan in ticks."""
        m, eff = self.m, np.asarray(gd, np.int64)
        run = self.executor_schedule(eff)
        label, fwd, bwd = run["label"], run["fwd"], run["bwd"]
        m.clear_hints()
        for g in range(self.k):
            for d, v in self.x[g].items():
                m.add_hint(v, int(eff[g] == d))
        G = list(self.S)
        payer = {}
        for g in G:  # the payer: the first group of its subgraph
            payer.setdefault(int(label[g]), g)
        same = {(a, b): bool(label[a] == label[b]) for a, b in self.ue}
        snd = {g: False for g in G}
        rcv = {g: False for g in G}
        for (a, b), c in self.cross.items():
            v = bool(eff[a] != eff[b])
            m.add_hint(c, v)
            if (a, b) in same and v:
                snd[a] = rcv[b] = True
        depth, par = self._forest(G, same, label, payer)
        for g in G:
            la = int(label[g])
            m.add_hint(self.S[g], int(run["start"][la]))
            m.add_hint(self.F[g], int(run["end"][la]))
            m.add_hint(self.s[g], run["s"][g])
            m.add_hint(self.e[g], run["e"][g])
            m.add_hint(self.fwd[g], int(fwd[g]))
            m.add_hint(self.bwd[g], int(bwd[g]))
            m.add_hint(self.depth[g], depth[g])
            m.add_hint(self.L[g], bool(payer[la] == g))
            m.add_hint(self.sender[g], snd[g])
            m.add_hint(self.receiver[g], rcv[g])
            for d, y in self.y[g].items():
                m.add_hint(y, bool(payer[la] == g and eff[g] == d))
                m.add_hint(self.size[g, d], int(run["end"][la] - run["start"][la]))
            if hasattr(self, "cid"):
                m.add_hint(self.cid[g], payer[la])
        for (a, b), s in self.same.items():
            m.add_hint(s, same[a, b])
            m.add_hint(self.eqf[a, b], bool(fwd[a] == fwd[b]))
            m.add_hint(self.eqb[a, b], bool(bwd[a] == bwd[b]))
        for key, q in self.par.items():
            m.add_hint(q, key in par)
        m.add_hint(self.M, run["makespan"])
        return run["makespan"]

    def _forest(self, G, same, label, payer):
        """Depths and parent edges of a breadth-first forest of each subgraph from its payer."""
        adj: dict[int, list[int]] = {g: [] for g in G}
        for (a, b), s in same.items():
            if s:
                adj[a].append(b)
                adj[b].append(a)
        depth = {g: 0 for g in G}
        par = set()
        seen = set()
        for g in G:
            if payer[int(label[g])] != g:
                continue
            seen.add(g)
            q = deque([g])
            while q:
                u = q.popleft()
                for v in adj[u]:
                    if v not in seen:
                        seen.add(v)
                        depth[v] = depth[u] + 1
                        par.add((u, v))
                        q.append(v)
        return depth, par


def cp_sat(o: CpSat, ctx: PlaceContext) -> Placed:
    """Placement for the concurrent executor solved by CP-SAT (see the module docstring)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:  # pragma: no cover - a dependency of hdp
        raise InputError("cp-sat needs OR-Tools: pip install ortools") from None
    p = ctx.problem
    sim = Simulator(p)
    k = p.n_groups
    if not k:
        return Placed(np.zeros(0, np.int16))
    t0 = _time.perf_counter()
    deadline = _time.monotonic() + float(o.time_limit)
    warm, warm_cost, warm_name = None, np.inf, "none"
    if o.warm_start == "heft":
        cands = [(f"single:{d}", p.single(j).astype(np.int64)) for j, d in enumerate(p.devices)
                 if p.allowed[:, j].all() and sim.feasible(p.single(j))]
        try:
            cands.insert(0, ("heft", np.asarray(heft(Heft(), ctx).group_device, np.int64)))
        except InputError:  # heft found no placement within the memory caps; CP-SAT may
            pass
        if cands:  # heft's placement, or a single device where one runs faster
            warm_name, warm = min(cands, key=lambda c: sim.cost(c[1]))
            warm_cost = sim.cost(warm)
    model = ConcurrentModel(p, warm_cost if warm is not None else None)
    req = model.request_s
    fill = warm if warm is not None else np.argmax(p.allowed, axis=1).astype(np.int64)
    timed = [g for g in range(k) if model.nz[g]]

    def price_ticks(cost: float) -> int:  # a placement's simulated price as a bound of its model makespan
        return int(np.floor((cost - req) / model.unit))

    if warm is not None:
        hint_ticks = model.hint(warm)
        model.m.add(model.M <= max(hint_ticks, price_ticks(warm_cost) + 1))  # nothing slower than the warm start
    note_time("cp-sat model", _time.perf_counter() - t0)

    best = {"gd": warm, "cost": warm_cost}
    seen: dict[tuple, float] = {}  # placements of the timed groups CP-SAT proposed -> simulated price

    class Incumbents(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            gd = model.placement(self.boolean_value, fill)
            c = sim.cost(gd)
            seen[tuple(int(gd[g]) for g in timed)] = c
            if c < best["cost"] or best["gd"] is None:
                best.update(gd=gd, cost=c)

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = int(o.workers)
    cut: set[tuple] = set()
    bound_t, rounds, status = 0.0, 0, cp_model.UNKNOWN
    objective_t = None
    t1 = _time.perf_counter()
    while True:
        left = deadline - _time.monotonic()
        if left <= 0:
            break
        solver.parameters.max_time_in_seconds = left
        rounds += 1
        status = solver.solve(model.m, Incumbents())
        if status == cp_model.MODEL_INVALID:
            raise AssertionError(f"cp-sat built an invalid model: {model.m.validate()}")
        if status == cp_model.INFEASIBLE:
            break
        bound_t = max(bound_t, float(solver.best_objective_bound))
        if status != cp_model.OPTIMAL:
            break
        objective_t = float(solver.objective_value)
        if best["cost"] - (req + objective_t * model.unit) <= _tolerance(model):
            break  # the executor runs the best placement as fast as CP-SAT's best schedule: proven
        # lazy cuts: CP-SAT's schedule of these placements is faster than the executor's run of them
        new = [(pl, c) for pl, c in seen.items() if pl not in cut]
        if not new:
            break
        for pl, c in new:
            cut.add(pl)
            model.m.add(model.M >= price_ticks(c)).only_enforce_if([model.x[g][d] for g, d in zip(timed, pl)])
        if best["gd"] is not None:
            model.hint(best["gd"])
    note_time("cp-sat solve", _time.perf_counter() - t1)
    name = solver.status_name(status)
    if status == cp_model.INFEASIBLE and best["gd"] is None:
        raise InputError("cp-sat: no placement fits the devices' memory (CP-SAT proved it infeasible)")
    gd = best["gd"]
    if gd is None:
        raise InputError(f"cp-sat: no placement found within {o.time_limit:g} s ({name}) and no warm start; "
                         f"raise time_limit or use warm_start=heft")
    if status == cp_model.INFEASIBLE:  # every placement is cut off by its own simulated price: the best is optimal
        bound_t, name = max(bound_t, price_ticks(best["cost"])), "OPTIMAL"
    bound = req + bound_t * model.unit
    info = {"cp_sat_status": name, "cp_sat_bound": bound, "workers": int(o.workers),
            "time_limit": float(o.time_limit), "solutions": len(seen), "rounds": rounds, "cuts": len(cut),
            "resolution_s": model.unit, "warm_start": warm_name}
    if objective_t is not None:
        info["cp_sat_objective"] = req + objective_t * model.unit
    if warm is not None:
        info["warm_start_s"] = warm_cost

    gd2, moved = untangle(p, gd)
    gd2 = np.asarray(gd2, np.int64)
    cost = sim.cost(gd2)
    if moved:
        info["untangled_groups"] = moved
        info["untangled_from_s"] = f"{best['cost']:.6g}"
    info["gap"] = max(0.0, (cost - bound) / cost) if cost > 0 else 0.0
    info["proven_optimal"] = "yes" if name == "OPTIMAL" and cost - bound <= _tolerance(model) else "no"
    info.update(groups=k, **sim.report(gd2))
    return Placed(gd2.astype(np.int16), info)


def _tolerance(model: ConcurrentModel) -> float:
    """Seconds the model's rounding down may leave between a schedule and its simulated price: a
    tick per term of a path (a group, a launch, an edge)."""
    return 3 * (int(model.nz.sum()) + 1) * model.unit

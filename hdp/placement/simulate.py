"""The simulator: latency of a placement from the cost table, without running anything.

It prices a device per tie group of a :class:`~hdp.placement.problem.PlacementProblem` (the
groups are those of :mod:`hdp.placement.structure`: constant data is folded into its consumers,
Parameters and Results sit with their neighbours). The price is a function of the device of every
op alone: two placements that put every op on the same device cost the same, whichever ties
grouped them.

Sequential semantics (what HETERO does for one inference request: its subgraphs run one after
another)::

    latency = Σ_g time[g, dev[g]]                                   (compute)
            + Σ_(replicated unit u, device d running a group it feeds) r_time[u, d]
            + Σ_(tensor t, device d) link_latency + bytes_t / link_bandwidth   (copies)
            + subgraph_overhead × number of subgraphs

The link terms come from the cost table: the target's ``[link]`` guess, or — after ``hdp calibrate``
on a real target — the boundary model fitted to measured placements on this host (the ``boundary``
pass, :mod:`hdp.runtime.costs.calibrate`), which also corrects each device's profiled op times.

- A tensor is one output port of one placed op. It is copied once to every device, other than
  its producer's, on which some group consumes it (two consumers on the same other device: one
  copy). Constant data is never copied (each consumer has its own).
- Subgraphs are the connected components of the groups linked by same-device edges. HETERO
  splits components whose mutual dependencies are cyclic (device A feeding B feeding back into
  the same A component, as in a residual block with the branch on B); here such components are
  split by *stage*, the number of device changes on the longest path reaching a group, which is
  always acyclic. This can differ from HETERO's cycle breaking by a subgraph on graphs with
  nested cycles. A group that only holds a Parameter or Result is no subgraph.

Throughput (:meth:`Simulator.loads`, :meth:`Simulator.period`; the objective
:class:`~hdp.placement.objective.Throughput`): with ``N`` requests in flight HETERO pipelines
them stage by stage, one stage per device at a time, so a request completes every::

    period = max((latency + handoff × subgraphs) / N, max_d load[d])
    load[d] = Σ_(g on d) time[g, d] + Σ_(replicated unit u used on d) r_time[u, d]
            + receive × Σ_(tensor t copied to d) copy_t + send × Σ_(tensor t d sends) copy_t
            + (subgraph_overhead + handoff) × (subgraphs on d)

(``handoff``: what a subgraph costs a served request beyond one request's latency, the hand-over
between HETERO's stage executors; :class:`~hdp.placement.objective.Throughput`'s, fitted by ``hdp
calibrate``.)

(copies on ``free_comm`` devices cost them nothing). :meth:`Simulator.cost` is the problem's
objective in seconds per request (latency, or the period), lower is better;
:meth:`Simulator.memory` the bytes per device (:mod:`hdp.placement.memory`) and
:meth:`Simulator.feasible` whether they fit the capacities.

**Shared DRAM** (:meth:`Simulator.dram_seconds`): devices of one SoC (a Core Ultra's CPU, iGPU and
NPU) draw on one memory. When they run at once -- requests in flight, the parallel what-if, the
concurrent executor -- a request cannot take less than the seconds the shared memory needs for the
bytes every group moves on it (``Σ bytes / bandwidth`` over the groups on the share's devices, the
busiest share), so those semantics take the larger of their own figure and that one. Each device's
roofline already holds its own bandwidth; HETERO's sequential latency (one device at a time) has
no such term. The bytes are the cost table's (``Costs.op_dram``, modeled devices), the shares the
target's ``[[shares]]`` resource = "memory" with a ``bandwidth``.

**Energy** (:class:`~hdp.placement.objective.Energy`): :meth:`Simulator.cost` is the joules of one
request, the sequential latency of the problem weighted by watts
(:meth:`~hdp.placement.problem.PlacementProblem.as_latency`); :meth:`Simulator.energy` reckons the
same from the latency and the seconds each device computes.

**Hosts** (a problem with :attr:`~hdp.placement.problem.PlacementProblem.hosts`): a copy between
devices of two hosts costs the link between them (``latency + bytes / bandwidth``) in place of
``t_cost`` (the sequential latency's copies, and in the throughput loads each receiver's copy and the
sender's, the slowest of its crossings); a host's memory caps the bytes of all its devices
(:meth:`Simulator.feasible`, :meth:`Simulator.over`). The kernels price every copy by ``t_cost`` and
:meth:`Simulator.host_terms` adds the difference, so a one-host problem is priced as before, bit for
bit. The parallel and concurrent semantics (one process, devices of one host) have no host term.

Parallel semantics (:meth:`Simulator.latency_parallel`, for what-if analysis) let devices run
concurrently: list scheduling in topological order, per-device ready times, transfer delays on
crossing edges (no link congestion), each subgraph's overhead paid once before its first group.

Concurrent semantics (:meth:`Simulator.latency_concurrent`) are those of hdp's own executor
(:mod:`hdp.runtime.placed.executor`): the groups are cut into the executor's subgraphs
(:func:`~hdp.placement._kernels.concurrent_labels`), each runs whole on its device, one at a time
per device, starting when its inputs have arrived; ``launch`` seconds per subgraph and
``handover`` seconds per edge between subgraphs, plus the copy time of edges crossing devices, and
``convert`` seconds per byte of each tensor a subgraph receives or hands over, on its own device
(a CPU-plugin sub-model converts its plain inputs and outputs from and to its blocked layout:
ResNet-50 cut into 13 sub-models ran 7 ms, 21 %, slower in sum than whole, 4.7 ms of it in
Reorder nodes). The op-level what-if above is a lower bound of it (with ``convert`` 0): a subgraph
hands its outputs over at its end.
"""

from __future__ import annotations

import numpy as np

from hdp.placement import _kernels as K
from hdp.placement.memory import size_text
from hdp.placement.objective import Concurrent, Energy, Throughput
from hdp.placement.problem import PlacementProblem

#: The keys of :meth:`Simulator.report` every placement has; a placement's ``info`` holds them for the
#: final placement only.
SIMULATED_KEYS = ("simulated", "compute", "copy", "subgraphs", "lower_bound")


class Simulator:
    """Latency of device-per-group vectors of one problem.

    Build once (O(groups + tensors)); then ``latency`` costs O(groups + edges) per placement in
    Numba. Device indices refer to ``problem.devices``.
    """

    def __init__(self, problem: PlacementProblem):
        st = problem.structure
        k = st.n_groups
        self.problem = problem
        self.devices = problem.devices
        self.time = np.ascontiguousarray(problem.time)
        #: per group, its time with the whole of the replicated chains it feeds: for the parallel
        #: what-if and HEFT's list scheduling, which have no notion of a copy shared on a device
        self.time_full = np.ascontiguousarray(problem.time_with_copies())
        self.r_ptr = problem.r_ptr.astype(np.int64)
        self.r_grp = problem.r_groups.astype(np.int64)
        self.r_time = np.ascontiguousarray(problem.r_time, np.float64)
        self.overhead = float(problem.subgraph_overhead)
        self.res_src = np.full(k, -1, np.int64)
        self.counted = np.ascontiguousarray(st.counted)
        self.zero = ~self.counted
        self.t_ptr = st.t_ptr.astype(np.int64)
        self.t_prod = st.t_prod.astype(np.int64)
        self.t_cons = st.t_cons.astype(np.int64)
        self.t_cost = np.ascontiguousarray(problem.t_cost, np.float64)
        #: bytes the executor converts per tensor crossing its sub-models (``Concurrent.convert``)
        self.t_bytes = np.ascontiguousarray(st.t_bytes if problem.convert_bytes is None else problem.convert_bytes,
                                            np.float64)
        self.u_src = np.repeat(np.arange(k, dtype=np.int64), np.diff(st.g_ptr))
        self.u_dst = st.g_idx.astype(np.int64)
        # the contracted graph's edges, each with the copy seconds of the tensors it carries
        # (every edge carries one: it comes from a placed producer's output consumed elsewhere)
        kk = max(k, 1)
        per_cons = np.repeat(np.arange(st.n_tensors), np.diff(self.t_ptr))
        uniq, inv = np.unique(self.t_prod[per_cons] * kk + self.t_cons, return_inverse=True)
        cost = np.bincount(inv.reshape(-1), weights=self.t_cost[per_cons], minlength=uniq.shape[0])
        conv = np.bincount(inv.reshape(-1), weights=self.t_bytes[per_cons], minlength=uniq.shape[0])
        e_src, e_dst = uniq // kk, uniq % kk
        order = np.lexsort((e_src, e_dst))
        self.p_src, self.p_cost = e_src[order], cost[order]
        #: per edge, the bytes a cut there converts on each side (``Concurrent.convert``; for heft)
        self.p_convert = conv[order]
        self.p_ptr = np.zeros(k + 1, np.int64)
        np.cumsum(np.bincount(e_dst, minlength=k), out=self.p_ptr[1:])
        self.s_dst, self.s_cost, self.s_convert = e_dst, cost, conv  # uniq is sorted by source
        self.s_ptr = np.zeros(k + 1, np.int64)
        np.cumsum(np.bincount(e_src, minlength=k), out=self.s_ptr[1:])
        self._eff = np.empty(k, np.int64)
        self._stamp = np.empty(len(self.devices), np.int64)
        self._label = np.empty(k, np.int64)
        self._parent = np.empty(k, np.int64)
        self._label2 = np.empty(k, np.int64)
        self._stage = np.empty(k, np.int64)
        self._comp0 = np.empty(k, np.int64)
        self._flags = np.empty(k, np.bool_)
        self._seen = np.empty(k, np.bool_)
        self._finish = np.empty(k)
        self._avail = np.empty(len(self.devices))
        self.objective = problem.objective
        nd = len(self.devices)
        ob = self.objective
        thr = ob if isinstance(ob, Throughput) else Throughput()
        self.requests = float(thr.requests)
        self.send, self.receive = float(thr.send), float(thr.receive)
        #: seconds per subgraph of a served request (the throughput model): the overhead and the hand-off
        self.served_overhead = self.overhead + float(thr.handoff)
        self.free = np.array([n in thr.free_comm for n in self.devices], np.bool_)
        self._load = np.empty(nd)
        mem = problem.needs
        #: bytes per (group, device), per (shared constant unit, device) and per device (its overhead)
        self.m_fixed, self.mu_bytes, self.m_overhead = problem.memory_terms()
        self.m_act = np.ascontiguousarray(mem.activation, np.float64)
        self.mu_ptr = np.ascontiguousarray(mem.u_ptr, np.int64)
        self.mu_grp = np.ascontiguousarray(mem.u_groups, np.int64)
        self.capacity = np.asarray(problem.caps, np.float64)
        self._peak = np.empty(nd)
        #: :class:`Energy`: the latency problem whose latency is the joules (``PlacementProblem.as_latency``)
        self._joules = Simulator(problem.as_latency()) if isinstance(ob, Energy) else None
        self._dram = self._dram_matrix(problem)
        self._hosts = problem.hosts if problem.multi_host else None
        if self._hosts is not None:
            self._h_lat, self._h_inv = self._hosts.pair_terms()
            self._h_cross = self._hosts.cross()
            self._h_tensor = per_cons
            self._h_bytes = np.asarray(st.t_bytes, np.float64)

    @property
    def n_groups(self) -> int:
        return self.time.shape[0]

    @property
    def n_devices(self) -> int:
        return self.time.shape[1]

    def _check(self, d) -> np.ndarray:
        d = np.ascontiguousarray(d, dtype=np.int64)
        if d.shape[-1] != self.n_groups:
            raise ValueError(f"placement has {d.shape[-1]} entries, the problem has {self.n_groups} groups")
        if d.size and (d.min() < 0 or d.max() >= self.n_devices):
            raise ValueError(f"device index out of range 0..{self.n_devices - 1}")
        return d

    def _scratch(self):
        return (self._eff, self._stamp, self._label, self._parent, self._label2, self._stage,
                self._comp0, self._flags, self._seen)

    def terms(self, group_device: np.ndarray) -> tuple[float, float, int]:
        """(compute seconds, copy seconds, number of HETERO subgraphs) of one placement."""
        d = self._check(group_device)
        comp, copy, nsub = K.sequential_terms(d, self.res_src, self.time, self.t_ptr, self.t_prod, self.t_cons,
                                              self.t_cost, self.r_ptr, self.r_grp, self.r_time, self.u_src,
                                              self.u_dst, self.counted, *self._scratch())
        if self._hosts is not None:
            copy += self.host_terms(d)[0]
        return float(comp), float(copy), int(nsub)

    def host_terms(self, d: np.ndarray) -> tuple[float, np.ndarray]:
        """What the links between hosts add to a placement's price beyond ``t_cost`` (see the module
        docstring): ``(copy seconds of one request, seconds per device of the throughput loads)``;
        zero on a problem of one host."""
        nd = self.n_devices
        load = np.zeros(nd)
        if self._hosts is None or not self._h_tensor.size:
            return 0.0, load
        d = np.asarray(d, np.int64)
        t = self._h_tensor
        home = d[self.t_prod[t]]
        dst = d[self.t_cons]
        keep = self._h_cross[home, dst]
        if not keep.any():
            return 0.0, load
        key = np.unique(t[keep] * nd + dst[keep])  # one copy per tensor and receiving device
        tu, du = key // nd, key % nd
        hu = d[self.t_prod[tu]]
        link = self._h_lat[hu, du] + self._h_bytes[tu] * self._h_inv[hu, du]
        delta = link - self.t_cost[tu]
        recv = np.where(self.free[du], 0.0, self.receive * delta)
        np.add.at(load, du, recv)
        if self.send:  # the sender pays once per tensor: its slowest crossing instead of t_cost
            worst = np.full(self.t_cost.shape[0], -np.inf)
            np.maximum.at(worst, tu, link)
            sent = np.unique(tu)
            home_t = d[self.t_prod[sent]]
            np.add.at(load, home_t, np.where(self.free[home_t], 0.0, self.send * (worst[sent] - self.t_cost[sent])))
        return float(delta.sum()), load

    def latency(self, group_device: np.ndarray) -> float:
        """Sequential (HETERO) latency in seconds; ``inf`` if a group is on a device not allowed."""
        comp, copy, nsub = self.terms(group_device)
        return comp + copy + self.overhead * nsub

    def singles(self) -> dict[int, float]:
        """Latency of every op on one device, for each device that can run every group (in device order)."""
        p = self.problem
        return {j: self.latency(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()}

    def latencies(self, matrix: np.ndarray) -> np.ndarray:
        """Sequential latency of every row of a (placements x groups) matrix."""
        d = self._check(np.atleast_2d(matrix))
        out = np.empty(d.shape[0])
        K.sequential_batch(d, self.res_src, self.time, self.t_ptr, self.t_prod, self.t_cons, self.t_cost,
                           self.r_ptr, self.r_grp, self.r_time, self.u_src, self.u_dst, self.counted,
                           self.overhead, out, *self._scratch())
        if self._hosts is not None:
            out += np.array([self.host_terms(row)[0] for row in d])
        return out

    def subgraphs(self, group_device: np.ndarray) -> np.ndarray:
        """Subgraph label per group."""
        d = self._check(group_device)
        label = np.empty(self.n_groups, np.int64)
        K.subgraph_labels(d, self.u_src, self.u_dst, label, self._parent, self._label2, self._stage,
                          self._comp0, self._flags)
        return label

    def latency_parallel(self, group_device: np.ndarray) -> float:
        """Makespan with devices running concurrently (what-if; HETERO does not do this)."""
        d = self._check(group_device)
        label = self.subgraphs(d)
        opened = np.zeros(self.n_groups, np.bool_)
        return max(self.dram_seconds(d),
                   float(K.parallel_latency(d, self.time_full, self.zero, self.p_ptr, self.p_src, self.p_cost, label,
                                            self.counted, self.overhead, self._finish, self._avail, opened)))

    def concurrent_subgraphs(self, group_device: np.ndarray) -> tuple[np.ndarray, int]:
        """(label per group, number of labels) of the concurrent executor's subgraphs."""
        d = self._check(group_device)
        label = np.empty(self.n_groups, np.int64)
        k = K.concurrent_labels(d, self.zero, self.u_src, self.u_dst, label, self._parent, self._label2, self._stage)
        return label, int(k)

    def latency_concurrent(self, group_device: np.ndarray, launch: float | None = None,
                           handover: float = 0.0, request: float = 0.0, convert: float = 0.0) -> float:
        """Latency under hdp's concurrent executor (see the module docstring): ``request`` plus the
        makespan; ``launch`` defaults to the subgraph overhead of the cost table."""
        d = self._check(group_device)
        if not self.n_groups:
            return 0.0
        label, k = self.concurrent_subgraphs(d)
        return request + max(self.dram_seconds(d), float(K.concurrent_makespan(d, self.time_full, self.zero, self.p_ptr, self.p_src,
                                                     self.p_cost, label, k, self.n_devices,
                                                     self.overhead if launch is None else launch, handover,
                                                     self.t_ptr, self.t_prod, self.t_cons, self.t_bytes,
                                                     float(convert))))

    def loads(self, group_device: np.ndarray) -> np.ndarray:
        """Seconds of one request each device works (the throughput model's ``load[d]``)."""
        d = self._check(group_device)
        out = np.empty(self.n_devices)
        K.device_loads(d, self.time, self.t_ptr, self.t_prod, self.t_cons, self.t_cost, self.r_ptr, self.r_grp,
                       self.r_time, self.u_src, self.u_dst, self.counted, self.served_overhead, self.send, self.receive,
                       self.free, out, self._stamp, self._label, self._parent, self._label2, self._stage,
                       self._comp0, self._flags, self._seen)
        if self._hosts is not None:
            out += self.host_terms(d)[1]
        return out

    def period(self, group_device: np.ndarray, requests: float | None = None) -> float:
        """Steady-state seconds per request with ``requests`` in flight (default: the objective's,
        else 2): ``max(latency / requests, max load, DRAM seconds)``, every subgraph at the served
        cost (:attr:`served_overhead`); the DRAM term is :meth:`dram_seconds`."""
        n = self.requests if requests is None else float(requests)
        return max(self.served_latency(group_device) / n, float(self.loads(group_device).max(initial=0.0)),
                   self.dram_seconds(group_device))

    # --- devices of one DRAM running at once ---------------------------------------------------

    @staticmethod
    def _dram_matrix(problem: PlacementProblem):
        """Per share of the problem's ``dram_shares``, seconds per (group, device) its traffic takes
        of the share's bandwidth (0 on devices outside the share); None without shares."""
        if problem.dram_bytes is None or not problem.dram_shares:
            return None
        out = []
        for ix, bw in problem.dram_shares:
            m = np.zeros_like(problem.dram_bytes)
            m[:, list(ix)] = problem.dram_bytes[:, list(ix)] / bw
            out.append(m)
        return np.stack(out)

    def dram_seconds(self, group_device: np.ndarray) -> float:
        """Seconds one request's traffic keeps the busiest shared DRAM busy: Σ over the groups placed
        on the devices of a share of their bytes / the share's bandwidth (max over shares). Devices of
        one DRAM running at once (requests in flight, the concurrent executor) cannot serve requests
        faster than it, whatever each device's own bandwidth; 0 without shared DRAMs (a target
        ``[[shares]]`` resource = "memory" with a ``bandwidth``)."""
        if self._dram is None or not self.n_groups:
            return 0.0
        d = self._check(group_device)
        return float(self._dram[:, np.arange(d.shape[0]), d].sum(axis=1).max())

    def dram_seconds_all(self, matrix: np.ndarray) -> np.ndarray:
        """:meth:`dram_seconds` of every row of a (placements x groups) matrix."""
        d = self._check(np.atleast_2d(matrix))
        if self._dram is None or not self.n_groups:
            return np.zeros(d.shape[0])
        return self._dram[:, np.arange(d.shape[1])[None, :], d].sum(axis=2).max(axis=0)

    # --- energy ---------------------------------------------------------------------------------

    def compute_by_device(self, group_device: np.ndarray) -> np.ndarray:
        """Seconds each device computes in one request (its groups, and each unit of replicated ops
        once on every device one of its groups is on)."""
        d = self._check(group_device)
        out = np.bincount(d, weights=self.time[np.arange(d.shape[0]), d], minlength=self.n_devices)
        for u in range(self.r_time.shape[0]):
            for j in np.unique(d[self.r_grp[self.r_ptr[u]:self.r_ptr[u + 1]]]):
                out[j] += self.r_time[u, j]
        return out

    def energy(self, group_device: np.ndarray) -> float:
        """Joules of one request under the problem's :class:`Energy` (see :mod:`hdp.placement.objective`):
        idle watts of all devices times the latency, plus each device's active watts beyond its idle
        ones times the seconds it computes. Reckoned from those terms, not from :meth:`cost`'s
        weighted problem (tests compare the two)."""
        ob = self.objective
        if not isinstance(ob, Energy):
            raise ValueError("energy needs the problem's objective to be Energy (its watts per device)")
        busy = self.compute_by_device(group_device)
        extra = np.asarray(ob.active, np.float64) - np.asarray(ob.idle, np.float64)
        return float(sum(ob.idle)) * self.latency(group_device) + float(extra @ busy)

    def served_latency(self, group_device: np.ndarray) -> float:
        """One request's latency with every subgraph at the served cost (:attr:`served_overhead`)."""
        if not self.n_groups:
            return 0.0
        comp, copy, nsub = self.terms(group_device)
        return comp + copy + self.served_overhead * nsub

    def cost(self, group_device: np.ndarray) -> float:
        """The problem's objective: seconds per request (joules under :class:`Energy`), lower is better."""
        ob = self.objective
        if isinstance(ob, Throughput):
            return self.period(group_device)
        if self._joules is not None:
            return self._joules.latency(group_device)
        if isinstance(ob, Concurrent):
            return self.latency_concurrent(group_device, ob.launch, ob.handover, ob.request, ob.convert)
        return self.latency(group_device)

    def costs(self, matrix: np.ndarray) -> np.ndarray:
        """:meth:`cost` of every row of a (placements x groups) matrix."""
        ob = self.objective
        if isinstance(ob, Concurrent):
            return self.latencies_concurrent(matrix, ob.launch, ob.handover, ob.request, ob.convert)
        if self._joules is not None:
            return self._joules.latencies(matrix)
        if not isinstance(ob, Throughput):
            return self.latencies(matrix)
        d = self._check(np.atleast_2d(matrix))
        if self._hosts is not None:
            return np.array([self.period(row) for row in d])
        out = np.empty(d.shape[0])
        K.throughput_batch(d, self.res_src, self.time, self.t_ptr, self.t_prod, self.t_cons, self.t_cost,
                           self.r_ptr, self.r_grp, self.r_time, self.u_src, self.u_dst, self.counted,
                           self.served_overhead, self.requests, self.send, self.receive, self.free, out, self._load,
                           *self._scratch())
        if self._dram is not None:
            np.maximum(out, self.dram_seconds_all(d), out=out)
        return out

    def memory(self, group_device: np.ndarray) -> np.ndarray:
        """Estimated bytes each device needs (:mod:`hdp.placement.memory`)."""
        d = self._check(group_device)
        out = np.empty(self.n_devices)
        K.device_memory(d, self.m_fixed, self.m_act, self.mu_ptr, self.mu_grp, self.mu_bytes, self.m_overhead, out,
                        self._peak, self._stamp)
        return out

    def feasible(self, group_device: np.ndarray) -> bool:
        """Whether every device's memory fits its capacity (and every host's, on several hosts)."""
        mem = self.memory(group_device)
        return bool((mem <= self.capacity).all()) and not self._hosts_over(mem)

    def over(self, group_device: np.ndarray) -> list[tuple[str, float, float]]:
        """``(device, bytes needed, capacity)`` of every device the placement overfills, then
        ``("host NAME", bytes, capacity)`` of every host."""
        mem = self.memory(group_device)
        return [(self.devices[j], float(mem[j]), float(self.capacity[j]))
                for j in range(self.n_devices) if mem[j] > self.capacity[j]] + self._hosts_over(mem)

    def _hosts_over(self, mem: np.ndarray) -> list[tuple[str, float, float]]:
        h = self._hosts
        if h is None:
            return []
        out = []
        for i, name in enumerate(h.names):
            on = float(mem[h.devices_of(i)].sum())
            if on > float(h.capacity[i]):
                out.append((f"host {name}", on, float(h.capacity[i])))
        return out

    def latencies_concurrent(self, matrix: np.ndarray, launch: float | None = None, handover: float = 0.0,
                             request: float = 0.0, convert: float = 0.0) -> np.ndarray:
        """:meth:`latency_concurrent` of every row of a (placements x groups) matrix."""
        d = self._check(np.atleast_2d(matrix))
        out = np.empty(d.shape[0])
        if not self.n_groups:
            out[:] = 0.0
            return out
        K.concurrent_batch(d, self.time_full, self.zero, self.u_src, self.u_dst, self.p_ptr, self.p_src, self.p_cost,
                           self.n_devices, self.overhead if launch is None else launch, handover, request,
                           self.t_ptr, self.t_prod, self.t_cons, self.t_bytes, float(convert), out,
                           self._label, self._parent, self._label2, self._stage)
        if self._dram is not None:
            np.maximum(out, request + self.dram_seconds_all(d), out=out)
        return out

    def report(self, group_device: np.ndarray) -> dict:
        """Simulated figures of one placement: ``simulated`` (sequential latency), ``compute``,
        ``copy`` (seconds), ``subgraphs``, the problem's ``lower_bound``; with a throughput objective
        ``period`` (seconds per request) and ``load`` (text: per device); when some device has a
        capacity, ``memory`` (text: each device's bytes of its capacity)."""
        if not self.n_groups:
            return {"simulated": 0.0, "compute": 0.0, "copy": 0.0, "subgraphs": 0, "lower_bound": 0.0}
        comp, copy, nsub = self.terms(group_device)
        out = {"simulated": comp + copy + self.overhead * nsub, "compute": comp, "copy": copy,
               "subgraphs": nsub, "lower_bound": self.problem.lower_bound()}
        ob = self.objective
        if isinstance(ob, Concurrent):
            out["concurrent"] = self.latency_concurrent(group_device, ob.launch, ob.handover, ob.request, ob.convert)
            out["concurrent_subgraphs"] = self.concurrent_subgraphs(group_device)[1]
        if isinstance(self.objective, Throughput):
            loads = self.loads(group_device)
            served = comp + copy + self.served_overhead * nsub  # :meth:`served_latency` from the terms above
            out["period"] = max(served / self.requests, float(loads.max(initial=0.0)))
            out["load"] = ", ".join(f"{n} {v * 1e3:.4g} ms" for n, v in zip(self.devices, loads))
        if isinstance(ob, Energy):
            out["energy"] = self.energy(group_device)
        if self._dram is not None:
            out["dram"] = self.dram_seconds(group_device)
        if self.problem.memory_binds:
            out["memory"] = ", ".join(
                f"{n} {size_text(v)}" + (f" of {size_text(c)}" if np.isfinite(c) else "")
                for n, v, c in zip(self.devices, self.memory(group_device), self.capacity))
        if self._hosts is not None:
            d = self._check(group_device)
            mem = self.memory(d)
            h = self._hosts
            out["hosts"] = "; ".join(
                f"{name}: " + (",".join(self.devices[j] for j in h.devices_of(i) if (d == j).any()) or "-")
                + f" {size_text(float(mem[h.devices_of(i)].sum()))}"
                + (f" of {size_text(float(h.capacity[i]))}" if np.isfinite(h.capacity[i]) else "")
                for i, name in enumerate(h.names))
        return out

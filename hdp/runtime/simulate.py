"""The simulator: latency of a placement from the cost table, without running anything.

Sequential semantics (what HETERO does for one inference request: its subgraphs run one after
another)::

    latency = Σ_i op_time[i, dev[i]]                       (compute)
            + Σ_(tensor t, device d) link_latency + bytes_t / link_bandwidth   (copies)
            + subgraph_overhead × number of subgraphs

The rules, chosen to match HETERO's subgraph collector:

- Parameter, Constant and Result ops take no time. A Result always runs with its producer
  (HETERO overrides a Result's affinity with its producer's).
- A tensor is one output port of one op. It is copied once to every device, other than its
  producer's, on which some op consumes it (two consumers on the same other device: one copy).
- Tensors produced by a Constant, or by an op computed only from constants (a decompression
  Convert, ...), are never charged: HETERO duplicates Constants into each subgraph, and ``assign``
  keeps constant chains with their consumer.
- Subgraphs are the connected components of the ops linked by same-device edges (edges out of a
  Constant do not link: Constants are duplicated). HETERO then splits components whose mutual
  dependencies are cyclic (device A feeding B feeding back into the same A component, as in a
  residual block with the branch on B); here such components are split by *stage*, the number
  of device changes on the longest path reaching an op, which is always acyclic. A component
  holding only Constants and Results is no subgraph. This can differ from HETERO's greedy
  cycle breaking by a subgraph on graphs with nested cycles.

Parallel semantics (:meth:`Simulator.latency_parallel`, for what-if analysis) let devices run
concurrently: list scheduling in topological order, per-device ready times, transfer delays on
crossing edges (no link congestion), each subgraph's overhead paid once before its first op.
"""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.build import constant_like as _constant_like
from hdp.ir.build import edge_sources
from hdp.ir.types import Module
from hdp.runtime import _kernels as K

#: Op types whose time the simulator ignores (they move no data through a device's compute).
ZERO_TIME = frozenset({"Parameter", "Constant", "Result"})


def constant_like(module: Module) -> np.ndarray:
    """bool per op: a Constant, or computed only from constants (not from a Parameter)."""
    return _constant_like(module.graph)


def cost_table(module: Module, devices: tuple[str, ...] | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
    """Seconds per op per device, columns in ``devices`` order (default: the costs' order).

    ``inf`` where the cost table or the support mask says the device cannot run the op; 0 for
    Parameter/Constant/Result.
    """
    c = module.costs
    if c is None:
        raise InputError("the simulator needs costs; run the profile pass first")
    devices = tuple(devices) if devices is not None else tuple(c.devices)
    missing = [d for d in devices if d not in c.devices]
    if missing:
        raise InputError(f"costs have no column for device(s) {', '.join(missing)} "
                         f"(costs cover {', '.join(c.devices)})")
    t = np.array(c.op_time.numpy()[:, [c.devices.index(d) for d in devices]], np.float64)
    if t.shape[0] != module.graph.n_ops:
        raise InputError(f"costs cover {t.shape[0]} ops, the graph has {module.graph.n_ops}")
    t[np.isnan(t)] = np.inf
    s = module.support
    if s is not None:
        for j, d in enumerate(devices):
            if d in s.devices:
                t[~s.mask.numpy()[:, s.devices.index(d)], j] = np.inf
    zero = np.array([op.type in ZERO_TIME for op in module.graph.ops], bool)
    t[zero] = 0.0
    return t, devices


class Tensors:
    """The chargeable output tensors of a graph and their distinct consumer ops.

    A tensor is (producer, output port). Tensors of constant-like producers and consumers that
    are Results are left out (never copied). ``cost[t]`` is one copy's seconds.
    """

    def __init__(self, module: Module, const_like: np.ndarray, is_result: np.ndarray):
        g = module.graph
        c = module.costs
        src = edge_sources(g).astype(np.int64)
        dst = g.indices.numpy().astype(np.int64)
        port = g.src_port.numpy().astype(np.int64)
        nbytes = g.edge_bytes.numpy()
        keep = ~const_like[src] & ~is_result[dst]
        src, dst, port, nbytes = src[keep], dst[keep], port[keep], nbytes[keep]
        nports = int(port.max()) + 1 if port.size else 1
        key = src * nports + port
        tkey, tid = np.unique(key, return_inverse=True)
        tid = tid.reshape(-1).astype(np.int64)
        self.n = int(tkey.shape[0])
        self.prod = (tkey // nports).astype(np.int64)
        self.port = (tkey % nports).astype(np.int64)
        self.bytes = np.zeros(self.n, np.int64)
        np.maximum.at(self.bytes, tid, nbytes)
        pairs = np.unique(tid * (g.n_ops + 1) + dst)  # distinct (tensor, consumer), sorted by tensor
        cons_t = pairs // (g.n_ops + 1)
        self.cons = (pairs % (g.n_ops + 1)).astype(np.int64)
        self.ptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(cons_t, minlength=self.n), out=self.ptr[1:])
        self.cost = c.link_latency + self.bytes / c.link_bandwidth if c is not None else np.zeros(self.n)
        self.edge_tensor = tid  # tensor of every kept edge, in graph edge order


class Simulator:
    """Latency of placements of one Module under its cost table.

    Build once (O(ops + edges)); then ``latency`` costs O(ops + edges) per placement in Numba.
    Device indices refer to ``devices`` (default: the cost table's order).
    """

    def __init__(self, module: Module, devices: tuple[str, ...] | None = None):
        g = module.graph
        n = g.n_ops
        self.module = module
        self.time, self.devices = cost_table(module, devices)
        c = module.costs
        self.overhead = float(c.subgraph_overhead)
        types = [op.type for op in g.ops]
        self.is_result = np.array([t == "Result" for t in types], bool)
        self.is_constant = np.array([t == "Constant" for t in types], bool)
        self.zero = np.array([t in ZERO_TIME for t in types], bool)
        self.const_like = constant_like(module)
        self.counted = ~self.is_constant & ~self.is_result
        src = edge_sources(g).astype(np.int64)
        dst = g.indices.numpy().astype(np.int64)
        self.res_src = np.full(n, -1, np.int64)
        rmask = self.is_result[dst]
        self.res_src[dst[rmask]] = src[rmask]
        self.tensors = T = Tensors(module, self.const_like, self.is_result)
        ue = ~self.is_constant[src]
        self.u_src, self.u_dst = src[ue], dst[ue]
        # predecessor CSR over all edges, with the copy time of chargeable ones
        ecost = np.zeros(src.shape[0])
        charged = ~self.const_like[src] & ~self.is_result[dst]
        ecost[charged] = T.cost[T.edge_tensor]
        order = np.argsort(dst, kind="stable")
        self.p_src, self.p_cost = src[order], ecost[order]
        self.p_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=self.p_ptr[1:])
        self._eff = np.empty(n, np.int64)
        self._stamp = np.empty(len(self.devices), np.int64)
        self._label = np.empty(n, np.int64)
        self._parent = np.empty(n, np.int64)
        self._label2 = np.empty(n, np.int64)
        self._stage = np.empty(n, np.int64)
        self._comp0 = np.empty(n, np.int64)
        self._flags = np.empty(n, np.bool_)
        self._seen = np.empty(n, np.bool_)
        self._finish = np.empty(n)
        self._avail = np.empty(len(self.devices))

    @property
    def n_ops(self) -> int:
        return self.time.shape[0]

    @property
    def n_devices(self) -> int:
        return self.time.shape[1]

    def _check(self, d) -> np.ndarray:
        d = np.ascontiguousarray(d, dtype=np.int64)
        if d.shape[-1] != self.n_ops:
            raise ValueError(f"placement has {d.shape[-1]} entries, the graph has {self.n_ops} ops")
        if d.size and (d.min() < 0 or d.max() >= self.n_devices):
            raise ValueError(f"device index out of range 0..{self.n_devices - 1}")
        return d

    def _scratch(self):
        return (self._eff, self._stamp, self._label, self._parent, self._label2, self._stage,
                self._comp0, self._flags, self._seen)

    def terms(self, device_of: np.ndarray) -> tuple[float, float, int]:
        """(compute seconds, copy seconds, number of HETERO subgraphs) of one placement."""
        d = self._check(device_of)
        T = self.tensors
        comp, copy, nsub = K.sequential_terms(d, self.res_src, self.time, T.ptr, T.prod, T.cons,
                                              T.cost, self.u_src, self.u_dst, self.counted,
                                              *self._scratch())
        return float(comp), float(copy), int(nsub)

    def latency(self, device_of: np.ndarray) -> float:
        """Sequential (HETERO) latency in seconds; ``inf`` if an op is on a device that cannot run it."""
        comp, copy, nsub = self.terms(device_of)
        return comp + copy + self.overhead * nsub

    def latencies(self, device_of_matrix: np.ndarray) -> np.ndarray:
        """Sequential latency of every row of a (placements x ops) matrix."""
        d = self._check(np.atleast_2d(device_of_matrix))
        out = np.empty(d.shape[0])
        T = self.tensors
        K.sequential_batch(d, self.res_src, self.time, T.ptr, T.prod, T.cons, T.cost, self.u_src,
                           self.u_dst, self.counted, self.overhead, out, *self._scratch())
        return out

    def subgraphs(self, device_of: np.ndarray) -> np.ndarray:
        """Subgraph label per op (Constants are singletons; Results share their producer's)."""
        d = self._check(device_of)
        K.effective_devices(d, self.res_src, self._eff)
        label = np.empty(self.n_ops, np.int64)
        K.subgraph_labels(self._eff, self.u_src, self.u_dst, label, self._parent, self._label2,
                          self._stage, self._comp0, self._flags)
        return label

    def latency_parallel(self, device_of: np.ndarray) -> float:
        """Makespan with devices running concurrently (what-if; HETERO does not do this)."""
        label = self.subgraphs(device_of)  # also fills self._eff
        opened = np.zeros(self.n_ops, np.bool_)
        return float(K.parallel_latency(self._eff, self.time, self.zero, self.p_ptr, self.p_src,
                                        self.p_cost, label, self.counted, self.overhead,
                                        self._finish, self._avail, opened))


def lower_bound(module: Module, devices: tuple[str, ...] | None = None) -> float:
    """Σ over ops of the fastest supporting device's time: no placement's latency is below it."""
    t, _ = cost_table(module, devices)
    if not t.shape[0]:
        return 0.0
    best = t.min(axis=1)
    bad = np.nonzero(~np.isfinite(best))[0]
    if bad.size:
        op = module.graph.ops[bad[0]]
        raise InputError(f"no device can run op '{op.name}' ({op.type}) under the cost table")
    return float(best.sum())

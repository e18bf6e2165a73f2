"""HETERO's subgraphs of a placement, as its splitter forms them, and the rule they impose on state.

HETERO (OpenVINO 2026.4, ``src/plugins/hetero/src/subgraph_collector.cpp``) splits a model by
affinity in two steps. First every op joins the ops it exchanges a tensor with on its own device
(a union-find over the data edges: a Parameter, or any op whose output several ops on one device
read, joins them all into one *component*). Then, where the graph of components has a cycle
(device A feeds B feeds A again, and the two A parts are joined, e.g. both read ``input_ids``),
it cuts edges inside the components on the cycle until the pieces can be ordered: by heuristics
(an op that depends on the cycle is cut from inputs that do not; then, while a cycle remains, one
op at a time is cut from every same-device input). Components on no cycle are never cut.

Each piece becomes an ``ov::Model(results, sinks, parameters)``, and that constructor walks from
the sinks along control dependencies as well as data edges; the IR reader (``ir_deserializer.cpp``)
adds one from every Assign to the ReadValue of its variable. When a cut separates a ReadValue and
its initialiser from its Assign — in an optimum-intel export the ReadValue side reads only
``input_ids`` (the initialiser's batch, through a ShapeOf) and ``beam_idx``, while the Concat that
feeds the Assign waits for the new keys, which come back through the cycle — the Assign's piece
reaches the ReadValue, its initialiser and the input its ShapeOf reads, which another piece owns::

    Model references undeclared parameters: opset1::Parameter input_ids () -> (i64[?,?])

(or ``opset1::Parameter Parameter_N`` when the ShapeOf reads a tensor handed over from another
piece). Without the control dependency the same split fails in the CPU plugin instead
(``ReadValueWithSubgraph node ... doesn't have sibling output``, ``unordered_map::at``, or an empty
tensor at the first inference).

The rule: **the component that holds a state (its ReadValue and Assign) lies on no cycle of the
component graph**, so HETERO never cuts it. It depends on the devices of other groups (which ops
a shared input joins), so it is not a tie: :func:`tangled_states` finds the state ops that break
it and :func:`untangle` moves groups, whole components at a time, until none does, preferring
moves that cost least under the cost model. The components are computed from the connections the
written model has (:attr:`hdp.placement.structure.Structure.h_src`): direct edges, edges through
the private copies of constant data and replicated chains, and a live ShapeOf's read of its input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp.placement.problem import PlacementProblem
from hdp.placement.repair import best_single_device
from hdp.placement.simulate import Simulator
from hdp.placement.structure import Structure


@dataclass(frozen=True)
class Components:
    """HETERO's components of one placement (before it cuts any)."""

    comp: np.ndarray  # int per op: its component (ops that are not placed are components of their own)
    scc: np.ndarray  # int per component: its strongly connected component in the component graph
    cyclic: np.ndarray  # bool per component: on a cycle of the component graph (HETERO cuts it)


def components(structure: Structure, op_device: np.ndarray) -> Components:
    """The components of ``op_device`` (a device per op) and which of them lie on a cycle."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = structure.n_ops
    d = np.asarray(op_device, np.int64)
    u, v = structure.h_src, structure.h_dst
    same = d[u] == d[v]
    a = sp.csr_array((np.ones(int(same.sum()), np.int8), (u[same], v[same])), shape=(n, n))
    k, comp = connected_components(a, directed=False)
    cu, cv = comp[u[~same]], comp[v[~same]]
    b = sp.csr_array((np.ones(cu.shape[0], np.int8), (cu, cv)), shape=(k, k))
    ns, scc = connected_components(b, directed=True, connection="strong")
    cyclic = np.bincount(scc, minlength=ns)[scc] > 1
    return Components(comp=comp, scc=scc, cyclic=cyclic)


def tangled_states(structure: Structure, op_device: np.ndarray) -> np.ndarray:
    """The ReadValue and Assign ops of ``op_device`` whose component lies on a cycle (int32)."""
    st = structure.state_ops
    if not st.size:
        return st
    c = components(structure, op_device)
    return st[c.cyclic[c.comp[st]]]


def untangle(problem: PlacementProblem, group_device: np.ndarray, nearest: bool = False) -> tuple[np.ndarray, int]:
    """``group_device`` made to keep every state out of a component on a cycle, and how many groups
    changed device. Candidates: (1) greedy moves, each round moving one component of the cycle
    around a tangled state to another allowed device (the move that leaves the fewest tangled state
    ops, then the lowest simulated latency; the whole cycle onto one device when no move helps);
    (2) pipeline cuts over the devices the placement uses — groups before a point in the groups'
    topological order on one device, the rest on another, which no cycle can cross; (3) the best
    single device. Kept: one that fits the devices' memory if any does, a split if ``group_device``
    was one, then the lowest simulated cost of the problem's objective (without costs, or
    ``nearest``: the fewest ops moved, for a placement whose point is its
    structure rather than its speed, such as a random one). A problem no single device can run
    may be returned tangled when no other candidate is legal."""
    st = problem.structure
    gd0 = np.asarray(group_device, np.int64)
    if not st.state_ops.size or not gd0.size or not tangled_states(st, st.op_devices(gd0)).size:
        return np.asarray(group_device, np.int16), 0
    sim = None
    if problem.has_costs and not nearest:
        sim = Simulator(problem)
    sizes = np.diff(st.m_ptr)

    def cost(g) -> float:
        return sim.cost(g) if sim is not None else float(sizes[g != gd0].sum())

    candidates = [g for g in (_greedy(problem, gd0, sim, sizes),) if g is not None]
    candidates += _pipeline_cuts(problem, gd0, sim, sizes)

    d = best_single_device(problem)
    if d >= 0:
        candidates.append(problem.single(d).astype(np.int64))
    if not candidates:
        return gd0.astype(np.int16), 0
    split = np.unique(gd0).shape[0] > 1
    fits = (lambda g: True)
    if problem.memory_binds:  # a candidate over a device's memory only when none fits

        fits = Simulator(problem).feasible
    best = min(candidates, key=lambda g: (not fits(g), split and np.unique(g).shape[0] < 2, cost(g)))
    return best.astype(np.int16), int((best != gd0).sum())


def _tangled(problem: PlacementProblem, gd: np.ndarray) -> int:
    return int(tangled_states(problem.structure, problem.structure.op_devices(gd)).shape[0])


def _greedy(problem: PlacementProblem, gd0: np.ndarray, sim, sizes) -> np.ndarray | None:
    """Component moves until no state is tangled (see :func:`untangle`); None if that fails."""
    st = problem.structure
    gd = gd0.copy()
    placed = st.group_of >= 0
    for _ in range(2 * problem.n_groups + 2):
        c = components(st, st.op_devices(gd))
        bad = st.state_ops[c.cyclic[c.comp[st.state_ops]]]
        if not bad.size:
            return gd
        cycle = c.scc[c.comp[bad[0]]]
        ops = np.nonzero(placed & (c.scc[c.comp] == cycle))[0]
        by_comp = [np.unique(st.group_of[ops[c.comp[ops] == k]]) for k in np.unique(c.comp[ops])]
        best = None
        for groups in sorted(by_comp, key=lambda g: int(sizes[g].sum()))[:48]:
            here = int(gd[groups[0]])
            for d in range(problem.n_devices):
                if d == here or not problem.allowed[groups, d].all():
                    continue
                trial = gd.copy()
                trial[groups] = d
                key = (_tangled(problem, trial), sim.latency(trial) if sim is not None else float(sizes[groups].sum()))
                if best is None or key < best[0]:
                    best = (key, trial)
        if best is not None and best[0][0] < bad.shape[0]:
            gd = best[1]
            continue
        groups = np.unique(st.group_of[ops])
        options = [d for d in range(problem.n_devices) if problem.allowed[groups, d].all()]
        if not options:
            return None
        trials = []
        for d in options:
            trial = gd.copy()
            trial[groups] = d
            trials.append((sim.latency(trial) if sim is not None else -float(sizes[groups][gd[groups] == d].sum()), d,
                           trial))
        gd = min(trials, key=lambda t: (t[0], t[1]))[2]
    return None


def _pipeline_cuts(problem: PlacementProblem, gd0: np.ndarray, sim, sizes, tries: int = 16,
                   scan: int = 256) -> list[np.ndarray]:
    """The best legal two-stage pipelines over each ordered pair of devices ``gd0`` uses: groups
    before a point in topological order on the first device, the rest on the second (a group not
    allowed there goes to the other, else keeps its device). Ranked by the simulated cost of the
    problem's objective (without costs: ops moved), those over a device's memory last; the first
    legal one per pair. On more than ``scan`` groups the points are first ranked every
    ``k / scan`` groups, then every point near the ``tries`` best of those."""
    used = [int(d) for d in np.unique(gd0)]
    k = problem.n_groups
    idx = np.arange(k)
    fits = None
    if problem.memory_binds:  # cuts over a device's memory go last

        fits = Simulator(problem).feasible if sim is None else sim.feasible

    def ranked(a, b, points):
        rows = np.where(idx[None, :] < points[:, None], a, b)
        other = np.where(rows == a, b, a)
        ok = problem.allowed[idx[None, :], rows]
        rows = np.where(ok, rows, np.where(problem.allowed[idx[None, :], other], other, gd0[None, :]))
        keys = sim.costs(rows) if sim is not None else ((rows != gd0[None, :]) * sizes[None, :]).sum(axis=1)
        if fits is not None:
            keys = np.where([fits(r) for r in rows], keys, np.inf)
        order = np.argsort(keys, kind="stable")
        return rows[order], points[order]

    out = []
    step = max(1, -(-k // scan))
    for a in used:
        for b in used:
            if a == b:
                continue
            points = np.arange(1, k)
            if step > 1:
                _, best = ranked(a, b, points[::step])
                near = (best[:tries, None] + np.arange(-step + 1, step)[None, :]).reshape(-1)
                points = np.unique(np.clip(near, 1, k - 1))
            rows, _ = ranked(a, b, points)
            for r in rows[:tries]:
                if np.unique(r).shape[0] > 1 and not _tangled(problem, r):
                    out.append(r.astype(np.int64))
                    break
    return out

"""Device memory a placement needs: bytes per tie group, from the graph alone, and per device kind.

The estimate (what :meth:`hdp.placement.simulate.Simulator.memory` sums per device ``d``; a device
that runs no group needs nothing)::

    memory[d] = overhead[d]                                                        (the plugin itself)
              + Σ_(constant unit u read by some group on d)  stored[u] + copies[d] · at_precision[u, d]
              + Σ_(group g on d)                             state_bytes[g]                  (state / KV cache)
              + max_(group g on d)                           activation[g]                   (peak activations)

- **weights**: ``stored[u]`` is the payload of every Constant as stored in the ``.bin`` (u4 half a
  byte per element, u8/i8 one, f16 two ...). ``at_precision[u, d]`` is the same constants as the
  device computes with them: floating-point constants at the device's compute precision (f32 = 4
  bytes per element, f16/bf16 = 2), except f16/bf16 weights of a MatMul or Gather; those and integer
  ones (compressed u4/u8 weights, which plugins keep compressed, and index tensors) at their stored
  size. ``copies[d]`` and ``overhead[d]`` are the
  device's memory model (:class:`DeviceMemory`): for the CPU plugin, measured on this host
  (``bench/memory_check.py``), ``overhead`` = 43 MiB and ``copies`` = 1 — it keeps the ``.bin``
  pages it read resident and holds a repacked copy of every weight at its inference precision;
  for other devices none is measured here and both default to 0 (the stored bytes alone), unless
  the target declares them (:mod:`hdp.target.capacity`). The written model gives every device that
  runs a consumer its own copy of a constant (a constant is never cut), so a constant read by
  groups on two devices counts on both — once per device however many of its groups are there.
  Constants read by one group only are that group's (``weights``); the others form *units* (the
  constants read by the same set of groups, summed) in CSR ``u_ptr``/``u_groups`` with ``u_bytes``.
- **state**: each state variable (ReadValue/Assign pair, tied to one group) holds the tensor its
  Assign stores. With ``context`` (tokens of KV cache to hold; ``--context``) a stateful model's
  state is scaled from the tokens it holds in the specialisation (``seq_len`` in prefill,
  ``seq_len + 1`` in decode) to ``context`` tokens: KV caches grow linearly with the context.
- **activations**: a plugin reuses one arena for the intermediate tensors of a compiled subgraph,
  so what it needs is about the largest set of tensors live at once, not their sum. The estimate
  per group is its largest op's live bytes (non-constant inputs + outputs); per device, the
  largest such group. This ignores tensors that stay live across ops (skip connections), so it
  is a lower estimate of the arena; weights dominate the models this matters for.

**Single allocations** (a device's ``max_allocation``, :mod:`hdp.target.target`: an iGPU's
driver caps one buffer at about 4 GiB): each tensor a group would put on a device is one
allocation there, checked against the cap per tensor, not summed. Per group, the largest is
:meth:`MemoryNeeds.largest_allocation`: the largest constant it reads (stored, or at the device's
compute precision where the device keeps such a copy, ``copies > 0``), the largest state variable
(scaled to ``context`` like the state term) and the largest activation tensor one of its ops
reads or writes (at its type in the graph). A group whose largest allocation exceeds a device's
cap cannot go there (:meth:`hdp.placement.problem.PlacementProblem.with_max_allocation`).

A cost graph's op (``CostOp``, :mod:`hdp.costgraph`) states all the memory it takes in its bytes
(``Op.weight_bytes``, counted as its group's weights); it has no activation term, and its problem
no device memory model (stored bytes only).

``bench/memory_check.py`` measures the CPU rule against the resident-memory growth of real
compiles and prints the error per model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp.base.fsutil import human_size
from hdp.ir.build import edge_sources
from hdp.ir.types import Graph
from hdp.placement.structure import PLACED, Structure

#: Bytes per element of a floating-point constant (and of a device's compute precision).
FLOAT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1}
#: Ops whose narrow (f16, bf16, integer) weights a plugin keeps as stored, decompressing them as it
#: computes (the CPU plugin's FullyConnected and Gather with compressed weights); the weights of
#: other ops (convolutions) are converted to the compute precision.
KEPT_COMPRESSED = frozenset({"MatMul", "Gather"})


@dataclass(frozen=True)
class DeviceMemory:
    """Each device's memory model (see the module docstring), arrays in the problem's device order."""

    overhead: np.ndarray  # bytes a device needs as soon as it runs a group (the plugin's own)
    copies: np.ndarray  # copies of its weights the device holds at its compute precision, besides the stored
    precision_bytes: np.ndarray  # bytes per element of a floating-point weight at the compute precision

    @staticmethod
    def stored_only(n_devices: int) -> "DeviceMemory":
        """No overhead, no copy: the stored bytes alone (what a cost graph states)."""
        return DeviceMemory(np.zeros(n_devices), np.zeros(n_devices), np.full(n_devices, 4.0))


@dataclass(frozen=True)
class MemoryNeeds:
    """Bytes per tie group (see the module docstring). Arrays are read-only float64 / int64."""

    weights: np.ndarray  # per group: stored bytes of the constants only this group reads
    state: np.ndarray  # per group: state variables (KV cache) it holds
    activation: np.ndarray  # per group: peak live bytes of its largest op
    u_ptr: np.ndarray  # int64, n_units + 1: CSR of the groups reading each shared constant unit
    u_groups: np.ndarray  # int64
    u_bytes: np.ndarray  # float64 per unit: stored bytes
    #: per group / unit: elements of its floating-point constants, and stored bytes of the others
    w_float: np.ndarray | None = None
    w_other: np.ndarray | None = None
    u_float: np.ndarray | None = None
    u_other: np.ndarray | None = None
    #: per group, its largest single tensors (see "Single allocations" in the module docstring): the
    #: stored bytes of the largest constant it reads, the elements of the largest floating-point one a
    #: device converts to its compute precision, the largest state variable, the largest activation
    big_stored: np.ndarray | None = None
    big_float: np.ndarray | None = None
    big_state: np.ndarray | None = None
    big_activation: np.ndarray | None = None

    def largest_allocation(self, dm: DeviceMemory | None, n_devices: int) -> np.ndarray:
        """``[g, d]``: bytes of the largest single tensor group ``g`` puts on device ``d`` (see the
        module docstring); zeros when the needs hold no tensor sizes."""
        k = self.weights.shape[0]
        if self.big_stored is None:
            return np.zeros((k, n_devices))
        out = np.repeat(np.maximum.reduce([self.big_stored, self.big_state, self.big_activation])[:, None],
                        n_devices, axis=1)
        if dm is not None:
            converts = np.asarray(dm.copies, np.float64) > 0
            at_precision = self.big_float[:, None] * np.asarray(dm.precision_bytes, np.float64)[None, :]
            out = np.maximum(out, np.where(converts[None, :], at_precision, 0.0))
        return out

    @property
    def total_weights(self) -> float:
        return float(self.weights.sum() + self.u_bytes.sum())

    @staticmethod
    def zero(n_groups: int) -> "MemoryNeeds":
        z = np.zeros(n_groups)
        return _frozen(MemoryNeeds(z, z.copy(), z.copy(), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)))

    def on_devices(self, dm: DeviceMemory | None, n_devices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fixed, units, overhead)`` under the devices' memory model ``dm`` (None: stored bytes
        only): ``fixed[g, d]`` = the group's private weights on device ``d`` + its state,
        ``units[u, d]`` = shared unit ``u`` on ``d``, ``overhead[d]``; float64, C-contiguous."""
        fixed = np.repeat((self.weights + self.state)[:, None], n_devices, axis=1)
        units = np.repeat(self.u_bytes[:, None], n_devices, axis=1)
        if dm is None or not np.any(dm.copies) or self.w_float is None:
            over = np.zeros(n_devices) if dm is None else np.asarray(dm.overhead, np.float64)
            return np.ascontiguousarray(fixed), np.ascontiguousarray(units), over.copy()
        c, pb = np.asarray(dm.copies, np.float64), np.asarray(dm.precision_bytes, np.float64)
        fixed += c[None, :] * (self.w_float[:, None] * pb[None, :] + self.w_other[:, None])
        units += c[None, :] * (self.u_float[:, None] * pb[None, :] + self.u_other[:, None])
        return np.ascontiguousarray(fixed), np.ascontiguousarray(units), np.asarray(dm.overhead, np.float64).copy()


def _frozen(m: MemoryNeeds) -> MemoryNeeds:
    for a in (m.weights, m.state, m.activation, m.u_ptr, m.u_groups, m.u_bytes, m.w_float, m.w_other,
              m.u_float, m.u_other, m.big_stored, m.big_float, m.big_state, m.big_activation):
        if a is not None:
            a.setflags(write=False)
    return m


def state_scale(meta: dict | None, context: int) -> float:
    """The factor from the state a specialisation holds to ``context`` tokens (1 when ``context``
    is 0 or the model has no specialised sequence length)."""
    meta = meta or {}
    if not context or "seq_len" not in meta or "state_shapes" not in meta:
        return 1.0
    tokens = int(meta["seq_len"]) + (1 if meta.get("phase") == "decode" else 0)
    return context / max(tokens, 1)


def memory_needs(graph: Graph, st: Structure, state_factor: float = 1.0) -> MemoryNeeds:
    """The :class:`MemoryNeeds` of ``graph`` with its placement structure ``st``;
    ``state_factor`` scales every state variable (:func:`state_scale`)."""
    n, k = graph.n_ops, st.n_groups
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    src = edge_sources(graph).astype(np.int64)
    dst = succ.astype(np.int64)
    ebytes = graph.edge_bytes.numpy().astype(np.float64)
    port = graph.src_port.numpy().astype(np.int64)
    role, group_of = st.role, st.group_of.astype(np.int64)
    types = [op.type for op in graph.ops]

    # the placed groups each op that is not placed feeds (constant data, replicated chains)
    feeds: dict[int, frozenset] = {}
    to_matmul = np.zeros(n, bool)  # constant data some MatMul or Gather reads (weights plugins keep compressed)
    for i in range(n - 1, -1, -1):
        if role[i] == PLACED:
            continue
        s: set[int] = set()
        for c in succ[indptr[i]:indptr[i + 1]]:
            if role[c] == PLACED:
                s.add(int(group_of[c]))
                to_matmul[i] |= types[c] in KEPT_COMPRESSED
            else:
                s.update(feeds.get(int(c), ()))
                to_matmul[i] |= to_matmul[c]
        feeds[i] = frozenset(s)
    # per group and per unit: (stored bytes, elements of floating-point constants, stored bytes of the others)
    weights = np.zeros((k, 3))
    big_stored, big_float = np.zeros(k), np.zeros(k)
    units: dict[frozenset, np.ndarray] = {}
    for i, op in enumerate(graph.ops):
        if not op.weight_bytes:
            continue
        gs = feeds.get(i) if role[i] != PLACED else frozenset((int(group_of[i]),))
        if not gs:
            continue  # feeds nothing placed (folded away, or only a Result)
        t = op.out_types[0] if op.out_types else ""
        size = FLOAT_BYTES.get(t)
        if size and size < 4 and to_matmul[i]:  # f16/bf16 weights of a MatMul stay as stored (compressed)
            size = None
        row = (op.weight_bytes, op.weight_bytes / size, 0.0) if size else (op.weight_bytes, 0.0, op.weight_bytes)
        at = np.fromiter(gs, np.int64, len(gs))
        big_stored[at] = np.maximum(big_stored[at], op.weight_bytes)
        big_float[at] = np.maximum(big_float[at], row[1])
        if len(gs) == 1:
            weights[next(iter(gs))] += row
        else:
            units.setdefault(gs, np.zeros(3))
            units[gs] += row
    sets = sorted(units, key=lambda s: sorted(s))
    u_ptr = np.zeros(len(sets) + 1, np.int64)
    u_ptr[1:] = np.cumsum([len(s) for s in sets])
    u_groups = np.fromiter((g for s in sets for g in sorted(s)), np.int64, int(u_ptr[-1]))
    u_rows = np.array([units[s] for s in sets], np.float64).reshape(-1, 3)

    state, big_state = np.zeros(k), np.zeros(k)
    for i, t in enumerate(types):
        if t == "Assign" and group_of[i] >= 0:
            held = ebytes[dst == i].sum() * state_factor
            state[group_of[i]] += held
            big_state[group_of[i]] = max(big_state[group_of[i]], held)

    # activations: per op, its non-constant inputs plus each output port once
    live_in = role[src] != 1  # CONE producers are weights, counted above
    in_bytes = np.bincount(dst, weights=np.where(live_in, ebytes, 0.0), minlength=n)
    out_bytes = np.zeros(n)
    if src.size:
        key = src * (int(port.max()) + 1) + port
        _, first = np.unique(key, return_index=True)
        np.add.at(out_bytes, src[first], ebytes[first])
    act_op = in_bytes + out_bytes
    # a cost graph's op states all the memory it takes in its bytes (hdp.costgraph)
    act_op[np.array([t == "CostOp" for t in types], bool)] = 0.0
    activation = np.zeros(k)
    pl = group_of >= 0
    np.maximum.at(activation, group_of[pl], act_op[pl])
    # the largest single activation tensor of each group: an output of one of its ops, or a
    # non-constant input (read from another group, or from a Parameter)
    big_op = np.zeros(n)
    if src.size:
        np.maximum.at(big_op, src, ebytes)
        np.maximum.at(big_op, dst, np.where(live_in, ebytes, 0.0))
    big_op[np.array([t == "CostOp" for t in types], bool)] = 0.0
    big_act = np.zeros(k)
    np.maximum.at(big_act, group_of[pl], big_op[pl])
    return _frozen(MemoryNeeds(weights[:, 0].copy(), state, activation, u_ptr, u_groups, u_rows[:, 0].copy(),
                               weights[:, 1].copy(), weights[:, 2].copy(), u_rows[:, 1].copy(), u_rows[:, 2].copy(),
                               big_stored, big_float, big_state, big_act))


def largest_tensor(graph: Graph, st: Structure, group: int, state_factor: float = 1.0) -> tuple[str, float, str]:
    """``(op name, bytes, what)`` of the largest single tensor ``group`` holds as stored (a constant
    it reads, a state variable, an activation): for messages naming it."""
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    ebytes = graph.edge_bytes.numpy().astype(np.float64)
    group_of, role = st.group_of.astype(np.int64), st.role
    members = set(np.nonzero(group_of == group)[0].tolist())
    best = ("", 0.0, "")
    # constants and their chains feeding the group's members
    seen, stack = set(), [int(m) for m in members]
    preds: dict[int, list[int]] = {}
    for i in range(graph.n_ops):
        for c in succ[indptr[i]:indptr[i + 1]]:
            preds.setdefault(int(c), []).append(i)
    while stack:
        for p in preds.get(stack.pop(), ()):
            if p in seen or role[p] == PLACED:
                continue
            seen.add(p)
            stack.append(p)
            op = graph.ops[p]
            if op.weight_bytes > best[1]:
                best = (op.name, float(op.weight_bytes), "constant")
    for m in members:
        op = graph.ops[m]
        out = ebytes[indptr[m]:indptr[m + 1]]
        held = float(out.max(initial=0.0))
        if op.type == "Assign":
            held = float(sum(ebytes[indptr[p]:indptr[p + 1]][succ[indptr[p]:indptr[p + 1]] == m].sum()
                             for p in preds.get(m, ()))) * state_factor
            if held > best[1]:
                best = (op.name, held, "state")
        elif held > best[1]:
            best = (op.name, held, "output")
    return best


def size_text(n: float) -> str:
    """Bytes for a message: ``1.5 GiB``, ``300.0 MiB``, ``512 bytes``."""

    return human_size(n)


def smallest_need(problem) -> float:
    """Bytes no placement of ``problem`` goes below, summed over devices: every constant once and
    every state (each on the device that holds it for least), the largest group's activations, and
    one device's overhead."""
    fixed, units, over = problem.memory_terms()
    needs = problem.needs
    low = float(fixed.min(axis=1, initial=np.inf).sum()) if fixed.size else 0.0
    if units.size:
        low += float(units.min(axis=1).sum())
    return low + float(needs.activation.max(initial=0.0)) + float(over.min(initial=0.0))


def fit_error(problem) -> str | None:
    """Why no placement of ``problem`` can fit the devices' memory (a one-line message naming
    every device's capacity and the model's smallest need), or None when one may."""
    needs, caps = problem.needs, problem.caps
    ok = problem.allowed
    fixed, units, over = problem.memory_terms()
    # each group alone (with every constant it reads) must fit some allowed device
    alone = fixed + needs.activation[:, None] + over[None, :]
    if needs.u_bytes.size:
        np.add.at(alone, needs.u_groups, np.repeat(units, np.diff(needs.u_ptr), axis=0))
    fits = ok & (alone <= caps[None, :])
    bad = np.nonzero(~fits.any(axis=1))[0]
    held = ", ".join(f"{d} {size_text(c)}" if np.isfinite(c) else f"{d} unlimited"
                     for d, c in zip(problem.devices, caps))
    if bad.size:
        least = np.where(ok, alone, np.inf).min(axis=1)
        g = int(bad[np.argmax(least[bad])])
        return (f"no device can hold tie group {g} ({size_text(least[g])} with the constants it reads); "
                f"device memory: {held}")
    least = smallest_need(problem)
    hosts = problem.hosts if problem.multi_host else None
    if hosts is not None:  # what each host holds: its memory, or its devices' when less
        room = np.array([min(float(hosts.capacity[i]), float(caps[hosts.devices_of(i)].sum()))
                         for i in range(hosts.n_hosts)])
        if least > float(room.sum()):
            each = ", ".join(f"{n} {size_text(r)}" if np.isfinite(r) else f"{n} unlimited"
                             for n, r in zip(hosts.names, room))
            return (f"the model does not fit across the hosts: it needs at least {size_text(least)} (stored weights "
                    f"{size_text(needs.total_weights)}, state {size_text(float(needs.state.sum()))}) and the hosts "
                    f"hold {each}")
    if least > float(caps.sum()):
        return (f"the model does not fit: it needs at least {size_text(least)} (stored weights "
                f"{size_text(needs.total_weights)}, state {size_text(float(needs.state.sum()))}) and the devices "
                f"hold {held}")
    return None

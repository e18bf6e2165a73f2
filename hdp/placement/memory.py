"""Device memory a placement needs: bytes per tie group, from the graph alone.

The estimate (what :meth:`hdp.placement.simulate.Simulator.memory` sums per device ``d``)::

    memory[d] = Σ_(constant unit u read by some group on d)  weight_bytes[u]     (stored weights)
              + Σ_(group g on d)                             state_bytes[g]      (state / KV cache)
              + max_(group g on d)                           activation[g]       (peak activations)

- **weights**: the payload of every Constant as stored in the ``.bin`` (u4 half a byte per element,
  u8/i8 one, f16 two ...). The written model gives every device that runs a consumer its own copy
  of a constant (a constant is never cut), so a constant read by groups on two devices counts on
  both — once per device however many of its groups are there. Constants read by one group only
  are that group's (``weights``); the others form *units* (the constants read by the same set of
  groups, summed) in CSR ``u_ptr``/``u_groups`` with ``u_bytes``.
- **state**: each state variable (ReadValue/Assign pair, tied to one group) holds the tensor its
  Assign stores. With ``context`` (tokens of KV cache to hold; ``--context``) a stateful model's
  state is scaled from the tokens it holds in the specialisation (``seq_len`` in prefill,
  ``seq_len + 1`` in decode) to ``context`` tokens: KV caches grow linearly with the context.
- **activations**: a plugin reuses one arena for the intermediate tensors of a compiled subgraph,
  so what it needs is about the largest set of tensors live at once, not their sum. The estimate
  per group is its largest op's live bytes (non-constant inputs + outputs); per device, the
  largest such group. This ignores tensors that stay live across ops (skip connections), so it
  is a lower estimate of the arena; weights dominate the models this matters for.

A cost graph's op (``CostOp``, :mod:`hdp.costgraph`) states all the memory it takes in its bytes
(``Op.weight_bytes``, counted as its group's weights); it has no activation term.

Not counted: the plugin's own code and per-compile overheads, and the conversion of stored
weights to the device's precision at compile time (a CPU compiling f16 weights for f32 inference
holds them at twice the stored size); ``bench/memory_check.py`` measures both on this host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp.ir.build import edge_sources
from hdp.ir.types import Graph
from hdp.placement.structure import PLACED, Structure


@dataclass(frozen=True)
class MemoryNeeds:
    """Bytes per tie group (see the module docstring). Arrays are read-only float64 / int64."""

    weights: np.ndarray  # per group: constants only this group reads
    state: np.ndarray  # per group: state variables (KV cache) it holds
    activation: np.ndarray  # per group: peak live bytes of its largest op
    u_ptr: np.ndarray  # int64, n_units + 1: CSR of the groups reading each shared constant unit
    u_groups: np.ndarray  # int64
    u_bytes: np.ndarray  # float64 per unit

    @property
    def total_weights(self) -> float:
        return float(self.weights.sum() + self.u_bytes.sum())

    @staticmethod
    def zero(n_groups: int) -> "MemoryNeeds":
        z = np.zeros(n_groups)
        return _frozen(MemoryNeeds(z, z.copy(), z.copy(), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)))


def _frozen(m: MemoryNeeds) -> MemoryNeeds:
    for a in (m.weights, m.state, m.activation, m.u_ptr, m.u_groups, m.u_bytes):
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
    for i in range(n - 1, -1, -1):
        if role[i] == PLACED:
            continue
        s: set[int] = set()
        for c in succ[indptr[i]:indptr[i + 1]]:
            if role[c] == PLACED:
                s.add(int(group_of[c]))
            else:
                s.update(feeds.get(int(c), ()))
        feeds[i] = frozenset(s)
    weights = np.zeros(k)
    units: dict[frozenset, float] = {}
    for i, op in enumerate(graph.ops):
        if not op.weight_bytes:
            continue
        gs = feeds.get(i) if role[i] != PLACED else frozenset((int(group_of[i]),))
        if not gs:
            continue  # feeds nothing placed (folded away, or only a Result)
        if len(gs) == 1:
            weights[next(iter(gs))] += op.weight_bytes
        else:
            units[gs] = units.get(gs, 0.0) + op.weight_bytes
    sets = sorted(units, key=lambda s: sorted(s))
    u_ptr = np.zeros(len(sets) + 1, np.int64)
    u_ptr[1:] = np.cumsum([len(s) for s in sets])
    u_groups = np.fromiter((g for s in sets for g in sorted(s)), np.int64, int(u_ptr[-1]))
    u_bytes = np.array([units[s] for s in sets], np.float64)

    state = np.zeros(k)
    for i, t in enumerate(types):
        if t == "Assign" and group_of[i] >= 0:
            state[group_of[i]] += ebytes[dst == i].sum() * state_factor

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
    return _frozen(MemoryNeeds(weights, state, activation, u_ptr, u_groups, u_bytes))


def size_text(n: float) -> str:
    """Bytes for a message: ``1.5 GiB``, ``300.0 MiB``, ``512 bytes``."""
    from hdp.fsutil import human_size

    return human_size(n)


def smallest_need(needs: MemoryNeeds) -> float:
    """Bytes no placement goes below, summed over devices: every constant once, every state, and
    the largest group's activations."""
    return needs.total_weights + float(needs.state.sum()) + float(needs.activation.max(initial=0.0))


def fit_error(problem) -> str | None:
    """Why no placement of ``problem`` can fit the devices' memory (a one-line message naming
    every device's capacity and the model's smallest need), or None when one may."""
    needs, caps = problem.needs, problem.caps
    ok = problem.allowed
    # each group alone (with every constant it reads) must fit some allowed device
    alone = needs.weights + needs.state + needs.activation
    if needs.u_bytes.size:
        np.add.at(alone, needs.u_groups, np.repeat(needs.u_bytes, np.diff(needs.u_ptr)))
    fits = ok & (alone[:, None] <= caps[None, :])
    bad = np.nonzero(~fits.any(axis=1))[0]
    held = ", ".join(f"{d} {size_text(c)}" if np.isfinite(c) else f"{d} unlimited"
                     for d, c in zip(problem.devices, caps))
    if bad.size:
        g = int(bad[np.argmax(alone[bad])])
        return (f"no device can hold tie group {g} ({size_text(alone[g])} with the constants it reads); "
                f"device memory: {held}")
    least = smallest_need(needs)
    if least > float(caps.sum()):
        return (f"the model does not fit: it needs at least {size_text(least)} (stored weights "
                f"{size_text(needs.total_weights)}, state {size_text(float(needs.state.sum()))}) and the devices "
                f"hold {held}")
    return None

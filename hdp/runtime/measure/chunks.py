"""Profiling a large model in bounded chunks, each distinct chunk measured once.

OpenVINO's compile of a whole model is superlinear on long element-wise chains: the CPU plugin's
snippets tokenization grows one fused subgraph along the chain, cloning its body at every step
(a Relu/Add chain sharing one Constant compiled in 13 s at 1,000 ops and 126 s at 2,000; a chain of
Relus alone in 12 s and 70 s; 2,000 Relu/Add ops with a Constant per Add in 1.2 s). A profile
needs per-op times, not the whole model compiled at once, so a model of more than ``whole_max``
ops is profiled in **chunks** (:func:`plan`): consecutive runs of at most ``size`` ops in a
topological order (Parameters, Constants, Results and ops computed only from Constants are not
counted: they go with every chunk that reads them), never cutting between a variable's ReadValue
and its Assign (a lone Assign fails at inference; the order puts each ReadValue just before its
first reader and each Assign just after what it stores, so they lie close). Each chunk becomes a small model
(:func:`cut`): an input from another chunk is a Parameter of its static shape (an integer tensor
OpenVINO knows statically, such as shape arithmetic, a Constant of that value); an output read by
another chunk or a Result is a Result.

Two chunks made of the same op signatures (:mod:`hdp.runtime.measure.query`) wired the same way, with the
same outputs leaving the chunk, compile to the same code: only the first is compiled and timed,
and the others reuse its runtime graph, their op positions mapped member by member (a Relu/Add
chain of 20,000 ops is 79 chunks of 256, 2 of them distinct when the Adds share one Constant, 8
when each Add has its own of seven values). The whole model is one request; its chunks are one each,
so a run's wall time is the chunks' sum less one request's overhead per extra chunk, measured on
a one-op model beside them (:func:`hdp.runtime.measure.worker.Worker.profile`).

What a chunk cannot see is a fusion across its boundary: an op at the edge of a chunk runs alone
where the whole model would have fused it with its neighbour. ``bench/profile_chunks.py``
compares chunked with whole-model profiles on the zoo (no run of it is recorded in ``bench/topics/`` yet).
"""

from __future__ import annotations

import hashlib

import msgspec
import numpy as np

from hdp.runtime.measure.query import known_value

#: Ops per chunk (not counting Constants and what is computed from them alone).
CHUNK_OPS = 256
#: Models of at most this many ops are profiled whole (every model of the zoo).
WHOLE_MAX = 8192
#: Ops that are never folded into constants, whatever their inputs.
IMPURE = frozenset({"Parameter", "Result", "ReadValue", "Assign", "RandomUniform", "Multinomial"})
#: Ops that are sinks of a model (not reached from a Result).
SINKS = frozenset({"Assign"})

_ENC = msgspec.msgpack.Encoder(order="deterministic")


class ChunkError(Exception):
    """The model cannot be cut into chunks (a dynamic shape at a boundary, a clone whose ops do
    not line up): it is profiled whole."""


class Plan(msgspec.Struct):
    """Chunks of a model: ``members[c]`` the positions of the ops chunk ``c`` times, in
    topological order; ``same_as[c]`` the chunk whose measurement it takes (itself when it is
    the first of its kind)."""

    members: list[list[int]]
    same_as: list[int]

    def measured(self) -> list[int]:
        """The chunks that are compiled and timed."""
        return [c for c, s in enumerate(self.same_as) if s == c]

    def copies(self) -> dict[int, int]:
        """Per measured chunk, how many chunks (itself included) take its measurement."""
        out: dict[int, int] = {}
        for s in self.same_as:
            out[s] = out.get(s, 0) + 1
        return out


class _Graph:
    """Positions, sources and consumers of a model's ordered ops (each asked of OpenVINO once)."""

    def __init__(self, ops):
        self.ops = ops
        self.types = [op.get_type_name() for op in ops]
        pos = {op: i for i, op in enumerate(ops)}  # ov Nodes hash and compare by identity
        self.sources: list[list[tuple[int, int]]] = []  # per op: (producer position, port) per input
        self.consumers: list[list[list[int]]] = []  # per op, per output: consumer positions
        for op in ops:
            self.sources.append([(pos[o.get_node()], o.get_index())
                                 for o in (i.get_source_output() for i in op.inputs())])
            self.consumers.append([[pos[t.get_node()] for t in out.get_target_inputs()] for out in op.outputs()])
        n = len(ops)
        self.pure = np.zeros(n, bool)  # Constants and ops computed from Constants alone
        for i, t in enumerate(self.types):
            if t == "Constant":
                self.pure[i] = True
            elif t not in IMPURE and self.sources[i] and all(self.pure[s] for s, _ in self.sources[i]):
                self.pure[i] = True
        self.member = ~self.pure & np.array([t not in ("Parameter", "Result") for t in self.types], bool)

    def variable(self, i: int) -> str | None:
        if self.types[i] in ("ReadValue", "Assign"):
            try:
                return self.ops[i].get_variable_id()
            except (AttributeError, RuntimeError):
                return None
        return None


def plan(ops, size: int = CHUNK_OPS, sig_of=None) -> Plan:
    """Chunks of at most ``size`` ops of ``ops`` (a model's ``get_ordered_ops()``), a
    variable's ReadValue and Assign always in one chunk; ``sig_of``: each op's signature index
    (:class:`hdp.runtime.measure.query.Signatures`; negative: none), which makes equal chunks share a
    measurement (without it every chunk is measured)."""
    return _plan(_Graph(ops), size, sig_of)


def chunk_models(model, size: int = CHUNK_OPS, sig_of=None, static_ops=None) -> tuple[Plan, list]:
    """The :func:`plan` of ``model`` and the models of its measured chunks (:func:`cut`)."""
    g = _Graph(model.get_ordered_ops())
    p = _plan(g, size, sig_of)
    return p, _cut(model, g, p, static_ops)


def _plan(g: _Graph, size: int, sig_of) -> Plan:
    size = max(int(size), 1)
    last_assign: dict[str, int] = {}
    for i in range(len(g.ops)):
        if g.types[i] == "Assign":
            v = g.variable(i)
            if v is not None:
                last_assign[v] = i
    chunks: list[list[int]] = []
    cur: list[int] = []
    waiting: set[str] = set()  # variables read in this chunk and not yet assigned: it may not end
    for i in _order(g):
        if len(cur) >= size and not waiting:
            chunks.append(cur)
            cur = []
        cur.append(i)
        v = g.variable(i)
        if v is not None and g.types[i] == "ReadValue" and v in last_assign:
            waiting.add(v)
        elif v is not None and g.types[i] == "Assign" and i == last_assign.get(v):
            waiting.discard(v)
    if cur:
        chunks.append(cur)
    first: dict[bytes, int] = {}
    same = []
    for c, mem in enumerate(chunks):
        key = _digest(g, mem, sig_of) if sig_of is not None else None
        same.append(first.setdefault(key, c) if key is not None else c)
    return Plan(members=chunks, same_as=same)


def _order(g: _Graph) -> list[int]:
    """The member ops in a topological order that puts every op as late as it can go (just
    before its first reader), and every Assign right after what it stores. OpenVINO lists a
    stateful model's ReadValues (and the beam Gathers reading them) early and its Assigns late (a
    stateful Llama: reads from op 14, every Assign after op 1,990), which would leave nowhere to
    cut between a variable's read and its assignment."""
    late = {}  # -(ops between an op and the end along its longest path to the end)
    for i in reversed(np.flatnonzero(g.member).tolist()):
        if g.types[i] == "Assign":
            continue
        readers = [late[c] for cons in g.consumers[i] for c in cons if c in late]
        late[i] = min(readers) - 1 if readers else 0
    key = {i: (v, i, 0) for i, v in late.items()}
    for i in np.flatnonzero(g.member).tolist():
        if g.types[i] == "Assign":
            src = max((s for s, _ in g.sources[i] if s in late), default=None, key=lambda s: key[s])
            key[i] = (late[src], src, 1) if src is not None else (0, i, 1)
    return sorted(key, key=key.__getitem__)


def _digest(g: _Graph, members: list[int], sig_of) -> bytes | None:
    """What makes two chunks compile alike: each member's signature, where each of its inputs
    comes from (a member, by its place in the chunk; a constant; outside) and which of its
    outputs leave the chunk. None when a member has no signature (asked in context, or a body)."""
    local = {m: k for k, m in enumerate(members)}
    doc = []
    for m in members:
        s = int(sig_of[m])
        if s < 0:
            return None
        wires = [(local[p], port) if p in local else ("c" if g.pure[p] else "x") for p, port in g.sources[m]]
        leaving = [j for j, cons in enumerate(g.consumers[m]) if any(c not in local for c in cons)]
        doc.append([s, wires, leaving])
    return hashlib.blake2b(_ENC.encode(doc), digest_size=16).digest()


def op_name(i: int) -> str:
    """The friendly name a chunk gives the op at position ``i`` (unique: runtime nodes map back by it)."""
    return f"hdp_op{i}"


def cut(model, p: Plan, static_ops=None) -> list:
    """The models of ``p``'s measured chunks (None for the others), cut out of a clone of
    ``model`` (left as it is); ``static_ops``: the ordered ops of the model at static shapes when
    ``model``'s are not all static (a stateful model's runnable specialisation), for the shapes of
    the Parameters at chunk boundaries. Every op of the clone is renamed :func:`op_name` of its
    position. Raises :class:`ChunkError`."""
    return _cut(model, _Graph(model.get_ordered_ops()), p, static_ops)


def _cut(model, g: _Graph, p: Plan, static_ops) -> list:
    import openvino as ov
    from openvino import opset13 as opset

    ops = g.ops
    static_ops = ops if static_ops is None else static_ops
    clone = model.clone()
    cops = clone.get_ordered_ops()
    if not (len(cops) == len(ops) == len(static_ops)) or any(
            a.get_type_name() != b.get_type_name() or a.get_type_name() != c.get_type_name()
            for a, b, c in zip(cops, ops, static_ops)):
        raise ChunkError("the model's clone does not list its ops in the same order")
    for i, op in enumerate(cops):
        op.set_friendly_name(op_name(i))
    chunk_of = np.full(len(ops), -1, np.int64)
    for c, mem in enumerate(p.members):
        chunk_of[mem] = c
    models = []
    for c, mem in enumerate(p.members):
        if p.same_as[c] != c:
            models.append(None)
            continue
        params, results, sinks, made = [], [], [], {}
        for m in mem:
            op = cops[m]
            for j, (s, port) in enumerate(g.sources[m]):
                if chunk_of[s] == c or g.pure[s]:
                    continue
                if (s, port) not in made:
                    made[(s, port)] = _boundary(static_ops[s].output(port), g.types[s], s, port, params)
                op.input(j).replace_source_output(made[(s, port)])
            if g.types[m] in SINKS:
                sinks.append(op)
        for m in mem:
            for j, cons in enumerate(g.consumers[m]):
                if any(chunk_of[k] != c for k in cons):
                    results.append(opset.result(cops[m].output(j), name=f"hdp_chunk{c}_out{m}_{j}"))
        if not results:  # only Assigns leave it: a model needs a Result
            results.append(opset.result(cops[mem[0]].output(0), name=f"hdp_chunk{c}_out"))
        try:
            chunk = ov.Model(results, sinks, params, f"hdp_chunk{c}")
            chunk.validate_nodes_and_infer_types()
        except RuntimeError as e:
            raise ChunkError(f"chunk {c}: {e}") from None
        models.append(chunk)
    return models


def _boundary(src, src_type: str, s: int, port: int, params: list):
    """What replaces the tensor ``src`` (output ``port`` of the op at position ``s``) at a chunk's
    boundary: a Constant of its statically known value, else a new Parameter of its static shape
    (named as the model's own input when it is one, so it gets the same data)."""
    from openvino import opset13 as opset


    ps = src.get_partial_shape()
    if ps.is_dynamic:
        raise ChunkError(f"the output {port} of op {s} ({src_type}) has a dynamic shape {ps}")
    text = ps.to_string()
    dims = tuple(int(d) for d in text[1:-1].split(",")) if text[1:-1] else ()
    value = known_value(src, dims)
    if value is not None:
        return opset.constant(value, dtype=src.get_element_type()).output(0)
    p = opset.parameter(list(dims), src.get_element_type(), name=f"hdp_in{s}_{port}")
    if src_type == "Parameter":
        p.output(0).set_names(set(src.get_names()))
    params.append(p)
    return p.output(0)


def request_model():
    """A one-op model (a Relu of one f32): what an inference request costs beside its ops."""
    import openvino as ov
    from openvino import opset13 as opset

    x = opset.parameter([1], np.float32, name="hdp_request_in")
    return ov.Model([opset.result(opset.relu(x), name="hdp_request_out")], [x], "hdp_request")


def chunk_times(p: Plan, unit_times: list[list[float]]) -> list[float]:
    """Per timed run, the whole model's wall time from its chunks': ``unit_times[r]`` holds the
    seconds of each measured chunk (:meth:`Plan.measured` order) and then of the one-op model
    (:func:`request_model`). Each chunk counts as often as chunks take its measurement, less one
    request's cost (the one-op model's median) per chunk beyond the first; never less than the
    slowest chunk of the run, which the whole model contains with one request's cost. (On a chain
    of tiny ops a chunk costs about one request, and a slow one-op measurement made the difference
    0 or less: a whole-model time of 0 in 1 of 2 fresh-clone runs of tests/test_chunks.py.)"""
    if not unit_times:
        return []
    copies = p.copies()
    weight = np.array([copies[c] for c in p.measured()], np.float64)
    t = np.asarray(unit_times, np.float64)
    request = float(np.median(t[:, -1]))
    total = t[:, :-1] @ weight - (len(p.members) - 1) * request
    return np.maximum(total, t[:, :-1].max(axis=1)).tolist()


def spread_nodes(p: Plan, measured_nodes: list[list]) -> list:
    """The runtime nodes of every chunk in order, from those of the measured ones
    (``measured_nodes``, :meth:`Plan.measured` order): a chunk that takes another's measurement
    gets copies of its nodes, each op position mapped to the member in the same place; node
    indices (``preds``) point into the returned list."""
    at = {c: k for k, c in enumerate(p.measured())}
    out = []
    for c, mem in enumerate(p.members):
        rep = p.same_as[c]
        base = len(out)
        nodes = measured_nodes[at[rep]]
        if rep == c:
            out.extend(msgspec.structs.replace(nd, preds=[q + base for q in nd.preds]) for nd in nodes)
            continue
        place = dict(zip(p.members[rep], mem))
        out.extend(msgspec.structs.replace(nd, ops=[place[o] for o in nd.ops if o in place],
                                           preds=[q + base for q in nd.preds]) for nd in nodes)
    return out

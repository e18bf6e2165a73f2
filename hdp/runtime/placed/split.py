"""A placed model cut into the device subgraphs hdp's concurrent executor runs
(:mod:`hdp.runtime.placed.executor`): the acyclic split hdp prices for HETERO, further cut so that a
subgraph's inputs from other devices are due at its start and its outputs to them leave at its end
(:func:`hdp.placement._kernels.concurrent_labels`, over the model's ops). A state's ReadValue and
Assign stay in one subgraph (the pieces between them are merged), or the split is refused with a
one-line error. Each subgraph becomes an ``ov.Model`` of its own; constants are never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hdp.base.errors import InputError
from hdp.placement import _kernels as K

_SOURCE_TYPES = ("Parameter", "Constant")


@dataclass
class SubgraphPlan:
    """One device subgraph: where its inputs come from, which outputs it gives."""

    device: str
    ops: list  # the ov ops of the subgraph, in model order (Results excluded)
    #: per sub-model input: ("input", i) for the model's i-th input, or ("sub", s, k) for output k of subgraph s
    sources: list[tuple] = field(default_factory=list)
    outputs: list = field(default_factory=list)  # the ov.Output each sub-model result reads
    results: list = field(default_factory=list)  # the original Result ops it carries (index into model.outputs)
    sinks: list = field(default_factory=list)  # Assign ops
    preds: set[int] = field(default_factory=set)
    succs: set[int] = field(default_factory=set)


@dataclass
class Split:
    """A placed model cut into device subgraphs (in a topological order of the subgraph DAG)."""

    subgraphs: list[SubgraphPlan]
    #: per model output: ("sub", s, k), ("input", i) for an input passed through, ("const", array)
    outputs: list[tuple]
    models: list  # ov.Model per subgraph


def _affinity(op) -> str:
    rt = op.get_rt_info()
    for key in ("affinity", "user_dataaffinity"):
        if key in rt:
            return rt[key].astype(str)
    raise InputError(f"op '{op.get_friendly_name()}' has no affinity; not a placed model")


def _variable_id(op) -> str | None:
    if op.get_type_name() not in ("ReadValue", "Assign"):
        return None
    try:
        return op.get_variable_id()
    except (AttributeError, RuntimeError):
        return op.get_friendly_name()


def subgraph_labels(model, devices: Sequence[str]) -> tuple[list, np.ndarray, np.ndarray]:
    """(compute ops, device index per op, subgraph label per op) of a placed model: the ops other
    than Parameters, Constants and Results, in model order, labelled by
    :func:`~hdp.placement._kernels.concurrent_labels`; the pieces between a variable's ReadValue and
    Assign are merged into one subgraph (InputError when another device lies between them)."""

    ops = [op for op in model.get_ordered_ops() if op.get_type_name() not in (*_SOURCE_TYPES, "Result")]
    pos = {op: i for i, op in enumerate(ops)}
    dev_index = {d: k for k, d in enumerate(devices)}
    eff = np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        d = _affinity(op)
        if d not in dev_index:
            raise InputError(f"op '{op.get_friendly_name()}' is placed on '{d}', not one of {list(devices)}")
        eff[i] = dev_index[d]
    edges = set()
    members: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for inp in op.inputs():
            u = pos.get(inp.get_source_output().get_node())
            if u is not None:
                edges.add((u, i))
        var = _variable_id(op)
        if var is not None:
            members.setdefault(var, []).append(i)
    e = np.array(sorted(edges), np.int64).reshape(-1, 2)
    src, dst = e[:, 0].copy(), e[:, 1].copy()
    n = len(ops)
    label = np.empty(n, np.int64)
    k = K.concurrent_labels(eff, np.zeros(n, np.bool_), src, dst, label, np.empty(n, np.int64), np.empty(n, np.int64),
                            np.empty(n, np.int64))
    split_vars = [(v, m) for v, m in members.items() if len({int(label[i]) for i in m}) > 1]
    if split_vars:
        label = _merge_state(label, k, eff, src, dst, split_vars, ops, devices)
    return ops, eff, label


def _merge_state(label, k, eff, src, dst, split_vars, ops, devices) -> np.ndarray:
    """Labels with, for each variable, every subgraph on a path between its ReadValue and its
    Assign merged into one (they are on one device: hdp ties them; so must be what lies between)."""
    from scipy.cluster.hierarchy import DisjointSet

    a, b = label[src], label[dst]
    cross = a != b
    succ: dict[int, set[int]] = {}
    pred: dict[int, set[int]] = {}
    for x, y in zip(a[cross].tolist(), b[cross].tolist()):
        succ.setdefault(x, set()).add(y)
        pred.setdefault(y, set()).add(x)

    def reach(start: set[int], nbr) -> set[int]:
        seen, stack = set(start), list(start)
        while stack:
            for y in nbr.get(stack.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return seen

    dsu = DisjointSet(range(k))
    dev_of = {int(label[i]): int(eff[i]) for i in range(label.shape[0])}
    for var, m in split_vars:
        pieces = {int(label[i]) for i in m}
        between = reach(pieces, succ) & reach(pieces, pred)
        other = sorted({dev_of[p] for p in between} - {dev_of[next(iter(pieces))]})
        if other:
            raise InputError(f"variable '{var}': ops on {devices[other[0]]} lie between its ReadValue and Assign; "
                             "the concurrent executor keeps a variable's state inside one subgraph (place "
                             f"what lies between them on {devices[dev_of[next(iter(pieces))]]}, or run it "
                             "under HETERO)")
        first = next(iter(between))
        for p in between:
            dsu.merge(first, p)
    root = np.array([dsu[p] for p in range(k)], np.int64)
    return root[label]


def split_model(model, devices: Sequence[str]) -> Split:
    """Cut ``model`` (an ov.Model with an affinity on every op; modified in place, pass a clone)
    into one ov.Model per device subgraph."""
    ops, eff, label = subgraph_labels(model, devices)
    return cut_model(model, ops, [devices[int(d)] for d in eff], label)


def stage_split(model, stages: Sequence[str]) -> Split:
    """Cut ``model`` (an affinity on every op naming one of ``stages``; modified in place, pass a
    clone) into one ov.Model per stage, whole: a serving plan's stages
    (:mod:`hdp.runtime.serve.plan_write`), each a set of ops that reads only the model's inputs and
    earlier stages (InputError when they depend on each other cyclically)."""
    ops = [op for op in model.get_ordered_ops() if op.get_type_name() not in (*_SOURCE_TYPES, "Result")]
    index = {s: k for k, s in enumerate(stages)}
    names, label = [], np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        d = _affinity(op)
        if d not in index:
            raise InputError(f"op '{op.get_friendly_name()}' is in '{d}', not one of {list(stages)}")
        names.append(d)
        label[i] = index[d]
    return cut_model(model, ops, names, label)


def cut_model(model, ops: list, device_of: Sequence[str], label: np.ndarray) -> Split:
    """Cut ``model`` (modified in place) into one ov.Model per distinct ``label`` of its compute
    ops ``ops`` (in model order), each on the device ``device_of`` names for its ops: a Parameter
    per input read from the model or another subgraph, a Result per output another subgraph or the
    model reads."""
    import openvino as ov
    import openvino.opset13 as opset

    params = list(model.get_parameters())
    p_index = {p: i for i, p in enumerate(params)}
    # subgraphs numbered by their first op: an order consistent with the ops' topological order
    # only within a subgraph; the DAG order is computed below
    first: dict[int, int] = {}
    for i, lab in enumerate(label):
        first.setdefault(int(lab), i)
    order = sorted(first, key=first.get)
    number = {lab: s for s, lab in enumerate(order)}
    subs = [SubgraphPlan(device=device_of[first[lab]], ops=[]) for lab in order]
    sub_of = {}
    for i, op in enumerate(ops):
        s = number[int(label[i])]
        subs[s].ops.append(op)
        sub_of[op] = s
        if op.get_type_name() == "Assign":
            subs[s].sinks.append(op)
    out_key: list[dict] = [{} for _ in subs]  # (node, port) -> result index, per producing subgraph

    def produce(s: int, output) -> int:
        key = (output.get_node(), output.get_index())
        if key not in out_key[s]:
            out_key[s][key] = len(subs[s].outputs)
            subs[s].outputs.append(output)
        return out_key[s][key]

    # cut edges: every input read from a Parameter or another subgraph becomes a sub-model Parameter
    cuts = []  # (consumer input, subgraph, source)
    for s, sub in enumerate(subs):
        seen: dict = {}
        for op in sub.ops:
            for inp in op.inputs():
                src = inp.get_source_output()
                node = src.get_node()
                if node in p_index:
                    source = ("input", p_index[node])
                elif node in sub_of and sub_of[node] != s:
                    t = sub_of[node]
                    source = ("sub", t, produce(t, src))
                    sub.preds.add(t)
                    subs[t].succs.add(s)
                else:
                    continue
                if source not in seen:
                    seen[source] = len(sub.sources)
                    sub.sources.append(source)
                cuts.append((inp, s, seen[source], src))
    outputs: list[tuple] = []
    result_src = []
    for j, res in enumerate(model.get_results()):
        src = res.input(0).get_source_output()
        node = src.get_node()
        if node in sub_of:
            outputs.append(("sub", sub_of[node], produce(sub_of[node], src)))
        elif node in p_index:
            outputs.append(("input", p_index[node]))
        else:  # a Constant given as an output
            outputs.append(("const", np.array(node.get_data(), copy=True)))
        result_src.append(src)
    # build: a Parameter per subgraph input, a Result per subgraph output
    new_params: list[list] = []
    for s, sub in enumerate(subs):
        ps = []
        for k, source in enumerate(sub.sources):
            if source[0] == "input":
                like = params[source[1]].output(0)
            else:
                like = subs[source[1]].outputs[source[2]]
            p = opset.parameter(like.get_partial_shape(), like.get_element_type(), name=f"hdp_in_{s}_{k}")
            ps.append(p)
        new_params.append(ps)
    results = [[opset.result(o) for o in sub.outputs] for sub in subs]
    for inp, s, k, _src in cuts:
        inp.replace_source_output(new_params[s][k].output(0))
    models = []
    for s, sub in enumerate(subs):
        for r in results[s]:
            r.get_rt_info()["affinity"] = sub.device
        models.append(ov.Model(results[s], sub.sinks, new_params[s], f"hdp_subgraph_{s}_{sub.device}"))
    topo = _topological(subs)
    remap = {old: new for new, old in enumerate(topo)}
    subs = [subs[s] for s in topo]
    models = [models[s] for s in topo]
    for sub in subs:
        sub.preds = {remap[t] for t in sub.preds}
        sub.succs = {remap[t] for t in sub.succs}
        sub.sources = [(x[0], remap[x[1]], x[2]) if x[0] == "sub" else x for x in sub.sources]
    outputs = [(x[0], remap[x[1]], x[2]) if x[0] == "sub" else x for x in outputs]
    return Split(subgraphs=subs, outputs=outputs, models=models)


def _topological(subs: list[SubgraphPlan]) -> list[int]:
    indeg = [len(s.preds) for s in subs]
    ready = [s for s, d in enumerate(indeg) if d == 0]
    out = []
    while ready:
        s = min(ready)
        ready.remove(s)
        out.append(s)
        for t in sorted(subs[s].succs):
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    if len(out) != len(subs):  # the stage split makes the order acyclic; guard it all the same
        raise InputError("the device subgraphs depend on each other cyclically; cannot run them")
    return out

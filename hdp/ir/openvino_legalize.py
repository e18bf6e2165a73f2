"""What the placement rules need from OpenVINO: the analysis at lowering, the rewrite at writing.

- :func:`fragile_ops` (lowering): ops whose output shape becomes less static when integer tensor
  values are unknown — what a device plugin compiling one HETERO subgraph sees. HETERO allocates
  the tensor handed from one subgraph to the next from the producer's compiled shape, so handing
  over such a tensor fails (``model input (shape=[?,1,?,?]) and the tensor (shape=(0.0.0.0)) are
  incompatible``).
- :func:`state_ties` (lowering): ReadValue/Assign pairs of one state variable.
- :func:`live_shapes` (lowering): ShapeOfs of dynamic-shaped tensors, which :func:`legalize`
  cannot fold: each is an edge from its input's producer in the written model, which HETERO's
  splitter sees like any other (:mod:`hdp.placement.subgraphs`).
- :func:`legalize` (writing a placement over several devices): every consumer of constant data or
  of a replicated chain gets its own copy on its own device (the first consumer keeps the
  original), and a ShapeOf of a static-shaped tensor becomes the Constant it folds to — so no
  folded tensor and no fragile tensor ever crosses a HETERO subgraph boundary, whatever
  subgraphs HETERO makes (it also splits one device's ops into several subgraphs to break
  cycles). Which ops a placement decides is the caller's (the roles of
  :mod:`hdp.placement.structure`, a layer above this one); ops are addressed by position.
"""

from __future__ import annotations

import numpy as np

_NOT_FOLDABLE = frozenset({"Parameter", "Result", "ReadValue", "Assign", "RandomUniform", "Multinomial",
                           "Loop", "If", "TensorIterator"})


def _known_values(ov_ops) -> dict:
    """op -> True when its values are known at compile time (Constants, ShapeOf of a static
    shape and what is computed only from those)."""
    known = {}
    for op in ov_ops:
        t = op.get_type_name()
        if t == "Constant":
            k = True
        elif t == "ShapeOf":
            k = op.input(0).get_partial_shape().is_static
        elif t in _NOT_FOLDABLE or op.get_input_size() == 0:
            k = False
        else:
            k = all(known[i.get_source_output().get_node()] for i in op.inputs())
        known[op] = k
    return known


def _less_static(before, after) -> bool:
    if before.rank.is_dynamic:
        return False
    if after.rank.is_dynamic:
        return True
    return any(a.is_static and not b.is_static for a, b in zip(before, after))


def fragile_ops(model) -> np.ndarray:
    """bool per op of ``model.get_ordered_ops()``: some output has a less static shape once every
    integer tensor whose values are not known at compile time is replaced by an opaque input.
    ``model`` is left as it was."""
    from openvino import opset13 as ops

    ov_ops = list(model.get_ordered_ops())
    known = _known_values(ov_ops)
    before = [[o.get_partial_shape() for o in op.outputs()] for op in ov_ops]
    saved = []
    for op in ov_ops:
        for inp in op.inputs():
            src = inp.get_source_output()
            node = src.get_node()
            if known[node] or node.get_type_name() == "Parameter" or not src.get_element_type().is_integral_number():
                continue
            p = ops.parameter(src.get_partial_shape(), src.get_element_type())
            inp.replace_source_output(p.output(0))
            saved.append((inp, src))
    out = np.zeros(len(ov_ops), bool)
    if not saved:
        return out
    try:
        for op in ov_ops:
            try:
                op.validate_and_infer_types()
            except RuntimeError:
                # an op whose own shape does not follow its inputs' (a ReadValue keeps its
                # variable's shape whatever its initialiser gives) keeps the shapes it had
                pass
        for i, op in enumerate(ov_ops):
            out[i] = any(_less_static(b, o.get_partial_shape()) for b, o in zip(before[i], op.outputs()))
    finally:
        for inp, src in saved:
            inp.replace_source_output(src)
        for op in ov_ops:
            op.validate_and_infer_types()
    return out


def live_shapes(ov_ops) -> np.ndarray:
    """bool per op: a ShapeOf whose input shape is dynamic (it stays in the written model;
    :func:`legalize` folds the others)."""
    return np.array([op.get_type_name() == "ShapeOf" and not op.input(0).get_partial_shape().is_static
                     for op in ov_ops], bool)


def state_ties(ov_ops) -> list[tuple[int, int]]:
    """(ReadValue position, Assign position) for every state variable that has both."""
    reads: dict[str, list[int]] = {}
    writes: dict[str, list[int]] = {}
    for i, op in enumerate(ov_ops):
        t = op.get_type_name()
        if t in ("ReadValue", "Assign") and hasattr(op, "get_variable_id"):
            (reads if t == "ReadValue" else writes).setdefault(op.get_variable_id(), []).append(i)
    pairs = []
    for var, rs in reads.items():
        for j in rs[1:] + writes.get(var, []):
            pairs.append((rs[0], j))
    return pairs


def _chain(out, keep: set) -> tuple[set, dict]:
    """The nodes of ``keep`` producing ``out``, walking up through them (a ShapeOf's data input
    included: a ShapeOf of a dynamic tensor stays an edge from it at run time, and a chain node
    shared by two copies would join their HETERO subgraphs); and the inputs that enter the chain
    from outside, by source."""
    seen, stack, boundary = set(), [out.get_node()], {}
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for i in n.inputs():
            s = i.get_source_output()
            node = s.get_node()
            if node in keep:
                stack.append(node)
            else:
                boundary.setdefault((node, s.get_index()), []).append(i)
    return seen, boundary


def _clone_chain(out, keep: set, devices: dict, device: str, tag: str):
    """A copy of the sub-DAG producing ``out`` made of the nodes in ``keep`` (Constants included:
    HETERO hands a Constant shared by two subgraphs from one to the other, which fails like any
    folded tensor; a copied Constant shares its data in memory, and ``ov.save_model`` stores
    identical data once); its other inputs (the data a ShapeOf reads, placed producers) stay
    shared. Every new node gets ``device``; returns the copy of ``out``."""
    import openvino as ov
    from openvino import opset13 as ops

    _, boundary = _chain(out, keep)
    saved, params = [], []
    for (node, k), inputs in boundary.items():
        src = node.output(k)
        p = ops.parameter(src.get_partial_shape(), src.get_element_type())
        for i in inputs:
            i.replace_source_output(p.output(0))
        saved.append((src, inputs))
        params.append(p)
    try:
        copy = ov.Model([ops.result(out)], params, "hdp-copy").clone()
    finally:
        for src, inputs in saved:
            for i in inputs:
                i.replace_source_output(src)
    new_out = copy.get_results()[0].input(0).get_source_output()
    # the copy's own nodes, listed before its parameters are replaced by the shared sources: after
    # that, walking the copy would walk on into the original graph (renaming and re-placing it)
    nodes = [n for n in copy.get_ordered_ops() if n.get_type_name() not in ("Parameter", "Result")]
    for p, (src, _) in zip(copy.get_parameters(), saved):
        for target in list(p.output(0).get_target_inputs()):
            target.replace_source_output(src)
    for node in nodes:
        node.set_friendly_name(f"{node.get_friendly_name()}/hdp_copy_{tag}")
        for o in node.outputs():
            o.get_tensor().set_names(set())
        devices[node] = device
    return new_out


def legalize(model, ov_ops, placed: np.ndarray, device_of: list[str]) -> dict:
    """Rewrite ``model`` for a placement over several devices and set every op's affinity.
    ``ov_ops[i]`` is an op whose device is ``device_of[i]``; ``placed[i]`` is true when the
    placement decides it (role ``PLACED`` of :func:`hdp.placement.structure.roles` of the lowered
    graph), false for constant data and replicated chains, which every consumer gets a copy of.
    Returns counts for the report: ``copies`` (ops added) and ``folded_shapes`` (ShapeOfs replaced
    by Constants)."""
    from openvino import opset13 as ops

    placed = np.asarray(placed)
    if placed.dtype != np.bool_:  # the roles themselves (PLACED is 0) would read inverted
        raise TypeError(f"legalize takes a bool mask of the placed ops, not {placed.dtype} roles")
    devices = {op: d for op, d in zip(ov_ops, device_of)}
    pos = {op: i for i, op in enumerate(ov_ops)}
    free = {op for op, p in zip(ov_ops, placed) if not p}
    # each free op's first placed consumer keeps the original chain where no other consumer shares it
    first_placed: dict = {}
    for i in range(len(ov_ops) - 1, -1, -1):
        op = ov_ops[i]
        if placed[i]:
            continue
        best = None
        for o in op.outputs():
            for t in o.get_target_inputs():
                c = t.get_node()
                cand = first_placed.get(c) if c in free else (None if c.get_type_name() == "Result" else c)
                if cand is not None and (best is None or pos[cand] < pos[best]):
                    best = cand
        first_placed[op] = best
    copies = 0
    for i, op in enumerate(ov_ops):
        if not placed[i]:
            continue
        for inp in op.inputs():
            src = inp.get_source_output()
            node = src.get_node()
            if node not in free:
                continue
            if all(first_placed.get(n) is op for n in _chain(src, free)[0]):
                continue  # the original chain serves its first consumer alone
            before = len(devices)
            inp.replace_source_output(_clone_chain(src, free, devices, devices[op], str(i)))
            copies += len(devices) - before
    folded = 0
    for op in list(model.get_ordered_ops()):
        if op.get_type_name() == "ShapeOf" and op.input(0).get_partial_shape().is_static:
            shape = np.array(list(op.input(0).get_shape()), dtype=op.get_output_element_type(0).to_dtype())
            c = ops.constant(shape).output(0).get_node()
            c.set_friendly_name(op.get_friendly_name())
            devices[c] = devices.get(op, device_of[0])
            op.output(0).replace(c.output(0))
            folded += 1
    model.validate_nodes_and_infer_types()
    for op in model.get_ordered_ops():
        if op not in devices:  # a node made above (Constants of folded shapes are set)
            devices[op] = device_of[0]
        op.get_rt_info()["user_dataaffinity"] = devices[op]
    return {"copies": copies, "folded_shapes": folded}

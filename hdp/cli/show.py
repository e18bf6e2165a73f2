"""Human-readable summaries of Modules and (placed) models for ``hdp show``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from hdp.base.errors import HdpError
from hdp.costgraph.graph import time_text
from hdp.ir.openvino_frontend import lower_file_model
from hdp.ir.openvino_read import read_model
from hdp.ir.plan import is_plan_file
from hdp.ir.serde import load
from hdp.ir.types import Module
from hdp.pipeline.phases import show_lines as phase_show_lines
from hdp.placement.memory import size_text
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.runtime.placed.model import (
    ops_placed,
    placed_count_text,
    placed_from_model,
    weight_bytes_by_device,
)
from hdp.runtime.serve.blob import describe_blob
from hdp.runtime.serve.plan_serve import describe_plan
from hdp.target.capacity import device_memory, max_allocations


def _table(counter: Counter, limit: int = 12) -> list[str]:
    rows = counter.most_common()
    lines = [f"    {k:<28} {v}" for k, v in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"    ... {len(rows) - limit} more types, {sum(v for _, v in rows[limit:])} ops")
    return lines


def describe(m: Module) -> str:
    g = m.graph
    lines = [f"ops: {g.n_ops}   edges: {g.n_edges}   schema: {m.schema}",
             f"stages: {', '.join(m.stages())}"]
    if m.meta.get("source"):
        lines.append(f"source: {m.meta['source']}  ({m.meta.get('input_shapes', '')})")
    lines.append(f"FLOPs: {sum(op.flops for op in g.ops):.3e}   weights: "
                 f"{sum(op.weight_bytes for op in g.ops) / 1e6:.1f} MB")
    lines.append("op types:")
    lines += _table(Counter(op.type for op in g.ops))
    if m.features is not None:
        f = m.features
        lines.append(f"features: {f.matrix.shape[1]} columns (vocabulary v{f.vocab_version})")
        legend = _compress_legend(f.legend)
        lines.append("    " + ", ".join(legend))
    if m.support is not None:
        mask = m.support.mask.numpy()
        lines.append("support: " + ", ".join(f"{d}: {int(mask[:, j].sum())}/{g.n_ops}"
                                             for j, d in enumerate(m.support.devices)))
    if m.costs is not None:
        c = m.costs
        t = c.op_time.numpy()
        lines.append("costs (sum of op times): " + ", ".join(
            f"{d}: {time_text(m, float(np.where(np.isfinite(t[:, j]), t[:, j], 0).sum()))} ({c.kind[j]})"
            for j, d in enumerate(c.devices)))
    if m.coarse is not None:
        c = m.coarse
        lines.append(f"coarse: {c.n_groups} groups, {c.indices.shape[0]} group edges "
                     f"({g.n_ops / max(c.n_groups, 1):.1f} ops per group)")
    if m.partition is not None:
        p = m.partition
        lines.append(f"partition: {p.method}, {p.group_device.shape[0]} groups")
    if m.placement is not None:
        p = m.placement
        counts = Counter(p.devices[int(d)] for d in p.device_of.numpy())
        lines.append(f"placement ({p.method}): {placed_count_text({d: counts.get(d, 0) for d in p.devices})}")
    return "\n".join(lines)


def op_affinities(module: Module, pm) -> list[str | None]:
    """The affinity written for each of ``module``'s ops (None where the placed model has none),
    matched by name through the lowering's renames: the ops hdp places, as compile counts them."""
    aff = {op.get_friendly_name(): op.get_rt_info()["affinity"].astype(str) for op in pm.model.get_ordered_ops()}
    names = {v: k for k, v in module.graph.renamed.items()}
    return [aff.get(names.get(op.name, op.name)) for op in module.graph.ops]


def memory_report(module: Module, pm) -> list[dict]:
    """Per device of a placed model: its stored weights as written (``stored``), its estimated
    memory (``estimate``, :mod:`hdp.placement.memory`) and its capacity (``capacity``, bytes or
    ``inf``: the ``--memory`` caps it was placed under over its target's, :mod:`hdp.target.capacity`)."""

    devs = tuple(pm.devices)
    per_op = np.array([devs.index(d) if d in devs else 0 for d in op_affinities(module, pm)], np.int64)
    problem = build_problem(module, devs, capacity=pm.capacities(), device_memory=device_memory(pm.target))
    gd = problem.structure.group_devices(per_op)
    est = Simulator(problem).memory(gd)
    held = weight_bytes_by_device(pm)
    # the largest single tensor on each device, beside the device's max_allocation
    largest = np.zeros(len(devs))
    if gd.size:
        np.maximum.at(largest, gd, problem.largest_allocation()[np.arange(gd.shape[0]), gd])
    return [{"device": d, "stored": int(held.get(d, 0)), "estimate": float(e), "capacity": float(c),
             "largest": float(big), "max_allocation": float(cap)}
            for d, e, c, big, cap in zip(devs, est, problem.caps, largest, _allocation_caps(pm.target, devs))]


def _allocation_caps(target, devs) -> list[float]:
    caps = dict(zip(target.device_names, max_allocations(target)))
    return [float(caps.get(d, np.inf)) for d in devs]


def memory_lines(module: Module, pm, report: list[dict] | None = None) -> str:
    """:func:`memory_report` (or the ``report`` already made) as one line."""

    return "memory (stored weights as written; estimated need; capacity): " + ", ".join(
        f"{r['device']}: {size_text(r['stored'])}; {size_text(r['estimate'])}; "
        + (size_text(r["capacity"]) if np.isfinite(r["capacity"]) else "unlimited")
        + (" OVER" if r["estimate"] > r["capacity"] else "")
        + (f" (largest tensor {size_text(r['largest'])} of at most {size_text(r['max_allocation'])}"
           + (" OVER" if r["largest"] > r["max_allocation"] else "") + ")"
           if np.isfinite(r.get("max_allocation", np.inf)) else "")
        for r in (report if report is not None else memory_report(module, pm)))


def placed_memory(path) -> tuple[str, list[dict]] | None:
    """(:func:`memory_lines`, :func:`memory_report`) of a placed model file placed under device memory
    caps (``--memory`` overrides it records, or memory its target declares); None for one without."""

    model = read_model(path)
    pm = placed_from_model(model, path)
    if not pm.memory and all(pm.target.device(d).memory is None and pm.target.device(d).max_allocation is None
                             for d in pm.devices if d in pm.target.device_names):
        return None
    module = lower_file_model(model, path)
    report = memory_report(module, pm)
    return memory_lines(module, pm, report), report


def _compress_legend(legend) -> list[str]:
    """Group ``prefix:item`` columns: ``type[64]`` rather than 64 names."""
    out, counts = [], Counter()
    order = []
    for name in legend:
        prefix = name.split(":", 1)[0] if ":" in name else name
        if prefix not in counts:
            order.append(prefix)
        counts[prefix] += 1
    for p in order:
        out.append(f"{p}[{counts[p]}]" if counts[p] > 1 else p)
    return out


#: What ``hdp show placed.xml`` says about readers other than hdp's.
PLAIN_READ_WARNING = ("note: plain OpenVINO drops this placement: read_model gives each op's device back as "
                      "rt_info 'user_dataaffinity', HETERO reads 'affinity', so benchmark_app, Model Server, "
                      "C++ or openvino-genai given this .xml run HETERO's own placement, with no error. Load it "
                      "with hdp.runtime.placed.model.compile_placed, or export the compiled placement: "
                      "hdp export PLACED.xml -o placed.blob")


def show(path: str) -> str:
    p = Path(path)
    if is_plan_file(p):
        return describe_plan(p)
    if p.suffix.lower() == ".blob":
        return describe_blob(p)
    if p.suffix.lower() in (".xml", ".onnx"):
        model = read_model(p)  # read once: lowered for the summary, then checked for affinities
        module = lower_file_model(model, p)
        text = describe(module)
        try:
            pm = placed_from_model(model, p)
        except HdpError as e:
            return text + f"\nnot placed ({e})"
        recorded = ops_placed(model)
        in_file = Counter(op_affinities(module, pm))
        file_text = ", ".join(f"{d} {in_file.get(d, 0)}" for d in pm.devices)
        if recorded is not None:  # the count compile gave: the ops it placed, before copies of constants
            where = f"{placed_count_text(recorded)}; the file holds {module.graph.n_ops} ops ({file_text})" \
                + (", constants copied for each device that reads them" if module.graph.n_ops != sum(recorded.values())
                   else "")
        else:
            where = f"{module.graph.n_ops} ops ({file_text})"
        phases = "".join(line + "\n" for line in phase_show_lines(model, str(p)))  # placed with --phases
        return text + f"\nplaced ({pm.method}) on {', '.join(pm.devices)}: {where}\n" + memory_lines(module, pm) \
            + "\n" + phases + PLAIN_READ_WARNING.replace("PLACED", p.stem)

    return describe(load(p))

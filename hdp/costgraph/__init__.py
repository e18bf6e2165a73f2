"""Abstract placement problems (cost graphs) as a frontend: JSON in, an hdp Module out.

A cost graph is a placement problem without a model: ops with a time per device (or
"unsupported"), the bytes each op holds on its device, ties (ops that share a device), tensors
with a transfer time, and devices with counts, memory caps and a ``free_comm`` flag (a device
whose transfers cost it nothing, the host CPU of Tarnawski et al.). Two formats are read:

- ``hdp``: hdp's own format, documented in :mod:`hdp.costgraph.native` and in docs/guide/costgraphs.md;
- ``dnn-partitioning``: the workloads of msr-fiddle/dnn-partitioning (Tarnawski et al., NeurIPS
  2020), :mod:`hdp.costgraph.peer`.

Both become a :class:`CostGraph`, which :func:`lower` turns into a Module with its graph, support
and cost table, so the placement problem, the simulator and the placers run on it unchanged:

- every op is a ``CostOp`` with one output port per tensor it produces; ``Op.weight_bytes`` holds
  the bytes it needs on its device;
- ties become ``Graph.ties`` and ``meta["placement_rules"] = "ties"``: the groups are the ties
  alone, no HETERO rule applies (:mod:`hdp.placement.structure`);
- each edge carries its tensor's bytes and, in ``Costs.edge_time``, its transfer time;
- caps, ``free_comm`` and a training graph's backward ops go to ``meta`` (:func:`capacities`,
  :func:`free_comm`, :func:`backward_ops`), the workload's path and format too;
- its devices are a target of their own (``hdp pass partition`` on a lowered cost graph needs no
  ``--devices``, :func:`hdp.cli.costgraph.costgraph_target`); its times print in its own unit
  (:func:`time_text`).
"""

from __future__ import annotations

from pathlib import Path

from hdp.base.errors import InputError
from hdp.costgraph import native, peer
from hdp.costgraph.graph import FORMATS, CostGraph, check, load_json


def detect(path: str | Path, data) -> str:
    """The format of a parsed workload: ``hdp`` if it says so, ``dnn-partitioning`` if it has the
    peer's top-level fields; else an InputError."""
    if isinstance(data, dict) and data.get("format") == "hdp-costgraph":
        return "hdp"
    if isinstance(data, dict) and "maxFPGAs" in data and "nodes" in data:
        return "dnn-partitioning"
    raise InputError(f"{path}: not a cost graph I know (give --format {' or '.join(FORMATS)})")


def read(path: str | Path, fmt: str = "auto") -> CostGraph:
    """The cost graph in ``path`` (``fmt``: ``auto``, ``hdp`` or ``dnn-partitioning``)."""
    data = load_json(path)
    if fmt == "auto":
        fmt = detect(path, data)
    if fmt == "hdp":
        parse = native.parse
    elif fmt == "dnn-partitioning":
        parse = peer.parse
    else:
        raise InputError(f"unknown cost-graph format '{fmt}' (known: {', '.join(FORMATS)})")
    cg = parse(str(path), data)
    check(cg)
    return cg



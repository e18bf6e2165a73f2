"""An independent re-implementation of the max-load scoring of msr-fiddle/dnn-partitioning
(``computeLoadForResultOrg`` in their throughput-dp/dp.cpp), written from the rule, over the raw
JSON of a workload and a split: nothing of hdp is used, so hdp's own pricing is checked against it.

Rule: every ``cpus`` entry is device 0, ``fpgas[i]`` device i+1; a node the split leaves out takes
its colour class's device. The CPU's load is its nodes' ``cpuLatency``; an accelerator's is its
nodes' ``fpgaLatency`` plus, for every node u whose out-edges reach another device, u's edge cost
once on u's device and once on each distinct receiving device (the CPU never pays transfers).
The score is the largest load. ``strict`` also checks support and ``maxSizePerFPGA`` (their
scorer only warns on memory).
"""

from __future__ import annotations

import json
import os


def _load(x):
    if isinstance(x, (str, os.PathLike)):
        with open(x) as f:
            return json.load(f)
    return x


def device_of(workload, split) -> dict[int, int]:
    w, s = _load(workload), _load(split)
    dev: dict[int, int] = {}
    for part in s.get("cpus", []):
        for i in part["nodes"]:
            dev[i] = 0
    for j, part in enumerate(s.get("fpgas", []), start=1):
        for i in part["nodes"]:
            dev[i] = j
    by_class: dict[int, set[int]] = {}
    for nd in w["nodes"]:
        if "colorClass" in nd and nd["id"] in dev:
            by_class.setdefault(nd["colorClass"], set()).add(dev[nd["id"]])
    for nd in w["nodes"]:
        if nd["id"] not in dev:
            ds = by_class.get(nd.get("colorClass"), set()) if "colorClass" in nd else set()
            if len(ds) != 1:
                raise ValueError(f"node {nd['id']}: no device")
            dev[nd["id"]] = next(iter(ds))
    return dev


def score(workload, split, strict: bool = True) -> tuple[float, dict[int, float]]:
    """(max-load, load per used device) of ``split`` on ``workload`` (paths or parsed JSON)."""
    w = _load(workload)
    dev = device_of(w, split)
    nodes = {nd["id"]: nd for nd in w["nodes"]}
    load: dict[int, float] = {}
    mem: dict[int, float] = {}
    for i, nd in nodes.items():
        d = dev[i]
        load[d] = load.get(d, 0.0) + float(nd["cpuLatency"] if d == 0 else nd["fpgaLatency"])
        mem[d] = mem.get(d, 0.0) + float(nd.get("size", 0))
        if strict and d != 0 and not nd["supportedOnFpga"]:
            raise ValueError(f"node {i} unsupported on fpga {d}")
    out: dict[int, set[int]] = {}
    cost: dict[int, float] = {}
    for e in w["edges"]:
        out.setdefault(e["sourceId"], set()).add(dev[e["destId"]])
        cost[e["sourceId"]] = float(e["cost"])
    for u, ds in out.items():
        others = ds - {dev[u]}
        if others:
            for d in others | {dev[u]}:
                if d != 0:
                    load[d] = load.get(d, 0.0) + cost[u]
    if strict:
        classes: dict[int, int] = {}
        for i, nd in nodes.items():
            if "colorClass" in nd and classes.setdefault(nd["colorClass"], dev[i]) != dev[i]:
                raise ValueError(f"colour class {nd['colorClass']} split")
        for d, b in mem.items():
            if d != 0 and b > w["maxSizePerFPGA"]:
                raise ValueError(f"fpga {d} over its memory cap")
        if len(load) > w["maxFPGAs"] + (1 if 0 in load else 0):
            raise ValueError("too many devices")
    return max(load.values()), load

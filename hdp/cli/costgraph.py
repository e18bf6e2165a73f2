"""``hdp place``: place an abstract cost graph (:mod:`hdp.costgraph`) and write the split.

Registered on the main group in :mod:`hdp.cli.main`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_write
from hdp.base.validation import Seed, TimeLimit
from hdp.cli.common import Bounded, check_paths, user_errors
from hdp.costgraph import native, peer, read
from hdp.costgraph.graph import capacities, is_costgraph, lower, max_load_data, problem_for
from hdp.ir.serde import load
from hdp.placement import maxload as ML
from hdp.placement import maxload_search as MS
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from
from hdp.target.target import Device, Target, validate_target

FORMAT_CHOICES = ["auto", "hdp", "dnn-partitioning"]


def load_costgraph(path: str, fmt: str):
    """The Module of a cost-graph JSON file, or of a ``.hdp`` file lowered from one."""

    if path.endswith(".hdp"):
        m = load(path)
        if not is_costgraph(m):
            raise InputError(f"{path}: not a lowered cost graph (hdp place takes cost graphs; use hdp compile for models)")
        return m
    return lower(read(path, fmt))


def costgraph_target(module):
    """The target of a cost graph's Module: its own devices, modeled (its cost table prices every
    op; the nominal roofline below is never used), with its memory caps."""

    devs = [Device(name=d, kind="modeled", peak_flops={"f32": 1e12}, memory_bandwidth=1e12,
                   memory=int(c) if np.isfinite(c) else None, description="a device of the cost graph")
            for d, c in zip(module.costs.devices, capacities(module, module.costs.devices))]
    src = module.meta.get("costgraph", "cost graph")
    return validate_target(Target(name=Path(src).stem or "costgraph", devices=devs,
                                  description=f"the devices of {src}"), f"{src} (its devices as a target)")


def place_costgraph(module, objective: str, method: str, time_limit: float = 60.0, seed: int = 0):
    """(device per group, info) of ``method`` on a cost graph's Module under ``objective``.

    ``throughput`` is the largest per-device load with the caps (the problem's objective,
    :func:`hdp.costgraph.throughput_objective`): ``optimal`` runs :func:`hdp.placement.maxload_search.optimize`
    (heuristics, then the MILP within ``time_limit``, with its proven bound); other methods place
    the same problem as for a model (those that serve no throughput refuse). ``latency`` runs the method on the sequential cost model, as for a model."""

    p = problem_for(module, objective)
    ml = max_load_data(p, module)
    t0 = time.perf_counter()
    if objective == "throughput" and method.partition(":")[0] == "optimal":
        s = MS.optimize(p, ml, time_limit=time_limit, seed=seed)
        gd = s.group_device
        info = {"method": "optimal", "status": s.status, "bound": s.bound, "gap": s.gap,
                "contiguous": s.info.get("contiguous", {}),
                "contiguous_at": next((t for t, _, st in s.info.get("trajectory", []) if st == "contiguous dp"), None)}
    else:
        opts = {"time_limit": str(time_limit), "margin": "0"} if method.partition(":")[0] == "optimal" else {}
        gd = place(method_from(method, opts), PlaceContext(module=module, problem=p, seed=seed)).group_device
        info = {"method": method}
    info["seconds"] = time.perf_counter() - t0
    load, mem = ML.loads(p, ml, gd)
    info.update(max_load=float(load.max()), loads=load, memory=mem, feasible=ML.feasible(p, ml, gd))
    if objective == "latency":
        info["latency"] = Simulator(p).latency(gd)
    return p, np.asarray(gd, np.int64), info


def _caps(module, devices):
    return capacities(module, devices)


@click.command("place")
@click.argument("workload", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Split file (JSON).")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="auto", show_default=True,
              help="Workload format (auto: from its content; a .hdp file lowered from a cost graph also works).")
@click.option("--objective", type=click.Choice(["throughput", "latency"]), default="throughput", show_default=True,
              help="throughput: least max per-device load within the memory caps (the peer's rule: a cut tensor "
                   "costs on its sender and on each device that reads it, free_comm devices pay nothing); "
                   "latency: the sequential cost model.")
@click.option("--method", default="optimal", show_default=True, help="Placement method (hdp passes lists them).")
@click.option("--split-format", type=click.Choice(["auto", "hdp", "dnn-partitioning"]), default="auto",
              show_default=True, help="Split written (auto: the workload's format).")
@click.option("--time-limit", type=Bounded(TimeLimit), default=60.0, show_default=True,
              help="Seconds the exact solver may take; it then returns its best placement and bound.")
@click.option("--seed", type=Bounded(Seed), default=0, show_default=True)
@user_errors
def place_cmd(workload, output, fmt, objective, method, split_format, time_limit, seed):
    """Place the ops of a cost graph WORKLOAD (hdp or msr-fiddle/dnn-partitioning JSON) on its devices."""

    check_paths(inputs={"WORKLOAD": workload}, outputs={"-o": output})
    m = load_costgraph(workload, fmt)
    p, gd, info = place_costgraph(m, objective, method, time_limit, seed)
    if not info["feasible"]:
        over = [f"{d} holds {b:.0f} B > {c:.0f} B" for d, b, c in zip(p.devices, info["memory"], _caps(m, p.devices))
                if b > c]
        raise InputError(f"{workload}: {method}'s placement breaks a memory cap ({'; '.join(over)}); nothing written "
                         f"(optimal respects the caps)")
    op_dev = p.op_devices(gd)
    if split_format == "auto":
        split_format = m.meta.get("costgraph_format", "hdp")
    if split_format == "dnn-partitioning":
        doc = peer.split_json(m, p.devices, op_dev, info["loads"])
    else:
        value = info["max_load"] if objective == "throughput" else info["latency"]
        doc = native.split_json(m, p.devices, op_dev, objective, value, info["loads"], info["memory"])
    atomic_write(output, (json.dumps(doc) + "\n").encode())
    extra = ""
    if "bound" in info:
        extra = f", {info['status']}, bound {info['bound']:.6g} (gap {info['gap'] * 100:.2f} %)"
        c = info["contiguous"]
        if info["contiguous_at"] is not None:
            extra += (f"; best contiguous split {c['value']:.6g} after {info['contiguous_at']:.3f} s"
                      + ("" if c.get("exact") else " (not proven: search cut short)"))
    fig = f"max-load {info['max_load']:.6g}" if objective == "throughput" else f"latency {info['latency']:.6g}"
    caps = "" if info["feasible"] else " — OVER A MEMORY CAP"
    click.echo(f"{method}: {fig}{extra}{caps}; {info['seconds']:.2f} s -> {output}")

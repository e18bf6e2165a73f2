"""Modeled: the best plan over 1, 2 and 4 hosts of the ``i9-flex170`` kind for an LLM of the zoo.

Each host is an ``i9-flex170`` (a modeled i9-12900K CPU and a Flex 170 GPU, their published specs);
the hosts are joined pairwise by links of 1, 10 and 100 Gbit/s (latency ``--latency``). One host has
no memory cap; on ``n`` = 2 and 4 hosts each host's ``memory`` is declared as ``1.08 T_n / n``, where
``T_n`` is what an ``n``-stage split of the model holds in all on the GPU (the plan model's memory of
the groups cut into ``n`` stages of equal stored bytes, in their order: a split holds more than the
model alone, a constant read by two stages, as tied embeddings are, sits in both). The script checks
that ``n - 1`` such hosts cannot hold the model (``T_(n-1) / (n - 1)``, and on one host its smallest
need, exceed the host's memory), so it needs all ``n``. For each case a target file is written
(``--targets DIR``) and the model compiled for latency (``hdp compile --method auto``) and for
throughput (``--objective throughput --requests N``): the simulated latency, the simulated
requests/s, and which layers sit on which device.

Everything here is simulated from the targets' specs (no device is run):

    python bench/hosts_table.py --model qwen2.xml            # the zoo's largest LLM: hdp zoo qwen2 -o qwen2.xml
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from hdp.pipeline.compile import compile_model
from hdp.pipeline.report import _problem
from hdp.placement.memory import size_text, smallest_need
from hdp.placement.plan import GroupPlan, PlanPricer, Replica
from hdp.target.streams import plan_devices
from hdp.target.target import load_target, parse_target

HOST = load_target("i9-flex170")


def target_text(n: int, gbit: float, latency: float, host_memory: int | None) -> str:
    """A target of ``n`` i9-flex170 hosts ``h0``.. joined pairwise at ``gbit`` Gbit/s."""
    lines = [f'name = "i9-flex170-x{n}-{gbit:g}g"',
             f'description = "modeled: {n} i9-flex170 hosts, links of {gbit:g} Gbit/s"']
    for i in range(n):
        for d in HOST.devices:
            lines.append("[[devices]]")
            lines.append(f'name = "{d.name}_h{i}"')
            lines.append('kind = "modeled"')
            lines.append("peak_flops = { " + ", ".join(f"{k} = {v!r}" for k, v in d.peak_flops.items()) + " }")
            lines += [f'precision = "{d.precision}"', f"memory_bandwidth = {d.memory_bandwidth!r}",
                      f"op_overhead = {d.op_overhead!r}", f"efficiency = {d.efficiency!r}", f'memory = "{d.memory}"']
    ln = HOST.link
    lines += ["[link]", f"latency = {ln.latency!r}", f"bandwidth = {ln.bandwidth!r}",
              f"subgraph_overhead = {ln.subgraph_overhead!r}"]
    if n > 1:
        for i in range(n):
            lines += ["[[hosts]]", f'name = "h{i}"',
                      "devices = [" + ", ".join(f'"{d.name}_h{i}"' for d in HOST.devices) + "]"]
            if host_memory is not None:
                lines.append(f"memory = {int(host_memory)}")
        for i in range(n):
            for j in range(i + 1, n):
                lines += ["[[links]]", f'hosts = ["h{i}", "h{j}"]', f"bandwidth = {gbit * 1e9 / 8!r}",
                          f"latency = {latency!r}"]
    return "\n".join(lines) + "\n"


_LAYER = re.compile(r"layers[._](\d+)[._]")


def where(module) -> str:
    """``CPU_h0: layers 0-11; GPU_h1: layers 12-23 +head``: the decoder layers (and the rest) on each device."""
    pl = module.placement
    dev = pl.device_of.numpy()
    per: dict[int, set] = {}
    other: dict[int, int] = {}
    for op, d in zip(module.graph.ops, dev.tolist()):
        if d < 0 or op.type in ("Constant", "Parameter", "Result"):
            continue
        m = _LAYER.search(op.name)
        if m:
            per.setdefault(d, set()).add(int(m.group(1)))
        else:
            other[d] = other.get(d, 0) + 1
    parts = []
    for d in sorted(set(per) | set(other)):
        layers = sorted(per.get(d, ()))
        runs = []
        for x in layers:
            if runs and x == runs[-1][1] + 1:
                runs[-1][1] = x
            else:
                runs.append([x, x])
        text = ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in runs)
        extra = f" +{other[d]} other ops" if other.get(d) else ""
        parts.append(f"{pl.devices[d]}: {'layers ' + text if text else ''}{extra}".replace(": +", ": "))
    return "; ".join(parts)


def split_bytes(p, target, k: int) -> float:
    """Bytes a ``k``-stage split of ``p``'s groups (equal stored bytes per stage, in group order) holds
    in all on the GPU, as the plan model counts them."""
    pr = PlanPricer(p, plan_devices(target, p.devices), 1)
    gpu = p.devices.index("GPU_h0")
    c = np.cumsum(pr.m_fixed[:, gpu])
    stage = np.minimum((c / c[-1] * k).astype(np.int64), k - 1)
    plan = GroupPlan(stage, tuple((Replica(gpu),) for _ in range(k)))
    return float(pr.memory(plan)[0][gpu])


def run(model: Path, n: int, gbit: float, latency: float, memory: int | None, requests: int, tdir: Path,
        tmp: Path, seconds: float):
    text = target_text(n, gbit, latency, memory)
    path = tdir / f"i9-flex170-x{n}-{gbit:g}g.toml"
    path.write_text(text)
    tgt = parse_target(text, str(path))
    lat = compile_model(model, tmp / "lat.xml", tgt, method="auto", check=False, compare=False,
                        options={"timeout": seconds})
    thr = compile_model(model, tmp / "thr.xml", tgt, method="auto", check=False, compare=False,
                        options={"requests": requests, "timeout": seconds})
    li, ti = lat.module.placement.info, thr.module.placement.info
    return {"latency_ms": float(li["simulated"]) * 1e3, "rate": 1.0 / float(ti["period"]),
            "lat_where": where(lat.module), "thr_where": where(thr.module),
            "plan": where(thr.module), "hosts": li.get("hosts", "")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, type=Path, help="the model (.xml), e.g. hdp zoo qwen2 -o qwen2.xml")
    ap.add_argument("--hosts", default="1,2,4")
    ap.add_argument("--gbit", default="1,10,100")
    ap.add_argument("--latency", type=float, default=50e-6, help="seconds per crossing of a host link")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0, help="time limit of each placement search")
    ap.add_argument("--targets", type=Path, default=None, help="write the target files here (default: a temp dir)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hdp-hosts-") as t:
        tmp = Path(t)
        tdir = a.targets or tmp
        tdir.mkdir(parents=True, exist_ok=True)
        one = compile_model(a.model, tmp / "one.xml", parse_target(target_text(1, 10, a.latency, None), "one"),
                            method="single:GPU_h0", check=False, compare=False)
        t1 = parse_target(target_text(1, 10, a.latency, None), "one")
        p1 = _problem(one.module, t1)
        need = smallest_need(p1)
        split = {k: split_bytes(p1, t1, k) for k in range(1, 5)}
        print(f"model {a.model.name}: smallest need {size_text(need)} on one host; an n-stage split on the GPU "
              f"holds {', '.join(f'{k}: {size_text(v)}' for k, v in split.items())} (modeled, i9-flex170 devices)")
        print("| hosts | host memory | link | latency (ms) | where (latency) | requests/s | where (throughput) |")
        print("|---|---|---|---|---|---|---|")
        for n in (int(x) for x in a.hosts.split(",")):
            memory = None if n == 1 else int(1.08 * split[n] / n)
            if n > 1:
                fewer = need if n == 2 else split[n - 1] / (n - 1)
                if fewer <= memory:
                    raise SystemExit(f"{n} hosts of {size_text(memory)}: {n - 1} of them might hold the model")
            for gbit in (float(x) for x in a.gbit.split(",")) if n > 1 else [0.0]:
                r = run(a.model, n, gbit or 10.0, a.latency, memory, a.requests, tdir, tmp, a.seconds)
                print(f"| {n} | {size_text(memory) if memory else 'no cap'} | {f'{gbit:g} Gbit/s' if n > 1 else '-'} "
                      f"| {r['latency_ms']:.3f} | {r['lat_where']} | {r['rate']:.1f} | {r['plan']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

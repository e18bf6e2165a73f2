"""How stable are measured per-op costs, and what does their noise cost a placer?

Profiles a model on ``virtual`` several times per configuration (configurations alternate, so each
sees the same load from other processes) and reports, per configuration:

- wall seconds of ``profile_costs`` and the timed runs per device;
- **device gap**: ``|log(sum CPU / sum CPU_B)|`` within a profile. On a host without bf16 (the
  bench VM) CPU_B falls back to f32, so both devices run the same code and the true gap is 0;
- **per-op gap**: the same per op, ``|log(t_CPU / t_CPU_B)|`` averaged with the weight of each op
  in the reference, over ops carrying at least 0.5 % of the time: noise that a placer would take for
  heterogeneity;
- **shape L1** between two profiles of the same device: ``sum |a/sum(a) - b/sum(b)|``;
- **regret**: place with ``optimal`` on the profile's costs, evaluate that placement with the
  simulator on the reference costs (per op, the median over every profile and device), relative to
  the best single device there (the true optimum when the devices are identical).

Run (from a directory that holds no ``hdp`` package: the measuring worker is started with
``python -m`` and would import that one)::

    cd /tmp && python /path/to/bench/profile_stability.py --reps 6
    cd /tmp && python /path/to/bench/profile_stability.py --reps 6 --old /path/to/old/checkout

``--old`` adds a configuration profiled by another checkout's ``profile_costs`` with its defaults
(e.g. the code before the profile was made cheap).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
CONFIGS = {"default": {}, "10 interleaved rounds": {"seconds": 0.0, "runs": 10}}

_ONE = """
import json, sys, time
from hdp.ir.openvino_frontend import lower
from hdp.runtime.costs.profile import profile_costs
from hdp.target.target import load_target
m = lower(sys.argv[1])
t0 = time.perf_counter()
c, info = profile_costs(m, load_target("virtual"), **json.loads(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - t0, "op_time": c.op_time.numpy().T.tolist(),
                  "names": [op.name for op in m.graph.ops], "runs": [info[d].get("runs", 10) for d in c.devices]}))
"""


def _profile(root: Path, xml: str, kwargs: dict, names: list[str]) -> dict:
    """One profile by the checkout at ``root`` (lowering the model itself: checkouts may not read
    each other's modules), its per-op times in the order of ``names``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-c", _ONE, xml, json.dumps(kwargs)], env=env, capture_output=True,
                       text=True, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    pos = {n: i for i, n in enumerate(out.pop("names"))}
    out["op_time"] = [[t[pos[n]] for n in names] for t in out["op_time"]]
    return out


def _regret(module, target, profiles: list[np.ndarray], ref: np.ndarray) -> list[float]:
    from hdp.ir.types import Array, Costs
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from

    def problem(t):
        m = module.replace(costs=Costs(devices=target.device_names, op_time=Array.of(t.T.copy(), np.float64),
                                       kind=("measured",) * 2, link_latency=target.link.latency,
                                       link_bandwidth=target.link.bandwidth,
                                       subgraph_overhead=target.link.subgraph_overhead))
        return m, build_problem(m)

    _, ref_problem = problem(np.stack([ref, ref]))
    sim = Simulator(ref_problem)  # the same graph and support: the same tie groups for every profile
    single = sim.latency(np.zeros(sim.n_groups, np.int64))
    out = []
    for p in profiles:
        m, prob = problem(p)
        placed = place(method_from("optimal"), PlaceContext(module=m, problem=prob, target=target))
        out.append(sim.latency(placed.group_device.astype(np.int64)) / single - 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="inception_v3", help="zoo model")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--old", type=Path, help="another checkout profiled with its own defaults")
    ap.add_argument("--json", type=Path, help="also write every profile here")
    ap.add_argument("--analyse", type=Path, help="only tabulate the profiles of an earlier --json")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target
    from hdp.zoo import models as zoo

    target = load_target("virtual")
    xml = str(zoo.cached(a.model))
    module = PassManager([make_pass("support", {"target": target})]).run(lower(xml))
    names = [op.name for op in module.graph.ops]
    configs = {name: (HERE, kw) for name, kw in CONFIGS.items()}
    if a.old:
        configs = {f"old ({a.old.name})": (a.old.resolve(), {}), **configs}
    rows: list[dict] = []
    if a.analyse:
        rows = json.loads(a.analyse.read_text())
        configs = dict.fromkeys(r["config"] for r in rows)
        a.reps = max(r["rep"] for r in rows) + 1
    for rep in range(0 if a.analyse else a.reps):
        for name, (root, kw) in configs.items():
            r = _profile(root, xml, kw, names)
            r.update(config=name, rep=rep)
            rows.append(r)
            print(f"rep {rep} {name}: {r['seconds']:.1f} s, runs {r['runs']}", file=sys.stderr, flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows))
    allp = np.array([r["op_time"] for r in rows])  # profiles x devices x ops
    ref = np.median(allp.reshape(-1, allp.shape[-1]), axis=0)
    big = ref >= 0.005 * ref.sum()
    w = ref[big] / ref[big].sum()
    print(f"{a.model}: {module.graph.n_ops} ops; {int(big.sum())} carry >= 0.5 % each "
          f"({ref[big].sum() / ref.sum():.0%} of the time); {a.reps} profiles per configuration")
    print("| configuration | wall s, median [min-max] | timed runs / device | device gap, median [max] "
          "| per-op gap, median [max] | shape L1, median [max] | optimal's regret, median [min, max] |")
    print("|---|---|---|---|---|---|---|")
    for name in configs:
        rs = [r for r in rows if r["config"] == name]
        sec = [r["seconds"] for r in rs]
        tabs = [np.array(r["op_time"]) for r in rs]
        gap = [abs(np.log(t[0].sum() / t[1].sum())) for t in tabs]
        opg = [float((w * np.abs(np.log(np.maximum(t[0][big], 1e-7) / np.maximum(t[1][big], 1e-7)))).sum())
               for t in tabs]
        l1 = [np.abs(x[d] / x[d].sum() - y[d] / y[d].sum()).sum()
              for d in (0, 1) for x, y in itertools.combinations(tabs, 2)]
        reg = _regret(module, target, tabs, ref)
        runs = sorted({n for r in rs for n in r["runs"]})
        print(f"| {name} | {np.median(sec):.1f} [{min(sec):.1f}-{max(sec):.1f}] | {', '.join(map(str, runs))} "
              f"| {np.median(gap):.3f} [{max(gap):.3f}] | {np.median(opg):.3f} [{max(opg):.3f}] "
              f"| {np.median(l1):.3f} [{max(l1):.3f}] | {np.median(reg):+.1%} [{min(reg):+.1%}, {max(reg):+.1%}] |")


if __name__ == "__main__":
    main()

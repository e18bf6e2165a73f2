"""Seconds of the memory-constrained placers on a large model (issue 18's speed bar).

Lowers the model, models its costs on a target (default ``dual-gpu``: CPU + two GPUs), caps every
GPU at ``--share`` of the stored weights, and times ``optimal`` (the HiGHS MILP) for latency and for
throughput, and memory-aware ``heft``, each ``--repeat`` times (median, min-max), with the problem's
size and the feasibility of the result. Run under ``flock /work/measure.lock``.

    python bench/constrained_speed.py MODEL.xml [--target dual-gpu] [--share 0.4] [--repeat 3] [--runs heft]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--target", default="dual-gpu")
    ap.add_argument("--share", type=float, default=0.4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--runs", default="latency,throughput,heft", help="which of latency, throughput, heft to time")
    a = ap.parse_args()
    import numpy as np

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.memory import size_text
    from hdp.placement.objective import Latency, Throughput
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import Heft, Optimal
    from hdp.target.capacity import device_memory
    from hdp.target.target import load_target

    tgt = load_target(a.target)
    m = lower(a.model)
    m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m)
    base = build_problem(m, tgt.device_names, device_memory=device_memory(tgt))
    w = base.needs.total_weights
    caps = np.array([np.inf if not d.name.startswith("GPU") else a.share * w for d in tgt.devices])
    print(f"{a.model}: {m.graph.n_ops} ops, {base.n_groups} tie groups, {base.structure.n_tensors} tensors; "
          f"weights {size_text(w)}; {', '.join(d for d, c in zip(tgt.device_names, caps) if np.isfinite(c))} capped "
          f"at {size_text(a.share * w)} each; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    runs = [("latency", "optimal, latency", Optimal(margin=0.0), Latency()),
            ("throughput", f"optimal, throughput N={a.requests}", Optimal(margin=0.0), Throughput(requests=a.requests)),
            ("heft", "heft (m-ETF)", Heft(), Latency())]
    for _, label, method, obj in (r for r in runs if r[0] in a.runs.split(",")):
        p = base.with_objective(obj).with_capacity(caps)
        secs, gd, info = [], None, {}
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            placed = place(method, PlaceContext(module=m, problem=p))
            secs.append(time.perf_counter() - t0)
            gd, info = placed.group_device, placed.info
        sim = Simulator(p)
        mem = sim.memory(gd)
        print(f"  {label:<28} {statistics.median(secs):7.2f} s (min {min(secs):.2f}, max {max(secs):.2f}); "
              f"cost {sim.cost(gd) * 1e3:.3f} ms; fits {sim.feasible(gd)}; "
              + ", ".join(f"{d} {size_text(x)}" for d, x in zip(tgt.device_names, mem))
              + (f"; {info.get('solver')} {info.get('status', '')[:40]} gap {float(info.get('gap')):.4f}"
                 if "solver" in info else "")
              + (f"; untangled {info['untangled_groups']} groups" if "untangled_groups" in info else ""))
        if "stages" in info:
            print(f"  {'':<28} stages: {info['stages']}")


if __name__ == "__main__":
    main()

"""Planning with replicas against today's throughput planning, on a large model (issue 30's speed bar).

Lowers the model (default: the zoo's ``llama-32l:stateful``, Llama-2-7B's graph at 1/8 width, 3,882
ops), models its costs on a target (default ``dual-gpu``: a CPU and two GPUs), caps every GPU at
``--share`` of the stored weights, and times, each ``--repeat`` times (median, min-max):

- ``optimal`` under ``--objective throughput`` (N = ``--requests``): today's throughput planner (the
  HiGHS program within its 60 s limit);
- ``auto`` under throughput with plans (``plans=yes``): its candidates as before plus the plan
  search of every shape (``auto: plans``, within its share of ``--budget``); the ratio is auto's
  time over its time without that stage;
- the plan search alone (:func:`hdp.placement.plan_search.plan_throughput`, ``--time-limit``),
  whose ratio to ``optimal``'s time is the second figure.

Simulated costs (a modeled target); the times are the host's. Run under ``flock /work/measure.lock``
on a quiet host for figures.

    python bench/plan_speed.py [MODEL.xml] [--target dual-gpu] [--share 0.4] [--repeat 3] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--zoo", default="llama-32l:stateful")
    ap.add_argument("--target", default="dual-gpu")
    ap.add_argument("--share", type=float, default=0.4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budget", type=float, default=30.0)
    a = ap.parse_args()
    import numpy as np

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.memory import size_text
    from hdp.placement.objective import Throughput
    from hdp.placement.planner import plan_throughput
    from hdp.placement.problem import build_problem
    from hdp.placers import PlaceContext, place, stage_times
    from hdp.placers.options import Auto, Optimal
    from hdp.target.capacity import device_memory
    from hdp.target.streams import plan_devices
    from hdp.target.target import load_target
    from hdp.zoo.models import export

    xml = a.model or export(a.zoo, Path(tempfile.mkdtemp(prefix="hdp-plan-speed-")) / "model.xml")
    tgt = load_target(a.target)
    m = lower(xml)
    m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m)
    base = build_problem(m, tgt.device_names, device_memory=device_memory(tgt))
    w = base.needs.total_weights
    caps = np.array([np.inf if not d.name.startswith("GPU") else a.share * w for d in tgt.devices])
    p = base.with_capacity(caps).with_objective(Throughput(requests=a.requests))
    print(f"{xml}: {m.graph.n_ops} ops, {p.n_groups} tie groups, {p.n_devices} devices; GPUs capped at "
          f"{size_text(a.share * w)} each; N={a.requests}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          f"cores; {time.strftime('%Y-%m-%d %H:%M')}")
    rows: dict[str, list[float]] = {"optimal": [], "auto": [], "auto: plans": [], "plans": []}
    what: dict[str, str] = {}
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        placed = place(Optimal(margin=0.0), PlaceContext(module=m, problem=p, target=tgt))
        rows["optimal"].append(time.perf_counter() - t0)
        what["optimal"] = f"period {float(placed.info.get('objective', float('nan'))) * 1e3:.3f} ms"
        with stage_times() as st:
            t0 = time.perf_counter()
            placed = place(Auto(plans="yes", budget=a.budget), PlaceContext(module=m, problem=p, target=tgt))
            rows["auto"].append(time.perf_counter() - t0)
        rows["auto: plans"].append(sum(s for n, s in st if n == "auto: plans"))
        what["auto"] = f"kept {placed.info.get('plan_shape')} {placed.info.get('plan_text')}"
        t0 = time.perf_counter()
        r = plan_throughput(p, plan_devices(tgt, p.devices), a.requests, time_limit=a.time_limit)
        rows["plans"].append(time.perf_counter() - t0)
        b = r.best
        what["plans"] = (f"{b.plan.shape} {b.plan.describe(p.devices)} {1 / b.value:.1f}/s, gap {b.gap:.2%}, "
                         f"{'proven' if b.exact else 'not proven'}; {r.info['contiguous'].get('search')}, "
                         f"ideals {r.info['contiguous'].get('ideals')}")

    def cell(k):
        v = rows[k]
        return f"{statistics.median(v):7.2f} s (min {min(v):.2f}, max {max(v):.2f})"

    print(f"  optimal, throughput       {cell('optimal')}; {what['optimal']}")
    print(f"  auto with plans           {cell('auto')}; of which plans {cell('auto: plans')}; {what['auto']}")
    print(f"  plan search alone         {cell('plans')}; {what['plans']}")
    auto = [t / max(t - s, 1e-9) for t, s in zip(rows["auto"], rows["auto: plans"])]
    ratio = [x / y for x, y in zip(rows["plans"], rows["optimal"])]
    print(f"ratio auto with plans / auto without them: {statistics.median(auto):.3f} "
          f"(min {min(auto):.3f}, max {max(auto):.3f}); plan search / optimal throughput: "
          f"{statistics.median(ratio):.3f} (min {min(ratio):.3f}, max {max(ratio):.3f}); the bar: 1.5")


if __name__ == "__main__":
    main()

"""Serving plans on modeled targets: every shape's simulated throughput (issue 30).

For each zoo model and modeled target (``i9-flex170``, ``dual-gpu``, ``ultra-npu``) and N requests in
flight: the requests/s the plan model (:mod:`hdp.placement.plan`) gives the best single device with
its streams, the whole model replicated on every device (each with its best streams; "-" where a
device cannot run or hold it), the best pipeline (one replica with one stream per stage, two
stages or more) and the best plan of any shape, with the plan kept and the gain of the best plan
over the best single device; then the geomean of that gain. A model given as ``NAME@SHARE`` has
every device but the CPU capped at SHARE of its stored weights (a model that does not fit the
accelerators). Simulated (modeled targets), labelled so; no device runs. Stream efficiencies and
the dispatch cost are the defaults of :mod:`hdp.target.streams` and :mod:`hdp.placement.plan`
(assumptions, not measurements).

    python bench/plan_table.py [--models resnet50,...,llama:stateful,llama-32l:stateful@0.4] [--requests 2,4]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("resnet50,inception_v3,mobilenet_v2,densenet121,bert,vit,gpt2,llama:stateful,llama-32l:stateful@0.4")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--targets", default="i9-flex170,dual-gpu,ultra-npu")
    ap.add_argument("--requests", default="2,4")
    ap.add_argument("--time-limit", type=float, default=60.0)
    a = ap.parse_args()
    import numpy as np

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.memory import size_text
    from hdp.placement.objective import Throughput
    from hdp.placement.plan import GroupPlan, Replica
    from hdp.placement.planner import plan_throughput
    from hdp.placement.problem import build_problem
    from hdp.target.capacity import capacities, device_memory
    from hdp.target.streams import plan_devices
    from hdp.target.target import load_target
    from hdp.zoo.models import export

    ns = [int(x) for x in a.requests.split(",")]
    gains: dict[int, list[float]] = {n: [] for n in ns}
    print(f"simulated (modeled targets; plan model of hdp.placement.plan, default stream efficiencies and dispatch): "
          f"requests/s with N in flight; {time.strftime('%Y-%m-%d')}")
    head = (f"{'model':<26} {'target':<11} {'N':>2} {'best single (streams)':>24} {'replicas on every device':>32} "
            f"{'best pipeline':>28} {'best plan':>44} {'gain':>6} {'s':>6}")
    print(head)
    tmp = tempfile.mkdtemp(prefix="hdp-plan-table-")
    for item in a.models.split(","):
        spec, _, share = item.partition("@")
        try:
            xml = export(spec, Path(tmp) / f"{spec.replace(':', '_').replace(',', '_')}.xml")
        except Exception as e:  # noqa: BLE001 - a zoo model this host cannot build: say so, go on
            print(f"{spec}: not built ({e})", file=sys.stderr)
            continue
        m0 = lower(xml)
        for tname in a.targets.split(","):
            tgt = load_target(tname)
            m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m0)
            base = build_problem(m, tgt.device_names, device_memory=device_memory(tgt))
            caps = np.asarray(capacities(tgt, ()), np.float64)
            if share:
                w = base.needs.total_weights
                caps = np.array([c if d.name.startswith("CPU") else min(c, float(share) * w)
                                 for c, d in zip(caps, tgt.devices)])
            base = base.with_capacity(caps)
            label = spec + (f" (accelerators {size_text(float(share) * base.needs.total_weights)})" if share else "")
            for n in ns:
                p = base.with_objective(Throughput(requests=n))
                devs = plan_devices(tgt, p.devices)
                t0 = time.perf_counter()
                r = plan_throughput(p, devs, n, time_limit=a.time_limit)
                secs = time.perf_counter() - t0
                pr = r.pricer
                dev = p.devices
                single = r.best_single
                # the whole model on every device, each with its best streams
                every = "-"
                if all(p.allowed[:, d].all() for d in range(p.n_devices)):
                    best_v, best_plan = math.inf, None
                    ranges = [range(1, int(min(n, devs.max_streams[d], 8)) + 1) for d in range(p.n_devices)]
                    for streams in itertools.product(*ranges):
                        gp = GroupPlan(np.zeros(p.n_groups, np.int64),
                                       (tuple(Replica(d, s) for d, s in enumerate(streams)),))
                        pp = pr.price(gp)
                        if pp.feasible and pp.period < best_v:
                            best_v, best_plan = pp.period, gp
                    if best_plan is not None:
                        every = f"{1 / best_v:.1f} {best_plan.describe(dev)}"
                pipe = r.pipeline
                best = r.best
                cell = lambda f: f"{1 / f.value:.1f} {f.plan.describe(dev)}" if f is not None and f.plan is not None \
                    else "-"  # noqa: E731
                gain = single.value / best.value if single is not None and best.plan is not None else float("nan")
                if math.isfinite(gain):
                    gains[n].append(gain)
                shape = best.plan.shape if best.plan is not None else "none"
                print(f"{label:<26} {tname:<11} {n:>2} {cell(single):>24} {every:>32} {cell(pipe):>28} "
                      f"{(shape + ' ' + cell(best)):>44} {gain:>6.3f} {secs:>6.1f}")
    for n in ns:
        if gains[n]:
            geo = math.exp(sum(math.log(x) for x in gains[n]) / len(gains[n]))
            print(f"N={n}: geomean gain of the best plan over the best single device with its streams: {geo:.3f} "
                  f"({len(gains[n])} model-target pairs; pairs where no single device holds the model left out)")


if __name__ == "__main__":
    main()

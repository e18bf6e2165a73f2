"""Throughput-optimal vs latency-optimal vs the best single device, on modeled targets (issue 18).

For each cached zoo model and modeled target: the steady-state throughput (requests/s with N in
flight, the simulator's model) of the best single device (every op on it), of ``optimal`` placing
for latency, and of ``optimal`` placing for throughput; and the geomean gain of the throughput
objective over the best single device. Simulated (modeled targets), labelled so; no device runs.

    python bench/objective_table.py [--models resnet50,...] [--targets i9-flex170,ultra-npu,dual-gpu] [--requests 2,4]
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def zoo_xml(spec: str):
    from hdp.zoo.models import _default_root

    stem = spec.replace(":", "_").replace(",", "_")
    found = sorted(p for p in _default_root().glob(f"{stem}-*/model.xml") if p.with_suffix(".bin").is_file())
    return found[0] if found else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,inception_v3,densenet121,gpt2,mobilenet_v2-tiny,llama:stateful,"
                                        "qwen2-tiny-8l:stateful")
    ap.add_argument("--targets", default="i9-flex170,ultra-npu,dual-gpu")
    ap.add_argument("--requests", default="2,4")
    a = ap.parse_args()
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.objective import Throughput
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import Optimal
    from hdp.target.target import load_target

    ns = [int(x) for x in a.requests.split(",")]
    gains: dict[int, list[float]] = {n: [] for n in ns}
    print("simulated (modeled targets): requests/s with N in flight; gain = throughput-optimal / best single device")
    print(f"{'model':<24} {'target':<11} {'N':>2} {'best single':>16} {'latency-opt':>12} {'throughput-opt':>15} "
          f"{'gain':>6} {'solve s':>8}")
    for spec in a.models.split(","):
        xml = zoo_xml(spec)
        if xml is None:
            print(f"{spec}: not in the zoo cache, skipped", file=sys.stderr)
            continue
        m0 = lower(xml)
        for tname in a.targets.split(","):
            tgt = load_target(tname)
            m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m0)
            base = build_problem(m, tgt.device_names)
            lat_gd = place(Optimal(margin=0.0), PlaceContext(module=m, problem=base)).group_device
            for n in ns:
                p = base.with_objective(Throughput(requests=n))
                sim = Simulator(p)
                singles = {d: sim.cost(p.single(j)) for j, d in enumerate(p.devices) if p.allowed[:, j].all()}
                best = min(singles, key=singles.get)
                t0 = time.perf_counter()
                thr_gd = place(Optimal(margin=0.0), PlaceContext(module=m, problem=p)).group_device
                secs = time.perf_counter() - t0
                g = singles[best] / sim.cost(thr_gd)
                gains[n].append(g)
                print(f"{spec:<24} {tname:<11} {n:>2} {1 / singles[best]:>9.1f} {best:<6} {1 / sim.cost(lat_gd):>12.1f} "
                      f"{1 / sim.cost(thr_gd):>15.1f} {g:>6.3f} {secs:>8.2f}")
    for n in ns:
        if gains[n]:
            geo = math.exp(sum(math.log(x) for x in gains[n]) / len(gains[n]))
            print(f"N={n}: geomean gain of the throughput objective over the best single device: {geo:.3f} "
                  f"({len(gains[n])} model-target pairs)")


if __name__ == "__main__":
    main()

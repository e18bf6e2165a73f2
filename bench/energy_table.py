"""Energy against latency per method on a modeled SoC (issue 32, item 5).

For each zoo model on a modeled target whose devices declare watts (default ``core-ultra-155h``):
the simulated latency (HETERO's sequential semantics) and energy (joules per request,
:class:`hdp.placement.objective.Energy`) of every single device, ``hetero-auto``, ``heft``,
``optimal`` placing for latency, ``optimal`` placing for energy and, with ``--hsdag SECONDS``,
``hsdag:simulate`` placing for energy within that budget; also each with requests in flight
(``--requests N``: seconds per request with the shared-DRAM term, :meth:`Simulator.dram_seconds`).
Simulated (modeled targets); nothing runs on a device. Models come from the zoo cache (built
when missing: ``hdp zoo`` builds them, minutes each).

    python bench/energy_table.py [--models resnet50,...] [--target core-ultra-155h] [--hsdag 60] [--requests 4]
"""

from __future__ import annotations

import argparse
import sys
from datetime import date

import numpy as np

MODELS = "resnet50,mobilenet_v2,inception_v3,bert_base,gpt2:stateful,int4,qwen2:stateful,int4"


def split_models(text: str) -> list[str]:
    """``a,b:x,y,c`` -> ``[a, b:x,y, c]``: a comma after a ``:`` option list continues the options."""
    out: list[str] = []
    for part in text.split(","):
        if out and ":" in out[-1] and part in ("stateful", "dynamic", "static", "int4", "int8", "fp16", "int4-sym",
                                               "int8-sym") or (out and part.startswith("g") and part[1:].isdigit()):
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--target", default="core-ultra-155h")
    ap.add_argument("--hsdag", type=float, default=0.0, help="seconds of hsdag:simulate per model (0: not run)")
    ap.add_argument("--requests", type=int, default=4, help="requests in flight for the throughput columns")
    a = ap.parse_args()

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import compile_schedule, make_pass
    from hdp.placement.objective import Throughput
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from
    from hdp.target.target import energy_of, load_target
    from hdp.zoo.models import cached

    tgt = load_target(a.target)
    energy = energy_of(tgt)
    print(f"Simulated on {tgt.name} ({date.today().isoformat()}): latency of one request (HETERO, sequential), its "
          f"energy (watts active/idle: " + ", ".join(f"{d.name} {d.power_active:g}/{d.power_idle:g}" for d in tgt.devices)
          + f"), and seconds per request with {a.requests} in flight (the shared-DRAM term included).\n")
    print(f"| model | method | latency ms | energy mJ | per request, {a.requests} in flight, ms | devices used |")
    print("|---|---|---:|---:|---:|---|")
    for spec in split_models(a.models):
        m0 = lower(cached(spec))
        m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m0)
        base = build_problem(m, tgt.device_names)
        ep = base.with_objective(energy)
        lat, joules = Simulator(base), Simulator(ep)
        thr = Simulator(base.with_objective(Throughput(requests=a.requests)))
        rows = []
        for j, d in enumerate(base.devices):
            if base.allowed[:, j].all():
                rows.append((f"single:{d}", base.single(j)))
        for label, method, problem in (("hetero-auto", "hetero-auto", base), ("heft", "heft", base),
                                       ("optimal (latency)", "optimal", base), ("optimal (energy)", "optimal", ep)):
            opts = method_from(method, {"margin": 0.0} if method == "optimal" else {})
            rows.append((label, place(opts, PlaceContext(module=m, problem=problem, target=tgt)).group_device))
        if a.hsdag > 0:  # through compile's own passes (features, coarsen), placing for energy
            passes = [p for p in compile_schedule(tgt, "hsdag:simulate", extra={"objective": "energy",
                                                                                "budget": str(a.hsdag)})
                      if p.pass_name() != "assign"]
            gd = PassManager(passes).run(m0).partition.group_device.numpy().astype(np.int64)
            rows.append((f"hsdag:simulate (energy, {a.hsdag:g} s budget)", gd))
        for label, gd in rows:
            used = sorted({base.devices[int(x)] for x in gd})
            print(f"| {spec} | {label} | {lat.latency(gd) * 1e3:.3f} | {joules.energy(gd) * 1e3:.3f} | "
                  f"{thr.cost(gd) * 1e3:.3f} | {'+'.join(used)} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

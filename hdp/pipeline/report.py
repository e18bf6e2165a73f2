"""The words ``hdp compile`` says about a compile: where the ops went, what the check did, what
each placement stage contributed (labelled simulated or measured), the simulator against the
final comparison's measurements, and where the command's time went."""

from __future__ import annotations

from collections import Counter


def placed_line(module, target, out) -> str:
    """``placed 501 ops with optimal on virtual (CPU: 300 ops, CPU_B: 201 ops) -> placed.xml``."""
    pl = module.placement
    counts = Counter(pl.devices[int(d)] for d in pl.device_of.numpy())
    share = ", ".join(f"{d}: {counts.get(d, 0)} ops" for d in pl.devices)
    return f"placed {module.graph.n_ops} ops with {pl.method} on {target.name} ({share}) -> {out}"


def check_lines(verified) -> list[str]:
    """What the check did (a :class:`~hdp.runtime.verify.Verified`): ties learned, repairs, a
    fallback, and the final check's result."""
    lines = [f"learned: {line}" for line in verified.learned] + list(verified.lines)
    if verified.fallback:
        lines.append(f"fell back to every op on {verified.fallback}: the placement did not run "
                     f"({verified.module.placement.info.get('fallback_reason')})")
    lines.append(verified.result.describe())
    return lines


def method_lines(module, target) -> list[str]:
    """What the placement stages contributed, labelled simulated or measured."""
    pl = module.placement
    info = pl.info
    lines: list[str] = []
    method = info.get("method", pl.method).partition(":")[0]
    if "report" in info:  # auto
        lines += [f"{method}: {x}" for x in info["report"].splitlines()]
    if info.get("best_source"):  # hsdag
        lat = info.get("best_latency_s")
        what = f"{float(lat) * 1e3:.3f} ms" if lat else "not measured"
        lines.append(f"hsdag ({info.get('reward')} reward): kept {info['best_source']} {what}; "
                     f"{info.get('placements_evaluated')} placements, stopped: {info.get('stopped')}")
        if info.get("final"):
            lines.append(f"hsdag: lowest sampled median {info.get('sampled_best')}; final choice:")
            lines += [f"hsdag: {x}" for x in info["final"].splitlines()]
    if "cp_sat_status" in info:
        lines.append(cp_sat_line(info))
    if info.get("untangled_groups"):
        was = f"; simulated {float(info['untangled_from_s']) * 1e3:.3f} ms before" if info.get("untangled_from_s") else ""
        lines.append(f"{method}: moved {info['untangled_groups']} tie groups to other devices so that HETERO "
                     f"cuts no subgraph holding a state (ReadValue/Assign; see hdp.placement.subgraphs){was}")
    if info.get("pipeline"):  # optimal under throughput: a two-stage cut priced below the program's answer
        lines.append(f"{method}: kept {info['pipeline']}")
    if info.get("kept_single"):  # optimal's margin: the mixed optimum was not predicted faster enough
        lines.append(f"{method}: kept {info['kept_single']} (`--method {method} --set margin=0` keeps the mixed optimum)")
    if info.get("fallback"):
        lines.append(f"(the placement above failed its check; written instead: every op on {info['fallback'][7:]})")
    if "simulated" in info:
        lines.append(simulated_line(module, target))
    return lines


def cp_sat_line(info) -> str:
    """``cp-sat: proven optimal ...`` or ``cp-sat: FEASIBLE in 60 s, ... gap 3.2 %`` (simulated)."""
    cost, bound = float(info["concurrent"]) * 1e3, float(info["cp_sat_bound"]) * 1e3
    if info.get("proven_optimal") == "yes":
        head = f"proven optimal: {cost:.3f} ms (bound {bound:.3f} ms)"
    else:
        head = (f"{info['cp_sat_status']} within {float(info['time_limit']):g} s: {cost:.3f} ms, proven bound "
                f"{bound:.3f} ms, gap {float(info['gap']) * 100:.2f} %")
    return (f"cp-sat (simulated, concurrent executor): {head}; {info['solutions']} solutions, warm start "
            f"{info['warm_start']}" + (f" {float(info['warm_start_s']) * 1e3:.3f} ms" if "warm_start_s" in info else ""))


def _problem(module):
    from hdp.placement.problem import problem_of

    pl = module.placement
    ties = module.partition.extra_ties.numpy() if module.partition is not None and \
        module.partition.extra_ties is not None else ()
    return problem_of(module, pl.devices, ties)


def simulated_line(module, target) -> str:
    """The final placement's simulated latency beside the best single device and the lower bound."""
    from hdp.placement.simulate import Simulator

    info = module.placement.info
    p = _problem(module)
    singles = {p.devices[j]: t for j, t in Simulator(p).singles().items()}
    best = min(singles, key=singles.get) if singles else None
    label = "simulated" if not target.is_real else "simulated by the cost model (not measured)"
    one = f"best single device {best} {singles[best] * 1e3:.3f} ms" if best else "no single device runs every op"
    line = (f"{label}: this placement {float(info['simulated']) * 1e3:.3f} ms, {one}, "
            f"lower bound {float(info['lower_bound']) * 1e3:.3f} ms")
    part = module.partition
    if part is not None and "period" in part.info:
        from hdp.placement.objective import Throughput

        n = int(part.info.get("requests", 2))
        handoff = float(part.info.get("handoff", 0.0))
        tsim = Simulator(p.with_objective(Throughput(requests=n, handoff=handoff)))
        periods = [tsim.cost(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()]
        period = float(part.info["period"])
        line += (f"\n{label} throughput with {n} requests in flight: {1 / period:.1f} requests/s "
                 f"({period * 1e3:.3f} ms per request; loads {part.info.get('load', '')}"
                 + (f"; {handoff * 1e6:.0f} us per served subgraph" if handoff else "") + ")"
                 + (f", best single device {min(periods) * 1e3:.3f} ms per request" if periods else ""))
    priced = concurrent_priced(module, p)
    if priced is not None:
        ob, csim, gd = priced
        ones = [csim.cost(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()]
        line += (f"\n{label} run by hdp's concurrent executor: {csim.cost(gd) * 1e3:.3f} ms "
                 f"({csim.concurrent_subgraphs(gd)[1]} subgraphs; {ob.launch * 1e6:.1f} us per subgraph, "
                 f"{ob.handover * 1e6:.1f} us per hand-over, {ob.request * 1e6:.1f} us per request, "
                 f"{ob.convert * 1e9:.3g} ms per MB converted)"
                 + (f", best single device {min(ones) * 1e3:.3f} ms" if ones else ""))
    if part is not None and "memory" in part.info:
        line += f"\nmemory (estimated): {part.info['memory']}"
    return line


def concurrent_priced(module, p=None):
    """``(objective, simulator, device per group)`` of a placement made for hdp's concurrent
    executor (``--execution concurrent``), priced with the executor costs it was placed with, as the
    final placement stands (after any pass that moved groups); None for another objective."""
    part = module.partition
    if part is None or part.info.get("goal") != "concurrent" or module.placement is None:
        return None
    from hdp.placement.objective import EXECUTOR_COSTS, Concurrent
    from hdp.placement.simulate import Simulator

    p = p if p is not None else _problem(module)
    ob = Concurrent(**{k: float(part.info[k]) for k in EXECUTOR_COSTS if k in part.info})
    return ob, Simulator(p.with_objective(ob)), p.structure.group_devices(module.placement.device_of.numpy())


def final_sim_vs_measured(module, result) -> str:
    """The final placement's and each plain compile's simulated latency against their medians in
    the final comparison (a plain compile is priced as every op on its device)."""
    from hdp.runtime.report import sim_vs_measured
    from hdp.placement.simulate import Simulator

    pl = module.placement
    head = result.head
    p = _problem(module)
    singles = {p.devices[j]: t for j, t in Simulator(p).singles().items()}
    pairs = []
    for name, m in zip(head.names, head.measurements):
        if not m.ok:
            continue
        if name == "placement" and "simulated" in pl.info:
            # measured as the executor runs it (compile_with_plain with execution="concurrent"):
            # the executor's simulated latency of the final placement, not HETERO's
            priced = concurrent_priced(module, p)
            sim = priced[1].cost(priced[2]) if priced is not None else float(pl.info["simulated"])
            pairs.append(("placement", sim, m.median))
        elif name.startswith("plain ") and name[6:] in singles:
            pairs.append((name, singles[name[6:]], m.median))
    return sim_vs_measured(pairs, calibrated="calibrated" in str(module.meta.get("boundary", "")))


def time_line(partition, timing_rows: list[dict], stage_rows: list, spent: dict[str, float], total: float) -> str:
    """``time: 41.2 s in all: profile 3.8 s (not counted in the budget); placement 6.0 s of a 30 s
    budget (...); check 1.1 s; writing 0.9 s; final comparison 30.1 s (--no-compare skips it)
    (load average ...)``: where the whole command's time went. ``partition`` is the pipeline's
    partition pass (None: it has none)."""
    import os

    first_part = next((r for r in timing_rows if r["pass"] == "partition" and "stage" not in r), None)
    prof = next((r for r in timing_rows if r["pass"] == "profile"), None)
    load = ""
    if hasattr(os, "getloadavg"):
        load = f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    parts = []
    budget = getattr(partition.placer, "budget", None) if first_part is not None and partition is not None else None
    if prof is not None:
        parts.append("profile cached" if prof["cache_hit"] else f"profile {prof['seconds']:.1f} s"
                     + (" (not counted in the budget)" if budget else ""))
    if first_part is not None:
        if first_part["cache_hit"]:
            parts.append("placement cached (its stages ran in an earlier compile)")
        else:
            stages = ", ".join(f"{n} {s:.1f} s" for n, s in stage_rows)
            cap = f" of a {budget:g} s budget" if budget else ""
            parts.append(f"placement {first_part['seconds']:.1f} s{cap}" + (f" ({stages})" if stages else ""))
    for name, seconds in spent.items():
        parts.append(f"{name} {seconds:.1f} s" + (" (--no-compare skips it)" if name == "final comparison" else ""))
    return f"time: {total:.1f} s in all: " + "; ".join(parts) + load

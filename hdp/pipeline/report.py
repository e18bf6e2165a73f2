"""The words ``hdp compile`` says about a compile: where the ops went, what the check did, what
each placement stage contributed (labelled simulated or measured), the simulator against the
final comparison's measurements, and where the command's time went."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from hdp.base import glossary
from hdp.costgraph.graph import is_costgraph
from hdp.placement.memory import size_text
from hdp.placement.objective import EXECUTOR_COSTS, Concurrent, Throughput
from hdp.placement.problem import problem_of
from hdp.placement.simulate import Simulator
from hdp.runtime.placed.model import placed_count_text
from hdp.runtime.serve.report import sim_vs_measured
from hdp.target.capacity import capacities, device_memory, parse_caps_record
from hdp.target.hosts import problem_hosts
from hdp.target.target import energy_of


def placed_counts(module) -> dict[str, int]:
    """Ops per device of the placement, over the ops hdp placed (the lowered model's): the count
    ``compile``, ``show`` and ``evaluate`` give (the written file records it, see
    :func:`hdp.ir.openvino_backend.annotate`)."""
    pl = module.placement
    counts = Counter(pl.devices[int(d)] for d in pl.device_of.numpy())
    return {d: counts.get(d, 0) for d in pl.devices}


def placed_line(module, target, out) -> str:
    """``501 ops placed (CPU 0, CPU_B 501) on virtual with auto (kept single:CPU_B) -> placed.xml``."""
    pl = module.placement
    chosen = pl.info.get("chosen")
    how = pl.method + (f" (kept {chosen})" if chosen and chosen != pl.method else "")
    return f"{placed_count_text(placed_counts(module))} on {target.name} with {how} -> {out}"


def checked_line(verified) -> str:
    """The check's result in one line, with a fallback if there was one."""
    line = verified.result.describe()
    if verified.fallback:
        line += (f"; the placement did not run ({verified.module.placement.info.get('fallback_reason')}): "
                 f"fell back to every op on {verified.fallback}")
    elif verified.learned:
        line += f"; after {len(verified.learned)} repair(s) (-v says which)"
    return line


def simulated_verdict(module, target) -> str:
    """The one verdict line of a compile that nothing measured (a modeled target): the placement's
    simulated figure under its objective (latency; time per request with requests in flight; the
    concurrent executor's latency) against the best single device that holds the model."""
    info = module.placement.info
    if "simulated" not in info:
        return "verdict: not simulated"
    best, t, why = best_single(module, target)
    head = "verdict (simulated, nothing run): "
    part = module.partition
    p = _problem(module, target)
    fits = [j for j in range(p.n_devices) if p.devices[j] == best]
    if part is not None and "period" in part.info:
        n = int(part.info.get("requests", 2))
        tsim = Simulator(p.with_objective(Throughput(requests=n, handoff=float(part.info.get("handoff", 0.0)))))
        me = float(part.info["period"])
        t = tsim.cost(p.single(fits[0])) if fits else math.inf
        head += f"{glossary.rate(1 / me)} with {n} requests in flight ({glossary.per_request(me)})"
        unit = "per request"
    elif part is not None and part.info.get("goal") == "energy":
        esim = Simulator(p.with_objective(energy_of(target)))
        me = esim.energy(p.structure.group_devices(module.placement.device_of.numpy()))
        sim = Simulator(p)
        holds = {p.devices[j]: esim.energy(p.single(j)) for j in sim.singles() if not sim.over(p.single(j))}
        best = min(holds, key=holds.get) if holds else None  # the least energy, among those that hold it
        t = holds.get(best, math.inf)
        head += f"{me * 1e3:.4g} mJ per request"
        if best is not None:
            r = me / t if t > 0 else math.nan
            return (head + f", {glossary.ratio(r)} the energy of the best single device {best} ({t * 1e3:.4g} mJ)"
                    + (f"; {'; '.join(why)}" if why else ""))
    elif (priced := concurrent_priced(module, p)) is not None:
        me = priced[1].cost(priced[2])
        t = priced[1].cost(p.single(fits[0])) if fits else math.inf
        head += f"{glossary.latency(me)} run by hdp's concurrent executor"
        unit = "latency"
    else:
        me = float(info["simulated"])
        head += glossary.latency(me)
        unit = "latency"
    if best is None:
        return head + "; no single device runs every op and holds the model" + (f" ({'; '.join(why)})" if why else "")
    r = me / t if t > 0 else math.nan
    said = "the same as" if abs(r - 1) < 1e-9 else f"{glossary.ratio(r)} the time of"
    return (head + f", {said} the best single device {best} ({unit} {glossary.milliseconds(t)})"
            + (f"; {'; '.join(why)}" if why else ""))


def next_line(out, target, measured: bool, exported: str | None = None) -> str:
    """What to run next: measure the placement again against the default plain compile, export it,
    or serve it; ``-v`` for the detail."""
    steps = []
    if Path(str(out)).suffix.lower() != ".xml":  # a serving plan's directory
        steps.append(f"`hdp serve {out}` serves it alone")
        if measured:
            steps.append(f"`hdp evaluate {Path(str(out)) / 'plan.json'} --objective throughput --plain default` "
                         f"measures it again")
        return "next: " + "; ".join(steps + ["-v prints the detail"])
    if exported:
        steps.append(exported)
    if measured:
        steps.append(f"`hdp evaluate {out} --plain default` measures it again")
    if not exported and target.is_real:
        steps.append(f"`hdp export {out} -o {Path(str(out)).with_suffix('.blob')}` for an application")
    if not target.is_real:
        steps.append(f"`hdp show {out}` for its stages and memory")
    steps.append("-v prints the detail")
    return "next: " + "; ".join(steps)


def check_lines(verified) -> list[str]:
    """What the check did (a :class:`~hdp.runtime.serve.verify.Verified`): ties learned, repairs, a
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


def _problem(module, target=None):
    """The placement problem of ``module`` as its partition pass built it: with ``target``, under
    the same device memory (the target's and the ``--memory`` caps it recorded, the state's
    ``--context``), so that a device that cannot hold the model is never its best single device."""
    pl = module.placement
    part = module.partition
    ties = part.extra_ties.numpy() if part is not None and part.extra_ties is not None else ()
    if target is None or part is None or is_costgraph(module) or tuple(pl.devices) != target.device_names:
        return problem_of(module, pl.devices, ties)
    caps = capacities(target, parse_caps_record(part.info.get("memory_caps", "")))
    return problem_of(module, pl.devices, ties, capacity=caps, context=int(part.info.get("context", 0) or 0),
                      device_memory=device_memory(target)).with_hosts(problem_hosts(target, pl.devices))


def capped(module, target) -> bool:
    """Whether ``module`` was placed under device memory caps: ``--memory`` overrides, or memory
    a device of its target declares."""
    part = module.partition
    return bool(part is not None and part.info.get("memory_caps")) or any(d.memory is not None for d in target.devices)


def best_single(module, target) -> tuple[str | None, float, list[str]]:
    """(the device with the lowest simulated latency among those that run every op and hold the
    model, its latency, why each other device is not one): a device over its memory is never the
    best single device."""
    p = _problem(module, target)
    sim = Simulator(p)
    fits, why = {}, []
    for j, t in sim.singles().items():
        over = sim.over(p.single(j))
        if over:
            need = next(o for o in over if o[0] == p.devices[j]) if any(o[0] == p.devices[j] for o in over) else over[0]
            why.append(f"{p.devices[j]} cannot hold the model (needs {size_text(need[1])}, holds {size_text(need[2])})")
        else:
            fits[p.devices[j]] = t
    for j, d in enumerate(p.devices):
        if not p.allowed[:, j].all():
            why.append(f"{d} does not run every op")
    best = min(fits, key=fits.get) if fits else None
    return best, (fits[best] if best else math.inf), why


def memory_line(module, target) -> str | None:
    """``memory (estimated): GPU 180 MiB of 200 MiB, CPU 320 MiB of 12.0 GiB``: each device's
    estimated need under the placement against what it holds; None for a compile without caps."""
    if module.placement is None or not capped(module, target):
        return None
    p = _problem(module, target)
    sim = Simulator(p)
    gd = p.structure.group_devices(module.placement.device_of.numpy())
    mem, caps = sim.memory(gd), p.caps
    parts = [f"{d} needs {size_text(m)} of {size_text(c) if math.isfinite(c) else 'unlimited'}"
             + (" (OVER)" if m > c else "") for d, m, c in zip(p.devices, mem, caps)]
    return "memory (estimated): " + ", ".join(parts)


def simulated_line(module, target) -> str:
    """The final placement's simulated latency beside the best single device and the lower bound."""

    info = module.placement.info
    p = _problem(module, target)
    best, best_s, why = best_single(module, target)
    label = "simulated" if not target.is_real else "simulated by the cost model (not measured)"
    one = (f"best single device {best} {glossary.latency(best_s)}" if best
           else "no single device runs every op and holds the model")
    line = (f"{label}: this placement {glossary.latency(float(info['simulated']))}, {one}"
            + (f" ({'; '.join(why)})" if why else "") + f", lower bound {glossary.latency(float(info['lower_bound']))}")
    part = module.partition
    if part is not None and "period" in part.info:
        n = int(part.info.get("requests", 2))
        handoff = float(part.info.get("handoff", 0.0))
        tsim = Simulator(p.with_objective(Throughput(requests=n, handoff=handoff)))
        periods = [tsim.cost(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()]
        period = float(part.info["period"])
        line += (f"\n{label} throughput with {n} requests in flight: {glossary.rate(1 / period)} "
                 f"({glossary.per_request(period)}; loads {part.info.get('load', '')}"
                 + (f"; {handoff * 1e6:.0f} us per served subgraph" if handoff else "") + ")"
                 + (f", best single device {glossary.per_request(min(periods))}" if periods else ""))
    priced = concurrent_priced(module, p)
    if priced is not None:
        ob, csim, gd = priced
        ones = [csim.cost(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()]
        line += (f"\n{label} run by hdp's concurrent executor: {glossary.latency(csim.cost(gd))} "
                 f"({csim.concurrent_subgraphs(gd)[1]} subgraphs; {ob.launch * 1e6:.1f} us per subgraph, "
                 f"{ob.handover * 1e6:.1f} us per hand-over, {ob.request * 1e6:.1f} us per request, "
                 f"{ob.convert * 1e9:.3g} ms per MB converted)"
                 + (f", best single device {glossary.latency(min(ones))}" if ones else ""))
    if part is not None and part.info.get("goal") == "energy":
        esim = Simulator(p.with_objective(energy_of(target)))
        gd = p.structure.group_devices(module.placement.device_of.numpy())
        ones = [esim.energy(p.single(j)) for j in range(p.n_devices) if p.allowed[:, j].all()]
        line += (f"\n{label} energy: {esim.energy(gd) * 1e3:.4g} mJ per request (watts active/idle: "
                 f"{part.info.get('watts', '')})" + (f", best single device {min(ones) * 1e3:.4g} mJ" if ones else ""))
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

    p = p if p is not None else _problem(module)
    ob = Concurrent(**{k: float(part.info[k]) for k in EXECUTOR_COSTS if k in part.info})
    return ob, Simulator(p.with_objective(ob)), p.structure.group_devices(module.placement.device_of.numpy())


def final_sim_vs_measured(module, result) -> str:
    """The final placement's and each plain compile's simulated latency against their medians in
    the final comparison (a plain compile is priced as every op on its device)."""

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


def time_line(partition, timing_rows: list[dict], stage_rows: list, spent: dict[str, float], total: float,
              verbose: bool = False) -> str:
    """``time: 41.2 s in all: profile 3.8 s (not counted in the budget); placement 6.0 s of a 30 s
    budget; check 1.1 s; writing 0.9 s; comparison 30.1 s``: where the whole command's time went
    (``verbose``: the placement's own stages too). ``partition`` is the pipeline's partition pass
    (None: it has none)."""

    first_part = next((r for r in timing_rows if r["pass"] == "partition" and "stage" not in r), None)
    prof = next((r for r in timing_rows if r["pass"] == "profile"), None)
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
            if budget and first_part["seconds"] > budget * 1.05:
                cap += " (over it: a step that had started, e.g. a compile or a round, ran to its end)"
            parts.append(f"placement {first_part['seconds']:.1f} s{cap}" + (f" ({stages})" if stages and verbose else ""))
    for name, seconds in spent.items():
        parts.append(f"{name} {seconds:.1f} s" + (" (--no-compare skips it)" if name == "comparison" and verbose else ""))
    return f"time: {total:.1f} s in all: " + "; ".join(parts)

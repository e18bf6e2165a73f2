"""Does the learned placer earn its place? HSDAG against its paper's learned baselines (Placeto, the
hierarchical RNN placer), heft, the best single device, the sequential optimum and the exact
reference of the objective (CP-SAT for concurrent execution, the MILP for throughput), on a modeled
target, per objective.

    python bench/learned_table.py --target i9-flex170 --models densenet121,bert_base,gpt2,densenet201 \\
        --objectives concurrent,throughput --seeds 0,1,2 --evaluations 1000 --seconds 60 \\
        --out bench/results --json bench/results/learned.json

A model is a zoo name (exported to the hdp cache on first use) or ``NAME=PATH.xml``. Per model
(lower, support, profile, features, coarsen from the pass cache, as bench/placement_table.py
prepares them) and objective (the problem's own objective value, :func:`hdp.learn.harness.
objective_problem`, priced by :meth:`Simulator.cost`: ``latency`` = sequential HETERO,
``concurrent`` = hdp's concurrent executor as ``hdp compile --execution concurrent`` prices it,
``throughput`` = seconds per request with ``--requests`` in flight):

- ``single``: the best single device; ``heft`` and ``optimal`` (the exact optimum of the
  *sequential* cost model: min-cut for 2 devices, ILP for more) run once each (deterministic),
  priced under the objective;
- ``exact``: ``concurrent``: ``cp-sat`` (CP-SAT's model of the executor, ``--exact`` seconds, heft's
  warm start) with "proven optimal" or its proven gap; ``throughput``: ``optimal`` on the
  throughput problem (the HiGHS MILP, ``--exact`` seconds) with its MILP gap, a gap of the MILP's
  own model (it charges a copy penalty where the simulator counts subgraphs, so it proves nothing
  about the simulator's optimum); ``latency``: none (``optimal`` is exact there, up to that penalty);
- ``hsdag``, ``placeto``, ``rnn-placer`` (``--learners``) run through the one harness
  (:func:`hdp.learn.harness.learn`) with the same budget (``--evaluations`` simulated evaluations and
  ``--seconds`` of wall clock), the same seeds, the same candidates (every single device) and the
  same warm start (heft's placement); each keeps its own hyper-parameters (hdp.learn.config);
- ``zero-shot``: an HSDAG policy trained on the ``--train`` models (none of them in ``--models``)
  places the model by one greedy forward pass, no evaluation.

Cells: cost in ms, mean ± standard deviation over seeds [min–max], and the ratio to heft; "learned"
is how many seeds ended on a placement the method sampled itself (not a candidate or the warm
start); "t best" the mean wall seconds into a run at which its best placement was first evaluated;
"evals" the mean evaluations used. Below each table, per model: whether HSDAG beats heft beyond the
spread of its seeds (its worst seed below heft), and the best other method. Every figure is
simulated; wall times are taken on the machine and under the load named in the record. ``--json``
keeps every run's figures. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

LEARNERS = ("hsdag", "placeto", "rnn-placer")
#: where a run's best placement came from when it is not one the method sampled
GIVEN = ("single:", "warm:", "start")


def _fmt(xs) -> str:
    xs = np.asarray(xs, float) * 1e3
    if not np.isfinite(xs).all():
        return f"{int((~np.isfinite(xs)).sum())} of {xs.size} runs found nothing in the budget"
    if xs.size == 1:
        return f"{xs[0]:.3f}"
    return f"{xs.mean():.3f} ± {xs.std(ddof=1):.3f} [{xs.min():.3f}–{xs.max():.3f}]"


def exact_run(module, problem, objective: str, seconds: float, workers: int) -> dict | None:
    """The objective's exact reference: CP-SAT (concurrent) or the MILP (throughput), ``seconds``
    each; its placement, wall seconds and proof (None: no reference for ``objective``)."""
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from

    if seconds <= 0 or objective not in ("concurrent", "throughput"):
        return None
    ctx = PlaceContext(module=module, problem=problem)
    t0 = time.perf_counter()
    if objective == "concurrent":
        r = place(method_from("cp-sat", {"time_limit": str(seconds), "workers": str(workers)}), ctx)
        proof = ("proven optimal" if r.info["proven_optimal"] == "yes"
                 else f"gap {float(r.info['gap']) * 100:.2f} %")
        proven = r.info["proven_optimal"] == "yes"
    else:
        r = place(method_from("optimal", {"time_limit": str(seconds), "margin": "0"}), ctx)
        # the MILP's own model charges a copy penalty where the simulator counts subgraphs: its gap
        # proves nothing about the simulator's optimum
        proven = False
        proof = f"MILP gap {float(r.info.get('gap', float('nan'))) * 100:.2f} % (of its model)"
    return {"device": r.group_device, "seconds": time.perf_counter() - t0, "proof": proof, "proven": proven}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="i9-flex170")
    ap.add_argument("--models", default="densenet121,gpt2")
    ap.add_argument("--train", default="", help="models the reused HSDAG policy is trained on (empty: no "
                    "zero-shot column)")
    ap.add_argument("--objectives", default="concurrent")
    ap.add_argument("--learners", default=",".join(LEARNERS))
    ap.add_argument("--requests", type=int, default=4, help="requests in flight (throughput)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--reuse-seeds", default="", help="seeds of hsdag+policy: HSDAG trained from the zero-shot "
                    "policy with the same budget and warm start (empty: none)")
    ap.add_argument("--evaluations", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--train-evaluations", type=int, default=200, help="per training model and round")
    ap.add_argument("--train-seconds", type=float, default=10.0, help="per training model and round")
    ap.add_argument("--train-rounds", type=int, default=2)
    ap.add_argument("--policies", default=None, help="directory of trained policies (policy-<target>-<objective>"
                    ".pt): reused when there, else trained and kept there (default: a temporary directory)")
    ap.add_argument("--exact", type=float, default=60.0, help="seconds of the exact reference (0: skip)")
    ap.add_argument("--exact-workers", type=int, default=2, help="CP-SAT's search workers")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=None, help="directory for the markdown record")
    ap.add_argument("--json", default=None, help="file for every run's figures")
    args = ap.parse_args(argv)

    import tempfile

    from placement_table import base_module, load, machine

    from hdp.base.cache import default_cache_dir
    from hdp.base.fsutil import atomic_write
    from hdp.learn.graph import build_learn_graph
    from hdp.learn.harness import (
        Budget,
        learn,
        objective_problem,
        problem_cost,
        time_to_best,
        train_on_models,
        zero_shot,
    )
    from hdp.passes.cache import PassCache
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from
    from hdp.target.target import load_target

    target = load_target(args.target)
    devs = target.device_names
    root = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    cache = PassCache(root)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    reuse_seeds = [int(s) for s in args.reuse_seeds.split(",") if s]
    learners = [x for x in args.learners.split(",") if x]
    objectives = [x for x in args.objectives.split(",") if x]
    budget = Budget(evaluations=args.evaluations, seconds=args.seconds)
    seq_opt = ("optimal:mincut" if len(devs) == 2 else "optimal:ilp", {"margin": "0"})
    cmd = "python bench/learned_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    out = [f"# Learned placers on `{target.name}` (simulated)", "",
           f"- date: {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC", f"- machine: {machine()}",
           f"- command: `{cmd}`",
           f"- budget per learned run: {args.evaluations} simulated evaluations and {args.seconds:g} s wall; "
           f"seeds {seeds}; warm start: heft's placement; candidates: every single device",
           f"- exact reference: `concurrent`: CP-SAT ({args.exact:g} s, {args.exact_workers} workers, heft warm "
           f"start) with its proven gap; `throughput` ({args.requests} in flight): the MILP (`optimal`, "
           f"{args.exact:g} s) with its gap; `optimal (seq.)` is the optimum of the sequential cost model", ""]
    print("\n".join(out), flush=True)
    work = Path(args.policies) if args.policies else Path(tempfile.mkdtemp(prefix="hdp-learned-"))
    work.mkdir(parents=True, exist_ok=True)

    def prepared(spec):
        name, _, path = spec.partition("=")
        m, _ = base_module(path or name, target, cache, root / "bench", calibrated=False)
        return name, (m, build_problem(m, devs))

    models = dict(prepared(s) for s in args.models.split(",") if s)
    for m, p in list(models.values())[:1]:  # imports and Numba compilation outside the timed calls
        for objective in objectives:
            pc = objective_problem(p, objective, args.requests)
            place(method_from("heft"), PlaceContext(module=m, problem=pc))
            problem_cost(pc)(p.single(0))
        place(method_from(*seq_opt), PlaceContext(module=m, problem=p))
        for method in learners:
            learn(method, m, p, problem_cost(p), Budget(evaluations=4), seed=0)
    train_models = dict(prepared(s) for s in args.train.split(",") if s)
    loads = [load()]
    record = {"target": target.name, "command": cmd, "budget": [args.evaluations, args.seconds], "seeds": seeds,
              "rows": []}
    for objective in objectives:
        policy = None
        if train_models:
            policy = str(work / f"policy-{target.name}-{objective}.pt")
            if os.path.exists(policy):
                out.append(f"- `{objective}` policy: {policy}, trained before on {', '.join(train_models)}")
            else:
                items, warms = [], []
                for m, p in train_models.values():
                    pc = objective_problem(p, objective, args.requests)
                    items.append((m, pc, problem_cost(pc)))
                    warms.append(("heft", place(method_from("heft"), PlaceContext(module=m, problem=pc)).group_device))
                t0 = time.perf_counter()
                train_on_models(items, Budget(args.train_evaluations, args.train_seconds), args.train_rounds, policy,
                                warm_starts=warms)
                out.append(f"- `{objective}` policy: trained on {', '.join(train_models)} ({args.train_rounds} rounds, "
                           f"{args.train_evaluations} evaluations / {args.train_seconds:g} s per model and round, "
                           f"heft warm start) in {time.perf_counter() - t0:.0f} s")
            print(out[-1], flush=True)
        has_exact = args.exact > 0 and objective in ("concurrent", "throughput")
        head = (f"\n## objective `{objective}`\n\n| model | ops | groups | nodes | best single ms | heft ms (x single) "
                "| optimal (seq.) ms (x heft) |" + (" exact ms (x heft) · proof · s |" if has_exact else "")
                + "".join(f" {x} ms (x heft) · learned · t best · evals |" for x in learners)
                + (" zero-shot ms (x heft) · forward s |" if policy else "")
                + (" hsdag+policy ms (x heft) · t best |" if policy and reuse_seeds else ""))
        table = [head, "|" + "---|" * (7 + has_exact + len(learners) + bool(policy) + bool(policy and reuse_seeds))]
        verdicts = []
        print(head, flush=True)
        for name, (m, p) in models.items():
            pc = objective_problem(p, objective, args.requests)
            sim = Simulator(pc)
            cost = sim.cost
            ctx = PlaceContext(module=m, problem=pc)
            singles = {d: cost(p.single(j)) for j, d in enumerate(devs) if p.allowed[:, j].all()}
            best_single = min(singles, key=singles.get)
            t0 = time.perf_counter()
            heft = place(method_from("heft"), ctx).group_device
            t_heft = time.perf_counter() - t0
            t0 = time.perf_counter()
            opt = place(method_from(*seq_opt), PlaceContext(module=m, problem=p)).group_device
            t_opt = time.perf_counter() - t0
            c_heft, c_opt, c_single = cost(heft), cost(opt), singles[best_single]
            row = {"objective": objective, "model": name, "ops": m.graph.n_ops, "groups": p.n_groups,
                   "nodes": build_learn_graph(m, p).n_nodes, "single": [best_single, c_single],
                   "heft": [c_heft, t_heft], "optimal_seq": [c_opt, t_opt], "learners": {}}
            cells = [name, str(row["ops"]), str(row["groups"]), str(row["nodes"]), f"{c_single * 1e3:.3f} ({best_single})",
                     f"{c_heft * 1e3:.3f} ({c_heft / c_single:.3f}; {t_heft:.2f} s)",
                     f"{c_opt * 1e3:.3f} ({c_opt / c_heft:.3f}; {t_opt:.2f} s)"]
            if has_exact:
                ex = exact_run(m, pc, objective, args.exact, args.exact_workers)
                c_ex = cost(ex["device"])
                row["exact"] = {"cost": c_ex, "seconds": ex["seconds"], "proof": ex["proof"], "proven": ex["proven"]}
                cells.append(f"{c_ex * 1e3:.3f} ({c_ex / c_heft:.3f}) · {ex['proof']} · {ex['seconds']:.0f} s")
            for method in learners:
                rs = [learn(method, m, pc, cost, budget, seed=s, warm_start=("heft", heft)) for s in seeds]
                loads.append(load())
                best = [r.best_latency for r in rs]
                own = sum(not r.best_source.startswith(GIVEN) for r in rs)
                row["learners"][method] = [{"seed": s, "cost": r.best_latency, "source": r.best_source,
                                            "evaluations": r.evaluations, "samples": r.samples, "seconds": r.seconds,
                                            "t_best": time_to_best(r), "stopped": r.stopped} for s, r in zip(seeds, rs)]
                cells.append(f"{_fmt(best)} ({np.mean(best) / c_heft:.3f}) · {own}/{len(rs)} · "
                             f"{np.mean([time_to_best(r) for r in rs]):.1f} s · {np.mean([r.evaluations for r in rs]):.0f}")
            if policy:
                dev, cold = zero_shot(m, p, policy)
                dev, secs = zero_shot(m, p, policy)  # the second call: torch's first-call costs paid
                row["zero_shot"] = {"cost": cost(dev), "forward": secs["forward"], "graph_load": secs["graph"] + secs["load"],
                                    "first_call": sum(cold.values())}
                cells.append(f"{cost(dev) * 1e3:.3f} ({cost(dev) / c_heft:.3f}) · {secs['forward']:.3f} s "
                             f"(+{secs['graph'] + secs['load']:.2f} s graph and load; first call "
                             f"{sum(cold.values()):.2f} s in all)")
                if reuse_seeds:
                    rs = [learn("hsdag", m, pc, cost, budget, seed=s, warm_start=("heft", heft), policy=policy)
                          for s in reuse_seeds]
                    row["hsdag_policy"] = [{"seed": s, "cost": r.best_latency, "source": r.best_source,
                                            "t_best": time_to_best(r)} for s, r in zip(reuse_seeds, rs)]
                    best = [r.best_latency for r in rs]
                    cells.append(f"{_fmt(best)} ({np.mean(best) / c_heft:.3f}) · "
                                 f"{np.mean([time_to_best(r) for r in rs]):.1f} s")
            record["rows"].append(row)
            table.append("| " + " | ".join(cells) + " |")
            print(table[-1], flush=True)
            if "hsdag" in row["learners"]:
                hs = [x["cost"] for x in row["learners"]["hsdag"]]
                others = {"heft": c_heft, f"single ({best_single})": c_single, "optimal (seq.)": c_opt}
                if "exact" in row:
                    others["exact"] = row["exact"]["cost"]
                others.update({k: float(np.mean([x["cost"] for x in v])) for k, v in row["learners"].items()
                               if k != "hsdag"})
                rival = min(others, key=others.get)
                verdicts.append(
                    f"- {name} ({row['ops']} ops): HSDAG {'beats' if max(hs) < c_heft * (1 - 1e-9) else 'does not beat'} "
                    f"heft beyond its seeds' spread (worst seed {max(hs) / c_heft:.4f} x heft); best other: {rival} "
                    f"{others[rival] * 1e3:.3f} ms, HSDAG's mean {np.mean(hs) / others[rival] - 1:+.2%} from it"
                    + (f"; the exact reference is {row['exact']['proof']}" if "exact" in row else ""))
        out += table + [""] + verdicts
        print("\n".join(verdicts), flush=True)
    loads.append(load())
    out += ["", f"Run took {(time.time() - started) / 60:.0f} min; 1-minute load average during the run: "
            f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores (other engineers' jobs; wall times, and so "
            "the evaluations a run reaches within its seconds, depend on it)"]
    print(out[-1], flush=True)
    if args.json:
        record["loads"] = [min(loads), max(loads)]
        record["minutes"] = (time.time() - started) / 60
        atomic_write(Path(args.json), json.dumps(record, indent=1, default=float).encode())
    if args.out:
        path = Path(args.out) / f"learned-{target.name}-{'-'.join(objectives)}-{_dt.date.today().isoformat()}.md"
        atomic_write(path, ("\n".join(out) + "\n").encode())
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

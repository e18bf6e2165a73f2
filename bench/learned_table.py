"""Does the learned placer earn its place? HSDAG against its paper's learned baselines (Placeto, the
hierarchical RNN placer), heft and the sequential optimum, on a modeled target, per objective.

    python bench/learned_table.py --target i9-flex170 --models inception_v3,resnet50,densenet121,gpt2 \\
        --train densenet-tiny,bert-tiny,gpt2-tiny,vit-tiny,mobilenet_v2-tiny \\
        --objectives latency,concurrent --seeds 0,1,2 --evaluations 1000 --seconds 20 --out bench/results

Per model (lower, support, profile, features, coarsen from the pass cache, as
bench/placement_table.py prepares them) and objective (the simulator's cost,
:func:`hdp.learn.harness.objective_cost`: ``latency`` = sequential HETERO, ``concurrent`` = hdp's
concurrent executor):

- ``heft`` and ``optimal`` (the exact optimum of the *sequential* cost model: min-cut for 2 devices)
  run once each (deterministic); their cost is priced under the objective;
- ``cp-sat`` (``concurrent`` only: CP-SAT's model of the executor, ``--cp-sat`` seconds, heft's warm start):
  its cost, "proven optimal" or its proven gap (to its lower bound), and its wall seconds — the
  reference the learned placers are held to where it proves optimality;
- ``hsdag``, ``placeto``, ``rnn-placer`` run through the one harness (:func:`hdp.learn.harness.learn`)
  with the same budget (``--evaluations`` simulated evaluations and ``--seconds`` of wall clock),
  the same seeds, the same candidates (every single device) and the same warm start (heft's
  placement); each keeps its published hyper-parameters;
- ``zero-shot``: an HSDAG policy trained on the ``--train`` models (none of them in ``--models``)
  places the model by one greedy forward pass, no evaluation; ``hsdag+policy``: HSDAG trained
  from that policy with the same budget and warm start (``--reuse-seeds``).

Cells: cost in ms, mean ± standard deviation over seeds [min–max], and the ratio to heft; "t best"
is the mean wall seconds into a run at which its best placement was first evaluated; "evals" the
mean evaluations used. Every figure is simulated; wall times are taken on the machine and under the
load named in the record. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

LEARNERS = ("hsdag", "placeto", "rnn-placer")


def _fmt(xs) -> str:
    xs = np.asarray(xs, float) * 1e3
    if not np.isfinite(xs).all():
        return f"{int((~np.isfinite(xs)).sum())} of {xs.size} runs found nothing in the budget"
    if xs.size == 1:
        return f"{xs[0]:.3f}"
    return f"{xs.mean():.3f} ± {xs.std(ddof=1):.3f} [{xs.min():.3f}–{xs.max():.3f}]"


def cp_sat_cell(module, problem, objective: str, cost, c_heft: float, seconds: float, workers: int) -> str:
    """CP-SAT on the concurrent objective (the executor's costs of ``objective_cost``: the cost table's
    launch, no hand-over or request cost): cost (x heft) · "proven optimal" or the proven gap · seconds."""
    if objective != "concurrent" or seconds <= 0:
        return "-"
    from hdp.placement.objective import Concurrent
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from

    t0 = time.perf_counter()
    r = place(method_from("cp-sat", {"time_limit": str(seconds), "workers": str(workers)}),
              PlaceContext(module=module, problem=problem.with_objective(Concurrent())))
    secs = time.perf_counter() - t0
    c = cost(r.group_device)
    gap = "proven optimal" if r.info["proven_optimal"] == "yes" else f"gap {float(r.info['gap']) * 100:.2f} %"
    return f"{c * 1e3:.3f} ({c / c_heft:.3f}) · {gap} · {secs:.1f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="i9-flex170")
    ap.add_argument("--models", default="inception_v3,resnet50")
    ap.add_argument("--train", default="densenet-tiny,bert-tiny,gpt2-tiny,vit-tiny,mobilenet_v2-tiny",
                    help="models the reused HSDAG policy is trained on (empty: no zero-shot rows)")
    ap.add_argument("--objectives", default="latency,concurrent")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--reuse-seeds", default="0,1,2", help="seeds of hsdag+policy (empty: none)")
    ap.add_argument("--evaluations", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--train-evaluations", type=int, default=200, help="per training model and round")
    ap.add_argument("--train-seconds", type=float, default=10.0, help="per training model and round")
    ap.add_argument("--train-rounds", type=int, default=2)
    ap.add_argument("--policies", default=None, help="directory of trained policies (policy-<objective>.pt): "
                    "reused when there, else trained and kept there (default: a temporary directory)")
    ap.add_argument("--cp-sat", type=float, default=60.0, help="CP-SAT's seconds on the concurrent objective (0: skip)")
    ap.add_argument("--cp-sat-workers", type=int, default=2)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=None, help="directory for the markdown record")
    args = ap.parse_args(argv)

    import tempfile

    from placement_table import base_module, load, machine

    from hdp.cache import default_cache_dir
    from hdp.fsutil import atomic_write
    from hdp.learn.harness import Budget, learn, objective_cost, time_to_best, train_on_models, zero_shot
    from hdp.passes.cache import PassCache
    from hdp.placement.problem import build_problem
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from
    from hdp.runtime.target import load_target

    target = load_target(args.target)
    devs = target.device_names
    root = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    cache = PassCache(root)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    reuse_seeds = [int(s) for s in args.reuse_seeds.split(",") if s]
    budget = Budget(evaluations=args.evaluations, seconds=args.seconds)
    cmd = "python bench/learned_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = [f"# Learned placers on `{target.name}` (simulated)", "",
           f"- date: {_dt.date.today().isoformat()}", f"- machine: {machine()}", f"- command: `{cmd}`",
           f"- budget per learned run: {args.evaluations} simulated evaluations and {args.seconds:g} s wall; "
           f"seeds {seeds}; warm start: heft's placement; candidates: every single device",
           "- exact columns: `optimal (seq.)` is the optimum of the *sequential* cost model (min-cut), exact for "
           "`latency` only; `CP-SAT` (concurrent only) is CP-SAT's model of the executor "
           f"({args.cp_sat:g} s, {args.cp_sat_workers} worker(s), heft warm start) with its proven gap", ""]
    print("\n".join(out), flush=True)
    work = Path(args.policies) if args.policies else Path(tempfile.mkdtemp(prefix="hdp-learned-"))
    work.mkdir(parents=True, exist_ok=True)

    def prepared(name):
        m, _ = base_module(name, target, cache, root / "bench", calibrated=False)
        return m, build_problem(m, devs)

    models = {name: prepared(name) for name in args.models.split(",") if name}
    for m, p in list(models.values())[:1]:  # imports and Numba compilation outside the timed calls
        ctx = PlaceContext(module=m, problem=p)
        place(method_from("heft"), ctx)
        place(method_from("optimal:mincut" if len(devs) == 2 else "optimal:ilp", {"margin": "0"}), ctx)
        for objective in args.objectives.split(","):
            objective_cost(p, objective)(p.single(0))
        learn("hsdag", m, p, objective_cost(p, "latency"), Budget(evaluations=3), seed=0)
    train_models = {name: prepared(name) for name in args.train.split(",") if name}
    loads = [load()]
    for objective in args.objectives.split(","):
        policy = None
        if train_models and (work / f"policy-{objective}.pt").exists():
            policy = str(work / f"policy-{objective}.pt")
            out.append(f"- `{objective}` policy: {policy}, trained before on {', '.join(train_models)} (same options)")
        elif train_models:
            policy = str(work / f"policy-{objective}.pt")
            items, warms = [], []
            for name, (m, p) in train_models.items():
                items.append((m, p, objective_cost(p, objective)))
                warms.append(("heft", place(method_from("heft"), PlaceContext(module=m, problem=p)).group_device))
            t0 = time.perf_counter()
            train_on_models(items, Budget(args.train_evaluations, args.train_seconds), args.train_rounds, policy,
                            warm_starts=warms)
            line = (f"- `{objective}` policy: trained on {', '.join(train_models)} ({args.train_rounds} rounds, "
                    f"{args.train_evaluations} evaluations / {args.train_seconds:g} s per model and round, heft warm "
                    f"start) in {time.perf_counter() - t0:.0f} s")
            out.append(line)
            print(line, flush=True)
        head = (f"\n## objective `{objective}`\n\n| model | ops | groups | nodes | heft ms | optimal (seq.) | "
                "CP-SAT ms (x heft) · gap · s | "
                + " | ".join(f"{x} ms (x heft) · t best · evals" for x in LEARNERS)
                + (" | zero-shot ms (x heft) · forward s | hsdag+policy ms (x heft) · t best" if policy else "") + " |")
        table = [head, "|" + "---|" * (7 + len(LEARNERS) + (2 if policy else 0))]
        print(head, flush=True)
        for name, (m, p) in models.items():
            cost = objective_cost(p, objective)
            ctx = PlaceContext(module=m, problem=p)
            t0 = time.perf_counter()
            heft = place(method_from("heft"), ctx).group_device
            t_heft = time.perf_counter() - t0
            t0 = time.perf_counter()
            opt = place(method_from("optimal:mincut" if len(devs) == 2 else "optimal:ilp",
                                    {"margin": "0"}), ctx).group_device
            t_opt = time.perf_counter() - t0
            c_heft = cost(heft)
            from hdp.learn.graph import build_learn_graph

            nodes = build_learn_graph(m, p).n_nodes
            cells = [name, str(m.graph.n_ops), str(p.n_groups), str(nodes), f"{c_heft * 1e3:.3f} ({t_heft:.2f} s)",
                     f"{cost(opt) * 1e3:.3f} ({cost(opt) / c_heft:.3f}; {t_opt:.2f} s)"]
            cells.append(cp_sat_cell(m, p, objective, cost, c_heft, args.cp_sat, args.cp_sat_workers))
            for method in LEARNERS:
                rs = [learn(method, m, p, cost, budget, seed=s, warm_start=("heft", heft)) for s in seeds]
                loads.append(load())
                best = [r.best_latency for r in rs]
                cells.append(f"{_fmt(best)} ({np.mean(best) / c_heft:.3f}) · {np.mean([time_to_best(r) for r in rs]):.1f} s"
                             f" · {np.mean([r.evaluations for r in rs]):.0f}")
            if policy:
                dev, cold = zero_shot(m, p, policy)
                dev, secs = zero_shot(m, p, policy)  # the second call: torch's first-call costs paid
                cells.append(f"{cost(dev) * 1e3:.3f} ({cost(dev) / c_heft:.3f}) · {secs['forward']:.3f} s "
                             f"(+{secs['graph'] + secs['load']:.2f} s graph and load; first call "
                             f"{sum(cold.values()):.2f} s in all)")
                if reuse_seeds:
                    rs = [learn("hsdag", m, p, cost, budget, seed=s, warm_start=("heft", heft), policy=policy)
                          for s in reuse_seeds]
                    best = [r.best_latency for r in rs]
                    cells.append(f"{_fmt(best)} ({np.mean(best) / c_heft:.3f}) · "
                                 f"{np.mean([time_to_best(r) for r in rs]):.1f} s")
                else:
                    cells.append("-")
            row = "| " + " | ".join(cells) + " |"
            table.append(row)
            print(row, flush=True)
        out += table
    loads.append(load())
    out += ["", f"1-minute load average during the run: {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores "
            f"(other engineers' jobs; wall times and so the evaluations a run reaches within its seconds depend on it)"]
    print(out[-1], flush=True)
    if args.out:
        path = Path(args.out) / f"learned-{target.name}-{_dt.date.today().isoformat()}.md"
        atomic_write(path, ("\n".join(out) + "\n").encode())
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

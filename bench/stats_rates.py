"""False-positive and detection rates of hdp's timing comparisons on synthetic run times.

Every comparison runs the real code path of :mod:`hdp.runtime.measure.stats` (``run_sequential`` with a
``SequentialPlan``, then ``compare`` / ``select_best``) against a ``NoisyMachine`` (tests/noisy_machine.py)
with the noise of a quiet core or of this project's shared 2-core VM, and counts the verdicts.
For contrast, the old rule (two separate 10-run medians, A's runs then B's) is scored on the same
machine: how often it reports a difference of 5 % or more between identical candidates.

    python bench/stats_rates.py                 # 200 seeds per cell (about 3 min on 2 cores)
    python bench/stats_rates.py --seeds 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from hdp.runtime.measure.selection import select_best
from hdp.runtime.measure.stats import SequentialPlan, compare, run_sequential

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the simulated machine is test equipment
from noisy_machine import NoisyMachine  # noqa: E402


def two(preset: str, effect: float, seeds: int, plan: SequentialPlan, cell: int) -> dict:
    verdicts, rounds, res = [], [], []
    for s in range(seeds):
        m = NoisyMachine.preset(preset, [0.010, 0.010 * (1 + effect)], 1_000_000 * cell + s)
        t, _ = run_sequential(plan, 2, m.run_rounds, m.clock)
        c = compare(t[:, 0], t[:, 1])
        verdicts.append(c.verdict)
        rounds.append(t.shape[0])
        res.append((c.high - c.low) / 2)
    return {"equal": verdicts.count("equal"), "faster": verdicts.count("faster"),
            "slower": verdicts.count("slower"), "rounds": float(np.median(rounds)),
            "resolution": float(np.median(res))}


def old_rule(preset: str, seeds: int) -> float:
    """Share of identical pairs whose separate 10-run medians differ by 5 % or more."""
    hits = 0
    for s in range(seeds):
        m = NoisyMachine.preset(preset, [0.010, 0.010], 50_000 + s)
        a = [m.sample(0) for _ in range(13)][3:]  # 3 warm-up runs, then 10
        b = [m.sample(1) for _ in range(13)][3:]
        hits += abs(np.median(b) / np.median(a) - 1) >= 0.05
    return hits / seeds


def best_of(preset: str, true: list[float], seeds: int, plan: SequentialPlan) -> dict:
    winners = []
    for s in range(seeds):
        m = NoisyMachine.preset(preset, true, 90_000 + s)
        t, _ = run_sequential(plan, len(true), m.run_rounds, m.clock)
        winners.append(select_best(t, preference=[0]).winner)
    return {i: winners.count(i) for i in range(len(true))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--max-rounds", type=int, default=600)
    args = ap.parse_args(argv)
    plan = SequentialPlan(resolution=0.03, max_rounds=args.max_rounds, max_seconds=1e9)
    t0 = time.perf_counter()
    print(f"plan: {plan}\n")
    print("| noise | true B vs A | equal | faster | slower | median rounds | median CI half-width |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    cell = 0
    for preset in ("quiet", "shared"):
        for effect in (0.0, 0.03, -0.03, 0.05, -0.05, 0.10):
            cell += 1
            r = two(preset, effect, args.seeds, plan, cell)
            print(f"| {preset} | {effect * 100:+.0f} % | {r['equal']} | {r['faster']} | {r['slower']} | "
                  f"{r['rounds']:.0f} | {r['resolution'] * 100:.1f} % |", flush=True)
    print()
    for preset in ("quiet", "shared"):
        print(f"old rule on '{preset}' noise: identical candidates differ by >= 5 % in "
              f"{old_rule(preset, args.seeds) * 100:.0f} % of pairs")
    print()
    for preset in ("quiet", "shared"):
        same = best_of(preset, [0.010, 0.010, 0.010], args.seeds, plan)
        better = best_of(preset, [0.010, 0.010, 0.0095], args.seeds, plan)
        print(f"best of 3 on '{preset}' noise (candidate 0 preferred): all equal -> winners {same}; "
              f"candidate 2 faster by 5 % -> winners {better}")
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

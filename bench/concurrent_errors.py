"""The simulator's error on each candidate of bench/concurrent_table.py's JSON results, with a 95 %
interval: the measured median's bootstrap interval (4,000 resamples of the run's rounds, seeded)
carried into ``simulated / measured - 1``. Reads stored results; measures nothing.

    python bench/concurrent_errors.py bench/results/concurrent-virtual-2x1-2026-12-02-convert*.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(paths: list[str]) -> None:
    rng = np.random.default_rng(0)
    for path in paths:
        print(path)
        for res in json.load(open(path)):
            names, times, sim = res["names"], np.array(res["times"]), res.get("simulated", {})
            for cand in names:
                if cand not in sim:
                    continue
                t = times[:, names.index(cand)]
                med = float(np.median(t))
                lo, hi = np.percentile(np.median(rng.choice(t, (4000, t.size)), axis=1), [2.5, 97.5])
                s = float(sim[cand])
                print(f"  {res['model'].split('/')[-1]:<36} {cand:<12} measured {med * 1e3:8.2f} ms "
                      f"[{lo * 1e3:.2f}, {hi * 1e3:.2f}]  simulated {s * 1e3:8.2f}  error {s / med - 1:+6.1%} "
                      f"[{s / hi - 1:+.1%}, {s / lo - 1:+.1%}]")


if __name__ == "__main__":
    main(sys.argv[1:])

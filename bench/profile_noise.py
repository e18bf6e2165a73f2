"""How much of a profile's per-op device difference is noise, and what each estimator makes of it.

Profiles a model several times on a two-device target, keeping every op's time in every run
(``profile_costs(samples=...)``), then for every profile compares per-op estimators:

- ``mean``: the mean over the runs (hdp before issue 21);
- ``median``: the median over the runs (the minimum below three runs);
- ``shrunk``: the median, shrunk toward the device ratio (:func:`hdp.runtime.costs.denoise.shrink`).

against a **reference**: per op and device, the median over every run of every profile (on a target
whose devices compute alike, ``--identical``: one column for both, the truth being no per-op
difference at all). Reported per profile: ``err``, the time-weighted mean ``|error|`` of the per-op
log-ratio between the devices (after each side's device ratio), and ``optimal`` placed on the
estimate with no margin: its predicted gain over the best single device and its regret, the
simulated latency of that placement on the reference costs relative to the best single device there.

Run from a directory without an ``hdp`` checkout (the measuring worker imports ``hdp``)::

    cd /tmp && python /path/to/bench/profile_noise.py inception_v3.xml --target virtual-f32 --identical \\
        --profiles 4 --runs-profiles 2
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def collect(module, target, n: int, kwargs: dict) -> list[dict]:
    from hdp.runtime.costs.profile import profile_costs

    out = []
    for _ in range(n):
        smp: dict = {}
        profile_costs(module, target, samples=smp, **kwargs)
        out.append({"samples": smp, "load": os.getloadavg()[0]})
    return out


def evaluate(module, target, profiles: list[dict], identical: bool) -> list[str]:
    from hdp.ir.types import Array, Costs
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from
    from hdp.runtime.costs.denoise import run_estimates, shrink

    devs = target.device_names
    ref = np.stack([np.median(np.concatenate([p["samples"][d]["op_runs"] for p in profiles]), axis=0) for d in devs], 1)
    if identical:
        ref = np.repeat(ref.mean(axis=1, keepdims=True), 2, axis=1)

    def problem(t):
        c = Costs(devices=devs, op_time=Array.of(np.ascontiguousarray(t), np.float64), kind=("measured",) * 2,
                  link_latency=target.link.latency, link_bandwidth=target.link.bandwidth,
                  subgraph_overhead=target.link.subgraph_overhead)
        m = module.replace(costs=c)
        return m, build_problem(m, devs)

    _, pref = problem(ref)
    sref = Simulator(pref)
    best_ref = min(sref.singles().values())
    okr = (ref > 0).all(axis=1)
    w = ref[okr].mean(axis=1)
    w = w / w.sum()
    eref = np.log(ref[okr, 0] / ref[okr, 1]) - np.log(ref[okr, 0].sum() / ref[okr, 1].sum())

    def err(t):
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.log(np.maximum(t[okr, 0], 1e-9) / np.maximum(t[okr, 1], 1e-9))
        return float((w * np.abs(e - np.log(t[okr, 0].sum() / t[okr, 1].sum()) - eref)).sum())

    def opt(t):
        m, p = problem(t)
        s = Simulator(p)
        gd = place(method_from("optimal", {"margin": 0.0}), PlaceContext(module=m, problem=p)).group_device
        return 1 - s.latency(gd) / min(s.singles().values()), sref.latency(gd) / best_ref - 1

    lines = ["| runs | load | estimator | err | optimal's predicted gain | regret |", "|---|---|---|---|---|---|"]
    for p in profiles:
        a, b = (p["samples"][d]["op_runs"] for d in devs)
        ea, va = run_estimates(a)
        eb, vb = run_estimates(b)
        med = np.stack([ea, eb], 1)
        ests = {"mean": np.stack([a.mean(axis=0), b.mean(axis=0)], 1), "median": med,
                "shrunk": shrink(med, np.stack([va, vb], 1))[0]}
        for name, t in ests.items():
            gain, regret = opt(t)
            lines.append(f"| {a.shape[0]} | {p['load']:.1f} | {name} | {err(t):.3f} | {gain * 100:+.1f} % | "
                         f"{regret * 100:+.1f} % |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--target", default="virtual-f32")
    ap.add_argument("--identical", action="store_true", help="the devices compute alike: the truth is no difference")
    ap.add_argument("--profiles", type=int, default=4, help="profiles with the default budget")
    ap.add_argument("--runs-profiles", type=int, default=2, help="profiles with 10 interleaved rounds")
    ap.add_argument("--min-runs", type=int, default=2, help="min_runs of the default-budget profiles")
    ap.add_argument("--save", help="keep the profiles' per-run samples in this pickle")
    ap.add_argument("--load", help="evaluate the samples of an earlier --save instead of profiling")
    args = ap.parse_args()
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target

    t = load_target(args.target)
    m = PassManager([make_pass("support", {"target": t})]).run(lower(args.model))
    import pickle

    if args.load:
        with open(args.load, "rb") as f:
            profiles = pickle.load(f)
    else:
        profiles = collect(m, t, args.profiles, {"min_runs": args.min_runs})
        profiles += collect(m, t, args.runs_profiles, {"seconds": 0.0, "runs": 10})
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(profiles, f)
    print("\n".join(evaluate(m, t, profiles, args.identical)))


if __name__ == "__main__":
    main()

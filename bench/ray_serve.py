"""Serving a plan on Ray, measured: how the wiring costs on one host, and what a link costs across two.

    python bench/ray_serve.py local [--rounds 8] [--batches 5]            # no root needed
    python bench/ray_serve.py bed   [--rounds 6] [--rate 200mbit] [--channels 16 --size 64]
    python bench/ray_serve.py faults [--runs 10] [--bed]                   # the fault drill, N times

The plans are written here by hdp from a seeded CNN (tests/ray_plans.py: ``pipe``, two stages on
CPU and CPU_B as blobs; ``hosts``, the same with stage 0 on host a and stage 1 on host b).

``local``: the ``pipe`` plan with 2 requests in flight three ways, in rounds whose order follows a
Williams design (:func:`hdp.runtime.measure.stats.round_order`): in one process (``hdp serve``'s
executor), on a local Ray wired by a Compiled Graph, and by ordinary actor calls. Each run serves
``--batches`` windows (one fresh Ray each); a round's figure per way is its median seconds per
request; ways are compared paired by round (:func:`~hdp.runtime.measure.stats.compare`, Hodges-Lehmann
95 % interval).

``bed``: on the two-host bed (bench/two_host_bed.py, root) the ``hosts`` plan across the link
(actor calls), the same plan with both stages on host a (a Compiled Graph on one node), and on host
a by actor calls, in interleaved rounds as above; beside them the bound the link sets (each request
crosses a->b with stage 0's output and b->a with the model's output, both directions limited by
tbf at ``--rate``), and once, a Compiled Graph forced across the two nodes (``compiled="always"``)
to see whether it works there yet. The driver runs in namespace A.

``faults``: ``--runs`` fault drills in a row, each a fresh Ray (local, or with ``--bed`` the bed
with stage 1's replicas on hosts a and b and the one on b killed): the ``mixed`` plan served with
3 requests in flight, stage 1's replica killed after 60 answers; a run passes when the runtime
named the replica, every request id was answered exactly once and the outputs matched the unsplit
model. Prints how many passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _paths():
    for p in (ROOT, ROOT / "tests", ROOT / "bench"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))


def per_request(res: dict) -> float:
    """Median seconds per request over a run's windows (inf when it failed)."""
    rates = res["served"]["rates"] if "served" in res else res.get("rates", [])
    return float(np.median(1 / np.asarray(rates))) if rates else float("inf")


def p50(res: dict) -> float:
    s = res["served"] if "served" in res else res
    return float(np.median(s["p50"])) if s.get("p50") else float("nan")


def report(names: list[str], times: dict, lat: dict, rounds: int) -> None:
    from hdp.runtime.measure.stats import compare

    for n in names:
        t = np.asarray(times[n])
        print(f"  {n:<34} {1 / np.median(t):8.1f} requests/s (median of {rounds} runs, range "
              f"{1 / t.max():.1f}-{1 / t.min():.1f}); p50 latency {np.nanmedian(lat[n]) * 1e3:.2f} ms")
    base = names[0]
    for n in names[1:]:
        c = compare(times[base], times[n], names=(base, n))
        print(f"  {c.text()}")


def local(args) -> None:
    _paths()
    from ray_plans import write_plans

    from hdp.runtime.measure.stats import round_order
    from hdp.runtime.serve.plan_serve import serve_in_subprocess
    from hdp.runtime.serve.ray_run import serve_ray_in_subprocess

    with tempfile.TemporaryDirectory(prefix="hdp-rb-", dir="/tmp") as d:
        plans = write_plans(Path(d), args.channels, args.size)
        pipe = plans["pipe"]
        ways = {
            "in one process": lambda: msgspec.to_builtins(serve_in_subprocess(pipe, requests=2, batches=args.batches)),
            "Ray, compiled graph": lambda: msgspec.to_builtins(serve_ray_in_subprocess(
                pipe, ray="auto", requests=2, batches=args.batches, compiled="auto")),
            "Ray, actor calls": lambda: msgspec.to_builtins(serve_ray_in_subprocess(
                pipe, ray="auto", requests=2, batches=args.batches, compiled="never")),
        }
        names = list(ways)
        times = {n: [] for n in names}
        lat = {n: [] for n in names}
        for r in range(args.rounds):
            for k in round_order(r, len(names)):
                res = ways[names[k]]()
                err = res.get("error") or (res.get("served") or {}).get("error")
                if err:
                    raise SystemExit(f"{names[k]}: {err}")
                if "mode" in res:
                    assert res["mode"] == ("compiled graph" if "compiled" in names[k] else "actor calls"), res["mode"]
                times[names[k]].append(per_request(res))
                lat[names[k]].append(p50(res))
        cpus = os.cpu_count()
        print(f"pipe plan (2 stages: CPU | CPU_B, 1 thread each), {args.channels or 8}x{args.size or 16}x"
              f"{args.size or 16} f32 CNN, 2 requests in flight, {args.batches} windows per run, {args.rounds} rounds "
              f"(Williams order), {cpus} cores:")
        report(names, times, lat, args.rounds)


BED_CODE = r"""
import json, sys
from hdp.runtime.serve.ray_run import serve_on_ray
import msgspec
args = json.loads(sys.stdin.read())
path = args.pop("path")
r = serve_on_ray(path, **args)
print(json.dumps(msgspec.to_builtins(r)))
"""


def bed(args) -> None:
    _paths()
    from ray_plans import edit, write_plans
    from two_host_bed import Bed, rate_bytes

    from hdp.ir.plan import read_plan
    from hdp.runtime.measure.stats import round_order

    with tempfile.TemporaryDirectory(prefix="hdp-rb-", dir="/tmp") as d:
        plans = write_plans(Path(d), args.channels, args.size)
        hosts = plans["hosts"]
        one = Path(d) / "one.plan"
        shutil.copytree(hosts, one)
        edit(one, lambda p: [r.update(host="a") for st in p["stages"] for r in st["replicas"]])
        b = Bed(args.rate)
        try:
            b.up()

            def serve(path, **kw):
                got = b.exec([sys.executable, "-c", BED_CODE], capture=True, timeout=900,
                             input=json.dumps({"path": str(path), "ray": b.address, "requests": args.requests,
                                               "batches": args.batches, **kw}))
                if got.returncode != 0:
                    return {"error": f"the driver died (exit {got.returncode}): "
                                     + " | ".join(got.stderr.strip().splitlines()[-2:])}
                return json.loads(got.stdout.strip().splitlines()[-1])

            ways = {"host a alone, compiled graph": lambda: serve(one),
                    "host a alone, actor calls": lambda: serve(one, compiled="never"),
                    "across a and b, actor calls": lambda: serve(hosts)}
            names = list(ways)
            times = {n: [] for n in names}
            lat = {n: [] for n in names}
            modes = {}
            for r in range(args.rounds):
                for k in round_order(r, len(names)):
                    res = ways[names[k]]()
                    if res.get("error"):
                        raise SystemExit(f"{names[k]}: {res['error']}")
                    modes[names[k]] = res["mode"]
                    times[names[k]].append(per_request(res))
                    lat[names[k]].append(p50(res))
            plan = read_plan(hosts)
            shape = plan.inputs[0].split(" ", 1)[1]
            n_floats = args.channels * args.size * args.size if args.channels else 8 * 16 * 16
            crossing = 4 * n_floats / rate_bytes(args.rate)
            print(f"two-host bed, link {args.rate} ({rate_bytes(args.rate) / 1e6:.1f} MB/s each way, tc tbf), one "
                  f"core per host; plan CPU@a | CPU_B@b on a {shape} CNN ({4 * n_floats / 1e3:.0f} KB per tensor), "
                  f"{args.requests} requests in flight, {args.batches} windows per run, {args.rounds} rounds:")
            report(names, times, lat, args.rounds)
            print(f"  the link's bound: one {4 * n_floats / 1e3:.0f} KB tensor each way per request, "
                  f"{crossing * 1e3:.1f} ms per crossing: at most {1 / crossing:.1f} requests/s across")
            print("  wiring: " + "; ".join(f"{n}: {m}" for n, m in modes.items()))
            forced = serve(hosts, compiled="always", batches=2, request_timeout=30)
            print("  a Compiled Graph forced across the two nodes: "
                  + (f"ran, {1 / per_request(forced):.1f} requests/s" if not forced.get("error")
                     else f"failed: {forced['error'][:200]}"))
        finally:
            b.down()


FAULT_CODE = r"""
import json, sys
from hdp.runtime.serve.ray_run import serve_on_ray
import msgspec
a = json.loads(sys.stdin.read())
r = serve_on_ray(a["path"], ray=a["ray"], requests=3, batches=3, per_batch=40, kill=tuple(a["kill"]), temp_dir=a.get("tmp"))
print(json.dumps(msgspec.to_builtins(r)))
"""


def faults(args) -> None:
    _paths()
    from ray_plans import write_plans

    with tempfile.TemporaryDirectory(prefix="hdp-rb-", dir="/tmp") as d:
        plans = write_plans(Path(d))
        b = None
        if args.bed:
            from two_host_bed import Bed

            b = Bed(args.rate)
        passed = 0
        try:
            for i in range(args.runs):
                if b is not None:
                    b.up()
                    got = b.exec([sys.executable, "-c", FAULT_CODE], capture=True, timeout=900,
                                 input=json.dumps({"path": str(plans["mixed_hosts"]), "ray": b.address,
                                                   "kill": [1, 1, 60]}))
                else:
                    tmp = tempfile.mkdtemp(prefix="hdp-rf-", dir="/tmp")
                    got = subprocess.run([sys.executable, "-c", FAULT_CODE], capture_output=True, text=True,
                                         timeout=900, input=json.dumps({"path": str(plans["mixed"]), "ray": "auto",
                                                                        "kill": [1, 0, 60], "tmp": tmp}))
                    shutil.rmtree(tmp, ignore_errors=True)
                try:
                    res = json.loads(got.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    res = {"error": f"exit {got.returncode}: " + " | ".join(got.stderr.strip().splitlines()[-2:])}
                ok = (not res.get("error") and res["events"] and " died " in res["events"][0]
                      and res["submitted"] == res["answered"] and not res["twice"] and not res["missing"]
                      and res["served"]["check_passed"])
                passed += bool(ok)
                print(f"run {i + 1}: {'pass' if ok else 'FAIL'}: " + (res.get("error") or
                      f"{res['events'][0] if res['events'] else 'no fault seen'}; {res['submitted']} submitted, "
                      f"{res['answered']} answered, {res['resubmitted']} submitted again, twice {res['twice']}, "
                      f"missing {res['missing']}, {res['served']['rates'] and round(float(np.median(res['served']['rates'])), 1)} "
                      f"requests/s"), flush=True)
                if b is not None:
                    b.down()
        finally:
            if b is not None:
                b.down()
        print(f"{passed}/{args.runs} fault drills passed ({'two-host bed' if args.bed else 'local Ray'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("local", "bed", "faults"):
        p = sub.add_parser(name)
        p.add_argument("--rounds", type=int, default=8 if name == "local" else 6)
        p.add_argument("--batches", type=int, default=5)
        p.add_argument("--requests", type=int, default=3)
        p.add_argument("--rate", default="200mbit")
        p.add_argument("--channels", type=int, default=0 if name != "bed" else 16)
        p.add_argument("--size", type=int, default=0 if name != "bed" else 64)
        p.add_argument("--runs", type=int, default=10)
        p.add_argument("--bed", action="store_true")
    args = ap.parse_args()
    {"local": local, "bed": bed, "faults": faults}[args.cmd](args)


if __name__ == "__main__":
    main()

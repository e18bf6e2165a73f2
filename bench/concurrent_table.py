"""Concurrent execution against sequential HETERO and single devices, measured on this host.

    python bench/concurrent_table.py --two-towers                      # the built-in two-tower model
    python bench/concurrent_table.py placed.xml [placed2.xml ...]      # files from hdp compile
    python bench/concurrent_table.py --two-towers --rounds 60 --json /tmp/conc.json
    python bench/concurrent_table.py --zoo vit-tiny,gpt2-tiny --method heft   # zoo models placed by hdp compile

For each placed model (the built-in one is placed tower by tower: tower A and the rest on CPU,
tower B on CPU_B of ``virtual-2x1``), these candidates are timed **interleaved** in one process,
one inference each per round in a balanced rotating order (:func:`hdp.runtime.measure.stats.round_order`):

- ``concurrent``: ``compile_placed(xml, execution="concurrent")``, the device subgraphs at once;
- ``concurrent-unpinned``: the same with the lanes not pinned (every device's ``ENABLE_CPU_PINNING``
  off), when the target pins: on a loaded host a pinned thread cannot leave a busy core;
- ``hetero``: ``compile_placed(xml)``, the same file under HETERO, one subgraph after another;
- ``single:<dev>``: the model on one device of the target (its configuration), for each device;
- ``cpu-all``: the plain CPU plugin in f32 with every core of the host (the best single compile
  a user would make on it, outside the target).

With ``--simulate`` the model is also profiled on the target (``support``, ``profile``, ``coarsen``
passes, cached in ``--cache-dir``) and the executor's own costs are measured on this host
(:func:`hdp.runtime.costs.executor.fit_executor_costs`; ``hdp calibrate``'s, conversions fitted on
executor runs, when the cache holds a calibration of the target), and the table gives
the simulated latency of each placed candidate beside its measured median, with the error
``simulated / measured - 1``.

Every candidate's outputs are first checked against ``cpu-all`` (relative L2 error). Then each is
compared with ``concurrent`` by :func:`hdp.runtime.measure.stats.compare` (paired log-ratios, Hodges-Lehmann
estimate, 95 % interval; the family of comparisons holds together at 95 %). Run it under
``flock /work/measure.lock`` and report the load average it prints. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def two_towers(tmp: Path, n: int = 384, depth: int = 6, depth_b: int | None = None, placed: bool = True) -> Path:
    """x [1,n,n] -> {tower A, tower B} (``depth`` and ``depth_b`` MatMul n x n + Relu) -> Add -> y;
    tower B on CPU_B, the rest on CPU, written as hdp writes a placed model for ``virtual-2x1``
    (``placed=False``: the model alone)."""
    import openvino as ov
    from openvino import opset13 as ops

    from hdp.target.target import load_target

    rng = np.random.default_rng(0)
    x = ops.parameter([1, n, n], np.float32, name="x")
    a = b = x
    on_b = []
    depth_b = depth if depth_b is None else depth_b
    for i in range(max(depth, depth_b)):
        for tower in "ab":
            if i >= (depth if tower == "a" else depth_b):
                continue
            w = ops.constant((rng.standard_normal((n, n)) * (1.0 / np.sqrt(n))).astype(np.float32), name=f"{tower}{i}_w")
            y = ops.relu(ops.matmul(a if tower == "a" else b, w, False, False, name=f"{tower}{i}_mm"), name=f"{tower}{i}")
            if tower == "a":
                a = y
            else:
                b = y
                on_b += [w, y, y.input(0).get_source_output().get_node()]
    model = ov.Model([ops.result(ops.add(a, b, name="join"), name="y")], [x], "two_towers")
    if not placed:
        out = tmp / f"two_towers_{n}_{depth}x{depth_b}.xml"
        ov.save_model(model, str(out), compress_to_fp16=False)
        return out
    on_b = set(on_b)
    for op in model.get_ordered_ops():
        op.get_rt_info()["user_dataaffinity"] = "CPU_B" if op in on_b else "CPU"
    t = load_target("virtual-2x1")
    model.set_rt_info("CPU,CPU_B", ["hdp", "devices"])
    model.set_rt_info("manual", ["hdp", "method"])
    import msgspec

    model.set_rt_info(msgspec.json.encode(t).decode(), ["hdp", "target"])
    out = tmp / f"two_towers_{n}_{depth}x{depth_b}_placed.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    return out


def place_zoo(name: str, tmp: Path, method: str, target: str) -> Path:
    """A zoo model exported (cached) and placed by ``hdp compile --method METHOD --target TARGET``."""
    import subprocess

    from hdp.zoo.models import export

    xml = export(name, tmp / f"{name}.xml")
    out = tmp / f"{name}-{method}-placed.xml"
    cmd = [sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(out), "--target", target, "--method", method,
           "--no-compare", "-q"]
    subprocess.run(cmd, check=True)
    return out


def _inputs(model) -> list:
    from hdp.ir.specialise import Specialisation
    from hdp.runtime.measure.worker import _recorded_spec, random_inputs

    spec = _recorded_spec(model)
    shapes = None
    if spec:
        shapes = [i.shape for i in Specialisation.from_json(spec, "<placed>").inputs]
    return random_inputs(model, seed=0, shapes=shapes)


def _unpinned(target):
    """``target`` with ``ENABLE_CPU_PINNING=NO`` on every device (the executor then pins nothing)."""
    import msgspec

    devs = [msgspec.structs.replace(d, config={**d.config, "ENABLE_CPU_PINNING": "NO"})
            if d.config.get("ENABLE_CPU_PINNING", "").upper() == "YES" else d for d in target.devices]
    return msgspec.structs.replace(target, devices=devs)


def candidates(xml: Path) -> tuple[dict, list]:
    import openvino as ov

    from hdp.runtime.placed.model import compile_placed, read_placed
    from hdp.target.devices import make_core

    pm = read_placed(xml)
    core = make_core(pm.target, pm.devices)
    out = {"concurrent": compile_placed(xml, execution="concurrent"), "hetero": compile_placed(xml, core=core)}
    floating = _unpinned(pm.target)
    if floating != pm.target:  # the same executor with its lanes left to the OS scheduler
        out["concurrent-unpinned"] = compile_placed(xml, target=floating, execution="concurrent")
    for d in pm.devices:
        out[f"single:{d}"] = core.compile_model(read_placed(xml).model, d)
    out["cpu-all"] = ov.Core().compile_model(read_placed(xml).model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return out, _inputs(pm.model)


def _relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a - b))


def measure(xml: Path, rounds: int, warmup: int = 5) -> dict:
    cands, inputs = candidates(xml)
    res = measure_candidates(cands, inputs, rounds, "concurrent", warmup)
    subs = cands["concurrent"].split.subgraphs
    return {"model": str(xml), **res, "subgraphs": [(s.device, len(s.ops)) for s in subs],
            "hetero_submodels": int(cands["hetero"].get_property("HETERO_NUMBER_OF_SUBMODELS"))}


def measure_candidates(cands: dict, inputs: list, rounds: int, base: str, warmup: int = 5) -> dict:
    """Time compiled candidates (name -> something called like a compiled model) on the same
    ``inputs``, one inference each per round in a balanced rotating order, after checking each
    one's outputs against the last candidate's; every candidate compared with ``base``."""
    from hdp.runtime.measure.stats import compare, round_order

    names = list(cands)
    reqs = {}
    for k, c in cands.items():
        r = c.create_infer_request()
        for i, a in enumerate(inputs):
            import openvino as ov

            r.set_input_tensor(i, ov.Tensor(a))
        reqs[k] = r
    ref = None
    errors = {}
    for k in reversed(names):  # the last candidate first: the reference (cpu-all in measure)
        reqs[k].infer()
        outs = [np.array(reqs[k].get_output_tensor(j).data, copy=True) for j in range(len(cands[k].outputs))]
        if ref is None:
            ref = outs
        errors[k] = max(_relative_error(a, b) for a, b in zip(outs, ref))
    for _ in range(warmup):
        for k in names:
            reqs[k].infer()
    times = np.zeros((rounds, len(names)))
    clock = time.perf_counter
    for r in range(rounds):
        for j in round_order(r, len(names)):
            t0 = clock()
            reqs[names[j]].infer()
            times[r, j] = clock() - t0
    bi = names.index(base)
    family = len(names) - 1
    comps = {n: compare(times[:, bi], times[:, j], names=(base, n), family=family)
             for j, n in enumerate(names) if j != bi}
    return {"rounds": rounds, "median_ms": {n: float(np.median(times[:, j]) * 1e3) for j, n in enumerate(names)},
            "error": errors, "comparisons": {n: c.to_dict() for n, c in comps.items()},
            "times": times.tolist(), "names": names}


def simulated(xml: Path, cache_dir: str | None, executor) -> dict:
    """Simulated seconds of the file's placement: ``concurrent`` (the executor's subgraphs, with
    ``executor``'s costs), ``hetero`` (sequential) and ``single:<dev>`` for every device."""
    from hdp.cli.calibrate import prepare
    from hdp.cli.common import pass_cache
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.runtime.measure.measurer import placed_device_of

    dev, devices, tgt = placed_device_of(xml)
    module = prepare(str(xml), tgt, None, pass_cache(cache_dir, False))
    problem = build_problem(module, tgt.device_names)
    idx = np.array([tgt.device_names.index(d) for d in devices])[dev.astype(np.int64)]
    gd = problem.structure.group_devices(idx)
    sim = Simulator(problem)
    out = {"concurrent": sim.latency_concurrent(gd, executor.launch, executor.handover, executor.request,
                                                    executor.convert),
           "hetero": sim.latency(gd), "concurrent_subgraphs": sim.concurrent_subgraphs(gd)[1]}
    for j, t in sim.singles().items():
        out[f"single:{tgt.device_names[j]}"] = t
    return out


def render(res: dict) -> str:
    lines = [f"## {Path(res['model']).name}: {len(res['subgraphs'])} concurrent subgraphs "
             f"({', '.join(f'{d}:{n}' for d, n in res['subgraphs'])}), HETERO {res['hetero_submodels']} submodels, "
             f"{res['rounds']} interleaved rounds", "",
             "| candidate | median ms | simulated ms (error) | max rel. error vs cpu-all | "
             "vs concurrent (95 % simultaneous CI) |",
             "|---|---:|---:|---:|---|"]
    sim = res.get("simulated", {})
    for n, ms in res["median_ms"].items():
        s = sim.get(n)
        sim_txt = f"{s * 1e3:.2f} ({(s * 1e3 / ms - 1) * 100:+.1f} %)" if s is not None else "-"
        c = res["comparisons"].get(n)
        # the comparison reads B=n against A=concurrent; say it from concurrent's side
        if c is None:
            what = "-"
        else:
            what = f"{n} is x{c['ratio']:.3f} of concurrent ({c['low']:.3f}…{c['high']:.3f}): {c['verdict']}"
        lines.append(f"| {n} | {ms:.2f} | {sim_txt} | {res['error'][n]:.1e} | {what} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("placed", nargs="*", type=Path)
    ap.add_argument("--two-towers", action="store_true", help="the built-in two-tower model (6 and 6 MatMuls)")
    ap.add_argument("--towers", default="", help="more two-tower models: DEPTH_A x DEPTH_B [x N], e.g. 4x8,6x6x256")
    ap.add_argument("--zoo", default="", help="comma-separated zoo models to place and measure")
    ap.add_argument("--method", default="heft", help="placer for --zoo (hdp compile --method)")
    ap.add_argument("--target", default="virtual-2x1", help="target for --zoo")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--simulate", action="store_true", help="also profile and simulate each placement")
    ap.add_argument("--cache-dir", default=None, help="pass cache for --simulate (default: hdp's)")
    args = ap.parse_args()
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="hdp-conc-"))
    files = list(args.placed) + ([two_towers(tmp)] if args.two_towers else [])
    for spec in filter(None, args.towers.split(",")):
        parts = [int(x) for x in spec.split("x")]
        files.append(two_towers(tmp, n=parts[2] if len(parts) > 2 else 384, depth=parts[0], depth_b=parts[1]))
    files += [place_zoo(n, tmp, args.method, args.target) for n in args.zoo.split(",") if n]
    out = []
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    executors = {}
    for f in files:
        sim = None
        if args.simulate:
            from hdp.runtime.costs.executor import fit_executor_costs
            from hdp.runtime.placed.model import read_placed

            tgt = read_placed(f).target
            if tgt.name not in executors:
                from hdp.cli.common import pass_cache
                from hdp.runtime.costs.calibrate import calibration_for

                cache = pass_cache(args.cache_dir, False)
                cal = calibration_for(tgt, cache.dir) if cache is not None else None
                if cal is not None and cal.executor is not None:  # hdp calibrate's: the conversions fitted
                    executors[tgt.name] = cal.executor
                    print(f"{tgt.name}: hdp calibrate's (stored {cal.created}) {cal.executor.describe()}")
                else:
                    executors[tgt.name] = fit_executor_costs(tgt)
                    print(f"{tgt.name}: measured now: {executors[tgt.name].describe()}")
            sim = simulated(f, args.cache_dir, executors[tgt.name])
        res = measure(f, args.rounds)
        if sim is not None:
            res["simulated"] = sim
        res["load_after"] = os.getloadavg()
        out.append(res)
        print(render(res))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in res['load_after'])}\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

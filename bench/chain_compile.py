"""``hdp compile`` of a Relu/Add chain with ``heft`` on ``virtual``, pass by pass, beside OpenVINO's own
compile of the same chain, and the ratio (issues 23 and 33).

The chain is a Parameter [1, 16], then Relu and Add alternating, then a Result: ``--shared`` every
Add reads one Constant (the issues' chain: the CPU plugin's compile of it grows about as the cube
of its length), else each has its own (seven distinct values). Each run is a fresh ``hdp compile``
from an empty ``--cache-dir`` (``--no-compare``, as a user who wants the placed model waits for
it), right after OpenVINO's floor on the same model: one ``core.compile_model`` on the CPU plugin
(f32) in a fresh process. The table gives each pass's seconds, the wall time and the CPU time
(user + system, hdp and its workers), median [min-max] over ``--reps`` runs, then hdp's wall and
CPU against the floor measured just before it, run by run.

Where the floor's compile comes back: ``profile`` compiles the whole chain on each device, the
devices in parallel threads (up to 8,192 ops; a longer model's distinct chunks instead,
``hdp/runtime/measure/chunks.py``), and keeps the check's outputs of each; ``check`` compiles the
placed file as it will be committed, under HETERO, and takes its reference (the original on CPU
f32) from the profile's CPU compile; ``raise`` commits the checked file. At best that is two of
OpenVINO's compiles one after the other: 2x plus the passes between them.
``--floor-sizes 500,1000,2000`` only times the floor at each length (a fresh process each, at
most ``--timeout`` seconds), for the shape of OpenVINO's own growth.

hdp's Numba kernels are compiled once into a cache of the bench's own (``python -m hdp.pipeline.warmup``,
what ``make install`` runs, timed and printed on its own) before the runs, as a user's are after
installing; ``--cold-kernels`` leaves that cache empty instead, so every run compiles them (some
10 s of ``partition`` on this 2-core VM).

    flock /work/measure.lock python bench/chain_compile.py --ops 2000 --shared --reps 3    # issue 33: ~5 min
    flock /work/measure.lock python bench/chain_compile.py --ops 20000 --reps 3            # ~10 min
    flock /work/measure.lock python bench/chain_compile.py --ops 20000 --reps 1 --shared   # OpenVINO: minutes
    flock /work/measure.lock python bench/chain_compile.py --shared --floor-sizes 500,1000,2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FLOOR = """
import sys, time, openvino as ov
core = ov.Core(); m = core.read_model(sys.argv[1])
t, c = time.perf_counter(), time.process_time()
core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
print(time.perf_counter() - t, time.process_time() - c)
"""


def _env(work: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("XDG_CACHE_HOME", str(work / "xdg"))  # leave the user's ~/.cache/hdp alone
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shared", action="store_true", help="one Constant for every Add (the issue's chain)")
    ap.add_argument("--method", default="heft")
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--no-floor", action="store_true", help="skip timing OpenVINO's own compile_model")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--cold-kernels", action="store_true", help="no Numba kernel cache: every run compiles them")
    ap.add_argument("--floor-sizes", default="", help="only time OpenVINO's compile of the chain at these lengths")
    ap.add_argument("--no-check", action="store_true", help="hdp compile --no-check (the passes alone)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    import hostile

    if a.floor_sizes:
        _floors(a, hostile)
        return

    rows: dict[str, list[float]] = {}
    walls: list[float] = []
    cpus: list[float] = []
    floors: list[float] = []
    floor_cpus: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="hdp-chain-") as w:
        work = Path(w)
        xml = hostile.save(hostile.chain_model(a.ops, shared=a.shared), work / "chain.xml")
        env = _env(work)
        warm = None
        if not a.cold_kernels:
            env["NUMBA_CACHE_DIR"] = str(work / "numba")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hdp.pipeline.warmup"], check=True, env=env, capture_output=True,
                           timeout=a.timeout)
            warm = time.perf_counter() - t0
        for i in range(a.reps):
            if a.cold_kernels:  # a new, empty kernel cache per run
                env = dict(env, NUMBA_CACHE_DIR=str(work / f"numba-{i}"))
            if not a.no_floor:
                p = subprocess.run([sys.executable, "-c", _FLOOR, str(xml)], capture_output=True, text=True,
                                   env=env, timeout=a.timeout)
                if p.returncode == 0:
                    wall, cpu = map(float, p.stdout.strip().splitlines()[-1].split())
                    floors.append(wall)
                    floor_cpus.append(cpu)
            tim = work / f"t{i}.json"
            loads.append(os.getloadavg()[0])
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(work / f"p{i}.xml"),
                                    "--target", a.target, "--method", a.method, "--no-compare", "-q",
                                    "--cache-dir", str(work / f"cache{i}"), "--timings", str(tim)]
                                   + (["--no-check"] if a.no_check else []),
                                   capture_output=True, text=True, env=env, timeout=a.timeout)
            except subprocess.TimeoutExpired:  # (hdp is killed; its workers follow it, as tested elsewhere)
                raise SystemExit(f"hdp compile: no result after {a.timeout:.0f} s (run {i + 1}, load average "
                                 f"{loads[-1]:.1f} at its start, {os.getloadavg()[0]:.1f} now)") from None
            walls.append(time.perf_counter() - t0)
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # hdp and its (reaped) workers
            cpus.append(ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime)
            if p.returncode:
                raise SystemExit(f"hdp compile failed after {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU (load average "
                                 f"{loads[-1]:.1f} at its start, {os.getloadavg()[0]:.1f} now):\n{p.stdout}\n{p.stderr}")
            for r in json.loads(tim.read_text()):
                if not r.get("stage"):
                    rows.setdefault(r["pass"], []).append(float(r["seconds"]))
            print(f"run {i + 1}: {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU, load {loads[-1]:.1f}", file=sys.stderr)
    loads.append(os.getloadavg()[0])
    kind = "one shared Constant" if a.shared else "a Constant per Add"
    print(f"hdp compile of a {a.ops}-op Relu/Add chain ({kind}) --target {a.target} --method {a.method} "
          f"--no-compare{' --no-check' if a.no_check else ''}, {a.reps} runs from empty caches, load average {min(loads):.1f}-{max(loads):.1f} on "
          f"{os.cpu_count()} cores, " + ("Numba kernels compiled in every run" if a.cold_kernels else
                                         f"Numba kernels compiled before the runs ({warm:.1f} s)")
          + "; seconds, median [min-max]:\n")

    def cell(xs):
        return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]" if xs else "-"

    print("| step | seconds |\n|---|---|")
    for name, xs in rows.items():
        print(f"| {name} | {cell(xs)} |")
    print(f"| **wall (the whole command)** | **{cell(walls)}** |")
    print(f"| CPU of the whole command (user + system, hdp and its workers) | {cell(cpus)} |")
    if floors:
        print(f"| OpenVINO alone: `core.compile_model` on CPU (f32), fresh process | {cell(floors)} |")
        print(f"| OpenVINO alone, CPU of the compile (user + system) | {cell(floor_cpus)} |")
        # each run's hdp compile against the floor measured just before it (the same load, roughly)
        wall_ratio = [w / f for w, f in zip(walls, floors)]
        cpu_ratio = [c / f for c, f in zip(cpus, floor_cpus)]
        print(f"\n**hdp compile / OpenVINO's own compile: wall {cell(wall_ratio)}x, CPU {cell(cpu_ratio)}x** "
              f"(median [min-max] over the runs; issue 33 asks for at most 2x wall on a quiet host)")


def _floors(a, hostile) -> None:
    """OpenVINO's own ``compile_model`` of the chain at each of ``a.floor_sizes`` ops."""
    kind = "one shared Constant" if a.shared else "a Constant per Add"
    print(f"OpenVINO `core.compile_model` of a Relu/Add chain ({kind}) on CPU (f32), fresh process each, "
          f"load average {os.getloadavg()[0]:.1f} at the start on {os.cpu_count()} cores:\n")
    print("| ops | seconds |\n|---:|---:|", flush=True)
    with tempfile.TemporaryDirectory(prefix="hdp-chain-") as w:
        for n in (int(x) for x in a.floor_sizes.split(",")):
            xml = hostile.save(hostile.chain_model(n, shared=a.shared), Path(w) / f"chain{n}.xml")
            try:
                p = subprocess.run([sys.executable, "-c", _FLOOR, str(xml)], capture_output=True, text=True,
                                   env=_env(Path(w)), timeout=a.timeout)
                cell = f"{float(p.stdout.strip().splitlines()[-1].split()[0]):.1f}" if p.returncode == 0 else "failed"
            except subprocess.TimeoutExpired:
                cell = f"> {a.timeout:.0f} (stopped)"
            print(f"| {n:,} | {cell} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

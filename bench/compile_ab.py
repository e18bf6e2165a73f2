"""``hdp compile`` of two checkouts, A/B: the same written bytes, and no slowdown beyond noise.

A and B are directories holding an hdp checkout, or commits of this repository (extracted with
``git archive`` into a temporary directory). Each runs with its own code (``PYTHONPATH`` and
working directory set to its tree; the measuring worker imports the same tree) on the same model
(a zoo name such as ``inception_v3`` or ``llama:stateful``, or an ``.xml``), with the same target,
method and extra arguments (after ``--``).

**Written bytes.** Measured passes (``support``, ``profile``) give other numbers every run, and the
placed file records the costs (``sim_*``, ``module_digest``), so two runs of one checkout rarely
write the same bytes. The comparison therefore fixes the measurements: A runs once from an empty
cache; the cache entries of its measured passes (by the keys its ``--timings`` names) are copied
into a fresh cache for B and another for A again; both then lower, partition, assign, check and
write themselves and only take the measurements from the cache. The table says which passes each
run took from the cache: a measured pass B recomputed (its cache key changed between the commits)
brings its own measurements, and then different bytes say nothing about the code. A's second run
is the control (the same code twice must write the same bytes).

**Time.** Then ``--reps`` rounds from empty caches, A and B alternating (the order flipped every
other round), one warm-up round first, not counted (Numba keeps compiled kernels per source file,
so per checkout). Prints each pass's median seconds [min-max] per checkout and B's whole-command
wall and CPU time (user + system, hdp and its workers) against A's with a 95 % interval
(:func:`hdp.runtime.measure.stats.compare`, paired by round): "no difference beyond noise" or
faster/slower by how much.

    flock /work/measure.lock python bench/compile_ab.py --a 901bfb6 --b 43c4152 --model inception_v3 \\
        --method optimal --reps 10
    flock /work/measure.lock python bench/compile_ab.py --a 901bfb6 --b 43c4152 --model llama:stateful \\
        --method heft --reps 10
    python bench/compile_ab.py --a HEAD --b . --model tiny.xml --method heft --reps 2    # smoke run

Keep ``XDG_CACHE_HOME`` and ``NUMBA_CACHE_DIR`` pointed at a scratch directory (with the zoo model
copied in) when other sessions share the machine: the runs then leave the user's cache alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
#: Passes whose output is a measurement of this host (different numbers every run).
MEASURED = ("support", "profile")


@dataclass
class Run:
    wall: float
    cpu: float
    seconds: dict[str, float] = field(default_factory=dict)  # pass -> seconds
    keys: dict[str, str] = field(default_factory=dict)  # pass -> cache key
    hits: dict[str, bool] = field(default_factory=dict)  # pass -> taken from the cache
    digest: str = ""  # of the written .xml and .bin
    masked: str = ""  # the same without the module digest the .xml records
    module: object = None  # the final Module as plain data (the bytes runs)
    tag: str = ""  # the run's name: its output is p-<tag>.xml


def tree_of(spec: str, work: Path, name: str) -> Path:
    """``spec`` as a checkout: a directory, or a commit of this repository extracted into ``work``."""
    p = Path(spec)
    if p.is_dir() and (p / "hdp").is_dir():
        return p.resolve()
    out = work / f"tree-{name}"
    out.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec], capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"{spec}: neither an hdp checkout nor a commit of {ROOT} ({e.stderr.decode().strip()})")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def digest(xml: Path, mask: bool = False) -> str:
    """Of the written .xml and .bin; ``mask``: the .xml's ``module_digest`` value left out."""
    h = hashlib.blake2b(digest_size=8)
    for p in (xml, xml.with_suffix(".bin")):
        data = p.read_bytes() if p.exists() else b""
        h.update(re.sub(rb'(<module_digest value=")[0-9a-f]+', rb"\1", data) if mask and p == xml else data)
    return h.hexdigest()


def module_of(path: Path):
    """The emitted final Module as plain data (``.hdp``: a magic prefix, then msgpack), readable
    whatever the checkout's Module type."""
    data = path.read_bytes()
    return msgspec.msgpack.decode(data[data.index(b"\x00") + 1:]) if path.exists() else None


def differences(x, y, path: str = "") -> list[str]:
    """The paths (``.partition.info.memory``) at which two plain values differ."""
    if type(x) is not type(y):
        return [path or "."]
    if isinstance(x, dict):
        return [d for k in sorted(set(x) | set(y), key=str) for d in differences(x.get(k), y.get(k), f"{path}.{k}")]
    if isinstance(x, list) and len(x) == len(y) and len(x) <= 64:
        return [d for i, (p, q) in enumerate(zip(x, y)) for d in differences(p, q, f"{path}[{i}]")]
    return [] if x == y else [path or "."]


def one(tree: Path, xml: str, work: Path, tag: str, cache: Path, args: list[str], keep: bool = False) -> Run:
    tim, out = work / f"t-{tag}.json", work / f"p-{tag}.xml"
    cmd = [sys.executable, "-m", "hdp", "compile", xml, "-o", str(out), "--no-compare", "-q",
           "--cache-dir", str(cache), "--timings", str(tim), *args]
    if keep:
        cmd += ["--emit-ir", str(work / f"m-{tag}.hdp")]
    env = dict(os.environ, PYTHONPATH=str(tree))
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env, check=False)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"hdp compile ({tree}) failed:\n{p.stdout}\n{p.stderr}")
    run = Run(wall=wall, cpu=ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime, digest=digest(out), tag=tag,
              masked=digest(out, mask=True), module=module_of(work / f"m-{tag}.hdp") if keep else None)
    data = json.loads(tim.read_text())
    for r in data["rows"] if isinstance(data, dict) else data:
        if r.get("stage"):
            continue
        name = r["pass"]
        run.seconds[name] = run.seconds.get(name, 0.0) + float(r["seconds"])
        run.keys[name], run.hits[name] = r.get("key", ""), bool(r.get("cache_hit"))
    if not keep:
        for p in (out, out.with_suffix(".bin")):
            p.unlink(missing_ok=True)
    return run


def differing_lines(a: Path, b: Path, most: int = 6) -> list[str]:
    """The first ``most`` lines in which two written .xml differ (shortened), and whether the .bin do."""
    la, lb = a.read_text().splitlines(), b.read_text().splitlines()
    out = [f"line {i + 1}: {x.strip()[:90]} | {y.strip()[:90]}" for i, (x, y) in enumerate(zip(la, lb)) if x != y]
    if len(la) != len(lb):
        out.append(f"{len(la)} lines against {len(lb)}")
    ba, bb = a.with_suffix(".bin"), b.with_suffix(".bin")
    if ba.exists() and bb.exists() and ba.read_bytes() != bb.read_bytes():
        out.append(".bin differs")
    return out[:most] + ([f"... {len(out) - most} more"] if len(out) > most else [])


def seeded(source: Path, keys: list[str], dest: Path) -> Path:
    """A new cache ``dest`` holding only the entries of ``keys`` of the cache ``source``."""
    for k in keys:
        f = source / k[:2] / f"{k}.hdp"
        if f.is_file():
            (dest / k[:2]).mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / k[:2] / f.name)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def written_bytes(trees: dict[str, Path], xml: str, work: Path, args: list[str]) -> None:
    first = one(trees["A"], xml, work, "bytes-A", work / "cache-bytes-A", args, keep=True)
    keys = [first.keys[m] for m in MEASURED if first.keys.get(m)]
    runs = {"A (from empty caches)": first}
    for name, label in (("B", "B (A's measurements)"), ("A", "A again (A's measurements)")):
        cache = seeded(work / "cache-bytes-A", keys, work / f"cache-bytes-{name}2")
        runs[label] = one(trees[name], xml, work, f"bytes-{name}2", cache, args, keep=True)
    passes = list(dict.fromkeys(p for r in runs.values() for p in r.seconds))
    print("Written bytes, the measured passes fixed (A's, from its cache; `hit`: taken from the cache):\n")
    print("| run | " + " | ".join(passes) + " | written .xml + .bin |\n|---|" + "---|" * (len(passes) + 1))
    for label, r in runs.items():
        cells = ["hit" if r.hits.get(p) else "ran" if p in r.seconds else "-" for p in passes]
        print(f"| {label} | " + " | ".join(cells) + f" | `{r.digest}` |")
    b, control = runs["B (A's measurements)"], runs["A again (A's measurements)"]
    missed = [m for m in MEASURED if m in b.seconds and not b.hits.get(m)]
    # the Module may differ between A's own runs (its partition records the host's available memory):
    # B is held to what A's control differs in, no more
    own = set(differences(first.module, control.module))
    extra = [d for d in differences(control.module, b.module) if d not in own]
    if control.masked != first.masked:
        verdict = "A's own two runs wrote different files: what follows the measurements is not deterministic here"
    elif b.digest == control.digest and b.digest == first.digest:
        verdict = "the same bytes"
    elif b.masked == control.masked and not extra:
        verdict = ("the same bytes but the module digest, which also differs between A's own runs (their Modules "
                   f"differ at {', '.join(sorted(own)) or 'nothing'})")
    elif missed:
        verdict = (f"different bytes, but B measured {', '.join(missed)} itself (its cache key changed): "
                   f"the difference may be the measurement's")
    else:
        verdict = "DIFFERENT BYTES from the same measurements"
    print(f"\nB against A: **{verdict}**\n")
    if extra:
        print(f"B's Module differs from A's beyond A's own runs at: {', '.join(extra[:12])}\n")
    for x, y, what in ((first, control, "A, A again"), (control, b, "A again, B")):
        if x.digest != y.digest:
            lines = differing_lines(work / f"p-{x.tag}.xml", work / f"p-{y.tag}.xml")
            print(f"{what}: the files differ in " + "; ".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="checkout or commit A (the reference)")
    ap.add_argument("--b", required=True, help="checkout or commit B")
    ap.add_argument("--model", default="inception_v3", help="a zoo model name (MODEL[:OPTIONS]) or an .xml")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--method", default="optimal")
    ap.add_argument("--warmup", type=int, default=1,
                    help="rounds run first and not counted (Numba's cache is per checkout)")
    ap.add_argument("--no-bytes", action="store_true", help="skip the written-bytes comparison")
    ap.add_argument("extra", nargs="*", help="more hdp compile arguments (after --)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hdp.runtime.measure.stats import compare
    from hdp.zoo import models as zoo

    xml = str(Path(a.model).resolve()) if a.model.endswith(".xml") else str(zoo.cached(a.model))
    args = ["--target", a.target, "--method", a.method, *a.extra]
    with tempfile.TemporaryDirectory(prefix="hdp-compile-ab-") as w:
        work = Path(w)
        trees = {"A": tree_of(a.a, work, "A"), "B": tree_of(a.b, work, "B")}
        print(f"hdp compile {a.model} {' '.join(args)} --no-compare; A = {a.a} ({trees['A']}), "
              f"B = {a.b} ({trees['B']}); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
              f"at the start\n")
        if not a.no_bytes:
            written_bytes(trees, xml, work, args)
        runs: dict[str, list[Run]] = {"A": [], "B": []}
        loads = []
        for i in range(-a.warmup, a.reps):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                r = one(trees[name], xml, work, f"{name}{i}", work / f"cache-{name}{i}", args)
                if i >= 0:
                    runs[name].append(r)
            loads.append(os.getloadavg()[0])
    if not runs["A"]:
        return
    print(f"Time: {a.reps} rounds from empty caches, A/B alternating, after {a.warmup} warm-up round(s); "
          f"load average {min(loads):.1f}-{max(loads):.1f}; seconds, median [min-max]:\n")

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]" if xs else "-"

    passes = list(dict.fromkeys(p for rs in runs.values() for r in rs for p in r.seconds))
    print("| step | A | B |\n|---|---|---|")
    for p in passes:
        print(f"| {p} | " + " | ".join(cell([r.seconds[p] for r in runs[n] if p in r.seconds]) for n in "AB") + " |")
    print(f"| whole command (wall) | {cell([r.wall for r in runs['A']])} | {cell([r.wall for r in runs['B']])} |")
    print(f"| whole command (CPU) | {cell([r.cpu for r in runs['A']])} | {cell([r.cpu for r in runs['B']])} |\n")
    print("wall: " + compare([r.wall for r in runs["A"]], [r.wall for r in runs["B"]], names=("A", "B")).text())
    print("CPU:  " + compare([r.cpu for r in runs["A"]], [r.cpu for r in runs["B"]], names=("A", "B")).text())
    kinds = {n: len({r.digest for r in runs[n]}) for n in "AB"}
    print(f"(distinct files written by the timed runs, each with its own measurements: A {kinds['A']}, B {kinds['B']})")


if __name__ == "__main__":
    main()

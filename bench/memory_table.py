"""Placement under device memory, per method and objective (issue 18), on a modeled target.

For each model: the GPU of the target is capped at ``--share`` (default 0.6) of the model's stored
weight bytes; every method places it with ``hdp compile`` (the written model checked on CPU
stand-ins), and the table gives, per method and objective, the simulated latency and throughput
(requests/s with ``--requests`` in flight), and the stored weight bytes each device gets in the
written ``.xml``/``.bin`` (read back) against its cap. ``optimal (no cap)`` is the unconstrained
optimum, for reference. All figures are simulated (modeled target), labelled so.

    python bench/memory_table.py [--models llama-tiny-8l:stateful,...] [--target i9-flex170]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

METHODS = ["single:CPU", "pipeline-parallel:GPU,CPU", "hetero-auto", "heft", "optimal", "auto"]
ZOO_DIR = None  # --zoo-dir


def zoo_xml(spec: str) -> Path | None:
    """The cached export of a zoo model (or of a test's variant, such as ``llama-tiny-8l``), or None."""
    from hdp.zoo.models import _default_root

    stem = spec.replace(":", "_").replace(",", "_")
    root = Path(ZOO_DIR) if ZOO_DIR else _default_root()
    found = sorted(p for p in root.glob(f"{stem}-*/model.xml") if p.with_suffix(".bin").is_file())
    return found[0] if found else None


def compile_one(xml: Path, out: Path, target: str, method: str, objective: str, requests: int,
                memory: list[str], cache_dir: str | None = None, check: bool = True) -> tuple[dict | None, str]:
    ir = out.with_suffix(".hdp")
    cmd = [sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(out), "--target", target, "--method", method,
           "--objective", objective, "--emit-ir", str(ir), "-q"] + [a for m in memory for a in ("--memory", m)]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    if not check:
        cmd += ["--no-check"]
    if objective == "throughput":
        cmd += ["--requests", str(requests)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode:
        return None, (r.stderr.strip() or r.stdout.strip()).splitlines()[-1]
    from hdp.ir.serde import load
    from hdp.runtime.placed.model import read_placed, weight_bytes_by_device

    info = dict(load(ir).placement.info)
    info["held"] = weight_bytes_by_device(read_placed(out))
    return info, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama-tiny-8l:stateful,llama-tiny-8l:stateful,int4,"
                                        "qwen2-tiny-8l:stateful,qwen2-tiny-8l:stateful,int4")
    ap.add_argument("--target", default="i9-flex170")
    ap.add_argument("--gpu", default="GPU")
    ap.add_argument("--share", type=float, default=0.6)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--methods", default=";".join(METHODS), help="';'-separated when a method has a ','")
    ap.add_argument("--objectives", default="latency,throughput")
    ap.add_argument("--cache-dir", default=None, help="hdp's cache for the compiles (default: hdp's own)")
    ap.add_argument("--zoo-dir", default=None, help="the zoo cache to find models in (default: hdp's own)")
    ap.add_argument("--no-check", action="store_true",
                    help="write each placement without checking it on CPU stand-ins (hdp compile --no-check): "
                         "the table is simulated either way; a check of a full-size LLM takes minutes")
    a = ap.parse_args()
    global ZOO_DIR
    ZOO_DIR = a.zoo_dir
    methods = a.methods.split(";") if ";" in a.methods else a.methods.split(",")
    objectives = a.objectives.split(",")
    from hdp.ir.openvino_frontend import lower
    from hdp.placement.memory import size_text
    from hdp.placement.problem import build_problem

    specs, cur = [], ""
    for part in a.models.split(","):  # "name:shape,int4" keeps its weight format with it
        if part in ("int4", "int8", "fp16", "f32", "int4-sym", "int8-sym"):
            specs[-1] += "," + part
        else:
            specs.append(part)
    print(f"target {a.target} (modeled: simulated figures); {a.gpu} capped at {a.share:.0%} of each model's "
          f"stored weights; throughput with {a.requests} requests in flight"
          + ("; written without the stand-in check (--no-check)" if a.no_check else ""))
    for spec in specs:
        xml = zoo_xml(spec)
        if xml is None:
            print(f"{spec}: not in the zoo cache, skipped")
            continue
        w = build_problem(lower(xml), ("CPU",)).needs.total_weights
        cap = int(a.share * w)
        print(f"\n{spec}: stored weights {size_text(w)}; {a.gpu} cap {size_text(cap)}")
        print(f"  {'method':<28} {'objective':<10} {'latency':>10} {'req/s':>9} {a.gpu + ' weights':>14} "
              f"{'CPU weights':>12}  note")
        with tempfile.TemporaryDirectory() as td:
            rows = [(m, ob, [f"{a.gpu}={cap}"]) for ob in objectives for m in methods]
            rows += [("optimal", ob, []) for ob in objectives]
            for k, (method, ob, mem) in enumerate(rows):
                out = Path(td) / f"p{k}.xml"
                info, err = compile_one(xml, out, a.target, method, ob, a.requests, mem, a.cache_dir, not a.no_check)
                label = method + ("" if mem else " (no cap)")
                if info is None:
                    print(f"  {label:<28} {ob:<10} {'refused':>10} {'':>9} {'':>14} {'':>12}  {err[:110]}")
                    continue
                lat = float(info["simulated"])
                period = float(info.get("period", lat / 1))
                rps = 1.0 / period if ob == "throughput" else float("nan")
                held = info["held"]
                ok = "" if not mem or held.get(a.gpu, 0) <= cap else "OVER CAP"
                print(f"  {label:<28} {ob:<10} {lat * 1e3:>8.3f}ms {rps:>9.1f} {size_text(held.get(a.gpu, 0)):>14} "
                      f"{size_text(held.get('CPU', 0)):>12}  {ok}")


if __name__ == "__main__":
    main()

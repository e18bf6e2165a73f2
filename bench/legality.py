"""Legality campaign: does every placed model hdp writes run, and match the original?

For each model and method, ``hdp compile`` places the model, checks the placement under HETERO
against the original (repairing or falling back when it fails) and writes it; this script then
checks the written file again, independently, the way ``hdp evaluate`` does (a fresh worker that
compiles the file with HETERO and compares it with the file's own plain CPU compile). On modeled
targets the check runs the same cut structure on CPU stand-ins.

    python bench/legality.py --out bench/results/legality-$(date +%F).md             # everything
    python bench/legality.py --models gpt2-tiny --seeds 3 --targets virtual         # a quick look

Per (model, target, method) it counts placements that passed the check at once, were repaired
(ties learned from a failure), fell back to one device, or failed to compile; then how many
written files passed the independent check. The rules learned and the OpenVINO messages that
taught them are listed under the table.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ZOO = ["inception_v3", "resnet50", "bert_base", "mobilenet_v2"]
EXPORTS = ["gpt2-tiny", "llama-tiny", "bert-tiny", "gpt2-tiny:dynamic", "llama-tiny:stateful"]


def run_compile(xml: Path, out: Path, target: str, method: str, seed: int, cache: Path, seq_len: int | None):
    from click.testing import CliRunner

    from hdp.cli import main

    args = ["compile", str(xml), "-o", str(out), "--target", target, "--method", method, "--seed", str(seed),
            "--cache-dir", str(cache), "--no-compare"]
    if method == "hsdag":
        args += ["--budget", "10"]
    if seq_len:
        args += ["--seq-len", str(seq_len)]
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.output, time.perf_counter() - t0


def outcome(code: int, text: str) -> str:
    if code != 0:
        return "error"
    if "fell back to every op" in text:
        return "fallback"
    if "learned:" in text:
        return "repaired"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=ZOO + EXPORTS)
    ap.add_argument("--targets", nargs="*", default=["virtual", "i9-flex170", "ultra-npu"])
    ap.add_argument("--seeds", type=int, default=20, help="random placements per model and target")
    ap.add_argument("--methods", nargs="*", default=["heft", "optimal", "default"])
    ap.add_argument("--out", default=None, help="markdown report (default: print only)")
    args = ap.parse_args()

    from hdp import zoo
    from hdp.runtime.target import load_target
    from hdp.runtime.verify import check_placed_file

    work = Path(tempfile.mkdtemp(prefix="hdp-legality-"))
    cache = work / "cache"
    counts: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    rules: list[str] = []
    errors: list[str] = []
    t_start = time.time()
    for name in args.models:
        xml = zoo.cached(name)
        seq = 16 if (":dynamic" in name or ":stateful" in name) else None  # static exports have fixed shapes
        for target in args.targets:
            tgt = load_target(target)
            plan = [("random", s) for s in range(args.seeds)] + [(m, 0) for m in args.methods]
            for method, seed in plan:
                meth = {"default": "auto"}.get(method, method)
                out = work / f"{re.sub(r'[:,]', '_', name)}-{target}-{method}-{seed}.xml"
                code, text, secs = run_compile(xml, out, target, meth, seed, cache, seq)
                if code != 0 and "unknown method 'auto'" in text:  # before the default pipeline
                    meth = "hsdag"
                    code, text, secs = run_compile(xml, out, target, meth, seed, cache, seq)
                o = outcome(code, text)
                key = (name, target, method)
                counts[key][o] += 1
                counts[key]["seconds"] += secs
                if o == "error":
                    errors.append(f"{name} {target} {method}@{seed}: {text.strip().splitlines()[-1]}")
                    continue
                rules += [f"{name} {target} {method}@{seed}: {ln}" for ln in text.splitlines() if ln.startswith("learned:")]
                res = check_placed_file(out, tgt)
                counts[key]["file ok" if res.passed else "file FAILED"] += 1
                if not res.passed:
                    errors.append(f"{name} {target} {method}@{seed}: written file failed: {res.error}")
                print(f"{name:<22} {target:<11} {method:>8}@{seed:<2} {o:<9} file "
                      f"{'ok' if res.passed else 'FAILED'} {secs:6.1f}s", flush=True)
    lines = [f"# Legality campaign ({datetime.date.today()}, {platform.node()}, "
             f"{time.time() - t_start:.0f} s; shared 2-core VM)", "",
             "`python bench/legality.py " + " ".join(sys.argv[1:]) + "`", "",
             "| model | target | method | placements | checked ok | repaired | fell back | compile error | "
             "written file ok | seconds/compile |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (name, target, method), c in counts.items():
        n = c["ok"] + c["repaired"] + c["fallback"] + c["error"]
        lines.append(f"| {name} | {target} | {method} | {n} | {c['ok']} | {c['repaired']} | {c['fallback']} | "
                     f"{c['error']} | {c['file ok']}/{n - c['error']} | {c['seconds'] / max(n, 1):.1f} |")
    lines += ["", f"## Rules learned from failures ({len(rules)})", ""] + [f"- {r}" for r in rules]
    lines += ["", f"## Errors ({len(errors)})", ""] + [f"- {e}" for e in errors]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from hdp.fsutil import atomic_write

        atomic_write(args.out, text.encode())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

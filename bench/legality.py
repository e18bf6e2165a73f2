"""Legality campaign: does every placed model hdp writes run, and match the original?

For each model and method, ``hdp compile`` places the model, checks the placement under HETERO
against the original (repairing or falling back when it fails) and writes it; this script then
checks the written file again, independently, the way ``hdp evaluate`` does (a fresh worker that
compiles the file with HETERO and compares it with the file's own plain CPU compile). On modeled
targets the check runs the same cut structure on CPU stand-ins.

    python bench/legality.py --out bench/results/legality-$(date +%F).md             # everything
    python bench/legality.py --models gpt2-tiny --seeds 3 --targets virtual         # a quick look
    python bench/legality.py --suite llm --seeds 10 --out bench/results/legality-llm-$(date +%F).md

``--optimum-python PY`` adds models exported by optimum-intel itself (``bench/optimum_export.py``
run with ``PY``, a separate venv with ``optimum-intel[openvino]``; random weights from a config,
nothing downloaded), named ``optimum:ARCH-NL[,int4]`` (e.g. ``optimum:llama-2l``); with ``--models``
naming some, only those.

``--no-state-rule`` runs the same campaign as before the state rule of
:mod:`hdp.placement.subgraphs` (placements not untangled; repair and fallback as usual).

``--suite llm`` is issue 16's matrix: optimum-intel-layout stateful exports of Llama, Qwen2 and
Phi-3 at 2 and 8 layers, f32 and int4, with ``random`` (``--seeds`` seeds), ``heft`` and
``optimal``; every written model also generates teacher-forced (prefill of 6 tokens, batch 2,
then 4 steps fed the original's tokens, :func:`hdp.runtime.serve.verify.check_generation`) and its
logits must stay within the tolerance ``hdp compile`` holds placements to (relative L2 per step,
:func:`hdp.runtime.serve.verify.tolerance` or twice the error of the least precise used device running
the original alone) of the original's on the plain CPU plugin in f32 (modeled devices run on f32
CPU stand-ins).

Per (model, target, method) it counts placements that use more than one device, that passed the
check at once, were repaired (ties learned from a failure), fell back to one device, or failed to
compile; then how many written files passed the independent check (and generated), and the
seconds ``hdp compile`` spent checking and repairing (its ``check`` step; writing the file and
checking it once more is its ``raise`` step). The rules learned and the OpenVINO messages that
taught them are listed under the table, with the distribution of the check seconds.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ZOO = ["inception_v3", "resnet50", "bert_base", "mobilenet_v2"]
EXPORTS = ["gpt2-tiny", "llama-tiny", "bert-tiny", "gpt2-tiny:dynamic", "llama-tiny:stateful"]
LLMS = [f"{m}:stateful{w}" for m in ("llama-tiny", "qwen2-tiny", "phi3-tiny", "llama-tiny-8l", "qwen2-tiny-8l",
                                     "phi3-tiny-8l") for w in ("", ",int4")]
OPTIMUM = ["optimum:llama-2l", "optimum:llama-2l,int4", "optimum:qwen2-2l", "optimum:phi3-2l", "optimum:llama-8l"]


def optimum_export(name: str, python: str, work: Path) -> Path:
    """Export ``optimum:ARCH-NL[,int4]`` with optimum-intel (``bench/optimum_export.py`` run by ``python``)."""
    import subprocess

    m = re.fullmatch(r"optimum:(\w+)-(\d+)l(,int4)?", name)
    if not m:
        raise SystemExit(f"{name}: optimum models are named optimum:ARCH-NL[,int4], e.g. optimum:llama-2l")
    out = work / "optimum" / re.sub(r"[:,]", "_", name)
    script = Path(__file__).with_name("optimum_export.py")
    r = subprocess.run([python, str(script), m.group(1), m.group(2), "int4" if m.group(3) else "f32", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: optimum-intel export failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return out / "openvino_model.xml"


def run_compile(xml: Path, out: Path, target: str, method: str, seed: int, cache: Path, seq_len: int | None):
    from click.testing import CliRunner

    from hdp.cli.main import main

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


def step_seconds(text: str, step: str) -> float | None:
    """Seconds of one ``[hdp] STEP`` progress line of ``hdp compile``'s output."""
    m = re.search(rf"^\[hdp\] {step}\s+([0-9.]+)s", text, re.M)
    return float(m.group(1)) if m else None


def devices_used(text: str) -> int:
    """How many devices the written placement uses, from ``placed N ops with M on T (D: k ops, ...)``."""
    m = re.search(r"^placed \d+ ops with .* on \S+ \((.*)\) -> ", text, re.M)
    return sum(int(k) > 0 for k in re.findall(r": (\d+) ops", m.group(1))) if m else 0


def distribution(xs: list[float]) -> str:
    if not xs:
        return "none"
    a = np.sort(np.asarray(xs))
    q = lambda p: float(np.quantile(a, p))  # noqa: E731
    return (f"n={a.size}: min {a[0]:.2f}, median {q(0.5):.2f}, 90 % {q(0.9):.2f}, max {a[-1]:.2f} s; "
            f"{int((a > 30).sum())} above 30 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", choices=["default", "llm"], default="default",
                    help="llm: issue 16's stateful LLM matrix (models and methods; --generate on)")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--targets", nargs="*", default=["virtual", "i9-flex170", "ultra-npu"])
    ap.add_argument("--seeds", type=int, default=20, help="random placements per model and target")
    ap.add_argument("--methods", nargs="*", default=None, help="besides random (default: heft optimal default; "
                                                               "llm suite: heft optimal)")
    ap.add_argument("--generate", action="store_true", help="stateful LLMs: check teacher-forced generation")
    ap.add_argument("--optimum-python", default=None, help="Python of a venv with optimum-intel[openvino]: "
                                                               "add models exported by optimum-intel")
    ap.add_argument("--no-state-rule", action="store_true",
                    help="the campaign before HETERO's state rule: placements are not untangled "
                         "(hdp.placement.subgraphs.untangle is the identity in this process)")
    ap.add_argument("--out", default=None, help="markdown report (default: print only)")
    args = ap.parse_args()
    if args.no_state_rule:
        import hdp.placement.subgraphs as subgraphs

        # every caller imports untangle when it runs, and hdp compile runs in this process
        subgraphs.untangle = lambda problem, group_device, nearest=False: (np.asarray(group_device, np.int16), 0)
    llm = args.suite == "llm"
    models = args.models or (LLMS if llm else ZOO + EXPORTS)
    if args.optimum_python and not any(m.startswith("optimum:") for m in models):
        models = models + OPTIMUM
    methods = args.methods or (["heft", "optimal"] if llm else ["heft", "optimal", "default"])
    generate = args.generate or llm

    from hdp.runtime.serve.verify import check_generation, check_placed_file
    from hdp.target.target import load_target
    from hdp.zoo import models as zoo

    work = Path(tempfile.mkdtemp(prefix="hdp-legality-"))
    cache = work / "cache"
    counts: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    checks: dict[tuple, list[float]] = collections.defaultdict(list)
    all_checks: list[float] = []
    all_raises: list[float] = []
    rules: list[str] = []
    errors: list[str] = []
    worst_gen: dict[tuple, float] = {}
    t_start = time.time()
    for name in models:
        if name.startswith("optimum:"):
            if not args.optimum_python:
                raise SystemExit(f"{name}: needs --optimum-python")
            xml = optimum_export(name, args.optimum_python, work)
        else:
            xml = zoo.cached(name)
        stateful = ":stateful" in name or name.startswith("optimum:")
        seq = 16 if (":dynamic" in name or stateful) else None  # static exports have fixed shapes
        for target in args.targets:
            tgt = load_target(target)
            plan = [("random", s) for s in range(args.seeds)] + [(m, 0) for m in methods]
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
                split = devices_used(text) > 1
                counts[key]["split"] += split
                check_s, raise_s = step_seconds(text, "check"), step_seconds(text, "raise")
                if check_s is not None:
                    checks[key].append(check_s)
                    all_checks.append(check_s)
                if raise_s is not None:
                    all_raises.append(raise_s)
                rules += [f"{name} {target} {method}@{seed}: {ln}" for ln in text.splitlines() if ln.startswith("learned:")]
                res = check_placed_file(out, tgt)
                counts[key]["file ok" if res.passed else "file FAILED"] += 1
                if not res.passed:
                    errors.append(f"{name} {target} {method}@{seed}: written file failed: {res.error}")
                gen = ""
                if generate and stateful:
                    try:
                        g = check_generation(out, xml, tgt)
                        err, tol = max(g.errors), g.tolerance
                    except Exception as e:  # noqa: BLE001 - a campaign row, not a crash
                        err, tol = float("inf"), 0.0
                        errors.append(f"{name} {target} {method}@{seed}: generation failed: "
                                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}")
                    ok = err <= tol
                    counts[key]["generates" if ok else "generation FAILED"] += 1
                    worst_gen[key] = max(worst_gen.get(key, 0.0), err)
                    if not ok and np.isfinite(err):
                        errors.append(f"{name} {target} {method}@{seed}: teacher-forced logits {err:.3g} "
                                      f"off (tolerance {tol:.0e})")
                    gen = f" gen {'ok' if ok else 'FAILED'} {err:.1e}"
                print(f"{name:<26} {target:<11} {method:>8}@{seed:<2} {o:<9} {'split' if split else 'single':<6} file "
                      f"{'ok' if res.passed else 'FAILED'}{gen} check {check_s}s {secs:6.1f}s", flush=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [f"# Legality campaign ({datetime.date.today()}, {platform.node()}, "
             f"{time.time() - t_start:.0f} s; shared 2-core VM, load average at the end "
             f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f})", "",
             "`python bench/legality.py " + " ".join(sys.argv[1:]) + "`", "",
             "| model | target | method | placements | split | checked ok | repaired | fell back | compile error | "
             "written file ok |" + (" generates (worst error) |" if generate else "") +
             " check s (median / max) | seconds/compile |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if generate else "") + "---:|---:|"]
    for (name, target, method), c in counts.items():
        n = c["ok"] + c["repaired"] + c["fallback"] + c["error"]
        ch = checks.get((name, target, method), [])
        chs = f"{np.median(ch):.1f} / {max(ch):.1f}" if ch else "-"
        gen = ""
        if generate:
            g = c["generates"] + c["generation FAILED"]
            gen = f" {c['generates']}/{g} ({worst_gen.get((name, target, method), 0.0):.1e}) |" if g else " - |"
        lines.append(f"| {name} | {target} | {method} | {n} | {c['split']} | {c['ok']} | {c['repaired']} | "
                     f"{c['fallback']} | {c['error']} | {c['file ok']}/{n - c['error']} |{gen} {chs} | "
                     f"{c['seconds'] / max(n, 1):.1f} |")
    lines += ["", "## Check and repair seconds (`hdp compile`'s check step, per placement)", "",
              f"- check + repair: {distribution(all_checks)}",
              f"- writing and re-checking the written file (raise step): {distribution(all_raises)}"]
    lines += ["", f"## Rules learned from failures ({len(rules)})", ""] + [f"- {r}" for r in rules]
    lines += ["", f"## Errors ({len(errors)})", ""] + [f"- {e}" for e in errors]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from hdp.base.fsutil import atomic_write

        atomic_write(args.out, text.encode())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

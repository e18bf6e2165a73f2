"""Do hdp's verdicts agree with each other, and with its next command? (issue 34's done-when)

For each zoo model, on a target (default ``virtual``), under each condition (``quiet``: nothing
started beside it; ``loaded``: ``--burners`` CPU-bound processes running beside every command):

1. ``hdp compile MODEL --method single:CPU_B`` once: the reference file;
2. ``--runs`` fresh processes of ``hdp compile MODEL -v`` (each with a cache of its own, so each
   profiles and places afresh): auto's choice and compile's verdict against the plain CPU_B compile
   (the same graph as the reference) and against the host's default plain compile;
3. ``hdp evaluate OUT REF --json`` of each output against the reference.

Every claim is about one question: is hdp's output slower (+1) or faster (-1) than all ops on
CPU_B, or neither (0: equal within noise, no practical difference, identical files, or no claim
on a loaded host). auto keeping anything but single:CPU_B over a more preferred candidate says
"not slower" (-1); kept as its first preference (or the host loaded), it claims nothing. The verdicts
agree when no claim says faster where another says slower, over all runs of a model and condition.
Under load, every verdict must say so (``no claim``; evaluate's JSON ``loaded``).

    python bench/verdict_agreement.py                                  # gpt2, densenet121 on virtual
    python bench/verdict_agreement.py --models gpt2-tiny,densenet-tiny --runs 2 --budget 10   # smoke

Prints one row per run and a summary per model and condition; ``--json FILE`` keeps every row.
Run it on an otherwise idle host: the ``quiet`` condition checks that nothing else ran (the
commands' own load reports say so when something did).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"

# the words of hdp.base.glossary / hdp.runtime.serve.report, as compile -v prints them
BESIDE = re.compile(r"plain (?P<dev>\S+)(?: \(the same graph\))? (?P<ratio>[0-9.]+)× "
                    r"(?:the time \((?P<word>faster|equal|no claim)\)|(?P<slower>slower))")


def hdp(args: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hdp", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


def burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=10)


def compile_claims(text: str, ref_dev: str) -> dict:
    """auto's choice, compile's verdict against the plain ``ref_dev`` compile and the default one,
    from ``hdp compile -v``'s output."""
    lines = text.splitlines()
    first = lines[0] if lines else ""
    kept = re.search(r"with auto \(kept (\S+)\)", first)
    kept = kept.group(1) if kept else re.search(r"with (\S+) ->", first).group(1) if " with " in first else "?"
    verdict = next((x for x in reversed(lines) if x.startswith("verdict")), "")
    beside = {m.group("dev"): m for m in BESIDE.finditer(verdict)}
    m = beside.get(ref_dev)
    if m:
        word = "slower" if m.group("slower") else m.group("word")
    else:  # the placement is every op on the reference device: compared with nothing but itself
        word = "itself" if f"it is plain {ref_dev}" in verdict else "not compared"
    # auto claims its choice is not slower than the reference only when it kept it over a more
    # preferred candidate (the others beaten); kept as the first preferred, it claims nothing
    why = next((x for x in lines if x.startswith("auto:   kept ")), "")
    claims = kept != f"single:{ref_dev}" and bool(why) and "preference order" not in why
    return {"kept": kept, "auto": -1 if claims else 0, "auto_reason": why,
            "compile_word": word, "compile": {"faster": -1, "slower": 1}.get(word, 0),
            "verdict": verdict, "loaded_said": "no claim" in verdict, "measured": word != "itself"}


def evaluate_claim(text: str, out: str) -> dict:
    got = json.loads(text)
    pair = got["pairs"][0]
    if pair.get("identical"):  # nothing measured, nothing claimed: no load to say
        return {"evaluate": 0, "evaluate_word": "identical", "evaluate_loaded": None}
    if "comparison" not in pair:
        return {"evaluate": 0, "evaluate_word": "not compared", "evaluate_loaded": bool(got.get("loaded"))}
    c = pair["comparison"]
    word = "no claim" if c.get("loaded") else c["verdict"]
    sign = {"faster": -1, "slower": 1}.get(c["verdict"], 0)
    if pair["b"] != out:  # the comparison is b against a: the reference against hdp's output
        sign = -sign
    return {"evaluate": sign, "evaluate_word": word, "evaluate_loaded": bool(got.get("loaded")),
            "evaluate_text": pair["text"]}


def agree(claims: list[int]) -> bool:
    return not ({-1, 1} <= set(claims))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,densenet121")
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--reference", default="CPU_B", help="the device of the reference file (single:DEV)")
    ap.add_argument("--runs", type=int, default=3, help="fresh compiles per model and condition")
    ap.add_argument("--conditions", default="quiet,loaded")
    ap.add_argument("--burners", type=int, default=1, help="CPU-bound processes beside the loaded condition")
    ap.add_argument("--budget", type=float, default=None, help="hdp compile --budget (default: hdp's)")
    ap.add_argument("--max-seconds", type=float, default=30.0, help="hdp evaluate --max-seconds")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per command")
    ap.add_argument("--work", default=None, help="directory for models, outputs and caches (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write every row to this file")
    a = ap.parse_args()

    work = Path(a.work or tempfile.mkdtemp(prefix="hdp-agree-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows, summary, ok = [], [], True
    for model in a.models.split(","):
        xml = work / f"{model.replace(':', '_')}.xml"
        if not xml.exists():
            r = hdp(["zoo", model, "-o", xml], env, a.timeout)
            if r.returncode:
                print(f"{model}: zoo export failed: {r.stderr.strip()}", file=sys.stderr)
                return 2
        for cond in a.conditions.split(","):
            procs = burners(a.burners) if cond == "loaded" else []
            try:
                time.sleep(1.0 if procs else 0.0)
                tag = f"{xml.stem}-{cond}"
                ref = work / f"{tag}-ref.xml"
                r = hdp(["compile", xml, "-o", ref, "--target", a.target, "--method", f"single:{a.reference}",
                         "--no-compare", "-q", "--cache-dir", work / f"cache-{tag}-ref"], env, a.timeout)
                if r.returncode:
                    print(f"{tag}: reference compile failed: {r.stderr.strip()}", file=sys.stderr)
                    return 2
                claims, said = [], []
                for i in range(a.runs):
                    out = work / f"{tag}-{i}.xml"
                    args = ["compile", xml, "-o", out, "--target", a.target, "-v", "--cache-dir",
                            work / f"cache-{tag}-{i}"]
                    if a.budget is not None:
                        args += ["--budget", a.budget]
                    t0 = time.monotonic()
                    c = hdp(args, env, a.timeout)
                    if c.returncode:
                        print(f"{tag} run {i}: compile failed: {c.stderr.strip()[-500:]}", file=sys.stderr)
                        return 2
                    row = {"model": model, "condition": cond, "run": i, "compile_seconds": time.monotonic() - t0,
                           **compile_claims(c.stdout, a.reference)}
                    e = hdp(["evaluate", out, ref, "--json", "--max-seconds", a.max_seconds], env, a.timeout)
                    if e.returncode:
                        print(f"{tag} run {i}: evaluate failed: {e.stderr.strip()[-500:]}", file=sys.stderr)
                        return 2
                    row.update(evaluate_claim(e.stdout, str(out)))
                    rows.append(row)
                    claims += [row["auto"], row["compile"], row["evaluate"]]
                    # every verdict that measured something says whether the host was loaded
                    said += [row["loaded_said"]] + ([row["evaluate_loaded"]] if row["evaluate_loaded"] is not None
                                                    else [])
                    print(f"{model:<14} {cond:<6} run {i}: auto kept {row['kept']:<22} compile vs plain {a.reference}: "
                          f"{row['compile_word']:<12} evaluate vs single:{a.reference}: {row['evaluate_word']:<12} "
                          f"loaded said: compile {row['loaded_said']}, evaluate {row['evaluate_loaded']}", flush=True)
            finally:
                stop(procs)
            agreed = agree(claims)
            loaded_ok = all(said) if cond == "loaded" else None
            ok = ok and agreed and loaded_ok is not False
            summary.append({"model": model, "condition": cond, "agree": agreed, "claims": claims,
                            "every_verdict_said_loaded": loaded_ok, "any_said_loaded": any(said)})
            print(f"{model:<14} {cond:<6} every verdict agrees: {'yes' if agreed else 'NO'} (claims {claims})"
                  + (f"; every verdict says the host was loaded: {'yes' if loaded_ok else 'NO'}" if cond == "loaded"
                     else f"; some verdict says loaded: {'yes (the host was not quiet)' if any(said) else 'no'}"),
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    print(f"all agree{' and every loaded run says so' if 'loaded' in a.conditions else ''}: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

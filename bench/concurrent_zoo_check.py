"""Every zoo model through the concurrent executor (issue 20): placed by ``heft`` on ``virtual-2x1``,
run by ``compile_placed(..., execution="concurrent")`` and compared with the unplaced model on the
plain CPU plugin in f32.

Feed-forward models: one inference on fixed random inputs at the specialisation the placement was
made for; the largest relative L2 error over the outputs. Stateful LLMs (``:stateful``): a 6-token
prompt then 4 generated tokens, teacher-forced on the plain compile's tokens; the largest relative
error of the logits over the 5 steps. Nothing is timed here (``bench/concurrent_table.py`` times);
the table says how many executor subgraphs each placement made and how long the check took.

    python bench/concurrent_zoo_check.py                       # the whole zoo (~15 min on 2 cores)
    python bench/concurrent_zoo_check.py --models bert_base,llama:stateful --seq-len 32

Models are exported into hdp's zoo cache if absent (random weights, nothing downloaded).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT = ("mobilenet_v2-tiny,densenet-tiny,vit-tiny,bert-tiny,gpt2-tiny,llama-tiny:stateful,qwen2-tiny:stateful,"
           "phi3-tiny:stateful,mobilenet_v2,resnet50,inception_v3,densenet121,vit,bert_base,gpt2,"
           "llama:stateful,qwen2:stateful")


def relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def plain_f32(xml):
    import openvino as ov

    return ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})


def check(spec: str, out: Path, seq_len: int) -> dict:
    from hdp.ir.specialise import Specialisation
    from hdp.runtime.measure.worker import _recorded_spec, random_inputs
    from hdp.runtime.placed.model import compile_placed, read_placed
    from hdp.runtime.placed.split import split_model
    from hdp.zoo import models as zoo

    t0 = time.perf_counter()
    xml = zoo.cached(spec)
    stateful = ":stateful" in spec
    args = ["compile", str(xml), "-o", str(out), "--target", "virtual-2x1", "--method", "heft", "--no-compare", "-q"]
    if stateful or ":dynamic" in spec or ",dynamic" in spec:  # static exports have their own length
        args += ["--seq-len", str(seq_len)]
    r = subprocess.run([sys.executable, "-m", "hdp", *args], capture_output=True, text=True)
    if r.returncode:
        return {"model": spec, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    pm = read_placed(out)
    n_sub = len(split_model(pm.model.clone(), list(pm.devices)).subgraphs)
    conc = compile_placed(out, execution="concurrent")
    if stateful:
        ids = np.random.default_rng(0).integers(1, 100, (1, 6))
        want = zoo.generate(plain_f32(xml), ids, steps=4)
        got = zoo.generate(conc, ids, steps=4, follow=want.tokens)
        err = max(relative_error(a, b) for a, b in zip(got.logits, want.logits))
    else:
        text = _recorded_spec(pm.model)
        shapes = [i.shape for i in Specialisation.from_json(text, str(out)).inputs] if text else None
        feed = dict(enumerate(random_inputs(pm.model, seed=0, shapes=shapes)))
        want, got = plain_f32(xml)(feed), conc(feed)
        err = max(relative_error(got[j], want[j]) for j in range(len(want)))
    used = sorted({op.get_rt_info()["affinity"].astype(str) for op in pm.model.get_ordered_ops()})
    return {"model": spec, "ops": len(pm.model.get_ordered_ops()), "devices": "+".join(used), "subgraphs": n_sub,
            "error": err, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--tolerance", type=float, default=1e-3, help="largest relative error that passes")
    a = ap.parse_args()
    print(f"{'model':24} {'ops':>6} {'devices':>10} {'subgraphs':>9} {'max rel. error':>15} {'verdict':>8} {'s':>6}")
    failed = 0
    with tempfile.TemporaryDirectory() as td:
        for k, spec in enumerate(a.models.split(",")):
            try:
                row = check(spec, Path(td) / f"p{k}.xml", a.seq_len)
            except Exception as e:  # noqa: BLE001 - a bench row, not a crash of the whole table
                row = {"model": spec, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1:]}"}
            if isinstance(row["error"], str):
                failed += 1
                print(f"{spec:24} failed: {row['error']}")
                continue
            ok = row["error"] <= a.tolerance
            failed += not ok
            print(f"{spec:24} {row['ops']:6d} {row['devices']:>10} {row['subgraphs']:9d} {row['error']:15.2e} "
                  f"{'ok' if ok else 'WRONG':>8} {row['seconds']:6.1f}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

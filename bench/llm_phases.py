"""Prefill and decode placed separately against both phases on one device (issue 32 item 4).

For each zoo LLM (stateful, as optimum-intel exports it): ``hdp compile --phases`` on TARGET places the
prefill (a ``--seq-len``-token prompt) and decode (one token after it) each on its own; the table gives
each plan's time to first token, time per token (and tokens/s), the KV cache's hand-off and a request
of the prompt and ``--generated`` tokens, beside every device running both phases alone. On a
modeled target every figure is simulated (the cost model is the target's definition), labelled so.
On a real target (``virtual``) the written models are also run: the prefill's placement on the prompt
and the decode's on the steps, their greedy tokens against the original's
(:func:`hdp.zoo.models.generate`).

    python bench/llm_phases.py i9-flex170 [--models llama:stateful,int4 qwen2:stateful,int4] [--seq-len 512]
        [--generated 128] [--no-check] [--cache-dir DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np
import openvino as ov

from hdp.base.cache import default_cache_dir
from hdp.ir.shapes import ShapeRequest
from hdp.passes.cache import PassCache
from hdp.pipeline.phases import compile_phases, phase_path
from hdp.placers.measured import ms
from hdp.runtime.placed.model import compile_placed
from hdp.target.target import load_target, validate_target
from hdp.zoo import models as zoo

MODELS = ("llama:stateful,int4", "qwen2:stateful,int4")


def tokens_check(model_xml: Path, out: Path, seq_len: int, steps: int = 8) -> str:
    """The placed phases run on this host (prefill's model on the prompt, decode's on the steps)
    against the original's greedy tokens, all with an f32 KV cache."""
    f32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    reference = ov.Core().compile_model(str(model_xml), "CPU", f32)
    vocab = reference.outputs[0].get_partial_shape()[-1].get_length()
    ids = np.random.default_rng(0).integers(1, vocab, (1, seq_len))
    want = zoo.generate(reference, ids, steps=steps)
    got = zoo.generate(compile_placed(phase_path(out, "prefill"), config=f32), ids, steps=steps,
                       decode=compile_placed(phase_path(out, "decode"), config=f32))
    same = int((got.tokens == want.tokens).sum())
    return f"generated tokens equal the original's: {same}/{want.tokens.size}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", help="a target name or .toml (i9-flex170, ultra-npu, virtual, ...)")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--seq-len", type=int, default=512, help="prompt tokens")
    ap.add_argument("--generated", type=int, default=128, help="tokens a request generates")
    ap.add_argument("--devices", default=None,
                    help="keep only these devices of the target (e.g. CPU,GPU: llama.cpp's CPU + iGPU comparison)")
    ap.add_argument("--method", default=None, help="placement method of both phases (default: auto)")
    ap.add_argument("--no-check", action="store_true", help="write each phase unchecked (hdp compile --no-check)")
    ap.add_argument("--cache-dir", default=None, help="hdp's cache (passes, zoo); default: hdp's own")
    ap.add_argument("--json", default=None, help="write the plans here")
    a = ap.parse_args()
    tgt = load_target(a.target)
    if a.devices:
        tgt = subset(tgt, a.devices.split(","))
    modeled = not tgt.is_real
    cache = PassCache(Path(a.cache_dir) if a.cache_dir else default_cache_dir())
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load = f", load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
    print(f"{stamp}: prefill/decode placed separately vs each device alone on {tgt.name} "
          f"({'modeled: simulated figures' if modeled else 'real devices: simulated by the profile; tokens run'}"
          f"), a {a.seq_len}-token prompt, {a.generated} generated tokens{load}")
    print(f"  python bench/llm_phases.py {a.target}" + (f" --devices {a.devices}" if a.devices else "") + f" --models {' '.join(a.models)} --seq-len {a.seq_len} "
          f"--generated {a.generated}" + (" --no-check" if a.no_check else ""))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="hdp-phases-") as tmp:
        for spec in a.models:
            xml = Path(tmp) / (spec.replace(":", "_").replace(",", "_") + ".xml")
            zoo.export(spec, xml, cache_root=a.cache_dir)
            out = Path(tmp) / "placed.xml"
            t0 = time.monotonic()
            opts = {}
            if a.method:
                opts["method"] = a.method
            r = compile_phases(xml, out, tgt, shapes=ShapeRequest(seq_len=a.seq_len), cache=cache, check=not a.no_check,
                               compare=False, **opts)
            plan = r.plan
            print(f"\n{spec}: placed in {time.monotonic() - t0:.0f} s; KV cache {plan.kv_bytes / 2**20:.1f} MiB "
                  f"after the prompt")
            print(f"  {'plan':<52} {'first token':>12} {'per token':>11} {'tokens/s':>9} {'hand-off':>10} "
                  f"{'request':>11}")
            pre, dec = plan.phase("prefill"), plan.phase("decode")
            where = f"prefill {_devices(pre.ops)}, decode {_devices(dec.ops)}"
            print(f"  {'phases placed separately: ' + where:<52} {ms(pre.seconds):>12} {ms(dec.seconds):>11} "
                  f"{1 / dec.seconds:>9.1f} {ms(plan.handoff):>10} {ms(plan.request(a.generated)):>11}")
            singles = plan.single_requests(a.generated)
            for d, (first, per, total) in singles.items():
                print(f"  {'both phases on ' + d:<52} {ms(first):>12} {ms(per):>11} {1 / per:>9.1f} "
                      f"{ms(0):>10} {ms(total):>11}")
            best = min(singles.items(), key=lambda kv: kv[1][2]) if singles else None
            if best:
                print(f"  request: separate phases {best[1][2] / plan.request(a.generated):.2f}x faster than the "
                      f"best single device ({best[0]}); first token {best[1][0] / pre.seconds:.2f}x, "
                      f"tokens/s {best[1][1] / dec.seconds:.2f}x")
            checked = []
            for p in ("prefill", "decode"):
                res = r.results[p]
                if res.check is not None:
                    checked.append(f"{p}: {res.check.describe()}")
            for line in checked:
                print(f"  {line}")
            if tgt.is_real:
                print(f"  {tokens_check(xml, out, min(a.seq_len, 32))}")
            rows[spec] = {"plan": json.loads(plan.to_json()), "request": plan.request(a.generated),
                          "singles": singles}
    if a.json:
        Path(a.json).write_text(json.dumps({"date": stamp, "target": tgt.name, "seq_len": a.seq_len,
                                            "generated": a.generated, "models": rows}, indent=1))


def subset(tgt, names: list[str]):
    """``tgt`` with only the devices ``names`` (its shares among them kept), named ``tgt.name[names]``."""
    keep = [tgt.device(n) for n in names]
    shares = [msgspec.structs.replace(s, devices=[d for d in s.devices if d in names]) for s in tgt.shares]
    return validate_target(msgspec.structs.replace(tgt, name=f"{tgt.name}[{','.join(names)}]", devices=keep,
                                                   shares=[s for s in shares if len(s.devices) > 1]), "--devices")


def _devices(ops: dict[str, int]) -> str:
    total = sum(ops.values()) or 1
    used = [(d, n) for d, n in ops.items() if n]
    if len(used) == 1:
        return used[0][0]
    return "+".join(f"{d} {100 * n / total:.0f}%" if n >= total / 100 else f"{d} ({n} ops)" for d, n in used)


if __name__ == "__main__":
    sys.exit(main())

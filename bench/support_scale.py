"""``support`` per op signature against OpenVINO's whole-model ``query_model`` over the zoo (issue 23).

For each model: lower it, then ask every real device of the target (default ``virtual``: CPU and
CPU_B) which ops it supports, twice, each in a fresh worker process (start, OpenVINO import, model
read included): the way the ``support`` pass asks now (``query_support``: one ``query_model`` per
distinct op signature, on small models cut out of the specialisation; nothing memoised) and the
way it asked before (``Measurer.support_of``: ``query_model`` on the whole model, the devices in
parallel threads). The masks are compared op by op, with Parameters, Constants and Results
supported everywhere as the pass has them; any difference fails the script. Relu/Add chains
(one shared Constant, and one per Add) show the scaling; whole-model ``query_model`` is skipped
for chains above ``--whole-max-ops`` (it takes minutes there).

Zoo models are generated (random weights, nothing downloaded) into ``--zoo-cache`` (default
``/tmp/hdp-bench-zoo``, kept between runs; the first run builds them: minutes for the real ones).

    python bench/support_scale.py                                       # tiny zoo + real CNNs/transformers
    python bench/support_scale.py --models resnet50,llama:stateful,int4 --chains 2000,20000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DEFAULT = ("bert-tiny,bert-tiny:dynamic,gpt2-tiny,gpt2-tiny:stateful,llama-tiny:stateful,llama-tiny:stateful,int4,"
           "qwen2-tiny:stateful,vit-tiny,mobilenet_v2-tiny,mobilenet_v2-tiny:int8,densenet-tiny,"
           "resnet50,inception_v3,mobilenet_v2,densenet121,bert,vit,gpt2:stateful,llama:stateful,int4")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT, help="comma-separated zoo names (a name's options after ':' "
                    "run to the next name, e.g. llama:stateful,int4)")
    ap.add_argument("--chains", default="2000,20000", help="Relu/Add chain lengths (0: none)")
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--zoo-cache", default="/tmp/hdp-bench-zoo")
    ap.add_argument("--whole-max-ops", type=int, default=3100, help="chains longer than this are not asked "
                    "whole (zoo models always are)")
    ap.add_argument("--whole-timeout", type=float, default=900, help="seconds whole-model query_model may take "
                    "(the worker's timeout); past it the row says so and the model is not compared")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    os.environ.setdefault("XDG_CACHE_HOME", str(Path(a.zoo_cache) / "xdg"))  # leave ~/.cache/hdp alone
    import hostile
    import numpy as np

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.support import ANYWHERE, query_support
    from hdp.runtime.measure.measurement import MeasureError
    from hdp.runtime.measure.measurer import Measurer
    from hdp.target.target import load_target
    from hdp.zoo import models as zoo

    target = load_target(a.target)
    devices = [d.name for d in target.devices if d.kind == "real"]
    names = _split(a.models)
    work = Path(a.zoo_cache)
    work.mkdir(parents=True, exist_ok=True)
    items = [(n, None) for n in names] + [(f"chain {n} (shared Constant)", (int(n), True))
                                          for n in a.chains.split(",") if int(n)] + \
        [(f"chain {n} (Constant per Add)", (int(n), False)) for n in a.chains.split(",") if int(n)]
    print(f"support on {a.target} ({', '.join(devices)}), load average {os.getloadavg()[0]:.1f} at the start on "
          f"{os.cpu_count()} cores; seconds include starting the worker and reading the model\n", flush=True)
    print("| model | ops | signatures | per signature, s | whole-model query_model, s | equal |\n|---|---:|---:|---:|---:|---|",
          flush=True)
    differ = []
    for label, chain in items:
        xml = zoo.cached(label, work) if chain is None else hostile.chain_file(work, *chain)
        m = lower(xml)
        n = m.graph.n_ops
        t0 = time.perf_counter()
        new = query_support(m, target, devices, cache_dir="")
        t_new = time.perf_counter() - t0
        whole_s, equal, n_sigs = "-", "(not asked)", "-"
        with Measurer(m, target, cache=False, timeout=a.whole_timeout) as me:
            n_sigs = str(len(me.signatures()[1]))
            if chain is None or n <= a.whole_max_ops:
                me.close()
                t0 = time.perf_counter()
                try:
                    whole = me.support_of(devices)  # a fresh worker: start and read, as above
                except MeasureError as e:  # (a timeout under load: the old way's cost, not a difference)
                    print(f"| {label} | {n} | {n_sigs} | {t_new:.2f} | no answer: {e} | (not compared) |", flush=True)
                    continue
                whole_s = f"{time.perf_counter() - t0:.2f}"
                anywhere = np.isin([op.type for op in m.graph.ops], list(ANYWHERE))
                same = all(np.array_equal(new[i], np.array(whole[d], bool) | anywhere) for i, d in enumerate(devices))
                equal = "yes" if same else "**no**"
                if not same:
                    differ.append(label)
        print(f"| {label} | {n} | {n_sigs} | {t_new:.2f} | {whole_s} | {equal} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    if differ:
        raise SystemExit(f"per-signature support differs from whole-model query_model on: {', '.join(differ)}")


def _split(text: str) -> list[str]:
    """``"a,b:x,y,c"`` -> ["a", "b:x,y", "c"] when x and y are options (not zoo names)."""
    from hdp.zoo import models as zoo

    known = {e["name"] for e in zoo.catalog()}
    out: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if out and ":" in out[-1] and part.split(":")[0] not in known:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


if __name__ == "__main__":
    main()

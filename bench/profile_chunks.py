"""Chunked ``profile`` against whole-model ``profile`` over the zoo (issue 23).

A model of more than ``whole_max`` ops (default 8,192) is profiled in chunks of ``--chunk`` ops,
each distinct chunk compiled and timed once (:mod:`hdp.runtime.measure.chunks`). Here every model is
profiled both ways, whole-model twice and chunked twice (``whole_max=0``), interleaved W C W C,
each in a fresh worker (start and model read included), with the profile pass's defaults on
``--target`` (default ``virtual``). Per model and device:

- ``whole s`` / ``chunked s``: the profile's wall time, median of two;
- ``wall C/W``: the chunked run's estimate of the whole model's latency (its chunks' sum less one
  request's cost per extra chunk) over the whole-model median wall time, mean of the four pairs;
- ``op diff W-W`` and ``op diff W-C``: the per-op disagreement, the time-weighted mean of
  ``|log(a/b)|`` over costed ops, between the two whole-model profiles (the profile's own noise)
  and between whole and chunked (mean of the four pairs);
- ``optimal``: the ``optimal`` placement made on the first chunked profile, priced by the simulator
  on the second whole-model profile, against the one made on the first whole-model profile (a
  positive figure: the chunked profile's placement is predicted slower by that share).

Zoo models are generated (random weights, nothing downloaded) into ``--zoo-cache`` (default
``/tmp/hdp-bench-zoo``, kept between runs).

    python bench/profile_chunks.py --chunk 64                      # ~15 min on 2 cores
    python bench/profile_chunks.py --models resnet50,gpt2:stateful --chunk 256
    python bench/profile_chunks.py --models "" --chains 2000,20000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DEFAULT = ("bert-tiny,gpt2-tiny:stateful,llama-tiny:stateful,int4,vit-tiny,mobilenet_v2-tiny,resnet50,inception_v3,"
           "mobilenet_v2,densenet121,bert,vit,gpt2:stateful,llama:stateful,int4")


def _op_diff(a, b, costed) -> float:
    """Time-weighted mean |log(a/b)| over the ops costed and positive in both (one device column each)."""
    import numpy as np

    ok = costed & np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    if not ok.any():
        return float("nan")
    w = (a[ok] + b[ok]) / 2
    return float((w * np.abs(np.log(a[ok] / b[ok]))).sum() / w.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT, help="comma-separated zoo names (options after ':' run to the next "
                    "name, e.g. llama:stateful,int4)")
    ap.add_argument("--chunk", type=int, default=256, help="ops per chunk")
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--zoo-cache", default="/tmp/hdp-bench-zoo")
    ap.add_argument("--chains", default="", help="also Relu/Add chains of these lengths, a Constant per Add (the "
                    "chain sharing one Constant does not compile whole)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "tests"))
    os.environ.setdefault("XDG_CACHE_HOME", str(Path(a.zoo_cache) / "xdg"))  # leave ~/.cache/hdp alone
    import numpy as np
    from support_scale import _split

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.problem import problem_of
    from hdp.placement.simulate import Simulator
    from hdp.runtime.costs.profile import profile_costs, zero_cost_ops
    from hdp.target.target import load_target
    from hdp.zoo import models as zoo

    target = load_target(a.target)
    real = [j for j, d in enumerate(target.devices) if d.kind == "real"]
    work = Path(a.zoo_cache)
    work.mkdir(parents=True, exist_ok=True)
    print(f"profile on {a.target}, whole model against chunks of {a.chunk} ops; load average "
          f"{os.getloadavg()[0]:.1f} at the start on {os.cpu_count()} cores\n", flush=True)
    print("| model | ops | chunks (measured) | whole s | chunked s | device | wall C/W | op diff W-W | op diff W-C "
          "| optimal |\n|---|---:|---:|---:|---:|---|---:|---:|---:|---:|", flush=True)
    import hostile

    items = [(label, None) for label in _split(a.models)] + \
        [(f"chain {int(n):,} (a Constant per Add)", int(n)) for n in a.chains.split(",") if n.strip()]
    for label, chain in items:
        xml = zoo.cached(label, work) if chain is None else hostile.chain_file(work, chain, shared=False)
        m = lower(xml)
        m = PassManager([make_pass("support", {"target": target})]).run(m)
        costed = ~zero_cost_ops(m.graph)
        runs: dict[str, list] = {"W": [], "C": []}
        for kind in "WCWC":
            t0 = time.perf_counter()
            costs, info = profile_costs(m, target, chunk=a.chunk, whole_max=(0 if kind == "C" else 1 << 62))
            runs[kind].append((costs, info, time.perf_counter() - t0))
        w, c = runs["W"], runs["C"]
        first = next(iter(c[0][1].values()))
        chunks = f"{first.get('chunks', 1)} ({first.get('measured_chunks', 1)})" if first.get("chunks") else "whole"

        def placed(costs):
            mod = PassManager([make_pass("partition", {"target": target, "method": "optimal"})]).run(
                m.replace(costs=costs))
            return mod.partition.group_device.numpy().astype(np.int64)

        judge = Simulator(problem_of(m.replace(costs=w[1][0])))
        base = judge.latency(placed(w[0][0]))
        gap = judge.latency(placed(c[0][0])) / base - 1
        for k, j in enumerate(real):
            name = target.devices[j].name
            tw = [x[0].op_time.numpy()[:, j] for x in w]
            tc = [x[0].op_time.numpy()[:, j] for x in c]
            wall = np.mean([ci[1][name]["total"] / wi[1][name]["total"] for wi in w for ci in c])
            ww = _op_diff(tw[0], tw[1], costed)
            wc = np.mean([_op_diff(x, y, costed) for x in tw for y in tc])
            head = (f"| {label} | {m.graph.n_ops} | {chunks} | {np.median([x[2] for x in w]):.1f} | "
                    f"{np.median([x[2] for x in c]):.1f} |") if k == 0 else "| | | | | |"
            print(f"{head} {name} | {wall:.2f} | {ww:.2f} | {wc:.2f} | {f'{gap:+.1%}' if k == 0 else ''} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

"""Two-stage cuts served beside the plain compile with its own streams, in one process (issue 18).

How close can a HETERO pipeline of the target's two one-thread CPUs come to the plain CPU compile
with two streams, whatever hdp chooses? For each zoo model: the ops in topological order (OpenVINO's
``get_ordered_ops``) are cut where the cumulative FLOPs (convolutions and matmuls by their shapes,
every other op twice its output) pass each given fraction; the ops up to the cut run on the first
device, the rest on the second (a constant with its first consumer). Every cut and the plain
compile (``NUM_STREAMS`` = min(N, cores), f32 like the target) are compiled in one process and
served with N inferences in flight, windows in turn (the order reversed every other round), each
window timed in steady state (the completions after the first N, between completions). Per cut:
its median rate and its rate over the plain compile's, paired window by window (the inverse of the
Hodges-Lehmann ratio of seconds per inference, with its 95 % interval and verdict,
:func:`hdp.runtime.measure.stats.compare`).

    python bench/served_cuts.py [--models resnet50,inception_v3,densenet121,bert,vit] [--requests 2]
        [--fractions 0.46,0.48,0.49,0.50,0.51,0.52,0.54] [--windows 20]

The cuts are not placements hdp writes (no tie groups, no check against the original); they bound
what any two-stage placement can serve on this host. Run on an otherwise idle host.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput_check import zoo_xml  # noqa: E402


def flops(op) -> float:
    t = op.get_type_name()
    out = float(np.prod(list(op.get_output_shape(0)))) if op.get_output_size() else 0.0
    if t in ("Convolution", "GroupConvolution"):
        w = list(op.input(1).get_shape())
        return out * float(np.prod(w[1:] if t == "Convolution" else w[2:]))
    if t == "MatMul":
        return out * float(op.input(0).get_shape()[-1])
    return 2.0 * out


def inputs(model) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for p in model.inputs:
        dt, shape = p.get_element_type().to_dtype(), list(p.get_shape())
        out.append(rng.integers(0, 100, shape).astype(dt) if np.issubdtype(dt, np.integer)
                   else rng.random(shape).astype(dt))
    return out


def cut_at(base, frac: float, first: str, second: str):
    """A copy of ``base`` with every op before the FLOP fraction ``frac`` on ``first``: (model, cut index)."""
    m = base.clone()
    compute = [o for o in m.get_ordered_ops() if o.get_type_name() not in ("Constant", "Parameter", "Result")]
    share = np.cumsum([flops(o) for o in compute])
    cut = int(np.searchsorted(share / share[-1], frac))
    dev = {o.get_friendly_name(): first if i <= cut else second for i, o in enumerate(compute)}
    for o in m.get_ordered_ops():
        t = o.get_type_name()
        if t == "Constant":
            users = [q.get_node() for out in o.outputs() for q in out.get_target_inputs()]
            d = dev.get(users[0].get_friendly_name(), first) if users else first
        elif t == "Parameter":
            d = first
        elif t == "Result":
            d = dev.get(o.input_value(0).get_node().get_friendly_name(), second)
        else:
            d = dev[o.get_friendly_name()]
        o.get_rt_info()["affinity"] = d
    return m, cut


def server(compiled, x, n: int, per_window: int):
    """A callable timing one steady-state window of ``compiled`` with ``n`` inferences in flight
    (:func:`hdp.runtime.measure.worker.steady_window`, as hdp serves)."""
    import openvino as ov

    from hdp.runtime.measure.worker import steady_window

    q = ov.AsyncInferQueue(compiled, n)
    for r in q:
        for i, a in enumerate(x):
            r.set_input_tensor(i, ov.Tensor(a))
    done: list[float] = []
    q.set_callback(lambda r, u: done.append(time.perf_counter()))
    for _ in range(3 * n):
        q.start_async()
    q.wait_all()
    window = steady_window(q, n, per_window, done)
    window.queue = q  # kept alive with the callable
    return window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,inception_v3,densenet121,bert,vit")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--fractions", default="0.46,0.48,0.49,0.50,0.51,0.52,0.54")
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--per-window", type=int, default=14)
    ap.add_argument("--target", default="virtual-2x1")
    a = ap.parse_args()
    import openvino as ov

    from hdp.runtime.measure.stats import compare
    from hdp.runtime.serve.serving import plain_streams
    from hdp.target.devices import hetero_config, hetero_name, make_core
    from hdp.target.target import load_target

    tgt = load_target(a.target)
    first, second = [d.name for d in tgt.devices][:2]
    core = make_core(tgt, [first, second])
    for d in (first, second):  # as hdp serves them: the plugin would pin both instances to one core
        core.set_property(d, {"ENABLE_CPU_PINNING": "NO"})
    fracs = [float(f) for f in a.fractions.split(",")]
    print(f"target {a.target} ({first} > {second}), {a.requests} in flight, {a.windows} windows of {a.per_window} "
          f"each side, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'model':<14} {'cut':>10} {'rate /s':>8}  placed/plain rate, paired [95 % CI] and verdict")
    for spec in a.models.split(","):
        xml = zoo_xml(spec)
        if xml is None:
            print(f"{spec}: not in the zoo cache (hdp zoo {spec} -o ...), skipped", file=sys.stderr)
            continue
        base = core.read_model(str(xml))
        x = inputs(base)
        runs = {}
        for f in fracs:
            m, cut = cut_at(base, f, first, second)
            runs[f"{f:.2f}@op{cut}"] = server(core.compile_model(m, hetero_name([first, second]),
                                                                  hetero_config(tgt, [first, second])),
                                              x, a.requests, a.per_window)
        plain = ov.Core().compile_model(base, "CPU", {
            "NUM_STREAMS": str(plain_streams(a.requests)), "INFERENCE_NUM_THREADS": "0",
            "ENABLE_CPU_PINNING": "NO", "ENABLE_CPU_RESERVATION": "NO", "INFERENCE_PRECISION_HINT": "f32"})
        runs["plain"] = server(plain, x, a.requests, a.per_window)
        rates = {k: [] for k in runs}
        for r in range(a.windows):
            for k in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                rates[k].append(runs[k]())
        ref = 1 / np.asarray(rates["plain"])
        print(f"{spec:<14} {'plain':>10} {np.median(rates['plain']):8.2f}  "
              f"({plain_streams(a.requests)} streams)")
        for k in list(runs)[:-1]:
            c = compare(ref, 1 / np.asarray(rates[k]), names=("plain", k))
            inv = [1 / v if v > 0 else float("inf") for v in (c.ratio, c.high, c.low)]
            print(f"{spec:<14} {k:>10} {np.median(rates[k]):8.2f}  {inv[0]:.3f} [{inv[1]:.3f}, {inv[2]:.3f}] "
                  f"{c.verdict}", flush=True)


if __name__ == "__main__":
    main()

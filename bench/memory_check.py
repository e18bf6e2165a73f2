"""How far hdp's device-memory estimate (hdp/placement/memory.py) is from what a compile takes here.

For each model: the estimate of every op on one CPU device (stored weights + state + peak
activation, then with the CPU plugin's memory model: its overhead and a copy of the weights at f32),
against the resident-memory growth of a fresh process that reads the model, compiles it
on the CPU plugin in f32 (at the static specialisation hdp lowers) and runs one inference (VmRSS after minus VmRSS before the compile). With
``--placed X.xml`` (a placement from ``hdp compile``), the sum of the estimate over its devices
against the growth of its HETERO compile (its devices registered as its target says).

    python bench/memory_check.py [--models resnet50,inception_v3,...] [--placed P.xml ...]

Models are zoo models already in the hdp cache (nothing is generated or downloaded), and
``NAME:...,fp16`` is, when the zoo cache has no such entry, the cached model without ``fp16`` saved
with fp16 weights (``compress_to_fp16``). Run under
``flock /work/measure.lock`` on a shared machine: RSS growth does not depend on load, but the
processes do need the memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ZOO_DIR = None  # --zoo-dir

_CHILD = r"""
import json, sys
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
import openvino as ov
from hdp.runtime.measure.worker import random_inputs
xml, placed = sys.argv[1], sys.argv[2] == "placed"
if placed:
    from hdp.runtime.placed.model import compile_placed, read_placed
    pm = read_placed(xml)
    before = rss()
    compiled = compile_placed(xml, pm.target, placed=pm)
else:
    from hdp.ir import specialise as sp
    core = ov.Core()
    model = core.read_model(xml)
    # the static specialisation hdp lowers (sequence 128, prefill) so the inputs have shapes
    model = sp.specialise(model, sp.plan_specialisation(model, xml), xml, runnable=True)
    before = rss()
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
after_compile = rss()
req = compiled.create_infer_request()
for i, a in enumerate(random_inputs(compiled)):
    req.set_input_tensor(i, ov.Tensor(a))
req.infer()
print(json.dumps({"before": before, "compile": after_compile - before, "total": rss() - before}))
"""


def measured(xml: Path, placed: bool) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(xml), "placed" if placed else "plain"],
                       capture_output=True, text=True, timeout=900, env={**os.environ})
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def estimate(xml: Path, devices=None, device_of_ops=None, target=None) -> dict:
    """hdp's estimate for ``xml`` (every op on one CPU, or as a placed model's ops are): stored bytes
    alone (``stored_only``, the estimate before device memory models) and with each device's memory
    model (``estimate``: :func:`hdp.target.capacity.device_memory` of ``target``, default: a real CPU
    in f32)."""
    from hdp.ir.openvino_frontend import lower
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.target.capacity import device_memory
    from hdp.target.target import devices_target

    module = lower(xml)
    devs = tuple(devices or ("CPU",))
    dm = device_memory(target or devices_target(list(devs)))
    p = build_problem(module, devs)
    gd = p.single(0) if device_of_ops is None else p.structure.group_devices(device_of_ops)
    old = Simulator(p).memory(gd)
    mem = Simulator(p.with_device_memory(dm)).memory(gd)
    n = p.needs
    return {"estimate": float(mem.sum()), "stored_only": float(old.sum()),
            "per_device": {d: float(v) for d, v in zip(devs, mem)}, "weights": n.total_weights,
            "state": float(n.state.sum()), "activation": float(n.activation.max(initial=0))}


def zoo_xml(spec: str, tmp: Path) -> Path | None:
    """The cached zoo export of ``spec`` (``name[:options]``, options as the zoo takes them); with
    ``fp16`` among the options and no such entry, the cached entry without it saved with fp16 weights
    (``compress_to_fp16``, what OpenVINO's save does by default)."""
    from hdp.zoo.models import _default_root

    if spec.endswith(".xml"):  # a model file given as it is
        return Path(spec) if Path(spec).is_file() else None

    def cached(stem):
        root = Path(ZOO_DIR) if ZOO_DIR else _default_root()
        found = sorted(p for p in root.glob(f"{stem}-*/model.xml") if p.with_suffix(".bin").is_file())
        return found[0] if found else None

    name, _, opts = spec.partition(":")
    opts = [o for o in opts.split(",") if o]
    xml = cached("_".join([name] + opts))
    if xml is not None or "fp16" not in opts:
        return xml
    base = cached("_".join([name] + [o for o in opts if o != "fp16"]))
    if base is None:
        return None
    import openvino as ov

    out = tmp / f"{name}-{'-'.join(opts)}.xml"
    ov.save_model(ov.Core().read_model(base), str(out), compress_to_fp16=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,resnet50:fp16,inception_v3,inception_v3:fp16")
    ap.add_argument("--placed", nargs="*", default=[])
    ap.add_argument("--zoo-dir", default=None, help="the zoo cache to find models in (default: hdp's own)")
    a = ap.parse_args()
    global ZOO_DIR
    ZOO_DIR = a.zoo_dir
    rows = []
    with tempfile.TemporaryDirectory() as td:
        specs = []
        for part in [m for m in a.models.split(",") if m]:  # "name:shape,int4" keeps its weight format with it
            if part in ("int4", "int8", "fp16", "f32", "int4-sym", "int8-sym") and specs:
                specs[-1] += "," + part
            else:
                specs.append(part)
        for spec in specs:
            xml = zoo_xml(spec, Path(td))
            if xml is None:
                print(f"{spec}: not in the zoo cache, skipped", file=sys.stderr)
                continue
            rows.append((spec, "CPU", estimate(xml), measured(xml, False)))
        for placed in a.placed:
            from hdp.runtime.placed.model import read_placed

            pm = read_placed(placed)
            ops = pm.model.get_ordered_ops()
            dev = np.array([pm.devices.index(op.get_rt_info()["affinity"].astype(str)) for op in ops])
            rows.append((Path(placed).name, "HETERO:" + ",".join(pm.used),
                         estimate(Path(placed), pm.devices, dev, pm.target), measured(Path(placed), True)))
    mib = 2.0 ** 20
    print(f"{'model':<30} {'devices':<14} {'weights':>9} {'activ.':>8} {'stored only':>12} {'error':>7} "
          f"{'estimate':>9} {'RSS growth':>11} {'(compile)':>10} {'error':>7}")
    for name, devs, e, m in rows:
        err0 = (e["stored_only"] - m["total"]) / m["total"]
        err = (e["estimate"] - m["total"]) / m["total"]
        print(f"{name:<30} {devs:<14} {e['weights'] / mib:>8.1f}M {e['activation'] / mib:>7.1f}M "
              f"{e['stored_only'] / mib:>11.1f}M {err0 * 100:>+6.1f}% {e['estimate'] / mib:>8.1f}M "
              f"{m['total'] / mib:>10.1f}M {m['compile'] / mib:>9.1f}M {err * 100:>+6.1f}%")
    print("(MiB; error = (estimate - measured) / measured; measured = VmRSS growth over compile + one inference;\n"
          " stored only: the estimate before device memory models; estimate: with them, hdp.placement.memory)")


if __name__ == "__main__":
    main()

"""A mixture of experts under a GPU memory cap: where its experts go (issue 32 item 4).

The zoo's ``qwen2-moe`` (Qwen1.5-MoE-A2.7B's routing at 1/8 width, ~80 % of its weights routed
experts; each layer's experts one stacked weight that a token's top-k rows are gathered from) is
placed by ``hdp compile --phases`` on TARGET with the GPU capped at each ``--caps`` share
(``--memory GPU=...``), both phases placed separately. Beside hdp's placement
the table prices, on the same phases' problems and caps (each a share of what every op on the GPU
needs there, the larger phase's estimate):

- every op on the GPU ("all experts on the GPU"; marked OVER where it does not fit the cap);
- every op on the CPU ("all on the CPU");
- the experts of every layer on the CPU and everything else on the GPU (llama.cpp's ``--cpu-moe``,
  ``--n-cpu-moe`` at its largest), as the rule places them — HETERO cannot run that with a KV cache
  in every layer (each layer's state then lies on a cycle through the CPU, see
  :mod:`hdp.placement.subgraphs`; the column says so) — and made legal, as every placer's output is
  (``untangle``: the greedy moves, two-stage pipeline cuts or one device, the fastest that fits).

Per row: the layers whose experts sit on the CPU (prefill/decode), the GPU's estimated memory
need in decode (the larger of the two phases' is checked against the cap), time to first token,
time per token and tokens/s. On a modeled target every figure is simulated, labelled so. The
prefill's experts gather a ``[prompt x k, 2 x 176, 256]`` block of weights per layer (transformers'
``batched_mm``), a large activation the memory model charges to whichever device runs it.

    python bench/moe_cap.py i9-flex170 [--model qwen2-moe:stateful] [--caps 0.25,0.5,0.75,1.2]
        [--seq-len 32] [--gpu GPU] [--cpu CPU] [--no-check] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from llm_phases import subset

from hdp.base.cache import default_cache_dir
from hdp.base.fsutil import human_size
from hdp.ir.openvino_frontend import lower
from hdp.ir.shapes import ShapeRequest
from hdp.passes.cache import PassCache
from hdp.pipeline.phases import compile_phases
from hdp.placement.problem import problem_of
from hdp.placement.simulate import Simulator
from hdp.placement.structure import PLACED
from hdp.placement.subgraphs import tangled_states, untangle
from hdp.placers.measured import ms
from hdp.target.capacity import capacities, device_memory, max_allocations
from hdp.target.target import load_target
from hdp.zoo import models as zoo

EXPERTS = re.compile(r"layers\.(\d+)\.mlp\.experts")


def expert_layers(module, st) -> dict[int, int]:
    """Tie group -> layer, for the groups (of structure ``st``) holding a placed op of some layer's
    routed experts."""
    out = {}
    for i, op in enumerate(module.graph.ops):
        m = EXPERTS.search(op.name)
        if m and st.role[i] == PLACED and st.group_of[i] >= 0:
            out[int(st.group_of[i])] = int(m.group(1))
    return out


def priced(module, target, caps, context):
    """The phase's problem under the caps (memory models, max_allocation)."""
    devices = tuple(module.placement.devices)
    p = problem_of(module, devices, context=context).with_capacity(caps).with_device_memory(device_memory(target))
    return p.with_max_allocation(max_allocations(target), module.graph)


def gpu_need(xml, target, gpu: int, seq_len: int, context: int) -> float:
    """What every op on the GPU needs there, the larger of the two phases' estimates."""
    need = 0.0
    for phase in ("prefill", "decode"):
        m = lower(xml, ShapeRequest(seq_len=seq_len, phase=phase))
        p = problem_of(m, tuple(target.device_names), context=context).with_device_memory(device_memory(target))
        need = max(need, float(Simulator(p).memory(p.single(gpu))[gpu]))
    return need


def row(p, gd, layers, gpu, cpu):
    sim = Simulator(p)
    on_cpu = sorted({layer for g, layer in layers.items() if gd[g] == cpu})
    return {"latency": sim.latency(gd), "memory": sim.memory(gd)[gpu], "fits": sim.feasible(gd),
            "cpu_layers": len(on_cpu), "tangled": int(tangled_states(p.structure, p.structure.op_devices(gd)).size)}


def layers_text(pre: dict, dec: dict) -> str:
    return f"prefill {pre['cpu_layers']}, decode {dec['cpu_layers']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("--model", default="qwen2-moe:stateful")
    ap.add_argument("--caps", default="0.25,0.5,0.75,1.2", help="GPU caps as shares of the stored weights")
    ap.add_argument("--seq-len", type=int, default=32, help="prompt tokens")
    ap.add_argument("--context", type=int, default=0, help="--context for the memory estimate (0: as specialised)")
    ap.add_argument("--devices", default=None, help="keep only these devices of the target (e.g. CPU,GPU)")
    ap.add_argument("--gpu", default="GPU")
    ap.add_argument("--cpu", default="CPU")
    ap.add_argument("--no-check", action="store_true", help="write each phase unchecked (hdp compile --no-check)")
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args()
    tgt = load_target(a.target)
    if a.devices:
        tgt = subset(tgt, a.devices.split(","))
    names = list(tgt.device_names)
    gpu, cpu = names.index(a.gpu), names.index(a.cpu)
    cache = PassCache(Path(a.cache_dir) if a.cache_dir else default_cache_dir())
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    kind = "modeled: simulated figures" if not tgt.is_real else "real devices: simulated from the profile"
    print(f"{stamp}: {a.model} on {tgt.name} ({kind}) under a {a.gpu} cap, a {a.seq_len}-token prompt{load}")
    print(f"  python bench/moe_cap.py {a.target}" + (f" --devices {a.devices}" if a.devices else "") + f" --model {a.model} --caps {a.caps} --seq-len {a.seq_len}"
          + (f" --context {a.context}" if a.context else "") + (" --no-check" if a.no_check else ""))
    with tempfile.TemporaryDirectory(prefix="hdp-moe-") as tmp:
        xml = Path(tmp) / "moe.xml"
        zoo.export(a.model, xml, cache_root=a.cache_dir)
        whole = gpu_need(xml, tgt, gpu, a.seq_len, a.context)
        print(f"  every op on the {a.gpu} needs {human_size(whole)} there (the larger phase's estimate); "
              f"the caps are shares of it")
        for share in [float(s) for s in a.caps.split(",")]:
            cap_bytes = int(share * whole)
            memory = ((a.gpu, cap_bytes),)
            out = Path(tmp) / "placed.xml"
            t0 = time.monotonic()
            r = compile_phases(xml, out, tgt, shapes=ShapeRequest(seq_len=a.seq_len), cache=cache,
                               check=not a.no_check, compare=False, context=a.context, memory=memory,
                               options={"memory": f"{a.gpu}={cap_bytes}",
                                        **({"context": str(a.context)} if a.context else {})})
            caps = capacities(tgt, memory)
            rows: dict[str, dict[str, dict]] = {}
            for phase in ("prefill", "decode"):
                m = r.results[phase].module
                p = priced(m, tgt, caps, a.context)
                layers = expert_layers(m, p.structure)
                n_layers = len(set(layers.values()))
                hdp_gd = p.structure.group_devices(m.placement.device_of.numpy())
                experts_cpu = np.full(p.n_groups, gpu, np.int16)
                experts_cpu[list(layers)] = cpu
                experts_cpu = experts_cpu if p.allowed[np.arange(p.n_groups), experts_cpu].all() else None
                plans = {"hdp (--phases, under the cap)": hdp_gd, "all experts on the GPU (every op)": p.single(gpu),
                         "all on the CPU": p.single(cpu)}
                if experts_cpu is not None:
                    plans["experts on the CPU, the rest on the GPU"] = experts_cpu
                    plans["  the same, made legal for HETERO (untangled)"] = untangle(p, experts_cpu)[0]
                for label, gd in plans.items():
                    rows.setdefault(label, {})[phase] = row(p, np.asarray(gd, np.int16), layers, gpu, cpu)
            print(f"\n{a.gpu} cap {human_size(cap_bytes)} ({share:.0%} of what every op on it needs); "
                  f"placed in {time.monotonic() - t0:.0f} s; {n_layers} layers of experts")
            print(f"  {'placement':<46} {'layers w/ experts on CPU':>24} {a.gpu + ' memory':>14} "
                  f"{'first token':>12} {'per token':>11} {'tokens/s':>9}  HETERO")
            for label, ph in rows.items():
                pre, dec = ph["prefill"], ph["decode"]
                need = max(pre["memory"], dec["memory"])
                fits = pre["fits"] and dec["fits"]
                tangled = pre["tangled"] + dec["tangled"]
                print(f"  {label:<46} {layers_text(pre, dec):>24} "
                      f"{human_size(need) + ('' if fits else ' OVER'):>14} {ms(pre['latency']):>12} "
                      f"{ms(dec['latency']):>11} {1 / dec['latency']:>9.1f}  "
                      + (f"cannot run: {tangled} state ops tangled" if tangled else "runs"))
            for phase in ("prefill", "decode"):
                res = r.results[phase]
                if res.check is not None:
                    print(f"  {phase}: {res.check.describe()}")


if __name__ == "__main__":
    sys.exit(main())

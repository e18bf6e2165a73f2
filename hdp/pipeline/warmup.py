"""Compile hdp's Numba kernels ahead of time: ``python -m hdp.pipeline.warmup`` (run by ``make install``).

:func:`warm_up` runs the kernels the way the pipeline calls them (see :mod:`hdp.base.jit` for where they
are cached), so the user's first ``hdp compile`` loads them from the cache instead of compiling them
for tens of seconds. :func:`compiled_now` says which kernels this process had to compile.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.jit import cache_dir, materialize
from hdp.costgraph.graph import lower, max_load_data, problem_for
from hdp.costgraph.native import parse
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import compile_schedule, make_pass
from hdp.placement import maxload_search as MS
from hdp.placement.objective import Concurrent, Throughput
from hdp.placement.planner import plan_throughput
from hdp.placement.problem import problem_of
from hdp.placement.simulate import Simulator
from hdp.placers.options import METHODS, method_from
from hdp.target.streams import plan_devices
from hdp.target.target import load_target
from hdp.zoo.synth import random_module


def kernel_modules() -> list[str]:
    """Every kernel module of hdp (``_kernels.py`` and ``_<concern>_kernels.py`` files, docs/design.md §3),
    found on disk, so a new one is warmed up and checked without being listed here."""

    root = Path(__file__).resolve().parent.parent  # the hdp package
    return sorted(".".join(("hdp",) + f.relative_to(root).with_suffix("").parts)
                  for f in root.rglob("_*kernels.py") if f.stem.endswith("_kernels"))


def kernels() -> dict:
    """Every Numba dispatcher of hdp's kernel modules, by ``package.name`` (``passes.in_degrees``)."""

    from numba.core.registry import CPUDispatcher

    out = {}
    for mod in map(importlib.import_module, kernel_modules()):
        materialize(mod)
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
                key = f"{mod.__name__.rsplit('.', 2)[-2]}.{name}"
                assert key not in out, f"two kernels named {key}"
                out[key] = obj
    return out


def compiled_now() -> dict[str, int]:
    """Per kernel, the signatures this process compiled because the cache did not have them."""
    return {k: sum(d.stats.cache_misses.values()) for k, d in kernels().items()
            if sum(d.stats.cache_misses.values())}


def warm_up(n_ops: int = 400) -> dict[str, int]:
    """Run the kernels the pipeline uses on a small synthetic module, so that Numba compiles
    (or loads) each with the argument types the pipeline gives it; returns :func:`compiled_now`.

    Goes through the pipeline's own entry points (passes, :func:`hdp.pipeline.compile_schedule`
    for every method but the learned one, the simulator of a placement problem), never through
    kernel signatures, so it follows the code it warms up."""


    target = load_target("i9-flex170")  # modeled: no device is touched
    module = random_module(n_ops)
    base = PassManager([make_pass("support", {"target": target}), make_pass("profile", {"target": target}),
                        make_pass("features", {}), make_pass("coarsen", {})]).run(module)
    PassManager([make_pass("coarsen", {"groups": 16})]).run(base)
    for name in sorted(METHODS):
        o = method_from(name)
        if "features" in type(o).needs:  # the learned placers: their kernels are the
            continue                     # structure passes' and the simulator's
        if "latency" not in o.served(target):  # cp-sat: concurrent only; the simulator's kernels below
            continue
        PassManager(compile_schedule(target, name, refine=True)).run(module)
    # a target without declared memory (modeled devices unlimited): the placers' paths without caps
    unlimited = msgspec.structs.replace(target, devices=[msgspec.structs.replace(d, memory=None)
                                                         for d in target.devices])
    PassManager(compile_schedule(unlimited, "heft")).run(module)
    sim = Simulator(problem_of(base))
    dev = (np.arange(sim.n_groups) % sim.n_devices).astype(np.int64)
    sim.latency(dev)
    sim.latencies(np.stack([dev, np.zeros_like(dev)]))
    sim.latency_parallel(dev)
    sim.subgraphs(dev)
    sim.memory(dev)
    con = Simulator(problem_of(base, objective=Concurrent()))
    con.cost(dev)
    con.costs(np.stack([dev, np.zeros_like(dev)]))
    thr = Simulator(problem_of(base, objective=Throughput()))
    thr.loads(dev)
    thr.costs(np.stack([dev, np.zeros_like(dev)]))
    thr_p = problem_of(base, objective=Throughput(requests=2))
    plan_throughput(thr_p, plan_devices(target, thr_p.devices), 2, time_limit=5.0)  # the plans' ideals walk
    _warm_costgraph()
    return compiled_now()


def _warm_costgraph() -> None:
    """``hdp place``'s max-load optimiser on a small cost graph (a training-like chain with ties,
    caps and identical devices): the contiguous DP and the heuristic's kernels."""

    n = 12
    ops = [{"name": f"f{i}", "time": {"CPU": 4.0 + i % 3, "ACC": 1.0 + i % 2}, "bytes": 10, "tie": i} for i in range(n)]
    ops += [{"name": f"b{i}", "time": {"CPU": 8.0, "ACC": 2.0}, "tie": i, "backward": True} for i in range(n)]
    tensors = [{"producer": f"f{i}", "consumers": [f"f{i + 1}"], "time": 0.5} for i in range(n - 1)]
    tensors += [{"producer": f"b{i + 1}", "consumers": [f"b{i}"], "time": 0.5} for i in range(n - 1)]
    doc = {"format": "hdp-costgraph", "ops": ops, "tensors": tensors,
           "devices": [{"name": "CPU", "free_comm": True}, {"name": "ACC", "count": 3, "memory": 60}]}
    m = lower(parse("<warm-up cost graph>", doc))
    p = problem_for(m)
    MS.optimize(p, max_load_data(p, m), time_limit=1.0, exact=False)
    MS.heuristic(p, max_load_data(p, m), restarts=1, seconds=1.0)  # its pipelines (optimize may end first)


def main() -> None:
    t0 = time.perf_counter()
    compiled = warm_up()
    loaded = sum(sum(d.stats.cache_hits.values()) for d in kernels().values())
    print(f"hdp: Numba kernels cached in {cache_dir()}: {sum(compiled.values())} compiled now, "
          f"{loaded} loaded from the cache ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()

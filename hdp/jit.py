"""Numba set-up: where compiled kernels are cached, and an ahead-of-time warm-up.

Every kernel is ``@njit(cache=True)`` with :func:`njit` from here, which first points Numba's cache
at ``<hdp cache>/numba`` (``$XDG_CACHE_HOME/hdp/numba``, default ``~/.cache/hdp/numba``) unless
``NUMBA_CACHE_DIR`` is set. Left alone, Numba writes next to the sources (``hdp/passes/__pycache__``),
which fails silently where the package directory is read-only and mixes build products into a
checkout. The environment variable is set too, so worker processes agree. Numba keys a cached
kernel by its source file's contents, the argument types, the Numba version and the CPU, so a stale
entry is never used; an unwritable directory makes Numba fall back to its own locations.

Compiling every kernel takes tens of seconds on a small machine (about 35 s for
``hdp compile`` on a 2-core VM, against under 2 s once cached). ``python -m hdp.jit`` (run by
``make install``) compiles them ahead of time, the way the pipeline calls them: the structure passes,
the cost model, the classical placers and the simulator on a small synthetic module on a modeled
target, so the user's first run loads them from the cache instead.
"""

from __future__ import annotations

import os
import sys

ENV = "NUMBA_CACHE_DIR"


def cache_dir() -> str:
    """Where Numba caches hdp's kernels: ``$NUMBA_CACHE_DIR`` if set, else ``<hdp cache>/numba``."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    from hdp.passes.cache import default_cache_dir

    return str(default_cache_dir() / "numba")


def _configure() -> None:
    import numba.core.config

    if not os.environ.get(ENV):
        os.environ[ENV] = cache_dir()
    if numba.core.config.CACHE_DIR != os.environ[ENV]:
        numba.core.config.reload_config()  # numba read its environment at import, maybe before


def njit(*args, **kwargs):
    """``numba.njit``, with Numba's cache directory set first (see the module docstring)."""
    _configure()
    from numba import njit as _njit

    return _njit(*args, **kwargs)


def kernels() -> dict:
    """Every Numba dispatcher of hdp's kernel modules, by ``module.name``."""
    from hdp.passes import _kernels as passes_kernels
    from hdp.runtime import _kernels as runtime_kernels
    from numba.core.registry import CPUDispatcher

    out = {}
    for mod in (passes_kernels, runtime_kernels):
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher):
                out[f"{mod.__name__.rsplit('.', 2)[-2]}.{name}"] = obj
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
    import numpy as np

    from hdp.passes.manager import PassManager
    from hdp.pipeline import compile_schedule, make_pass
    from hdp.placement.problem import problem_of
    from hdp.placers import IMPLEMENTATIONS
    from hdp.placers.options import method_from
    from hdp.runtime.simulate import Simulator
    from hdp.runtime.target import load_target
    from hdp.synth import random_module

    target = load_target("i9-flex170")  # modeled: no device is touched
    module = random_module(n_ops)
    base = PassManager([make_pass("support", {"target": target}), make_pass("profile", {"target": target}),
                        make_pass("features", {}), make_pass("coarsen", {})]).run(module)
    PassManager([make_pass("coarsen", {"groups": 16})]).run(base)
    for name in sorted(IMPLEMENTATIONS):
        if "features" in type(method_from(name)).needs:  # the learned placer: its kernels are the
            continue                                      # structure passes' and the simulator's
        PassManager(compile_schedule(target, name, refine=True)).run(module)
    sim = Simulator(problem_of(base))
    dev = (np.arange(sim.n_groups) % sim.n_devices).astype(np.int64)
    sim.latency(dev)
    sim.latencies(np.stack([dev, np.zeros_like(dev)]))
    sim.latency_parallel(dev)
    sim.subgraphs(dev)
    return compiled_now()


def main() -> None:
    import time

    t0 = time.perf_counter()
    compiled = warm_up()
    loaded = sum(sum(d.stats.cache_hits.values()) for d in kernels().values())
    print(f"hdp: Numba kernels cached in {cache_dir()}: {sum(compiled.values())} compiled now, "
          f"{loaded} loaded from the cache ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()

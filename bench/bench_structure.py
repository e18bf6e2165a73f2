"""pytest-benchmark suite of the structure passes (``features``, ``coarsen``) on synthetic DAGs.

    NUMBA_NUM_THREADS=1 python -m pytest bench/bench_structure.py --benchmark-only

Graphs come from :func:`hdp.zoo.synth.random_module`, built once per size outside the timed region;
kernels are compiled (or loaded from numba's cache) before timing. The ``coarsen-vs-networkx``
group times hdp's rules (a) + (b) against a straightforward networkx implementation of the same
rules (the reference of tests/test_coarsen.py) on the same graph; each entry's ``extra_info``
holds the number of groups, and the networkx entries the measured ratio.
"""

from __future__ import annotations

import importlib.util
import time
from functools import cache
from pathlib import Path

import pytest

from hdp.passes.coarsen import CoarsenPass
from hdp.passes.features import FeaturesPass
from hdp.zoo.synth import random_module

SIZES = [10_000, 100_000, 1_000_000]
NX_SIZES = [10_000, 100_000]


@cache
def module(n: int):
    return random_module(n, seed=0)


@cache
def nx_reference():
    path = Path(__file__).resolve().parent.parent / "tests" / "test_coarsen.py"
    spec = importlib.util.spec_from_file_location("_coarsen_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.nx_coarsen


@pytest.fixture(scope="session", autouse=True)
def compiled():
    """Compile or load every kernel once, outside the timed regions."""
    m = module(1000)
    FeaturesPass().run(m)
    CoarsenPass(groups=10).run(m)


@pytest.mark.parametrize("n", SIZES)
def test_coarsen(benchmark, n):
    benchmark.group = "coarsen (rules a+b)"
    m = module(n)
    out = benchmark.pedantic(CoarsenPass().run, (m,), rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info["n_groups"] = out.coarse.n_groups


@pytest.mark.parametrize("n", SIZES)
def test_coarsen_to_256_groups(benchmark, n):
    benchmark.group = "coarsen (rules a+b, multilevel to 256)"
    m = module(n)
    out = benchmark.pedantic(CoarsenPass(groups=256).run, (m,), rounds=3, iterations=1,
                             warmup_rounds=1)
    assert out.coarse.n_groups == 256


@pytest.mark.parametrize("n", SIZES)
def test_features(benchmark, n):
    benchmark.group = "features"
    m = module(n)
    out = benchmark.pedantic(FeaturesPass().run, (m,), rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info["columns"] = len(out.features.legend)


@pytest.mark.parametrize("n", NX_SIZES)
@pytest.mark.parametrize("impl", ["hdp", "networkx"])
def test_coarsen_vs_networkx(benchmark, impl, n):
    benchmark.group = f"coarsen-vs-networkx n={n}"
    m = module(n)
    if impl == "hdp":
        out = benchmark.pedantic(CoarsenPass().run, (m,), rounds=3, iterations=1, warmup_rounds=1)
        benchmark.extra_info["n_groups"] = out.coarse.n_groups
        return
    ref = nx_reference()
    groups, _ = benchmark.pedantic(ref, (m.graph, "paper"), rounds=1, iterations=1)
    benchmark.extra_info["n_groups"] = len(set(groups.values()))
    best = min(_timed(CoarsenPass().run, m) for _ in range(3))
    benchmark.extra_info["hdp_seconds"] = best
    benchmark.extra_info["ratio_networkx_over_hdp"] = benchmark.stats.stats.min / best


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t

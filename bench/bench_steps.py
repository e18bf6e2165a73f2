"""Wall time of the pipeline's steps on a ~500-op zoo model (inception_v3, 501 ops) on ``virtual``.

Run: ``python -m pytest bench/bench_steps.py --benchmark-only -o addopts=""`` (see
bench/topics/steps.md). The model is built once and cached under ``~/.cache/hdp/zoo`` (about
30 s the first time). ``support`` and ``profile`` run on the real devices of ``virtual`` (the CPU
plugin and the same plugin registered again as CPU_B) and are timed as the passes' ``run``, without
the pass cache: what a user waits for on a cache miss. ``lower``, ``features`` and ``coarsen`` are
there for context (Numba kernels compiled, or loaded from their cache, before timing).
"""

from __future__ import annotations

import pytest

from hdp.passes.registry import registry
from hdp.target.target import load_target

MODEL = "inception_v3"


@pytest.fixture(scope="module")
def xml():
    from hdp.zoo import models as zoo

    return zoo.cached(MODEL)


@pytest.fixture(scope="module")
def target():
    return load_target("virtual")


@pytest.fixture(scope="module")
def lowered(xml):
    from hdp.ir.openvino_frontend import lower

    return lower(xml)


@pytest.fixture(scope="module")
def supported(lowered, target):
    return registry()["support"](target=target).run(lowered)


def _info(benchmark, module):
    benchmark.extra_info["ops"] = module.graph.n_ops


def test_lower(benchmark, xml):
    from hdp.ir.openvino_frontend import lower

    m = benchmark.pedantic(lower, args=(xml,), rounds=5, iterations=1, warmup_rounds=1)
    _info(benchmark, m)


def test_support(benchmark, lowered, target):
    """``query_model`` on both devices, nothing memoised, run alone: worker start (OpenVINO's
    import), model read, the two queries (in parallel)."""
    p = registry()["support"](target=target)
    m = benchmark.pedantic(p.run, args=(lowered,), rounds=7, iterations=1, warmup_rounds=1)
    assert m.support.mask.numpy().all(axis=1).sum() > 0.9 * m.graph.n_ops
    _info(benchmark, m)


def test_support_memoised(benchmark, lowered, target, tmp_path):
    """The answers memoised (``query_cache``, what the CLI sets): the second support on a model."""
    import msgspec

    p = msgspec.structs.replace(registry()["support"](target=target), query_cache=str(tmp_path / "support"))
    m = benchmark.pedantic(p.run, args=(lowered,), rounds=7, iterations=1, warmup_rounds=1)
    assert m.support.mask.numpy().all(axis=1).sum() > 0.9 * m.graph.n_ops
    _info(benchmark, m)


def test_profile(benchmark, supported, target):
    """The profile pass with its default options (what ``ProfilePass.run`` calls), one round per
    worker: start and model read, compiles and warm-ups, timed runs, reading the runtime graphs,
    attribution. ``extra_info["stages"]`` holds each round's seconds per stage."""
    from hdp.runtime.costs.profile import profile_costs

    p = registry()["profile"](target=target)
    rounds = []

    def run():
        stages = {}
        costs, info = profile_costs(supported, target, runs=p.runs, warmup=p.warmup, seconds=p.seconds,
                                    min_runs=p.min_runs, timeout=p.timeout, stages=stages)
        stages["runs"] = info["CPU"]["runs"]
        stages["latency_ms"] = [t * 1e3 for t in costs.measured_total]
        rounds.append(stages)
        return costs

    costs = benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=0)
    assert costs.kind == ("measured", "measured")
    _info(benchmark, supported)
    benchmark.extra_info["stages"] = rounds


def test_features(benchmark, lowered):
    p = registry()["features"]()
    m = benchmark.pedantic(p.run, args=(lowered,), rounds=10, iterations=1, warmup_rounds=1)
    _info(benchmark, m)


def test_coarsen(benchmark, lowered):
    p = registry()["coarsen"]()
    m = benchmark.pedantic(p.run, args=(lowered,), rounds=10, iterations=1, warmup_rounds=1)
    _info(benchmark, m)

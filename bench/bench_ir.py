"""IR speed: lowering a zoo model, encoding/decoding and hashing a synthetic 10^5-op Module.

    python -m pytest bench/bench_ir.py --benchmark-only -o addopts=""
"""

import pytest

from hdp.ir import serde
from hdp.zoo.synth import random_module

N = 100_000


@pytest.fixture(scope="module")
def big():
    m = random_module(N, seed=0)
    return m, serde.encode(m)


def test_encode_1e5_ops(benchmark, big):
    m, data = big
    out = benchmark(serde.encode, m)
    assert out == data


def test_decode_1e5_ops(benchmark, big):
    m, data = big
    out = benchmark(serde.decode, data)
    assert out.graph.n_ops == N


def test_digest_1e5_ops(benchmark, big):
    m, _ = big
    benchmark(serde.digest, m)


@pytest.fixture(scope="module")
def zoo_model(tmp_path_factory):
    import importlib.util

    if importlib.util.find_spec("keras") is None:  # importing keras needs its backend set (hdp.zoo.models does)
        pytest.skip("keras not installed (pip install 'hdp[zoo]')")
    from hdp.zoo.models import export

    return export("resnet50", tmp_path_factory.mktemp("zoo") / "resnet50.xml")


def test_lower_resnet50(benchmark, zoo_model):
    from hdp.ir.openvino_frontend import lower

    m = benchmark.pedantic(lower, args=(zoo_model,), rounds=3, iterations=1)
    assert m.graph.n_ops == 288  # the keras ResNet50 of hdp.zoo.models

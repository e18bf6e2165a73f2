"""End to end on the zoo models (slow; run by `make test-slow`, which CI runs after `make test`).

`hdp compile MODEL --devices CPU` writes a placed model that plain OpenVINO reads, where every op has
`user_dataaffinity`, and that the documented loader compiles with HETERO:CPU giving the original
model's outputs.
"""

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli.main import main

pytestmark = pytest.mark.slow


def random_inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i, inp in enumerate(model.inputs):
        shape = list(inp.get_shape())
        et = inp.get_element_type().to_dtype()
        if np.issubdtype(et, np.integer):
            feeds[i] = rng.integers(0, 2, size=shape).astype(et)
        else:
            feeds[i] = rng.standard_normal(shape).astype(et)
    return feeds


@pytest.mark.parametrize("name", ["inception_v3", "resnet50", "bert_base"])
def test_compile_cpu_then_hetero_matches_plain(name, tmp_path):
    import openvino as ov

    from hdp.runtime.placed.model import compile_placed
    from hdp.zoo.models import export

    xml = export(name, tmp_path / f"{name}.xml")
    out = tmp_path / "placed.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--devices", "CPU",
                                  "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert r.exit_code == 0, r.output
    core = ov.Core()
    placed = core.read_model(str(out))
    ops = placed.get_ordered_ops()
    assert all(op.get_rt_info()["user_dataaffinity"].astype(str) == "CPU" for op in ops)
    original = core.read_model(str(xml))
    feeds = random_inputs(original)
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    want = core.compile_model(original, "CPU", f32)(feeds)
    got = compile_placed(out, config={})(feeds)
    for a, b in zip(got.values(), want.values()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

"""Numba's cache lives under the hdp cache; the ahead-of-time warm-up covers the pipeline's kernels."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hdp
from hdp.base.jit import cache_dir
from hdp.pipeline.warmup import kernels

ROOT = str(Path(hdp.__file__).resolve().parent.parent)
DATA = Path(__file__).parent / "data"


def _python(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    e.update(PYTHONPATH=ROOT, **env)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_kernels_cache_under_the_hdp_cache_dir(tmp_path):
    code = ("from hdp.passes import _kernels as P; from hdp.placement import _kernels as R; import os\n"
            "print(P.in_degrees._cache._cache_path); print(R.sequential_terms._cache._cache_path)\n"
            "print(os.environ['NUMBA_CACHE_DIR'])")
    passes, runtime, env = _python(code, XDG_CACHE_HOME=str(tmp_path / "xdg")).splitlines()
    where = tmp_path / "xdg" / "hdp" / "numba"
    assert env == str(where)  # inherited by worker processes
    assert Path(passes).parent == where and Path(runtime).parent == where
    # NUMBA_CACHE_DIR wins, even when numba was imported before hdp
    code = "import numba\n" + code
    passes, _, _ = _python(code, XDG_CACHE_HOME=str(tmp_path / "xdg"), NUMBA_CACHE_DIR=str(tmp_path / "nb")).splitlines()
    assert Path(passes).parent == tmp_path / "nb"


def test_every_kernel_is_a_cached_dispatcher():
    ks = kernels()
    # one per kernel module: the simulator's, the max-load objective's, HEFT's, the passes'
    for name in ("passes.fractal_dimension", "placement.sequential_batch", "placement.ml_ideal_dp", "placement.plan_ideal_dp",
                 "placers.heft_schedule_mem"):
        assert name in ks, name
    for name, d in ks.items():
        assert d._cache._cache_path.startswith(cache_dir()), name


@pytest.mark.slow
def test_warm_up_leaves_nothing_to_compile_on_the_users_path(tmp_path, branchy_xml):
    """After ``python -m hdp.pipeline.warmup`` into an empty cache, lowering a real model and running the
    compile pipeline (classical methods, refinement, hsdag), and placing a cost graph as ``hdp
    place`` does, compiles no kernel."""
    nb = str(tmp_path / "numba")
    _python("from hdp.pipeline.warmup import main; main()", NUMBA_CACHE_DIR=nb)
    code = f"""
from hdp.ir.openvino_frontend import lower
from hdp.pipeline.warmup import compiled_now
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import compile_schedule
from hdp.target.target import load_target
m = lower({str(branchy_xml)!r})
for method, extra in [("optimal", {{}}), ("heft", {{}}), ("random", {{}}),
                      ("hsdag", {{"budget": 2.0, "episodes": 1, "samples": 2}})]:
    PassManager(compile_schedule(load_target("i9-flex170"), method, extra=extra, refine=True)).run(m)
from hdp.costgraph.graph import lower as lower_cg, max_load_data, problem_for
from hdp.costgraph import read
from hdp.placement import maxload_search as MS
c = lower_cg(read({str(DATA / "dnn_partitioning" / "bert24_training.json")!r}))
p = problem_for(c)
MS.optimize(p, max_load_data(p, c), time_limit=1.0)
print(compiled_now())
"""
    assert _python(code, NUMBA_CACHE_DIR=nb).splitlines()[-1] == "{}"

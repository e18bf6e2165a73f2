"""Shared fixtures: tiny OpenVINO models built with openvino.opset13, saved to tmp_path.

The suite leaves the user's home alone: before anything reads the environment (this module is
imported before every test module), ``XDG_CACHE_HOME`` points at a directory made for this session,
so every hdp cache a test does not set itself (passes, measurements, support answers,
calibrations, zoo models; in this process and in the worker processes it starts) lives there and
is removed at the end. Numba's compiled kernels are code, not data, and are not rebuilt every
session: unless ``NUMBA_CACHE_DIR`` is set they go to ``.numba-cache/`` in this checkout. The
session fixture ``_home_cache_untouched`` fails the run if the user's hdp cache
(``$XDG_CACHE_HOME/hdp`` or ``~/.cache/hdp`` as the user set it) changed while the suite ran.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest


def _user_cache_dir() -> Path:
    """The hdp cache of the user who started the tests (what ``hdp.base.cache.default_cache_dir`` gives
    outside the suite)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hdp"


USER_CACHE = _user_cache_dir()
SESSION_DIR = Path(tempfile.mkdtemp(prefix="hdp-tests-"))
os.environ["XDG_CACHE_HOME"] = str(SESSION_DIR / "xdg")
# the zoo's keras and matplotlib (through plotting tests) write their config under the home directory
os.environ.setdefault("KERAS_HOME", str(SESSION_DIR / "keras"))
os.environ.setdefault("MPLCONFIGDIR", str(SESSION_DIR / "matplotlib"))
if not os.environ.get("NUMBA_CACHE_DIR"):
    os.environ["NUMBA_CACHE_DIR"] = str(Path(__file__).resolve().parents[1] / ".numba-cache")


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its type, size and modification time (empty if absent):
    a cache entry read by hdp has its time touched, so reading counts as touching too."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_mode >> 12, st.st_size if name in files else 0, st.st_mtime_ns)
    return out


def changed_paths(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


#: The state of the user's hdp cache when the session started (see ``_home_cache_untouched``).
USER_CACHE_AT_START = tree_state(USER_CACHE)


@pytest.fixture(scope="session", autouse=True)
def _home_cache_untouched():
    """Fails the run when the user's hdp cache changed while the suite ran; removes the session's
    own caches afterwards. (Another process of the user writing there meanwhile fails it too:
    the check cannot tell whose write it was.)"""
    yield
    changed = changed_paths(USER_CACHE_AT_START, tree_state(USER_CACHE))
    shutil.rmtree(SESSION_DIR, ignore_errors=True)
    if changed:
        pytest.fail(f"the test suite changed the user's hdp cache {USER_CACHE}: {', '.join(changed[:10])}"
                    + (f" and {len(changed) - 10} more" if len(changed) > 10 else ""), pytrace=False)


def _save(model, path):
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def build_branchy(batch=1):
    """Conv -> Relu -> Split(2 outputs) -> {Add, Multiply} -> Add -> Result, plus a second Result
    on the Relu (a tensor with several consumers, a multi-output op, two graph outputs)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([batch, 3, 16, 16], np.float32, name="x")
    w = ops.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), name="w")
    conv = ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1], name="conv")
    relu = ops.relu(conv, name="relu")
    split = ops.split(relu, ops.constant(np.int64(1), name="axis"), 2, name="split")
    add = ops.add(split.output(0), split.output(1), name="add")
    mul = ops.multiply(split.output(0), split.output(1), name="mul")
    out = ops.add(add, mul, name="sum")
    r1 = ops.result(out, name="out")
    r2 = ops.result(relu, name="feat")
    return ov.Model([r1, r2], [x], "branchy")


def build_mlp(batch=1, dynamic=False):
    """MatMul -> Add -> Relu -> MatMul; with a dynamic batch when ``dynamic``."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(1)
    x = ops.parameter([-1 if dynamic else batch, 32], np.float32, name="x")
    w1 = ops.constant(rng.standard_normal((32, 64)).astype(np.float32), name="w1")
    b1 = ops.constant(rng.standard_normal((64,)).astype(np.float32), name="b1")
    w2 = ops.constant(rng.standard_normal((64, 10)).astype(np.float32), name="w2")
    h = ops.relu(ops.add(ops.matmul(x, w1, False, False, name="mm1"), b1, name="bias"), name="act")
    y = ops.matmul(h, w2, False, False, name="mm2")
    return ov.Model([ops.result(y, name="y")], [x], "mlp")


@pytest.fixture
def branchy_xml(tmp_path):
    return _save(build_branchy(), tmp_path / "branchy.xml")


@pytest.fixture
def mlp_xml(tmp_path):
    return _save(build_mlp(), tmp_path / "mlp.xml")


@pytest.fixture
def dynamic_xml(tmp_path):
    return _save(build_mlp(dynamic=True), tmp_path / "dyn.xml")


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


def save_model(model, path):
    return _save(model, path)


# Tiny zoo exports (transformers/keras models made the way users make them), cached per session.
from zoo_exports import (  # noqa: E402,F401
    bert_dynamic_xml,
    cnn_dynamic_xml,
    cnn_fp16_xml,
    llama_int4_xml,
    llama_stateful_xml,
    zoo_export,
)

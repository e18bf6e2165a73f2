"""The suite keeps its caches out of the user's home (see ``tests/conftest.py``), and ``hdp cache``
covers every cache, the zoo's models included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from click.testing import CliRunner
from conftest import SESSION_DIR, USER_CACHE, USER_CACHE_AT_START, changed_paths, tree_state


def _inside(path, root) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def test_every_default_cache_is_the_sessions(tmp_path):
    from hdp.base.cache import default_cache_dir
    from hdp.base.jit import cache_dir as numba_dir
    from hdp.runtime.measure.cache import measure_cache_dir
    from hdp.zoo import models as zoo

    for path in (default_cache_dir(), zoo._default_root(), measure_cache_dir()):
        assert _inside(path, SESSION_DIR), path
    # compiled Numba kernels are code: kept between sessions in the checkout, never in the user's cache
    assert not _inside(numba_dir(), USER_CACHE) and not _inside(numba_dir(), SESSION_DIR)
    # worker processes inherit it
    out = subprocess.run([sys.executable, "-c", "from hdp.base.cache import default_cache_dir; print(default_cache_dir())"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert _inside(out, SESSION_DIR), out


def test_user_cache_untouched_so_far():
    """What ``_home_cache_untouched`` checks at the end of the session, checked midway too."""
    assert changed_paths(USER_CACHE_AT_START, tree_state(USER_CACHE)) == []


def test_tree_state_sees_a_read_and_a_write(tmp_path):
    (tmp_path / "a").mkdir()
    f = tmp_path / "a" / "entry"
    f.write_bytes(b"x")
    before = tree_state(tmp_path)
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))  # an entry read by hdp is touched
    assert changed_paths(before, tree_state(tmp_path)) == ["a/entry"]
    (tmp_path / "b").write_bytes(b"")
    assert "b" in changed_paths(before, tree_state(tmp_path))
    assert tree_state(tmp_path / "missing") == {}


def test_cache_info_and_prune_cover_the_zoo(tmp_path):
    from hdp.cli.main import main

    root = tmp_path / "c"
    old, new = root / "zoo" / "old-0123", root / "zoo" / "new-4567"
    for i, d in enumerate((old, new)):
        d.mkdir(parents=True)
        (d / "model.xml").write_bytes(b"<net/>")
        (d / "model.bin").write_bytes(bytes(3000))
        os.utime(d / "model.xml", (1000 + i, 1000 + i))
        os.utime(d / "model.bin", (1000 + i, 1000 + i))
    r = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(root), "--json"])
    doc = json.loads(r.output)
    assert doc["namespaces"]["zoo"] == {"entries": 2, "bytes": 2 * 3006} and doc["total_bytes"] == 2 * 3006
    r = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(root)])
    assert "zoo" in r.output and "not pruned" not in r.output, r.output
    r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", str(root), "--max-size", "4000"])
    assert r.exit_code == 0 and "removed 1 entries" in r.output, r.output
    assert not old.exists() and (new / "model.bin").exists()  # least recently used first, whole


def test_zoo_use_makes_an_entry_recent(tmp_path, monkeypatch):
    from hdp.zoo import models as zoo

    monkeypatch.setattr(zoo, "build", lambda spec: _tiny())
    xml = zoo.cached("mobilenet_v2", tmp_path / "zoo")
    os.utime(xml, (1000, 1000))
    assert zoo.cached("mobilenet_v2", tmp_path / "zoo") == xml and xml.stat().st_mtime > 1000


def _tiny():
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], np.float32, name="x")
    return ov.Model([ops.result(ops.relu(x))], [x], "tiny")

"""Serving plans on a local Ray (``hdp serve --ray auto``, hdp.runtime.serve.ray_run): a Compiled
Graph on one node, actor calls for replicas, a replica killed mid-run (every request id answered
exactly once), a stage left without replicas, a host or device the cluster lacks: one line each,
nothing left running. Slow: each test starts a Ray of its own (about 3 s) and its actors.

``HDP_RAY_FAULT_RUNS=10`` runs the killed-replica test 10 times in a row (default once)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from ray_plans import edit, write_plans

from hdp.cli.main import main
from hdp.ir.plan import read_plan
from hdp.runtime.serve.plan_run import read_check
from hdp.runtime.serve.ray_run import RayRunner, RayServeError, ray_available, serve_on_ray, start_ray

pytestmark = [pytest.mark.slow,  # without importing Ray at collection (make test collects this file too)
              pytest.mark.skipif(not ray_available(), reason="the Ray tests need Ray: pip install 'hdp[ray]'")]
FAULT_RUNS = int(os.environ.get("HDP_RAY_FAULT_RUNS", "1"))


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return write_plans(tmp_path_factory.mktemp("rayplans"))


def processes_naming(text: str, wait: float = 15.0) -> list[int]:
    """Pids of the processes whose command line names ``text`` (a cluster's temporary directory),
    after waiting up to ``wait`` seconds for them to be gone (a shut-down Ray's workers exit on
    their own a moment later)."""
    t0 = time.monotonic()
    while True:
        out = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if text.encode() in (p / "cmdline").read_bytes():
                        out.append(int(p.name))
                except OSError:
                    pass
        if not out or time.monotonic() - t0 > wait:
            return out
        time.sleep(0.2)


@pytest.fixture
def ray_tmp():
    """A short temporary directory for a local cluster (Ray's socket paths below it: 107 bytes at most)."""
    d = tempfile.mkdtemp(prefix="hdp-rt-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of the test's own: Ray must not write its token there (it lives in the environment)."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return h


def test_one_node_is_wired_by_a_compiled_graph_and_replicas_by_actor_calls(plans, home):
    r = CliRunner().invoke(main, ["serve", str(plans["pipe"]), "--ray", "auto", "--seconds", "1"])
    assert r.exit_code == 0, r.output
    assert "2 actors wired by compiled graph (every actor on one node)" in r.output
    assert "answered once each" in r.output and "match the unsplit model" in r.output
    assert "requests/s" in r.output and "p99" in r.output and "stage 1" in r.output
    r = CliRunner().invoke(main, ["serve", str(plans["mixed"]), "--ray", "auto", "--seconds", "1", "--requests", "3"])
    assert r.exit_code == 0, r.output
    assert "3 actors wired by actor calls (stage 1 has 2 replicas" in r.output
    assert "3 requests in flight" in r.output and "match the unsplit model" in r.output
    assert not (home / ".ray").exists()


@pytest.mark.parametrize("run", range(FAULT_RUNS))
def test_a_killed_replica_loses_no_request_and_answers_none_twice(plans, home, ray_tmp, run):
    d = plans["mixed"]
    plan = read_plan(d)
    ins, outs = read_check(d)
    tmp = ray_tmp
    session = start_ray("auto", tmp)
    try:
        with RayRunner(session.ray, plan, d, 4) as runner:
            assert runner.mode == "actor calls"
            got: dict[int, list] = {}
            by: dict[int, dict] = {}
            total, nxt, killed_at = 80, 0, None
            while len(got) < total:
                while nxt < total and runner.in_flight() < 4:
                    runner.submit(nxt, ins[nxt % 2], keep=True)
                    nxt += 1
                done = runner.next_done()
                assert done.rid not in got, f"request {done.rid} answered twice"
                got[done.rid] = done.outputs
                by[done.rid] = done.by
                if len(got) == 20:
                    runner.kill(1, 0)  # mid-run: 4 requests in flight, some held by this replica
                    killed_at = nxt
            assert sorted(got) == list(range(total)) and sum(runner.answered.values()) == total
            for rid, o in got.items():
                np.testing.assert_allclose(o[0], outs[rid % 2][0], rtol=1e-5, atol=1e-6)
            assert runner.events == ["stage 1 replica 0 (CPU) died (ActorDiedError); 1 replica of stage 1 left, its "
                                     "requests submitted to them again"]
            assert all(by[rid][1] == "1.1" for rid in range(killed_at, total))  # none ran on the dead replica
            # the last replica of stage 1 killed: one line, serving stops
            runner.submit(total, ins[0])
            runner.kill(1, 1)
            with pytest.raises(RayServeError, match=r"^stage 1 has no replica left \(.*\): serving stopped$") as e:
                runner.next_done(timeout=60)
            assert "\n" not in str(e.value)
    finally:
        session.close()
    assert processes_naming(tmp) == []


def test_the_fault_drill_of_a_served_plan_reports_the_ledger(plans, home, ray_tmp, tmp_path):
    tmp = ray_tmp
    r = serve_on_ray(plans["mixed"], ray="auto", requests=3, batches=2, per_batch=30, kill=(1, 1, 25), temp_dir=tmp)
    assert r.ok, r.error
    assert r.events[0].startswith("stage 1 replica 1 (CPU_B) died")
    assert r.submitted == r.answered and r.twice == [] and r.missing == []
    assert r.served.check_passed
    # a Compiled Graph has one replica per stage: a dead actor stops it in one line
    r = serve_on_ray(plans["pipe"], ray="auto", batches=2, per_batch=20, kill=(0, 0, 25), temp_dir=tmp)
    assert r.mode == "compiled graph"
    assert r.error == ("stage 0 replica 0 (CPU) died: the Compiled Graph has no replica left for stage 0: "
                       "serving stopped")
    assert processes_naming(tmp) == []


def test_a_host_or_device_the_cluster_lacks_is_one_line_and_nothing_is_left(plans, home, ray_tmp, tmp_path):
    tmp = ray_tmp
    r = serve_on_ray(plans["hosts"], ray="auto", seconds=1, temp_dir=tmp)  # a local Ray has no host 'a'
    assert r.error == ("host 'a': no node of the Ray cluster offers the resource 'hdp_host_a' (stage 0 replica 0 "
                       "(CPU on a); a node of host 'a' joins with ray start --resources '{\"hdp_host_a\": 1000}')")
    assert processes_naming(tmp) == []
    npu = tmp_path / "npu.plan"
    shutil.copytree(plans["pipe"], npu)

    def on_npu(p):
        p["devices"].append({"name": "NPU", "plugin": "NPU"})
        p["stages"][1]["replicas"][0]["device"] = "NPU"
        p["stages"][1]["blobs"][0]["device"] = "NPU"

    edit(npu, on_npu)
    r = serve_on_ray(npu, ray="auto", seconds=1, temp_dir=tmp)
    assert r.error.startswith("the driver's node (node ") and "has no device 'NPU' (stages[1].replicas[0]" in r.error
    assert "\n" not in r.error
    assert processes_naming(tmp) == []
    # the command line: the same one line, exit 2
    res = CliRunner().invoke(main, ["serve", str(npu), "--ray", "auto", "--seconds", "1"])
    assert res.exit_code == 2
    assert [ln for ln in res.output.splitlines() if ln.strip()] == [
        f"hdp: error: {npu}: not served on Ray: {r.error}"]


def test_an_actor_no_node_can_take_times_out_in_one_line(plans, home, ray_tmp):
    import ray

    from hdp.runtime.serve.ray_run import own_token

    own_token()
    # host a's resource exists, but an actor holds all of it: the replica's actor stays pending
    ray.init(address="local", num_cpus=1, include_dashboard=False, _temp_dir=ray_tmp, log_to_driver=False,
             resources={"hdp_host_a": 1, "hdp_host_b": 1000})
    try:
        @ray.remote(num_cpus=0, resources={"hdp_host_a": 1})
        class Hog:
            def ready(self):
                return True

        hog = Hog.remote()
        assert ray.get(hog.ready.remote(), timeout=60)
        with pytest.raises(RayServeError) as e:
            RayRunner(ray, read_plan(plans["hosts"]), plans["hosts"], 2, placement_timeout=5)
        assert str(e.value) == ("stage 0 replica 0 (CPU on a): not placed and loaded within 5 s (no node with the "
                                "resource 'hdp_host_a' took it; the host may lack room or its node is gone)")
    finally:
        ray.shutdown()
    assert processes_naming(ray_tmp) == []

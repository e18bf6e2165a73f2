"""``hdp serve --ray`` without a Ray cluster (hdp.runtime.serve.ray_run): the plan -> actor layout,
the wiring each plan gets, the one line without Ray, bad addresses and a blob that is not the one
the plan records, all refused before any Ray starts. Serving on a cluster: tests/test_ray_serve.py
and tests/test_two_host_bed.py (slow)."""

from __future__ import annotations

import hashlib
import socket
import sys

import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.ir.plan import PLAN_FILE, PlanBlob, PlanDevice, PlanPort, PlanReplica, PlanStage, ServingPlan, encode_plan
from hdp.runtime.serve import ray_run
from hdp.runtime.serve.ray_run import (
    RAY_MISSING,
    RayServeError,
    actor_layout,
    compiled_graph_refusal,
    driver_stages,
    import_ray,
    probe,
    producers,
    serve_on_ray,
)


def _blob(dev: str, stage: int, data: bytes = b"x") -> PlanBlob:
    return PlanBlob(device=dev, file=f"stage{stage}.{dev}.blob", bytes=len(data),
                    digest=hashlib.blake2b(data, digest_size=16).hexdigest())


def three_stages(hosts=("a", "a", "b", None)) -> ServingPlan:
    """stage 0 on CPU (host a), stage 1 on CPU (a) and CPU_B (b), stage 2 on CPU (host None) reading
    the model's input and both earlier stages."""
    h0, h1, h2, h3 = hosts
    return ServingPlan(
        shape="mixed", requests=3,
        stages=[PlanStage(replicas=[PlanReplica(device="CPU", host=h0)], inputs=[PlanPort(source="input", index=0)],
                          outputs=["0"], blobs=[_blob("CPU", 0)]),
                PlanStage(replicas=[PlanReplica(device="CPU", host=h1), PlanReplica(device="CPU_B", streams=2, host=h2)],
                          inputs=[PlanPort(source="stage", index=0)], outputs=["0"],
                          blobs=[_blob("CPU", 1), _blob("CPU_B", 1)]),
                PlanStage(replicas=[PlanReplica(device="CPU", host=h3)],
                          inputs=[PlanPort(source="stage", index=1), PlanPort(source="input", index=0),
                                  PlanPort(source="stage", index=0)], outputs=["0"], blobs=[_blob("CPU", 2)])],
        outputs=[PlanPort(source="stage", index=2)],
        devices=[PlanDevice(name="CPU", plugin="CPU"), PlanDevice(name="CPU_B", plugin="CPU", alias=True)])


def test_each_stage_replica_is_an_actor_pinned_to_its_host():
    plan = three_stages()
    lay = actor_layout(plan)
    assert [(a.stage, a.replica, a.device, a.streams, a.host) for a in lay] == [
        (0, 0, "CPU", 1, "a"), (1, 0, "CPU", 1, "a"), (1, 1, "CPU_B", 2, "b"), (2, 0, "CPU", 1, None)]
    assert [a.resources for a in lay] == [{"hdp_host_a": 0.001}, {"hdp_host_a": 0.001}, {"hdp_host_b": 0.001}, {}]
    assert lay[2].name == "stage 1 replica 1 (CPU_B on b)" and lay[3].name == "stage 2 replica 0 (CPU)"
    # what each stage's run is given, and what comes back to the driver
    assert [producers(plan, s) for s in range(3)] == [[], [0], [0, 1]]
    assert driver_stages(plan) == [2]
    # the wiring: a Compiled Graph only for one replica of one stream per stage, all on one node
    assert "stage 1 has 2 replicas, 3 streams" in compiled_graph_refusal(plan, ["n"] * 4)
    assert compiled_graph_refusal(plan, ["n1", "n2", "n1", "n1"]).startswith("actors on 2 nodes")
    single = plan.__class__(**{**{f: getattr(plan, f) for f in plan.__struct_fields__},
                               "stages": [plan.stages[0]], "shape": "single",
                               "outputs": [PlanPort(source="stage", index=0)]})
    assert compiled_graph_refusal(single, ["n"]) == ""
    assert driver_stages(single) == [0]


def test_a_placed_pipeline_is_refused_for_ray():
    plan = ServingPlan(shape="pipeline", requests=1, placed="placed.xml",
                       stages=[PlanStage(replicas=[PlanReplica(device="CPU")])],
                       devices=[PlanDevice(name="CPU", plugin="CPU")])
    with pytest.raises(InputError, match="runs under HETERO in one process; serve it without --ray"):
        actor_layout(plan)


def test_without_ray_one_line_says_how_to_install_it(tmp_path, monkeypatch):
    d = tmp_path / "p.plan"
    d.mkdir()
    (d / PLAN_FILE).write_bytes(encode_plan(three_stages()))
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(InputError) as e:
        import_ray()
    assert str(e.value) == RAY_MISSING == "--ray needs Ray: pip install 'hdp[ray]'"
    r = CliRunner().invoke(main, ["serve", str(d), "--ray", "auto"])
    assert r.exit_code != 0
    assert [ln for ln in r.output.splitlines() if ln.strip()] == [f"hdp: error: {RAY_MISSING}"]


def test_bad_ray_arguments_are_one_line(tmp_path):
    r = CliRunner().invoke(main, ["serve", str(tmp_path), "--ray", " "])
    assert r.exit_code == 2 and "--ray" in r.output and "Traceback" not in r.output
    with pytest.raises(RayServeError, match=r"--ray headnode: not auto and not an address \(host:port"):
        probe("headnode")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(RayServeError, match=rf"--ray 127.0.0.1:{port}: no Ray head node answers there") as e:
        probe(f"127.0.0.1:{port}", timeout=2)
    assert "\n" not in str(e.value)


def test_a_blob_that_is_not_the_recorded_one_is_refused_before_ray_starts(tmp_path, monkeypatch):
    d = tmp_path / "p.plan"
    d.mkdir()
    plan = three_stages(hosts=(None, None, None, None))
    (d / PLAN_FILE).write_bytes(encode_plan(plan))
    for st in plan.stages:
        for b in st.blobs:
            (d / b.file).write_bytes(b"x")
    (d / "stage1.CPU_B.blob").write_bytes(b"y")  # the same size, other bytes

    def no_ray(*a, **k):
        raise AssertionError("Ray started for a plan whose blobs do not match")

    monkeypatch.setattr(ray_run, "start_ray", no_ray)
    with pytest.raises(InputError, match=r"stage1\.CPU_B\.blob: its contents are not the ones plan\.json records"):
        serve_on_ray(d)
    (d / "stage1.CPU_B.blob").unlink()
    with pytest.raises(InputError, match=r"stage1\.CPU_B\.blob: missing"):
        serve_on_ray(d)

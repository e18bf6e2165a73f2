"""Serving plans for the Ray tests, written by hdp from a tiny CNN on the two-CPU bed and edited by
hand where the planner has no say (hosts, a pipeline kept as blobs, a device a host lacks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as op
from test_plan import plans_of, tiny_cnn

from hdp.ir.plan import PLAN_FILE
from hdp.pipeline.compile import compile_model
from hdp.runtime.serve.plan_write import write_plan
from hdp.target.target import load_target


def edit(plan_dir: Path, fn) -> Path:
    f = Path(plan_dir) / PLAN_FILE
    d = json.loads(f.read_text())
    fn(d)
    f.write_text(json.dumps(d, indent=1))
    return Path(plan_dir)


def cnn(path, channels: int, size: int, layers: int = 6):
    """:func:`test_plan.tiny_cnn` at ``channels`` x ``size`` x ``size`` (its tensors that many floats)."""
    rng = np.random.default_rng(0)
    x = op.parameter([1, channels, size, size], np.float32, name="x")
    h = x
    for i in range(layers):
        w = op.constant(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * (0.6 / channels ** 0.5))
        h2 = op.relu(op.convolution(h, w, [1, 1], [1, 1], [1, 1], [1, 1]))
        h = op.add(h, h2) if i % 2 else h2
    ov.save_model(ov.Model([op.result(h)], [x], "cnn"), str(path))
    return path


def write_plans(d: Path, channels: int = 0, size: int = 0) -> dict[str, Path]:
    """``mixed``: stage 0 on CPU, stage 1 on CPU and CPU_B (actor calls); ``pipe``: the same two
    stages, one replica each, as blobs (a Compiled Graph on one node); ``hosts``: ``pipe`` with
    stage 0 on host a and stage 1 on host b; ``mixed_hosts``: ``mixed`` with stage 0 and stage 1's
    CPU replica on host a, its CPU_B replica on host b. The model: the tiny CNN, or :func:`cnn`
    at ``channels`` x ``size``."""
    xml = cnn(d / "cnn.xml", channels, size) if channels else tiny_cnn(d / "tiny.xml")
    tgt = load_target("virtual-2x1")
    r = compile_model(xml, d / "p.xml", tgt, method="single:CPU", check=False, compare=False)
    k = r.module.partition.group_device.shape[0]
    mixed = d / "mixed.plan"
    write_plan(r.module, mixed, tgt, requests=2, plan=plans_of(k)["mixed"])
    pipe = d / "pipe.plan"
    shutil.copytree(mixed, pipe)

    def one_replica(p):
        st = p["stages"][1]
        st["replicas"] = [x for x in st["replicas"] if x["device"] == "CPU_B"]
        st["blobs"] = [x for x in st["blobs"] if x["device"] == "CPU_B"]
        p["shape"] = "pipeline"

    edit(pipe, one_replica)
    (pipe / "stage1.CPU.blob").unlink()
    hosts = d / "hosts.plan"
    shutil.copytree(pipe, hosts)

    def on_hosts(p):
        p["stages"][0]["replicas"][0]["host"] = "a"
        p["stages"][1]["replicas"][0]["host"] = "b"

    edit(hosts, on_hosts)
    mixed_hosts = d / "mixed_hosts.plan"
    shutil.copytree(mixed, mixed_hosts)

    def mixed_on_hosts(p):
        p["stages"][0]["replicas"][0]["host"] = "a"
        for r in p["stages"][1]["replicas"]:
            r["host"] = "a" if r["device"] == "CPU" else "b"

    edit(mixed_hosts, mixed_on_hosts)
    return {"mixed": mixed, "pipe": pipe, "hosts": hosts, "mixed_hosts": mixed_hosts}

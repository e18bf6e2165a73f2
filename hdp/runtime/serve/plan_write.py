"""Writing a serving plan: ``plan.json``, one compiled blob per stage and device, the seeded check.

:func:`write_plan` takes a Module whose placement was chosen with a plan (the ``plan`` record a
placer left in the placement's info, :meth:`hdp.placement.plan.GroupPlan.to_text`) and writes its
directory all or nothing (a temporary directory beside it, then a rename,
:func:`hdp.base.fsutil.commit_dir`):

- a ``pipeline`` (stages of one replica and one stream each) is today's placed model: ``placed.xml``
  (:func:`hdp.runtime.placed.model.write_placed`, the placement that ``hdp compile``'s check
  already ran under HETERO) and ``plan.json`` naming it;
- every other shape is cut into its stages' sub-models: the source model read again, every op given
  its stage, the placement rules' rewrite applied over the stages as over devices (constant data
  and shape chains copied into every stage that reads them, static ShapeOfs folded:
  :func:`hdp.ir.openvino_legalize.legalize`), cut whole per stage
  (:func:`hdp.runtime.placed.split.stage_split`); each stage is compiled on each device one of its
  replicas runs on (its streams as ``NUM_STREAMS``), exported, imported back and the plan run on
  seeded inputs through :class:`hdp.runtime.serve.plan_run.PlanRunner` against the unsplit model on
  the plain CPU plugin in f32, at the tolerance ``hdp compile``'s check holds a placement to
  (:func:`hdp.runtime.serve.verify.tolerance`, widened to twice the error of its least precise
  device alone). A plan that does not match is not written.

Beside them ``check.npz`` keeps the seeded requests' inputs and the unsplit model's outputs, so
``hdp serve`` checks its first requests without the source model. A whole-model ``replicas`` plan
also records what ``AUTO:<devices>`` with ``PERFORMANCE_HINT=CUMULATIVE_THROUGHPUT`` would run
(:func:`auto_devices`, ``EXECUTION_DEVICES``): the plan's own lanes drive the replicas either way.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import numpy as np

from hdp.base.errors import InputError
from hdp.base.fsutil import commit_dir, temp_dir
from hdp.ir.openvino_frontend import module_specialisation, reread_source
from hdp.ir.openvino_legalize import legalize
from hdp.ir.plan import (
    PLAN_FILE,
    PlanBlob,
    PlanDevice,
    PlanPort,
    PlanReplica,
    PlanSimulated,
    PlanStage,
    ServingPlan,
    encode_plan,
    plan_shape,
)
from hdp.ir.types import Array, Module, Placement
from hdp.placement.plan import GroupPlan
from hdp.placement.structure import PLACED, roles
from hdp.runtime.measure.worker import ov_message, random_inputs
from hdp.runtime.placed.executor import lane_cores
from hdp.runtime.placed.model import write_placed
from hdp.runtime.placed.split import stage_split
from hdp.runtime.serve.plan_run import CHECK_FILE, PlanRunner, ReplicaRunner, relative_error, replica_config
from hdp.runtime.serve.verify import PRECISION_MARGIN, tolerance
from hdp.target.devices import make_core, plugin_library
from hdp.target.target import Target

#: Seeded requests run through a written plan and recorded in ``check.npz``.
CHECK_REQUESTS = 2


def plan_of(module: Module) -> GroupPlan | None:
    """The plan a placer chose for ``module``'s placement (None: the placement is the whole story)."""
    pl = module.partition
    text = pl.info.get("plan") if pl is not None else None
    if not text:
        return None
    try:
        return GroupPlan.from_text(text, int(pl.group_device.shape[0]))
    except ValueError as e:
        raise InputError(f"the module's plan record is broken ({e}); place it again") from None


def stage_of_ops(anchor: np.ndarray, plan: GroupPlan) -> np.ndarray:
    """The stage of every op from the group each op shows (``anchor``, a partition's ``group_of``):
    its tie group's (constant data and shape chains: their first consumer's; ops no group
    anchors: stage 0)."""
    anchor = np.asarray(anchor, np.int64)
    out = np.zeros(anchor.shape[0], np.int64)
    has = anchor >= 0
    out[has] = np.asarray(plan.stage_of, np.int64)[anchor[has]]
    return out


def port_text(p) -> str:
    """``name type[shape]`` of a model port, for people."""
    name = p.get_any_name() if p.get_names() else p.get_node().get_friendly_name()
    return f"{name} {p.get_element_type().get_type_name()}{p.get_partial_shape()}"


def _devices(target: Target, names) -> list[PlanDevice]:
    out = []
    for n in names:
        d = target.device(n)
        lib = os.path.basename(plugin_library(d.plugin)) if d.alias else ""
        out.append(PlanDevice(name=n, plugin=d.plugin_name, alias=d.alias, library=lib,
                              config={str(k): str(v) for k, v in d.config.items()}))
    return out


def _reference(module: Module, seeds: int):
    """(inputs, outputs) of ``seeds`` seeded requests at the specialisation's shapes, run by the
    unsplit model on the plain CPU plugin in f32 (f32 KV cache)."""
    import openvino as ov

    spec = module_specialisation(module)
    model, _ = reread_source(module)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    shapes = [i.shape for i in spec.inputs]
    ins, outs = [], []
    for seed in range(seeds):
        x = random_inputs(compiled, seed=seed, shapes=shapes)
        req = compiled.create_infer_request()
        for i, a in enumerate(x):
            req.set_input_tensor(i, ov.Tensor(a))
        req.infer()
        ins.append(x)
        outs.append([np.array(req.get_output_tensor(j).data, copy=True) for j in range(len(compiled.outputs))])
    return model, compiled, ins, outs


def _save_check(path: Path, ins, outs) -> None:
    arrays = {"requests": np.array(len(ins)), "inputs": np.array(len(ins[0]) if ins else 0),
              "outputs": np.array(len(outs[0]) if outs else 0)}
    for r, (x, y) in enumerate(zip(ins, outs)):
        arrays.update({f"in{r}_{i}": a for i, a in enumerate(x)})
        arrays.update({f"out{r}_{j}": a for j, a in enumerate(y)})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


def auto_devices(core, model, devices: list[str]) -> list[str] | None:
    """What ``AUTO:<devices>`` with ``PERFORMANCE_HINT=CUMULATIVE_THROUGHPUT`` runs the model on
    (its ``EXECUTION_DEVICES``), or None when it does not compile."""
    try:
        compiled = core.compile_model(model, "AUTO:" + ",".join(devices), {"PERFORMANCE_HINT": "CUMULATIVE_THROUGHPUT"})
        ran = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
    except RuntimeError:
        return None
    del compiled
    return ran


def check_output(out: Path) -> None:
    """InputError unless ``out`` can take a plan: absent, or a directory hdp wrote one to."""
    if (out.exists() or out.is_symlink()) and not (out.is_dir() and (out / PLAN_FILE).is_file()):
        raise InputError(f"{out}: exists and is not a directory hdp wrote (no {PLAN_FILE} in it); not replaced")


def write_plan(module: Module, out_dir: str | os.PathLike, target: Target, *, requests: int,
               simulated: PlanSimulated | None = None, plan: GroupPlan | None = None, anchor=None,
               devices: tuple[str, ...] | None = None, method: str = "", auto_check: bool = True) -> ServingPlan:
    """Write ``module``'s plan (``plan``, default :func:`plan_of`) to the directory ``out_dir``
    (see the module docstring); returns the plan written. ``anchor`` and ``devices``: the group each
    op shows and the device names of the plan's indices (default: the module's partition's); a
    placer writing a candidate before its partition exists gives them. ``auto_check``: record what
    AUTO would run a whole-model replicas plan on (one more compile per device). InputError
    (nothing written) when a stage does not compile or import on a device, or the plan does not
    match the unsplit model."""
    import openvino as ov

    out = Path(out_dir)
    check_output(out)
    gplan = plan if plan is not None else plan_of(module)
    if gplan is None:
        raise InputError("the module's placement carries no serving plan; place it with --objective throughput")
    pl = module.partition
    if anchor is None or devices is None:
        if pl is None:
            raise InputError("the module has no partition; place it first")
        anchor, devices = pl.group_of.numpy(), pl.devices
    method = method or (pl.method if pl is not None else "")
    if gplan.shape == "pipeline":
        return _write_pipeline(module, out, target, gplan, requests, simulated, anchor, devices, method)
    stage_op = stage_of_ops(anchor, gplan)
    names = [f"hdp_stage_{int(s)}" for s in stage_op]
    ref_model, ref_compiled, ins, outs = _reference(module, CHECK_REQUESTS)
    model, ov_ops = reread_source(module)
    placed = roles(module.graph) == PLACED
    if gplan.n_stages > 1:
        legalize(model, ov_ops, placed, names)
    else:
        for op in model.get_ordered_ops():
            op.get_rt_info()["user_dataaffinity"] = names[0]
    split = stage_split(model, [f"hdp_stage_{s}" for s in range(gplan.n_stages)])
    order = [int(sub.device.rsplit("_", 1)[1]) for sub in split.subgraphs]
    if any(o[0] == "const" for o in split.outputs):
        raise InputError("a model output is a constant; a plan cannot serve it (a placed model can)")
    # stages without a compute op (only inputs or outputs) are no sub-model: their groups go with the next stage
    groups_of = [np.flatnonzero(np.asarray(gplan.stage_of) == s).tolist() for s in range(gplan.n_stages)]
    extra: dict[int, list[int]] = {}
    kept = set(order)
    for s in range(gplan.n_stages):
        if s not in kept:
            nxt = min((o for o in order if o > s), default=max(order))
            extra.setdefault(nxt, []).extend(groups_of[s])
    used = list(dict.fromkeys(devices[r.device] for s in order for r in gplan.replicas[s]))
    core = make_core(target, used)
    cores = lane_cores(target, used)
    stages: list[PlanStage] = []
    runners = []
    blobs: dict[str, bytes] = {}
    notes: list[str] = []
    t0 = time.perf_counter()
    for i, (s, sub, sub_model) in enumerate(zip(order, split.subgraphs, split.models)):
        reps, pblobs, rrun = [], [], []
        for r in gplan.replicas[s]:
            dev = devices[r.device]
            cfg = replica_config(target, dev, r.streams)
            try:
                compiled = core.compile_model(sub_model, dev, cfg)
                data = compiled.export_model()
                data = data.getvalue() if hasattr(data, "getvalue") else bytes(data)
                again = core.import_model(data, dev, cfg)
            except RuntimeError as e:
                raise InputError(f"stage {i} ({len(sub.ops)} ops from '{sub.ops[0].get_friendly_name()}') does not "
                                 f"compile, export and import on {dev}: {ov_message(e)}") from None
            del compiled
            fname = f"stage{i}.{dev}.blob"
            blobs[fname] = data
            pblobs.append(PlanBlob(device=dev, file=fname, bytes=len(data),
                                   digest=hashlib.blake2b(data, digest_size=16).hexdigest()))
            reps.append(PlanReplica(device=dev, streams=int(r.streams), host=target.host_of(dev)))
            rrun.append(ReplicaRunner(again, dev, int(r.streams), cores.get(dev), f"s{i}-{dev}"))
        ports = [PlanPort(source="input", index=int(x[1])) if x[0] == "input"
                 else PlanPort(source="stage", index=int(x[1]), output=int(x[2])) for x in sub.sources]
        stages.append(PlanStage(groups=sorted(groups_of[s] + extra.get(s, [])), ops=len(sub.ops), replicas=reps,
                                inputs=ports, outputs=[str(k) for k in range(len(sub.outputs))], blobs=pblobs))
        runners.append((rrun, ports, len(sub.outputs)))
    outputs = [PlanPort(source="input", index=int(x[1])) if x[0] == "input"
               else PlanPort(source="stage", index=int(x[1]), output=int(x[2])) for x in split.outputs]
    compile_s = time.perf_counter() - t0
    # the plan, run as hdp serve runs it, against the unsplit model
    runner = PlanRunner(runners, outputs, max(requests, 1)).start()
    try:
        got = [runner.run(x) for x in ins]
    except RuntimeError as e:
        raise InputError(f"the plan does not run: {ov_message(e)}") from None
    finally:
        runner.close()
    tol = tolerance(target, used)
    floor = 0.0
    if tol > 1e-3:  # a device of reduced precision: held to twice what it does to the whole model alone
        for dev in used:
            c = core.compile_model(ref_model, dev, {})
            req = c.create_infer_request()
            for j, a in enumerate(ins[0]):
                req.set_input_tensor(j, ov.Tensor(a))
            req.infer()
            floor = max(floor, *(relative_error(np.array(req.get_output_tensor(j).data), outs[0][j])
                                 for j in range(len(outs[0]))))
        tol = max(tol, PRECISION_MARGIN * floor)
    worst = max((relative_error(a, b) for g, w in zip(got, outs) for a, b in zip(g, w)), default=0.0)
    if not worst <= tol:
        raise InputError(f"{out}: not written: the plan's outputs differ from the unsplit model's (relative error "
                         f"{worst:.2e} > {tol:.1e})")
    shape = plan_shape(stages)
    if shape == "replicas" and auto_check:
        ran = auto_devices(core, ref_model, used)
        want = used
        if ran is None:
            notes.append(f"AUTO:{','.join(want)} (CUMULATIVE_THROUGHPUT) does not compile this model here; "
                         f"hdp's lanes drive the replicas")
        elif sorted(ran) != sorted(want):
            notes.append(f"AUTO:{','.join(want)} with CUMULATIVE_THROUGHPUT would run on {', '.join(ran) or 'nothing'} "
                         f"alone (its EXECUTION_DEVICES); hdp's lanes drive the replicas")
        else:
            notes.append(f"AUTO:{','.join(want)} with CUMULATIVE_THROUGHPUT runs every replica's device "
                         f"(EXECUTION_DEVICES {', '.join(ran)}); hdp's lanes drive the replicas from their blobs")
    notes.append(f"written and checked: outputs match the unsplit model (relative error {worst:.1e} <= {tol:.1e}); "
                 f"compiling and exporting the stages took {compile_s:.1f} s")
    spec = module.meta.get("specialisation", "")
    result = ServingPlan(shape=shape, requests=int(requests), stages=stages, outputs=outputs,
                         devices=_devices(target, used), model=module.meta.get("source", ""), target=target.name,
                         method=method, openvino=ov.get_version(), specialisation=spec,
                         inputs=[port_text(p) for p in ref_compiled.inputs],
                         output_names=[port_text(p) for p in ref_compiled.outputs], simulated=simulated, notes=notes)
    with temp_dir(out.parent, out.name) as tmp:
        d = tmp / "plan"
        d.mkdir()
        for fname, data in blobs.items():
            (d / fname).write_bytes(data)
        _save_check(d / CHECK_FILE, ins, outs)
        (d / PLAN_FILE).write_bytes(encode_plan(result))
        commit_dir(d, out, PLAN_FILE)
    return result


def _write_pipeline(module: Module, out: Path, target: Target, gplan: GroupPlan, requests: int,
                    simulated: PlanSimulated | None, anchor, devices, method: str) -> ServingPlan:
    """A pipeline plan: its placed model (the plan's placement: each stage on its replica's device)
    and ``plan.json`` naming it."""
    import openvino as ov

    anchor = np.asarray(anchor, np.int64)
    dev_of = np.zeros(anchor.shape[0], np.int16)
    has = anchor >= 0
    dev_of[has] = gplan.representative()[anchor[has]]
    old = module.placement
    placed = module.replace(placement=Placement(method=method or (old.method if old else "plan"), devices=tuple(devices),
                                                device_of=Array.of(dev_of, np.int16),
                                                info=dict(old.info) if old is not None else {}))
    _, ref_compiled, ins, outs = _reference(module, CHECK_REQUESTS)
    ops = np.bincount(stage_of_ops(anchor, gplan)[has], minlength=gplan.n_stages)
    stages = [PlanStage(groups=np.flatnonzero(np.asarray(gplan.stage_of) == s).tolist(), ops=int(ops[s]),
                        replicas=[PlanReplica(device=devices[r.device], streams=r.streams,
                                              host=target.host_of(devices[r.device])) for r in reps])
              for s, reps in enumerate(gplan.replicas)]
    used = list(dict.fromkeys(r.device for st in stages for r in st.replicas))
    result = ServingPlan(shape="pipeline", requests=int(requests), stages=stages, devices=_devices(target, used),
                         placed="placed.xml", model=module.meta.get("source", ""), target=target.name,
                         method=placed.placement.method, openvino=ov.get_version(),
                         specialisation=module.meta.get("specialisation", ""),
                         inputs=[port_text(p) for p in ref_compiled.inputs],
                         output_names=[port_text(p) for p in ref_compiled.outputs], simulated=simulated,
                         notes=["a pipeline of single devices: its placed model, run under HETERO"])
    with temp_dir(out.parent, out.name) as tmp:
        d = tmp / "plan"
        d.mkdir()
        write_placed(placed, d / "placed.xml", target)
        _save_check(d / CHECK_FILE, ins, outs)
        (d / PLAN_FILE).write_bytes(encode_plan(result))
        commit_dir(d, out, PLAN_FILE)
    return result

"""Writing, reading and running placed models (what ``hdp compile`` writes).

:func:`write_placed` writes a Module's placement over its source model: the source read again,
every op annotated (:mod:`hdp.ir.openvino_backend`), and, over several devices, the placement
rules' rewrite (:func:`hdp.ir.openvino_legalize.legalize` with the roles of
:mod:`hdp.placement.structure`), saved as an atomic ``.xml``/``.bin`` pair.

OpenVINO saves per-op ``user_data`` rt_info but reads it back under the key ``user_dataaffinity``,
while HETERO looks for ``affinity``. The loader copies one to the other::
    from hdp.runtime.placed.model import compile_placed
    compiled = compile_placed("placed.xml")        # HETERO over the devices hdp recorded
    result = compiled({0: x})
    compiled = compile_placed("placed.xml", execution="concurrent")  # every device at once

With ``execution="concurrent"`` the device subgraphs run concurrently (:mod:`hdp.runtime.placed.executor`)
instead of one after another under HETERO; the file is the same.

``compile_placed`` also registers aliased devices (such as the ``virtual`` target's ``CPU_B``) from
the target recorded in the model, so a placed model runs in a fresh process.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.fsutil import commit_pair, kill_point, temp_dir
from hdp.base.validation import convert
from hdp.ir.openvino_backend import WEIGHTS_DIGEST_KEY, annotate, save_placed, save_uncommitted, weights_digest
from hdp.ir.openvino_frontend import reread_source
from hdp.ir.openvino_legalize import legalize
from hdp.ir.openvino_read import read_model
from hdp.ir.types import Module
from hdp.placement.structure import PLACED, roles
from hdp.target.capacity import capacities, parse_caps_record
from hdp.target.devices import hetero_config, hetero_name, make_core
from hdp.target.target import Target, devices_target, target_from

SAVED_KEY = "user_dataaffinity"


def legalize_placed(model, ov_ops, module: Module) -> dict:
    """Apply the placement rules' rewrite (:func:`hdp.ir.openvino_legalize.legalize`) when the
    placement uses several devices; one device needs none, so the written model is then the
    original graph with affinities."""


    pl = module.placement
    dev = pl.device_of.numpy()
    if np.unique(dev).shape[0] < 2:
        return {"copies": 0, "folded_shapes": 0}
    stats = legalize(model, ov_ops, roles(module.graph) == PLACED, [pl.devices[int(d)] for d in dev])
    model.set_rt_info(str(stats["copies"]), ["hdp", "copies"])
    model.set_rt_info(str(stats["folded_shapes"]), ["hdp", "folded_shapes"])
    return stats


def write_placed(module: Module, out_xml: str | os.PathLike, target=None, check=None) -> Path:
    """Write ``module``'s placement as ``out_xml`` and its ``.bin``: the module's source model read
    again, every op's affinity set, legalized over several devices, saved atomically with the
    ``.bin`` digest recorded (:func:`hdp.ir.openvino_backend.save_placed`; ``check``, if given,
    runs on the temporary ``.xml`` and a failure leaves no output)."""

    if module.placement is None:
        raise InputError("the module has no placement; run the partition and assign passes first")
    out_xml = Path(out_xml)
    if out_xml.suffix.lower() != ".xml":
        raise InputError(f"{out_xml}: the placed model must be written to a .xml path")
    model, ov_ops = reread_source(module)
    annotate(model, ov_ops, module, target)
    legalize_placed(model, ov_ops, module)
    return save_placed(model, out_xml, check)


class StagedPlaced:
    """:func:`write_placed` in two steps, so that the file checked is the file committed:
    :meth:`stage` saves a module's placement (as :func:`write_placed` builds it) in a private
    temporary directory beside ``out_xml``, each call replacing the last, and returns the temporary
    ``.xml``; :meth:`commit` moves the last pair staged onto ``out_xml``
    (:func:`hdp.base.fsutil.commit_pair`), only for that very module. :meth:`close` removes whatever
    was not committed."""

    def __init__(self, out_xml: str | os.PathLike, target: Target | None = None):
        self.out_xml = Path(out_xml)
        self.target = target
        self.module: Module | None = None  # the module whose placement is staged
        self.xml: Path | None = None
        self._ctx = None  # the temporary directory's context, entered at the first stage
        self._count = 0

    def stage(self, module: Module) -> Path:
        if module.placement is None:
            raise InputError("the module has no placement; run the partition and assign passes first")
        if self.out_xml.suffix.lower() != ".xml":
            raise InputError(f"{self.out_xml}: the placed model must be written to a .xml path")
        if self._ctx is None:
            ctx = temp_dir(self.out_xml.parent, self.out_xml.name)
            self._dir = ctx.__enter__()
            self._ctx = ctx
        if self.xml is not None:  # only the last placement staged is kept
            for f in (self.xml, self.xml.with_suffix(".bin")):
                f.unlink(missing_ok=True)
        self.module, self.xml = None, None
        self._count += 1
        xml = self._dir / f"placed-{self._count}.xml"
        model, ov_ops = reread_source(module)
        annotate(model, ov_ops, module, self.target)
        legalize_placed(model, ov_ops, module)
        save_uncommitted(model, xml, self.out_xml)
        self.module, self.xml = module, xml
        return xml

    def commit(self, module: Module) -> bool:
        """Commit the staged pair onto ``out_xml`` if it is ``module``'s; False (nothing done) if not."""

        if self.module is None or self.module is not module:
            return False
        kill_point("placed-saved")
        commit_pair(self.xml, self.out_xml)
        self.module = self.xml = None
        return True

    def close(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(None, None, None)
        self.module = self.xml = None


@dataclass
class PlacedModel:
    model: object  # ov.Model with rt_info["affinity"] set on every op
    devices: list[str]
    method: str
    target: Target
    used: list[str] = field(default_factory=list)  # the devices some op is placed on
    #: ``--memory`` caps it was placed under, ``(device, bytes)`` (:mod:`hdp.target.capacity`)
    memory: tuple[tuple[str, int], ...] = ()

    def capacities(self):
        """Bytes per device of :attr:`devices`: the caps it was placed under (``--memory`` over the
        recorded target's, as :func:`hdp.target.capacity.capacities` reads them)."""

        return capacities(self.target, self.memory)


def model_info(model, key: str) -> str | None:
    """The model-level rt_info ``<hdp><key>`` as a string (None: absent)."""
    try:
        return model.get_rt_info(["hdp", key]).astype(str)
    except RuntimeError:
        return None


def ops_placed(model) -> dict[str, int] | None:
    """The ops hdp placed on each device, as the placed model records them (``hdp/ops_placed``:
    the lowered model's ops, before the copies of constants written for other devices); None for a
    file that does not record it (written by an older hdp)."""
    text = model_info(model, "ops_placed")
    if not text:
        return None
    out: dict[str, int] = {}
    for item in text.split(","):
        name, _, n = item.partition("=")
        try:
            out[name] = int(n)
        except ValueError:
            return None
    return out


def placed_count_text(counts: dict[str, int]) -> str:
    """``157 ops placed (CPU 42, CPU_B 115)``."""
    return f"{sum(counts.values())} ops placed ({', '.join(f'{d} {n}' for d, n in counts.items())})"


def restore_affinity(model, source: str = "<model>") -> list[str]:
    """Copy ``user_dataaffinity`` to ``affinity`` on every op; return the devices in use.

    Raises InputError if some ops have an affinity and others do not (HETERO would fail).
    """
    used, missing = [], []
    for op in model.get_ordered_ops():
        rt = op.get_rt_info()
        if SAVED_KEY in rt:
            dev = rt[SAVED_KEY].astype(str)
        elif "affinity" in rt:
            dev = rt["affinity"].astype(str)
        else:
            missing.append(op.get_friendly_name())
            continue
        rt["affinity"] = dev
        if dev not in used:
            used.append(dev)
    if missing and used:
        raise InputError(f"{source}: op '{missing[0]}' has no affinity ({len(missing)} ops lack one)")
    if not used:
        raise InputError(f"{source}: no op carries an affinity; not a placed model")
    return used


Seconds = Annotated[float, Meta(ge=0, le=1e9)]


class SimRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What ``hdp compile`` simulated of a placement, as the placed model records it (``hdp/sim_*``,
    written by :func:`hdp.ir.openvino_backend.annotate`): read back once, bounded as declared."""

    simulated: Seconds | None = None  # one request's simulated latency
    period: Seconds | None = None  # throughput: seconds per request with ``requests`` in flight
    requests: Annotated[int, Meta(ge=1, le=4096)] | None = None
    goal: str = ""
    singles: str = ""  # DEV=SECONDS,... each device alone


def sim_record(model, source: str | os.PathLike = "<model>") -> SimRecord:
    """The :class:`SimRecord` of a placed ``ov.Model``; InputError naming the file and the field."""
    raw = {k: v for k in SimRecord.__struct_fields__ if (v := model_info(model, f"sim_{k}")) is not None}
    return convert(raw, SimRecord, lambda path, what: f"{source}: hdp record sim_{path} {what}", strict=False)


def read_placed(xml: str | os.PathLike) -> PlacedModel:
    xml = Path(xml)
    return placed_from_model(read_model(xml), xml)


def check_weights(model, xml: str | os.PathLike) -> None:
    """InputError when the ``.bin`` beside ``xml`` is not the one hdp wrote with it (a pair mixed
    by a crash, a copy or a concurrent writer). Models without the record pass unchecked."""

    want = model_info(model, WEIGHTS_DIGEST_KEY)
    if not want:
        return
    bin_path = Path(xml).with_suffix(".bin")
    try:
        st = bin_path.stat()
        stamp = (str(bin_path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        stamp = None
    got = _digests.get(stamp) if stamp else None
    if got is None:
        got = weights_digest(bin_path)
        if stamp:
            _digests[stamp] = got
    if got != want:
        raise InputError(f"{bin_path}: these weights are not the ones written with {Path(xml).name} "
                         f"(a mismatched or half-written pair); compile the model again")


_digests: dict[tuple, str] = {}


def weight_bytes_by_device(placed: "PlacedModel") -> dict[str, int]:
    """Stored bytes of the Constants each device gets in a placed model, as written (a constant
    the model gives each device its own copy of counts on each)."""
    out = {d: 0 for d in placed.devices}
    for op in placed.model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            dev = op.get_rt_info()["affinity"].astype(str)
            out[dev] = out.get(dev, 0) + int(op.get_byte_size())
    return out


def placed_from_model(model, xml: str | os.PathLike = "<model>") -> PlacedModel:
    """The placement carried by an already-read ``ov.Model`` (affinities restored in place);
    with the file ``xml`` it was read from, its weights are checked against the recorded digest."""
    if str(xml) != "<model>":
        check_weights(model, xml)
    used = restore_affinity(model, str(xml))
    devs = (model_info(model, "devices") or "").split(",")
    devs = [d for d in devs if d] or used
    for d in used:
        if d not in devs:
            raise InputError(f"{xml}: an op is placed on '{d}', which is not in the model's device list {devs}")
    method = model_info(model, "method") or "unknown"
    tjson = model_info(model, "target")
    if tjson:
        try:
            target = target_from(json.loads(tjson), f"{xml}: hdp target record")
        except (ValueError, RecursionError) as e:
            raise InputError(f"{xml}: invalid hdp target record: {e}") from None
    else:
        target = devices_target(devs)
    memory: tuple = ()
    caps = model_info(model, "memory_caps")
    if caps:
        try:
            memory = parse_caps_record(caps)
            for name, _ in memory:
                target.device(name)
        except InputError as e:
            raise InputError(f"{xml}: invalid hdp memory record: {e}") from None
    return PlacedModel(model=model, devices=devs, method=method, target=target, used=list(used), memory=memory)


#: Cores made by compile_placed, kept for the life of the process: a compiled model outlives the
#: function, and one whose Core (with its registered aliased devices) is gone crashes on
#: ``export_model`` (segfault, OpenVINO 2026.4.1).
_CORES: dict[tuple[str, tuple[str, ...]], object] = {}


EXECUTIONS = ("sequential", "concurrent")


def compile_placed(xml: str | os.PathLike, target: Target | None = None, config: dict | None = None,
                   core=None, *, placed: PlacedModel | None = None, devices: list[str] | None = None,
                   execution: str = "sequential"):
    """Compile a placed model with HETERO over its devices; returns an ``ov.CompiledModel``.

    ``placed``: the model already read by :func:`read_placed` from ``xml``; ``devices``: the
    HETERO device list (default: every device the model records). ``execution="concurrent"``
    returns a :class:`hdp.runtime.placed.executor.ConcurrentModel` instead: the device subgraphs
    compiled one by one and run at once, used like a compiled model."""
    if execution not in EXECUTIONS:
        raise InputError(f"execution must be one of {', '.join(EXECUTIONS)}, got '{execution}'")

    pm = placed or read_placed(xml)
    t = target or pm.target
    for d in pm.devices:
        t.device(d)  # raises InputError naming an unknown device
    modeled = [d for d in pm.used if t.device(d).kind != "real"]
    if modeled:
        raise InputError(f"{xml}: placed on {', '.join(modeled)}, modeled device(s) of target '{t.name}'; "
                         "it cannot run on this host (its latency is the simulated one hdp compile "
                         "printed)")
    devices = list(devices or pm.devices)
    if core is None:
        key = (msgspec.json.encode(t).decode(), tuple(devices))
        if key not in _CORES:
            _CORES[key] = make_core(t, devices)
        core = _CORES[key]
    if execution == "concurrent":
        # lazy: the executor's split imports Numba's kernels (0.2-0.7 s of every measuring worker's start)
        from hdp.runtime.placed.executor import compile_concurrent

        return compile_concurrent(pm.model, t, core, devices, config, source=str(xml))
    try:
        return core.compile_model(pm.model, hetero_name(devices), hetero_config(t, devices, config))
    except RuntimeError as e:
        raise InputError(f"{xml}: HETERO compile failed: {str(e).strip().splitlines()[-1]}") from None

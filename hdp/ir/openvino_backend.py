"""Backend: the placed model as OpenVINO writes it, every op annotated with its device.

The written model is the user's original, read fresh from the module's source file: dynamic
shapes, names, rt_info and weights as they were (only inputs of dynamic element type or rank take
the specialisation's, since no device compiles those; see
:func:`hdp.ir.specialise.refine_for_devices`). Ops are matched to the module's by position
and structure (:func:`hdp.ir.op_identity.check_structure`), never by name. Each layer (Parameter, Constant and Result included) carries
``<rt_info><user_data name="affinity" value="DEVICE"/></rt_info>``; the model-level rt_info
``<hdp>`` records the device list, the ops placed on each device (``ops_placed``: the module's ops,
before the copies of constants the rules add), the method, the target, the ``--memory`` caps it was placed
under, the module digest and the digest of the ``.bin`` written with it (so a loader detects a
mismatched pair). Weights are
written uncompressed, so outputs equal the source model's.

This module knows OpenVINO and the IR, not the placement rules: :func:`hdp.runtime.placed.model.write_placed`
reads the source again, calls :func:`annotate`, applies the rules' rewrite
(:func:`hdp.ir.openvino_legalize.legalize`, given which ops a placement decides) and saves with
:func:`save_placed`. :func:`hdp.runtime.placed.model.compile_placed` runs the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

import msgspec

from hdp.base.errors import InputError
from hdp.base.fsutil import commit_pair, kill_point, temp_dir, write_error
from hdp.ir import serde
from hdp.ir.types import Module

AFFINITY_KEY = "user_dataaffinity"  # saved as <user_data name="affinity" .../>
WEIGHTS_DIGEST_KEY = "weights_digest"  # model rt_info <hdp><weights_digest value=.../>: the .bin's blake2b


def annotate(model, ov_ops, module: Module, target=None) -> None:
    """Set every op's affinity on ``model`` (``ov_ops[i]`` is ``module.graph.ops[i]``, as
    :func:`~hdp.ir.openvino_frontend.reread_source` returns them)."""
    pl = module.placement
    devs = pl.devices
    dev_of = pl.device_of.numpy()
    if len(ov_ops) != dev_of.shape[0]:
        raise InputError(f"the placement has {dev_of.shape[0]} ops, the model {len(ov_ops)}")
    for op, d in zip(ov_ops, dev_of):
        op.get_rt_info()[AFFINITY_KEY] = devs[int(d)]
    model.set_rt_info(",".join(devs), ["hdp", "devices"])
    # the ops hdp placed, per device (before the written copies of constants): the one count
    # compile, show and evaluate give
    counts = [int((dev_of == k).sum()) for k in range(len(devs))]
    model.set_rt_info(",".join(f"{d}={n}" for d, n in zip(devs, counts)), ["hdp", "ops_placed"])
    model.set_rt_info(pl.method, ["hdp", "method"])
    model.set_rt_info(serde.digest(module), ["hdp", "module_digest"])
    for key in ("source", "source_digest"):  # the model placed: hdp evaluate compares placements of one model
        if module.meta.get(key):
            model.set_rt_info(module.meta[key], ["hdp", key])
    if module.meta.get("specialisation"):  # the shapes it was placed for; hdp evaluate measures at them
        model.set_rt_info(module.meta["specialisation"], ["hdp", "specialisation"])
    if target is not None:
        model.set_rt_info(json.dumps(msgspec.to_builtins(target), sort_keys=True), ["hdp", "target"])
    for key in ("simulated", "period", "requests", "goal", "singles"):  # what hdp evaluate sets its measurement beside
        if key in pl.info:
            model.set_rt_info(str(pl.info[key]), ["hdp", f"sim_{key}"])
    if "memory_caps" in pl.info:  # --memory overrides (DEV=BYTES,...): the caps it was placed under
        model.set_rt_info(str(pl.info["memory_caps"]), ["hdp", "memory_caps"])


def save_placed(model, out_xml: str | os.PathLike, check=None) -> Path:
    """Save ``model`` (an annotated placement, see :func:`annotate`) as ``out_xml`` and its ``.bin``
    so that no reader ever sees a half-written or mismatched pair: both are saved in a private
    temporary directory beside ``out_xml`` (:func:`save_uncommitted`), then the pair is committed by
    :func:`hdp.base.fsutil.commit_pair`. ``check``, if given, is called with the temporary ``.xml``
    before anything is committed; it returns a result with ``passed`` and ``describe()``, and a
    failed check leaves no output (InputError)."""
    out_xml = Path(out_xml)
    with temp_dir(out_xml.parent, out_xml.name) as tmp:
        tmp_xml = tmp / "placed.xml"
        save_uncommitted(model, tmp_xml, out_xml)
        if check is not None:
            result = check(tmp_xml)
            if not result.passed:
                raise InputError(f"{out_xml}: not written: the placed model {result.describe()}")
        kill_point("placed-saved")
        commit_pair(tmp_xml, out_xml)
    return out_xml


def save_uncommitted(model, tmp_xml: Path, out_xml: Path) -> None:
    """Save ``model`` as ``tmp_xml`` and its ``.bin`` (a temporary beside ``out_xml``), the ``.bin``
    digest recorded in the ``.xml`` (checked by :func:`hdp.runtime.placed.model.read_placed`); a failure
    to write is a :class:`~hdp.base.fsutil.WriteError` naming ``out_xml``."""
    import openvino as ov

    pending = secrets.token_hex(16)  # as long as the digest that replaces it in place
    model.set_rt_info(pending, ["hdp", WEIGHTS_DIGEST_KEY])
    try:
        ov.save_model(model, str(tmp_xml), compress_to_fp16=False)
        record_weights_digest(tmp_xml, pending)
    except (RuntimeError, OSError) as e:  # a full disk: "basic_ios::clear: iostream error"
        raise write_error(out_xml, e) from None


def weights_digest(bin_path: Path) -> str:
    """blake2b of a ``.bin`` (``none`` when the model has no weights file)."""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open(bin_path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        return "none"
    return h.hexdigest()


def record_weights_digest(xml: Path, pending: str, block: int = 1 << 20) -> None:
    """Overwrite the placeholder ``pending`` in the saved ``xml`` with the digest of its ``.bin``,
    in place: the placeholder is as long as a digest, and the file is scanned in blocks, never
    held (or copied) whole in memory."""
    digest = weights_digest(xml.with_suffix(".bin"))  # ov.save_model writes a .bin, empty without weights
    if len(digest) != len(pending):
        raise RuntimeError(f"{xml}: no weights file beside it, or a placeholder of the wrong length")
    needle = f'value="{pending}"'.encode()
    found: list[int] = []
    with open(xml, "r+b") as f:
        offset, tail = 0, b""
        while chunk := f.read(block):
            buf = tail + chunk
            i = buf.find(needle)
            while i >= 0:
                found.append(offset - len(tail) + i)
                i = buf.find(needle, i + 1)
            tail = buf[-(len(needle) - 1):]
            offset += len(chunk)
        if len(found) != 1:
            raise RuntimeError(f"{xml}: the weights digest placeholder was not written once")
        f.seek(found[0] + len('value="'))
        f.write(digest.encode())

"""A placement that travels: the placed model compiled with HETERO and exported as a blob.

A placed ``.xml`` keeps its placement only for readers that copy ``user_dataaffinity`` to
``affinity`` (:func:`hdp.runtime.placed.model.compile_placed`); plain ``read_model`` leaves HETERO to
place the ops itself. A compiled HETERO model, exported with ``CompiledModel.export_model()``,
carries its subgraphs and their devices: ``core.import_model(blob, "HETERO:...")`` in C++ or
Python runs the placement with no hdp code, on the same OpenVINO version and devices (the Python
``benchmark_app`` of the ``openvino`` 2026.4.1 wheel refuses every ``.blob``: its precision options
default to None, which it takes for "set"; ``hdp evaluate placed.blob`` times it instead). ::

    hdp export placed.xml -o placed.blob      # or: hdp compile ... --export-blob placed.blob
    hdp show placed.blob                      # what an importer needs, and whether this host has it

Beside ``placed.blob`` hdp writes ``placed.blob.json`` (:class:`BlobRecord`): the HETERO device
string to import it with; every device, with its plugin, the plugin library an aliased device
(``virtual``'s ``CPU_B``) must be registered from and the config to set on it before
``import_model``; the OpenVINO version that wrote it; the blob's size and digest (a truncated or
mismatched pair is refused); the placed model it came from and the input shapes it was placed
for. An aliased device exists only where the importing application registers it::
    core = ov.Core()
    core.register_plugin(f"{os.path.dirname(ov.__file__)}/libs/libopenvino_intel_cpu_plugin.so", "CPU_B")
    core.set_property("CPU_B", {"INFERENCE_PRECISION_HINT": "bf16"})
    compiled = core.import_model(open("placed.blob", "rb").read(), "HETERO:CPU,CPU_B")

Before the pair is written, the blob is imported back in this process and run once on seeded
inputs at the recorded shapes against the compiled model it came from; a blob that does not
import and give the same outputs is not written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_write
from hdp.base.validation import Bytes, Count
from hdp.ir.specialise import Specialisation, state_tensors
from hdp.runtime.measure import protocol as P
from hdp.runtime.measure.measurement import Measurement
from hdp.runtime.measure.worker import ov_message, random_inputs
from hdp.runtime.measure.worker_client import LOAD_TIMEOUT, WorkerFailure, WorkerProcess
from hdp.runtime.placed.model import compile_placed, model_info, read_placed
from hdp.target.devices import device_status, hetero_config, hetero_name, make_core, plugin_library
from hdp.target.target import Device, Target

#: ``placed.blob`` -> ``placed.blob.json``
SIDECAR_SUFFIX = ".json"
BLOB_FORMAT = "hdp-blob"
BLOB_VERSION = 1


class BlobDevice(msgspec.Struct, frozen=True, kw_only=True):
    """A device the blob runs on, as an importing application must provide it."""

    name: str
    plugin: str  # the OpenVINO plugin (CPU, GPU, NPU)
    alias: bool = False  # registered under ``name`` from ``library`` (not a device OpenVINO names itself)
    library: str = ""  # file name of the plugin library in OpenVINO's libs directory (aliases)
    config: dict[str, str] = {}  # core.set_property(name, config) before import_model


class BlobRecord(msgspec.Struct, frozen=True, kw_only=True):
    """``placed.blob.json``: what the blob is and what importing it needs."""

    format: str = BLOB_FORMAT
    version: Count = BLOB_VERSION
    device: str  # the string to import with: HETERO:CPU,CPU_B
    devices: list[BlobDevice]
    openvino: str  # the version that wrote the blob (import needs the same)
    bytes: Bytes
    digest: str  # blake2b of the blob
    source: str = ""  # the placed model file
    method: str = ""
    target: str = ""
    specialisation: str = ""  # JSON: the input (and state) shapes it was placed for
    inputs: list[str] = []  # name type[shape], for people
    outputs: list[str] = []
    stateful: bool = False

    def target_of(self) -> Target:
        """The devices as a Target, for :func:`hdp.target.devices.make_core`."""
        return Target(name=self.target or "blob", devices=[
            Device(name=d.name, kind="real", plugin=d.plugin if d.alias else "", alias=d.alias, config=dict(d.config))
            for d in self.devices])


_DECODER = msgspec.json.Decoder(BlobRecord)


def sidecar_path(blob: str | os.PathLike) -> Path:
    blob = Path(blob)
    return blob.with_name(blob.name + SIDECAR_SUFFIX)


def blob_digest(path: str | os.PathLike) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _port(p) -> str:
    name = p.get_any_name() if p.get_names() else p.get_node().get_friendly_name()
    return f"{name} {p.get_element_type().get_type_name()}{p.get_partial_shape()}"


def _seeded_run(compiled, spec) -> list[np.ndarray]:
    """Outputs of one inference on seeded inputs at the specialisation's shapes (states as a fresh
    request starts them: empty, or the shapes of the specialisation)."""
    import openvino as ov


    req = compiled.create_infer_request()
    shapes = [i.shape for i in spec.inputs] if spec is not None else None
    for i, a in enumerate(random_inputs(compiled, seed=0, shapes=shapes)):
        req.set_input_tensor(i, ov.Tensor(a))
    if spec is not None and spec.state:
        states = state_tensors(spec)
        for st in req.query_state():
            if st.name in states:
                st.state = ov.Tensor(states[st.name])
    req.infer()
    return [np.array(req.get_output_tensor(j).data, copy=True) for j in range(len(compiled.outputs))]


def export_blob(xml: str | os.PathLike, out: str | os.PathLike, target: Target | None = None,
                source: str | os.PathLike | None = None) -> BlobRecord:
    """Compile the placed model ``xml`` with HETERO (affinities restored, aliased devices
    registered, as :func:`~hdp.runtime.placed.model.compile_placed`), export it to ``out`` and its
    record to ``out`` + ``.json``; the blob is imported back and run against the compiled model
    first. Both files are written atomically, the blob first (its digest in the record tells a
    mismatched pair). Raises InputError (nothing written) when the model is not placed, is placed
    on devices this host lacks or that are modeled, or its blob does not import and run.
    ``source``: the placed model's path the record names (default ``xml``; ``hdp compile`` reads
    the placed model from its temporary before it is committed)."""
    import openvino as ov


    xml, out = Path(xml), Path(out)
    pm = read_placed(xml)
    t = target or pm.target
    used = [d for d in pm.devices if d in pm.used]
    core = make_core(t, used) if all(t.device(d).kind == "real" for d in used) else None
    compiled = compile_placed(xml, t, core=core, placed=pm, devices=used)
    spec_text = model_info(pm.model, "specialisation") or ""
    spec = Specialisation.from_json(spec_text, str(xml)) if spec_text else None
    device = hetero_name(used)
    try:
        data = compiled.export_model().getvalue()
        expected = _seeded_run(compiled, spec)
        again = core.import_model(data, device, hetero_config(t, used))
        got = _seeded_run(again, spec)
    except RuntimeError as e:
        raise InputError(f"{xml}: cannot export the compiled placement: {ov_message(e)}") from None
    del again
    for j, (a, b) in enumerate(zip(got, expected)):
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True):
            raise InputError(f"{xml}: the exported blob, imported again, gives another output {j} than the "
                             f"compiled model it came from; not written")
    devices = []
    for name in used:
        d = t.device(name)
        lib = os.path.basename(plugin_library(d.plugin)) if d.alias else ""
        devices.append(BlobDevice(name=name, plugin=d.plugin_name, alias=d.alias, library=lib,
                                  config={str(k): str(v) for k, v in d.config.items()}))
    record = BlobRecord(device=device, devices=devices, openvino=ov.get_version(), bytes=len(data),
                        digest=hashlib.blake2b(data, digest_size=16).hexdigest(),
                        source=str(Path(source or xml).resolve()),
                        method=pm.method, target=t.name, specialisation=spec_text,
                        inputs=[_port(p) for p in compiled.inputs], outputs=[_port(p) for p in compiled.outputs],
                        stateful=bool(spec is not None and spec.state))
    # the blob first, then its record: a reader of a pair caught in between sees a digest that
    # does not match (read_record refuses it), never a record of a blob that is not there
    atomic_write(out, data)
    atomic_write(sidecar_path(out), msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n")
    return record


def read_record(blob: str | os.PathLike) -> BlobRecord:
    """The record of ``blob``, after checking the blob is the one it describes (size and digest).
    InputError naming the file otherwise: a missing blob or record, a truncated or replaced blob."""
    blob = Path(blob)
    side = sidecar_path(blob)
    if not blob.is_file():
        raise InputError(f"{blob}: no such file")
    if not side.is_file():
        raise InputError(f"{blob}: no {side.name} beside it (hdp export writes the device list a blob needs there)")
    try:
        rec = _DECODER.decode(side.read_bytes())
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InputError(f"{side}: not an hdp blob record ({e})") from None
    if rec.format != BLOB_FORMAT or rec.version != BLOB_VERSION:
        raise InputError(f"{side}: an hdp blob record of format {rec.format!r} version {rec.version}, "
                         f"this hdp reads {BLOB_FORMAT!r} version {BLOB_VERSION}")
    size = blob.stat().st_size
    if size != rec.bytes:
        what = "truncated" if size < rec.bytes else "not the blob it describes"
        raise InputError(f"{blob}: {size} bytes, {side.name} records {rec.bytes}: {what}; export it again")
    if blob_digest(blob) != rec.digest:
        raise InputError(f"{blob}: its contents are not the ones {side.name} records (a mismatched or "
                         f"half-written pair); export it again")
    return rec


def measure_blob(blob: str | os.PathLike, *, runs: int = 10, warmup: int = 3, timeout: float = 120.0):
    """Time an exported placement (:func:`export_blob`) as an application runs it: imported in a
    worker (:class:`~hdp.runtime.measure.protocol.Blob`) with its devices registered from its record,
    ``runs`` inferences on seeded inputs at the recorded shapes: a
    :class:`~hdp.runtime.measure.measurement.Measurement`, never cached. Raises InputError for a blob whose
    record is missing or does not match it, or whose devices this host lacks."""

    rec = read_record(blob)
    base = dict(what=f"{rec.device} (imported {Path(blob).name})", target=rec.target, runs=runs, warmup=warmup)
    w = WorkerProcess()
    try:
        reply = w.call(P.Blob(blob=str(Path(blob).resolve()), device=rec.device, target=rec.target_of(),
                              spec=rec.specialisation, runs=int(runs), warmup=int(warmup)), max(timeout, LOAD_TIMEOUT))
    except WorkerFailure as e:
        return Measurement(**base, error=f"{blob}: {e}")
    finally:
        w.close()
    if isinstance(reply, P.Failed):
        if reply.input:
            raise InputError(f"{blob}: {reply.error}")
        return Measurement(**base, error=f"{blob}: {reply.error}")
    return Measurement(**base, times=tuple(reply.times), compile_seconds=reply.compile_seconds,
                       submodels=reply.submodels)


def host_status(rec: BlobRecord, available: list[str]) -> dict[str, str]:
    """``present`` or ``absent`` on this host, per device of the record."""

    return {d.name: device_status(rec.target_of().device(d.name), available) for d in rec.devices}


def _import_properties(rec: BlobRecord) -> str:
    """The properties argument of ``import_model`` that :func:`hdp.target.devices.hetero_config`
    gives the blob's devices, as Python text; empty when there are none."""

    props = hetero_config(rec.target_of(), [d.name for d in rec.devices])
    return f", {props}" if props else ""


def describe_blob(blob: str | os.PathLike) -> str:
    """``hdp show placed.blob``: the device string, every device with what importing it needs
    (register an alias, set its config), whether this host has it, and the blob's inputs."""
    import openvino as ov

    blob = Path(blob)
    rec = read_record(blob)
    status = host_status(rec, list(ov.Core().available_devices))
    lines = [f"compiled HETERO model: {rec.bytes / 1e6:.1f} MB, OpenVINO {rec.openvino}"
             + (f" (this host: {ov.get_version()}; import needs the same version)"
                if rec.openvino != ov.get_version() else ""),
             f"from {rec.source} ({rec.method} on {rec.target})" if rec.source else "",
             f"import: core.import_model(data, \"{rec.device}\"{_import_properties(rec)})",
             "devices (register and configure each before import_model):"]
    for d in rec.devices:
        cfg = f"core.set_property(\"{d.name}\", {dict(d.config)})" if d.config else "no config"
        how = (f"alias of {d.plugin}: core.register_plugin(<openvino>/libs/{d.library}, \"{d.name}\"); " if d.alias
               else f"plugin {d.plugin}; ")
        lines.append(f"  {d.name:<8} {how}{cfg}  [{status[d.name]} on this host]")
    lines.append("inputs: " + ", ".join(rec.inputs))
    lines.append("outputs: " + ", ".join(rec.outputs))
    if rec.stateful:
        lines.append("stateful: the KV cache lives in the compiled model's states (reset_state() per sequence)")
    absent = [d for d, s in status.items() if s != "present"]
    if absent:
        lines.append(f"this host lacks {', '.join(absent)}: the blob imports only where every device exists")
    return "\n".join(x for x in lines if x)

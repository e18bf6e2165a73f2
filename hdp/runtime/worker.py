"""The measuring process: ``python -m hdp.runtime.worker``.

:mod:`hdp.runtime.measure` starts one of these per model and sends it requests; a compile that
crashes (segfault), hangs or raises costs one error sample, not the caller's process. Messages are
msgpack maps framed by a 4-byte little-endian length, on stdin (requests) and on a duplicate of
the original stdout (replies); the worker points fd 1 at stderr so that anything a plugin prints
cannot corrupt the protocol.

Requests (``op`` field) and replies (always ``ok``; on failure ``error`` and ``input``, the latter
true for a user mistake such as a device absent from this host):

- ``load``: ``xml``, ``shapes`` (``x:1,3,224,224;...`` or empty), ``names`` (the caller's op order,
  or nil for the file's order), ``target`` -> ``n_ops``, ``names``, ``affinity`` (per op, "" if none).
- ``measure``: ``devices``, ``device_of`` (int16 bytes, caller's op order), ``runs``, ``warmup``
  -> ``times`` (seconds per run), ``compile_seconds``. Compiles with HETERO over the devices used.
- ``query``: ``device`` -> ``supported`` (per op, caller's order): OpenVINO's ``query_model`` of the
  loaded model on that device. It runs here, not in the caller, because a plugin answering it may
  allocate whatever the model's shapes ask for (``std::bad_alloc``) or crash.
- ``plain``: ``device``, ``runs``, ``warmup``, ``perf`` -> ``times``, ``compile_seconds`` and, with
  ``perf``, ``nodes``: the compiled (runtime) graph, one entry per node with ``name``, ``type``,
  ``exec_type``, ``original`` (its ``originalLayersNames``), ``preds`` (node indices), ``avg_warm``
  and ``avg_all`` (the ``PERF_COUNT`` counter, a running average over every inference since compile,
  read after the warm-up and after the timed runs) and ``executed`` (false for fused/in-place nodes).

The worker dies with its parent: on Linux it asks the kernel for SIGKILL when the parent goes
(``prctl(PR_SET_PDEATHSIG)``), and on every platform a watchdog thread exits the process as soon as
its parent process id changes (the parent's pid is passed in ``HDP_WORKER_PARENT``), so a worker
stuck in a device compile never outlives a killed ``hdp``.

Test hook: ``HDP_MEASURE_FAULT`` = ``crash`` (SIGSEGV), ``hang`` or ``raise``, applied to every
``measure``/``plain``/``query`` request of a worker started with it.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import time

import msgspec

_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder()
FAULT_ENV = "HDP_MEASURE_FAULT"
PARENT_ENV = "HDP_WORKER_PARENT"
_PR_SET_PDEATHSIG = 1


def write_msg(f, obj) -> None:
    data = _ENC.encode(obj)
    f.write(struct.pack("<I", len(data)) + data)
    f.flush()


def decode_msg(data: bytes):
    return _DEC.decode(data)


def read_msg(f):
    """One message from a binary stream, or None at end of stream."""
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    data = f.read(n)
    if len(data) < n:
        return None
    return _DEC.decode(data)


def ov_message(e: BaseException) -> str:
    """The reason line of an OpenVINO exception (its first lines are source locations)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = lines[-1] if lines else type(e).__name__
    return re.sub(r"^(Exception from \S+:\s*|\[ GENERAL_ERROR \]\s*)", "", msg)


def random_inputs(model, seed: int = 0) -> list:
    """Fixed random data of each input's element type and (static) shape."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for inp in model.inputs:
        shape = [int(d) for d in inp.get_shape()]
        et = inp.get_element_type()
        dtype = et.to_dtype()
        if et.is_real():
            a = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            a = rng.integers(0, 2, shape).astype(np.bool_)
        else:  # small integers stay valid as indices, token ids and masks
            a = rng.integers(0, 2, shape).astype(dtype)
        out.append(a)
    return out


def _fault() -> None:
    fault = os.environ.get(FAULT_ENV, "")
    if fault == "crash":
        import ctypes

        ctypes.string_at(0)  # SIGSEGV, as a crashing plugin would
    elif fault == "hang":
        time.sleep(1e6)
    elif fault == "raise":
        raise RuntimeError("injected fault (HDP_MEASURE_FAULT=raise)")


class Worker:
    """Holds one model and answers requests about it."""

    def __init__(self):
        self.model = None
        self.ops = []
        self.order = None  # caller's op i -> index in self.ops
        self.target = None
        self.cores: dict[tuple[str, ...], object] = {}
        self.inputs = []

    def handle(self, req: dict) -> dict:
        from hdp.errors import InputError

        try:
            op = req.get("op")
            if op == "load":
                return self.load(req)
            if self.model is None:
                raise InputError("worker: no model loaded")
            if op == "measure":
                _fault()
                return self.measure(req)
            if op == "plain":
                _fault()
                return self.plain(req)
            if op == "query":
                _fault()
                return self.query(req)
            raise InputError(f"worker: unknown request '{op}'")
        except InputError as e:
            return {"ok": False, "input": True, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - every failure becomes an error sample
            return {"ok": False, "input": False, "error": f"{type(e).__name__}: {ov_message(e)}"}

    def load(self, req: dict) -> dict:
        from hdp.errors import InputError
        from hdp.ir.openvino_frontend import parse_input_shapes, read_model, unique_names
        from hdp.runtime.target import Target

        self.target = msgspec.convert(req["target"], Target)
        shapes = parse_input_shapes([req["shapes"]]) if req.get("shapes") else {}
        self.model = read_model(req["xml"], shapes)
        self.ops = list(self.model.get_ordered_ops())
        names, _ = unique_names(self.ops)
        want = req.get("names")
        if want is None:
            self.order = list(range(len(names)))
        else:
            pos = {n: i for i, n in enumerate(names)}
            missing = [n for n in want if n not in pos]
            if missing or len(want) != len(names):
                what = f"op '{missing[0]}' is not in it" if missing else f"{len(names)} ops, expected {len(want)}"
                raise InputError(f"{req['xml']}: the model does not match the module ({what}); lower it again")
            self.order = [pos[n] for n in want]
        self.inputs = None  # made on the first run: a query must not allocate the model's inputs
        aff = []
        for i in self.order:
            rt = self.ops[i].get_rt_info()
            key = "user_dataaffinity" if "user_dataaffinity" in rt else "affinity"
            aff.append(rt[key].astype(str) if key in rt else "")
        return {"ok": True, "n_ops": len(names), "names": [names[i] for i in self.order], "affinity": aff}

    def core(self, devices: tuple[str, ...]):
        from hdp.runtime.devices import make_core

        if devices not in self.cores:
            self.cores[devices] = make_core(self.target, list(devices))
        return self.cores[devices]

    def _time(self, compiled, runs: int, warmup: int, perf: bool = False):
        """Wall seconds of ``runs`` inferences after ``warmup``; with ``perf``, also the per-node
        counters (cumulative averages, see :mod:`hdp.runtime.profile`) after warm-up and at the end."""
        import openvino as ov

        req = compiled.create_infer_request()
        if self.inputs is None:
            self.inputs = random_inputs(self.model)
        for i, a in enumerate(self.inputs):
            req.set_input_tensor(i, ov.Tensor(a))
        for _ in range(warmup):
            req.infer()
        before = _counters(req) if perf else {}
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            req.infer()
            times.append(time.perf_counter() - t0)
        return times, (before, _counters(req)) if perf else None

    def measure(self, req: dict) -> dict:
        import numpy as np

        from hdp.errors import InputError
        from hdp.runtime.devices import hetero_name

        devices = list(req["devices"])
        dev_of = np.frombuffer(req["device_of"], np.int16)
        if dev_of.shape[0] != len(self.order):
            raise InputError(f"placement has {dev_of.shape[0]} ops, the model has {len(self.order)}")
        used = [d for k, d in enumerate(devices) if (dev_of == k).any()]
        for k, i in enumerate(self.order):
            self.ops[i].get_rt_info()["affinity"] = devices[int(dev_of[k])]
        core = self.core(tuple(used))
        t0 = time.perf_counter()
        compiled = core.compile_model(self.model, hetero_name(used), {})
        compile_s = time.perf_counter() - t0
        times, _ = self._time(compiled, int(req["runs"]), int(req["warmup"]))
        return {"ok": True, "times": times, "compile_seconds": compile_s}

    def query(self, req: dict) -> dict:
        device = req["device"]
        supported = self.core((device,)).query_model(self.model, device)
        return {"ok": True, "supported": [self.ops[i].get_friendly_name() in supported for i in self.order]}

    def plain(self, req: dict) -> dict:
        device, perf = req["device"], bool(req.get("perf"))
        core = self.core((device,))
        t0 = time.perf_counter()
        compiled = core.compile_model(self.model, device, {"PERF_COUNT": "YES"} if perf else {})
        compile_s = time.perf_counter() - t0
        times, prof = self._time(compiled, int(req["runs"]), int(req["warmup"]), perf)
        reply = {"ok": True, "times": times, "compile_seconds": compile_s}
        if perf:
            reply["nodes"] = _runtime_nodes(compiled, *prof)
        return reply


def _counters(req) -> dict[str, tuple[float, bool]]:
    return {p.node_name: (p.real_time.total_seconds(), p.status == p.Status.EXECUTED) for p in req.profiling_info}


def _runtime_nodes(compiled, before: dict, after: dict) -> list[dict]:
    rops = list(compiled.get_runtime_model().get_ordered_ops())
    index = {op: k for k, op in enumerate(rops)}  # ov Nodes hash and compare by identity
    nodes = []
    for op in rops:
        rt = op.get_rt_info()
        name = op.get_friendly_name()
        nodes.append({
            "name": name,
            "type": rt["layerType"].astype(str) if "layerType" in rt else op.get_type_name(),
            "exec_type": rt["primitiveType"].astype(str) if "primitiveType" in rt else "",
            "original": rt["originalLayersNames"].astype(str) if "originalLayersNames" in rt else name,
            "preds": [index[i.get_source_output().get_node()] for i in op.inputs()],
            "avg_warm": before.get(name, (0.0, False))[0],
            "avg_all": after.get(name, (0.0, False))[0],
            # the plugin reports NOT_RUN for a node whose average reads 0 us, so a node that ran in
            # the (slow) warm-up but averages below 1 us later still counts as executed
            "executed": before.get(name, (0.0, False))[1] or after.get(name, (0.0, False))[1],
        })
    return nodes


def die_with_parent() -> None:
    """Exit when the process that started this worker is gone (see the module docstring)."""
    import signal
    import threading

    try:
        parent = int(os.environ.get(PARENT_ENV, "0"))
    except ValueError:
        parent = 0
    if not parent:
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="hdp-parent-watchdog", daemon=True).start()


def main() -> None:
    die_with_parent()
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    worker = Worker()
    while True:
        req = read_msg(proto_in)
        if req is None:
            return
        write_msg(proto_out, worker.handle(req))


if __name__ == "__main__":
    main()

"""Every device at once: a concurrent executor of a placed model's device subgraphs.

HETERO runs the subgraphs of one request strictly one after another, so independent branches
placed on different devices never overlap. This executor splits a placed model into the same
acyclic device subgraphs hdp prices for HETERO, further cut so that a subgraph's inputs from other
devices are due at its start and its outputs to them leave at its end
(:mod:`hdp.runtime.placed.split`), compiles each on its device and runs them as a dataflow::

    from hdp.runtime.placed.model import compile_placed
    compiled = compile_placed("placed.xml", execution="concurrent")
    result = compiled({0: x})        # like an ov.CompiledModel: result[0], result["logits"]

- A subgraph starts as soon as every tensor it reads is ready; each device has one *lane* (a
  thread) that runs the device's ready subgraphs one at a time, earliest-ready first.
- Tensors are handed over in host memory without copies: the consumer's input tensor *is* the
  producer's output tensor (``set_input_tensor``), user inputs are wrapped, not copied.
- A lane calls the blocking ``infer()``: OpenVINO releases the GIL, and the CPU plugin runs a
  one-thread compile on the calling thread, so the lane's pinning is the device's. A CPU-plugin
  device configured with ``ENABLE_CPU_PINNING=YES`` and ``INFERENCE_NUM_THREADS=n`` gets ``n`` host
  cores of its own (in target order) and its lane is pinned to them; its sub-models compile with
  the plugin's pinning and reservation off (the plugin would put every instance on the first
  core, and with reservation it refuses a third compiled model on a 2-core host: "No CPU
  resources available").
- Stateful models run when each variable's ReadValue and Assign can share one subgraph: hdp ties
  them to one device, and the executor merges the pieces between them; another device between
  them is refused with a one-line error. The state lives in that
  subgraph's infer request; ``reset_state()``/``query_state()`` reach every subgraph.

Constants are never cut: a constant feeding several subgraphs is read by each (shared, not
copied). The placed model itself is untouched: the same ``placed.xml`` still runs under HETERO.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence

import numpy as np

from hdp.base.errors import InputError
from hdp.runtime.placed.split import Split, split_model

# --------------------------------------------------------------------------- pinning


def lane_cores(target, devices: Sequence[str], available: Sequence[int] | None = None) -> dict[str, list[int]]:
    """Host cores of each device that asks for its own (a CPU-plugin device with
    ``ENABLE_CPU_PINNING=YES`` and ``INFERENCE_NUM_THREADS=n``): consecutive cores of this
    process's affinity, in target order. Devices that do not ask float."""
    cores = sorted(available if available is not None else os.sched_getaffinity(0))
    out, nxt = {}, 0
    for d in target.devices:
        if d.name not in devices or d.plugin_name.split(".")[0] != "CPU":
            continue
        cfg = {k.upper(): str(v).upper() for k, v in d.config.items()}
        if cfg.get("ENABLE_CPU_PINNING") != "YES" or not cfg.get("INFERENCE_NUM_THREADS", "0").isdigit():
            continue
        n = int(cfg["INFERENCE_NUM_THREADS"])
        if n <= 0:
            continue
        if nxt + n > len(cores):
            raise InputError(f"device '{d.name}' asks for {n} pinned core(s); this process may use "
                             f"{len(cores)} ({', '.join(map(str, cores))}) and {nxt} are taken by earlier devices")
        out[d.name] = cores[nxt:nxt + n]
        nxt += n
    return out


class _Lane:
    """One device's thread: runs the jobs put on it, one at a time, in order."""

    def __init__(self, name: str, cores: list[int] | None):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.cores = cores
        self.thread = threading.Thread(target=self._loop, name=f"hdp-lane-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        if self.cores:
            os.sched_setaffinity(threading.get_native_id(), self.cores)
        while True:
            job = self.queue.get()
            if job is None:
                return
            job()

    def put(self, job) -> None:
        self.queue.put(job)

    def close(self) -> None:
        self.queue.put(None)


# --------------------------------------------------------------------------- the compiled model


class ConcurrentModel:
    """A placed model compiled for concurrent execution: one compiled sub-model per device
    subgraph. Used like an ``ov.CompiledModel`` (``inputs``, ``outputs``, ``__call__``,
    ``create_infer_request``)."""

    def __init__(self, model, split: Split, compiled: list, cores: dict[str, list[int]]):
        self.inputs = list(model.inputs)
        self.outputs = list(model.outputs)
        self.split = split
        self.compiled = compiled
        self.devices = list(dict.fromkeys(s.device for s in split.subgraphs))
        self.lanes = {d: _Lane(d, cores.get(d)) for d in self.devices}
        self._request = None

    @property
    def submodels(self) -> int:
        return len(self.compiled)

    def get_property(self, name: str):
        if name == "HETERO_NUMBER_OF_SUBMODELS":
            return self.submodels
        raise RuntimeError(f"concurrent model: no property '{name}'")

    def create_infer_request(self) -> "ConcurrentRequest":
        return ConcurrentRequest(self)

    def __call__(self, inputs=None):
        if self._request is None:
            self._request = self.create_infer_request()
        return self._request.infer(inputs)

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ConcurrentRequest:
    """One request in flight over the sub-models: ``set_input_tensor``, ``infer``,
    ``get_output_tensor``, ``query_state``, ``reset_state`` as on an ``ov.InferRequest``."""

    def __init__(self, cm: ConcurrentModel):
        self.cm = cm
        self.requests = [c.create_infer_request() for c in cm.compiled]
        self.inputs: list = [None] * len(cm.inputs)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pending: list[int] = []
        self._left = 0
        self._error: BaseException | None = None
        self._result: Outputs | None = None

    def _index(self, key) -> int:
        if isinstance(key, int):
            if not 0 <= key < len(self.cm.inputs):
                raise IndexError(f"input {key} out of range (the model has {len(self.cm.inputs)})")
            return key
        if isinstance(key, str):
            for i, inp in enumerate(self.cm.inputs):
                if key in inp.get_names():
                    return i
            raise KeyError(f"no input named '{key}'")
        for i, inp in enumerate(self.cm.inputs):
            if inp == key:
                return i
        raise KeyError(f"unknown input {key!r}")

    def set_input_tensor(self, index, tensor) -> None:
        self.inputs[self._index(index)] = tensor

    def get_input_tensor(self, index: int = 0):
        return self.inputs[index]

    def get_output_tensor(self, index: int = 0):
        import openvino as ov

        src = self.cm.split.outputs[index]
        if src[0] == "sub":
            return self.requests[src[1]].get_output_tensor(src[2])
        if src[0] == "input":
            return self.inputs[src[1]]
        return ov.Tensor(src[1])

    def query_state(self) -> list:
        return [st for r in self.requests for st in r.query_state()]

    def reset_state(self) -> None:
        for r in self.requests:
            r.reset_state()

    def _set_inputs(self, inputs) -> None:
        import openvino as ov

        items = inputs.items() if isinstance(inputs, dict) else enumerate(inputs)
        for key, value in items:
            if not isinstance(value, ov.Tensor):
                value = ov.Tensor(np.ascontiguousarray(value), shared_memory=True)
            self.set_input_tensor(key, value)

    def infer(self, inputs=None):
        """Run once; returns the outputs (copies), looked up by position, name or port."""
        if inputs is not None:
            self._set_inputs(inputs)
        missing = [i for i, t in enumerate(self.inputs) if t is None]
        if missing:
            raise InputError(f"input {missing[0]} ('{self.cm.inputs[missing[0]].get_any_name()}') is not set")
        subs = self.cm.split.subgraphs
        self._pending = [len(s.preds) for s in subs]
        self._left = len(subs)
        self._error = None
        self._done.clear()
        if not subs:
            self._done.set()
        for s, sub in enumerate(subs):
            if not sub.preds:
                self.cm.lanes[sub.device].put(lambda s=s: self._run(s))
        self._done.wait()
        if self._error is not None:
            raise self._error
        self._result = Outputs(self.cm.outputs, [np.array(self.get_output_tensor(j).data, copy=True)
                                                 for j in range(len(self.cm.outputs))])
        return self._result

    def _run(self, s: int) -> None:
        sub = self.cm.split.subgraphs[s]
        req = self.requests[s]
        try:
            if self._error is None:
                for k, src in enumerate(sub.sources):
                    t = self.inputs[src[1]] if src[0] == "input" else self.requests[src[1]].get_output_tensor(src[2])
                    req.set_input_tensor(k, t)
                req.infer()
        except BaseException as e:  # noqa: BLE001 - handed to the caller of infer()
            self._error = e
        with self._lock:
            self._left -= 1
            for t in sub.succs:
                self._pending[t] -= 1
                if self._pending[t] == 0:
                    dev = self.cm.split.subgraphs[t].device
                    self.cm.lanes[dev].put(lambda t=t: self._run(t))
            if self._left == 0:
                self._done.set()

    @property
    def results(self) -> "Outputs":
        return self._result


class Outputs:
    """The outputs of one inference, looked up as in OpenVINO's result dict: by position, by
    tensor name or by output port."""

    def __init__(self, ports: list, arrays: list[np.ndarray]):
        self.ports = ports
        self.arrays = arrays

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, int):
            return self.arrays[key]
        for port, a in zip(self.ports, self.arrays):
            if (key in port.get_names()) if isinstance(key, str) else port == key:
                return a
        raise KeyError(f"no output {key!r}")

    def __len__(self) -> int:
        return len(self.arrays)

    def __iter__(self):
        return iter(self.ports)

    def keys(self) -> list:
        return list(self.ports)

    def values(self) -> list[np.ndarray]:
        return list(self.arrays)

    def items(self):
        return zip(self.ports, self.arrays)

    def to_tuple(self) -> tuple:
        return tuple(self.arrays)


def compile_concurrent(model, target, core, devices: Sequence[str], config: dict | None = None,
                       source: str = "<model>") -> ConcurrentModel:
    """Split ``model`` (placed: an affinity on every op; it is cloned, not changed) into device
    subgraphs and compile each on its device of ``core``; InputError naming the subgraph when a
    device refuses one."""
    work = model.clone()
    split = split_model(work, devices)
    cores = lane_cores(target, [s.device for s in split.subgraphs])
    compiled: list = [None] * len(split.models)
    errors: list = [None] * len(split.models)

    def build(s: int) -> None:
        sub = split.subgraphs[s]
        cfg = dict(config or {})
        if sub.device in cores:
            cfg.update(ENABLE_CPU_PINNING="NO", ENABLE_CPU_RESERVATION="NO")
        try:
            compiled[s] = core.compile_model(split.models[s], sub.device, cfg)
        except RuntimeError as e:
            errors[s] = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__

    threads = [threading.Thread(target=build, args=(s,)) for s in range(len(split.models))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s, err in enumerate(errors):
        if err is not None:
            sub = split.subgraphs[s]
            raise InputError(f"{source}: subgraph {s} ({len(sub.ops)} ops from "
                             f"'{sub.ops[0].get_friendly_name()}') does not compile on {sub.device}: {err}")
    return ConcurrentModel(model, split, compiled, cores)

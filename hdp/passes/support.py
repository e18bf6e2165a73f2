"""``support``: which device of the target can run which op.

Real devices answer OpenVINO's ``query_model`` on the source model's specialisation, asked in the
measuring worker process (:mod:`hdp.runtime.measure.worker`): a plugin may run out of memory on huge shapes
or crash, and that must cost an error message, not the compiler. Whole-model ``query_model`` is
superlinear in the model (a 2,000-op chain took 22-80 s on the CPU plugin), so the worker asks
once per distinct op signature, on small models cut out of the specialisation
(:mod:`hdp.runtime.measure.query`; the answer equals whole-model ``query_model``: ``tests/test_query.py``).
Answers are memoised in ``query_cache`` (a directory, normally ``<cache>/support``; empty: not
memoised) per (model digest, input shapes, device, its plugin and config, host, OpenVINO version),
so a second ``support`` on the same model is cheap even for another target, and per (signature,
device, ...), so a model sharing ops with one asked before (another size of an LLM, another
sequence length) asks only about the new ones. Modeled devices support the op
types their target entry lists (all types when the list is empty). Parameters, Constants and
Results are supported everywhere (HETERO places them with their neighbours).
"""

from __future__ import annotations

import msgspec
import numpy as np

from hdp.base.cache import Store
from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.ir.openvino_frontend import checked_source
from hdp.ir.types import Array, Module, Support
from hdp.passes.base import Pass
from hdp.runtime.measure import query
from hdp.runtime.measure.cache import host_key
from hdp.runtime.measure.measurement import MeasureError
from hdp.runtime.measure.measurer import Measurer
from hdp.target.target import Target

ANYWHERE = frozenset({"Parameter", "Constant", "Result"})


class SupportPass(Pass, tag="support"):
    """Ask every device of the target which ops it supports."""

    target: Target
    timeout: float = 600.0  # seconds for the worker to start, read the model and answer per device
    query_cache: str = ""  # directory memoising query_model answers ("" = none)
    provides = ("support",)
    host_dependent = True  # real devices answer: the cache key includes the host
    requires = ("graph",)
    key_exclude = ("timeout", "query_cache")

    def run(self, module: Module) -> Module:
        g = module.graph
        n, devs = g.n_ops, self.target.devices
        mask = np.zeros((n, len(devs)), bool)
        real = [j for j, d in enumerate(devs) if d.kind == "real"]
        if real and n:
            for j, col in zip(real, query_support(module, self.target, [devs[j].name for j in real],
                                                  self.timeout, self.query_cache)):
                mask[:, j] = col
        types = np.array([op.type for op in g.ops], dtype=object)
        for j, d in enumerate(devs):
            if d.kind == "modeled":
                mask[:, j] = True if not d.supported_ops else np.isin(types, d.supported_ops)
        if n:
            mask[np.isin(types, list(ANYWHERE)), :] = True
        return module.replace(support=Support(devices=self.target.device_names, mask=Array.of(mask)))



#: Bump when the meaning of a memoised query_model answer changes.
QUERY_VERSION = 1


def query_support(module: Module, target: Target, devices: list[str], timeout: float = 600.0,
                  cache_dir: str = "") -> list[np.ndarray]:
    """Per device of ``devices`` (real devices of ``target``), a bool per op of ``module``: what
    OpenVINO's ``query_model`` says (asked per op signature in a worker process; Parameters,
    Constants and Results True), memoised in ``cache_dir``."""


    n = module.graph.n_ops
    store = None
    if cache_dir:
        store = Store(cache_dir, ".json")
        store.open()
    out: dict[str, np.ndarray] = {}
    keys: dict[str, str | None] = {}
    for name in devices:
        d = target.device(name)
        key = None
        if store is not None:
            _, digest = checked_source(module)
            key = serde.digest_bytes(serde.encode_any(
                [QUERY_VERSION, digest, module.meta.get("specialisation", ""), *_device_key(d)] + host_key()))
            col = _stored(store, key, n)
            if col is not None:
                out[name] = col
                continue
        keys[name] = key
    if keys:  # the devices not memoised: asked per signature, at once (the worker queries them in parallel)
        measurer = Measurer(module, target, runs=1, warmup=0, timeout=timeout, cache=False)
        try:
            cols = _ask(measurer, module, target, list(keys), store)
        except MeasureError as e:
            raise InputError(str(e)) from None
        finally:
            measurer.close()
        for name, key in keys.items():
            if key is not None:
                store.put(key, msgspec.json.encode(cols[name].tolist()))
            out[name] = cols[name]
    return [out[name] for name in devices]


def _device_key(d) -> list:
    return [d.name, d.plugin_name, d.alias, sorted(d.config.items())]


def _stored(store, key: str, n: int) -> np.ndarray | None:
    """A memoised answer (a bool per op), or None (missing, or not an answer of ``n`` ops: discarded)."""

    data = store.get(key)
    if data is None:
        return None
    try:
        col = np.array(msgspec.json.decode(data, type=list[bool]), bool)
        if col.shape == (n,):
            return col
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    store.discard(store.path(key), "not a support answer")
    return None


def _ask(measurer, module: Module, target: Target, devices: list[str], store) -> dict[str, np.ndarray]:
    """Each device's column: the signatures' memoised answers, the worker asked about the rest."""

    n = module.graph.n_ops
    sig_of, digests = measurer.signatures()
    if sig_of.shape != (n,):
        raise InputError(f"support: the worker's model has {sig_of.shape[0]} ops, the module {n}")
    sigs = query.Signatures(sig_of.tolist(), digests, [])
    known: dict[str, dict[int, bool]] = {d: {} for d in devices}
    sig_keys: dict[tuple[str, int], str] = {}
    for name in devices:
        base = [query.SIG_VERSION, *_device_key(target.device(name))] + host_key()
        for k, digest in enumerate(digests):
            if store is None:
                continue
            key = sig_keys[name, k] = serde.digest_bytes(serde.encode_any(base + [digest]))
            data = store.get(key)
            if data in (b"true", b"false"):
                known[name][k] = data == b"true"
            elif data is not None:
                store.discard(store.path(key), "not a signature's answer")
    ask = {d: [k for k in range(len(digests)) if k not in known[d]] for d in devices}
    if any(ask.values()) or (sig_of == -2).any():
        reply = measurer.query_signatures(ask)
        for d in devices:
            context = set(reply.in_context[d])
            for k, v in reply.answers[d]:
                known[d][int(k)] = bool(v)
                if store is not None and 0 <= k < len(digests) and k not in context and (d, k) in sig_keys:
                    store.put(sig_keys[d, k], b"true" if v else b"false")
    return {d: query.mask(n, sigs, known[d]) for d in devices}

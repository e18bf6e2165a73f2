"""``support``: which device of the target can run which op.

Real devices answer OpenVINO's ``query_model`` on the source model's specialisation, asked in the
measuring worker process (:mod:`hdp.runtime.worker`): a plugin may run out of memory on huge shapes
or crash, and that must cost an error message, not the compiler. The worker maps the answer's names
to op positions at once (:func:`hdp.ir.openvino_frontend.supported_mask`). Answers are memoised per
(model digest, input shapes, device, its plugin and config, host, OpenVINO version) in
``query_cache`` (a directory, normally ``<cache>/support``; empty: not memoised), so a second
``support`` on the same model is cheap even for another target. Modeled devices support the op
types their target entry lists (all types when the list is empty). Parameters, Constants and
Results are supported everywhere (HETERO places them with their neighbours).
"""

from __future__ import annotations

import numpy as np

from hdp.ir.types import Array, Module, Support
from hdp.passes.base import Pass
from hdp.runtime.target import Target

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
    OpenVINO's ``query_model`` says, asked in a worker process and memoised in ``cache_dir``."""
    import msgspec

    from hdp.errors import InputError
    from hdp.ir import serde
    from hdp.runtime.measure import MeasureError, Measurer, _host_key

    n = module.graph.n_ops
    store = None
    if cache_dir:
        from hdp.cache import Store

        store = Store(cache_dir, ".json")
        store.open()
    measurer = None
    out: dict[str, np.ndarray] = {}
    keys: dict[str, bytes] = {}
    try:
        for name in devices:
            d = target.device(name)
            key = None
            if store is not None:
                from hdp.ir.openvino_frontend import checked_source

                _, digest = checked_source(module)
                key = serde.digest_bytes(serde.encode_any(
                    [QUERY_VERSION, digest, module.meta.get("specialisation", ""), d.name, d.plugin_name,
                     d.alias, sorted(d.config.items())] + _host_key()))
                data = store.get(key)
                if data is not None:
                    try:
                        col = np.array(msgspec.json.decode(data, type=list[bool]), bool)
                        if col.shape == (n,):
                            out[name] = col
                            continue
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        pass
                    store.discard(store.path(key), "not a support answer")
            keys[name] = key
        if keys:  # the devices not memoised, asked at once (the worker queries them in parallel)
            measurer = Measurer(module, target, runs=1, warmup=0, timeout=timeout, cache=False)
            try:
                answers = measurer.support_of(list(keys))
            except MeasureError as e:
                raise InputError(str(e)) from None
            for name, key in keys.items():
                col = np.array(answers[name], bool)
                if col.shape != (n,):
                    raise InputError(f"support: query_model on {name} answered for {col.shape[0]} ops, not {n}")
                if store is not None:
                    store.put(key, msgspec.json.encode(col.tolist()))
                out[name] = col
    finally:
        if measurer is not None:
            measurer.close()
    return [out[name] for name in devices]

"""The default pass schedule of ``hdp compile`` and the cached frontend step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hdp.ir import serde
from hdp.ir.types import Module
from hdp.passes.base import Pass
from hdp.passes.registry import registry
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument
from hdp.runtime.target import Target

T = TypeVar("T")

#: Bump when the frontend's output changes for the same model file.
FRONTEND_VERSION = 4


def lower_cached(xml: str | Path, request, cache: PassCache | None,
                 instruments: list[Instrument] = ()) -> Module:
    """Lower a model, reusing a cached Module when the model files and the requested
    specialisation (a :class:`~hdp.ir.openvino_frontend.ShapeRequest`, or a ``{input: shape}``
    dict) are unchanged."""
    from hdp.ir.openvino_frontend import as_request, file_digest, lower

    xml = Path(xml)
    request = as_request(request)
    key = None
    if cache is not None and xml.is_file():
        key = serde.digest_bytes(serde.encode_any(
            ["lower", FRONTEND_VERSION, str(xml.resolve()), file_digest(xml), request]))
    for ins in instruments:
        ins.before("lower", key or "")
    module = cache.get(key) if key else None
    if module is not None and (module.meta.get("source") != str(xml.resolve())
                               or module.meta.get("source_digest") != file_digest(xml)):
        cache.discard([key], f"a lowered module of {module.meta.get('source') or 'another model'}")
        module = None
    hit = module is not None
    if module is None:
        module = lower(xml, request)
        if key:
            cache.put(key, module)
    for ins in instruments:
        ins.after("lower", key or "", hit, module)
    return module


def recompute_if_stale(cache: PassCache | None, run: Callable[[], T]) -> T:
    """``run()``; if it fails because a module no longer matches its model (a
    :class:`~hdp.errors.StaleInput`, such as a lowered module whose ops are not the file's) and the
    pass cache supplied modules to it, those entries are discarded with a warning and ``run()`` is
    repeated once without reading the cache. A cache entry can decode, verify and still belong to
    another model; without this, such an entry would fail every later run."""
    from hdp.errors import HdpError, is_stale

    first = len(cache.hits) if cache is not None else 0
    try:
        return run()
    except HdpError as e:
        if cache is None or not is_stale(e) or len(cache.hits) == first:
            raise
        cache.discard(cache.hits[first:], str(e))  # (the pass manager may have done so already)
    cache.reading = False
    try:
        return run()
    finally:
        cache.reading = True


def takes_target(cls: type[Pass]) -> bool:
    """Whether a pass has a ``target: Target`` field (filled from --target / --devices)."""
    import msgspec

    return any(f.name == "target" and f.type is Target for f in msgspec.structs.fields(cls))


def make_pass(name: str, options: dict) -> Pass:
    """Build a pass value from its name and options (strings are converted to the field types;
    a pass with a ``from_options`` classmethod, such as ``partition``, builds itself)."""
    import msgspec

    from hdp.errors import InputError

    reg = registry()
    if name not in reg:
        raise InputError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))})")
    cls = reg[name]
    if hasattr(cls, "from_options"):
        return cls.from_options(options)
    try:
        return msgspec.convert(options, cls, strict=False)
    except msgspec.ValidationError as e:
        raise InputError(f"pass '{name}': invalid option: {e}") from None


#: The pass that provides each stage a method may need.
STAGE_PASS = {"costs": "profile", "features": "features", "coarse": "coarsen"}


def compile_schedule(target: Target, method: str, seed: int = 0, extra: dict | None = None,
                     refine: bool = False) -> list[Pass]:
    """The passes ``hdp compile`` runs for a method on a target, in order.

    The profile always comes right after ``support`` (before features or coarsening), so every
    method that needs costs profiles the same input: one profile per model and target."""
    from hdp.placers.options import method_from

    placer = method_from(method, extra)
    # on a target with modeled devices the simulated latency is the result every method reports
    # (beside the best single device and the lower bound): costs are needed, and cheap to model
    needs = set(placer.stages(target)) | ({"costs"} if refine or not target.is_real else set())
    reg = registry()
    sched: list[Pass] = [make_pass("support", {"target": target})]
    for stage in ("costs", "features", "coarse"):
        if stage in needs:
            pname = STAGE_PASS[stage]
            sched.append(make_pass(pname, {"target": target} if takes_target(reg[pname]) else {}))
    sched.append(reg["partition"](target=target, placer=placer, seed=seed))
    sched.append(make_pass("assign", {"refine": refine}))
    return sched


def default_method(target: Target) -> str:
    """``single:<dev>`` for one device; ``auto`` for several (see :mod:`hdp.placers.auto`)."""
    if len(target.devices) == 1:
        return f"single:{target.devices[0].name}"
    return "auto"

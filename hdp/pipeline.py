"""The default pass schedule of ``hdp compile`` and the cached frontend step."""

from __future__ import annotations

from pathlib import Path

from hdp.ir import serde
from hdp.ir.types import Module
from hdp.passes.base import Pass, registry
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument
from hdp.runtime.target import Target

#: Bump when the frontend's output changes for the same model file.
FRONTEND_VERSION = 2


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
    hit = module is not None
    if module is None:
        module = lower(xml, request)
        if key:
            cache.put(key, module)
    for ins in instruments:
        ins.after("lower", key or "", hit, module)
    return module


def takes_target(cls: type[Pass]) -> bool:
    """Whether a pass has a ``target: Target`` field (filled from --target / --devices)."""
    import msgspec

    return any(f.name == "target" and f.type is Target for f in msgspec.structs.fields(cls))


def make_pass(name: str, options: dict) -> Pass:
    """Build a pass value from its name and options (strings are converted to the field types)."""
    import msgspec

    from hdp.errors import InputError

    reg = registry()
    if name not in reg:
        raise InputError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))})")
    cls = reg[name]
    try:
        return msgspec.convert(options, cls, strict=False)
    except msgspec.ValidationError as e:
        raise InputError(f"pass '{name}': invalid option: {e}") from None


def compile_schedule(target: Target, method: str, seed: int = 0, extra: dict | None = None,
                     refine: bool = False) -> list[Pass]:
    """The passes ``hdp compile`` runs for a method on a target, in order."""
    from hdp.placers import parse_method, placers

    name, _ = parse_method(method)
    _, needs, _ = placers()[name]
    reg = registry()
    sched: list[Pass] = [make_pass("support", {"target": target})]
    for stage in ("features", "costs", "coarse"):
        if stage in needs:
            pname = {"features": "features", "costs": "profile", "coarse": "coarsen"}[stage]
            if pname not in reg:
                from hdp.errors import InputError

                raise InputError(f"method '{method}' needs the '{pname}' pass, which is not available")
            opts = {"target": target} if takes_target(reg[pname]) else {}
            sched.append(make_pass(pname, opts))
    opts = {"target": target, "method": method, "seed": seed}
    opts.update(extra or {})
    sched.append(make_pass("partition", opts))
    if refine and "costs" not in needs:
        sched.insert(-1, make_pass("profile", {"target": target}))
    sched.append(make_pass("assign", {"refine": refine}))
    return sched



def default_method(target: Target) -> str:
    """``single:<dev>`` for one device; ``hsdag`` for several when available, else hetero-auto."""
    from hdp.placers import placers

    if len(target.devices) == 1:
        return f"single:{target.devices[0].name}"
    return "hsdag" if "hsdag" in placers() else "hetero-auto"

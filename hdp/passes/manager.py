"""Runs a schedule of passes with verification, caching and instruments."""

from __future__ import annotations

from collections.abc import Sequence

from hdp.errors import HdpError, PassError, is_stale
from hdp.ir import serde
from hdp.ir.types import STAGES, Module
from hdp.ir.verify import VerifyError, verify
from hdp.passes.base import Pass
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument


def pass_key(p: Pass, input_digest: str) -> str:
    """hash(name, version, encoded options but ``key_exclude``, input digest), plus the host
    fingerprint for a pass whose output depends on the host (:meth:`Pass.depends_on_host`)."""
    parts = [p.pass_name(), type(p).version, p.key_value(), input_digest]
    if p.depends_on_host():
        from hdp.runtime.host import host_fingerprint

        parts.append(host_fingerprint())
    return serde.digest_bytes(serde.encode_any(parts))


def check_schedule(passes: Sequence[Pass], available: Sequence[str]) -> None:
    """Raise if a pass requires a stage that neither the input nor an earlier pass provides."""
    have = set(available)
    for p in passes:
        missing = [r for r in type(p).requires if r not in have]
        if missing:
            raise HdpError(
                f"pass '{p.pass_name()}' requires {', '.join(missing)}, which no earlier pass "
                f"provides (have: {', '.join(s for s in STAGES if s in have) or 'nothing'})"
            )
        have.update(type(p).provides)


#: Meta entries that tie a module to its source model; no pass changes them.
SOURCE_META = ("source", "source_digest", "specialisation")


def consistent(before: Module, after: Module, p: Pass) -> bool:
    """Whether ``after`` (a cached output of ``p``) can be ``p``'s output for ``before``: the same
    graph, source and every stage ``p`` does not provide. An entry that decodes and verifies may
    still hold another model's module (forged, or written under a wrong key)."""
    if after.graph != before.graph or after.schema != before.schema:
        return False
    if any(after.meta.get(k) != before.meta.get(k) for k in SOURCE_META):
        return False
    return all(getattr(after, s) == getattr(before, s) for s in STAGES
               if s != "graph" and s not in type(p).provides)


class PassManager:
    def __init__(self, passes: Sequence[Pass], cache: PassCache | None = None,
                 instruments: Sequence[Instrument] = (), verify_each: bool = True):
        self.passes = list(passes)
        self.cache = cache
        self.instruments = list(instruments)
        self.verify_each = verify_each

    def run(self, module: Module) -> Module:
        check_schedule(self.passes, module.stages())
        cur_digest = serde.digest(module)
        for p in self.passes:
            name = p.pass_name()
            key = pass_key(p, cur_digest)
            for ins in self.instruments:
                ins.before(name, key)
            out = self.cache.get(key) if self.cache else None
            if out is not None and not consistent(module, out, p):
                self.cache.discard([key], f"pass '{name}' output for another input")
                out = None
            hit = out is not None
            if out is None:
                try:
                    out = p.run(module)
                except HdpError as e:
                    if isinstance(e, PassError):
                        raise
                    msg = str(e)
                    if is_stale(e) and self.cache is not None and self.cache.hits:
                        # a module read from the cache may be another model's: without this, every
                        # later run would read it again and fail the same way
                        self.cache.discard(self.cache.hits, msg)
                        msg += " (it came from the cache, which is now discarded: run the command again)"
                    raise PassError(name, msg, stale=is_stale(e)) from e
                if self.verify_each:
                    try:
                        verify(out)
                    except VerifyError as e:
                        raise PassError(name, f"produced an invalid module: {e}") from e
            encoded = serde.encode(out)
            if self.cache and not hit:
                self.cache.put(key, out, encoded)
            cur_digest = serde.digest_bytes(encoded)
            module = out
            for ins in self.instruments:
                ins.after(name, key, hit, module)
        return module

"""``hdp evaluate a.xml b.xml ...``: placements of one model head to head, each file checked at
its own tolerance and run on the devices of the target it was placed for (files of different
targets only with ``--across-targets``), one verdict per pair (:func:`evaluate_several`)."""

from __future__ import annotations

import json
import os

import click
import msgspec

from hdp.base.errors import InputError
from hdp.ir.specialise import Specialisation
from hdp.runtime.measure.measurement import (
    MeasureError,
    default_plain,
    placed_file,
    unplaced,
)
from hdp.runtime.measure.measurer import Measurer, placed_device_of
from hdp.runtime.measure.stats import SequentialPlan
from hdp.runtime.placed.model import ops_placed, placed_count_text, read_placed
from hdp.runtime.serve.verify import check_placed_file
from hdp.target.devices import host_kinds


def _recorded(f: str, key: str) -> str:
    try:
        return read_placed(f).model.get_rt_info(["hdp", key]).astype(str)
    except RuntimeError:
        return ""


def _same_model(files: list[str]) -> None:
    """Refuse placements of different models: each file records the model it placed (its source
    and digest, by hdp 0.x and later); a head-to-head runs placements of one model."""
    first = files[0]
    want = _recorded(first, "source_digest")
    for f in files[1:]:
        got = _recorded(f, "source_digest")
        if want and got and got != want:
            raise InputError(f"{f}: a placement of {_recorded(f, 'source') or 'another model'}, {first} of "
                             f"{_recorded(first, 'source') or 'another model'}: these are different models; a head-to-head "
                             f"compares placements of one model (`hdp evaluate FILE --plain default` measures each alone)")


def placed_targets(files: list[str], across: bool, given) -> dict[str, object]:
    """The target each file is measured on: ``given`` (``--target``/``--devices``) for all, else each
    file's own (the one it was placed for); files placed for different targets are refused in one
    line unless ``across`` (``--across-targets``)."""
    if given is not None:
        return {f: given for f in files}
    own = {f: placed_device_of(f)[2] for f in files}
    first = files[0]
    other = next((f for f in files[1:] if msgspec.json.encode(own[f]) != msgspec.json.encode(own[first])), None)
    if other is not None and not across:
        raise InputError(f"{other} was placed for target '{own[other].name}', {first} for '{own[first].name}': "
                         f"give --across-targets to compare them, each on the devices it was placed for")
    return own


def evaluate_several(files: list[str], tgt, *, runs, warmup, timeout, plain, resolution, max_seconds,
                      as_json, across=False) -> None:
    """``hdp evaluate a.xml b.xml ...``: every file checked on its own target (at its own tolerance),
    then the distinct placements (and ``plain``) measured head to head in one worker, each file on
    the devices it was placed for; one verdict per pair."""

    seen: dict[str, str] = {}
    for f in files:
        real = os.path.realpath(f)
        if real in seen:
            raise InputError(f"{f}: given twice (as {seen[real]}); give each placed model once")
        seen[real] = f
    _same_model(files)
    targets = placed_targets(files, across, tgt)
    mixed = len({msgspec.json.encode(t) for t in targets.values()}) > 1
    tgt = targets[files[0]]
    specs = {f: _recorded(f, "specialisation") for f in files}
    first = files[0]
    for f in files[1:]:
        if specs[f] != specs[first]:
            def shapes(text, where):
                return Specialisation.from_json(text, where).input_shapes() if text else "no recorded shapes"

            raise InputError(f"{f}: placed at {shapes(specs[f], f)}, {first} at {shapes(specs[first], first)}; "
                             f"a head-to-head runs every placement on the same inputs: compile them at the "
                             f"same shapes")
    cands = [placed_file(f, f, targets[f], own=mixed) for f in files]
    checks = {}
    for f in files:
        checks[f] = check_placed_file(f, targets[f], timeout=timeout)
        if not checks[f].passed:
            raise MeasureError(f"{f}: the placed model {checks[f].describe()}")
    # identical placements (the same graph, the same device per op) are measured once
    distinct: list[int] = []
    same_as: dict[int, int] = {}
    for i, c in enumerate(cands):
        j = next((k for k in distinct if cands[k].graph == c.graph), None)
        if j is None:
            distinct.append(i)
        else:
            same_as[i] = j
    run = [cands[i] for i in distinct] + ([_plain_candidate(plain)] if plain else [])
    plan = SequentialPlan(resolution=resolution / 100, min_rounds=max(runs, 6), max_rounds=max(runs, 1000),
                          max_seconds=max_seconds, all_pairs=True)
    head = None
    if len(run) > 1:
        with Measurer(first, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=False) as m:
            head = m.head_to_head(run, plan)
    pairs = [{"a": cands[j].name, "b": cands[i].name, "identical": True,
              "text": f"{cands[i].name} vs {cands[j].name}: identical placements (the same graph, every op on "
                      f"the same device): no timing difference to claim"} for i, j in same_as.items()]
    for a in range(len(run)):
        for b in range(a + 1, len(run)):
            na, nb = run[a].name, run[b].name
            bad = [head.measurements[k] for k in (a, b) if not head.measurements[k].ok]
            if bad:
                pairs.append({"a": na, "b": nb, "identical": False, "error": bad[0].error,
                              "text": f"{nb} vs {na}: not compared ({bad[0].error})"})
                continue
            c = head.compare(a, b)
            same = " (the same graph: never called faster)" if c.same_graph else ""
            pairs.append({"a": na, "b": nb, "identical": False, "comparison": c.to_dict(),
                          "text": f"{nb} vs {na}: {c.describe()}{same}"})
    if as_json:
        out = {"files": files, "target": tgt.name, "targets": {f: t.name for f, t in targets.items()},
               "cached": False, "check": {f: msgspec.to_builtins(r) for f, r in checks.items()},
               "ops_placed": {f: _ops_placed(f) for f in files},
               "identical": {cands[i].name: cands[j].name for i, j in same_as.items()},
               "measurements": {c.name: m.to_dict() for c, m in zip(run, head.measurements)} if head else {},
               "rounds": head.rounds if head else 0, "seconds": head.seconds if head else 0.0,
               "stopped": head.reason if head else "", "pairs": pairs,
               "load": msgspec.to_builtins(head.load) if head and head.load else None,
               "loaded": bool(head and head.loaded)}
        click.echo(json.dumps(out, indent=2))
    else:
        for f in files:
            counts = _ops_placed(f)
            on = f" for {targets[f].name}" + (f"; {placed_count_text(counts)}" if counts else "")
            click.echo(f"{f}{on}: {checks[f].describe()}")
        if head is not None:
            click.echo(head.header())
        for p in pairs:
            click.echo(p["text"])
    if head is not None:
        failed = [m for m in head.measurements if not m.ok]
        if failed:
            raise MeasureError(failed[0].error)


def _ops_placed(f: str) -> dict[str, int] | None:
    return ops_placed(read_placed(f).model)


def _plain_candidate(plain: str):
    """``--plain DEVICE``: the target's device compiled without HETERO; ``--plain default`` (or
    ``default:KIND``): the host's default plain compile on a device kind (first: this host's first)."""
    kind, _, dev = plain.partition(":")
    if kind == "default":
        return default_plain(dev or host_kinds()[0])
    return unplaced(plain)

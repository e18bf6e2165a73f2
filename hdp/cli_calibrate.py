"""``hdp calibrate``: fit the boundary model of a real target on this host (see
:mod:`hdp.runtime.calibrate`). Registered on the main group in :mod:`hdp.cli`."""

from __future__ import annotations

from pathlib import Path

import click

from hdp.cli_common import (cache_options, cache_scoped, check_paths, pass_cache, shape_options,
                             shape_request, target_from, target_path, timeout_option, user_errors, with_options)


def prepare(xml, tgt, shapes, cache, timeout=None, instruments=()):
    """The lowered model with ``support``, ``profile`` and ``coarsen`` (what calibrating needs)."""
    from hdp.pipeline import lower_cached, make_pass, run_passes

    module = lower_cached(xml, shapes, cache, list(instruments))
    passes = [make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt}),
              make_pass("coarsen", {})]
    return run_passes(module, passes, cache=cache, timeout=timeout, instruments=instruments)


@click.command("calibrate")
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--target", default=None, help="A target with real devices (name or TOML)  [default: virtual]")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@with_options(shape_options)
@click.option("--heldout", default=10, show_default=True, type=click.IntRange(0),
              help="Placements per model measured but never fitted (heft and random ones); their errors are reported.")
@click.option("--random", "fit_random", default=4, show_default=True, type=click.IntRange(0),
              help="Random placements per coarse group in the fitted design (besides single devices, blocks, "
                   "fine-grained random and optimal).")
@click.option("--resolution", default=4.0, show_default=True, type=click.FloatRange(0, 100, min_open=True),
              help="Run interleaved rounds until every ratio to the reference is known to ± half this many "
                   "percent (95 % interval) ...")
@click.option("--max-seconds", default=240.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="... or for at most this long per comparison (a reference and --batch placements).")
@click.option("--batch", default=3, show_default=True, type=click.IntRange(1, 8),
              help="Placements measured in one interleaved comparison with the reference.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--fresh", is_flag=True, help="Forget the stored observations of other models (refit on these only).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Also write the calibration (parameters and every observation) as JSON.")
@timeout_option
@with_options(cache_options("the calibration is stored under <cache-dir>/calibrate",
                            "Store nothing and use no stored observation (print only)."))
@user_errors
@cache_scoped
def calibrate_cmd(models, target, devices, input_shape, seq_len, phase, heldout, fit_random, resolution, max_seconds,
                  batch, seed, fresh, json_out, timeout, cache_dir, no_cache):
    """Measure placements of MODELS on a real target and fit what a cut between devices costs on
    this host (per HETERO subgraph, per copied tensor, per byte), with corrections of each model's
    profile, and what hdp's concurrent executor adds (per inference, per subgraph, per hand-over
    between devices, per byte a sub-model converts; used by `--execution concurrent`): a probe
    measures them, then placements of each model run by the executor refit the conversion cost. The result is stored per host, OpenVINO version and target in the hdp cache, and
    `hdp compile` uses it from then on (the `boundary` pass after `profile`).

    Every placement is measured interleaved with a reference (every op on the first device), so
    the load of other processes cancels; expect 5-15 minutes per model on a busy 2-core machine."""
    import msgspec

    from hdp.errors import InputError
    from hdp.pipeline import calibrate as experiment
    from hdp.runtime import calibrate as C

    check_paths(inputs={**{f"MODEL {i + 1}": m for i, m in enumerate(models)}, "--target": target_path(target)},
                outputs={"--json": json_out}, out_dirs={"--cache-dir": None if no_cache else cache_dir})
    tgt = target_from(target if target or devices else "virtual", devices)
    if not any(d.kind == "real" for d in tgt.devices) or any(d.kind != "real" for d in tgt.devices):
        raise InputError(f"target '{tgt.name}': calibrating needs every device real (modeled devices cannot be "
                         f"measured)")
    if len(tgt.devices) < 2:
        raise InputError(f"target '{tgt.name}' has one device: there is no boundary to calibrate")
    shapes = shape_request(input_shape, seq_len, phase)
    cache = pass_cache(cache_dir, no_cache)
    plan = experiment.precision_plan(resolution=resolution / 100, max_seconds=max_seconds)
    store = None if cache is None else C.CalibrationStore(cache.dir)
    old = store.get(tgt) if store is not None and not fresh else None
    from hdp.runtime.concurrent import fit_executor_costs

    observations: list = []
    modules = []
    kw = {"timeout": timeout} if timeout else {}
    for xml in models:
        module = prepare(xml, tgt, shapes, cache, timeout)
        name = Path(xml).stem
        obs = experiment.calibrate_module(module, tgt, model=name, seed=seed, heldout=heldout,
                                          fit_random=fit_random, plan=plan, batch=batch,
                                          say=lambda s: click.echo(f"  {s}"), **kw)
        if not obs:
            raise InputError(f"{xml}: no placement could be measured")
        observations += obs
        modules.append((name, module))
    new_tables = {o.costs for o in observations}
    if old is not None:
        kept = [o for o in old.observations if o.costs not in new_tables]
        if kept:
            click.echo(f"refitting with {len(kept)} stored observations of "
                       f"{len({o.costs for o in kept})} other profiles (--fresh to drop them)")
        observations = kept + observations
    # then the concurrent executor: its own costs probed, and placements of each model it runs,
    # simulated on the costs this boundary fit gives them (as hdp compile will)
    fitted = C.build(tgt, observations)
    executor = fit_executor_costs(tgt)
    executed = []
    for name, module in modules:
        executed += experiment.calibrate_executor(module, fitted, tgt, executor, model=name, seed=seed,
                                                  heldout=heldout, fit_random=fit_random, plan=plan, batch=batch,
                                                  say=lambda s: click.echo(f"  {s}"), **kw)
    if old is not None:  # other profiles' executor observations, simulated with an earlier probe's costs
        executed = [o for o in old.executor_observations if o.costs not in new_tables] + executed

    cal = C.with_executor(fitted, executor, executed)
    # then HETERO serving requests in flight: placements of each model served beside the plain first
    # device, to fit what a subgraph costs a served request (--objective throughput's hand-off)
    served = []
    for name, module in modules:
        served += experiment.calibrate_pipeline(module, cal, tgt, model=name, say=lambda s: click.echo(f"  {s}"),
                                                **kw)
    if old is not None:
        served = [o for o in old.pipeline_observations if o.costs not in new_tables] + served
    cal = C.with_pipeline(cal, served)
    for line in C.report(cal):
        click.echo(line)
    agree = [o for o in cal.observations if o.hetero_subgraphs > 0]
    if agree:
        same = sum(o.features.subgraphs == o.hetero_subgraphs for o in agree)
        worst = max(abs(o.features.subgraphs - o.hetero_subgraphs) / o.hetero_subgraphs for o in agree)
        click.echo(f"subgraph count: the simulator's equals HETERO_NUMBER_OF_SUBMODELS on {same} of {len(agree)} "
                   f"placements (largest difference {worst * 100:.1f} %)")
    odd = C.implausible(cal.models, cal.devices)
    if odd:
        click.echo(f"not stored: the fit is implausible ({'; '.join(odd)}): the devices did not run the "
                   f"placements the way they ran the profile, and compiles using this fit would be misled", err=True)
    elif store is not None:
        where = store.put(cal, tgt)
        click.echo(f"stored -> {where}")
    else:
        click.echo("not stored (--no-cache)")
    if json_out:
        from hdp.fsutil import atomic_write

        atomic_write(json_out, msgspec.json.format(msgspec.json.encode(cal), indent=1))
    if odd:
        raise SystemExit(1)

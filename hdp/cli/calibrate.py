"""``hdp calibrate``: fit the boundary model of a real target on this host (see
:mod:`hdp.runtime.costs.calibrate`). Registered on the main group in :mod:`hdp.cli.main`."""

from __future__ import annotations

from pathlib import Path

import click
import msgspec

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_write
from hdp.base.validation import Count, Percent, Seed, TimeLimit
from hdp.cli.common import (
    Bounded,
    cache_options,
    cache_scoped,
    check_paths,
    pass_cache,
    shape_options,
    shape_request,
    target_from,
    target_path,
    timeout_option,
    user_errors,
    with_options,
)
from hdp.pipeline import calibrate as experiment
from hdp.pipeline.schedule import make_pass, run_passes
from hdp.pipeline.stages import lower_cached
from hdp.runtime.costs import calibrate as C
from hdp.runtime.costs import links as L
from hdp.runtime.costs.executor import fit_executor_costs
from hdp.runtime.costs.stream_fit import with_streams
from hdp.target.hosts import link_text


def prepare(xml, tgt, shapes, cache, timeout=None, instruments=()):
    """The lowered model with ``support``, ``profile`` and ``coarsen`` (what calibrating needs)."""

    module = lower_cached(xml, shapes, cache, list(instruments))
    passes = [make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt}),
              make_pass("coarsen", {})]
    return run_passes(module, passes, cache=cache, timeout=timeout, instruments=instruments)


@click.command("calibrate")
@click.argument("models", nargs=-1, required=False, type=click.Path(dir_okay=False))
@click.option("--target", default=None, help="A target with real devices (name or TOML)  [default: virtual]")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@with_options(shape_options)
@click.option("--heldout", default=10, show_default=True, type=Bounded(Count),
              help="Placements per model measured but never fitted (heft and random ones); their errors are reported.")
@click.option("--random", "fit_random", default=4, show_default=True, type=Bounded(Count),
              help="Random placements per coarse group in the fitted design (besides single devices, blocks, "
                   "fine-grained random and optimal).")
@click.option("--resolution", default=4.0, show_default=True, type=Bounded(Percent),
              help="Run interleaved rounds until every ratio to the reference is known to ± half this many "
                   "percent (95 % interval) ...")
@click.option("--max-seconds", default=240.0, show_default=True, type=Bounded(TimeLimit),
              help="... or for at most this long per comparison (a reference and --batch placements).")
@click.option("--batch", default=3, show_default=True, type=click.IntRange(1, 8),
              help="Placements measured in one interleaved comparison with the reference.")
@click.option("--seed", default=0, show_default=True, type=Bounded(Seed))
@click.option("--fresh", is_flag=True, help="Forget the stored observations of other models (refit on these only).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Also write the calibration (parameters and every observation) as JSON.")
@click.option("--link", default=None, metavar="A,B",
              help="Measure the link between hosts A and B of --target instead (numpy arrays moved between two Ray "
                   "actors pinned by the resources hdp_host_A and hdp_host_B; needs Ray). No MODELS then.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="With --link: the Ray cluster to use (default: a local Ray started for the measurement).")
@timeout_option
@with_options(cache_options("the calibration is stored under <cache-dir>/calibrate",
                            "Store nothing and use no stored observation (print only)."))
@user_errors
@cache_scoped
def calibrate_cmd(models, target, devices, input_shape, seq_len, phase, heldout, fit_random, resolution, max_seconds,
                  batch, seed, fresh, json_out, link, ray_address, timeout, cache_dir, no_cache):
    """Measure placements of MODELS on a real target and fit what a cut between devices costs on
    this host (per HETERO subgraph, per copied tensor, per byte), with corrections of each model's
    profile, and what hdp's concurrent executor adds (per inference, per subgraph, per hand-over
    between devices, per byte a sub-model converts; used by `--execution concurrent`): a probe
    measures them, then placements of each model run by the executor refit the conversion cost. The result is stored per host, OpenVINO version and target in the hdp cache, and
    `hdp compile` uses it from then on (the `boundary` pass after `profile`).

    Every placement is measured interleaved with a reference (every op on the first device), so
    the load of other processes cancels; expect 5-15 minutes per model on a busy 2-core machine.

    With --link A,B it measures the link between two hosts of the target instead, fits latency +
    bytes / bandwidth and stores the fit; `hdp compile` then uses it in place of the target's
    [[links]] entry."""

    if link is not None:
        if models:
            raise click.UsageError("--link measures a link between hosts: give no MODELS with it")
        return _calibrate_link(link, target, devices, ray_address, json_out, cache_dir, no_cache)
    if not models:
        raise click.UsageError("Missing argument 'MODELS...' (or --link A,B to measure a link between hosts).")

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
    # then each device's streams: its plain compile with one and with two, for serving plans
    streamed = []
    for name, module in modules:
        streamed += experiment.calibrate_streams(module, tgt, model=name, say=lambda s: click.echo(f"  {s}"), **kw)
    if old is not None:
        done = {(o.model, o.device) for o in streamed}
        streamed = [o for o in old.stream_observations if (o.model, o.device) not in done] + streamed
    cal = with_streams(cal, streamed)
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
        atomic_write(json_out, msgspec.json.format(msgspec.json.encode(cal), indent=1))
    if odd:
        raise SystemExit(1)


def _calibrate_link(spec, target, devices, ray_address, json_out, cache_dir, no_cache):
    """``hdp calibrate --link A,B``: measure, fit, store and say which link compiles will use."""
    check_paths(inputs={"--target": target_path(target)}, outputs={"--json": json_out},
                out_dirs={"--cache-dir": None if no_cache else cache_dir})
    tgt = target_from(target, devices)
    a, b = L.check_pair(tgt, spec)
    declared = tgt.host_link(a, b)
    fit = L.measure_link(tgt, a, b, address=ray_address, say=lambda s: click.echo(f"  {s}"))
    where = "between the hosts' Ray nodes" if fit.placed == "hosts" else "on this machine (loopback)"
    click.echo(f"link {a}-{b} measured {where}: {link_text(fit.latency, fit.bandwidth)}, least-squares residual "
               f"{fit.residual * 1e6:.3g} us over {len(fit.sizes)} sizes")
    if declared is not None:
        click.echo(f"target's [[links]] entry: {link_text(declared.latency, declared.bandwidth)}")
    cache = pass_cache(cache_dir, no_cache)
    if cache is None:
        click.echo("not stored (--no-cache): compiles use the target's link")
    else:
        path = L.LinkStore(cache.dir).put(tgt, fit)
        click.echo(f"stored -> {path}; compiles of target '{tgt.name}' use the fitted link in place of the target's")
    if json_out:
        atomic_write(json_out, msgspec.json.format(msgspec.json.encode(fit), indent=1))

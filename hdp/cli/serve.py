"""``hdp serve plan.json`` and ``hdp evaluate plan.json``: a serving plan run, measured (argument
parsing and printing; the runtime is :mod:`hdp.runtime.serve.plan_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.cli.common import Bounded, check_paths, field_type, user_errors
from hdp.ir.plan import read_plan
from hdp.placement.objective import Throughput
from hdp.runtime.serve.plan_run import plan_target
from hdp.runtime.serve.plan_serve import plan_verdict, serve_in_subprocess, served_lines
from hdp.runtime.serve.ray_run import RAY_MISSING, actor_layout, ray_available, ray_lines, serve_ray_in_subprocess
from hdp.runtime.serve.serving import plain_streams_config
from hdp.runtime.serve.verify import tolerance
from hdp.target.target import devices_target


def _requests(requests: int | None, plan) -> int:
    return plan.requests if requests is None else requests


def _tolerance(plan) -> float:
    return tolerance(plan_target(plan), plan.device_names(), stateful=False)


@click.command("serve")
@click.argument("plan", type=click.Path())
@click.option("--requests", type=Bounded(field_type(Throughput, "requests")), default=None,
              help="Requests in flight  [default: the plan's]")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="How long to serve (windows of about a quarter second each).")
@click.option("--timeout", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Seconds before the serving process is killed  [default: --seconds + 300]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (rates per second, latencies in seconds).")
@click.option("--ray", "ray_address", default=None, metavar="auto|ADDRESS",
              help="Serve on Ray: one actor per stage replica on the host the plan names (Ray resource "
                   "hdp_host_<name>). auto: a local Ray started and shut down for this run; ADDRESS: join that "
                   "cluster (ip:port).")
@click.option("--placement-timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              help="With --ray: seconds an actor may wait for its host's node and load its blob.")
@user_errors
def serve_cmd(plan, requests, seconds, timeout, as_json, ray_address, placement_timeout):
    """Serve a serving plan (PLAN: its plan.json or directory, from `hdp compile -o DIR --objective
    throughput`) alone with --requests in flight for --seconds, in a process of its own; print
    requests/s and the p50/p99 latency with their 95 % intervals (over windows), each stage's
    utilisation, and whether the first requests' outputs match the unsplit model's. With --ray, on
    Ray: each stage replica an actor, wired by a Compiled Graph when all sit on one node, by actor
    calls otherwise (the output says which); a replica that dies is named and its requests go to the
    stage's other replicas."""
    if ray_address is not None:
        if not ray_address.strip():
            raise click.BadParameter("give auto or a cluster's address (ip:port)", param_hint="--ray")
        if not ray_available():
            raise InputError(RAY_MISSING)
    check_paths(inputs={"PLAN": plan if not Path(plan).is_dir() else Path(plan) / "plan.json"})
    p = read_plan(plan)
    n = _requests(requests, p)
    if ray_address is not None:
        actor_layout(p)  # a placed pipeline is refused before anything starts
        got = serve_ray_in_subprocess(plan, timeout=timeout or seconds + 300.0 + 2 * placement_timeout,
                                      ray=ray_address.strip(), requests=n, seconds=seconds, tolerance=_tolerance(p),
                                      placement_timeout=placement_timeout)
        if as_json:
            click.echo(json.dumps(msgspec.to_builtins(got), indent=2))
        else:
            for line in ray_lines(got):
                click.echo(line)
        if got.error:
            raise InputError(f"{plan}: not served on Ray: {got.error}")
        if not got.served.check_passed:
            raise InputError(f"{plan}: the plan's outputs differ from the unsplit model's "
                             f"(relative error {got.served.check_error:.2e} > {got.served.tolerance:.0e})")
        return
    got = serve_in_subprocess(plan, timeout=timeout or seconds + 300.0, requests=n, seconds=seconds,
                              tolerance=_tolerance(p))
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(got), indent=2))
    else:
        for line in served_lines(got):
            click.echo(line)
    if not got.ok:
        raise InputError(f"{plan}: not served: {got.error}")
    if not got.check_passed:
        raise InputError(f"{plan}: the plan's outputs differ from the unsplit model's "
                         f"(relative error {got.check_error:.2e} > {got.tolerance:.0e})")


def evaluate_plan(plan, *, requests: int | None, runs: int, plain: str | None, timeout: float, as_json: bool) -> None:
    """``hdp evaluate plan.json [--plain DEV]``: the plan served with --requests in flight over
    --runs windows, beside the plain compile of the model it was planned from on DEV with its own
    streams (windows alternating), with the paired ratio and its verdict."""
    loaded = read_plan(plan)
    n = _requests(requests, loaded)
    config = None
    if plain:
        tgt = plan_target(loaded)
        names = [d.name for d in tgt.devices]
        dev = tgt.device(plain) if plain in names else None
        if dev is None:  # a device the plan does not name: as --devices gives it
            dev = devices_target([plain]).device(plain)
        config = plain_streams_config(dev, n)
        if not loaded.model or not Path(loaded.model).is_file():
            raise InputError(f"{plan}: model: '{loaded.model}' (the model it was planned from) is gone; --plain "
                             f"compiles it beside the plan")
    got = serve_in_subprocess(plan, timeout=timeout * 10, requests=n, batches=max(runs, 2), plain_on=plain,
                              plain_config=config, plain_model=loaded.model if plain else None,
                              tolerance=_tolerance(loaded))
    if as_json:
        out = msgspec.to_builtins(got)
        c = got.versus()
        if c is not None:
            out["comparison"] = c.to_dict()
        click.echo(json.dumps(out, indent=2))
        return
    for line in served_lines(got):
        click.echo(line)
    if plain:
        c = got.versus()
        if c is not None and got.plain_rates:
            est = float(np.median(got.plain_rates))
            click.echo(f"plain {plain} ({', '.join(f'{k}={v}' for k, v in (config or {}).items())}): "
                       f"{est:.1f} requests/s (median of {len(got.plain_rates)} windows beside the plan's)")
            click.echo(f"plan vs plain {plain} (windows side by side, time per request): {c.describe()}")
        click.echo(plan_verdict(got, plain, n, config or {}))
    if not got.ok:
        raise InputError(f"{plan}: not served: {got.error}")


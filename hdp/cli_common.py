"""Helpers shared by the ``hdp`` command modules: user-error handling, --target, the caches."""

from __future__ import annotations

import functools
import sys

import click

from hdp.errors import HdpError


def fail(msg: str) -> None:
    click.echo(f"hdp: error: {msg}", err=True)
    sys.exit(2)


def user_errors(fn):
    """Turn HdpError (a user mistake) into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except HdpError as e:
            fail(str(e))
        except KeyboardInterrupt:
            fail("interrupted")

    return wrapper


def target_from(target: str | None, devices: str | None):
    from hdp.runtime.target import devices_target, load_target

    if target and devices:
        raise click.UsageError("give --target or --devices, not both")
    if devices:
        return devices_target([d.strip() for d in devices.split(",") if d.strip()])
    return load_target(target or "host")


def pass_cache(cache_dir: str | None, no_cache: bool):
    from hdp.passes.cache import PassCache, default_cache_dir

    if no_cache:
        return None
    return PassCache(cache_dir or default_cache_dir())


#: The specialisation options of ``compile``, ``lower`` and ``profile`` (see hdp.ir.openvino_frontend).
shape_options = [
    click.option("--input-shape", multiple=True,
                 help="NAME:D0,D1,...[:TYPE] static shape (and, for a 'dynamic' one, element type) of "
                      "an input or a state variable that hdp costs at (repeatable; NAME: for a scalar). "
                      "The written model keeps the original's dynamic shapes."),
    click.option("--seq-len", type=click.IntRange(1), default=None,
                 help="Sequence length for dynamic input_ids/attention_mask/position_ids/token_type_ids "
                      "[default: 128]."),
    click.option("--phase", type=click.Choice(["prefill", "decode"]), default="prefill", show_default=True,
                 help="Stateful (KV-cache) models: cost the prompt (seq-len tokens, empty cache) or one "
                      "generation step (1 token after a seq-len cache)."),
]


def with_options(opts):
    """Apply a list of click options to a command, in order."""
    def deco(fn):
        for o in reversed(opts):
            fn = o(fn)
        return fn

    return deco


def shape_request(input_shape, seq_len, phase):
    from hdp.ir.openvino_frontend import parse_request

    return parse_request(input_shape, seq_len, phase)


def cache_scoped(fn):
    """Make every measurement cache of the command follow its ``--cache-dir`` / ``--no-cache``
    (``<cache-dir>/measure``, or nothing), including measurers created inside passes."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        from hdp.runtime.measure import cache_scope

        with cache_scope(kw.get("cache_dir"), enabled=not kw.get("no_cache")):
            return fn(*a, **kw)

    return wrapper

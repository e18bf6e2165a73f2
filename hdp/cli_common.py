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


def cache_scoped(fn):
    """Make every measurement cache of the command follow its ``--cache-dir`` / ``--no-cache``
    (``<cache-dir>/measure``, or nothing), including measurers created inside passes."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        from hdp.runtime.measure import cache_scope

        with cache_scope(kw.get("cache_dir"), enabled=not kw.get("no_cache")):
            return fn(*a, **kw)

    return wrapper

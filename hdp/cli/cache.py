"""``hdp cache info`` and ``hdp cache prune``: the on-disk caches (see :mod:`hdp.base.cache`)."""

from __future__ import annotations

import json

import click

from hdp.base.cache import default_cache_dir, info, parse_size, prune
from hdp.base.errors import InputError
from hdp.cli.common import check_paths, user_errors


def _root(cache_dir: str | None):
    return cache_dir or default_cache_dir()


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@click.group("cache")
def cache_group():
    """Show or prune hdp's caches (pass outputs, measurements, support answers, calibrations, zoo models)."""


_dir_option = click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                           help="Cache root (default: ~/.cache/hdp).")


@cache_group.command("info")
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@user_errors
def cache_info_cmd(cache_dir, as_json):
    """Entries and size per cache, and the size cap (HDP_CACHE_MAX_BYTES)."""

    doc = info(_root(cache_dir))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"cache root: {doc['root']}  (cap {_mb(doc['max_bytes'])} over {', '.join(doc['namespaces'])})")
    for ns, row in doc["namespaces"].items():
        what = "models " if ns == "zoo" else "entries"
        click.echo(f"  {ns:<9} {row['entries']:>7} {what}  {_mb(row['bytes']):>12}")
    click.echo(f"  total     {_mb(doc['total_bytes'])} (pruned least recently used first above the cap)")


@cache_group.command("prune")
@_dir_option
@click.option("--max-size", default=None, metavar="SIZE",
              help="Keep at most SIZE (e.g. 500M, 2G; 0 empties the caches); default: the cap.")
@user_errors
def cache_prune_cmd(cache_dir, max_size):
    """Remove least recently used entries (zoo models included) down to a size, and temporaries of
    killed runs."""

    limit = None
    if max_size is not None:
        try:
            limit = parse_size(max_size)
        except ValueError as e:
            raise InputError(f"--max-size {max_size}: {e} (a size such as 500M or 2G)") from None
    root = _root(cache_dir)
    check_paths(out_dirs={"--cache-dir": root})
    r = prune(root, limit)
    click.echo(f"removed {r['removed']} entries ({_mb(r['freed_bytes'])}) and {r['stale_temporaries']} "
               f"stale temporaries; kept {r['kept']} entries ({_mb(r['kept_bytes'])})")

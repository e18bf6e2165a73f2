"""Where hdp's Numba kernels are cached (set up before any kernel is decorated).

Every kernel is ``@njit(cache=True)`` with :func:`njit` from here, which first points Numba's cache
at ``<hdp cache>/numba`` (``$XDG_CACHE_HOME/hdp/numba``, default ``~/.cache/hdp/numba``) unless
``NUMBA_CACHE_DIR`` is set. Left alone, Numba writes next to the sources (``hdp/passes/__pycache__``),
which fails silently where the package directory is read-only and mixes build products into a
checkout. The environment variable is set too, so worker processes agree. Numba keys a cached
kernel by its source file's contents, the argument types, the Numba version and the CPU, so a stale
entry is never used; an unwritable directory makes Numba fall back to its own locations.

Compiling every kernel takes tens of seconds on a small machine (about 16 s of CPU for
``hdp compile --method optimal`` on a 2-core VM, against 2.6 s once cached): :mod:`hdp.warmup`
(``python -m hdp.warmup``, run by ``make install``) compiles them ahead of time, so the user's first
run loads them from the cache instead. This module only sets the cache up: the kernel modules import
it, so it imports none of them.
"""

from __future__ import annotations

import os

ENV = "NUMBA_CACHE_DIR"


def cache_dir() -> str:
    """Where Numba caches hdp's kernels: ``$NUMBA_CACHE_DIR`` if set, else ``<hdp cache>/numba``."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    from hdp.passes.cache import default_cache_dir

    return str(default_cache_dir() / "numba")


def _configure() -> None:
    import numba.core.config

    if not os.environ.get(ENV):
        os.environ[ENV] = cache_dir()
    if numba.core.config.CACHE_DIR != os.environ[ENV]:
        numba.core.config.reload_config()  # numba read its environment at import, maybe before


def njit(*args, **kwargs):
    """``numba.njit``, with Numba's cache directory set first (see the module docstring)."""
    _configure()
    from numba import njit as _njit

    return _njit(*args, **kwargs)

"""Where hdp's Numba kernels are cached (set up before any kernel is decorated).

Every kernel is ``@njit(cache=True)`` with :func:`njit` from here, which first points Numba's cache
at ``<hdp cache>/numba`` (``$XDG_CACHE_HOME/hdp/numba``, default ``~/.cache/hdp/numba``) unless
``NUMBA_CACHE_DIR`` is set. Left alone, Numba writes next to the sources (``hdp/passes/__pycache__``),
which fails silently where the package directory is read-only and mixes build products into a
checkout. The environment variable is set too, so worker processes agree. Numba keys a cached
kernel by its source file's contents, the argument types, the Numba version and the CPU, so a stale
entry is never used. When that directory cannot be written (``HOME`` read-only or a file, a
read-only ``NUMBA_CACHE_DIR``), the kernels are cached in a private directory under the system's
temporary directory instead, with a warning; when none can be written they are compiled in every
run (Numba itself would fail with "no locator available").

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
    from hdp.cache import default_cache_dir

    return str(default_cache_dir() / "numba")


_state: dict = {}


def _writable(d: str) -> str | None:
    """Why files cannot be created in directory ``d`` (made if missing); None if they can."""
    import tempfile

    try:
        os.makedirs(d, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def _private_temp_dir() -> str | None:
    """``<tmp>/hdp-numba-<uid>``, if it is ours alone (Numba's cache holds pickled code, which
    must not come from a directory another user can write), else a fresh one; None if neither
    can be made."""
    import stat
    import tempfile

    d = os.path.join(tempfile.gettempdir(), f"hdp-numba-{os.getuid()}")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022 \
                and _writable(d) is None:
            return d
        return tempfile.mkdtemp(prefix="hdp-numba-")
    except OSError:
        return None


def _configure() -> bool:
    """Point Numba's cache at a writable directory; False when there is none (no caching)."""
    import warnings

    import numba.core.config

    if "cache" not in _state:
        want = cache_dir()
        why = _writable(want)
        if why is not None:
            fallback = _private_temp_dir()
            where = f"in {fallback} instead" if fallback else "nowhere: they are compiled in every run"
            warnings.warn(f"cannot write Numba's kernel cache in {want} ({why}); compiled kernels are "
                          f"cached {where}", stacklevel=3)
            want = fallback
        if want:
            os.environ[ENV] = want
        _state["cache"] = bool(want)
    if _state["cache"] and numba.core.config.CACHE_DIR != os.environ[ENV]:
        numba.core.config.reload_config()  # numba read its environment at import, maybe before
    return _state["cache"]


def njit(*args, **kwargs):
    """``numba.njit``, with Numba's cache directory set first (see the module docstring)."""
    if not _configure():
        kwargs["cache"] = False
    from numba import njit as _njit

    return _njit(*args, **kwargs)

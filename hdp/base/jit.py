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
``hdp compile --method optimal`` on a 2-core VM, against 2.6 s once cached): :mod:`hdp.pipeline.warmup`
(``python -m hdp.pipeline.warmup``, run by ``make install``) compiles them ahead of time, so the user's first
run loads them from the cache instead. This module only sets the cache up: the kernel modules import
it, so it imports none of them.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import tempfile
import warnings

from hdp.base.cache import default_cache_dir

ENV = "NUMBA_CACHE_DIR"


def cache_dir() -> str:
    """Where Numba caches hdp's kernels: ``$NUMBA_CACHE_DIR`` if set, else ``<hdp cache>/numba``."""
    if os.environ.get(ENV):
        return os.environ[ENV]

    return str(default_cache_dir() / "numba")


_state: dict = {}


def _writable(d: str) -> str | None:
    """Why files cannot be created in directory ``d`` (made if missing); None if they can."""

    try:
        os.makedirs(d, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


#: The system's temporary directory when hdp was imported (a command points ``tempfile`` at a private
#: directory it removes, hdp.cli.common.private_temp; Numba's fallback cache is meant to stay).
_SYSTEM_TEMP = tempfile.gettempdir()


def _private_temp_dir() -> str | None:
    """``<tmp>/hdp-numba-<uid>``, if it is ours alone (Numba's cache holds pickled code, which
    must not come from a directory another user can write), else a fresh one; None if neither
    can be made."""

    d = os.path.join(_SYSTEM_TEMP, f"hdp-numba-{os.getuid()}")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022 \
                and _writable(d) is None:
            return d
        return tempfile.mkdtemp(prefix="hdp-numba-", dir=_SYSTEM_TEMP)
    except OSError:
        return None


def _configure() -> bool:
    """Point Numba's cache at a writable directory; False when there is none (no caching)."""

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


class Kernel:
    """A kernel not compiled yet, and Numba not imported yet: ``import numba`` costs 0.3-1.3 s, which
    every command (``hdp --help`` included) paid when the kernel modules were imported at start-up.
    The first call of any kernel of a module makes all of that module's kernels Numba dispatchers
    (:func:`materialize`), in the module's namespace, before Numba compiles any of them, so kernels
    calling each other see dispatchers, and ``K.name`` finds the dispatcher from then on."""

    def __init__(self, fn, args, kwargs):
        self.py_func, self._args, self._kwargs = fn, args, kwargs
        self._dispatcher = None
        functools.update_wrapper(self, fn)

    def dispatcher(self):
        if self._dispatcher is None:
            materialize(sys.modules[self.py_func.__module__])
        return self._dispatcher

    def __call__(self, *args, **kwargs):
        return self.dispatcher()(*args, **kwargs)

    def __getattr__(self, name):  # a dispatcher's attributes (stats, signatures, _cache ...)
        if name.startswith("__") or name in ("_dispatcher", "_args", "_kwargs", "py_func"):
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)


def materialize(module) -> None:
    """Every :class:`Kernel` of ``module`` becomes its Numba dispatcher, in the module's namespace."""
    cached = _configure()
    import numba  # lazy: see Kernel

    lazy = [(name, obj) for name, obj in vars(module).items() if isinstance(obj, Kernel)]
    for name, k in lazy:
        if k._dispatcher is None:
            kwargs = dict(k._kwargs)
            if not cached:
                kwargs["cache"] = False
            k._dispatcher = numba.njit(*k._args, **kwargs)(k.py_func)
        setattr(module, name, k._dispatcher)


def njit(*args, **kwargs):
    """``numba.njit``, compiled on first use with Numba's cache directory set first (see the module
    docstring and :class:`Kernel`): ``@njit`` or ``@njit(cache=True, ...)``."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return Kernel(args[0], (), {})
    return lambda fn: Kernel(fn, args, kwargs)

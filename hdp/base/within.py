"""A call that cannot outlive its time: :func:`run_within` runs a function in a forked child process
and kills the child when the time is up.

For library calls that do not look at a clock for a while: HiGHS sets a MIP up (presolve, the clique
table, symmetry detection) before it checks its ``time_limit`` (19 s under a limit of 0.5 s on a
240,000-row model, 13 s for presolve on a 70,000-row one), so a limit given to it alone does not
hold. The child inherits the arguments (fork: nothing is copied in), sends its result back pickled,
ignores SIGINT (the parent is the one interrupted; it kills the child on its way out) and leaves by
``os._exit`` (no atexit handler of the parent's libraries runs in it). Where fork is not available,
the function runs in this process, under its own limit only.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

#: Seconds a child may take beyond its limit (to send its result back) before it is killed.
GRACE = 0.5


class TimeUp(Exception):
    """The child was killed at its deadline; the call has no result."""


def _child(conn, fn, args, kwargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = ("ok", fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
        out = ("error", e)
    try:
        conn.send(out)
    except Exception as e:  # noqa: BLE001 - an unpicklable result or error: say what it was
        conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
    finally:
        conn.close()
        os._exit(0)


def run_within(seconds: float, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a forked child, its result returned (its exception raised); TimeUp
    when it has not answered ``seconds`` (plus :data:`GRACE`) after the start."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return fn(*args, **kwargs)
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(theirs, fn, args, kwargs), daemon=True)
    deadline = time.monotonic() + seconds + GRACE
    proc.start()
    theirs.close()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not ours.poll(min(left, 1.0)):
                if left <= 0:
                    raise TimeUp(f"no answer in {seconds:g} s")
                if not proc.is_alive() and not ours.poll(0):
                    raise RuntimeError(f"the child died (exit {proc.exitcode}) without an answer")
                continue
            try:
                kind, value = ours.recv()
            except EOFError:
                raise RuntimeError(f"the child died (exit {proc.exitcode}) without an answer") from None
            if kind == "error":
                raise value
            return value
    finally:
        ours.close()
        if proc.is_alive():
            proc.kill()
        proc.join()


def _milp(c, integrality, bounds, constraints, options):
    from scipy.optimize import milp

    r = milp(c, integrality=integrality, bounds=bounds, constraints=constraints, options=options)
    return _result(r.x, r.status, r.message, getattr(r, "mip_dual_bound", None), getattr(r, "mip_gap", None),
                   getattr(r, "fun", None))


def _result(x, status, message, bound, gap, fun=None):
    from types import SimpleNamespace

    return SimpleNamespace(x=x, status=status, message=message, mip_dual_bound=bound, mip_gap=gap, fun=fun)


def milp_within(time_limit: float, c, *, integrality, bounds, constraints, options: dict | None = None):
    """scipy's ``milp`` (HiGHS) held to ``time_limit`` seconds in all (:func:`run_within`; HiGHS is
    given the same limit): its ``x``, ``fun``, ``status``, ``message``, ``mip_dual_bound`` and ``mip_gap``;
    killed at the limit, no ``x`` and status 1 (a time limit)."""
    limit = max(0.05, float(time_limit))
    opts = {"disp": False, **(options or {}), "time_limit": limit}
    try:
        return run_within(limit, _milp, c, integrality, bounds, list(constraints), opts)
    except TimeUp:
        return _result(None, 1, "time limit reached (HiGHS was still setting the model up)", None, None)

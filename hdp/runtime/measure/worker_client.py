"""The client side of the measuring worker: one process, framed requests, a deadline per request.

:class:`WorkerProcess` starts ``python -m hdp.runtime.measure.worker`` (:mod:`hdp.runtime.measure.worker`), sends
it requests and reads its replies; a worker that crashes, hangs past the deadline or closes its
output becomes a :class:`WorkerFailure` naming how it ended (the signal, the exit code, the last
lines of its stderr), and the next request starts a fresh one.

:class:`WorkerPool` keeps at most one spare worker, model loaded, for the next
:class:`~hdp.runtime.measure.measurer.Measurer` of the same model and target: ``hdp compile``'s support,
profile and placer measurements then share one process. A pool is installed for a block with
:func:`worker_reuse` (the CLI does it for every command); outside one, every Measurer starts and
stops its own worker.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

import hdp
from hdp.base.fsutil import kill_point
from hdp.base.jit import ENV
from hdp.runtime.measure import protocol as P

#: Seconds a worker may take to start and read the model (the per-request timeout, if larger).
LOAD_TIMEOUT = 60.0

__all__ = ["LOAD_TIMEOUT", "WorkerFailure", "WorkerPool", "WorkerProcess", "current_pool", "prestart_worker",
           "worker_reuse"]


class WorkerFailure(Exception):
    """The worker died, stopped answering or timed out (it is gone afterwards)."""


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


class WorkerProcess:
    """``python -m hdp.runtime.measure.worker`` with framed requests and a deadline per request.

    The worker is told this process's pid and dies with it (parent-death signal and a watchdog,
    see :mod:`hdp.runtime.measure.worker`). On Linux the parent-death signal follows the *thread* that
    started the worker: start and use a WorkerProcess from one long-lived thread.
    """

    def __init__(self, env: dict | None = None):
        self.env = env  # None: this process's environment at each (re)start
        self.proc = None
        self.stderr = None
        self.pending: list[str] = []  # ops sent with send() whose replies are not read yet
        self._buf = bytearray()  # bytes read past the last reply (the start of the next one)

    def start(self) -> None:
        env = dict(os.environ if self.env is None else self.env)
        root = str(Path(hdp.__file__).resolve().parent.parent)  # the worker imports this same hdp
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
        env["PYTHONSAFEPATH"] = "1"  # python -m must not put the current directory (another hdp checkout) first
        env[P.PARENT_ENV] = str(os.getpid())
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "hdp.runtime.measure.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0, env=env)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write(self, req: P.Request) -> None:
        """Send ``req``, (re)starting the worker if it is not running."""
        if not self.alive:
            self.close()
            self.start()
        try:
            P.write_msg(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            raise WorkerFailure(self._death("before the request")) from None

    def send(self, req: P.Request) -> None:
        """Send a request without waiting: its reply is read and dropped before the next
        :meth:`call`'s (for work the worker may do ahead, such as ``Preload``)."""
        self._write(req)
        self.pending.append(P.op_of(req))

    def call(self, req: P.Request, timeout: float) -> P.Reply:
        """Send one request and wait up to ``timeout`` seconds for its reply: the reply type the
        protocol gives it (:data:`hdp.runtime.measure.protocol.REPLY_TO`) or
        :class:`~hdp.runtime.measure.protocol.Failed`. A dead, late or garbled worker raises WorkerFailure
        with the reason (and is gone afterwards)."""
        self._write(req)
        kill_point("worker-request", P.op_of(req))  # test hook: the worker is busy with it
        while self.pending:  # replies to requests sent ahead come first; the work was wanted, not the reply
            self._reply(max(timeout, LOAD_TIMEOUT), self.pending.pop(0))
        op = P.op_of(req)
        reply = self._reply(timeout, op)
        if not isinstance(reply, (P.REPLY_TO[type(req)], P.Failed)):
            self.close(kill=True)
            raise WorkerFailure(f"the worker answered '{op}' with '{P.op_of(reply)}'; worker killed")
        return reply

    def _reply(self, timeout: float, op: str) -> P.Reply:
        # One read may return the end of this reply and the start of the next (a reply to a request
        # sent ahead arrives together with the one after it): what lies past this reply is kept.
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = self._buf
        need = 4
        while True:
            if need == 4 and len(buf) >= 4:
                need = 4 + P.frame_length(buf)
            if len(buf) >= need:
                break
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                raise WorkerFailure(f"timed out after {timeout:g} s; worker killed")
            chunk = os.read(fd, max(need - len(buf), 1 << 16))
            if not chunk:
                raise WorkerFailure(self._death(f"during '{op}'"))
            buf += chunk
        msg = bytes(buf[4:need])
        del buf[:need]
        try:
            return P.decode_reply(msg)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.close(kill=True)
            raise WorkerFailure(f"the worker's reply to '{op}' is not a reply ({e}); worker killed") from None

    def _death(self, when: str) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        tail = self._stderr_tail()
        self.close()
        how = ("was killed by " + _signal_name(rc) if rc is not None and rc < 0
               else f"exited with code {rc}" if rc is not None else "stopped answering")
        return f"worker {how} {when}" + (f" (stderr: {tail})" if tail else "")

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - 4000))
            lines = [ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-3:])

    def close(self, kill: bool = False) -> None:
        """Stop the worker: end its input and let it exit, or kill it at once."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    if kill:
                        raise OSError
                    self.proc.stdin.close()
                    self.proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self.proc = None
        self.pending = []
        self._buf = bytearray()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


# --------------------------------------------------------------------------- one worker through a pipeline


class WorkerPool:
    """At most one spare :class:`WorkerProcess`, for the next Measurer to take (see
    :func:`worker_reuse`): started ahead (:meth:`prestart`, nothing loaded yet) or handed back by a
    Measurer that closed (:meth:`park`, its model loaded)."""

    def __init__(self):
        self._worker: WorkerProcess | None = None
        self._load: bytes | None = None  # the encoded load request it answered (None: nothing loaded)
        self._reply: P.Loaded | None = None  # its answer to that request
        self._env: dict | None = None  # this process's environment when it was kept

    @property
    def spare(self) -> WorkerProcess | None:
        """The spare worker, if any."""
        return self._worker

    def _keep(self, worker: WorkerProcess, load: bytes | None, reply: P.Loaded | None) -> None:
        self._worker, self._load, self._reply, self._env = worker, load, reply, _environment()

    def prestart(self, xml: str | os.PathLike | None = None, request=None) -> None:
        """Start a spare worker now (unless there is one), so that OpenVINO's import in it overlaps
        the caller's own work; with ``xml``, it also reads and specialises that model for
        ``request`` (see :func:`prestart_worker`)."""
        if self._worker is not None:
            return
        w = WorkerProcess()
        w.start()
        if xml is not None:
            try:
                w.send(P.Preload(xml=str(xml), request=request))
            except WorkerFailure:
                w.close()
                return
        self._keep(w, None, None)

    def park(self, worker: WorkerProcess, load: bytes, reply: P.Loaded) -> None:
        """Keep ``worker``, which answered the load request ``load`` with ``reply``, as the spare
        (stopping the one kept before)."""
        self.close()
        self._keep(worker, load, reply)

    def take(self, load: bytes) -> tuple[WorkerProcess, P.Loaded | None] | None:
        """The spare worker for a Measurer whose load request is ``load``, with its load reply (None:
        nothing loaded yet), if it is alive, was kept with this environment (a test's fault
        injection, say) and has no other model loaded; else None (the spare stays for another)."""
        w = self._worker
        if w is None:
            return None
        if not w.alive or self._env != _environment():
            self.close()
            return None
        if self._load is not None and self._load != load:
            return None
        reply = self._reply
        self._worker = self._load = self._reply = self._env = None
        return w, reply

    def close(self) -> None:
        """Stop the spare worker, if any."""
        w = self._worker
        self._worker = self._load = self._reply = self._env = None
        if w is not None:
            w.close()


def _environment() -> dict:
    """This process's environment as a spare worker must share it (a test's fault injection, say);
    without Numba's cache directory, which :mod:`hdp.base.jit` sets when the first kernel is made
    (in ``hdp compile``, after the worker started): a worker works the same directory out itself."""

    return {k: v for k, v in os.environ.items() if k != ENV}


_POOL: contextvars.ContextVar[WorkerPool | None] = contextvars.ContextVar("hdp_worker_pool", default=None)


def current_pool() -> WorkerPool | None:
    """The pool of the innermost :func:`worker_reuse` block, or None outside one."""
    return _POOL.get()


@contextlib.contextmanager
def worker_reuse():
    """Within the block, a Measurer that closes hands its worker, model loaded, to the next Measurer
    of the same model and target instead of stopping it (``support``, ``profile`` and the placer's
    measurements of one ``hdp compile`` then share a worker: starting one and reading the model
    costs about 0.5 s each time). Yields the :class:`WorkerPool`; a nested block shares the outer
    one, whose spare worker is stopped when the outermost block ends."""
    outer = _POOL.get()
    if outer is not None:
        yield outer
        return
    pool = WorkerPool()
    token = _POOL.set(pool)
    try:
        yield pool
    finally:
        _POOL.reset(token)
        pool.close()


def prestart_worker(xml: str | os.PathLike | None = None, request=None) -> None:
    """Inside :func:`worker_reuse`, start a worker now for the next Measurer to take, so that
    OpenVINO's import in it overlaps the caller's own work (``hdp compile`` lowers meanwhile).
    With ``xml``, the worker also reads and specialises that model for ``request`` (a
    :class:`~hdp.ir.specialise.ShapeRequest`) as lowering will, so the first load of it
    takes no time; a mistake there is left for lowering to report. Outside a block: nothing."""
    pool = _POOL.get()
    if pool is not None:
        pool.prestart(xml, request)

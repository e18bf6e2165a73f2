"""The ``hdp`` program's entry point (``hdp`` and ``python -m hdp``): SIGINT while hdp is still being
imported is one line and exit 130 too, as it is once a command runs (:class:`hdp.cli.common.HdpGroup`).
Nothing of hdp is imported here until the handler is in place."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_early(signum, frame) -> None:
    os.write(2, b"hdp: interrupted\n")
    os._exit(130)  # nothing is written yet, and no library is far enough along to clean up after


def main() -> None:
    signal.signal(signal.SIGINT, _interrupted_early)
    from hdp.cli.main import main as cli  # lazy: the handler above must be in place while hdp imports

    cli(prog_name="hdp")  # the handler above stays until the command's own replaces it (no instant without one)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

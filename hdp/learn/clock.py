"""The clock of the learners' budgets and deadlines.

:func:`now` is ``time.monotonic``: a ``deadline`` handed to a learner (``TrainConfig.deadline``,
the harness's ``Budget.seconds``) is on this clock. The trainer, Placeto, the RNN placer and the
harness all read it here, through the module (``clock.now()``), so a test replaces it once
(``monkeypatch.setattr(clock, "now", fake)``) and checks a budget by the work done on a clock it
controls instead of by the wall clock of a shared host.
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on the learners' clock (``time.monotonic``)."""
    return time.monotonic()

"""``python -m hdp``: the command line (:mod:`hdp.cli`)."""

from hdp.cli import run

run()

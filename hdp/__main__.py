"""``python -m hdp``: the command line (:mod:`hdp.cli.main`, entered by :mod:`hdp.cli.entry`)."""

from hdp.cli.entry import main

main()

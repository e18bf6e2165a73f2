"""The command line: :mod:`~hdp.cli.main` (the ``hdp`` group and ``compile``), the command modules
(:mod:`~hdp.cli.runtime`: evaluate, profile, export; :mod:`~hdp.cli.calibrate`;
:mod:`~hdp.cli.costgraph`: lower and place; :mod:`~hdp.cli.cache`; :mod:`~hdp.cli.show`) and what
they share (:mod:`~hdp.cli.common`). It parses arguments and prints; running stages is
:mod:`hdp.pipeline`'s."""

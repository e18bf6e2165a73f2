from hdp.cli import run

run()

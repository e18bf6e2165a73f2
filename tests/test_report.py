"""The words of hdp's reports: every term defined in one place and shown where the output is read
(issue 21), and how far the simulator is from a measurement."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hdp.base.glossary import TERMS
from hdp.cli.main import main
from hdp.runtime.serve.report import SIM_ERROR_WARN, sim_vs_measured


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_term_is_defined_in_help_passes_and_the_terms_page():
    """The README links the terms page (docs/terms.md), which lists every term (issue 33 moved it there)."""
    helped = _flat(CliRunner().invoke(main, ["--help"]).output)
    listed = _flat(CliRunner().invoke(main, ["passes"]).output)
    root = Path(__file__).resolve().parents[1]
    assert "](docs/terms.md)" in (root / "README.md").read_text()
    terms = (root / "docs" / "terms.md").read_text()
    for term, meaning in TERMS:
        assert f"{term}: {_flat(meaning)}" in helped, term
        assert f"{term}: {_flat(meaning)}" in listed, term
        assert f"- **{term}**: {meaning}" in terms, term
    # the words the issue found undefined
    for word in ("raise", "optimal+refine", "lower bound", "stages", "schema"):
        assert any(word in t for t, _ in TERMS), word


def test_simulator_against_measurement_names_the_gap_and_the_fix():
    close = sim_vs_measured([("single:CPU", 0.100, 0.095), ("placement", 0.050, 0.052)])
    assert "single:CPU 100.000 ms simulated / 95.000 ms measured = 1.05" in close
    assert close.endswith(f"within {SIM_ERROR_WARN * 100:.0f} %") and "calibrate" not in close
    far = sim_vs_measured([("single:CPU_B", 0.341, 0.225)])
    assert "= 1.52" in far and "off by up to 52 %" in far and "hdp calibrate" in far
    assert "nothing measured" in sim_vs_measured([("x", 0.1, float("nan"))])
    # after a calibration the hint is the host's drift, not the uncalibrated boundary model
    drift = sim_vs_measured([("single:CPU_B", 0.341, 0.225)], calibrated=True)
    assert "speed moved since the calibration" in drift and "target's guess" not in drift


def test_hdp_passes_names_the_objective_options():
    listed = _flat(CliRunner().invoke(main, ["passes"]).output)
    assert "--set objective=latency (latency | throughput | concurrent | energy; throughput takes requests=N" in listed
    assert "handoff=SECONDS per served subgraph" in listed

"""Modeled devices against published figures: leave-one-model-out predictions (issue 32, item 3).

For every device of the published data (``bench/data/published/openvino.csv``): each model's rows
predicted by the device's roofline fitted to the other models' rows (:mod:`hdp.runtime.costs.fitting`),
beside the published figure, with the error (predicted / published - 1, as times); the median
absolute error per device; an LLM row of a device fitted to other rows is predicted by the fit on
all of them. Then the parameters fitted on all rows (what the target files hold, ``--check-targets``
compares them), and, for ``i9-flex170``'s hardware, the HSDAG paper's own set beside OpenVINO's.
Simulated (a roofline of the zoo models, random weights); nothing runs on a device.

    python bench/published_check.py [--data FILE ...] [--paper FILE] [--check-targets] [--devices T:D,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="*", default=[str(DATA / "openvino.csv")])
    ap.add_argument("--paper", default=str(DATA / "hsdag-paper.csv"))
    ap.add_argument("--devices", default="", help="only these TARGET:DEVICE (comma-separated)")
    ap.add_argument("--check-targets", action="store_true",
                    help="exit 1 if a target file's fitted parameters differ from a fit on all rows by over 2 %%")
    a = ap.parse_args()

    import msgspec

    from hdp.runtime.costs.fitting import fit_device, fitted_rows, leave_one_model_out, lower_row, predict, row_key
    from hdp.target.published import load_published
    from hdp.target.target import load_target
    from hdp.zoo.models import cached

    rows = [r for f in a.data for r in load_published(f)]
    if a.devices:
        keep = set(a.devices.split(","))
        rows = [r for r in rows if r.device in keep]
    terms: dict = {}

    def terms_of(rs):
        for r in rs:
            if row_key(r) not in terms:
                terms[row_key(r)] = lower_row(cached(r.model), r)

    devices = sorted({r.device for r in rows}, key=lambda d: [r.device for r in rows].index(d))
    print(f"Published figures against the roofline fitted to the other models' rows (leave one model out), "
          f"{date.today().isoformat()}; simulated, zoo models with random weights.\n")
    print("| device | model | mode | precision | published | predicted | error | source row |")
    print("|---|---|---|---|---:|---:|---:|---|")
    medians, within, fitted, bad = {}, {}, {}, False
    for dev in devices:
        mine = [r for r in rows if r.device == dev]
        terms_of(mine)
        target = load_target(mine[0].target)
        device = target.device(mine[0].device_name)
        ovh = target.link.subgraph_overhead
        checks = leave_one_model_out(device, mine, terms, ovh)
        errors = []
        for c in checks:
            r = c.row
            pub = f"{r.value:g} {r.unit}" + (f" ({r.seq_len} tok)" if r.seq_len else "")
            if c.predicted is None:
                pred, err = f"n/a ({c.why})", ""
            else:
                pv = c.predicted_value
                pred = f"{pv:.3g} {r.unit}" + ("" if c.how == "leave-one-model-out" else " *")
                err = f"{c.error * 100:+.0f} %"
                if c.how == "leave-one-model-out":
                    errors.append(abs(c.error))
            print(f"| {dev} | {r.model} | {r.mode} | {r.precision} | {pub} | {pred} | {err} | {r.row} |")
        medians[dev] = statistics.median(errors) if errors else None
        within[dev] = (len(errors), sum(e <= 0.35 for e in errors))
        fit = fit_device(device, fitted_rows(mine), terms, ovh)
        fitted[dev] = (device, fit.device, ovh)
    print("\n`*`: an LLM row of a device fitted to its CNN rows, predicted by the fit on all of those.\n")
    print("Median absolute error per device (leave-one-model-out rows), and the rows within 35 %:\n")
    for dev, m in medians.items():
        n, k = within[dev]
        print(f"- {dev}: {'n/a' if m is None else f'{m * 100:.0f} %'}; {k} of {n} rows within 35 %")

    print("\nWhat each model sustains (its flops over the published INT8 latency, TOPS), the spread a roofline "
          "of one efficiency per precision cannot follow:\n")
    models = sorted({r.model for r in rows if r.mode == "latency"})
    print("| device | " + " | ".join(models) + " |")
    print("|---|" + "---:|" * len(models))
    for dev in devices:
        cells = []
        for m in models:
            r = next((r for r in rows if r.device == dev and r.model == m and r.mode == "latency"), None)
            cells.append("" if r is None else f"{terms[row_key(r)].flops.sum() / r.seconds / 1e12:.2f}")
        if any(cells):
            print(f"| {dev} | " + " | ".join(cells) + " |")

    print("\nParameters fitted on all of a device's fitted rows (the target files hold them, rounded):\n")
    print("| device | efficiency by precision | op_overhead | stream_efficiency | target file |")
    print("|---|---|---:|---:|---|")
    for dev, (old, new, _) in fitted.items():
        eff = ", ".join(f"{p} {v:.3g}" for p, v in sorted(new.precision_efficiency.items()))
        same = _close(old, new)
        bad |= not same
        print(f"| {dev} | {eff} | {new.op_overhead * 1e6:.3g} us | {new.stream_efficiency:.3g} | "
              f"{'matches' if same else 'DIFFERS: ' + _show(old)} |")

    paper = load_published(a.paper) if a.paper else []
    if paper:
        terms_of(paper)
        print("\nThe HSDAG paper's set on i9-flex170's hardware (i9-12900K + Flex 170, OpenVINO 2023.3, through "
              "HETERO from Python) beside OpenVINO's own rows and the simulated targets, latency in ms:\n")
        print("| model | device | paper | OpenVINO's row (INT8 latency; CPU: the i9-13900K's) | paper set, "
              "leave-one-model-out | i9-flex170 (assumed) | i9-13900k-flex170 (fitted to OpenVINO's rows) |")
        print("|---|---|---:|---:|---:|---:|---:|")
        i9 = load_target("i9-flex170")
        for dname in ("CPU", "GPU"):
            mine = [r for r in paper if r.device_name == dname]
            base = i9.device(dname)
            checks = {c.row: c for c in leave_one_model_out(base, mine, terms, i9.link.subgraph_overhead)}
            _, ov_fit, ov_ovh = fitted.get(f"i9-13900k-flex170:{dname}", (None, None, 0.0))
            for r in mine:
                c = checks[r]
                lomo = "n/a" if c.predicted is None else f"{c.predicted * 1e3:.2f} ({c.error * 100:+.0f} %)"
                own = predict(msgspec.structs.replace(r, precision=base.precision), terms[row_key(r)], base,
                              i9.link.subgraph_overhead) * 1e3
                ov = "" if ov_fit is None else \
                    f"{predict(msgspec.structs.replace(r, precision=ov_fit.precision), terms[row_key(r)], ov_fit, ov_ovh) * 1e3:.2f}"
                pub = next((x for x in rows if x.device == f"i9-13900k-flex170:{dname}" and x.model == r.model
                            and x.mode == "latency"), None)
                print(f"| {r.model} | {dname} | {r.value:g} | {'' if pub is None else f'{pub.value:g}'} | {lomo} | "
                      f"{own:.2f} | {ov} |")
    return 1 if a.check_targets and bad else 0


def _close(old, new, tol=0.02) -> bool:
    pairs = [(old.op_overhead, new.op_overhead), (old.stream_efficiency, new.stream_efficiency)]
    pairs += [(old.precision_efficiency.get(p), v) for p, v in new.precision_efficiency.items()]
    pairs.append((old.efficiency, new.efficiency))
    return all(a is not None and abs(a - b) <= tol * max(abs(b), 1e-12) for a, b in pairs)


def _show(d) -> str:
    eff = ", ".join(f"{p} {v:.3g}" for p, v in sorted(d.precision_efficiency.items())) or f"all {d.efficiency:.3g}"
    return f"{eff}; {d.op_overhead * 1e6:.3g} us; streams {d.stream_efficiency:.3g}"


if __name__ == "__main__":
    sys.exit(main())

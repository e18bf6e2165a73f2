"""Published figures: measurements of real devices that modeled targets are fitted to and checked against.

A published-data file is a CSV (``bench/data/published/*.csv``; ``#`` starts a comment line) with the
header ``model,precision,device,batch,mode,value,unit,seq_len,openvino,source,row``, one measurement a
row:

- ``model``: the zoo model shaped like the one measured (``resnet50``, ``gpt2:stateful,int4``);
- ``precision``: what it ran at, ``i8`` / ``f16`` / ``f32`` / ``bf16`` (INT8, FP16, ...), ``int4``
  for INT4 weights (an LLM's INT4-MIXED);
- ``device``: ``TARGET:DEVICE``, a device of a built-in target, the one fitted to the row;
- ``batch``: the batch it ran at; ``mode``: ``latency`` or ``throughput`` (``benchmark_app``'s
  hints: one request at a time, or as many streams as fill the device), ``first-token`` or
  ``second-token`` (an LLM's latency to its first token after a prompt of ``seq_len`` tokens,
  and of each later one);
- ``value`` and ``unit``: ``ms`` for the latencies, ``fps`` for throughput;
- ``seq_len``: the prompt's tokens (LLM rows only; empty for the others);
- ``openvino``: the release the figure was measured with, as the source states it;
- ``source`` and ``row``: where the figure is published and which of its rows it is.

:func:`load_published` reads such a file; a bad row is one :class:`~hdp.base.errors.InputError`
naming the file, the line and the field (a field missing, a value out of its bounds, a device no
built-in target has). This module reads files only; fitting and checking are
:mod:`hdp.runtime.costs.fitting`'s.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import convert
from hdp.target.target import builtin_names, load_target

COLUMNS = ("model", "precision", "device", "batch", "mode", "value", "unit", "seq_len", "openvino", "source",
           "row")
#: The unit of each mode.
UNITS = {"latency": "ms", "throughput": "fps", "first-token": "ms", "second-token": "ms"}
#: Modes of an LLM's generation, which need ``seq_len``.
TOKEN_MODES = ("first-token", "second-token")
NotBlank = Annotated[str, Meta(pattern=r"\S", description="a value that is not blank")]


class PublishedRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One published measurement (see the module docstring); ``line`` is its line in the file."""

    model: NotBlank
    precision: Literal["i8", "f16", "f32", "bf16", "int4"]
    device: Annotated[str, Meta(pattern=r"^[^:\s]+:[^:\s]+$", description="TARGET:DEVICE")]
    batch: Annotated[int, Meta(ge=1, le=4096)]
    mode: Literal["latency", "throughput", "first-token", "second-token"]
    value: Annotated[float, Meta(gt=0, le=1e9)]
    unit: Literal["ms", "fps"]
    seq_len: Annotated[int, Meta(ge=1, le=1 << 20)] | None = None
    openvino: NotBlank
    source: NotBlank
    row: NotBlank
    line: int = 0

    @property
    def target(self) -> str:
        return self.device.split(":", 1)[0]

    @property
    def device_name(self) -> str:
        return self.device.split(":", 1)[1]

    @property
    def seconds(self) -> float:
        """Seconds per request (a latency), or per inference at the published throughput."""
        return self.value / 1e3 if self.unit == "ms" else 1.0 / self.value


def parse_published(text: str, source: str = "<published>") -> list[PublishedRow]:
    """The rows of a published-data file's ``text`` (see the module docstring), checked."""
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{source}: no header (expected the columns {','.join(COLUMNS)})")
    head_line, head = lines[0]
    header = next(csv.reader([head]))
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        what = (f"missing column(s) {', '.join(missing)}" if missing else "") + \
               ("; " if missing and unknown else "") + (f"unknown column(s) {', '.join(unknown)}" if unknown else "")
        raise InputError(f"{source}:{head_line}: {what} (expected {','.join(COLUMNS)})")
    known_targets: dict[str, tuple[str, ...] | None] = {}
    rows = []
    for number, ln in lines[1:]:
        cells = next(csv.reader(io.StringIO(ln)))
        where = f"{source}:{number}"
        if len(cells) != len(header):
            raise InputError(f"{where}: {len(cells)} fields, the header has {len(header)}")
        raw: dict = {}
        for name, cell in zip(header, cells):
            cell = cell.strip()
            if cell == "":
                if name != "seq_len":
                    raise InputError(f"{where}: field '{name}' is missing")
                continue
            raw[name] = cell
        raw["line"] = number
        row = convert(raw, PublishedRow, lambda path, what, w=where: f"{w}: field '{path}' {what}", strict=False)
        _check_row(row, where, known_targets)
        rows.append(row)
    return rows


def _check_row(row: PublishedRow, where: str, known: dict) -> None:
    if UNITS[row.mode] != row.unit:
        raise InputError(f"{where}: field 'unit' must be {UNITS[row.mode]} for mode {row.mode}, got {row.unit}")
    if (row.mode in TOKEN_MODES) != (row.seq_len is not None):
        need = "needs the prompt's tokens" if row.mode in TOKEN_MODES else "is only for first-token/second-token rows"
        raise InputError(f"{where}: field 'seq_len' {need} (mode {row.mode})")
    if row.target not in known:
        known[row.target] = load_target(row.target).device_names if row.target in builtin_names() else None
    devices = known[row.target]
    if devices is None:
        raise InputError(f"{where}: field 'device': unknown target '{row.target}' "
                         f"(built in: {', '.join(n for n in builtin_names() if n != 'host')})")
    if row.device_name not in devices:
        raise InputError(f"{where}: field 'device': target '{row.target}' has no device '{row.device_name}' "
                         f"(has {', '.join(devices)})")


def load_published(path: str | Path) -> list[PublishedRow]:
    """The rows of the published-data file at ``path`` (an InputError naming it if it cannot be read)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: no such published-data file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the published-data file ({e})") from None
    return parse_published(text, str(p))

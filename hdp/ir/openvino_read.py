"""Reading a model file: OpenVINO IR (checked before OpenVINO parses it, for clear messages and
bounded work on hostile files) or ONNX, and the digest that identifies it in cache keys."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from xml.parsers import expat

from hdp.base.errors import InputError


def _core():
    import openvino as ov

    return ov.Core()


_digests: dict[tuple, str] = {}


def file_digest(xml: Path) -> str:
    """blake2b of the xml and its weights (identifies the source model in cache keys).

    Several passes check that the source is unchanged; within one process a file whose path,
    size and modification time are the same is not hashed again (BERT's weights are 436 MB)."""
    xml = Path(xml)
    paths = (xml, xml.with_suffix(".bin"))
    stamp = tuple((str(p.resolve()), st.st_size, st.st_mtime_ns) for p in paths if p.exists()
                  for st in [p.stat()])
    if stamp in _digests:
        return _digests[stamp]
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        if p.exists():
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    _digests[stamp] = h.hexdigest()
    return _digests[stamp]


#: Model files hdp reads: OpenVINO IR, and ONNX (read by OpenVINO's ONNX frontend; what hdp writes
#: is always IR).
MODEL_SUFFIXES = (".xml", ".onnx")


def read_model(xml: str | os.PathLike):
    """Read and validate an OpenVINO IR (``.xml`` + ``.bin``) or an ONNX model (``.onnx``),
    returning the ``ov.Model`` as the file has it (dynamic shapes and all; see :func:`specialise`).

    Raises InputError with the file and the reason for every user mistake.
    """
    xml = Path(xml)
    if not xml.exists():
        raise InputError(f"{xml}: no such file")
    if xml.is_dir():
        raise InputError(f"{xml}: is a directory, expected an OpenVINO model.xml or an .onnx file")
    suffix = xml.suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise InputError(f"{xml}: expected an OpenVINO IR .xml or an ONNX .onnx file")
    if not xml.is_file():
        raise InputError(f"{xml}: is not a regular file (a FIFO, socket or device); expected a model file")
    if suffix == ".onnx":
        return _read_onnx(xml)
    _check_xml(xml)
    try:
        return _core().read_model(str(xml))
    except RuntimeError as e:
        raise InputError(f"{xml}: OpenVINO cannot read the model: {ov_error_line(e)}") from None


def _read_onnx(path: Path):
    """An ONNX file through OpenVINO's ONNX frontend alone (``read_model`` would try every
    frontend on a file that is not ONNX, and the TensorFlow one prints parser noise)."""
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("onnx")
    if not fe.supported(str(path)):
        raise InputError(f"{path}: not an ONNX model, or a truncated one (OpenVINO's ONNX frontend cannot parse it)")
    try:
        return fe.convert(fe.load(str(path)))
    except Exception as e:  # noqa: BLE001 - the frontend raises its own GeneralFailure/OpConversionFailure
        raise InputError(f"{path}: OpenVINO cannot convert this ONNX model: {ov_error_line(e)}") from None


def ov_error_line(e: Exception) -> str:
    """The reason in an OpenVINO exception's message, without its source-location preamble."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # OpenVINO messages start with a source location line; the last line has the reason
    msg = lines[-1] if lines else type(e).__name__
    return re.sub(r"^Exception from \S+:\s*", "", msg)


#: Deepest element nesting :func:`read_model` accepts. An OpenVINO IR nests a few levels (a layer's
#: rt_info, a TensorIterator's body: tens); OpenVINO's writer indents every element by its depth, so
#: a saved model grows with the square of the depth (3,000 levels in the model's rt_info: 9 MB;
#: 100,000 levels in a layer's rt_info took 100 s and 9.7 GB).
MAX_XML_DEPTH = 1000
#: The indentation OpenVINO would write for the whole document (the sum of every element's
#: depth) that :func:`read_model` accepts: many elements each nested just under the limit.
MAX_XML_INDENT = 1 << 28


class _TooDeep(Exception):
    pass


_checked: set[tuple] = set()


def _check_xml(xml: Path) -> None:
    """Catch malformed XML, nesting deeper than :data:`MAX_XML_DEPTH` and missing/short weights
    before OpenVINO, for clearer messages. One streaming pass (expat): the document is never
    held in memory as a tree. A file checked before in this process (same path, size, times,
    and the same for its .bin) is not parsed again (a second of a 20,000-op model's reads)."""

    try:
        stamp = tuple((str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                      for p in (xml, xml.with_suffix(".bin")) if p.exists() for st in [p.stat()])
    except OSError:
        stamp = None
    if stamp is not None and stamp in _checked:
        return
    _check_xml_text(xml, expat)
    if stamp is not None:
        _checked.add(stamp)


def _check_xml_text(xml: Path, expat) -> None:
    parser = expat.ParserCreate()
    state = {"depth": 0, "root": None, "need": 0, "indent": 0}

    def start(tag, attrs):
        depth = state["depth"] = state["depth"] + 1
        state["indent"] += depth
        if depth == 1:
            state["root"] = tag
        elif depth > MAX_XML_DEPTH:
            raise _TooDeep(f"{xml}: element <{tag}> at line {parser.CurrentLineNumber} is nested "
                           f"{depth} levels deep, deeper than the {MAX_XML_DEPTH} hdp accepts in a model")
        elif state["indent"] > MAX_XML_INDENT:
            raise _TooDeep(f"{xml}: element <{tag}> at line {parser.CurrentLineNumber}: the elements so far are "
                           f"nested so deeply that saving the model would write over {MAX_XML_INDENT >> 20} MB "
                           f"of indentation alone; hdp refuses models nested like this")
        if tag == "data":
            off, size = attrs.get("offset"), attrs.get("size")
            if off is not None and size is not None:
                try:
                    state["need"] = max(state["need"], int(off) + int(size))
                except ValueError:
                    raise InputError(f"{xml}: constant with non-integer offset/size") from None

    def end(tag):
        state["depth"] -= 1

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        with open(xml, "rb") as f:
            parser.ParseFile(f)
    except expat.ExpatError as e:
        raise InputError(f"{xml}: malformed XML ({e})") from None
    except _TooDeep as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{xml}: cannot read it ({e.strerror or e})") from None
    if state["root"] != "net":
        raise InputError(f"{xml}: not an OpenVINO IR (root element <{state['root']}>, expected <net>)")
    need = state["need"]
    if need:
        bin_path = xml.with_suffix(".bin")
        if not bin_path.exists():
            raise InputError(f"{bin_path}: weights file missing (the model needs {need} bytes)")
        have = bin_path.stat().st_size
        if have < need:
            raise InputError(f"{bin_path}: weights file is truncated ({have} bytes, the model needs {need})")

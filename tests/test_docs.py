"""The project's documents live in it (issue 33): every reference to a document resolves inside the
repository, and a section cited as ``docs/x.md §N`` exists."""

import re
import subprocess
from pathlib import Path

from hdp.base.glossary import markdown

ROOT = Path(__file__).resolve().parent.parent
DOC_REF = re.compile(r"\b(docs/[\w./-]+\.md)(?:\s*§\s*(\d+))?")
#: how a document outside the repository was cited before (the brief's design notes)
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\.\./shared/")


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / f for f in out.split() if f.endswith((".py", ".md", ".toml", ".txt")) or f in ("Makefile", ".ci/run")]


def sections(doc: Path) -> set[str]:
    return set(re.findall(r"^#+\s+(\d+)\.", doc.read_text(), re.M))


def test_every_document_reference_resolves_inside_the_repository():
    missing, outside = [], []
    for f in tracked():
        if not f.exists() or f.name == "test_docs.py":  # its own examples
            continue
        text = f.read_text(errors="replace")
        if OUTSIDE.search(text):
            outside.append(str(f.relative_to(ROOT)))
        for doc, sec in DOC_REF.findall(text):
            target = ROOT / doc
            if not target.exists():
                missing.append(f"{f.relative_to(ROOT)}: {doc}")
            elif sec and sec not in sections(target):
                missing.append(f"{f.relative_to(ROOT)}: {doc} §{sec}")
    assert not outside, "cites a document outside the repository: " + ", ".join(outside)
    assert not missing, "references that do not resolve: " + "; ".join(missing)


def test_the_check_sees_references(tmp_path):
    assert DOC_REF.findall("see docs/design.md §3 and docs/guide/x.md") == [("docs/design.md", "3"),
                                                                          ("docs/guide/x.md", "")]
    assert "3" in sections(ROOT / "docs" / "design.md")
    assert OUTSIDE.search("as DESIGN.md says")


def test_the_terms_page_is_the_glossary():
    assert (ROOT / "docs" / "terms.md").read_text() == markdown(), \
        "docs/terms.md is out of date: python -m hdp.base.glossary > docs/terms.md"


# ----------------------------------------------------------------------------- links between documents

#: an inline markdown link or image: [text](target) with an optional title
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
#: an HTML comment: a link in it is not live (the guide's index keeps rows for pages still to come there)
COMMENT = re.compile(r"<!--.*?-->", re.S)


def documents() -> list[Path]:
    return [f for f in tracked() if f.suffix == ".md" and f.exists()
            and (f == ROOT / "README.md" or f.relative_to(ROOT).parts[0] in ("docs", "bench"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", doc.read_text()), re.M):
        s = slug(heading)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(text: str) -> list[str]:
    return LINK.findall(COMMENT.sub("", FENCE.sub("", text)))


def test_every_relative_link_between_documents_resolves():
    broken = []
    for doc in documents():
        for target in links(doc.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(ROOT)}: {target}"
            if not dest.exists() or not dest.is_relative_to(ROOT):
                broken.append(where)
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(where + " (no such heading)")
    assert not broken, "links that do not resolve: " + "; ".join(broken)


def test_the_link_check_sees_links_and_headings(tmp_path):
    text = ("see [a](docs/a.md), [b](../b.md#the-part \"t\"), ![i](x.png) and [w](https://x.org)\n"
            "```\n[c](no.md)\n```\n<!-- [d](later.md)\n -->")
    assert links(text) == ["docs/a.md", "../b.md#the-part", "x.png", "https://x.org"]
    doc = tmp_path / "d.md"
    doc.write_text("# Top\n## Every device at once: `concurrent` execution\n## Top\n```\n# not a heading\n```\n")
    assert anchors(doc) == {"top", "every-device-at-once-concurrent-execution", "top-1"}
    assert ROOT / "README.md" in documents() and ROOT / "bench" / "README.md" in documents()


# ----------------------------------------------------------------------------- the README's shape

def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md is {len(lines)} lines (at most 200: the reference is in docs/guide/)"
    first = "\n".join(lines[:24])
    block = re.search(r"^```sh\n(.*?)^```", first, re.M | re.S)
    assert block, "the quick start's commands are not on the README's first screen"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"], commands

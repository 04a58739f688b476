"""Every "spec section N" / "spec N.M" the code cites resolves to a heading of docs/log-format.md.

Issue 17 moved the parts of the byte-level spec the code cites into the repository; this keeps the
references and the page in step when either changes.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"\b(?:spec(?: section)?|§) ?(\d+(?:\.\d+)?)\b", re.IGNORECASE)
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.MULTILINE)


def _cited() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "src" / "kafkalog").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITATION.finditer(line):
                found.setdefault(match.group(1), []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def test_every_cited_spec_section_has_a_heading() -> None:
    headings = set(HEADING.findall((REPO / "docs" / "log-format.md").read_text(encoding="utf-8")))
    cited = _cited()
    assert cited, "no spec citation found: the pattern no longer matches how the code cites the spec"
    assert {section: where for section, where in cited.items() if section not in headings} == {}


def test_the_page_numbers_every_section_of_the_spec() -> None:
    headings = set(HEADING.findall((REPO / "docs" / "log-format.md").read_text(encoding="utf-8")))
    assert {str(n) for n in range(1, 18)} <= headings
    assert {f"1.{n}" for n in range(1, 9)} <= headings

"""The user docs say the thing: no internal requirement ids (``SPEC P2``, ``seed 002 §5``,
``(R1)``, ``W8``), which name documents a user does not have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The spec's capability ids (a letter of its sections and a number) and the seeds; the
# supersede page's timeline labels (U1, T0) are its own and stay.
INTERNAL = re.compile(r"SPEC [A-Z]\d+|(?i:seed|source) \d{3}|§\d|\b[CMPQRSW]\d{1,2}\b")


def test_user_docs_cite_no_internal_requirement_ids() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 5
    found = [
        f"{page.name}:{number}: {match.group(0)}"
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in INTERNAL.finditer(line)
    ]
    assert found == []

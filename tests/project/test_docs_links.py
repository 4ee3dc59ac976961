"""Every relative link in the README, the chart's README and docs/ reaches a file, and every #anchor a heading of
it, as GitHub names headings. docs/deploy.md and docs/observe.md linked model.md#prediction-intervals after the
heading had grown its file names, so the link opened the top of the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "helm" / "inferplan" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        if match := re.match(r"#+\s+(.*)", line):
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
        anchors.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return anchors


def _links(page: Path) -> list[str]:
    return [link for link in re.findall(r"\]\(([^)\s]+)\)", _FENCE.sub("", page.read_text()))
            if not link.startswith(("http://", "https://", "mailto:"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no such heading")
    assert not broken, broken


def test_the_slug_is_githubs() -> None:
    assert _slug("Prediction intervals (`intervals.py`, `data/intervals.json`)") == (
        "prediction-intervals-intervalspy-dataintervalsjson")

"""The README is a front door: at most 12,000 bytes, its test command is the one CI runs (read from it), and every
relative link in README.md and docs/*.md points to a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(heading_anchor(line.lstrip("#")))
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of `page` (outside code blocks) whose file or heading does not exist."""
    broken, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}:{number}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{page.name}:{number}: {target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# Some heading: `x`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#some-heading-x) [web](https://example.org/x.md)\n"
        "```\n[in code](nowhere.md)\n```\n"
        "[gone](missing.md) ![img](missing.png) [bad](there.md#other)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md:5: missing.md (no such file)",
        "page.md:5: missing.png (no such file)",
        "page.md:5: there.md#other (no such heading)",
    ]


def test_readme_is_at_most_12000_bytes():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 12_000, f"README.md is {size} bytes; move detail into a docs/ page"


def test_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(setup) == 2, setup  # one command runs the main job, one runs the tests
    assert setup[0].endswith("-m quadrants.sweep -m quadrant=PHR,NHR,PLR,NLR")
    # the default stage (docs/testing.md) on every core (pytest-xdist; tests/conftest.py gives each
    # worker its share of the cores as torch threads)
    assert setup[1].endswith(" -m pytest -n auto"), setup[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # CI reads line 2 of the README's first bash block and runs it as written
    assert "awk '/^```bash/{f=1; next} /^```/{if (f) exit} f' README.md | sed -n 2p" in ci
    assert 'bash -c "$README_TESTS"' in ci

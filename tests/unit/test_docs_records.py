"""Figures are dated records, the docs are how-to.

- README.md and docs/*.md name no commit of this code: a measurement names its commit in a record
  under benchmarks/results/, and the docs link the record.
- Every record's file name is `<yyyy-mm>[-dd]_<machine kind>.md` and its header (the text before
  its first `## `) names the date, the machine, at least one commit and at least one command.
- The README does not list the objectives; the table it points at lists every registered one.

What counts as a commit: any token of 7 to 40 lower-case hex characters with at least one digit
and one letter. Asking `git` whether a token resolves would miss commits cited from work branches
that were squashed on merge (five of the hashes the docs cited did not resolve here) and fails
in a shallow clone; the pattern needs no history. The digit-and-letter rule keeps decimals
(0.00488586) and words (`defaced`) out. One form is allowed: `owner/repo @ <hash>`, the pinned
commit of another project's code that an objective was ported from or checked against, which
is a reference, not a measurement of this code.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECORDS = sorted((ROOT / "benchmarks" / "results").glob("*.md"))

_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_PIN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+ @ $")
_NAME = re.compile(r"^(\d{4}-\d{2}(?:-\d{2})?)_([a-z0-9]+(?:-[a-z0-9]+)*)\.md$")


def commits_named(text: str) -> list[str]:
    """Hex tokens of `text` that read as commits (a digit and a letter), other projects' pins
    (`owner/repo @ <hash>`) left out."""
    found = []
    for match in _HEX.finditer(text):
        token = match.group()
        if not (re.search(r"\d", token) and re.search(r"[a-f]", token)):
            continue
        if _PIN.search(text[max(0, match.start() - 120) : match.start()]):
            continue
        found.append(token)
    return found


def record_problems(path: Path) -> list[str]:
    """What a record's name or header lacks: [] when it names a date, machine, commit and command."""
    name = _NAME.match(path.name)
    if not name:
        return [f"{path.name}: not named <yyyy-mm>[-dd]_<machine-kind>.md"]
    text = path.read_text(encoding="utf-8")
    header = text.split("\n## ", 1)[0]
    fields = dict(re.findall(r"^- (Date|Machine|Commits|Commands): (.+)$", header, re.M))
    problems = []
    if not text.startswith("# "):
        problems.append(f"{path.name}: no title")
    if not fields.get("Date", "").startswith(name.group(1)):
        problems.append(f"{path.name}: header `- Date:` does not start with {name.group(1)}")
    if len(fields.get("Machine", "")) < 10:
        problems.append(f"{path.name}: header names no machine (`- Machine:`)")
    if not re.search(r"`[0-9a-f]{7,40}`", fields.get("Commits", "")):
        problems.append(f"{path.name}: header names no commit (`- Commits:` with a `hash`)")
    if not re.search(r"`(python|bash|PYTHONPATH|QUADRANTS_)[^`]*`", fields.get("Commands", "")):
        problems.append(f"{path.name}: header names no command (`- Commands:` with a `command`)")
    return problems


def test_docs_name_no_commit():
    """A commit in README.md or docs/*.md belongs in a record under benchmarks/results/."""
    named = {
        page.name: commits_named(page.read_text(encoding="utf-8"))
        for page in PAGES
        if commits_named(page.read_text(encoding="utf-8"))
    }
    assert named == {}, (
        f"commits named in the docs: {named}. Move the measurement (its commit, command and "
        "figures) to a dated record under benchmarks/results/ and link it"
    )


def test_the_check_catches_a_planted_commit():
    """The scanner can fail: a commit in prose, in code, at a line's start or end, full length."""
    assert commits_named("measured at commit 8fba559 on AMD") == ["8fba559"]
    assert commits_named("at `bbe2406`): 0.64") == ["bbe2406"]
    assert commits_named("d86a953 fixed it") == ["d86a953"]
    assert commits_named("x " + "a1" * 20) == ["a1" * 20]
    # not commits: decimals, words, an upper-case id, another project's pin
    assert commits_named("0.00488586 and 0.0005777985788881779, defaced, 8FBA559") == []
    assert commits_named("volcengine/verl @ b178a3c, `examples/`") == []
    # a pin's hash without its repository is a commit again
    assert commits_named("since 49d5216 it uses") == ["49d5216"]


def test_records_exist_and_name_date_machine_commit_and_command():
    assert RECORDS, "benchmarks/results/ holds no record"
    assert [p for r in RECORDS for p in record_problems(r)] == []


def test_a_record_without_a_commit_is_refused(tmp_path):
    good = (
        "# t\n\n- Date: 2026-11-25\n- Machine: one H100 80 GB\n- Commits: `2a2c6c2`\n"
        "- Commands: `python benchmarks/gpu_acceptance.py`\n\n## figures\n"
    )
    (tmp_path / "2026-11-25_h100.md").write_text(good)
    assert record_problems(tmp_path / "2026-11-25_h100.md") == []
    (tmp_path / "2026-11-25_h100.md").write_text(good.replace("`2a2c6c2`", "not recorded"))
    assert record_problems(tmp_path / "2026-11-25_h100.md") == [
        "2026-11-25_h100.md: header names no commit (`- Commits:` with a `hash`)"
    ]
    (tmp_path / "h100.md").write_text(good)
    assert record_problems(tmp_path / "h100.md")


def test_readme_does_not_list_the_objectives_and_science_lists_them_all():
    """The README points at docs/science.md's table, which names every registered objective."""
    from quadrants.objectives.registry import known_objectives

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    registered = known_objectives()
    listed = [name for name in registered if f"`{name}`" in readme]
    assert len(listed) <= 2, f"README lists objectives {listed}: point at docs/science.md instead"
    assert "docs/science.md#the-objectives-and-their-defaults" in readme
    science = (ROOT / "docs" / "science.md").read_text(encoding="utf-8")
    table = science.split("## The objectives and their defaults", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M))
    assert rows == set(registered), (sorted(set(registered) - rows), sorted(rows - set(registered)))

"""The report as one self-contained HTML page (`report.html`): the table, the paired comparison,
every figure inline (base64 PNG) and the notes.

MLflow's artifact viewer shows an HTML artifact in a sandboxed frame without the run's other files,
so a page that links its figures shows broken images there; this one carries them. No scripts.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

_CSS = """
body { font-family: sans-serif; margin: 1.2em; max-width: 80em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: .4em 0; }
.note { color: #555; font-size: 90%; }
"""


def _bold(text: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


def markdown_block(text: str) -> str:
    """GitHub pipe tables and plain paragraphs of `text` as HTML (what `tables.to_markdown` and
    `paired.to_markdown` write: a caption, one table, footnotes); other Markdown stays literal."""
    out: list[str] = []
    rows: list[list[str]] = []

    def close_table() -> None:
        if rows:
            head, *body = rows
            out.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>")
            out.extend(["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body])
            out.append("</table>")
            rows.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            cells = [_bold(html.escape(c.strip())) for c in stripped.strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):  # skip the |---|---| separator
                rows.append(cells)
            continue
        close_table()
        if stripped:
            out.append(f"<p>{_bold(html.escape(stripped))}</p>")
    close_table()
    return "\n".join(out)


def render_report(
    title: str, blocks: Sequence[str], figures: Sequence[Path], messages: Sequence[str]
) -> str:
    """The page: `title`, each Markdown block (`markdown_block`), each PNG in
    `figures` inline, the notes."""
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
    ]
    parts += [markdown_block(block) for block in blocks]
    for path in figures:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        parts.append(
            f"<h3>{html.escape(path.stem)}</h3><img alt='{html.escape(path.stem)}' "
            f"src='data:image/png;base64,{data}'>"
        )
    if messages:
        parts.append(
            "<h3>Notes</h3><ul class='note'>"
            + "".join(f"<li>{html.escape(m)}</li>" for m in messages)
            + "</ul>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"

"""An HTML page of sample responses: each token shaded by its entropy and
underlined by its quadrant.

Shading is linear in entropy up to a cap shared by the whole page (the 99th percentile of all token
entropies shown, so one outlier does not wash out the rest); hovering a token shows its entropy in
nats and its quadrant. Self-contained (inline CSS, no scripts).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from quadrants.analysis.figures import QUADRANT_COLORS

_CSS = """
body { font-family: sans-serif; margin: 1.5em; max-width: 70em; }
.resp { font-family: monospace; white-space: pre-wrap; line-height: 1.9; padding: .4em;
        border: 1px solid #ddd; }
.tok { border-bottom: 3px solid transparent; }
.meta { color: #555; font-size: 90%; margin: .8em 0 .2em 0; }
.legend span { margin-right: 1.2em; }
"""


def _pick(records: Sequence[Mapping[str, Any]], per_run: int) -> list[Mapping[str, Any]]:
    """The last step's records, correct and incorrect ones alternating, at most `per_run`."""
    if not records:
        return []
    last = max(r.get("step") or 0 for r in records)
    latest = [r for r in records if (r.get("step") or 0) == last]
    good = [r for r in latest if float(r.get("reward", 0)) > 0]
    bad = [r for r in latest if float(r.get("reward", 0)) <= 0]
    mixed = [r for pair in zip(good, bad) for r in pair] + good[len(bad) :] + bad[len(good) :]
    return mixed[:per_run]


def _token(token: Mapping[str, Any], cap: float) -> str:
    entropy = float(token.get("entropy", 0.0))
    quadrant = token.get("quadrant")
    alpha = min(1.0, entropy / cap) if cap > 0 else 0.0
    underline = QUADRANT_COLORS.get(quadrant or "", "transparent")
    text = html.escape(str(token.get("text", ""))).replace("\n", "⏎\n")
    title = f"H={entropy:.3f} nats · {quadrant or '-'}"
    return (
        f'<span class="tok" title="{title}" style="background: rgba(255,140,0,{alpha:.3f}); '
        f'border-bottom-color: {underline}">{text}</span>'
    )


def render_samples(
    samples: Mapping[str, Sequence[Mapping[str, Any]]], per_run: int = 6, title: str = ""
) -> str:
    """The page for {run label: sample records}; runs without samples are listed as such."""
    shown = {label: _pick(records, per_run) for label, records in samples.items()}
    entropies = [
        float(t.get("entropy", 0.0))
        for recs in shown.values()
        for r in recs
        for t in r.get("tokens", [])
    ]
    cap = float(np.quantile(entropies, 0.99)) if entropies else 1.0
    legend = "".join(
        f'<span><span class="tok" style="border-bottom-color:{color}">&nbsp;{q}&nbsp;</span></span>'
        for q, color in QUADRANT_COLORS.items()
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title or 'samples')}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title or 'Sample responses')}</h1>",
        (
            f"<p>Background: token entropy, from 0 (white) to {cap:.3f} nats (full orange; the "
            "99th percentile of the tokens shown). Underline: the token's quadrant. Hover a "
            "token for its values.</p>"
        ),
        f"<p class='legend'>{legend}</p>",
    ]
    for label, records in shown.items():
        parts.append(f"<h2>{html.escape(label)}</h2>")
        if not records:
            parts.append("<p>No sample artifacts in this run.</p>")
            continue
        for record in records:
            parts.append(
                f"<div class='meta'>step {record.get('step')} · reward "
                f"{float(record.get('reward', 0)):.0f} "
                f"({html.escape(str(record.get('outcome', '')))}) · advantage "
                f"{float(record.get('advantage', 0)):+.3f} · entropy threshold "
                f"{float(record.get('entropy_threshold', 0)):.3f} · prompt: "
                f"<code>{html.escape(str(record.get('prompt', '')))}</code></div>"
            )
            parts.append(
                "<div class='resp'>"
                + "".join(_token(t, cap) for t in record.get("tokens", []))
                + "</div>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)

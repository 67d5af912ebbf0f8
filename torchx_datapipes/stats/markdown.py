"""``stats.md``: the summary table as GitHub-flavoured Markdown, for terminals and PRs.

Field names and values are data: every cell is backslash-escaped (CommonMark allows it for any
ASCII punctuation) so no link, image, HTML, emphasis, heading or table break can be injected,
and control characters (terminal escape sequences) are shown as ``\\xNN``. Field names are
plain escaped text rather than code spans, because a code span shows backslash escapes verbatim.
"""

from __future__ import annotations

import re
from typing import Any

from torchx_datapipes.stats.summary import COLUMNS, rows, run_info


def render_markdown(doc: dict[str, Any]) -> str:
    lines = ["# Dataset statistics", ""]
    lines += [f"- **{_cell(label)}**: {_cell(value)}" for label, value in run_info(doc)]
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join(_align(c) for c in COLUMNS) + "|"]
    for row in rows(doc):
        cells = [_cell(c) for c in row.cells]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Numeric columns describe finite values; NaN and null count as missing, ±inf separately;"
        " std is the sample std. Dates and timestamps are UTC.",
        "≈ marks sketch estimates; see `docs/stats-schema.md` for the error bounds.",
        "",
    ]
    return "\n".join(lines)


def _align(column: str) -> str:
    return ":---" if column in ("field", "type", "top value") else "---:"


# markup characters: links, images, autolinks, HTML, entities, code, emphasis, headings, tables, math
_MARKUP = re.compile(r"([\\`*_#\[\]()<>|&!~$])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _cell(text: str) -> str:
    """One line of literal text: whitespace runs (newlines too) become a space, markup is escaped."""
    text = " ".join(str(text).split())
    text = _MARKUP.sub(r"\\\1", text)
    return _CONTROL.sub(lambda m: f"\\\\x{ord(m.group()):02x}", text)

"""``stats.md``: the summary table as GitHub-flavoured Markdown, for terminals and PRs."""

from __future__ import annotations

from typing import Any

from torchx_datapipes.stats.summary import COLUMNS, rows, run_info


def render_markdown(doc: dict[str, Any]) -> str:
    lines = ["# Dataset statistics", ""]
    lines += [f"- **{_cell(label)}**: {_cell(value)}" for label, value in run_info(doc)]
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join(_align(c) for c in COLUMNS) + "|"]
    for row in rows(doc):
        cells = [f"`{_cell(row.cells[0])}`", *(_cell(c) for c in row.cells[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Numeric columns describe finite values (NaN/±inf are counted separately); std is the sample std.",
        "≈ marks sketch estimates; see `docs/stats-schema.md` for the error bounds.",
        "",
    ]
    return "\n".join(lines)


def _align(column: str) -> str:
    return ":---" if column in ("field", "type", "top value") else "---:"


def _cell(text: str) -> str:
    """Escape what would break a table cell: pipes, backticks, newlines, and HTML."""
    text = " ".join(str(text).split())
    for ch, rep in (("\\", "\\\\"), ("|", "\\|"), ("`", "'"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(ch, rep)
    return text

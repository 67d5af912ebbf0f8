"""JSON Lines: one JSON object per line, in every direction.

- input (``--format jsonl``, ``.jsonl``/``.ndjson``): ``formats/lines.py`` (line splitting shared
  with ``text``), repeated keys renamed ``x``, ``x.1`` (``dupkeys.py``), big integers kept (``bigints.py``);
- output (``--output_format jsonl``): ``writer.py``; reading parts back: ``reader.py``;
- one codec for all of them: ``codec.py``.
"""

from torchx_datapipes.formats.format import Format

FORMAT = Format(
    "jsonl",
    input="torchx_datapipes.formats.lines:JsonLinesFormat",
    writer="torchx_datapipes.formats.jsonl.writer:JsonlPart",
    part_ext="jsonl",
    reader="torchx_datapipes.formats.jsonl.reader:JsonlFormat",
    aliases=("ndjson",),
    doc="one JSON object per line",
)

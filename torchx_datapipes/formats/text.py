"""Plain text: one record ``{"text": line}`` per line (input only; lines split in ``formats/lines.py``)."""

from torchx_datapipes.formats.format import Format

FORMAT = Format(
    "text",
    input="torchx_datapipes.formats.lines:TextFormat",
    aliases=("txt",),
    doc="a record per line: {'text': line}",
)

"""``ndj``: a plug-in format in one file (JSON Lines under another extension), for the tests.

It exists to show that a format registered by entry points alone works for ``--format``,
``--output_format`` and ``OutputDataset`` with no file of torchx_datapipes changed, and to run
the round-trip contract suite (tests/test_roundtrip_contract.py) against a plug-in.
"""

from torchx_datapipes.formats.format import Format
from torchx_datapipes.formats.jsonl.writer import JsonlPart
from torchx_datapipes.formats.lines import JsonLinesFormat


class NdjInput(JsonLinesFormat):
    """Input: ``.ndj`` files, a JSON object per line."""

    name = "ndj"
    extensions = (".ndj",)


class NdjPart(JsonlPart):
    """Output: ``part-NNNNN.ndj``, read back by OutputDataset with the JSON Lines part reader."""

    ext = "ndj"


# the one declaration the entry point names: every direction of the format
FORMAT = Format(
    "ndj",
    input=NdjInput,
    writer=NdjPart,
    reader="torchx_datapipes.formats.jsonl.reader:JsonlFormat",
    doc="JSON Lines under .ndj (a test plug-in)",
)

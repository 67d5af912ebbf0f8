"""``ndj``: a plug-in format in one file (JSON Lines under another extension), for the tests.

It exists to show that a format registered by entry points alone works for ``--format``,
``--output_format`` and ``OutputDataset`` with no file of torchx_datapipes changed, and to run
the round-trip contract suite (tests/test_roundtrip_contract.py) against a plug-in.
"""

from torchx_datapipes.io.inputs.lines import JsonLinesFormat
from torchx_datapipes.io.writers.jsonl import JsonlPart


class NdjInput(JsonLinesFormat):
    """Input: ``.ndj`` files, a JSON object per line."""

    name = "ndj"
    extensions = (".ndj",)


class NdjPart(JsonlPart):
    """Output: ``part-NNNNN.ndj``, read back by OutputDataset with the JSON Lines part reader."""

    ext = "ndj"
    reader = "torchx_datapipes.data._lines:JsonlFormat"

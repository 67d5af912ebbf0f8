"""WebDataset tar shards, in every direction.

- input (``--format webdataset``): ``input.py``; output: ``writer.py`` (``tarstream.py`` writes
  the tar bytes, ``tarindex.py`` the member offsets); reading parts back: ``reader.py``;
- one codec of member names and values for all of them: ``codec.py`` (``decode.py``: the same
  values decoded in place, for the reader).
"""

from torchx_datapipes.formats.format import Format

FORMAT = Format(
    "webdataset",
    input="torchx_datapipes.formats.webdataset.input:WebDatasetFormat",
    writer="torchx_datapipes.formats.webdataset.writer:WebDatasetPart",
    part_ext="tar",
    reader="torchx_datapipes.formats.webdataset.reader:TarFormat",
    aliases=("wds", "tar"),
    doc="tar shards of samples, members <key>.<field>",
)

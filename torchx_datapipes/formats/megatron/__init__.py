"""Megatron's indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``): an output-only format.

- the layout (``MMIDIDX`` version 1, Megatron-LM's ``_IndexWriter``), encoded and decoded: ``index.py``;
- the shard writer (``runner/tokenize.py`` writes with it) and the ``--output_format megatron``
  part (one sequence of token ids per record; the job's shard list at commit): ``writer.py``;
- read back for training by ``torchx_datapipes.data.TokenDataset`` (``data/tokens.py``), not by
  ``OutputDataset``, and never an input format: the ``Format`` declares no ``input`` and names its
  reader in ``read_by``, so ``--format megatron`` and ``OutputDataset`` refuse it naming that.
"""

from torchx_datapipes.formats.format import Format
from torchx_datapipes.io import manifest_schema as ms

# the manifest section (``_SUCCESS``) written by ``--output_format megatron`` at commit and read by
# TokenDataset (documented in io/manifest_schema.py)
SECTION = ms.MEGATRON

FORMAT = Format(
    "megatron",
    writer="torchx_datapipes.formats.megatron.writer:MegatronPart",
    part_ext="bin",
    read_by="TokenDataset",  # torchx_datapipes.data.TokenDataset
    doc="Megatron .bin/.idx shards of token ids, one sequence per record (output only)",
)

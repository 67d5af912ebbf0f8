"""The training side: read a committed output (``OUT/_SUCCESS``) into PyTorch.

- :class:`OutputDataset`: an ``IterableDataset`` sharded over ranks and DataLoader workers
  (exactly once by default), shuffled per ``(seed, epoch)``, resumable mid-epoch with
  ``StatefulDataLoader`` and elastically with :func:`merge_states`;
- :class:`OutputMapDataset` (``OutputDataset.map_style(...)``): random access by index;
- :class:`OutputNode` (``OutputDataset(...).node()``): a ``torchdata.nodes`` source;
- :class:`TokenDataset`: packed token windows of a ``tokenize`` output (Megatron shards) with
  ``document_ids`` and ``position_ids`` (docs/tokenize.md);
- :data:`collate` / :class:`Collate`: a ``collate_fn`` for records with missing values (masks or
  fill values per field, instead of ``default_collate``'s TypeError on the first ``None``);
- :func:`hf_features`: the HF ``datasets.Features`` for ``load_dataset("parquet")`` of an output
  with tensor columns (HF has no ``arrow.fixed_shape_tensor``).

Non-goals: it reads only committed outputs of this package (no listing of arbitrary files),
and does not write. See docs/reader.md.
"""

from torchx_datapipes.data._state import merge_states
from torchx_datapipes.data.collate import Collate, CollateError, collate, present
from torchx_datapipes.data.dataset import OutputDataset
from torchx_datapipes.data.hf import hf_features
from torchx_datapipes.data.mapstyle import OutputMapDataset
from torchx_datapipes.data.node import OutputNode
from torchx_datapipes.data.queue_dataset import QueueDataset
from torchx_datapipes.data.tokens import TokenDataset

__all__ = [
    "Collate", "CollateError", "OutputDataset", "OutputMapDataset", "OutputNode", "collate", "hf_features",
    "merge_states", "present", "QueueDataset", "TokenDataset",
]  # fmt: skip

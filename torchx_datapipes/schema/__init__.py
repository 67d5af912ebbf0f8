"""Data validation on top of ``stats.json`` (TFDV-class, without TensorFlow): see docs/validate.md.

- :func:`infer`: a human-editable JSON :class:`Schema` from a stats output;
- the ``validate`` op (``datapipes.validate``) checks every record against it in the profiling
  pass and writes ``anomalies.json`` with example records (file, line, value);
- :func:`compare_docs`: per-field drift between two stats outputs (L∞, Jensen-Shannon, PSI,
  normalized Wasserstein, KS / chi-square for small samples), each distance with its error.

Non-goals: no skew between training and serving code paths beyond comparing two outputs, and no
nested-field rules (top-level fields only, like the stats op).
"""

from torchx_datapipes.schema.compare import compare_docs, load_stats
from torchx_datapipes.schema.infer import infer
from torchx_datapipes.schema.model import FieldSchema, Schema, SchemaError

__all__ = ["FieldSchema", "Schema", "SchemaError", "compare_docs", "infer", "load_stats"]

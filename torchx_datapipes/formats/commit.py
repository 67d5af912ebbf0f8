"""What every format's commit records share: the main pass's record names, serialized schemas.

A format's job-level step (Parquet's schema unification, ``formats/parquet/unify.py``) is its
writer's ``finalize_job`` hook, called by the ops after every unit is committed.
"""

import base64
from typing import Any, Callable, Dict, Sequence

from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io import manifest_schema as ms


def main_meta_names(units: Sequence[Unit]) -> Callable[[Dict[str, Any]], str]:
    """``meta -> name`` of the main pass's commit records (a main-pass record is named by its unit)."""
    names = {u.index: u.name for u in units}
    return lambda m: str(names[int(m[ms.UNIT][ms.UNIT_INDEX])])


def encode_schema(schema: bytes) -> str:
    return base64.b64encode(schema).decode()

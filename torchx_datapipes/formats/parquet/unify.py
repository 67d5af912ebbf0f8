"""One Parquet schema for the whole job, settled at commit (rank 0, in the op's ``finalize``).

Every unit's commit record holds its parts' Arrow schemas (``schemas``: rel path -> base64 of
the serialized schema). At commit the schemas are unified in unit order (formats/parquet/arrow.py:
permissive widening, tensor rules), so the result depends on the input alone, never on ``-j``.
Each part whose schema differs is rewritten (atomically) with the unified schema, and its unit's
commit record is rewritten with the part's new size, checksum, block sums and schema. A kill between
the two leaves a part that does not match its record: the relaunch redoes that unit, then unifies
again.
"""

import base64
import io
from typing import Any, Callable, Dict, List

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.commit import encode_schema
from torchx_datapipes.io import manifest as mf
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.blocksums import of_bytes
from torchx_datapipes.io.checksum import write_summed
from torchx_datapipes.io.fs import join, read_bytes
from torchx_datapipes.io.layout import block_sums_file


def unify_parts(
    output: str,
    metas: List[Dict[str, Any]],
    meta_name: Callable[[Dict[str, Any]], str],
    row_group_rows: int,
) -> Dict[str, Any]:
    """Rewrite the parts whose schema is not the job's; return a summary for the manifest.

    ``meta_name(meta)`` is the name the unit's commit record is stored under (the engine's).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torchx_datapipes.formats.parquet.arrow import conform, unify

    parts = [(m, rel, pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s))))
             for m in metas for rel, s in sorted(m.get(ms.SCHEMAS, {}).items())]  # fmt: skip
    if not parts:
        return {}
    try:
        target = unify([s for _, _, s in parts])
    except TypeError as e:
        raise DatapipesError(
            f"the Parquet parts of {output} cannot share one schema: {e}. Make your function return"
            " one type per field (e.g. cast it), then relaunch"
        ) from e
    rewritten = 0
    for m, rel, schema in parts:
        if schema.equals(target):
            continue
        url = join(output, rel)
        try:
            table = conform(pq.read_table(io.BytesIO(read_bytes(url))), target)
        except TypeError as e:
            raise DatapipesError(
                f"{url} cannot take the job's Parquet schema: {e}. Make your function return one type"
                " per field, then relaunch"
            ) from e
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=row_group_rows)
        data = buf.getvalue()
        fsum = write_summed(output, rel, data).to_json()
        ssum = write_summed(output, block_sums_file(rel), of_bytes(data)).to_json()
        new = {rel: fsum, ssum[ms.FILE_PATH]: ssum}
        m[ms.FILES] = [new.pop(f[ms.FILE_PATH], f) for f in m[ms.FILES]] + list(new.values())
        m[ms.SCHEMAS][rel] = encode_schema(target.serialize().to_pybytes())
        mf.write_unit_meta(output, meta_name(m), m)
        rewritten += 1
    fields = [f"{f.name}: {f.type}" for f in target]
    return {ms.PARQUET_SCHEMA: {ms.PARQUET_FIELDS: fields, ms.PARQUET_REWRITTEN: rewritten}}

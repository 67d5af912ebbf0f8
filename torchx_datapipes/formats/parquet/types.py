"""Our tensor layouts in Arrow (see docs/tensors.md): the type predicates and the column read back.

Shared by the Parquet writer (formats/parquet/arrow.py) and both readers of a Parquet output
(formats/parquet/codec.py), so the layout is defined once. Needs pyarrow only (no torch).
"""

from typing import Any, Optional

import pyarrow as pa

SHAPE_TYPE = pa.list_(pa.int32())
TENSOR_KEY = b"torchx_datapipes.tensor"
ZERO_D = {TENSOR_KEY: b"0d"}


def is_0d_field(f: pa.Field) -> bool:
    """A plain column that holds 0-d tensors (read back as tensors by our readers)."""
    return f.metadata is not None and f.metadata.get(TENSOR_KEY) == b"0d"


def variable_tensor_type(value_type: pa.DataType) -> pa.DataType:
    return pa.struct([("data", pa.list_(value_type)), ("shape", SHAPE_TYPE)])


def is_fixed_tensor(t: pa.DataType) -> bool:
    return isinstance(t, pa.FixedShapeTensorType)


def is_variable_tensor(t: pa.DataType) -> bool:
    return (
        pa.types.is_struct(t)
        and t.num_fields == 2
        and t.field(0).name == "data"
        and t.field(1).name == "shape"
        and pa.types.is_list(t.field(0).type)
        and t.field(1).type == SHAPE_TYPE
    )


def tensor_value_type(t: pa.DataType) -> Optional[pa.DataType]:
    if is_fixed_tensor(t):
        return t.value_type
    if is_variable_tensor(t):
        return t.field(0).type.value_type
    return None


def column_to_numpy(col: Any) -> Any:
    """A tensor column read back: ``(N, *shape)`` ndarray for a fixed shape, a list of arrays for the
    variable layout (None for null rows), the plain column's ndarray otherwise. A null row of a
    fixed-shape column reads as zeros (``col.is_null()`` tells which rows are null).

    Zero-copy for fixed-shape numeric tensors without nulls (``torch.from_numpy`` of the result is
    too); bool is bit-packed in Arrow, so it is unpacked (a copy). Arrow's own
    ``to_numpy_ndarray()`` does the same for fixed-shape tensors, except bool.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if is_fixed_tensor(t):
        size = t.storage_type.list_size
        values = arr.storage.values.slice(arr.offset * size, len(arr) * size)
        if values.null_count:  # a null row's slots (null after a Parquet round trip): zeros
            values = values.fill_null(
                pa.scalar(False if pa.types.is_boolean(values.type) else 0, values.type)
            )
        flat = values.to_numpy(zero_copy_only=not pa.types.is_boolean(t.value_type))
        return flat.reshape(len(arr), *t.shape)
    if is_variable_tensor(t):
        dtype = t.field(0).type.value_type.to_pandas_dtype()
        data, shape = arr.field("data"), arr.field("shape")
        return [
            None
            if not arr[i].is_valid
            else data[i]
            .values.to_numpy(zero_copy_only=False)
            .astype(dtype, copy=False)
            .reshape(shape[i].as_py())
            for i in range(len(arr))
        ]
    return arr.to_numpy(zero_copy_only=False)

"""The user function of ``bench_images.py``: decode a JPEG with Pillow, RGB, 64x64, uint8 (3, 64, 64).

One function, :func:`to_tensor`, does the work for all three methods; the adapters only differ
in where the bytes come from (ours: the ``files`` record's ``bytes``; the Pool(2) loop and
litdata: the file, read whole, as ours reads it).

The output record carries the file's stem as ``name`` and its number as ``label``, never the
path: litdata's ``optimize`` stores a ``str`` ending in ``.jpg`` as the *image file itself*
(``ImageSerializer`` matches media extensions) and then needs torchvision to read it back.
"""

import io
import os
from typing import Any, Dict

import numpy as np
from PIL import Image

SIZE = (64, 64)


def to_tensor(data: bytes, path: str) -> Dict[str, Any]:
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB").resize(SIZE)  # Pillow's default filter (bicubic)
    hwc = np.asarray(rgb, dtype=np.uint8)
    stem = os.path.splitext(os.path.basename(path))[0]
    return {"image": np.ascontiguousarray(hwc.transpose(2, 0, 1)), "name": stem, "label": int(stem[4:])}


def record_to_tensor(rec: Dict[str, Any]) -> Dict[str, Any]:
    """Ours: a ``files`` record ``{"path", "bytes", "size"}``."""
    return to_tensor(rec["bytes"], rec["path"])


def path_to_tensor(path: str) -> Dict[str, Any]:
    """The references: a path."""
    with open(path, "rb") as f:
        return to_tensor(f.read(), path)

"""Record values every writer understands: torch tensors become numpy arrays; a bad value is found by path."""

import sys
from typing import Any, Callable, Optional

import numpy as np


def field_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def is_tensor(v: Any) -> bool:
    """A torch tensor (without importing torch: a record can only hold one if torch is loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def to_numpy(v: Any) -> np.ndarray:
    """A torch tensor (any device, stride, requires_grad) as a numpy array of the same dtype and shape."""
    t = v.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    try:
        return np.asarray(t.numpy())
    except TypeError as e:  # e.g. bfloat16, which numpy has no dtype for
        raise TypeError(
            f"a torch tensor of dtype {t.dtype} has no numpy equivalent ({e}); convert it, e.g. .float()"
        ) from e


def as_array(v: Any) -> Optional[np.ndarray]:
    """``v`` as an ndarray if it is a tensor or an ndarray, else None."""
    if isinstance(v, np.ndarray):
        return v
    if is_tensor(v):
        return to_numpy(v)
    return None


def find_value(rec: Any, pred: Callable[[Any], bool], path: str = "") -> Optional[str]:
    """The path (``a.b[2]``) of the first value of ``rec`` for which ``pred`` holds, or None."""
    if pred(rec):
        return path or "<record>"
    if isinstance(rec, dict):
        for k, v in rec.items():
            found = find_value(v, pred, field_path(path, k))
            if found:
                return found
    elif isinstance(rec, (list, tuple)):
        for i, v in enumerate(rec):
            found = find_value(v, pred, f"{path}[{i}]")
            if found:
                return found
    return None

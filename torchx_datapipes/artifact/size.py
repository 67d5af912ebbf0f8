"""Warn when an artifact is large, and say what made it large.

Every rank downloads and deserializes the artifact before it reads a record, so a 50 MB
closure (a captured vocabulary, a model, a DataFrame) costs each rank time and memory and
usually means data was captured that should have been loaded. Over the limit
(``DEFAULT_WARN_MB``, or ``$TXDP_ARTIFACT_WARN_MB``, or ``package(..., warn_mb=)``;
0 disables) :func:`warn_if_large` emits a :class:`UserWarning` naming the size and the
biggest captured objects (the callable's direct parts -- closure cells, referenced globals,
defaults, attributes -- each pickled on its own; only done when the limit is exceeded).
"""

import os
import warnings
from typing import Any, Callable, Optional

from torchx_datapipes.artifact import serialcheck

DEFAULT_WARN_MB = 10.0
ENV_VAR = "TXDP_ARTIFACT_WARN_MB"
_TOP = 3


def limit_mb(warn_mb: Optional[float] = None) -> float:
    """The limit in MB: the argument, else ``$TXDP_ARTIFACT_WARN_MB``, else the default."""
    if warn_mb is not None:
        return float(warn_mb)
    raw = os.environ.get(ENV_VAR)
    if not raw:
        return DEFAULT_WARN_MB
    try:
        return float(raw)
    except ValueError as e:
        raise ValueError(f"${ENV_VAR}={raw!r} is not a number of MB; set e.g. {ENV_VAR}=50") from e


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def biggest_parts(obj: Any, dumps: Callable[[Any], bytes], top: int = _TOP) -> list[tuple[str, int]]:
    """The ``top`` largest direct parts of ``obj`` by pickled size: ``[(path, bytes), ...]``."""
    sizes: list[tuple[str, int]] = []
    for path, child in serialcheck.parts(obj, serialcheck.root_name(obj)):
        try:
            sizes.append((path, len(dumps(child))))
        except Exception:  # a part that does not pickle alone (cloudpickle pickled the whole)
            continue
    return sorted(sizes, key=lambda p: -p[1])[:top]


def warn_if_large(
    obj: Any, url: str, size: int, limit: float, dumps: Optional[Callable[[Any], bytes]]
) -> None:
    """Emit a :class:`UserWarning` when ``size`` bytes exceed ``limit`` MB (0 = never)."""
    if limit <= 0 or size <= limit * 1e6:
        return
    parts = biggest_parts(obj, dumps) if dumps is not None else []
    named = ", ".join(f"{path} ({_mb(n)})" for path, n in parts if n >= size / 20)
    culprits = f" Most of it is: {named}." if named else ""
    warnings.warn(
        f"artifact {url} is {_mb(size)}, over the {limit:g} MB warning limit.{culprits} Every rank"
        " downloads and deserializes it before reading a record. Load big data inside the function"
        " instead (from a URL or path, once per process, e.g. into a module-level cache), and"
        f" capture only the URL. Raise the limit with ${ENV_VAR} or package(..., warn_mb=...).",
        UserWarning,
        stacklevel=3,
    )

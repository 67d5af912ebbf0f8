"""Cache backends, one module each, imported lazily by the registry."""

import importlib
from types import ModuleType

from torchx_datapipes.plugins import missing_extra


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency or fail with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise missing_extra(f"this cache needs the {module!r} package", extra) from e

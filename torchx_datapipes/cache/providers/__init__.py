"""Cache backends, one module each, imported lazily by the registry."""

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency or fail with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"this cache needs the {module!r} package: pip install 'torchx-datapipes[{extra}]'"
        ) from e

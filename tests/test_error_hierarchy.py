"""Issue 19 item 5: every error the package raises to a user derives from ``DatapipesError``.

Every module is imported and every exception class it defines is checked. The few that never
leave the package (signals caught where they are raised, turned into a bad record or a cache
miss) are listed with the place that catches them.
"""

import importlib
import inspect
import pkgutil
from typing import List

import torchx_datapipes
from torchx_datapipes.errors import DatapipesError

INTERNAL = {
    # cache/codec.py catches it: the value is stored with pickle (if allowed) or not cached
    "torchx_datapipes.cache.safe.Unsafe",
}


def _exception_classes() -> List[type]:
    found = []
    for mod in pkgutil.walk_packages(torchx_datapipes.__path__, "torchx_datapipes."):
        if mod.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs a CLI when imported
        module = importlib.import_module(mod.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == mod.name:
                found.append(obj)
    return found


def test_every_public_error_is_a_datapipes_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 20, classes  # the walk found the package's errors
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, DatapipesError)
        and not c.__name__.startswith("_")
        and f"{c.__module__}.{c.__qualname__}" not in INTERNAL
    ]
    assert outside == [], f"derive these from DatapipesError (with the builtin base that fits): {outside}"

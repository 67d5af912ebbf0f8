"""The ``cloudpickle`` backend (default): everything a user can write.

Lambdas, closures, partials, callable objects, ``__main__``/notebook code. The user's own
modules (:func:`.modules.user_modules`) are registered for pickling by value while the
object is pickled, so the runner needs only installed packages. Bytecode: load with the
same Python minor version and cloudpickle major version.
"""

import contextlib
import pickle
import sys
import threading
from typing import Any, Iterator, Mapping, Optional

import cloudpickle

from torchx_datapipes.artifact import serialcheck
from torchx_datapipes.artifact.modules import user_modules
from torchx_datapipes.errors import NotSerializableError

PICKLE_PROTOCOL = 5
_REGISTRY_LOCK = threading.Lock()


@contextlib.contextmanager
def by_value(obj: Any) -> Iterator[None]:
    """Register the user modules ``obj`` depends on for pickling by value, then unregister."""
    with _REGISTRY_LOCK:
        already = set(cloudpickle.list_registry_pickle_by_value())
        added = [m for m in user_modules(obj) if m != "__main__" and m not in already]
        for name in added:
            cloudpickle.register_pickle_by_value(sys.modules[name])
        try:
            yield
        finally:
            for name in added:
                cloudpickle.unregister_pickle_by_value(sys.modules[name])


def dumps(obj: Any) -> bytes:
    return cloudpickle.dumps(obj, protocol=PICKLE_PROTOCOL)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


class CloudpickleBackend:
    """The ``cloudpickle`` entry of ``artifact.BACKENDS``."""

    def check(self, obj: Any) -> None:
        with by_value(obj):
            serialcheck.check(obj, dumps, "cloudpickle")

    def checked_dumps(self, obj: Any) -> bytes:
        """Pickle once; only when that fails, walk ``obj`` to name the culprit."""
        with by_value(obj):
            try:
                return dumps(obj)
            except Exception as e:
                serialcheck.check(obj, dumps, "cloudpickle")  # raises, naming the path
                raise NotSerializableError(f"cloudpickle failed on {obj!r}: {e}") from e

    def loads(self, payload: bytes) -> Any:
        return pickle.loads(payload)

    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> Optional[str]:
        if _minor(made["python"]) != _minor(here["python"]):
            return (
                f"it was made with Python {made['python']} but this is Python {here['python']};"
                " cloudpickle artifacts hold bytecode, which only the same Python minor version can run"
            )
        if made["cloudpickle"].split(".")[0] != here["cloudpickle"].split(".")[0]:
            return (
                f"it was made with cloudpickle {made['cloudpickle']} but this is"
                f" cloudpickle {here['cloudpickle']}"
            )
        return None

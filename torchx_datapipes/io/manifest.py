"""Per-unit commit records (``_units/``) and the job manifest (``_SUCCESS``).

A unit is committed when its metadata file exists with the job's fingerprint; the
output is complete only when ``_SUCCESS`` exists. Readers trust nothing else. The keys of both
documents are ``io/manifest_schema.py``'s.
"""

import hashlib
import platform
import time
from typing import Any, Dict, List, Optional, Tuple

import orjson

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.io.fs import exists, join, read_bytes
from torchx_datapipes.io.layout import LEASE, SUCCESS, unit_file

MANIFEST_VERSION = ms.MANIFEST_VERSION


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()


def unit_meta_url(output: str, unit_name: str) -> str:
    return join(output, unit_file(unit_name))


def write_unit_meta(output: str, unit_name: str, meta: Dict[str, Any]) -> None:
    write_file(unit_meta_url(output, unit_name), orjson.dumps(meta))


def read_unit_meta(output: str, unit_name: str, fp: str) -> Optional[Dict[str, Any]]:
    """The unit's commit record, or None if absent or written by a different job."""
    url = unit_meta_url(output, unit_name)
    try:
        meta: Dict[str, Any] = orjson.loads(read_bytes(url))
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    return meta if meta.get(ms.FINGERPRINT) == fp else None


def success_url(output: str) -> str:
    return join(output, SUCCESS)


def has_success(output: str) -> bool:
    return exists(success_url(output))


def read_manifest(output: str) -> Dict[str, Any]:
    """The committed manifest; FileNotFoundError if the output is not complete."""
    url = success_url(output)
    try:
        data: Dict[str, Any] = orjson.loads(read_bytes(url))
    except FileNotFoundError as e:
        msg = f"{url} does not exist: the job did not finish, so the output is incomplete"
        raise FileNotFoundError(msg) from e
    return data


def write_manifest(output: str, manifest: Dict[str, Any]) -> None:
    write_file(success_url(output), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def clear_output(output: str, keep: Tuple[str, ...] = (LEASE,)) -> None:
    """Remove a previous result of ours (``_SUCCESS`` first); never an entry we did not write.

    See :func:`torchx_datapipes.io.ownership.clear_ours`; entries named in ``keep`` stay.
    """
    from torchx_datapipes.io.ownership import clear_ours

    clear_ours(output, keep)


def versions() -> Dict[str, str]:
    import cloudpickle
    import torch

    import torchx_datapipes

    try:
        from torchx.version import __version__ as torchx_version
    except ImportError:  # pragma: no cover
        torchx_version = "unknown"
    return {
        ms.VERSION_PYTHON: platform.python_version(),
        ms.VERSION_TORCH: torch.__version__,
        ms.VERSION_TORCHX: torchx_version,
        ms.VERSION_CLOUDPICKLE: cloudpickle.__version__,
        ms.VERSION_PACKAGE: torchx_datapipes.__version__,
    }


def base_manifest(op: str, inputs: List[Dict[str, Any]], options: Dict[str, Any]) -> Dict[str, Any]:
    """The keys every op's ``_SUCCESS`` starts with (``manifest_schema.BASE_KEYS``)."""
    return {
        ms.VERSION: MANIFEST_VERSION,
        ms.OP: op,
        ms.STATUS: ms.SUCCEEDED,
        ms.CREATED: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        ms.INPUTS: inputs,
        ms.OPTIONS: options,
        ms.VERSIONS: versions(),
    }

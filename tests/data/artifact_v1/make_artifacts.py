"""Regenerate the format-1 artifacts kept as backward-compatibility test data.

Run from this directory: ``python make_artifacts.py``. Do NOT rerun casually: the point of
this data is that artifacts written by an *earlier* version keep loading.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "legacy_src"))

import legacy_transform  # noqa: E402

from torchx_datapipes import artifact  # noqa: E402


def main() -> None:
    store = HERE / "store"
    refs = {
        "cloudpickle": artifact.package(legacy_transform.legacy, str(store), "cloudpickle"),
        "torch.package": artifact.package(legacy_transform.legacy, str(store), "torch.package"),
        "module": artifact.package("legacy_src/legacy_transform.py:legacy", str(store), "module"),
    }
    manifest = {
        backend: {"file": Path(ref.url).name, "sha256": ref.sha256, "python": ref.python}
        for backend, ref in refs.items()
    }
    manifest["call"] = {"input": [1, 2], "output": legacy_transform.legacy([1, 2]), "kind": "batched"}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

"""Write the input-format list of docs/options.md from the registry (``registry.builtin_input_names``).

Run ``python scripts/gen_format_docs.py`` after adding a built-in format; ``tests/test_input_columns.py``
fails when the docs, the option help or the component docstrings miss a registered format.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's package, not an installed one

from torchx_datapipes.formats.registry import builtin_input_names  # noqa: E402

DOC = ROOT / "docs" / "options.md"
ROW = re.compile(r"^\| `format` \|.*\|$", re.M)


def format_row() -> str:
    names = ", ".join(("auto", *builtin_input_names()))
    return f"| `format` | {names}; plug-ins add theirs (see docs/formats.md) |"


def main() -> int:
    text = DOC.read_text()
    new, n = ROW.subn(format_row(), text, count=1)
    if n != 1:
        print(f"{DOC}: no '| `format` |' row", file=sys.stderr)
        return 1
    if new != text:
        DOC.write_text(new)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

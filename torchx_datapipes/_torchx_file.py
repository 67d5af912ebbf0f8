"""The ``torchx.file`` entry point that makes ``torchx run pkg.module:fn`` work.

TorchX reads the part before ``:`` as a file path and first asks this hook for its
contents. We answer with the source of an importable module and defer to TorchX's own
lookup for everything else.
"""

import importlib.util
import os
import re
from typing import Optional

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def get_file_contents(conf_file: str) -> Optional[str]:
    name = str(conf_file)
    if _DOTTED.match(name) and not name.endswith(".py") and not os.path.exists(name):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin) as fh:
                return fh.read()
    from torchx.util.io import _get_file_contents

    return _get_file_contents(name)

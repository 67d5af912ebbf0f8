"""``.torchxconfig`` component defaults for the Python API, as ``torchx run`` applies them.

``torchx run datapipes.transform`` reads ``[component:datapipes.transform]`` (the name as typed)
from ``.torchxconfig`` and uses its keys as defaults of the component's arguments. The Python API
(:mod:`torchx_datapipes.api`) reads the same file with torchx's own ``load_sections`` and both
names of each component (``[component:datapipes.transform]``, then
``[component:torchx_datapipes.components:transform]``, which wins on a key in both); an argument
the caller passes always wins. Values are the file's strings; the option spec parses and checks
them like values typed on the command line.
"""

import os
from typing import Any, Dict, List, Mapping, Optional

from torchx_datapipes.ops import SPECS
from torchx_datapipes.options.spec import OptionError


def config_dirs() -> List[str]:
    """Where ``.torchxconfig`` is looked for now: ``$HOME``, then the working directory.

    torchx's own default (``DEFAULT_CONFIG_DIRS``) is fixed when ``torchx.runner.config`` is
    imported, so a program that changes directory afterwards would read the wrong file.
    ``TORCHXCONFIG`` overrides both, as in torchx.
    """
    return [os.path.expanduser("~"), os.getcwd()]


def section_names(op: str) -> List[str]:
    return [f"datapipes.{op}", f"torchx_datapipes.components:{op}"]


def component_defaults(op: str, dirs: Optional[List[str]] = None) -> Dict[str, str]:
    """The ``.torchxconfig`` defaults of ``op`` (empty when there is no file or section)."""
    from torchx.runner.config import load_sections

    sections = load_sections("component", dirs or config_dirs())
    known = {o.name for o in SPECS[op].component_options()}
    out: Dict[str, str] = {}
    for name in section_names(op):
        section = sections.get(name, {})
        unknown = sorted(set(section) - known)
        if unknown:
            raise OptionError(
                f".torchxconfig [component:{name}]: unknown option(s) {', '.join(unknown)};"
                f" valid: {', '.join(sorted(known))}"
            )
        out.update(section)
    return out


def with_defaults(op: str, given: Mapping[str, Any], dirs: Optional[List[str]] = None) -> Dict[str, Any]:
    """``given`` (arguments the caller passed) over the ``.torchxconfig`` defaults of ``op``."""
    return {**component_defaults(op, dirs), **given}

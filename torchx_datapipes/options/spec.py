"""The declarative option spec: one frozen :class:`Option` per argument, one :class:`OpSpec` per op.

The same spec drives the three places an option used to be described separately: the
component's client-side checks (:meth:`OpSpec.check`), the runner arguments the component
puts on the command line (:meth:`OpSpec.runner_args`) and the runner's argparse parser
(:meth:`OpSpec.add_arguments`). The component functions themselves stay literal Python
because TorchX reads their signatures and docstrings; ``tests/test_options.py`` keeps them
in sync with the spec (names, defaults, docstring ``Args``).
"""

import argparse
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from torchx_datapipes.errors import DatapipesError

REQUIRED: Any = object()  # the default of an option that has none (input, output, ...)


@dataclass(frozen=True)
class Deferred:
    """A default computed when a client first needs it, from ``"module:attr"`` (``torchx:IMAGE``:
    importing torchx scans every installed package's entry points, which a rank need not pay for)."""

    ref: str

    def value(self) -> Any:
        module, _, attr = self.ref.partition(":")
        return getattr(importlib.import_module(module), attr)


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


class OptionError(DatapipesError, ValueError):
    """One option has a value it does not accept; the message names the option, the rule and the value."""


def parse_bool(value: Any) -> bool:
    """``True``/``False`` and the strings true/false/1/0/yes/no (any case); anything else is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected one of true, false, 1, 0, yes, no (any case); got {value!r}")


def _parse_int(value: Any) -> int:
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"expected an integer, got {value!r}") from e


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"expected a number, got {value!r}") from e


def _parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _parse_dict(value: Any) -> Dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    out: Dict[str, str] = {}
    for item in filter(None, str(value).split(",")):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE[,KEY=VALUE...], got {value!r}")
        out[key.strip()] = val
    return out


def _parse_list(value: Any) -> List[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


PARSERS: Dict[str, Callable[[Any], Any]] = {
    "str": _parse_str,
    "int": _parse_int,
    "float": _parse_float,
    "bool": parse_bool,
    "dict": _parse_dict,
    "list": _parse_list,
}


@dataclass(frozen=True)
class Option:
    """One argument of an op.

    ``check`` raises ``ValueError`` with the rule ("must be >= 1") for a parsed value it refuses.
    ``component``: a parameter of the TorchX component; ``runner``: passed to the runner as
    ``--name value`` (the component derives runner-only options such as ``--artifact``).
    ``optional``: ``None`` is a valid value (and then nothing goes on the command line).
    """

    name: str
    type: str
    default: Any
    help: str
    choices: Tuple[str, ...] = ()
    check: Optional[Callable[[Any], None]] = None
    component: bool = True
    runner: bool = True
    optional: bool = False

    def __post_init__(self) -> None:
        if self.type not in PARSERS:
            raise TypeError(f"option {self.name}: unknown type {self.type!r}; known: {', '.join(PARSERS)}")

    def default_value(self) -> Any:
        """The default (a :class:`Deferred` one computed now)."""
        return self.default.value() if isinstance(self.default, Deferred) else self.default

    def parse(self, value: Any, op: str = "") -> Any:
        """The checked value, or :class:`OptionError` naming the option, the rule and the value."""
        if value is None and self.optional:
            return None
        where = f"{op} " if op else ""
        try:
            parsed = PARSERS[self.type](value)
        except ValueError as e:
            raise OptionError(f"{where}--{self.name}: {e}") from e
        if self.choices and parsed not in self.choices:
            raise OptionError(f"{where}--{self.name} must be one of {', '.join(self.choices)}; got {value!r}")
        if self.check is not None:
            try:
                self.check(parsed)
            except ValueError as e:
                quoted = isinstance(value, str) and repr(value) in str(e)  # parsers quote the text already
                given = "" if quoted else f"; got {value!r}"
                raise OptionError(f"{where}--{self.name} {e}{given}") from e
        return parsed

    def to_cli(self, value: Any) -> List[str]:
        """``--name value`` for the runner's command line (nothing for ``None``)."""
        if value is None:
            return []
        if self.type == "bool":
            return [f"--{self.name}", "True" if value else "False"]
        return [f"--{self.name}", str(value)]


@dataclass(frozen=True)
class OpSpec:
    """The options of one op, in the component's parameter order (runner-only options last)."""

    op: str
    options: Tuple[Option, ...]

    def __getitem__(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(f"{self.op} has no option {name!r}; options: {', '.join(self.names())}")

    def names(self) -> List[str]:
        return [o.name for o in self.options]

    def component_options(self) -> List[Option]:
        return [o for o in self.options if o.component]

    def check(self, values: Mapping[str, Any]) -> Dict[str, Any]:
        """Parse and check every component argument; unknown names are refused."""
        known = {o.name for o in self.component_options()}
        unknown = sorted(set(values) - known)
        if unknown:
            raise OptionError(
                f"{self.op}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        out: Dict[str, Any] = {}
        for o in self.component_options():
            if o.name not in values or values[o.name] is REQUIRED:
                if o.default is REQUIRED:
                    raise OptionError(f"{self.op}: --{o.name} is required ({o.help.split(';')[0]})")
                default = o.default_value()
                out[o.name] = default if default is None else o.parse(default, self.op)
            else:
                out[o.name] = o.parse(values[o.name], self.op)
        return out

    def runner_args(self, values: Mapping[str, Any]) -> List[str]:
        """The command line of the runner for checked values (options both sides know)."""
        args: List[str] = []
        for o in self.options:
            if o.component and o.runner:
                args += o.to_cli(values.get(o.name))
        return args

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The runner's argparse options, from the same spec (runner-side checks in :meth:`check_runner`)."""
        for o in self.options:
            if not o.runner:
                continue
            kw: Dict[str, Any] = {"help": o.help, "default": None if o.default is REQUIRED else o.default}
            if o.default is REQUIRED:
                kw["required"] = True
            if o.type == "bool":
                kw.update(nargs="?", const=True)
            parser.add_argument(f"--{o.name}", **kw)

    def check_runner(self, ns: argparse.Namespace) -> None:
        """Parse and check the runner's arguments in place (the runner trusts nothing it did not check)."""
        for o in self.options:
            if o.runner:
                value = getattr(ns, o.name)
                setattr(ns, o.name, value if value is None and o.optional else o.parse(value, self.op))

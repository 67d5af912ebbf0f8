"""The ops: one module each, one registry that every consumer asks.

An op module (``ops/transform.py``, ``ops/split.py``, ...) declares ``OP``, an :class:`OpDef`: its
option spec (types, defaults, checks, help of every option: the component's client-side checks,
the runner's command line and argparse parser all derive from it), its one-line help (the
runner's subcommand) and its runner (``"module:make_op"``: ``make_op(args, cfg, fn)`` returns the
engine's ``Op``). The registry is the shared :class:`torchx_datapipes.plugins.Registry`: the
built-in ops by import string (so the client never imports torch), :func:`register_op` for code,
and the entry-point group ``torchx_datapipes.ops`` for third-party packages::

    [project.entry-points."torchx_datapipes.ops"]
    dedup = "my_pkg.dedup:OP"

What an op adds to the job manifest (``_SUCCESS``) and to its commit records is declared in its
module too (:class:`Keys`, documented in the op module's docstring; the keys every op shares are
``io/manifest_schema.py``'s): :func:`manifest_keys` and :func:`record_keys` answer from the registry.

TorchX needs a literal component function per op (it reads its signature from the source, and its
docstring as the CLI help): ``components.py`` keeps one per built-in op, a signature checked against
the spec by ``tests/test_options.py``; its docstring is :meth:`OpDef.component_doc`.
"""

import textwrap
from dataclasses import dataclass
from typing import Callable, FrozenSet, Iterator, Mapping, Optional, Tuple, TypeVar

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.options.spec import OpSpec
from torchx_datapipes.plugins import Registry

ENTRY_POINT_GROUP = "torchx_datapipes.ops"
_DOC_WIDTH = 104
_O = "torchx_datapipes.ops."
_KNOWN = {
    name: f"{_O}{name}:OP"
    for name in ("transform", "split", "stats", "validate", "tokenize", "dedup", "decontaminate")
}


T = TypeVar("T")
KeySet = ms.KeySet  # (keys always present, keys present when the job asks for them)
_NO_KEYS: KeySet = (frozenset(), frozenset())


@dataclass(frozen=True)
class Keys:
    """The keys an op writes, by *kind*: the op's name, or a variant of it (``transform_queue``: a
    transform to a queue; ``split_count``: a pass's commit records, ``<op>_<pass>``)."""

    # kind -> what the op's finalize adds to _SUCCESS (besides every op's and the engine's keys)
    manifest: Mapping[str, KeySet]
    # kind -> what the op's own ``options()`` adds to ``_SUCCESS``'s ``options`` (the engine's besides)
    options: Mapping[str, FrozenSet[str]]
    # pass kind -> what the pass's process adds to a commit record (besides the engine's keys)
    records: Mapping[str, KeySet]


@dataclass(frozen=True)
class OpDef:
    """One op: its option spec, the runner subcommand's help, and ``"module:make_op"`` of its runner."""

    spec: OpSpec
    help: str
    runner: str
    needs_fn: bool = False  # the runner refuses to start without --artifact (transform)
    doc: str = ""  # what the component does: the first part of its docstring (TorchX's CLI help)
    # the option whose value is the input's CSV column types (name:type,...); None: the op has none
    csv_types: Optional[str] = "schema"
    # "module:function" of ``(runner args) -> the directory the job commits to``; None: --output
    commit_dir: Optional[str] = None
    # what the op writes in _SUCCESS and its commit records (None: undeclared, a test op's)
    keys: Optional[Keys] = None

    @property
    def name(self) -> str:
        return self.spec.op

    def component_doc(self) -> str:
        """The component function's docstring: :attr:`doc`, then ``Args:`` written from the option spec
        (``torchx run ... --help`` shows it; the component cannot drift from the spec)."""
        lines = [self.doc.strip() or self.help, "", "Args:"]
        for o in self.spec.component_options():
            text = f"{o.name}: {' '.join(o.help.split())}"
            lines += textwrap.wrap(text, _DOC_WIDTH, initial_indent="    ", subsequent_indent="        ")
        return "\n".join(lines) + "\n"


OPS: Registry[OpDef] = Registry("op", ENTRY_POINT_GROUP, _KNOWN)


def register_op(op: OpDef, clobber: bool = False) -> None:
    """Make ``op`` known to the option checks, the runner's parser and help, and its dispatch."""
    OPS.register(op.name, op, clobber)


def get_op(name: str) -> OpDef:
    return OPS.load(name)


def op_names() -> Tuple[str, ...]:
    return OPS.names()


def builtin_op_names() -> Tuple[str, ...]:
    """The ops this package ships (each with its component function in ``components.py``)."""
    return tuple(_KNOWN)


class _Specs(Mapping[str, OpSpec]):
    """``SPECS[op]``: the option spec of every op the registry knows."""

    def __getitem__(self, name: str) -> OpSpec:
        if name not in OPS:
            raise KeyError(name)
        return get_op(name).spec

    def __iter__(self) -> Iterator[str]:
        return iter(op_names())

    def __len__(self) -> int:
        return len(op_names())


SPECS: Mapping[str, OpSpec] = _Specs()


def _declared(kind: str, table: Callable[[Keys], Mapping[str, T]]) -> T:
    for name in op_names():
        keys = get_op(name).keys
        if keys is not None and kind in table(keys):
            return table(keys)[kind]
    raise KeyError(f"no registered op declares keys of kind {kind!r}")


def manifest_keys(kind: str) -> KeySet:
    """``(always, optional)`` top-level keys of the ``_SUCCESS`` of a ``kind`` job (:class:`Keys`)."""
    always, optional = _declared(kind, lambda k: k.manifest)
    return ms.BASE_KEYS | ms.ENGINE_KEYS[0] | always, ms.ENGINE_KEYS[1] | optional


def option_keys(kind: str) -> FrozenSet[str]:
    """The keys of a ``kind`` job's ``_SUCCESS`` ``options``: the engine's and the op's own."""
    return ms.ENGINE_OPTIONS | _declared(kind, lambda k: k.options)


def record_keys(kind: str) -> KeySet:
    """``(always, optional)`` keys of a commit record of a ``kind`` pass (:class:`Keys`)."""
    always, optional = _declared(kind, lambda k: k.records)
    return ms.RECORD_KEYS | always, optional


def summary_keys(kind: str) -> KeySet:
    """``(always, optional)`` keys of a unit summary in ``_SUCCESS`` (``units[i]``) of a ``kind`` pass."""
    always, optional = record_keys(kind)
    return (always - ms.SUMMARY_DROPS) | {ms.SUMMARY_PATH}, optional - ms.SUMMARY_DROPS

"""The one registry of formats, asked by the option checks, the component help, the runner and the reader.

Layered like fsspec's registry and ``cache/registry.py``: a table of import strings of each
built-in format's :class:`~torchx_datapipes.formats.format.Format` (so importing
torchx_datapipes never imports pyarrow), :func:`register_format` for code, and the entry-point
group ``torchx_datapipes.formats`` for third-party packages::

    [project.entry-points."torchx_datapipes.formats"]
    myfmt = "my_pkg.myfmt:FORMAT"     # a Format (input, writer and reader by import strings)

An entry point may also name an ``InputFormat`` subclass (an input-only format), and the older
group ``torchx_datapipes.writers`` a ``BasePart`` subclass (an output-only format): both are
wrapped in a ``Format``. Adding a built-in format is one package under ``formats/`` declaring
``FORMAT`` plus one line in ``_KNOWN``.
"""

import base64
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, Type, Union

from torchx_datapipes.formats.base import InputFormat
from torchx_datapipes.formats.format import Format, load
from torchx_datapipes.plugins import entry_point_table

if TYPE_CHECKING:
    from torchx_datapipes.formats.chunks import PartFormat
    from torchx_datapipes.formats.writer import BasePart

ENTRY_POINT_GROUP = "torchx_datapipes.formats"
WRITERS_GROUP = "torchx_datapipes.writers"  # older plug-ins: an output-only BasePart subclass
_F = "torchx_datapipes.formats."
_KNOWN: Dict[str, str] = {
    "jsonl": _F + "jsonl:FORMAT",
    "json": _F + "json:FORMAT",
    "text": _F + "text:FORMAT",
    "csv": _F + "csv:FORMAT",
    "parquet": _F + "parquet:FORMAT",
    "files": _F + "files:FORMAT",
    "webdataset": _F + "webdataset:FORMAT",
    "megatron": _F + "megatron:FORMAT",  # output only: read back by TokenDataset
}
_REGISTERED: Dict[str, Format] = {}
_CACHE: Dict[str, Format] = {}
_ALIASES: Dict[str, str] = {}
# formats registered from code in the client travel to the job's processes in this variable
SHIPPED_ENV = "TDP_FORMATS"
_SHIPPED: List[str] = [""]  # the value of SHIPPED_ENV last registered in this process


def _entry_points(group: str) -> Tuple[Tuple[str, str], ...]:
    """The group's ``(name, "module:attr")``, listed once per process (the shared scan)."""
    return entry_point_table(group)


_GENERATION = [0]  # bumped whenever the set of formats may have changed (tables built from it)


def _clear() -> None:
    _CACHE.clear()
    _ALIASES.clear()
    _GENERATION[0] += 1


def generation() -> int:
    """Changes whenever a format is registered, unregistered or shipped: the key of derived tables."""
    _ensure_shipped()
    return _GENERATION[0]


def as_format(name: str, obj: object) -> Format:
    """``obj`` as a Format: a Format, an InputFormat subclass, or a BasePart subclass (by ``ext``)."""
    if isinstance(obj, Format):
        return obj
    if isinstance(obj, type) and issubclass(obj, InputFormat):
        return Format(name, input=obj)
    from torchx_datapipes.formats.writer import BasePart

    if isinstance(obj, type) and issubclass(obj, BasePart):
        return Format(name, writer=obj)
    raise TypeError(
        f"format {name!r}: {obj!r} is not a Format, an InputFormat subclass or a BasePart subclass"
    )


def register_format(
    fmt: Union[Format, str], cls: Union[str, type, None] = None, clobber: bool = False
) -> None:
    """Register a :class:`Format` (or ``name, InputFormat subclass or "module:Class"``).

    Afterwards ``--format``, ``--output_format`` and ``OutputDataset`` know it, as far as it
    declares each direction."""
    if isinstance(fmt, str):
        if cls is None:
            raise TypeError("register_format(name, cls): pass the InputFormat class or 'module:Class'")
        fmt = Format(fmt, input=cls)
    if not clobber and fmt.name in _names():
        raise ValueError(f"format {fmt.name!r} is already registered; pass clobber=True to replace it")
    _REGISTERED[fmt.name] = fmt
    _clear()


def register_writer(name: str, cls: Union[str, type]) -> None:
    """Make ``--output_format name`` write with ``cls`` (a BasePart subclass or ``"module:Class"``);
    an input of the same name keeps reading."""
    try:
        old: Optional[Format] = get_format(name)
    except ValueError:
        old = None
    base = old if old is not None else Format(name)
    _REGISTERED[name] = dataclasses.replace(base, writer=cls, reader=None, part_ext="", read_by="")
    _clear()


def unregister(name: str) -> None:
    """Forget a format registered from code (tests, notebooks re-running a cell)."""
    _REGISTERED.pop(name, None)
    _clear()


def _ref(name: str, direction: str, ref: Any) -> Optional[str]:
    """``ref`` as ``"module:Class"`` that another process can import, or a ValueError naming the fix."""
    if ref is None or isinstance(ref, str):
        return ref
    module, qualname = ref.__module__, ref.__qualname__
    if module == "__main__" or "<locals>" in qualname:
        where = "your script or notebook (__main__)" if module == "__main__" else "a function"
        raise ValueError(
            f"format {name!r} was registered from code with its {direction} class {qualname} defined in"
            f" {where}: the job's processes cannot import it. Move the class to a module they can import"
            " (a .py file beside your script, or a package), or register it by entry point"
            " (docs/formats.md, 'Adding a format')"
        )
    return f"{module}:{qualname}"


def shipped(names: Iterable[Optional[str]]) -> str:
    """The formats among ``names`` registered from code in this process, encoded for the job's
    environment (:data:`SHIPPED_ENV`; ``""``: none), so that its runner and DataLoader workers know
    them too. ``"auto"`` ships every code-registered input format whose classes can be imported by
    name; a format named outright must be (its classes defined in an importable module)."""
    _ensure_shipped()
    if not _REGISTERED:
        return ""
    table: Dict[str, Dict[str, Any]] = {}
    wanted = [aliases().get(n, n) for n in names if n]
    for real in dict.fromkeys([*wanted, *(_REGISTERED if "auto" in wanted else ())]):
        fmt = _REGISTERED.get(real)
        if fmt is None:
            continue
        try:
            refs = {d: _ref(real, d, getattr(fmt, d)) for d in ("input", "writer", "reader")}
        except ValueError:
            if real in wanted:
                raise
            continue  # only --format auto could pick it: the job reads its files as of an unknown extension
        table[real] = {**refs, "aliases": list(fmt.aliases), "part_ext": fmt.part_ext,
                       "options": list(fmt.options), "extra": fmt.extra, "read_by": fmt.read_by,
                       "doc": fmt.doc}  # fmt: skip
    if not table:
        return ""
    return base64.urlsafe_b64encode(json.dumps(table, sort_keys=True).encode()).decode()


def _ensure_shipped() -> None:
    """Register the formats the client shipped in :data:`SHIPPED_ENV` (once per value)."""
    text = os.environ.get(SHIPPED_ENV, "")
    if text == _SHIPPED[0]:
        return
    _SHIPPED[0] = text
    if not text:
        return
    for name, d in json.loads(base64.urlsafe_b64decode(text.encode())).items():
        if name not in _REGISTERED:  # this process's own registration wins
            _REGISTERED[name] = Format(
                name, input=d["input"], writer=d["writer"], reader=d["reader"], aliases=tuple(d["aliases"]),
                part_ext=d["part_ext"], options=tuple(d["options"]), extra=d["extra"],
                read_by=d.get("read_by", ""), doc=d["doc"],
            )  # fmt: skip
    _clear()


def _names() -> Tuple[str, ...]:
    """Every format name: the built-ins first, then plug-ins (registered or by entry point), sorted."""
    _ensure_shipped()
    eps = {n for n, _ in _entry_points(ENTRY_POINT_GROUP)} | {n for n, _ in _entry_points(WRITERS_GROUP)}
    return (*sorted(_KNOWN), *sorted({*_REGISTERED, *eps} - set(_KNOWN)))


def _lookup(name: str) -> Optional[Format]:
    """The Format registered, built in or an entry point under exactly ``name``, or None."""
    _ensure_shipped()
    if name in _CACHE:
        return _CACHE[name]
    fmt: Optional[Format] = _REGISTERED.get(name)
    if fmt is None and name in _KNOWN:
        fmt = load(_KNOWN[name])
    if fmt is None:
        for ep_name, value in _entry_points(ENTRY_POINT_GROUP):
            if ep_name == name:
                fmt = as_format(name, load(value))
        for ep_name, value in _entry_points(WRITERS_GROUP):
            if ep_name == name:
                fmt = dataclasses.replace(fmt or Format(name), writer=value, part_ext="")
    if fmt is not None:
        _CACHE[name] = fmt
    return fmt


def aliases() -> Dict[str, str]:
    """``alias -> name`` of every format's ``aliases`` (``ndjson``, ``tsv``, ``wds``...)."""
    if "" not in _ALIASES:
        table: Dict[str, str] = {"": ""}
        for name in _names():
            try:
                fmt = _lookup(name)
            except (ImportError, TypeError):
                continue
            for alias in fmt.aliases if fmt is not None else ():
                table.setdefault(alias, name)
        _ALIASES.update(table)
    return {k: v for k, v in _ALIASES.items() if k}


def get_format(name: str) -> Format:
    """The Format of a name or alias (imports its declaration, not its reader or writer)."""
    key = name.lower()
    fmt = _lookup(key) or _lookup(aliases().get(key, key))
    if fmt is None:
        raise ValueError(
            f"unknown format {name!r}; use one of {', '.join(_names())} (a plug-in adds one with"
            f" register_format or the entry-point group {ENTRY_POINT_GROUP!r})"
        )
    return fmt


def _known(name: str) -> Optional[Format]:
    try:
        return get_format(name)
    except (ValueError, ImportError, TypeError):
        return None


def input_names() -> Tuple[str, ...]:
    """Every ``--format`` name (besides ``auto``): built-ins, entry points, registered ones."""
    return tuple(n for n in _names() if (f := _known(n)) is not None and f.readable_input)


def output_names() -> Tuple[str, ...]:
    """Every ``--output_format`` name: the formats that declare a writer."""
    return tuple(n for n in _names() if (f := _known(n)) is not None and f.writable)


def builtin_input_names() -> Tuple[str, ...]:
    """The input formats this package ships (docs/options.md and the component help list them)."""
    return tuple(n for n in sorted(_KNOWN) if get_format(n).readable_input)


def builtin_output_names() -> Tuple[str, ...]:
    return tuple(n for n in sorted(_KNOWN) if get_format(n).writable)


def _for(name: str, direction: str) -> Format:
    """The Format of ``name`` if it has ``direction`` (``input`` or ``output``), else the error listing
    the formats that have it."""
    try:
        fmt: Optional[Format] = get_format(name)
    except ValueError:
        fmt = None
    has = fmt is not None and (fmt.readable_input if direction == "input" else fmt.writable)
    if fmt is None or not has:
        if fmt is None:
            what = f"unknown {direction} format {name!r}"
        elif direction == "output":
            what = f"an input format with no writer: {name!r}"
        elif fmt.output_only:
            by = f" ({fmt.read_by} reads its outputs)" if fmt.read_by else ""
            what = f"{fmt.name} is an output-only format: it writes parts and reads no input files{by}"
        else:
            what = f"a format with no input reader: {name!r}"
        names = ("auto", *input_names()) if direction == "input" else output_names()
        raise ValueError(
            f"{what}; use one of {', '.join(names)} (a plug-in adds one with register_format"
            f" or the entry-point group {ENTRY_POINT_GROUP!r})"
        )
    return fmt


def input_class(name: str) -> Type[InputFormat]:
    """The InputFormat class of a ``--format`` name or alias (imports its module now)."""
    return _for(name, "input").input_class()


def writer_class(name: str) -> Type["BasePart"]:
    """The part writer of an ``--output_format`` name."""
    return _for(name, "output").writer_class()


def part_reader(output_format: str) -> "PartFormat":
    """The reader ``OutputDataset`` uses for an output written as ``output_format``."""
    from torchx_datapipes.errors import ReadError

    try:
        return get_format(output_format).part_reader()
    except (ValueError, ImportError) as e:
        raise ReadError(f"output_format {output_format!r} is not readable: {e}") from e


def check_format_options(name: str, given: Dict[str, bool]) -> None:
    """Refuse a format option (``given``: option -> whether it was set) the ``--format`` does not read.

    ``auto`` is not checked: its files may be of several formats, each taking what it reads."""
    if name == "auto":
        return
    fmt = get_format(name)
    unread = [o for o, was_set in given.items() if was_set and o not in fmt.options]
    if unread:
        takes = ", ".join(f"--{o}" for o in fmt.options) or "no format option"
        readers = " or ".join(n for n in input_names() if set(unread) <= set(_options_of(n))) or "csv"
        raise ValueError(
            f"{', '.join('--' + o for o in unread)} {'is' if len(unread) == 1 else 'are'} not read by"
            f" --format {name} (it takes {takes}); drop {'it' if len(unread) == 1 else 'them'}, or use"
            f" --format {readers}"
        )


def _options_of(name: str) -> Tuple[str, ...]:
    fmt = _known(name)
    return fmt.options if fmt is not None else ()


def clear_caches() -> None:
    """Forget this process's part indexes, footers, kept bytes, row groups and checksums (tests, rewrites)."""
    from torchx_datapipes.formats import chunks
    from torchx_datapipes.formats.jsonl import reader as jsonl_reader
    from torchx_datapipes.formats.webdataset import reader as tar_reader
    from torchx_datapipes.io import verify

    caches: list = [jsonl_reader._LINE_INDEX, tar_reader._TAR_INDEX, chunks._PART_BYTES]
    try:
        from torchx_datapipes.formats.parquet import reader as pq_reader
    except ImportError:  # pragma: no cover - pyarrow missing
        pass
    else:
        caches += [pq_reader._RG_CACHE, pq_reader._PQ_META]
    for cache in caches:
        cache.clear()
    verify._SUMS.clear()
    verify._WHOLE_OK.clear()

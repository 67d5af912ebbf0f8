"""A format's declaration: what it can do in each direction, by import strings.

A :class:`Format` names the classes that read its input files (``--format``), write its parts
(``--output_format``) and read committed parts back (``OutputDataset``), plus the format
options it takes. Nothing is imported until a direction is asked for, so declaring Parquet
never imports pyarrow. The registry (``formats/registry.py``) holds one ``Format`` per name.
"""

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Tuple, Type, Union

from torchx_datapipes.formats.base import extra_hint

if TYPE_CHECKING:
    from torchx_datapipes.formats.base import InputFormat
    from torchx_datapipes.formats.chunks import PartFormat
    from torchx_datapipes.formats.writer import BasePart

# the format options of ``--format`` (the input side); a format lists those it reads
FORMAT_OPTIONS = ("delimiter", "header", "na_values", "schema")

Ref = Union[str, type, None]


def load(ref: Union[str, type], extra: str = "") -> Any:
    """``"module:attr"`` imported (an ImportError names the pip extra), or ``ref`` itself."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as e:
        if extra:
            raise extra_hint(extra, e.name or module) from e
        raise


@dataclass(frozen=True)
class Format:
    """One format and every direction it supports.

    ``input``: an :class:`~torchx_datapipes.formats.base.InputFormat` subclass (its ``extensions``
    are the files ``--format auto`` gives it). ``writer``: a
    :class:`~torchx_datapipes.formats.writer.BasePart` subclass (its ``ext`` names the parts).
    ``reader``: a part reader (``formats/chunks.py`` ``PartFormat``) for ``OutputDataset``; left
    out, the writer class's ``reader`` attribute is used. Each is a class or ``"module:Class"``.
    ``part_ext`` names the parts without importing the writer. ``options``: the format
    options (of :data:`FORMAT_OPTIONS`) its input reads; ``extra``: the
    pip extra that installs its dependencies (named in the ImportError's install hint).
    ``read_by``: what reads the outputs instead of ``OutputDataset`` (``megatron``: TokenDataset),
    named when ``OutputDataset`` or ``--format`` refuses them. A format with a writer and no
    ``input`` is :attr:`output_only`: ``--format`` refuses it by that, whatever its name.
    """

    name: str
    input: Ref = None
    writer: Ref = None
    reader: Ref = None
    aliases: Tuple[str, ...] = ()
    part_ext: str = ""  # the parts' file extension (default: the writer class's ``ext``)
    options: Tuple[str, ...] = ()
    extra: str = ""
    read_by: str = ""
    doc: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(FORMAT_OPTIONS))
        if unknown:
            raise ValueError(f"format {self.name!r}: unknown options {unknown}; use some of {FORMAT_OPTIONS}")

    @property
    def readable_input(self) -> bool:
        return self.input is not None

    @property
    def writable(self) -> bool:
        return self.writer is not None

    @property
    def output_only(self) -> bool:
        """It writes parts and reads no input files (``megatron``, a ``torchx_datapipes.writers`` plug-in)."""
        return self.writable and not self.readable_input

    def input_class(self) -> Type["InputFormat"]:
        if self.input is None:
            by = f"; {self.read_by} reads its outputs" if self.read_by else ""
            raise ValueError(f"format {self.name!r} reads no input files (it is an output-only format{by})")
        cls: Type[InputFormat] = load(self.input, self.extra)
        return cls

    def writer_class(self) -> Type["BasePart"]:
        if self.writer is None:
            raise ValueError(f"format {self.name!r} writes no output (it is an input format only)")
        cls: Type[BasePart] = load(self.writer, self.extra)
        return cls

    def reader_ref(self) -> Optional[Union[str, type]]:
        if self.reader is not None:
            return self.reader
        return getattr(self.writer_class(), "reader", None) if self.writer is not None else None

    def part_reader(self) -> "PartFormat":
        """A new part reader of this format's committed outputs (``OutputDataset``)."""
        ref = self.reader_ref()
        if ref is None and self.read_by:
            raise ValueError(f"{self.name} output is read by {self.read_by}, not OutputDataset")
        if ref is None:
            raise ValueError(
                f"output format {self.name!r} declares no reader: give its Format a"
                " reader='module:Class' (a formats/chunks.py PartFormat) to read its outputs with"
                " OutputDataset"
            )
        reader: PartFormat = load(ref, self.extra)()
        return reader

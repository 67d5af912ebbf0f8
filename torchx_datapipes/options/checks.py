"""Check functions of the option spec: each raises ``ValueError("must be ...")`` for a value it refuses.

The spec adds the option's name and the value given, so messages read
``transform --num_workers must be an integer >= 1; got 0``.
"""

from typing import Any, Callable

ON_ERROR = ("raise", "skip")
BACKENDS = ("cloudpickle", "torch.package", "module")
SPLIT_METHODS = ("hash", "exact")
ASSIGN = ("dynamic", "static")


def non_empty(value: Any) -> None:
    if not value.strip():
        raise ValueError("must not be empty")


def at_least(low: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < low:
            raise ValueError(f"must be >= {low}")

    return check


def positive(value: Any) -> None:
    if not value > 0:
        raise ValueError("must be > 0")


def fraction(value: Any) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be in [0, 1] (a share of the input records)")


def port(value: Any) -> None:
    if not 0 <= value <= 65535:
        raise ValueError("must be a port number in [0, 65535]")


def j_spec(value: Any) -> None:
    from torchx.components.dist import parse_nnodes  # imported here: a rank never checks -j

    try:
        low, high, nproc, _ = parse_nnodes(value)
    except ValueError as e:
        raise ValueError("must look like 4, 2x4 or 1:2x4 ([{min_nnodes}:]{nnodes}x{nproc_per_node})") from e
    if low < 1 or high < low or nproc < 1:
        raise ValueError("needs at least 1 node and 1 rank per node, with min_nnodes <= nnodes")


def fractions(value: Any) -> None:
    from torchx_datapipes.split import parse_fractions

    try:
        parse_fractions(value)
    except ValueError as e:
        raise ValueError(f"is not valid: {e}") from e


def quantiles(value: Any) -> None:
    from torchx_datapipes.stats.config import StatsConfig

    try:
        StatsConfig.parse(None, value)
    except ValueError as e:
        raise ValueError(f"is not valid: {e}") from e


def key_fields(value: Any) -> None:
    from torchx_datapipes.split import parse_key

    try:
        parse_key(value)
    except ValueError as e:
        raise ValueError(f"is not valid: {e}") from e


def stats_fields(value: Any) -> None:
    from torchx_datapipes.stats.config import StatsConfig

    try:
        StatsConfig.parse(value or None, None)
    except ValueError as e:
        raise ValueError(f"is not valid: {e}") from e


def between(low: int, high: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be in [{low}, {high}]")

    return check


def non_negative(value: Any) -> None:
    if not value >= 0:
        raise ValueError("must be >= 0 (0 turns it off)")

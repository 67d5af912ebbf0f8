"""``RecordLines`` finds each record's first line, field count and blankness, however it is fed.

Chunks without quotes take a one-pass path (delimiters summed per record); chunks with quotes
(or inside a quoted field) take the position path. Every chunking must give the same records,
and those of Python's ``csv`` module.
"""

import csv
import io
import random
from typing import List, Tuple

import pytest

from torchx_datapipes.formats.csv.lines import RecordLines

Rec = Tuple[int, int, bool]


def sample_csv(seed: int) -> bytes:
    rng = random.Random(seed)
    rows = ["a,b,c"]
    for i in range(400):
        r = rng.random()
        if r < 0.05:
            rows.append("")  # a blank line
        elif r < 0.15:
            rows.append(f'{i},"x, ""quoted""\nsecond line",{i}')  # quotes, a quoted comma and newline
        elif r < 0.2:
            rows.append(f"{i},too,many,fields")
        else:
            rows.append(f"{i},{rng.randint(0, 99)},plain")
    text = "\r\n".join(rows) if seed % 2 else "\n".join(rows)
    return (text + "\n").encode()


def records(data: bytes, chunk: int) -> List[Rec]:
    lines = RecordLines(",")
    for i in range(0, len(data), chunk):
        lines.feed(data[i : i + chunk])
    lines.finish()
    got: List[Rec] = []
    while len(lines):
        got.append(lines.pop())
    return got


def expected(data: bytes) -> List[Rec]:
    """First line and field count of every record, by Python's csv module (blank: no fields)."""
    reader = csv.reader(io.StringIO(data.decode(), newline=""))
    out: List[Rec] = []
    line = 1
    for row in reader:
        out.append((line, max(1, len(row)), not row))
        line = reader.line_num + 1
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_every_chunking_gives_the_records_of_the_csv_module(seed: int) -> None:
    data = sample_csv(seed)
    want = expected(data)
    assert any(f == 4 for _, f, _ in want) and any(b for *_, b in want)  # the sample has both
    for chunk in (1, 3, 64, 1000, len(data)):
        assert records(data, chunk) == want, chunk


def test_take_skips_blank_and_odd_records_and_stops_at_the_nth_row() -> None:
    lines = RecordLines(",")
    lines.feed(b"a,b\n1,2\n\n3\n4,5\n6,7\n")
    lines.finish()
    lines.pop()  # the header
    assert lines.take(2, 2) == ([2, 5], [(4, 1, False)], 1)
    assert lines.take(0, 2) == ([], [], 0)
    assert lines.take(-1, 2) == ([6], [], 0)

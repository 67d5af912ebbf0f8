"""``runner.background.Background``: rank 0 plans the input while the process group forms."""

import threading
import time

import pytest

from torchx_datapipes.runner.background import Background


def test_the_result_and_the_thread() -> None:
    started = threading.Event()

    def work() -> int:
        started.set()
        time.sleep(0.05)
        return 42

    job = Background(work)
    assert started.wait(10)  # it runs at once, before result() is asked for
    assert job.result() == 42 and job.result() == 42
    assert job._thread.daemon


def test_an_exception_is_raised_by_result() -> None:
    def fail() -> int:
        raise FileNotFoundError("input file 'x.jsonl' does not exist")

    job = Background(fail)
    with pytest.raises(FileNotFoundError, match="x.jsonl"):
        job.result()

"""The order in which pytest-xdist hands out test files (``make pytest``: ``-n 3 --dist loadfile
--no-loadscope-reorder``): the longest files first, so that no long file starts last and keeps one
worker busy after the others have finished. The rest keep their collection order.

Durations measured on the 2-core test machine (seconds, serial); update the list when a file's
cost changes a lot. An unlisted or renamed file only loses its place, never a test.
"""

from typing import List

import pytest

LONGEST_FIRST = [
    "test_e2e_queue.py",  # 54
    "test_demo.py",  # 53
    "test_slurm.py",  # 47 (a private two-node cluster)
    "test_e2e_claiming.py",  # 45
    "test_cache_sharing.py",  # 44
    "test_multihost.py",  # 44
    "test_e2e_transform.py",  # 40
    "test_ray.py",  # 33 (a private Ray head)
    "test_e2e_elastic.py",  # 33
    "test_data_access.py",  # 30
    "test_tokenize.py",  # 28 (a launch, megatron-core)
    "test_dedup.py",  # 22 (a launch and a killed rank)
    "test_bench_skew.py",  # 29
    "test_e2e_stats.py",  # 28
    "test_e2e_reader.py",  # 28
    "test_cache_holders.py",  # 24
    "test_bench_validate.py",  # 23
    "test_e2e_split.py",  # 20
    "test_tokenize_dataset.py",  # 18 (torchrun 2 x 2)
    "test_queue_receipts.py",  # 19
    "test_bench_images.py",  # 19
    "test_cache_failures.py",  # 17
    "test_e2e_output_safety.py",  # 16
]


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # only in an xdist worker: a serial run keeps its order
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order

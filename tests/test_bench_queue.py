"""The queue benchmark (issue 21) at a tiny size: it runs against the three brokers and reports honestly."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_queue  # noqa: E402


def test_tiny_run_of_the_queue_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = bench_queue.main(["--records", "3000", "--images", "200", "--slow-records", "700", "--max-backlog",
                            "5", "--json", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == res
    for part in ("small", "images"):
        assert [r["path"].split(" ")[0] for r in res[part]] == ["files", "redis", "rabbitmq", "nats"]
        for r in res[part]:
            assert r["records"] == r["expected"] and r["duplicates"] == 0 and r["end_to_end_s"] > 0
    for r in res["backpressure"]["rows"]:
        assert r["records"] == 700 and 0 < r["peak_backlog"] <= 5 + 1  # +1: the probe samples between calls

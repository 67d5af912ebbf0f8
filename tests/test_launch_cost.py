"""What a rank pays before its first record (issue 32, item 11). The times are measured in
``benchmarks/bench_transform.py`` (docs/benchmarks.md); these tests hold the causes found there."""

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import pytest

from torchx_datapipes import api


def _in_fresh_python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_rank_parses_its_own_op_only_and_never_imports_torchx() -> None:
    """Parsing every op imported every op module, and torchx (whose import scans every installed
    package's entry points) for the image default."""
    got = _in_fresh_python(
        """
        import sys
        from torchx_datapipes.runner.main import parse_args
        args = parse_args(["transform", "--input", "x.jsonl", "--output", "out", "--artifact", "a.pkl"])
        ops = sorted(m for m in sys.modules if m.startswith("torchx_datapipes.ops."))
        print(args.op, "torchx" in sys.modules, ",".join(ops))
        """
    )
    assert got == "transform False torchx_datapipes.ops.common,torchx_datapipes.ops.transform"


def test_help_and_unknown_ops_still_list_every_op() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "torchx_datapipes.runner", "no_such_op"], capture_output=True, text=True
    )
    assert out.returncode == 2
    for name in ("transform", "split", "stats", "validate", "tokenize", "dedup", "decontaminate"):
        assert name in out.stderr


def test_the_runner_imports_with_the_collector_off_and_freezes_what_it_built() -> None:
    got = _in_fresh_python(
        """
        import gc
        import torchx_datapipes.runner.__main__  # the module's body, not its `if __name__` block
        print(gc.isenabled(), gc.get_freeze_count() > 100_000)
        """
    )
    assert got == "True True"


def _env(tmp_path: Path, j: str) -> Dict[str, str]:
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n')
    app = api.transform(lambda r: r, str(tmp_path / "in.jsonl"), str(tmp_path / "out"), j=j)
    return dict(app.roles[0].env)


@pytest.mark.parametrize("j, per_round_store", [("1x2", False), ("2", False), ("2x1", True), ("1:2x1", True)])
def test_only_jobs_that_may_span_nodes_move_the_worker_store_into_rank_0(
    tmp_path: Path, j: str, per_round_store: bool
) -> None:
    """A store hosted by rank 0 made the other ranks of a one-node job retry their connection (up to
    ~0.4 s); jobs of several agents need it (docs/multinode.md)."""
    assert (_env(tmp_path, j).get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1") is per_round_store

"""Issue 20, client side (no cluster): ``--memMB`` sized from ranks x workers and refused below the
measured floor where memory is enforced; Slurm's out-of-memory reports read into the API's error;
the Ray image directory refused under the temp dir and shipped as a private copy by api.run."""

import os
import subprocess
from pathlib import Path

import pytest
from tdp_testutil import make_dataset
from torchx.runner import get_runner
from torchx.specs.finder import ComponentValidationException

from torchx_datapipes import cluster, components
from torchx_datapipes.cluster import (
    META_MEM_FLOOR,
    check_memory,
    default_memory_mb,
    memory_floor_mb,
    oom_hint,
    ray_workspace,
)

COMPONENT = "torchx_datapipes.components:transform"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_dataset(tmp_path / "data", [10])
    (tmp_path / "fns.py").write_text("def clean(rec):\n    return rec\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_memory_model_from_the_measurements() -> None:
    # docs/cluster.md "Memory per node": sacct MaxRSS 545 MB at 1x1, 796 at 1x2, 1293 at 1x4,
    # 895 at 1x1 --num_workers 2, 1494 at 1x2 and 2607 at 1x4 --num_workers 2
    measured = {(1, 1): 545, (2, 1): 796, (4, 1): 1293, (1, 2): 895, (2, 2): 1494, (4, 2): 2607}
    for (nproc, workers), peak in measured.items():
        floor = memory_floor_mb(nproc, workers)
        assert peak * 0.9 <= floor <= peak * 1.15, (nproc, workers, floor, peak)
        default = default_memory_mb(nproc, workers)
        assert default >= peak * 1.4 and default % 256 == 0, (nproc, workers, default)
    assert default_memory_mb(2, 1) == 1280 and default_memory_mb(1, 1) == 1024


@pytest.mark.parametrize("j,workers,want", [("2x1", "1", 1024), ("1x2", "1", 1280), ("1x4", "2", 4352)])
def test_default_memmb_follows_the_job(project: Path, j: str, workers: str, want: int) -> None:
    with get_runner() as r:
        args = ["--fn", "fns.py:clean", "--input", "data/*.jsonl", "--output", "out", "-j", j]
        info = r.dryrun_component(COMPONENT, [*args, "--num_workers", workers], "slurm")
    assert info._app.roles[0].resource.memMB == want
    assert f"--mem={want}" in str(info.request.cmd) or f"--mem={want}" in repr(info)


def test_a_memmb_below_the_floor_is_refused_where_enforced(project: Path) -> None:
    args = [
        "--fn",
        "fns.py:clean",
        "--input",
        "data/*.jsonl",
        "--output",
        "out",
        "-j",
        "1x4",
        "--memMB",
        "1024",
    ]
    with get_runner() as r:
        with pytest.raises(ComponentValidationException) as err:
            r.dryrun_component(COMPONENT, args, "slurm")
        msg = str(err.value)
        assert (
            "--memMB 1024 is below the 1340 MB that one node of this job needs" in msg
            and "Raise --memMB" in msg
        )
        r.dryrun_component(COMPONENT, args, "local_cwd")  # not enforced on this machine: allowed
    check_memory(1024, 1340, "ray")  # TorchX's Ray actors get no memory limit: allowed
    # built outside torchx (target unknown): api.run checks it for its scheduler
    app = components.transform(fn="fns.py:clean", input="data/*.jsonl", output="out", j="1x4", memMB=1024)
    assert app.metadata[META_MEM_FLOOR] == "1340"
    with pytest.raises(ValueError, match="below the 1340 MB"):
        check_memory(app.roles[0].resource.memMB, int(app.metadata[META_MEM_FLOOR]), "slurm")


def test_oom_hint_reads_sacct_and_the_step_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sacct's OUT_OF_MEMORY (memory cgroups) or slurmstepd's log line (OverMemoryKill); the real
    kill of the second kind runs in tests/test_slurm.py."""
    sacct = tmp_path / "sacct"  # what sacct -n -P -o JobID,State,MaxRSS,ReqMem prints for such a job
    sacct.write_text("#!/bin/sh\necho '7|OUT_OF_MEMORY||1280M'\necho '7.0|OUT_OF_MEMORY|1310720K|'\n")
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    hint = oom_hint("slurm://torchx/7")
    assert hint and hint.startswith(
        "out of memory: raise --memMB (sacct: step 7 OUT_OF_MEMORY, MaxRSS ? of 1280M)"
    )
    assert oom_hint("local_cwd://torchx/x") is None
    sacct.write_text("#!/bin/sh\necho '8|FAILED||1G'\n")
    log = "slurmstepd-h1: error: StepId=8.0 exceeded memory limit (1528193024 > 1073741824), being killed\n"
    assert "StepId=8.0 exceeded memory limit (1457 MB > 1024 MB)" in str(oom_hint("slurm://torchx/8", log))
    assert oom_hint("slurm://torchx/8", "an ordinary failure") is None
    assert subprocess.run(["sacct"], capture_output=True, text=True).stdout.startswith("8|")


def test_ray_image_under_tmp_is_refused_and_api_ships_a_copy(project: Path) -> None:
    assert str(project).startswith("/tmp/")
    args = ["--fn", "fns.py:clean", "--input", f"{project}/data/*.jsonl", "--output", f"{project}/out"]
    with get_runner() as r:
        with pytest.raises(ComponentValidationException, match="which TorchX's Ray scheduler deletes"):
            r.dryrun_component(
                COMPONENT, [*args, "--artifact_store", f"{project}/store", "--image", str(project)], "ray",
                cfg={"dashboard_address": "127.0.0.1:1"}, workspace="",
            )  # fmt: skip
    (project / ".git").mkdir()
    copy = ray_workspace(str(project))
    try:
        assert copy != str(project) and copy.startswith("/tmp/tdp-ray-workspace-")
        assert sorted(os.listdir(copy)) == ["data", "fns.py"]  # no .git, .venv, .tdp
    finally:
        cluster.shutil.rmtree(copy)
    assert (project / ".git").is_dir() and (project / "fns.py").is_file()

"""Issue 20: the components on a real Slurm cluster through ``torchx run -s slurm``.

One private two-node cluster for the module (:mod:`slurm_cluster`: Debian's Slurm 22.05, each
node a network namespace with its own hostname, accounting through slurmdbd on MariaDB). The
jobs are submitted at once, as a user would, with ``PATH=/usr/bin:/bin`` (the venv is NOT on
``PATH``: the job must still find the client's torchrun), then each test awaits its own:

- ``transform -j 2x1`` (one rank on each node, the rendezvous on node ``h1`` by name);
- ``split -j 2x1``;
- ``stats -j 1x2``;
- ``dedup -j 2x1``: the keyed exchange across two nodes writes the bytes of one in-process rank;
- ``transform -j 1x1 --max_retries 1`` whose function fails once: Slurm requeues it and the
  second attempt resumes from the committed units.
- ``api.run(api.transform(...), "slurm")`` at ``-j 1x2``.

Each output is compared with the same op run in this process; ``torchx status`` and ``torchx
log`` are checked on the transform job. A job whose function exceeds ``--memMB`` is killed by
Slurm, and ``api.run`` says "out of memory: raise --memMB". The tests fail (never skip) when
Slurm or the namespaces are missing; ``scripts/services.sh`` installs the packages.
"""

import os
import re
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List

import orjson
import pytest
from netns import can_make_namespaces, leftovers
from slurm_cluster import SlurmCluster, missing_tools, wait_job
from tdp_testutil import TORCHX, canon, output_files, read_output, records, write_jsonl

from torchx_datapipes import api
from torchx_datapipes.runner.main import main

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")
FLAKY_ID = 250  # a record of the last (smallest) unit: the first two units commit before it fails
FNS = textwrap.dedent(
    """
    import os

    MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "failed-once")


    def clean(rec):
        return {**rec, "n": len(rec["text"].split())}


    def flaky(rec):
        if rec["id"] == FLAKY_ID and not os.path.exists(MARK):
            open(MARK, "w").close()
            raise RuntimeError("fails once, on purpose")
        return clean(rec)


    def hog(rec):
        big = b"x" * (2 * 1024**3)  # touched: 2 GB of RSS, twice the --memMB this job gets
        return {**rec, "n": len(big)}
    """
).replace("FLAKY_ID", str(FLAKY_ID))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): run `make services` (root)")
    why = can_make_namespaces()
    if why is not None:
        pytest.fail(f"the Slurm test cluster's nodes are network namespaces: {why}")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    c.start()
    procs = list(c.procs.values())
    try:
        yield c
    finally:
        c.stop()
        assert all(p.poll() is not None for p in procs), "a Slurm daemon outlived the cluster"
        assert not leftovers(c.name), f"namespaces or links left behind: {leftovers(c.name)}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 records in three files of different sizes (one unit each, claimed largest first)."""
    root = tmp_path_factory.mktemp("slurm_project")
    recs = records(300)
    for i, (lo, hi) in enumerate([(0, 120), (120, 220), (220, 300)]):
        write_jsonl(root / f"data/part-{i}.jsonl", recs[lo:hi])
    (root / "fns.py").write_text(FNS)
    return root


def torchx(cluster: SlurmCluster, project: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    """The venv's torchx with the venv NOT on PATH, as ``.venv/bin/torchx`` typed in a plain shell."""
    proc = start_torchx(cluster, project, *args)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_torchx(cluster: SlurmCluster, project: Path, *args: str) -> "subprocess.Popen[str]":
    env = {
        **os.environ, **cluster.env, "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),  # this checkout's package in the job too (the editable install's, in CI)
    }  # fmt: skip
    return subprocess.Popen(
        [TORCHX, *args], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


JOBS: Dict[str, List[str]] = {
    "transform": ["datapipes.transform", "--fn", "fns.py:clean", "-j", "2x1", "--rdzv_port", "29731"],
    "split": ["datapipes.split", "-j", "2x1", "--rdzv_port", "29732"],
    "stats": ["datapipes.stats", "-j", "1x2"],
    "dedup": ["datapipes.dedup", "-j", "2x1", "--rdzv_port", "29733", "--unit_mb", "0.004"],
    "retry": ["datapipes.transform", "--fn", "fns.py:flaky", "-j", "1x1", "--max_retries", "1"],
}


@pytest.fixture(scope="module")
def jobs(cluster: SlurmCluster, project: Path) -> Dict[str, str]:
    """Every job submitted at once (``--cpu 1``: they share the two nodes); name -> handle.

    ``api``: ``api.run(app, "slurm", wait=False)`` from this process with ``PATH=/usr/bin:/bin``.
    """
    common = ["--input", "data/*.jsonl", "--cpu", "1"]
    procs = {
        name: start_torchx(cluster, project, "run", "-s", "slurm", *args, *common, "--output", f"out/{name}")
        for name, args in JOBS.items()
    }
    handles = {}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**cluster.env, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}.items():
            mp.setenv(k, v)
        mp.chdir(project)
        app = api.transform("fns.py:clean", input="data/*.jsonl", output="out/api", j="1x2", cpu=1)
        handles["api"] = api.run(app, "slurm", wait=False).app_handle
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        found = re.findall(r"^slurm://\S+/(\d+)$", out, re.M)
        assert proc.returncode == 0 and found, f"{name}: {out}\n{err}\n{cluster.logs()}"
        handles[name] = f"slurm://torchx/{found[-1]}"
    return handles


def finished(cluster: SlurmCluster, handle: str, timeout_s: float = 240) -> None:
    job_id = handle.rsplit("/", 1)[1]
    state = wait_job(cluster, job_id, timeout_s)
    if state != "COMPLETED":
        logs = "".join(p.read_text() for p in sorted(cluster.workdir.parent.glob(f"*/slurm-{job_id}-*.err")))
        raise AssertionError(f"{handle} ended {state}:\n{logs}\n{cluster.logs()}")


def inprocess(project: Path, op: str, *extra: str) -> Path:
    """The same op in this process (one rank, one worker): the expected output."""
    out = project / "expected" / op
    main([op, "--input", str(project / "data/*.jsonl"), "--output", str(out), "--progress_s", "0", *extra])
    return out


def expected_clean(project: Path) -> List[bytes]:
    recs = [
        orjson.loads(x)
        for p in sorted((project / "data").glob("*.jsonl"))
        for x in p.read_bytes().splitlines()
    ]
    return canon([{**r, "n": len(r["text"].split())} for r in recs])


def test_transform_2x1_without_the_venv_on_path(
    cluster: SlurmCluster, project: Path, jobs: Dict[str, str]
) -> None:
    handle = jobs["transform"]
    finished(cluster, handle)
    out = project / "out/transform"
    assert canon(read_output(out)) == expected_clean(project)
    m = orjson.loads((out / "_SUCCESS").read_bytes())
    assert (m["world_size"], m["records_out"]) == (2, 300)
    nodes = cluster.cmd(["sacct", "-n", "-X", "-P", "-j", handle.rsplit("/", 1)[1], "-o", "NodeList"]).stdout
    assert sorted(nodes.split()) == ["h1", "h2"], nodes  # one rank on each node
    status = torchx(cluster, project, "status", handle)
    assert status.returncode == 0 and "State: SUCCEEDED" in status.stdout, status.stdout + status.stderr
    log = torchx(cluster, project, "log", handle)
    assert log.returncode == 0, log.stderr
    assert f"output: {out}  manifest: {out}/_SUCCESS" in log.stdout, log.stdout


def test_api_run_slurm_without_the_venv_on_path(
    cluster: SlurmCluster, project: Path, jobs: Dict[str, str]
) -> None:
    finished(cluster, jobs["api"])
    assert canon(read_output(project / "out/api")) == expected_clean(project)
    assert orjson.loads((project / "out/api/_SUCCESS").read_bytes())["world_size"] == 2


def test_split_2x1(cluster: SlurmCluster, project: Path, jobs: Dict[str, str]) -> None:
    finished(cluster, jobs["split"])
    want = inprocess(project, "split")
    for s in SPLITS:
        got = read_output(project / "out/split", s)
        assert got and canon(got) == canon(read_output(want, s)), s
    assert orjson.loads((project / "out/split/_SUCCESS").read_bytes())["world_size"] == 2


def test_dedup_2x1_writes_the_bytes_of_one_rank(
    cluster: SlurmCluster, project: Path, jobs: Dict[str, str]
) -> None:
    finished(cluster, jobs["dedup"])
    out = project / "out/dedup"
    want = inprocess(project, "dedup", "--unit_mb", "0.004")
    got = output_files(out)
    assert got == output_files(want) and any(k.startswith("_dedup/") for k in got), sorted(got)
    m = orjson.loads((out / "_SUCCESS").read_bytes())
    assert m["world_size"] == 2 and len(m["units"]) > 2, m["units"]
    expected = orjson.loads((want / "_SUCCESS").read_bytes())
    assert m["records_out"] == expected["records_out"] <= len({r["text"] for r in records(300)}) < 300


def test_stats_1x2(cluster: SlurmCluster, project: Path, jobs: Dict[str, str]) -> None:
    finished(cluster, jobs["stats"])
    want = orjson.loads((inprocess(project, "stats") / "stats.json").read_bytes())
    got = orjson.loads((project / "out/stats/stats.json").read_bytes())
    assert got["records"] == want["records"] == 300
    assert sorted(got["fields"]) == sorted(want["fields"]) == ["id", "label", "text", "x"]
    for name, w in want["fields"].items():
        g = got["fields"][name]
        assert (g["count"], g["missing"], g["types"]) == (w["count"], w["missing"], w["types"]), name
        if w["numeric"]:  # exact at this size; sums differ only in float rounding across ranks
            gn, wn = g["numeric"], w["numeric"]
            assert (gn["min"], gn["max"], gn["quantiles"]) == (wn["min"], wn["max"], wn["quantiles"]), name
            assert gn["sum"] == pytest.approx(wn["sum"], rel=1e-12), name
    assert orjson.loads((project / "out/stats/_SUCCESS").read_bytes())["world_size"] == 2


def test_max_retries_requeues_and_resumes(cluster: SlurmCluster, project: Path, jobs: Dict[str, str]) -> None:
    handle = jobs["retry"]
    finished(cluster, handle)
    job_id = handle.rsplit("/", 1)[1]
    history = cluster.cmd(["sacct", "-D", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).stdout.split()
    assert history == ["REQUEUED", "COMPLETED"], history
    assert (project / "failed-once").exists()
    assert canon(read_output(project / "out/retry")) == expected_clean(project)
    log = (project / f"slurm-{job_id}-transform-0.err").read_text()
    assert "resumed: skipped 2 committed unit(s)" in log, log


def test_out_of_memory_is_named(
    cluster: SlurmCluster, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm kills a job over its --memMB; api.run's error says so and names the fix."""
    for k, v in cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(project)
    app = api.transform(
        "fns.py:hog",
        input=str(project / "data/part-2.jsonl"),
        output=str(project / "out/hog"),
        j="1x1",
        cpu=1,
    )
    started = time.monotonic()
    with pytest.raises(api.JobFailedError) as err:
        api.run(app, "slurm")
    msg = str(err.value)
    assert "out of memory: raise --memMB" in msg and "exceeded memory limit" in msg, msg
    assert time.monotonic() - started < 120

"""End to end through the real ``torchx run`` CLI on local_cwd, as a user runs it."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from tdp_testutil import (
    TORCHX,
    VENV_BIN,
    canon,
    make_dataset,
    manifest,
    part_bytes,
    read_output,
    run_component,
    run_torchx,
)

pytestmark = pytest.mark.e2e

TRANSFORMS = textwrap.dedent(
    """
    import os
    import time

    def clean(rec):
        rec["text"] = " ".join(rec["text"].lower().split())
        rec["n"] = len(rec["text"].split())
        return rec

    def slow(rec):
        marker = os.path.join(os.environ["TDP_TEST_PIDS"], str(os.getpid()))
        if not os.path.exists(marker):
            open(marker, "w").close()
        gate, deadline = os.environ.get("TDP_TEST_GATE"), time.monotonic() + 120
        while gate and os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)  # the test holds the job while the gate file exists
        time.sleep(0.004)
        return rec
    """
)


def expected_clean(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for r in recs:
        text = " ".join(r["text"].lower().split())
        out.append({**r, "text": text, "n": len(text.split())})
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project dir: data (1001 records, 3 files) and a transforms file and package."""
    root = tmp_path_factory.mktemp("project")
    make_dataset(root / "data", [400, 333, 268])
    (root / "my_transforms.py").write_text(TRANSFORMS)
    (root / "my_pkg").mkdir()
    (root / "my_pkg/__init__.py").write_text("")
    (root / "my_pkg/transforms.py").write_text(TRANSFORMS)
    return root


@pytest.fixture(scope="module")
def records(project: Path) -> List[Dict[str, Any]]:
    return [
        json.loads(x) for p in sorted((project / "data").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]


def transform_args(out: str, j: str, *extra: str) -> List[str]:
    return [
        "run", "-s", "local_cwd", "torchx_datapipes.components:transform",
        "--fn", "my_transforms.py:clean", "--input", "data/*.jsonl", "--output", out, "-j", j,
        "--unit_mb", "0.02", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(project: Path) -> Dict[str, Path]:
    """One real launch at -j 2x2 (two nodes on one machine) with 2 workers per rank, by the short
    component name and a ``pkg.module:fn`` spec; the same job in this process with 1 and 2 workers."""
    args = [
        "run", "-s", "local_cwd", "datapipes.transform", "--fn", "my_pkg.transforms:clean",
        "--input", "data/*.jsonl", "--output", "out/2x2", "-j", "2x2", "--num_workers", "2",
        "--unit_mb", "0.02", "--rdzv_port", "29613",
    ]  # fmt: skip
    res = run_torchx(args, project)
    assert res.returncode == 0, res.stdout + res.stderr
    outs = {"2x2": project / "out/2x2"}
    for name, workers in (("1x1", 1), ("1x1w2", 2)):  # the same job in this process (one rank)
        run_component(
            project, "transform", fn="my_transforms.py:clean", input="data/*.jsonl", output=f"out/{name}",
            j="1x1", num_workers=workers, unit_mb=0.02,
        )  # fmt: skip
        outs[name] = project / "out" / name
    return outs


def test_output_is_exactly_the_input_for_every_world_size(runs: Dict[str, Path], records: List[Any]) -> None:
    want = canon(expected_clean(records))
    for j, out in runs.items():
        assert canon(read_output(out)) == want, j
        m = manifest(out)
        assert m["records_in"] == 1001 and m["records_out"] == 1001 and m["bad"] == 0
        assert m["world_size"] == {"1x1": 1, "1x1w2": 1, "2x2": 4}[j]
        assert len(m["units"]) > 4  # byte-range units of the larger files


def test_parts_are_byte_identical_across_world_sizes(runs: Dict[str, Path]) -> None:
    base = part_bytes(runs["1x1"])  # in-process, one worker
    assert base and part_bytes(runs["1x1w2"]) == base and part_bytes(runs["2x2"]) == base


def test_overwrite_refused_before_launch(project: Path, runs: Dict[str, Path]) -> None:
    res = run_torchx(transform_args("out/1x1", "1x1"), project)
    assert res.returncode != 0
    assert "--overwrite True" in res.stderr + res.stdout


def test_short_name_and_module_spec(project: Path, runs: Dict[str, Path], records: List[Any]) -> None:
    res = run_torchx(["builtins"], project)
    assert "datapipes.transform" in res.stdout and "dist.ddp" in res.stdout
    # the real launch of ``runs`` is ``datapipes.transform --fn my_pkg.transforms:clean ... --num_workers 2``
    assert canon(read_output(runs["2x2"])) == canon(expected_clean(records))
    assert manifest(runs["2x2"])["num_workers"] == 2


def test_component_recipe_in_workspace(project: Path) -> None:
    """The recipe file resolves and builds the transform job with its defaults baked in (a dry run: the
    job it builds is the transform component's, which ``runs`` launches for real)."""
    repo = Path(__file__).resolve().parents[1]
    args = [
        "run", "--dryrun", "-s", "local_cwd", f"{repo}/components/clean_text.py:clean_text",
        "--input", "data/*.jsonl", "--output", "out/recipe", "--fn", "my_transforms.py:clean", "-j", "1x1",
    ]  # fmt: skip
    res = run_torchx(args, project)
    assert res.returncode == 0, res.stdout + res.stderr
    text = re.sub(r"['\"] ['\"]", "", " ".join(res.stdout.split()))  # the spec's wrapped strings, joined
    text = " ".join(text.replace("'", "").replace('"', "").split())
    assert "-m torchx_datapipes.runner transform --input" in text, text
    assert f"--output {project / 'out/recipe'}" in text and "--nproc_per_node 1" in text
    assert "--on_error skip --max_error_rate 0.01" in text  # the recipe's defaults
    assert re.search(r"--artifact \S+/\.tdp/artifacts/([0-9a-f]{64})\.pkl --sha256 \1", text), text
    assert not (project / "out/recipe").exists()


def test_python_api_with_lambda_and_closure_in_main(project: Path, records: List[Any]) -> None:
    script = project / "api_main.py"
    script.write_text(
        textwrap.dedent(
            """
            from torchx_datapipes import api

            factor = 3

            def make(k):
                return lambda r: {**r, "n": len(r["text"].split()), "k": k * factor}

            if __name__ == "__main__":
                app = api.transform(make(2), input="data/*.jsonl", output="out/api_lambda", j="1x2")
                result = api.run(app)
                print("LAMBDA", result.state, result.manifest["records_out"])
                try:
                    bad = api.transform(lambda r: r["nope"], input="data/*.jsonl",
                                        output="out/api_bad", j="1x1")
                    api.run(bad)
                except api.JobFailedError as e:
                    print("FAILED", str(e).replace(chr(10), " | "))
            """
        )
    )
    res = subprocess.run(
        [sys.executable, str(script)], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "LAMBDA SUCCEEDED 1001" in res.stdout
    failed = next(line for line in res.stdout.splitlines() if line.startswith("FAILED"))
    assert "KeyError" in failed and "part-0.jsonl, line 1" in failed
    # a lambda made by a closure over a global of __main__: one launch for both
    lam = read_output(project / "out/api_lambda")
    assert canon(lam) == canon([{**r, "n": len(r["text"].split()), "k": 6} for r in records])
    assert not (project / "out/api_bad/_SUCCESS").exists()


def test_sigkill_of_a_worker_recovers_with_max_restarts(project: Path, records: List[Any]) -> None:
    pids, gate = project / "pids", project / "gate"
    pids.mkdir()
    args = [
        "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "my_transforms.py:slow",
        "--input", "data/*.jsonl", "--output", "out/killed", "-j", "1x2", "--unit_mb", "0.01",
        "--max_restarts", "1", "--env", f"TDP_TEST_PIDS={pids},TDP_TEST_GATE={gate}",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [TORCHX, *args], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    units = project / "out/killed/_units"
    deadline = time.monotonic() + 120
    victim = None
    while time.monotonic() < deadline and victim is None and proc.poll() is None:
        alive = [int(p.name) for p in sorted(pids.iterdir()) if Path(f"/proc/{p.name}").exists()]
        done = [u for u in units.glob("*.json") if not u.name.startswith(".")] if units.exists() else []
        if len(alive) >= 2 and len(done) >= 2:
            gate.touch()  # hold the job: the ranks wait at their next record, the victim stays alive
            victim = alive[0]  # a rank that is running now, not one that has already exited
        time.sleep(0.05)
    assert victim is not None, f"the job never got going (torchx exit {proc.poll()})"
    os.kill(victim, signal.SIGKILL)
    gate.unlink()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "SUCCEEDED" in out
    assert len(list(pids.iterdir())) >= 3, "no rank was restarted"
    got = read_output(project / "out/killed")
    assert len(got) == len(records) and canon(got) == canon(records)


@pytest.mark.parametrize(
    "scheduler,extra", [("kubernetes", ["--workspace", "", "-cfg", "queue=default"]), ("slurm", [])]
)
def test_dryrun_other_schedulers(project: Path, scheduler: str, extra: List[str]) -> None:
    args = [
        "run", "--dryrun", "-s", scheduler, *extra, "torchx_datapipes.components:transform",
        "--fn", "my_transforms.py:clean", "--input", "s3://bucket/data/*.jsonl", "--output", "s3://bucket/out",
        "--artifact_store", str(project / "store"), "-j", "2x2",
    ]  # fmt: skip
    res = run_torchx(args, project)
    assert res.returncode == 0, res.stdout + res.stderr
    text = res.stdout + res.stderr
    assert "torchx_datapipes.runner" in text and "torchrun" in text
    url = re.search(rf"{re.escape(str(project / 'store'))}/([0-9a-f]{{64}})\.pkl", res.stdout)
    assert url and f"--sha256 {url.group(1)}" in text  # artifact URL and its pinned sha256
    assert not (project / "store").exists()  # a dry run packages the function but uploads nothing

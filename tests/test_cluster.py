"""Issue 13 section 4: a job spec for a cluster means something on the cluster.

The client's venv is on ``PATH`` for local_cwd only; local relative paths are made absolute where
the job shares the client's filesystem and refused where it does not; ``--dryrun`` uploads
nothing; an upload that fails says which store and how to fix it; examples/Dockerfile installs
the pinned torch then the package.
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import yaml
from tdp_testutil import VENV_BIN, make_dataset, run_torchx
from torchx.runner import Runner, get_runner
from torchx.specs.finder import ComponentValidationException

from torchx_datapipes import components
from torchx_datapipes.appdef import META_CLIENT_BIN, for_scheduler
from torchx_datapipes.target import Target, current, targeting

REPO = Path(__file__).resolve().parents[1]
COMPONENT = "torchx_datapipes.components:transform"
FN = "def clean(rec):\n    rec['n'] = len(rec['text'])\n    return rec\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project as the cwd: data/*.jsonl and my_transforms.py:clean."""
    make_dataset(tmp_path / "data", [20, 10])
    (tmp_path / "my_transforms.py").write_text(FN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def runner() -> Iterator[Runner]:
    with get_runner() as r:
        yield r


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No AWS credentials anywhere (and no metadata-server lookups), as on a fresh laptop."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import s3fs

    # fsspec caches filesystem instances by their options, not the environment: an S3FileSystem made
    # by an earlier test (credentials and endpoint of the moto server) would otherwise be reused here,
    # and ours, without credentials, by the next test.
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def _cmd(app: Any) -> str:
    return str(app.roles[0].args[-1])


def _arg(cmd: str, name: str) -> str:
    match = re.search(rf"--{name} ('[^']*'|\S+)", cmd)
    assert match, f"--{name} not in {cmd}"
    return match.group(1).strip("'")


def test_kubernetes_dryrun_spec_is_a_cluster_spec(tmp_path: Path) -> None:
    """`torchx run -s kubernetes --dryrun`: image, s3 artifact, resources, rendezvous; nothing local."""
    (tmp_path / "my_transforms.py").write_text(FN)
    args = [
        "run", "--dryrun", "-s", "kubernetes", "--workspace", "", "-cfg", "queue=default", COMPONENT,
        "--fn", "my_transforms.py:clean", "--input", "s3://tdp-bucket/data/*.jsonl",
        "--output", "s3://tdp-bucket/out", "--artifact_store", "s3://tdp-bucket/artifacts",
        "--image", "registry.example.com/team/tdp:0.1", "-j", "2x2", "--cpu", "4", "--memMB", "8192",
        "--rdzv_port", "29611",
    ]  # fmt: skip
    no_creds = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_EC2_METADATA_DISABLED": "true"}
    res = run_torchx(args, tmp_path, env={**no_creds, "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")})
    text = res.stdout + res.stderr
    assert res.returncode == 0, text
    art = re.search(r"s3://tdp-bucket/artifacts/([0-9a-f]{64})\.pkl", res.stdout)
    assert art, res.stdout  # the artifact URL is in the spec ...
    assert f"--sha256 {art.group(1)}" in res.stdout  # ... pinned by its sha256
    assert "dry run: packaged fn my_transforms.py:clean -> s3://tdp-bucket/artifacts/" in res.stderr
    assert "not uploaded" in res.stderr and "NoCredentialsError" not in text
    request = yaml.safe_load(res.stdout.split("=== SCHEDULER REQUEST ===", 1)[1])
    tasks = request["spec"]["tasks"]
    assert len(tasks) == 2 and request["spec"]["queue"] == "default"  # one task per node (-j 2x2)
    for i, task in enumerate(tasks):
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/team/tdp:0.1"
        assert container["resources"]["limits"] == {"cpu": "4000m", "memory": "8192M"}  # per node (2 ranks)
        assert container["ports"] == [{"containerPort": 29611, "name": "c10d"}]
        cmd = container["command"][-1]
        assert cmd.startswith("torchrun --rdzv_backend c10d --rdzv_endpoint "), cmd  # no PATH= prefix
        host = "TORCHX_RANK0_HOST" if i == 0 else "VC_TRANSFORM_0_HOSTS"  # rank 0's pod, by DNS
        assert f"--rdzv_endpoint ${{{host}:=localhost}}:29611 " in cmd, cmd
        assert "--nnodes 2 --nproc_per_node 2 " in cmd and "-m torchx_datapipes.runner transform " in cmd
        assert "--input 's3://tdp-bucket/data/*.jsonl' --output s3://tdp-bucket/out " in cmd
        assert f"--artifact {art.group(0)} --sha256 {art.group(1)}" in cmd
        assert not any(e["name"] == "PATH" for e in container["env"])
    assert str(VENV_BIN) not in text and str(tmp_path) not in res.stdout  # nothing of the client's machine


def test_local_cwd_keeps_the_client_venv_and_makes_paths_absolute(project: Path, runner: Runner) -> None:
    info = runner.dryrun_component(
        COMPONENT,
        ["--fn", "my_transforms.py:clean", "--input", "data/*.jsonl", "--output", "out/x"],
        "local_cwd",
    )
    cmd = _cmd(info._app)
    assert cmd.startswith(f'PATH={VENV_BIN}:"$PATH" torchrun '), cmd
    assert _arg(cmd, "input") == f"{project}/data/*.jsonl" and _arg(cmd, "output") == f"{project}/out/x"
    assert _arg(cmd, "artifact").startswith(f"{project}/.tdp/artifacts/")
    assert not (project / ".tdp").exists(), "a dry run wrote the artifact"


def test_slurm_resolves_relative_paths_on_the_shared_filesystem(project: Path, runner: Runner) -> None:
    info = runner.dryrun_component(
        COMPONENT, ["--fn", "my_transforms.py:clean", "--input", "data/part-0.jsonl,data/part-1.jsonl",
                    "--output", "out/s"], "slurm",
    )  # fmt: skip
    cmd = _cmd(info._app)
    # the client's torchrun (the nodes share this filesystem), even when the venv is not on PATH
    assert cmd.startswith(f'PATH={VENV_BIN}:"$PATH" torchrun '), cmd
    assert _arg(cmd, "input") == f"{project}/data/part-0.jsonl,{project}/data/part-1.jsonl"
    assert _arg(cmd, "output") == f"{project}/out/s"


ARGS = ["--fn", "my_transforms.py:clean", "--input", "data/*.jsonl", "--output", "out/s"]


@pytest.mark.parametrize("scheduler", ["slurm", "lsf"])
def test_shared_fs_torchrun_choice(
    project: Path, runner: Runner, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> None:
    """``TORCHX_DATAPIPES_TORCHRUN``: ``node`` leaves the nodes' own torchrun, a path names one."""
    monkeypatch.setenv("TORCHX_DATAPIPES_TORCHRUN", "node")
    assert _cmd(runner.dryrun_component(COMPONENT, ARGS, scheduler)._app).startswith("torchrun ")
    monkeypatch.setenv("TORCHX_DATAPIPES_TORCHRUN", f"{VENV_BIN}/torchrun")
    assert _cmd(runner.dryrun_component(COMPONENT, ARGS, scheduler)._app).startswith(
        f'PATH={VENV_BIN}:"$PATH" '
    )
    monkeypatch.setenv("TORCHX_DATAPIPES_TORCHRUN", "/nowhere/bin/torchrun")
    with pytest.raises(ComponentValidationException, match="not an executable file on this machine"):
        runner.dryrun_component(COMPONENT, ARGS, scheduler)


def test_shared_fs_refuses_a_job_without_torchrun(
    project: Path, runner: Runner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A python with no torchrun next to it and none on PATH: refused before submitting, with the fix."""
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    monkeypatch.setattr(sys, "executable", str(bare / "python3"))
    monkeypatch.setenv("PATH", str(bare))
    with pytest.raises(ComponentValidationException) as err:
        runner.dryrun_component(COMPONENT, ARGS, "slurm")
    msg = str(err.value)
    assert "torchrun: command not found" in msg and "TORCHX_DATAPIPES_TORCHRUN=" in msg and str(bare) in msg
    app = components.transform(fn="my_transforms.py:clean", input="data/*.jsonl", output="out/a")
    with pytest.raises(ValueError, match="no torchrun next to it"):
        for_scheduler(app, "slurm")  # what api.run(app, "slurm") calls before submitting


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--input", "data/*.jsonl", "--output", "s3://b/out", "--artifact_store", "s3://b/a"],
         "--input 'data/*.jsonl' is a path relative to this machine's working directory"),
        (["--input", "s3://b/d/*.jsonl", "--output", "out", "--artifact_store", "s3://b/a"],
         "--output 'out' is a path relative"),
        (["--input", "s3://b/d/*.jsonl", "--output", "s3://b/out"],
         "would be packaged into the default store ./.tdp/artifacts on this machine"),
        (["--input", "s3://b/d/*.jsonl", "--output", "s3://b/out", "--artifact_store", "store"],
         "--artifact_store 'store' is a path relative"),
    ],
    ids=["input", "output", "default-store", "relative-store"],
)  # fmt: skip
def test_kubernetes_refuses_paths_its_pods_cannot_see(
    project: Path, runner: Runner, args: List[str], needle: str
) -> None:
    with pytest.raises(ComponentValidationException) as err:
        runner.dryrun_component(
            COMPONENT, ["--fn", "my_transforms.py:clean", *args], "kubernetes", cfg={"queue": "default"}
        )
    msg = str(err.value)
    assert needle in msg and "kubernetes job" in msg
    assert "Cluster jobs need URLs every node can reach" in msg and "s3://bucket/" in msg
    assert "\n" not in msg


def test_kubernetes_accepts_absolute_paths_for_mounts(project: Path, runner: Runner) -> None:
    info = runner.dryrun_component(
        COMPONENT, ["--input", "/data/in/*.jsonl", "--output", "/data/out", "--fn", "my_transforms.py:clean",
                    "--artifact_store", "/data/artifacts", "--mounts", "type=bind,src=/mnt/d,dst=/data"],
        "kubernetes", cfg={"queue": "default"},
    )  # fmt: skip
    cmd = _cmd(info._app)
    assert _arg(cmd, "input") == "/data/in/*.jsonl" and _arg(cmd, "artifact").startswith("/data/artifacts/")


def test_a_real_run_uploads_and_a_dry_run_does_not(
    project: Path, runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How torchx calls the component tells a dry run from a run (run_component -> dryrun_component)."""
    scheduled: List[Any] = []
    monkeypatch.setattr(Runner, "schedule", lambda self, info: scheduled.append(info) or "local_cwd://x/y")
    args = ["--fn", "my_transforms.py:clean", "--input", "data/*.jsonl", "--output", "out/r"]
    runner.dryrun_component(COMPONENT, args, "local_cwd")
    assert not (project / ".tdp").exists()
    runner.run_component(COMPONENT, args, "local_cwd")
    assert len(scheduled) == 1
    sha = _arg(_cmd(scheduled[0]._app), "sha256")
    assert (project / f".tdp/artifacts/{sha}.pkl").is_file()


def test_target_detection() -> None:
    assert current() == Target() and Target().uses_client_python and Target().shares_client_fs
    with targeting("kubernetes", dryrun=True) as t:
        assert current() == t and not t.uses_client_python and not t.shares_client_fs
    assert Target("slurm").shares_client_fs and not Target("slurm").uses_client_python
    assert not Target("local_docker").shares_client_fs


def test_api_run_sets_the_path_prefix_for_its_scheduler(project: Path) -> None:
    """An AppDef built outside torchx (target unknown) is fixed for the scheduler ``api.run`` submits to."""
    app = components.transform(fn="my_transforms.py:clean", input="data/*.jsonl", output="out/a")
    local = _cmd(app)
    assert local.startswith(f'PATH={VENV_BIN}:"$PATH" torchrun ')
    assert app.metadata[META_CLIENT_BIN] == VENV_BIN
    for_scheduler(app, "kubernetes")
    assert _cmd(app) == local.split(" ", 1)[1] and META_CLIENT_BIN not in app.metadata
    for_scheduler(app, "local_cwd")
    for_scheduler(app, "local_cwd")
    assert _cmd(app) == local


def test_upload_without_credentials_is_one_clear_line(project: Path, no_aws: None) -> None:
    with pytest.raises(ComponentValidationException) as err:
        components.transform(
            fn="my_transforms.py:clean", input="s3://tdp-nocreds/d/*.jsonl", output="s3://tdp-nocreds/out",
            artifact_store="s3://tdp-nocreds/artifacts",
        )  # fmt: skip
    msg = str(err.value)
    assert msg.startswith("could not upload the fn artifact to s3://tdp-nocreds/artifacts/"), msg
    assert "NoCredentialsError" in msg and "AWS_ACCESS_KEY_ID" in msg and "--dryrun uploads nothing" in msg
    assert "\n" not in msg


def test_upload_to_s3_is_announced(project: Path, s3_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import fsspec

    store = f"s3://{s3_server.bucket}/announced"
    app = components.transform(
        fn="my_transforms.py:clean", input=f"s3://{s3_server.bucket}/d/*.jsonl",
        output=f"s3://{s3_server.bucket}/out-announced", artifact_store=store,
    )  # fmt: skip
    url = _arg(_cmd(app), "artifact")
    err = capsys.readouterr().err
    assert f"torchx_datapipes: uploading fn my_transforms.py:clean -> {url} (sha256 " in err
    assert fsspec.filesystem("s3").exists(url)


def test_example_dockerfile_pins_torch_then_installs_the_package() -> None:
    import torch

    text = (REPO / "examples/Dockerfile").read_text()
    steps = [line for line in text.splitlines() if line.startswith(("FROM", "RUN", "COPY"))]
    major, minor = sys.version_info[:2]
    assert steps[0].startswith(f"FROM python:{major}.{minor}")  # the client's Python: cloudpickle bytecode
    pins = [i for i, s in enumerate(steps) if f"torch=={torch.__version__.split('+')[0]}" in s]
    pkg = [i for i, s in enumerate(steps) if re.search(r"pip install \"\.\[[a-z0-9,]*s3", s)]
    assert pins and pkg and pins[0] < pkg[0], steps
    assert any(s.startswith("COPY torchx_datapipes") for s in steps)


@pytest.mark.parametrize("op", ["split", "stats"])
def test_split_and_stats_refuse_relative_paths_on_kubernetes(project: Path, runner: Runner, op: str) -> None:
    with pytest.raises(ComponentValidationException, match=r"--input 'data/\*\.jsonl' is a path relative"):
        runner.dryrun_component(
            f"torchx_datapipes.components:{op}", ["--input", "data/*.jsonl", "--output", "s3://b/o"],
            "kubernetes", cfg={"queue": "default"},
        )  # fmt: skip


def test_api_run_refuses_client_paths_for_a_remote_scheduler(project: Path) -> None:
    """Built in Python (target unknown), then submitted to kubernetes: refused before anything runs."""
    from torchx_datapipes import api
    from torchx_datapipes.options import OptionError

    app = api.transform(lambda r: r, input="s3://b/d/*.jsonl", output="s3://b/out")
    with pytest.raises(OptionError, match="default store ./.tdp/artifacts on this machine, which a kube"):
        api.run(app, "kubernetes", cfg={"queue": "default"})
    app = components.transform(fn="s3://b/a/" + "0" * 64 + ".pkl", input="data/*.jsonl", output="s3://b/out")
    with pytest.raises(OptionError, match=r"--input 'data/\*\.jsonl' is a path relative .* kubernetes job"):
        api.run(app, "kubernetes", cfg={"queue": "default"})


@pytest.mark.e2e
def test_local_cwd_runs_without_the_venv_on_path(project: Path) -> None:
    """`.venv/bin/torchx run -s local_cwd` with a PATH that has no venv: the spec's prefix finds torchrun."""
    from tdp_testutil import TORCHX, read_output

    args = [TORCHX, "run", "-s", "local_cwd", COMPONENT, "--fn", "my_transforms.py:clean"]
    args += ["--input", "data/*.jsonl", "--output", "out/novenv", "-j", "1x1"]
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    res = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "SUCCEEDED" in res.stdout + res.stderr, res.stdout + res.stderr
    assert len(read_output(project / "out/novenv")) == 30

"""Issue 20: the components on a real local Ray head, through ``torchx run -s ray`` and
``api.run(app, "ray")``.

The head is started for the module with ``ray start --head --block`` in its own session (private
ports and temp dir; 6379 is Redis) and stopped by killing that session, never with ``ray stop``
(which would stop every Ray on the machine). Ray is not a shared-filesystem scheduler: paths are
absolute and the function goes to an explicit ``--artifact_store``. TorchX's Ray scheduler ships
``role.image`` (a directory) as the job's working_dir and deletes it after submitting when it
is under the temp dir: ``api.run`` hands it a private copy, so the user's directory survives.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

import pytest
from netns import descendants, wait_for
from tdp_testutil import TORCHX, VENV_BIN, canon, make_dataset, read_output

from torchx_datapipes import api

pytestmark = [pytest.mark.ray, pytest.mark.e2e]

FN = "def clean(rec):\n    return {**rec, 'n': len(rec['text'])}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(sid: int) -> List[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d))
    return pids


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ray = os.path.join(VENV_BIN, "ray")
    if not os.path.exists(ray):
        pytest.fail(f"{ray} is missing: `make install-dev` installs ray[default]")
    tmp = tmp_path_factory.mktemp("ray")
    # Ray's own temp dir holds AF_UNIX sockets (at most 107 bytes of path, checked by Ray): a short
    # private dir, not one under pytest's basetemp, whose depth varies (pytest-xdist adds a level)
    short = Path(tempfile.mkdtemp(prefix="tdp-ray-", dir="/tmp"))
    port = _free_port()
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    argv = [
        ray, "start", "--head", "--block", f"--port={_free_port()}", "--num-cpus=2",
        f"--dashboard-port={port}", "--include-dashboard=true", f"--temp-dir={short}",
        "--disable-usage-stats",
    ]  # fmt: skip
    with open(tmp / "ray.log", "wb") as log:
        head = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = f"127.0.0.1:{port}"

    def up() -> bool:
        assert head.poll() is None, (tmp / "ray.log").read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for("the Ray dashboard", up, 90, 0.2)
        yield address
    finally:
        # every process the head started: its session and its descendants (some leave the session)
        ours = set(_session(head.pid)) | set(descendants(head.pid)) | {head.pid}
        for sig, grace_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
            for pid in _alive(ours):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            while _alive(ours) and time.monotonic() < deadline:
                head.poll()
                time.sleep(0.2)
            if not _alive(ours):
                break
        head.wait(timeout=30)
        assert not _alive(ours), f"Ray processes left behind: {_alive(ours)}"
        shutil.rmtree(short, ignore_errors=True)


def _alive(pids: "set[int]") -> List[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
        except OSError:
            pass
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_dataset(tmp_path / "data", [30, 20, 10])
    (tmp_path / "fn.py").write_text(FN)
    return tmp_path


def _expected(project: Path) -> List[str]:
    import orjson

    recs = [
        orjson.loads(x)
        for p in sorted((project / "data").glob("*.jsonl"))
        for x in p.read_bytes().splitlines()
    ]
    return canon([{**r, "n": len(r["text"])} for r in recs])


def test_torchx_run_ray_2x1(dashboard: str, project: Path) -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    args = [
        TORCHX, "run", "-s", "ray", "-cfg", f"dashboard_address={dashboard}", "datapipes.transform",
        "--fn", "fn.py:clean", "--input", f"{project}/data/*.jsonl", "--output", f"{project}/out/cli",
        "--artifact_store", f"{project}/store", "-j", "2x1", "--cpu", "1", "--rdzv_port", str(_free_port()),
    ]  # fmt: skip
    res = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    handle = next((ln for ln in res.stdout.splitlines() if ln.startswith("ray://")), None)
    assert res.returncode == 0 and handle, res.stdout + res.stderr
    from torchx.runner import get_runner

    state = ""

    def done() -> bool:  # polled in this process: a `torchx status` per poll costs seconds here
        nonlocal state
        status = runner.status(handle)
        state = status.state.name if status is not None else ""
        return state in ("SUCCEEDED", "FAILED", "CANCELLED")

    with get_runner() as runner:
        wait_for(f"{handle} to finish", done, 180, 0.5)
    log = subprocess.run([TORCHX, "log", handle], env=env, capture_output=True, text=True).stdout
    assert state == "SUCCEEDED", log
    assert canon(read_output(project / "out/cli")) == _expected(project)
    assert f"output: {project}/out/cli" in log, log


def test_api_run_ray_keeps_the_users_directory(
    dashboard: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``image=`` a user's directory under /tmp: it is shipped (a private copy) and survives."""
    assert str(project).startswith("/tmp/")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    before = sorted(p.name for p in project.iterdir())
    app = api.transform(
        "fn.py:clean", input=f"{project}/data/*.jsonl", output=f"{project}/out/api", j="1x2",
        artifact_store=f"{project}/store", cpu=1, image=str(project),
    )  # fmt: skip
    result = api.run(app, "ray", cfg={"dashboard_address": dashboard})
    assert result.state == "SUCCEEDED" and result.manifest and result.manifest["records_out"] == 60
    assert canon(read_output(project / "out/api")) == _expected(project)
    after = sorted(p.name for p in project.iterdir())
    assert after == sorted({*before, "out", "store"}), after  # nothing deleted, no driver files written
    assert app.roles[0].image == str(project)  # the caller's AppDef is not changed

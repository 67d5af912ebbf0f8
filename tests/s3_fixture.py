"""pytest plugin: a real S3 API (moto server on 127.0.0.1) for the whole session.

Use the ``s3_server`` fixture. It starts ``python -m moto.server`` on a free port, waits
until it answers, creates a bucket, and points *plain* ``fsspec.open("s3://...")`` at it,
in this process and in every child process, through environment variables:

* ``AWS_ENDPOINT_URL_S3`` -- botocore's per-service endpoint override (botocore >= 1.31.68;
  verified with botocore 1.43 / aiobotocore 3.10 / s3fs 2026.9). It is read whenever an
  S3 client is created, so it works even after ``fsspec`` was imported. (``AWS_ENDPOINT_URL``
  also works but redirects every AWS service; ``FSSPEC_S3_ENDPOINT_URL`` works only if set
  before ``fsspec`` is imported, because fsspec reads its config at import.)
* ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (dummies) and ``AWS_DEFAULT_REGION``.

fsspec caches filesystem instances; the fixture clears the s3fs instance cache on start
and at the end, and ``storage_options`` can be passed explicitly instead of the env.

If the server cannot start, the fixture FAILS (it never skips): a missing S3 test is a bug.
"""

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    bucket: str
    key: str = "testing"
    secret: str = "testing"
    region: str = "us-east-1"
    env: dict[str, str] = field(default_factory=dict)

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options that reach the server without relying on the env."""
        return {"client_kwargs": {"endpoint_url": self.endpoint_url}, "key": self.key, "secret": self.secret}

    def url(self, *parts: str) -> str:
        """``s3://{bucket}/part/part``."""
        return "/".join([f"s3://{self.bucket}", *(p.strip("/") for p in parts)])


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_until_up(proc: "subprocess.Popen[bytes]", endpoint: str, log: Any) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            out = log.read().decode(errors="replace")
            pytest.fail(f"moto server exited with {proc.returncode} before answering:\n{out}", pytrace=False)
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail(f"moto server did not answer on {endpoint} within {_START_TIMEOUT_S}s", pytrace=False)


def _clear_s3_instances() -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@contextlib.contextmanager
def serve_s3(host: str = "127.0.0.1", bucket: str = "txdp-test") -> Iterator[S3Server]:
    """A moto S3 server bound to ``host`` with an empty bucket; env set so plain ``s3://`` URLs reach it.

    ``host`` is the bind address: 127.0.0.1 for the session fixture, a bridge address for test hosts
    in network namespaces (tests/netns.py). The env is restored on exit.
    """
    port = _free_port(host)
    endpoint = f"http://{host}:{port}"
    cmd = [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)]
    # A file, not a pipe: moto logs every request, and a full pipe would block the server.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    mp = pytest.MonkeyPatch()
    try:
        _wait_until_up(proc, endpoint, log)
        server = S3Server(endpoint_url=endpoint, bucket=bucket)
        env = {
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_ACCESS_KEY_ID": server.key,
            "AWS_SECRET_ACCESS_KEY": server.secret,
            "AWS_DEFAULT_REGION": server.region,
        }
        for name, value in env.items():
            mp.setenv(name, value)
        server.env.update(env)
        _clear_s3_instances()
        import fsspec

        fsspec.filesystem("s3", skip_instance_cache=True).mkdir(server.bucket)
        yield server
    finally:
        mp.undo()
        _clear_s3_instances()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 with an empty bucket; env set so plain ``s3://`` URLs reach it."""
    with serve_s3() as server:
        yield server

"""Fixtures for the scale-out tests: a real redis-server on a free loopback port and a local Ray cluster.

Both are real components. Without the redis-server binary or the ray/redis packages the tests skip with
the reason, except where `DSP_REQUIRE_SCALE=1` (or `CI`) says they were installed: there a skip would
hide a failure, so the test fails instead.

>>> redis_server_binary() is None or redis_server_binary().endswith("redis-server")
True
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

__all__ = ["redis_server", "redis_url", "ray_cluster", "required", "need", "redis_server_binary", "TESTS_DIR", "ROOT"]

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent


def required() -> bool:
    """True where the scale components must be present (CI installs them)."""
    return os.environ.get("DSP_REQUIRE_SCALE") == "1" or bool(os.environ.get("CI"))


def need(condition: bool, reason: str) -> None:
    """Skip with `reason` unless the components are required, in which case fail with it."""
    if not condition:
        (pytest.fail if required() else pytest.skip)(reason)


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """A redis-server of our own on 127.0.0.1 (no persistence), for the session: yields (host, port)."""
    binary = redis_server_binary()
    need(binary is not None, "redis-server is not installed (apt-get install -y redis-server; .ci/run installs it)")
    need(_importable("redis"), 'the redis package is not installed (pip install -e ".[scale]")')
    import redis

    workdir = tmp_path_factory.mktemp("redis")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server did not start: {proc.stderr.read().decode()[-500:]}") from None
            time.sleep(0.05)
    client.close()
    try:
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def redis_url(redis_server) -> str:
    """The URL of database 0 of the session's server, emptied (all databases) for this test."""
    import redis

    host, port = redis_server
    with redis.Redis(host=host, port=port) as client:
        client.flushall()
    return f"redis://{host}:{port}/0"


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster of 2 CPUs for the session (started once: Ray takes ~5-10 s to start).

    Workers find the test programs (tests/ray_programs.py) through PYTHONPATH; everything else they
    import is the installed project.
    """
    need(_importable("ray"), 'ray is not installed (pip install -e ".[scale]")')
    import ray

    if ray.is_initialized():
        yield
        return
    path = os.pathsep.join([str(TESTS_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield
    finally:
        ray.shutdown()

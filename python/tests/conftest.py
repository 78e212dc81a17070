"""Fixtures: clusters of real lock nodes (tests/nodes.py), stopped by PID
in finalizers whatever the test's outcome; a resource name per test."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from nodes import Cluster, RedisCluster, server_name  # noqa: E402

from redlock_client import AsyncRedlock, Redlock  # noqa: E402


def pytest_report_header(config: pytest.Config) -> str:
    return f"server under test: {server_name()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("server under test", server_name()))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """5 masters shared by the tests that kill, pause or reconfigure none."""
    nodes = Cluster(5)
    request.addfinalizer(nodes.close)
    return nodes


@pytest.fixture
def own_cluster(request: pytest.FixtureRequest) -> Cluster:
    """5 masters of this test's own (it may kill or pause them)."""
    nodes = Cluster(5)
    request.addfinalizer(nodes.close)
    return nodes


@pytest.fixture(scope="session")
def redis_cluster(request: pytest.FixtureRequest) -> RedisCluster:
    """A Redis Cluster of 3 shards (a master and a replica each), shared by
    the tests that disturb nothing."""
    nodes = RedisCluster(3, 1)
    request.addfinalizer(nodes.close)
    return nodes


@pytest.fixture(scope="session")
def locks(cluster: Cluster) -> Redlock:
    """One client over the shared cluster, shared by the tests."""
    return Redlock(cluster.urls)


@pytest.fixture
def async_locks(cluster: Cluster) -> AsyncRedlock:
    return AsyncRedlock(cluster.urls)


@pytest.fixture
def resource(request: pytest.FixtureRequest) -> str:
    return f"py:{request.node.name}:{uuid.uuid4().hex[:8]}"

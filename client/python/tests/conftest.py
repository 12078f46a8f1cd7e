"""Fixtures that start real kvtd processes: temp sockets under a short /tmp dir, port 0, one codec thread.

kvtd comes from --kvtd (or $KVT_KVTD, or kvtd on PATH); kvtctl, the codec reference the transfer tests compare
against, from --kvtctl (or $KVT_KVTCTL, or beside kvtd, or on PATH). Without kvtd every daemon test errors
rather than skips, so a missing binary can never pass as green.

kvtd takes about two seconds to shut down, so the daemons most tests talk to live for a whole test module
(`daemon`, `pair`); tests therefore use fresh ids (`ids`) and compare counters as differences. Tests that stop,
kill or configure a daemon start their own (`start_daemon`).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import pytest

import kvt

# Loopback only, one codec thread: many daemons share a 2-core CI machine.
BASE_FLAGS = ["--ucx_net_devices=lo", "--codec_threads=1", "--log_level=warn"]
_SOCKETS = itertools.count()
_IDS = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kvtd", default=os.environ.get("KVT_KVTD"), help="the kvtd binary (default: $KVT_KVTD, PATH)")
    parser.addoption("--kvtctl", default=os.environ.get("KVT_KVTCTL"),
                     help="the kvtctl binary, the codec reference (default: $KVT_KVTCTL, beside kvtd, PATH)")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keeps each phase's report on the item, so fixtures can tell whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


@pytest.fixture(scope="session")
def kvtd_path(pytestconfig: pytest.Config) -> str:
    try:
        return kvt.find_kvtd(pytestconfig.getoption("kvtd"))
    except kvt.NotFound as e:
        pytest.fail(f"{e.message} (pass --kvtd or set KVT_KVTD)", pytrace=False)


@pytest.fixture(scope="session")
def kvtctl_path(pytestconfig: pytest.Config, kvtd_path: str) -> str:
    given = pytestconfig.getoption("kvtctl")
    candidates = [given] if given else [str(Path(kvtd_path).parent / "kvtctl"),
                                        str(Path(kvtd_path).parent.parent / "tools/kvtctl/kvtctl"),
                                        shutil.which("kvtctl") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"kvtctl not found (tried {candidates}); pass --kvtctl or set KVT_KVTCTL", pytrace=False)


@pytest.fixture(scope="session")
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets: pytest's and Bazel's temp paths can exceed the 108 bytes allowed."""
    path = Path(tempfile.mkdtemp(prefix="kvtpy-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class DaemonSet:
    """Daemons started for one scope; stop_all() stops them together (their shutdowns overlap)."""

    def __init__(self, kvtd: str, sock_dir: Path, work_dir: Path) -> None:
        self._kvtd, self._sock_dir, self._work_dir = kvtd, sock_dir, work_dir
        self.daemons: List[kvt.Daemon] = []

    def start(self, role: str, name: Optional[str] = None, extra: Optional[List[str]] = None) -> kvt.Daemon:
        name = name or role
        daemon = kvt.Daemon.start(self._kvtd, role=role, name=name, work_dir=str(self._work_dir),
                                  socket=str(self._sock_dir / f"{next(_SOCKETS)}-{name}.sock"),
                                  extra_flags=BASE_FLAGS + list(extra or []))
        self.daemons.append(daemon)
        return daemon

    def print_logs(self) -> None:
        for daemon in self.daemons:
            print(f"---- kvtd {daemon.daemon_id} log (end) ----\n{daemon.log_tail()}")

    def stop_all(self) -> None:
        for daemon in self.daemons:
            daemon.terminate()
        for daemon in self.daemons:
            daemon.stop()


@pytest.fixture
def start_daemon(kvtd_path: str, sock_dir: Path, tmp_path: Path,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., kvt.Daemon]]:
    """start_daemon(role, name=role, extra=[flags]) -> a running kvt.Daemon of this test, stopped after it. A
    failed test shows the end of each one's log."""
    daemons = DaemonSet(kvtd_path, sock_dir, tmp_path)
    yield daemons.start
    if _failed(request):
        daemons.print_logs()
    daemons.stop_all()


@pytest.fixture(scope="module")
def module_daemons(kvtd_path: str, sock_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonSet]:
    daemons = DaemonSet(kvtd_path, sock_dir, tmp_path_factory.mktemp("kvtd"))
    yield daemons
    daemons.stop_all()


@pytest.fixture(scope="module")
def daemon(module_daemons: DaemonSet) -> kvt.Daemon:
    """One daemon running both roles, shared by the module's tests."""
    return module_daemons.start("both")


@pytest.fixture(scope="module")
def daemon_pair(module_daemons: DaemonSet) -> Tuple[kvt.Daemon, kvt.Daemon]:
    return module_daemons.start("prefill"), module_daemons.start("decode")


@pytest.fixture
def client(daemon: kvt.Daemon, module_daemons: DaemonSet, request: pytest.FixtureRequest) -> Iterator[kvt.Client]:
    """A client of `daemon`. Afterwards every request still in flight there is cancelled."""
    with kvt.Client(daemon.socket) as c:
        yield c
        if _failed(request):
            module_daemons.print_logs()
        cancel_in_flight(c)


@dataclass
class Pair:
    """A prefill and a decode daemon with a client each."""

    prefill: kvt.Daemon
    decode: kvt.Daemon
    prefill_client: kvt.Client
    decode_client: kvt.Client


@pytest.fixture
def pair(daemon_pair: Tuple[kvt.Daemon, kvt.Daemon], module_daemons: DaemonSet,
         request: pytest.FixtureRequest) -> Iterator[Pair]:
    """Clients of the module's prefill and decode daemons. Afterwards every request in flight is cancelled."""
    prefill, decode = daemon_pair
    with kvt.Client(prefill.socket) as pc, kvt.Client(decode.socket) as dc:
        yield Pair(prefill, decode, pc, dc)
        if _failed(request):
            module_daemons.print_logs()
        cancel_in_flight(dc)
        cancel_in_flight(pc)


def cancel_in_flight(client: kvt.Client) -> None:
    for state in client.stats(include_requests=True).requests:
        try:
            client.cancel(state.request_id)
        except kvt.NotFound:
            pass  # finished meanwhile


@pytest.fixture
def ids(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """ids(name) -> a request or region id no other test uses."""
    test = next(_IDS)
    return lambda name: f"t{test}-{name}"

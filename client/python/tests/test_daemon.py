"""kvt.Daemon: kvtd as a child process, like tools/kvtctl/daemon_process."""
from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

import kvt
from conftest import BASE_FLAGS


def test_a_started_daemon_reports_where_it_listens(daemon: kvt.Daemon) -> None:
    assert daemon.running and os.path.exists(daemon.socket)
    host, port = daemon.peer_address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0  # port 0 became a real one
    assert daemon.daemon_id == "both"
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=5) as response:
        assert b"kvt" in response.read()
    with kvt.Client(daemon.socket) as client:
        assert client.stats().daemon_id == daemon.daemon_id


def test_stop_ends_the_process_cleanly(start_daemon: Callable[..., kvt.Daemon]) -> None:
    daemon = start_daemon("decode", name="short-lived")
    assert daemon.stop() == 0
    assert not daemon.running and not os.path.exists(daemon.socket)
    assert daemon.stop() == 0  # idempotent


def test_kill_ends_it_as_a_crash_would(start_daemon: Callable[..., kvt.Daemon]) -> None:
    daemon = start_daemon("prefill")
    daemon.kill()
    assert not daemon.running
    with pytest.raises(kvt.Unavailable):
        kvt.Client(daemon.socket, connect_timeout=0.3)


def test_a_daemon_is_a_context_manager_with_its_own_temp_dir(kvtd_path: str, sock_dir: Path) -> None:
    with kvt.Daemon.start(kvtd_path, role="decode", socket=str(sock_dir / "cm.sock"), extra_flags=BASE_FLAGS) as d:
        log = d.log_path
        assert d.running and log.exists()
    assert not d.running and not log.parent.exists()  # the temp dir it made is gone


def test_a_missing_binary_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(kvt.NotFound, match="not an executable"):
        kvt.Daemon.start(str(tmp_path / "kvtd"), work_dir=str(tmp_path))


def test_a_daemon_that_exits_at_start_up_is_unavailable_with_its_log(kvtd_path: str, sock_dir: Path,
                                                                     tmp_path: Path) -> None:
    with pytest.raises(kvt.Unavailable, match="exited .* during start-up(.|\n)*role"):
        kvt.Daemon.start(kvtd_path, role="sideways", work_dir=str(tmp_path), socket=str(sock_dir / "bad.sock"),
                         extra_flags=BASE_FLAGS)


def test_a_socket_path_too_long_for_unix_sockets_is_invalid(kvtd_path: str, tmp_path: Path) -> None:
    with pytest.raises(kvt.InvalidArgument, match="longer than a unix socket allows"):
        kvt.Daemon.start(kvtd_path, work_dir=str(tmp_path), socket="/tmp/" + "s" * 120 + ".sock")


def test_a_deep_work_dir_gets_its_socket_in_a_short_dir(kvtd_path: str, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    daemon = kvt.Daemon.start(kvtd_path, role="decode", work_dir=str(deep), extra_flags=BASE_FLAGS)
    try:
        assert len(daemon.socket) < 108 and daemon.log_path.parent == deep
        with kvt.Client(daemon.socket) as client:
            assert client.stats().daemon_id == "decode"
    finally:
        daemon.kill()
        daemon.stop()
    assert not Path(daemon.socket).parent.exists()  # the short dir it made is gone

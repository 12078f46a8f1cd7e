"""Daemon: a kvtd started as a child process, for tests, examples and single-host set-ups.

Like tools/kvtctl/daemon_process.h: launched with its flags plus --ready_file, waited for until it says where it
listens, stopped with SIGTERM (then SIGKILL after a grace period). Its output goes to <work_dir>/<name>.log.

    with kvt.Daemon.start(kvtd="/usr/local/bin/kvtd", role="decode") as decode:
        with kvt.Client(decode.socket) as client:
            ...
        decode.peer_address   # "127.0.0.1:41234", for the prefill side's offer(decode_daemon=...)

Thread-compatible.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import List, Optional, Sequence, Type

from kvt.errors import InvalidArgument, NotFound, Unavailable

_LOG = logging.getLogger("kvt")
_MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL


def find_kvtd(path: Optional[str] = None) -> str:
    """`path` if given (NotFound unless it is an executable file), else "kvtd" on PATH; NotFound saying how to
    get one."""
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise NotFound(f"kvtd {path} is not an executable file")
    found = shutil.which("kvtd")
    if found:
        return found
    raise NotFound("kvtd not found on PATH; build it with `bazel build -c opt //server:kvtd` and pass its path")


@dataclass(frozen=True)
class DaemonAddresses:
    """Where a started kvtd listens, from its --ready_file."""

    socket: str  # the client socket (kvt.Client)
    peer_address: str  # host:port of its peer service (offer(decode_daemon=...))
    daemon_id: str  # its --daemon_id (expect(source_daemon=...))
    metrics_port: int  # its /metrics port; 0 when metrics are off
    pid: int


class Daemon:
    """A running kvtd child process. A context manager: leaving it stops the daemon."""

    def __init__(self, process: "subprocess.Popen[bytes]", addresses: DaemonAddresses, log_path: Path,
                 own_dirs: List[Path]) -> None:
        """Use start(); this only takes ownership of a started process."""
        self._process = process
        self._addresses = addresses
        self._log_path = log_path
        self._own_dirs = own_dirs  # temp dirs start() made, removed on stop

    @classmethod
    def start(cls, kvtd: Optional[str] = None, role: str = "both", work_dir: Optional[str] = None,
              rate_gbps: float = 0.0, extra_flags: Sequence[str] = (), name: Optional[str] = None,
              daemon_id: Optional[str] = None, socket: Optional[str] = None,
              peer_listen: str = "127.0.0.1:0", metrics_listen: str = "127.0.0.1:0",
              start_timeout: float = 10.0) -> "Daemon":
        """Starts `kvtd` (find_kvtd's rules) and waits up to `start_timeout` seconds until it is up.

        It runs as --role=`role` with --daemon_id=`daemon_id` (default `name`), serves clients on `socket`
        (default <work_dir>/<name>.sock, or in a short temp dir when that path is too long for a unix socket)
        and peers on `peer_listen` (port 0: the kernel picks one, read back as
        peer_address), with metrics on `metrics_listen` ("" = off) and the data plane limited to `rate_gbps`
        (0 = unlimited). `extra_flags` are appended as given ("--codec_threads=1"). `work_dir` (default: a
        fresh temp dir, removed on stop) gets the log and the ready file. `name` defaults to `role`.

        NotFound if kvtd is missing; InvalidArgument for a `socket` longer than a unix socket allows;
        Unavailable (with the end of its log) if it exits during start-up or stays silent.
        """
        kvtd = find_kvtd(kvtd)
        name = name or role
        if socket is not None and len(os.fsencode(socket)) > _MAX_SOCKET_PATH:
            raise InvalidArgument(f"socket path {socket} is longer than a unix socket allows "
                                  f"({_MAX_SOCKET_PATH} bytes)")
        own_dirs: List[Path] = []
        if work_dir is None:
            own_dirs.append(Path(tempfile.mkdtemp(prefix="kvtd-")))
            work_dir = str(own_dirs[-1])
        work = Path(work_dir)
        if socket is None:
            socket = str(work / f"{name}.sock")
            if len(os.fsencode(socket)) > _MAX_SOCKET_PATH:  # a deep work_dir (Bazel's, pytest's): a short one
                own_dirs.append(Path(tempfile.mkdtemp(prefix="kvtd-", dir="/tmp")))
                socket = str(own_dirs[-1] / f"{name}.sock")
        ready = work / f"{name}.ready.json"
        log_path = work / f"{name}.log"
        ready.unlink(missing_ok=True)
        args = [kvtd, f"--role={role}", f"--daemon_id={daemon_id or name}", f"--client_socket={socket}",
                f"--peer_listen={peer_listen}", f"--metrics_listen={metrics_listen}", f"--rate_gbps={rate_gbps:g}",
                *extra_flags, f"--ready_file={ready}"]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       close_fds=True)
        deadline = time.monotonic() + start_timeout
        while True:
            addresses = _read_ready(ready)
            if addresses is not None:
                _LOG.debug("kvtd %s up: %s", name, addresses)
                return cls(process, addresses, log_path, own_dirs)
            if process.poll() is not None:
                tail = _tail(log_path)
                _remove(own_dirs)
                raise Unavailable(f"kvtd {name} exited ({process.returncode}) during start-up; its log "
                                  f"({log_path}) ends with:\n{tail}")
            if time.monotonic() >= deadline:
                process.kill()
                process.wait()
                tail = _tail(log_path)
                _remove(own_dirs)
                raise Unavailable(f"kvtd {name} did not come up within {start_timeout:g} s; its log ({log_path}):"
                                  f"\n{tail}")
            time.sleep(0.02)

    @property
    def socket(self) -> str:
        """The client socket (for kvt.Client)."""
        return self._addresses.socket

    @property
    def peer_address(self) -> str:
        """host:port of the peer service (the decode daemon an offer names)."""
        return self._addresses.peer_address

    @property
    def daemon_id(self) -> str:
        return self._addresses.daemon_id

    @property
    def metrics_port(self) -> int:
        return self._addresses.metrics_port

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def log_path(self) -> Path:
        """Where its stdout and stderr go."""
        return self._log_path

    @property
    def running(self) -> bool:
        """Whether the process has not exited."""
        return self._process.poll() is None

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last `max_bytes` of its log."""
        return _tail(self._log_path, max_bytes)

    def terminate(self) -> None:
        """Sends SIGTERM without waiting (kvtd takes a moment to shut down); stop() then waits. Lets a caller
        stop several daemons at once."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL if it has not exited after `grace` seconds; returns its exit status (negative: the
        signal that ended it). subprocess.TimeoutExpired if even SIGKILL did not reap it within 5 s. Removes the
        temp work dir start() made (with the log). Idempotent."""
        if self._process.poll() is None:
            self.terminate()
            try:
                self._process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _LOG.warning("kvtd %s ignored SIGTERM for %g s; killing it", self.daemon_id, grace)
                self._process.kill()
                self._process.wait(timeout=5)
        self._cleanup()
        return self._process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would (for failure tests); waits until it is reaped."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=5)

    def _cleanup(self) -> None:
        _remove(self._own_dirs)
        self._own_dirs = []

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Daemon({self.daemon_id!r}, pid={self.pid}, socket={self.socket!r}, running={self.running})"


def _remove(dirs: List[Path]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _read_ready(path: Path) -> Optional[DaemonAddresses]:
    """The ready file's addresses once it holds complete JSON, else None."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return DaemonAddresses(socket=data.get("client_socket", ""), peer_address=data.get("peer_address", ""),
                           daemon_id=data.get("daemon_id", ""), metrics_port=int(data.get("metrics_port", 0)),
                           pid=int(data.get("pid", 0)))


def _tail(path: Path, max_bytes: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-max_bytes:].decode(errors="replace")

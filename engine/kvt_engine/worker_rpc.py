"""Runs an engine worker (prefill or decode) in its own process and calls its methods over a pipe. Workers are
started with multiprocessing's "spawn" (CUDA cannot be forked) and keep their state between calls.

    w = WorkerProcess("kvt_engine.decode_worker:DecodeWorker", options)
    w.send("expect", job=...)          # returns at once
    t0 = w.receive()                   # the method's result; a worker exception re-raised as WorkerError
    w.close()

A WorkerProcess belongs to one thread.
"""
from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import traceback
from typing import Any, Optional

log = logging.getLogger("kvt_engine")


class WorkerError(RuntimeError):
    """A worker's method raised; the message carries its traceback."""


def _serve(conn: Any, target: str, options: Any, log_level: int) -> None:
    logging.basicConfig(level=log_level, format=f"%(asctime)s {target.rsplit(':', 1)[1]} %(levelname)s %(message)s")
    try:
        module, cls = target.split(":")
        worker = getattr(importlib.import_module(module), cls)(options)
        conn.send(("ready", getattr(worker, "info", lambda: {})()))
    except BaseException:  # noqa: BLE001 - reported to the parent, then the process ends
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            method, kwargs = conn.recv()
        except EOFError:
            break
        if method == "close":
            break
        try:
            conn.send(("ok", getattr(worker, method)(**kwargs)))
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))
    close = getattr(worker, "close", None)
    if close:
        close()
    conn.send(("closed", None))


class WorkerProcess:
    def __init__(self, target: str, options: Any, start_timeout: float = 300.0) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, target, options, log.getEffectiveLevel()),
                                 name=target, daemon=True)
        self._proc.start()
        child.close()
        self.info = self._wait("ready", start_timeout)

    def _wait(self, want: str, timeout: Optional[float]) -> Any:
        if not self._conn.poll(timeout):
            raise WorkerError(f"worker {self._proc.name} did not answer within {timeout} s")
        kind, value = self._conn.recv()
        if kind == "error":
            raise WorkerError(f"worker {self._proc.name} failed:\n{value}")
        if kind != want:
            raise WorkerError(f"worker {self._proc.name}: expected {want}, got {kind}")
        return value

    def send(self, method: str, **kwargs: Any) -> None:
        self._conn.send((method, kwargs))

    def receive(self, timeout: Optional[float] = 600.0) -> Any:
        return self._wait("ok", timeout)

    def call(self, method: str, timeout: Optional[float] = 600.0, **kwargs: Any) -> Any:
        self.send(method, **kwargs)
        return self.receive(timeout)

    @property
    def pid(self) -> int:
        return self._proc.pid or -1

    def close(self, timeout: float = 30.0) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("close", {}))
                if self._conn.poll(timeout):
                    self._conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
            self._proc.join(timeout)
        if self._proc.is_alive():
            log.warning("worker %s (pid %d) did not stop; terminating it", self._proc.name, self.pid)
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()

    def __enter__(self) -> "WorkerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

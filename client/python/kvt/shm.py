"""ShmSegment: a POSIX shared-memory segment an engine creates for its KV cache and registers with kvtd.

Mirrors client/shm_segment.h. The segment is created exclusively, sized and mapped read-write; close() unmaps it
and unlinks the name (the daemon's own mapping stays valid until it unregisters the region). Linux only: the
segment is the file /dev/shm/<name without its '/'>, which is what shm_open(3) opens there. Thread-compatible.

    with ShmSegment.create("/my-engine-kv", nbytes) as shm:
        array = numpy.ndarray((n,), numpy.uint8, buffer=shm.buffer)
        client.register_region("kv", layout, shm_name=shm.name, size_bytes=shm.size)
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
import secrets
from types import TracebackType
from typing import Optional, Type

from kvt.errors import AlreadyExists, FailedPrecondition, Internal, InvalidArgument, ResourceExhausted

_LOG = logging.getLogger("kvt")
_SHM_DIR = "/dev/shm"


def unique_shm_name(prefix: str = "kvt") -> str:
    """A fresh segment name, "/<prefix>-<pid>-<random hex>"."""
    return f"/{prefix}-{os.getpid()}-{secrets.token_hex(6)}"


def validate_shm_name(name: str) -> None:
    """InvalidArgument unless `name` is 2..255 bytes with one leading '/' and no other (as kvtd requires)."""
    if not isinstance(name, str) or not 2 <= len(name.encode()) <= 255 or name[0] != "/" or "/" in name[1:]:
        raise InvalidArgument(f"shm name {name!r} must be 2..255 bytes with one leading '/' and no other")


class ShmSegment:
    """A created, mapped shared-memory segment; a context manager. `buffer` is a writable mmap of `size` bytes."""

    def __init__(self, name: str, size: int, buffer: mmap.mmap) -> None:
        """Use create(); this only takes ownership of an already created and mapped segment."""
        self._name = name
        self._size = size
        self._buffer: Optional[mmap.mmap] = buffer

    @classmethod
    def create(cls, name: Optional[str], size: int, mode: int = 0o600) -> "ShmSegment":
        """Creates (exclusively), sizes and maps a zero-filled segment of `size` bytes with permissions `mode`.

        `name` None picks a unique one. The memory is reserved up front (posix_fallocate), so a full /dev/shm
        fails here with ResourceExhausted rather than later with SIGBUS. InvalidArgument for a bad name or a size
        below 1; AlreadyExists if the name is taken.
        """
        name = unique_shm_name() if name is None else name
        validate_shm_name(name)
        if not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"shm segment size must be a positive integer, got {size!r}")
        path = os.path.join(_SHM_DIR, name[1:])
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            raise AlreadyExists(f"shm segment {name} already exists") from None
        except OSError as e:
            raise Internal(f"shm_open {name}: {e.strerror}") from e
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise ResourceExhausted(f"cannot size shm segment {name} to {size} bytes: {e.strerror}") from e
                os.ftruncate(fd, size)  # a file system without fallocate: size it without reserving
            buffer = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        os.close(fd)
        _LOG.debug("created shm segment %s (%d bytes)", name, size)
        return cls(name, size, buffer)

    @property
    def name(self) -> str:
        """The name as passed to shm_open and to kvtd ("/kvt-...")."""
        return self._name

    @property
    def size(self) -> int:
        """Bytes mapped."""
        return self._size

    @property
    def buffer(self) -> mmap.mmap:
        """The writable mapping. FailedPrecondition after close()."""
        if self._buffer is None:
            raise FailedPrecondition(f"shm segment {self._name} is closed")
        return self._buffer

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._buffer is None

    def close(self) -> None:
        """Unlinks the name and unmaps. Idempotent. Arrays still viewing the mapping keep it mapped until they
        are gone (the mapping is then released by the garbage collector)."""
        if self._buffer is None:
            return
        buffer, self._buffer = self._buffer, None
        _unlink(os.path.join(_SHM_DIR, self._name[1:]))
        try:
            buffer.close()
        except BufferError:
            _LOG.debug("shm segment %s: views still exist; unmapped when they are gone", self._name)

    def __enter__(self) -> "ShmSegment":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShmSegment(name={self._name!r}, size={self._size}, closed={self.closed})"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

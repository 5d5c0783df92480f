"""Memory that two processes of one machine both hold: the buddy store's
copies between workers of one host.

A `SharedBuffer` is anonymous shared memory (`memfd_create`) mapped into
the process that made it; another process of the same machine and user
maps the same pages through `/proc/<pid>/fd/<fd>` (`map_peer`). The pages
live while any process maps them: a buffer that its maker and a peer both
map survives the death of either, and a process killed with its buffers
leaves nothing behind (a file under `/dev/shm` would stay).

On a system without `memfd_create` (not Linux), `SharedBuffer.create`
makes a buffer no other process can map (`name` None): copies then go
over TCP as between hosts.

Imports nothing heavy: the contract runs without TensorFlow.
"""

import itertools
import mmap
import os
import weakref

_IDS = itertools.count(1)


class SharedBuffer:
    """`size` bytes of memory, writable here (`map`).

    Attributes:
        map: `mmap.mmap` (a `bytearray` without shared memory).
        name: String. The path another process opens to map it (None if
            none can).
        inode: Int. The buffer's inode: what a peer checks it opened
            (`name` in another PID namespace may be another process's).
        id: Int. Unique in this process (a descriptor's number is not:
            it is reused once closed).
    """

    def __init__(self, size: int, shared: bool = True) -> None:
        self.id = next(_IDS)
        if not shared:
            self.map, self.name, self.inode = bytearray(size), None, None
            return
        fd = os.memfd_create("keras_hybrid_buddy_copy", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, fd)
        os.ftruncate(fd, size)
        self.map = mmap.mmap(fd, size)
        self.name = f"/proc/{os.getpid()}/fd/{fd}"
        self.inode = os.fstat(fd).st_ino

    @classmethod
    def create(cls, size: int) -> "SharedBuffer":
        """A buffer of `size` (> 0) bytes, shared when the system can."""
        return cls(size, shared=hasattr(os, "memfd_create"))

    def __len__(self) -> int:
        return len(self.map)


def map_peer(name: str, size: int, inode: int):
    """A read-only mapping of another process's `SharedBuffer` of `size`
    bytes and `inode`, opened at `name`, or None if this process cannot
    open it or opens another file there (another machine, or another PID
    namespace behind one host name)."""
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if found.st_size != size or found.st_ino != inode:
            return None
        return mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)

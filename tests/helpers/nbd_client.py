"""A minimal NBD client for the integration tests (fixed newstyle handshake, NBD_OPT_EXPORT_NAME, simple
replies), written against the protocol (github.com/NetworkBlockDevice/nbd doc/proto.md) so that a test
can send what libnbd refuses to: zero-length requests, ranges past the end, half a request.

Every socket operation has a timeout, so a test that talks to a stuck server fails instead of hanging.
"""
from __future__ import annotations

import socket
import struct

NBD_REQUEST_MAGIC = 0x25609513
NBD_SIMPLE_REPLY_MAGIC = 0x67446698
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM = 0, 1, 2, 3, 4
SECTOR = 512
BLOCK = 4096
MAGIC = b"PYBCBLK1"


class NbdError(Exception):
    """The server answered a request with a non-zero NBD error (``errno``)."""

    def __init__(self, errno: int) -> None:
        super().__init__(f"NBD error {errno}")
        self.errno = errno


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"server closed the connection ({len(buf)} of {n} bytes)")
        buf += chunk
    return bytes(buf)


class Client:
    """One connection to a Unix-socket NBD server."""

    def __init__(self, path: str, *, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()     # a caller may retry until the server listens
            raise
        self._cookie = 0
        magic, opt, _flags = struct.unpack(">8s8sH", _recv(self.sock, 18))
        if magic != b"NBDMAGIC" or opt != b"IHAVEOPT":
            raise ConnectionError("not a newstyle NBD server")
        self.sock.sendall(struct.pack(">I", 1 | 2))  # FIXED_NEWSTYLE | NO_ZEROES
        self.sock.sendall(b"IHAVEOPT" + struct.pack(">II", 1, 0))  # NBD_OPT_EXPORT_NAME, ""
        self.size, self.flags = struct.unpack(">QH", _recv(self.sock, 10))

    def send_header(self, cmd: int, offset: int, length: int) -> int:
        self._cookie += 1
        self.sock.sendall(struct.pack(">IHHQQI", NBD_REQUEST_MAGIC, 0, cmd, self._cookie, offset, length))
        return self._cookie

    def _reply(self, cookie: int, data_len: int) -> bytes:
        magic, err, got = struct.unpack(">IIQ", _recv(self.sock, 16))
        if magic != NBD_SIMPLE_REPLY_MAGIC or got != cookie:
            raise ConnectionError(f"bad reply (magic {magic:#x}, cookie {got} for {cookie})")
        if err:
            raise NbdError(err)
        return _recv(self.sock, data_len) if data_len else b""

    def pread(self, offset: int, length: int) -> bytes:
        return self._reply(self.send_header(CMD_READ, offset, length), length)

    def pwrite(self, offset: int, data: bytes) -> None:
        cookie = self.send_header(CMD_WRITE, offset, len(data))
        self.sock.sendall(data)
        self._reply(cookie, 0)

    def flush(self) -> None:
        self._reply(self.send_header(CMD_FLUSH, 0, 0), 0)

    def trim(self, offset: int, length: int) -> None:
        self._reply(self.send_header(CMD_TRIM, offset, length), 0)

    def close(self) -> None:
        try:
            self.send_header(CMD_DISC, 0, 0)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def decode(data: bytes, offset: int) -> list[tuple[int, int, int]]:
    """(block, version, sector offset) of every whole sector in ``data`` read at byte ``offset``;
    raises AssertionError if a sector is not the model's encoding of its own position."""
    out = []
    first = -(-offset // SECTOR) * SECTOR
    for pos in range(first, offset + len(data) - SECTOR + 1, SECTOR):
        s = data[pos - offset:pos - offset + SECTOR]
        magic, blk, version, where = struct.unpack("<8sQQQ", s[:32])
        assert magic == MAGIC and where == pos and blk == pos // BLOCK and s[32:] == bytes(SECTOR - 32), \
            f"sector at {pos} is not the model's encoding: {s[:32]!r}"
        out.append((blk, version, pos))
    return out

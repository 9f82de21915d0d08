"""nbdkit's Python plugin serving :class:`pybcache.CachedDevice`: the alternative to pyb_nbdkit.c that
docs/serve.md measures against it (``Server(plugin="python")``). Not what ``pybcache serve`` uses.

Same parameters and data encoding as the C plugin. The model's work (``CachedDevice.read`` and
``.write``) runs in C without the GIL; the encoding of the reply and every callback's own Python run
with it. A write runs whole on the request thread (its delay waited by yielding), not on a completion
thread: this plugin is measured with write_delay_ns=0.
"""
import json
import os
import site
import sys

import nbdkit  # provided by nbdkit's embedded interpreter

# The interpreter is nbdkit's, not the one pybcache was installed into: borrow that one's paths.
for path in os.environ.get("PYBCACHE_SYS_PATH", "").split(os.pathsep):
    if path and path not in sys.path:
        site.addsitedir(path)

import numpy as np  # noqa: E402

from pybcache import CachedDevice  # noqa: E402

API_VERSION = 2
BLOCK, SECTOR, MAX_READ_BLOCKS = 4096, 512, 64
MAGIC = int.from_bytes(b"PYBCBLK1", "little")
cfg = {"size": None, "sync": "page", "write_delay_ns": 0, "chunk_size": 32 << 20, "stats": None}
dev = None
counts = {"nbd_reads": 0, "nbd_writes": 0, "nbd_trims": 0, "nbd_flushes": 0}  # under the GIL


def config(key, value):
    if key not in cfg:
        raise ValueError(f"unknown parameter {key}")
    cfg[key] = value if key in ("sync", "stats") else int(value)


def config_complete():
    global dev
    dev = CachedDevice(cfg["size"], sync=cfg["sync"], write_delay_ns=cfg["write_delay_ns"], delay="yield",
                       chunk_size=cfg["chunk_size"])


def thread_model():
    return nbdkit.THREAD_MODEL_PARALLEL


def open(readonly):  # noqa: A001 - nbdkit's callback name
    return 1


def get_size(h):
    return cfg["size"]


def can_multi_conn(h):
    return True


def can_flush(h):
    return True


def can_trim(h):
    return True


def _encode(first, versions):
    """The C plugin's encoding of len(versions) blocks from block ``first``, as bytes."""
    n = len(versions) * (BLOCK // SECTOR)
    img = np.zeros((n, SECTOR // 8), dtype="<u8")
    sectors = np.arange(n, dtype=np.uint64)
    img[:, 0] = MAGIC
    img[:, 1] = first + sectors // (BLOCK // SECTOR)
    img[:, 2] = np.repeat(np.asarray(versions, dtype=np.uint64), BLOCK // SECTOR)
    img[:, 3] = first * BLOCK + sectors * SECTOR
    return img.tobytes()


def pread(h, buf, offset, flags):
    counts["nbd_reads"] += 1
    first, end = offset // BLOCK, -(-(offset + len(buf)) // BLOCK)
    parts = []
    for blk in range(first, end, MAX_READ_BLOCKS):
        n = min(MAX_READ_BLOCKS, end - blk)
        parts.append(_encode(blk, dev.read(blk * BLOCK, n * BLOCK)["versions"]))  # model: GIL released
    data = b"".join(parts)
    skip = offset - first * BLOCK
    buf[:] = data[skip:skip + len(buf)]


def _bypass_write(offset, count):
    first, end = offset // BLOCK, -(-(offset + count) // BLOCK)
    dev.write(first * BLOCK, (end - first) * BLOCK)  # start, invalidate, delay, land, end: GIL released


def pwrite(h, buf, offset, flags):
    counts["nbd_writes"] += 1
    _bypass_write(offset, len(buf))


def trim(h, count, offset, flags):
    counts["nbd_trims"] += 1
    _bypass_write(offset, count)


def flush(h, flags):
    counts["nbd_flushes"] += 1


def cleanup():
    if not cfg["stats"] or dev is None:
        return
    s = dev.stats()
    out = {k: s[k] for k in ("reads", "writes", "read_bypasses", "cache_inserts", "stale_reads", "read_hits",
                             "read_misses", "miss_collisions", "untracked_writes")}
    out["stale_cached_blocks"] = dev.stale_cached_blocks()
    out.update(counts, abandoned_writes=0)
    with open_file(cfg["stats"] + ".tmp") as f:
        json.dump(out, f)
    os.replace(cfg["stats"] + ".tmp", cfg["stats"])


def open_file(path):
    import builtins
    return builtins.open(path, "w")

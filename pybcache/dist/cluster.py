"""Where distributed work runs: an embedded Dask ``LocalCluster`` or an existing scheduler.

The embedded cluster is of worker *processes* (one thread each), sized to the machine, started and
shut down with the command; Dask spawns those processes, which is why this lives in an installed
module (a script read from stdin cannot start one). ``--scheduler tcp://HOST:PORT`` or the
``PYBCACHE_SCHEDULER`` environment variable selects an existing cluster instead, whose workers must
have the same pybcache version installed (tasks import it and call the C models directly).
"""
from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..validate import check_int

__all__ = ["DASK_MISSING", "SCHEDULER_ENV", "check_scheduler_address", "client_for", "dask_available"]

SCHEDULER_ENV = "PYBCACHE_SCHEDULER"
#: what to do without dask.distributed: install the extra from the clone (pybcache is not on the package index; README.md)
DASK_MISSING = ("dask.distributed is not installed: run python3 -m pip install '.[distributed]' in the pybcache "
                "clone, or pip install 'PATH[distributed]' with PATH the clone")
# protocol://HOST[:PORT], what a remote Dask scheduler listens on: HOST a name or IPv4 address (letters, digits,
# '.', '-', '_') or a bracketed IPv6 address, PORT ASCII digits checked to be 1..65535 below. (Dask's inproc://
# addresses name a scheduler in this very process, which a command line cannot reach: not taken.)
_ADDRESS = re.compile(r"^(tcp|tls|ucx|ws|wss)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?$")
MAX_WORKERS = 256


def dask_available() -> bool:
    """True when ``dask.distributed`` can be imported (the ``distributed`` extra)."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def check_scheduler_address(address: str, *, name: str = "scheduler") -> str:
    """``address`` if it looks like ``tcp://HOST:PORT`` (or another Dask protocol), else ValueError."""
    if not isinstance(address, str):
        raise TypeError(f"{name} must be a str like tcp://HOST:PORT, got {type(address).__name__}")
    m = _ADDRESS.match(address.strip())
    if not m or (m.group(3) is not None and not 1 <= int(m.group(3)) <= 65535):
        raise ValueError(f"{name}: expected an address like tcp://HOST:PORT (PORT 1..65535), got {address!r}")
    return address.strip()


@contextmanager
def client_for(*, scheduler: str | None = None, workers: int | None = None,
               dashboard: bool = False) -> Iterator[Any]:
    """A ``dask.distributed.Client`` for the duration of the ``with`` block.

    :param scheduler: an existing scheduler's address; default ``$PYBCACHE_SCHEDULER``, and when
        neither is set an embedded ``LocalCluster`` is started and shut down on exit.
    :param workers: worker processes of the embedded cluster, 1..256; default ``os.cpu_count()``.
        Not allowed with an existing scheduler (its size is its own).
    :param dashboard: serve the embedded cluster's dashboard on a free port (default off).
    :raises ValueError: bad arguments or an unreachable scheduler.
    :raises ImportError: dask.distributed is not installed (:data:`DASK_MISSING`: the ``distributed`` extra,
        from the clone).
    """
    if scheduler is None:
        scheduler = os.environ.get(SCHEDULER_ENV) or None
        name = SCHEDULER_ENV
    else:
        name = "scheduler"
    if scheduler is not None:
        scheduler = check_scheduler_address(scheduler, name=name)
        if workers is not None:
            raise ValueError("workers: only for the embedded cluster, not with an existing scheduler")
    if workers is not None:
        workers = check_int(workers, "workers", 1, MAX_WORKERS)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ImportError(DASK_MISSING) from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"{name}: cannot reach {scheduler}: {exc}") from None
        try:
            yield client
        finally:
            client.close()
        return
    # The scheduler's HTTP server (health and metrics routes) runs even without a dashboard, on 8787
    # by default: a free local port instead, so that two clusters on one machine do not collide.
    cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                           dashboard_address=":0" if dashboard else None, silence_logs=logging.ERROR,
                           scheduler_kwargs=None if dashboard else {"dashboard_address": "127.0.0.1:0"})
    try:
        with Client(cluster) as client:
            if dashboard:
                sys.stderr.write(f"pybcache: Dask dashboard at {client.dashboard_link}\n")
            yield client
    finally:
        cluster.close()

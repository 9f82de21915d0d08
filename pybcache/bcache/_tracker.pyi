"""Type stubs for the compiled tracker core (public names are re-exported by pybcache)."""
from typing import Any

import numpy as np
import numpy.typing as npt

from .kpatch._kpatch import PatchTracker

SYNCS: tuple[str, ...]
OVERFLOWS: tuple[str, ...]
ALLOC_FAILURES: tuple[str, ...]
GFPS: tuple[str, ...]
FREES: tuple[str, ...]
UNHIJACKS: tuple[str, ...]
COUNTER_BITS: tuple[int, ...]
LOCKS: tuple[str, ...]
PAGE_SIZE: int

_IntArray = npt.ArrayLike

class FaultInjection:
    probability: float
    interval: int
    times: int
    space: int
    seed: int
    def __init__(self, probability: float = ..., interval: int = ..., times: int = ..., space: int = ...,
                 seed: int = ...) -> None: ...
    @property
    def injected(self) -> int: ...

class BypassWriteTracker:
    device_size: int
    chunk_size: int
    sync: str
    counter_bits: int
    overflow: str
    alloc_failure: str
    pool_pages: int
    fault: FaultInjection | None
    lock: str
    free: str
    unhijack: str
    wait_timeout: float | None
    gfp: str
    mempool_round: float
    n_chunks: int
    def __init__(self, device_size: int, *, chunk_size: int = ..., sync: str = ...,
                 counter_bits: int | None = ..., overflow: str = ..., alloc_failure: str = ...,
                 pool_pages: int = ..., fault: FaultInjection | None = ..., lock: str = ...,
                 free: str = ..., wait_timeout: float | None = ..., counter_max: int | None = ...,
                 gfp: str = ..., mempool_round: float | None = ..., unhijack: str = ...) -> None: ...
    @classmethod
    def posted_v2(cls, device_size: int, *, free: str = ..., **overrides: Any) -> BypassWriteTracker: ...
    @property
    def n_pages(self) -> int: ...
    @property
    def chunks_per_page(self) -> int: ...
    @property
    def counter_max(self) -> int: ...
    def start(self, offset: int, length: int) -> bool: ...
    def end(self, offset: int, length: int) -> None: ...
    def is_active(self, offset: int, length: int) -> bool: ...
    def count(self, offset: int) -> int: ...
    def start_many(self, offsets: _IntArray, lengths: _IntArray | int) -> npt.NDArray[np.bool_]: ...
    def end_many(self, offsets: _IntArray, lengths: _IntArray | int) -> None: ...
    def is_active_many(self, offsets: _IntArray, lengths: _IntArray | int) -> npt.NDArray[np.bool_]: ...
    def counts(self) -> npt.NDArray[np.uint64]: ...
    def reclaim(self) -> int: ...
    def stats(self) -> dict[str, int]: ...
    def memory(self) -> dict[str, int]: ...

class _EmptyPair:
    def start(self, offset: int, length: int) -> None: ...
    def end(self, offset: int, length: int) -> None: ...

def floors(n: int = ...) -> dict[str, float]: ...
def floor_pair_ns(kind: str, n: int) -> float: ...
def lock_floors(n: int = ...) -> dict[str, float]: ...
def _mcs_registry_address() -> int: ...
def native_stress(tracker: BypassWriteTracker | PatchTracker, *, threads: int = ..., ops: int | None = ...,
                  seconds: float | None = ..., region: tuple[int, int] | None = ...,
                  write_length: int = ..., depth: int = ..., partition: bool = ...,
                  reclaim_every: int = ..., seed: int = ..., wait_timeout: float | None = ...,
                  completions: str = ..., **kwargs: Any) -> dict[str, Any]: ...
def _weighted_percentiles(samples: npt.NDArray[Any], weights: npt.NDArray[Any],
                          qs: Any) -> list[float]: ...

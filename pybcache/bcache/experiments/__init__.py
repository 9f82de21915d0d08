"""The experiments that measure the bcache trackers, apart from the API they measure:

* :mod:`.memory` - idle and peak memory per device size, beside the v2 cover letter's table;
* :mod:`.bench` - the hot paths against C floors measured in the same run, scaling and contention, each
  figure with its target and met/missed computed;
* :mod:`.sustained` - a sustained single-chunk overload: allocations per policy (``python -m
  pybcache.bcache.experiments.sustained``);
* :mod:`.unhijack` - when a hijacked page reverts: at the end that drains it, or after md's daemon decay
  (``python -m pybcache.bcache.experiments.unhijack``);
* :mod:`.convoy` - a sleeping start under ``dc->writeback_lock``: the writeback thread's stall and the writes
  queued behind it, an event model (``python -m pybcache.bcache.experiments.convoy``).
"""

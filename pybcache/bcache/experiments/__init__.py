"""The experiments that measure the bcache trackers, apart from the API they measure:

* :mod:`.memory` - idle and peak memory per device size, beside the v2 cover letter's table;
* :mod:`.bench` - the hot paths against C floors measured in the same run, scaling and contention, each
  figure with its target and met/missed computed;
* :mod:`.sustained` - a sustained single-chunk overload: allocations per policy (``python -m
  pybcache.bcache.experiments.sustained``).
"""

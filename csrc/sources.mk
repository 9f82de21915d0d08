# The C core's sources, the one list that setup.py, the top-level Makefile and csrc/Makefile all read.
# PYB_CORE_SRC: the tracker, the native driver layer and what they need (every extension module links it);
# PYB_MODEL_SRC: the cached-device model, its native drivers, the explorer and the patch loader (a patch
# runs in every driver; pybcache.bcache._cachedev).
PYB_CORE_SRC = pyb_atomic.c pyb_fault.c pyb_tracker.c pyb_ops_lab.c pyb_driver.c pyb_stress.c pyb_floor.c
PYB_MODEL_SRC = pyb_cachedev.c pyb_workload.c pyb_explore.c pyb_kpatch.c

# The C core's sources, the one list that setup.py, the top-level Makefile and csrc/Makefile all read.
# PYB_CORE_SRC: the tracker, the native driver layer and what they need (every extension module links it);
# PYB_MODEL_SRC: the cached-device model, its native drivers and the explorer; PYB_KPATCH_SRC: the patch loader,
# which the model links too (a patch runs in every driver; pybcache.bcache._cachedev) and which
# pybcache.bcache.kpatch._kpatch links alone with the core. Whatever links the model links PYB_KPATCH_SRC.
PYB_CORE_SRC = pyb_atomic.c pyb_fault.c pyb_tracker.c pyb_ops_lab.c pyb_driver.c pyb_stress.c pyb_floor.c
PYB_MODEL_SRC = pyb_cachedev.c pyb_workload.c pyb_explore.c
PYB_KPATCH_SRC = pyb_kpatch.c

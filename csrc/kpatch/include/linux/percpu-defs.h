/* linux/percpu-defs.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_PERCPU_DEFS_H
#define PYBCACHE_LINUX_PERCPU_DEFS_H
#include <pybcache/kpatch.h>
#endif

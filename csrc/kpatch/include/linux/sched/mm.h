/* linux/sched/mm.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_SCHED_MM_H
#define PYBCACHE_LINUX_SCHED_MM_H
#include <pybcache/kpatch.h>
#endif

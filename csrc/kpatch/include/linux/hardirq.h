/* linux/hardirq.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_HARDIRQ_H
#define PYBCACHE_LINUX_HARDIRQ_H
#include <pybcache/kpatch.h>
#endif

/* linux/irqflags.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_IRQFLAGS_H
#define PYBCACHE_LINUX_IRQFLAGS_H
#include <pybcache/kpatch.h>
#endif

/* linux/bottom_half.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_BOTTOM_HALF_H
#define PYBCACHE_LINUX_BOTTOM_HALF_H
#include <pybcache/kpatch.h>
#endif

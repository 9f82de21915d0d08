/* linux/mutex.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_MUTEX_H
#define PYBCACHE_LINUX_MUTEX_H
#include <pybcache/kpatch.h>
#endif

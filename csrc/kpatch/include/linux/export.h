/* linux/export.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_EXPORT_H
#define PYBCACHE_LINUX_EXPORT_H
#include <pybcache/kpatch.h>
#endif

/* SPDX-License-Identifier: MIT */
/*
 * The library's identity (base.h): its version, the compiler and flags it
 * was built with (both set by the build, -DAL_VERSION_STR / -DAL_BUILD_FLAGS),
 * whether it runs the irqsave flags round trip (irqflags.h),
 * and the names of the errno values its functions return. Constant strings:
 * no lock, no allocation, any context.
 */
#include <errno.h>

#include "alloclab/core.h"
#include "irqflags.h"

#ifndef AL_VERSION_STR
#define AL_VERSION_STR "0.0.0"
#endif
#ifndef AL_BUILD_FLAGS
#define AL_BUILD_FLAGS "unknown"
#endif

const char *al_version(void)
{
	return AL_VERSION_STR;
}

const char *al_build_flags(void)
{
	return AL_BUILD_FLAGS;
}

int al_irqflags_executed(void)
{
	return AL_IRQFLAGS_EXECUTED;
}

#if AL_DEBUG >= 1
__thread unsigned long al_irqflags_saves, al_irqflags_restores;
#endif

const char *al_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case 0: return "OK";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case ERANGE: return "ERANGE";
	case EBUSY: return "EBUSY";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EEXIST: return "EEXIST";
	case ENOSPC: return "ENOSPC";
	case EAGAIN: return "EAGAIN";
	case EFAULT: return "EFAULT";
	case ENOENT: return "ENOENT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPERM: return "EPERM";
	case EDEADLK: return "EDEADLK";
	case EIO: return "EIO";
	default: return "EUNKNOWN";
	}
}

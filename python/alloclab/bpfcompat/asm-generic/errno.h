/* SPDX-License-Identifier: MIT */
/* alloclab's stand-in: the errno values of the host (the C library's
 * errno.h reaches the system's asm-generic/errno.h itself on Linux). */
#ifndef ALR_ASM_GENERIC_ERRNO_H
#define ALR_ASM_GENERIC_ERRNO_H
#if defined(__has_include_next) && __has_include_next(<asm-generic/errno.h>)
#include_next <asm-generic/errno.h>
#else
#include <errno.h>
#endif
#endif

/* SPDX-License-Identifier: MIT */
/*
 * The part of local_irq_save()/local_irq_restore() that user space can
 * execute (not public API).
 *
 * The kernel takes some locks with spin_lock_irqsave(): it saves the flags
 * register and disables interrupts, and spin_unlock_irqrestore() writes the
 * saved flags back. On x86-64 the save is pushf/pop and the restore push/popf;
 * both run at user level (popf leaves IF alone there), only cli is
 * privileged. A model lock that stands for such a lock runs these two, so
 * its acquisition costs what the flags round trip costs on this CPU,
 * measured by running it, not a chosen constant: the kernel's cost less the
 * cli. Elsewhere (arm64 traps EL0 reads of DAIF) nothing runs and
 * AL_IRQFLAGS_EXECUTED is 0, which the reports say.
 *
 * User code may keep locals in the 128-byte red zone below the stack pointer,
 * which a push would overwrite (the kernel builds with -mno-red-zone), so the
 * stack pointer steps over it first; lea leaves the flags alone. The step
 * carries no CFI note: a DWARF unwinder (perf --call-graph=dwarf) that
 * samples inside these few instructions sees a wrong frame.
 */
#ifndef ALLOCLAB_CORE_IRQFLAGS_H
#define ALLOCLAB_CORE_IRQFLAGS_H

/* The debug tier counts this thread's saves and restores, so that a test can
 * tell that a lock runs the round trip without timing it; nothing at
 * AL_DEBUG=0 (alloclab/debug.h's default when the build sets none, which is
 * why the header need not include it: bench/irqflags_cost.c builds with
 * -Icsrc alone). */
#if defined(AL_DEBUG) && AL_DEBUG >= 1
extern __thread unsigned long al_irqflags_saves, al_irqflags_restores;
#define AL_IRQFLAGS_COUNT(n) ((n)++)
#else
#define AL_IRQFLAGS_COUNT(n) ((void)0)
#endif

#if defined(__x86_64__) && !defined(__ILP32__)
#define AL_IRQFLAGS_EXECUTED 1

static inline unsigned long al_local_irq_save(void)
{
	unsigned long flags;

	__asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
			 "pushfq\n\t"
			 "popq %0\n\t"
			 "lea 128(%%rsp), %%rsp"
			 : "=r"(flags)
			 :
			 : "memory");
	AL_IRQFLAGS_COUNT(al_irqflags_saves);
	return flags;
}

static inline void al_local_irq_restore(unsigned long flags)
{
	AL_IRQFLAGS_COUNT(al_irqflags_restores); /* first: its add writes EFLAGS */
	__asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
			 "pushq %0\n\t"
			 "popfq\n\t"
			 "lea 128(%%rsp), %%rsp"
			 :
			 : "r"(flags)
			 : "memory", "cc");
}
#else
#define AL_IRQFLAGS_EXECUTED 0

static inline unsigned long al_local_irq_save(void)
{
	AL_IRQFLAGS_COUNT(al_irqflags_saves);
	return 0;
}

static inline void al_local_irq_restore(unsigned long flags)
{
	(void)flags;
	AL_IRQFLAGS_COUNT(al_irqflags_restores);
}
#endif

#endif

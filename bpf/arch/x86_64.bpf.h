/* SPDX-License-Identifier: GPL-2.0 */
/* What is x86_64's in the programs: the numbers of the syscalls they watch (for the raw sys_enter/sys_exit
 * pair) and which of the registers saved at a syscall's entry hold its number and arguments. (Function
 * arguments of probed functions go through BPF_KPROBE / PT_REGS_PARM*, which bpf_tracing.h maps per
 * -D__TARGET_ARCH_x86.) lotus-bpf builds for x86_64 only: another architecture needs its own header here and
 * CPython layouts measured there. */
#ifndef __LOTUS_ARCH_X86_64_BPF_H
#define __LOTUS_ARCH_X86_64_BPF_H

#ifndef __TARGET_ARCH_x86
#error "lotus-bpf's BPF programs are written for x86_64 (build with -D__TARGET_ARCH_x86)"
#endif

#define LOTUS_NR_READ 0
#define LOTUS_NR_WRITE 1
#define LOTUS_NR_GETPPID 110
#define LOTUS_NR_OPENAT 257

#define LOTUS_SYSCALL_NR_REG orig_ax
#define LOTUS_SYSCALL_ARG1_REG di
#define LOTUS_SYSCALL_ARG2_REG si
#define LOTUS_SYSCALL_ARG3_REG dx

#endif /* __LOTUS_ARCH_X86_64_BPF_H */

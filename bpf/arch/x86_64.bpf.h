/* SPDX-License-Identifier: GPL-2.0 */
/* What is x86_64's in the programs: where a syscall's arguments are in the registers saved at its entry
 * (read at a syscall's exit, whose event has only the result). (Function arguments of probed functions go through
 * BPF_KPROBE / PT_REGS_PARM*, which bpf_tracing.h maps per -D__TARGET_ARCH_x86.) lotus-bpf builds for x86_64
 * only: another architecture needs its own header here and CPython layouts measured there. */
#ifndef __LOTUS_ARCH_X86_64_BPF_H
#define __LOTUS_ARCH_X86_64_BPF_H

#ifndef __TARGET_ARCH_x86
#error "lotus-bpf's BPF programs are written for x86_64 (build with -D__TARGET_ARCH_x86)"
#endif

#define LOTUS_SYSCALL_ARG1_REG di
#define LOTUS_SYSCALL_ARG2_REG si

#endif /* __LOTUS_ARCH_X86_64_BPF_H */

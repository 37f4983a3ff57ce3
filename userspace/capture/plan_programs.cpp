#include "plan_programs.h"

#include <bpf/libbpf.h>
#include <initializer_list>
#include <utility>

#include "lotus_abi.h"
#include "lotus.skel.h"

namespace lotus::capture {

void choose_programs(lotus_bpf* skel, const ProbePlan& plan, const KernelFeatures& kernel, bool syscall_events)
{
    const auto& load = plan.load;
    auto& progs = skel->progs;
    for (auto [prog, on] : {std::pair{progs.on_fork_hold, load.on_fork_hold}, {progs.on_exec_hold, load.on_exec_hold},
                            {progs.on_fork_note, load.on_fork_note}, {progs.on_child_start, load.on_child_start},
                            {progs.on_exec_stop, load.on_exec_stop}, {progs.find_keepers, load.find_keepers},
                            {progs.on_sock_send, load.on_sock_send}, {progs.on_sock_recv, load.on_sock_recv},
                            {progs.py_call, load.py_call}, {progs.py_entry, load.py_entry},
                            {progs.py_slot, load.py_slot}, {progs.py_slot_entry, load.py_slot_entry},
                            {progs.py_return, load.py_return}, {progs.py_resume, load.py_resume},
                            {progs.py_retval, load.py_retval}, {progs.native_call, load.native_call},
                            {progs.on_sample, load.on_sample}, {progs.unsampled_threads, load.unsampled_threads},
                            {progs.libc_call, load.libc_call}})
        bpf_program__set_autoload(prog, on);
    // The exit tracepoint's arguments differ by kernel (lotus.bpf.c): the variant this one's match.
    bpf_program__set_autoload(progs.on_exit, kernel.exit_group_dead);
    bpf_program__set_autoload(progs.on_exit_counted, !kernel.exit_group_dead);
    if (plan.session)
        for (bpf_program* prog : {progs.py_call, progs.py_slot})
            bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kernel.uprobe_session_type));
    if (kernel.uprobe_multi_type >= 0)
        for (bpf_program* prog : {progs.py_entry, progs.py_slot_entry, progs.py_return, progs.py_resume,
                                  progs.py_retval, progs.native_call, progs.on_child_start})
            bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(kernel.uprobe_multi_type));
    for (bpf_program* prog : {progs.on_write, progs.on_getppid, progs.on_openat, progs.on_read_done,
                              progs.on_openat_done})
        bpf_program__set_autoload(prog, syscall_events);
    for (bpf_program* prog : {progs.on_sys_enter, progs.on_sys_exit}) // every syscall's, the last resort
        bpf_program__set_autoload(prog, !plan.libc && !syscall_events);
    if (plan.libc)
        bpf_program__set_expected_attach_type(progs.libc_call, static_cast<bpf_attach_type>(kernel.uprobe_session_type));
}

} // namespace lotus::capture

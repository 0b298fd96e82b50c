"""The seccomp filter every sandboxed command runs under (bubblewrap `--seccomp FD`).

A classic BPF program, written out here (no libseccomp needed), that answers EPERM to the
system calls an agent's command never needs and that widen the kernel's attack surface:
tracing other processes, the kernel keyrings, eBPF, userfaultfd, perf events, io_uring,
every mount API (old and new), namespace switching, module and kexec loading, swap, reboot,
quotas and the like. Everything else is allowed. A call made with another architecture's
calling convention (x86's `int 0x80`, the x32 ABI) is refused as a whole, so the table
cannot be bypassed by switching ABI.

Built once per process (a few hundred bytes); bwrap installs it right before it executes
the command, with no_new_privs set, and every process of the command inherits it. On an
architecture without a table here (not x86_64 or aarch64) `program()` is None and commands
run without a filter (the documented fallback, see docs/user-guide.md, "Sandbox limits").
"""

from __future__ import annotations

import errno
import functools
import os
import struct

__all__ = ["BLOCKED", "program"]

# Syscall names refused with EPERM.
BLOCKED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "keyctl", "add_key", "request_key",
    "bpf", "userfaultfd", "perf_event_open",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "setns",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "quotactl_fd", "lookup_dcookie",
    "open_by_handle_at", "iopl", "ioperm", "uselib",
)

_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "keyctl": 250, "add_key": 248,
    "request_key": 249, "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "mount": 165, "umount2": 166, "pivot_root": 155,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "setns": 308, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
    "syslog": 103, "quotactl": 179, "quotactl_fd": 443, "lookup_dcookie": 212, "open_by_handle_at": 304,
    "iopl": 172, "ioperm": 173, "uselib": 134,
}
_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "keyctl": 219, "add_key": 217,
    "request_key": 218, "bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "mount": 40, "umount2": 39, "pivot_root": 41,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "setns": 268, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "acct": 89, "swapon": 224, "swapoff": 225, "reboot": 142,
    "syslog": 116, "quotactl": 60, "quotactl_fd": 443, "lookup_dcookie": 18, "open_by_handle_at": 265,
}
# machine -> (AUDIT_ARCH_*, syscall table, first number of an ABI to refuse as a whole)
_ARCHES: dict[str, tuple[int, dict[str, int], int | None]] = {
    "x86_64": (0xC000003E, _X86_64, 0x40000000),  # the x32 ABI sets bit 30 of the number
    "aarch64": (0xC00000B7, _AARCH64, None),
}

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_DENY = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO | EPERM
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build(machine: str) -> bytes | None:
    """The filter for `machine` (os.uname().machine), as bwrap reads it; None without a table."""
    if machine not in _ARCHES:
        return None
    audit_arch, table, abi_cut = _ARCHES[machine]
    nrs = sorted({table[n] for n in BLOCKED if n in table})
    prog = [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ_K, audit_arch, jt=1), _insn(_RET_K, _DENY), _insn(_LD_W_ABS, _NR)]
    tail = len(nrs) + 1  # the jeq's after this point, then ALLOW: jump past them to DENY
    if abi_cut is not None:
        prog.append(_insn(_JGE_K, abi_cut, jt=tail))
    for i, nr in enumerate(nrs):
        prog.append(_insn(_JEQ_K, nr, jt=len(nrs) - i))
    prog += [_insn(_RET_K, _ALLOW), _insn(_RET_K, _DENY)]
    return b"".join(prog)


@functools.cache
def program() -> bytes | None:
    """This machine's filter (built once per process), or None where there is no table."""
    return build(os.uname().machine)

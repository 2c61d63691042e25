//! berth's pause program: the init process of a pod sandbox.
//!
//! It blocks SIGINT, SIGTERM and SIGCHLD and waits for them with
//! `rt_sigtimedwait`: SIGCHLD reaps every exited child (zombies of processes
//! that joined the pod's PID namespace), SIGINT and SIGTERM end it with status
//! 0. Blocked signals are queued even for PID 1 of a PID namespace, which the
//! kernel otherwise shields from signals it has no handler for.
//!
//! Built by the crate's build.rs with `rustc` alone (no std, no libc, raw
//! syscalls) into a static executable of about a kilobyte, because the rootfs it
//! runs from holds nothing else.
#![no_std]
#![no_main]

use core::arch::global_asm;

const SIGINT: usize = 2;
const SIGTERM: usize = 15;
const SIGCHLD: usize = 17;
const SIG_BLOCK: usize = 0;
const WNOHANG: usize = 1;
/// Size of the kernel's signal set, as rt_sigprocmask and rt_sigtimedwait want it.
const SIGSET_SIZE: usize = 8;

#[cfg(target_arch = "x86_64")]
mod sys {
    pub const RT_SIGPROCMASK: usize = 14;
    pub const RT_SIGTIMEDWAIT: usize = 128;
    pub const WAIT4: usize = 61;
    pub const EXIT_GROUP: usize = 231;

    /// A raw Linux system call with up to four arguments.
    pub unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let ret: isize;
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
        ret
    }
}

#[cfg(target_arch = "aarch64")]
mod sys {
    pub const RT_SIGPROCMASK: usize = 135;
    pub const RT_SIGTIMEDWAIT: usize = 137;
    pub const WAIT4: usize = 260;
    pub const EXIT_GROUP: usize = 94;

    /// A raw Linux system call with up to four arguments.
    pub unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let ret: isize;
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b, in("x2") c, in("x3") d,
            options(nostack),
        );
        ret
    }
}

// The kernel enters at _start with the stack 16-byte aligned; align it anyway
// and call into Rust as a normal function call would.
#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym pause_main,
);

#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "bl {main}",
    "brk #0",
    main = sym pause_main,
);

fn exit(code: usize) -> ! {
    // SAFETY: exit_group takes one integer and does not return.
    unsafe {
        sys::syscall4(sys::EXIT_GROUP, code, 0, 0, 0);
    }
    loop {}
}

extern "C" fn pause_main() -> ! {
    let set: u64 = (1 << (SIGINT - 1)) | (1 << (SIGTERM - 1)) | (1 << (SIGCHLD - 1));
    let set_ptr = &set as *const u64 as usize;
    // SAFETY: the syscalls get a valid pointer to a signal set of SIGSET_SIZE
    // bytes that outlives them, and null pointers where the kernel accepts them.
    unsafe {
        if sys::syscall4(sys::RT_SIGPROCMASK, SIG_BLOCK, set_ptr, 0, SIGSET_SIZE) < 0 {
            exit(1);
        }
        loop {
            let sig = sys::syscall4(sys::RT_SIGTIMEDWAIT, set_ptr, 0, 0, SIGSET_SIZE);
            if sig == SIGINT as isize || sig == SIGTERM as isize {
                exit(0);
            }
            // SIGCHLD (or an interrupted wait): reap every child that has exited.
            while sys::syscall4(sys::WAIT4, usize::MAX, 0, WNOHANG, 0) > 0 {}
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(2)
}

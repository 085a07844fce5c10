//! The operating system's randomness and wall clock, drawn from the seed on a simulation's
//! thread, so that a seed replays exactly. Hash maps' keys (the standard library's
//! `RandomState`, and through it tokio's `select!` order), nonces and session ids, and
//! `SystemTime::now()` all come from the C library's `getrandom` and `clock_gettime`: this
//! module defines both for the process that links it. On a thread that [`seed_thread`]
//! marked they answer from a ChaCha stream of the seed and a clock that starts at a fixed
//! instant and moves a microsecond per reading; on every other thread (and for every clock
//! but the wall clock) they pass through to the kernel and the C library.
//!
//! One process replays a seed exactly when it runs only that seed (`CAIRN_SIM_SEED`): tokio
//! counts the runtimes a process builds into the seeds of their schedulers, so a run that
//! follows others in one process draws differently.
// The C library's two entry points are replaced: unavoidably `unsafe`, and only here.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The wall clock a seeded thread starts at: 2026-01-01T00:00:00Z, in nanoseconds.
const WALL_START_NS: u64 = 1_767_225_600_000_000_000;

/// How far a seeded thread's wall clock moves at each reading.
const WALL_STEP_NS: u64 = 1_000;

thread_local! {
    /// The seed's stream on a seeded thread.
    static STREAM: RefCell<Option<ChaCha8Rng>> = const { RefCell::new(None) };
    /// The seeded thread's wall clock, in nanoseconds since the epoch.
    static WALL_NS: Cell<u64> = const { Cell::new(WALL_START_NS) };
}

/// Makes this thread's randomness and wall clock come from `seed`. Call it first thing on a
/// thread of its own: the standard library draws a thread's hash keys once, at its first
/// hash map.
pub fn seed_thread(seed: u64) {
    STREAM.with(|s| *s.borrow_mut() = Some(ChaCha8Rng::seed_from_u64(seed ^ 0xe47_0b1a5)));
    WALL_NS.with(|w| w.set(WALL_START_NS));
}

/// Fills `buf` from this thread's seeded stream; false when the thread is not seeded (or is
/// being torn down).
fn fill_seeded(buf: &mut [u8]) -> bool {
    STREAM
        .try_with(|s| match s.try_borrow_mut() {
            Ok(mut s) => match s.as_mut() {
                Some(rng) => {
                    rng.fill_bytes(buf);
                    true
                }
                None => false,
            },
            Err(_) => false,
        })
        .unwrap_or(false)
}

/// The next reading of this thread's seeded wall clock, if the thread is seeded.
fn seeded_wall_ns() -> Option<u64> {
    let seeded = STREAM
        .try_with(|s| s.try_borrow().is_ok_and(|s| s.is_some()))
        .unwrap_or(false);
    if !seeded {
        return None;
    }
    WALL_NS
        .try_with(|w| {
            let now = w.get();
            w.set(now + WALL_STEP_NS);
            now
        })
        .ok()
}

/// The C library's `getrandom(2)` wrapper: the seed's stream on a seeded thread, the kernel's
/// otherwise.
///
/// # Safety
/// As the C function: `buf` is valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn getrandom(
    buf: *mut libc::c_void,
    len: libc::size_t,
    flags: libc::c_uint,
) -> libc::ssize_t {
    if len > 0 && !buf.is_null() {
        // SAFETY: the caller passes a buffer valid for `len` bytes, as getrandom(2) requires.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        if fill_seeded(out) {
            return libc::ssize_t::try_from(len).unwrap_or(libc::ssize_t::MAX);
        }
    }
    // SAFETY: the system call takes the caller's arguments unchanged.
    let r = unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) };
    libc::ssize_t::try_from(r).unwrap_or(-1)
}

/// The C library's own `clock_gettime`, found past this definition.
type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

fn libc_clock_gettime() -> Option<ClockGettime> {
    static NEXT: OnceLock<Option<ClockGettime>> = OnceLock::new();
    *NEXT.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the C library's symbol.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"clock_gettime".as_ptr()) };
        if f.is_null() {
            None
        } else {
            // SAFETY: the symbol is the C library's clock_gettime, of this signature.
            Some(unsafe { std::mem::transmute::<*mut libc::c_void, ClockGettime>(f) })
        }
    })
}

/// The C library's `clock_gettime`: the seeded wall clock for `CLOCK_REALTIME` on a seeded
/// thread, the C library's (or the kernel's) otherwise.
///
/// # Safety
/// As the C function: `tp` is valid for a write of one `timespec`.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(
    clock: libc::clockid_t,
    tp: *mut libc::timespec,
) -> libc::c_int {
    if clock == libc::CLOCK_REALTIME && !tp.is_null() {
        if let Some(ns) = seeded_wall_ns() {
            let secs = libc::time_t::try_from(ns / 1_000_000_000).unwrap_or(libc::time_t::MAX);
            let nanos = libc::c_long::try_from(ns % 1_000_000_000).unwrap_or(0);
            // SAFETY: the caller passes a valid timespec, as clock_gettime requires.
            unsafe {
                (*tp).tv_sec = secs;
                (*tp).tv_nsec = nanos;
            }
            return 0;
        }
    }
    match libc_clock_gettime() {
        // SAFETY: the C library's own function with the caller's arguments.
        Some(f) => unsafe { f(clock, tp) },
        None => {
            // SAFETY: the system call takes the caller's arguments unchanged.
            let r = unsafe { libc::syscall(libc::SYS_clock_gettime, clock, tp) };
            libc::c_int::try_from(r).unwrap_or(-1)
        }
    }
}

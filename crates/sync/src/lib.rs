//! [`SpinLock`]: a lock whose release is a plain store, for the critical
//! sections on a same-host message's path that two threads rarely contend
//! for and that last a few hundred instructions at most (a CQ's queued
//! completions, a QP's express cells in `softrdma-transport`).
//!
//! `std::sync::Mutex` releases with an atomic swap, since it must learn
//! whether a thread sleeps on it: a locked instruction, which waits until
//! every earlier store has left the core. A busy-polled SEND took and
//! released seven such locks at each end; with the completion queue's four
//! on this lock instead, `ib_send_lat` went 0.436 → 0.426 µs (BENCHMARKS.md,
//! "Locked instructions off a message's path").
//!
//! A waiter spins a little, then yields its CPU at every try: on a small
//! VM the holder may have been descheduled, and a waiter that kept
//! spinning would only delay it. No waiter ever sleeps in the kernel, so
//! this is for short sections only; anything that may block (a system
//! call, a wait for another lock held long) keeps `std::sync::Mutex`.
//!
//! The crate's `unsafe` is the cell behind the lock: the flag's
//! acquire/release pair makes one guard at a time, and the value is only
//! reached through a guard.
#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Spins before a waiter starts yielding. A `pause` is ~27 ns on this
/// machine (two added ~55 ns to an empty poll, BENCHMARKS.md "Locked
/// instructions off a message's path"): 64 cover ~1.7 µs, several times
/// the longest section held under this lock.
const SPINS: u32 = 64;

/// A value behind a lock that is taken with a compare-and-swap and
/// released with a store ([`SpinGuard`]'s drop, also while unwinding: a
/// panic never leaves it taken, and there is no poisoning).
pub struct SpinLock<T> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value moves with the lock; it is reached only through a
// guard, and a guard exists for one thread at a time (see `lock`).
unsafe impl<T: Send> Send for SpinLock<T> {}
// SAFETY: as above: sharing the lock shares access to `T` one guard at a
// time, which is what `Mutex<T>: Sync` requires of `T` too (`Send`).
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A lock around `value`, not taken.
    pub const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning and then yielding while another thread
    /// holds it.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let mut tries = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            // Read until it looks free: a failed swap would take the
            // holder's line away from it on every try.
            while self.taken.load(Ordering::Relaxed) {
                if tries < SPINS {
                    tries += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            // Made only when won: a guard's drop releases the lock.
            .then(|| SpinGuard { lock: self })
    }

    /// The value, through an exclusive borrow of the lock (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The value, the lock consumed.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: Default> Default for SpinLock<T> {
    fn default() -> SpinLock<T> {
        SpinLock::new(T::default())
    }
}

impl<T> fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The value is not shown: that would take the lock.
        f.debug_struct("SpinLock")
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The lock held: the value, until the guard is dropped.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (it won the flag's swap), so
        // nothing else reaches the value until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this borrow the only one.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release: what the holder wrote is seen by the next taker's
        // acquire.
        self.lock.taken.store(false, Ordering::Release);
    }
}

impl<T: fmt::Debug> fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

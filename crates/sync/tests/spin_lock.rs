//! `SpinLock` excludes: four threads adding under it lose no addition;
//! a holder that panics releases it; `try_lock` fails while it is held.

use softrdma_sync::SpinLock;
use std::sync::Arc;

#[test]
fn four_threads_adding_under_the_lock_lose_nothing() {
    let lock = Arc::new(SpinLock::new((0u64, 0u64)));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..100_000 {
                    let mut g = lock.lock();
                    // Two words changed apart: a torn section shows as a
                    // difference between them.
                    g.0 += 1;
                    std::hint::black_box(&mut *g);
                    g.1 += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let g = lock.lock();
    assert_eq!(*g, (400_000, 400_000));
}

#[test]
fn a_holder_that_panics_releases_the_lock() {
    let lock = Arc::new(SpinLock::new(7u32));
    let l = Arc::clone(&lock);
    let r = std::thread::spawn(move || {
        let _g = l.lock();
        panic!("inside the section");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(*lock.try_lock().expect("released while unwinding"), 7);
}

#[test]
fn try_lock_fails_while_held_and_succeeds_after() {
    let lock = SpinLock::new(String::from("a"));
    let mut g = lock.lock();
    g.push('b');
    assert!(lock.try_lock().is_none());
    drop(g);
    assert_eq!(lock.try_lock().as_deref().map(String::as_str), Some("ab"));
    assert_eq!(lock.into_inner(), "ab");
}

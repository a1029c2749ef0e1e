use super::*;

use std::fs::{OpenOptions, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicU32;
use std::time::SystemTime;

/// A fresh base directory under the system temp dir, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> TestDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!(
            "softrdma-host-unit-{}-{name}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&p);
        TestDir(p)
    }

    fn registry(&self) -> Registry {
        Registry::open_in(&self.0).unwrap()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A registry in exactly `dir` (another namespace's, for the sweep test).
fn registry_at(dir: &Path) -> Registry {
    fsutil::ensure_private_dir(dir).unwrap();
    Registry {
        dir: dir.to_path_buf(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn assert_addr_in_use(r: io::Result<PortLease>) {
    let e = r.expect_err("expected EADDRINUSE");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
}

fn files_with_prefix(reg: &Registry, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(reg.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn remove_index_moves_last_into_hole() {
    let mut g = GroupState {
        epoch: 1,
        members: vec![10, 20, 30, 40],
    };
    g.remove_index(1);
    assert_eq!(g.members, [10, 40, 30]);
    g.remove_index(2); // the last one: nothing moves
    assert_eq!(g.members, [10, 40]);
    g.remove_index(5); // out of range: unchanged
    assert_eq!(g.members, [10, 40]);
    g.remove_index(0);
    assert_eq!(g.members, [40]);
    g.remove_index(0);
    assert!(g.members.is_empty());
    g.remove_index(0);
    assert_eq!(g.epoch, 1);
}

#[test]
fn directories_are_created_private() {
    let t = TestDir::new("private");
    let reg = t.registry();
    for d in [&t.0, &reg.dir().to_path_buf()] {
        let md = fs::symlink_metadata(d).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.mode() & 0o777, 0o700, "{}", d.display());
        assert_eq!(md.uid(), fsutil::euid());
    }
    let ns = reg.dir().file_name().unwrap().to_str().unwrap();
    let expect = format!("net-{}", fs::metadata("/proc/self/ns/net").unwrap().ino());
    assert_eq!(ns, expect);
    // Reopening an existing, correct registry works.
    assert_eq!(t.registry().dir(), reg.dir());
}

#[test]
fn group_or_world_accessible_dirs_are_refused() {
    let t = TestDir::new("mode");
    fs::create_dir(&t.0).unwrap();
    fs::set_permissions(&t.0, Permissions::from_mode(0o755)).unwrap();
    let e = Registry::open_in(&t.0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("0755"), "{e}");

    // The namespace subdirectory gets the same check.
    fs::set_permissions(&t.0, Permissions::from_mode(0o700)).unwrap();
    let reg = t.registry();
    fs::set_permissions(reg.dir(), Permissions::from_mode(0o750)).unwrap();
    let e = Registry::open_in(&t.0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn symlinks_and_non_directories_are_refused() {
    let t = TestDir::new("symlink");
    fs::create_dir(&t.0).unwrap();
    fs::set_permissions(&t.0, Permissions::from_mode(0o700)).unwrap();
    let real = t.0.join("real");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, Permissions::from_mode(0o700)).unwrap();
    let link = t.0.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = Registry::open_in(&link).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("symbolic link"), "{e}");

    let file = t.0.join("file");
    fs::write(&file, b"").unwrap();
    let e = Registry::open_in(&file).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn dirs_owned_by_someone_else_are_refused() {
    let t = TestDir::new("owner");
    let target = if fsutil::euid() == 0 {
        // As root we can make a directory someone else's.
        fs::create_dir(&t.0).unwrap();
        fs::set_permissions(&t.0, Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&t.0, Some(65534), Some(65534)).unwrap();
        t.0.clone()
    } else {
        // Otherwise a root-owned directory is someone else's.
        PathBuf::from("/")
    };
    let e = Registry::open_in(&target).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("owned by uid"), "{e}");
}

#[test]
fn flock_conflicts_between_open_file_descriptions_of_one_process() {
    let t = TestDir::new("ofd");
    let reg = t.registry();
    let path = reg.dir().join("x");
    let a = fsutil::open_or_create(&path).unwrap();
    let b = fsutil::open_or_create(&path).unwrap();
    assert!(fsutil::flock(&a, libc::LOCK_EX | libc::LOCK_NB).unwrap());
    assert!(!fsutil::flock(&b, libc::LOCK_SH | libc::LOCK_NB).unwrap());
    assert!(!fsutil::flock(&b, libc::LOCK_EX | libc::LOCK_NB).unwrap());
    drop(a);
    assert!(fsutil::flock(&b, libc::LOCK_EX | libc::LOCK_NB).unwrap());

    // Hence our own member counts as alive for our own probes.
    let m = reg.join().unwrap();
    assert!(reg.is_alive(m.slot()));
    let slot = m.slot();
    drop(m);
    assert!(!reg.is_alive(slot));
}

#[test]
fn a_thread_asking_again_for_the_lock_it_holds_gets_edeadlk() {
    // flock(2) would wait forever here (locks belong to open file
    // descriptions): what an exit hook run from a signal handler that
    // interrupted the registry did.
    let t = TestDir::new("edeadlk");
    let reg = t.registry();
    let g = reg.lock().unwrap();
    let e = reg.lock().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Deadlock, "{e}");
    assert!(reg.join().is_err(), "join takes the lock too");
    // Another thread waits as before, and gets it once released.
    let dir = reg.dir().to_path_buf();
    let waiter = std::thread::spawn(move || registry_at(&dir).lock().map(drop));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished());
    drop(g);
    waiter.join().unwrap().unwrap();
    drop(reg.lock().unwrap());
}

/// Another namespace's sweep removes a member-less registry under its lock
/// (`sweep_namespaces`); a process that waited for that lock, as one
/// opening the reused directory does, must not end up holding a lock on the
/// removed file: the lock is taken again, on the directory made anew.
#[test]
fn a_lock_waited_for_across_a_sweep_is_taken_on_the_new_directory() {
    let t = TestDir::new("swept-while-waiting");
    let reg = t.registry();
    let dir = reg.dir().to_path_buf();
    let g = reg.lock().unwrap();
    let d = dir.clone();
    let waiter = std::thread::spawn(move || {
        let other = Registry { dir: d.clone() };
        let guard = other.lock().unwrap();
        // Held on the file now at the path: nobody else can take it.
        let path = d.join(format::LOCK_NAME);
        let again = fsutil::open_or_create(&path).unwrap();
        let taken_by_us = !fsutil::flock(&again, libc::LOCK_EX | libc::LOCK_NB).unwrap();
        drop(guard);
        taken_by_us
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished());
    fs::remove_dir_all(&dir).unwrap();
    drop(g);
    assert!(
        waiter.join().unwrap(),
        "the lock is on the directory's lock file"
    );
    assert!(dir.join(format::LOCK_NAME).exists());
}

/// A registry read while a sweep that removed its directory still holds
/// the old lock reads as the empty registry, made anew, not as an error.
#[test]
fn a_registry_read_while_a_sweep_removes_it_is_empty_not_an_error() {
    let t = TestDir::new("read-while-swept");
    let reg = t.registry();
    let dir = reg.dir().to_path_buf();
    let d = dir.clone();
    // The sweep's hold of the lock, in another thread (a guard is per thread).
    let (removed, done) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let sweep = std::thread::spawn(move || {
        let other = Registry { dir: d.clone() };
        let g = other.lock().unwrap();
        fs::remove_dir_all(&d).unwrap();
        removed.0.send(()).unwrap();
        done.1.recv().unwrap();
        drop(g);
    });
    removed.1.recv().unwrap();
    assert!(!dir.exists());
    assert!(reg.members().unwrap().is_empty());
    assert!(dir.exists(), "made again");
    done.0.send(()).unwrap();
    sweep.join().unwrap();
}

/// Waits up to `secs` for our child `pid` to exit; its exit code, or `None`
/// (then it is killed and reaped).
fn wait_child(pid: libc::pid_t, secs: u64) -> Option<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let mut status = 0;
        // SAFETY: polls our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// pyverbs' rdmacm tests fork their two sides while the parent's progress
/// thread may be inside the registry (a scan every 100 ms with the
/// same-host path). Each child inherited the open file description of the
/// registry lock; the lock went with the parent's *close*, which left the
/// child's descriptor holding it, and the child then waited in `join` for
/// itself forever (both sides stuck in flock, found with gdb and
/// /proc/locks). The holder releases with `LOCK_UN` now.
#[test]
fn a_child_forked_while_another_thread_holds_the_lock_can_join_once_it_is_released() {
    let t = TestDir::new("fork-join");
    let reg = t.registry();
    let dir = reg.dir().to_path_buf();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let reg = registry_at(&dir);
        let g = reg.lock().unwrap();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        drop(g);
    });
    held_rx.recv().unwrap();
    // SAFETY: the child only joins the registry in a directory of its own
    // test (file system calls and allocation, which glibc keeps usable after
    // fork) and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let code = match reg.join() {
            Ok(m) => {
                // Its slot is really held (the lock is this process's).
                let alive = reg.is_alive(m.slot());
                std::mem::forget(m);
                if alive { 0 } else { 2 }
            }
            Err(_) => 1,
        };
        // SAFETY: leaves the forked child at once.
        unsafe { libc::_exit(code) };
    }
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(
        wait_child(child, 10),
        Some(0),
        "the child joined after the parent released the lock (None: it waited for \
         the lock its inherited descriptor held)"
    );
    // And the parent can take it again.
    drop(reg.lock().unwrap());
}

/// The other half of `LockedFile`: a forked child that drops its copy of
/// the parent's guard (a parent's object freed in the child) must not
/// release the parent's lock.
#[test]
fn a_child_dropping_its_copy_of_a_guard_leaves_the_parents_lock_held() {
    let t = TestDir::new("fork-drop");
    let reg = t.registry();
    let g = reg.lock().unwrap();
    let other = fsutil::open_or_create(&reg.dir().join(format::LOCK_NAME)).unwrap();
    // SAFETY: the child only drops its copy of the guard (a flock call, a
    // thread-local update and a close) and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        drop(g);
        // SAFETY: leaves the forked child at once.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(wait_child(child, 10), Some(0));
    assert!(
        !fsutil::flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap(),
        "the parent still holds the registry lock"
    );
    drop(g);
    assert!(fsutil::flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap());
}

#[test]
fn slots_prefer_never_used_and_keep_generations() {
    let t = TestDir::new("slots");
    let reg = t.registry();
    let m1 = reg.join().unwrap();
    let m2 = reg.join().unwrap();
    let m3 = reg.join().unwrap();
    assert_eq!([m1.slot(), m2.slot(), m3.slot()], [1, 2, 3]);
    assert_eq!(
        [m1.generation(), m2.generation(), m3.generation()],
        [1, 1, 1]
    );
    assert!(reg.is_alive(2));
    assert!(!reg.is_alive(4) && !reg.is_alive(0));
    assert_eq!(reg.generation(2), Some(1));
    assert_eq!(reg.generation(4), None);
    assert_eq!(reg.live_generation(2), Some(1));
    assert_eq!(reg.live_generation(4), None);
    assert_eq!(reg.live_generation(0), None);

    drop(m2);
    assert!(!reg.is_alive(2));
    assert_eq!(reg.live_generation(2), None, "a freed slot has no holder");
    assert_eq!(
        reg.generation(2),
        Some(1),
        "a dead slot keeps its generation"
    );
    // A never-used slot beats the one just freed.
    let m4 = reg.join().unwrap();
    assert_eq!(m4.slot(), 4);

    let mine: Vec<u8> = reg.members().unwrap().iter().map(|m| m.slot).collect();
    assert_eq!(mine, [1, 3, 4]);
    let info = reg.members().unwrap()[0];
    assert_eq!(
        info,
        MemberInfo {
            slot: 1,
            generation: 1,
            pid: std::process::id()
        }
    );
}

#[test]
fn full_table_and_quarantine_order() {
    let t = TestDir::new("quarantine");
    let reg = t.registry();
    // Two dead slots left by earlier holders: slot 1 died unnoticed (freed_ms 0, it will
    // be dated when first seen dead), slot 2 was released long ago.
    let dead = |slot: u8, generation: u64, freed_ms: u64| {
        let rec = SlotRecord {
            generation,
            pid: 1,
            taken_ms: 1_000,
            freed_ms,
        };
        fs::write(reg.dir().join(format::slot_name(slot)), rec.render()).unwrap();
    };
    dead(1, 7, 0);
    dead(2, 3, 2_000);

    // Never-used slots come first.
    let mut held: Vec<Member> = (3..=MAX_SLOT).map(|_| reg.join().unwrap()).collect();
    let slots: Vec<u8> = held.iter().map(Member::slot).collect();
    assert_eq!(slots, (3..=MAX_SLOT).collect::<Vec<u8>>());
    // Then the one freed longest ago, then the one whose death was just noticed.
    let m2 = reg.join().unwrap();
    assert_eq!((m2.slot(), m2.generation()), (2, 4));
    let m1 = reg.join().unwrap();
    assert_eq!((m1.slot(), m1.generation()), (1, 8));

    let e = reg.join().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert_eq!(reg.members().unwrap().len(), 255);

    // Release 10, later 5: 10 is reused first (freed longer ago), then 5.
    let i10 = held.iter().position(|m| m.slot() == 10).unwrap();
    drop(held.swap_remove(i10));
    std::thread::sleep(Duration::from_millis(5));
    let i5 = held.iter().position(|m| m.slot() == 5).unwrap();
    drop(held.swap_remove(i5));
    let a = reg.join().unwrap();
    let b = reg.join().unwrap();
    assert_eq!((a.slot(), a.generation()), (10, 2));
    assert_eq!((b.slot(), b.generation()), (5, 2));
}

#[test]
fn port_conflicts_follow_bind_rules() {
    let t = TestDir::new("ports");
    let reg = t.registry();
    let m = reg.join().unwrap();
    let a1 = ip("10.0.0.1");
    let a2 = ip("10.0.0.2");

    let l = reg.reserve_port(&m, PS_TCP, a1, 7000).unwrap();
    assert_eq!(
        (l.space(), l.addr(), l.port(), l.slot()),
        (PS_TCP, a1, 7000, m.slot())
    );
    // Same space, port and address; also its IPv4-mapped form.
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, a1, 7000));
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("::ffff:10.0.0.1"), 7000));
    // Wildcard over a specific one, either family.
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("0.0.0.0"), 7000));
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("::"), 7000));
    // Different port, different specific address, different space: fine.
    let _p = reg.reserve_port(&m, PS_TCP, a1, 7001).unwrap();
    let _a = reg.reserve_port(&m, PS_TCP, a2, 7000).unwrap();
    let _s = reg.reserve_port(&m, PS_UDP, a1, 7000).unwrap();
    let _i = reg.reserve_port(&m, PS_IB, ip("::"), 7000).unwrap();

    // Specific under a wildcard, both families.
    let _w = reg.reserve_port(&m, PS_TCP, ip("0.0.0.0"), 8000).unwrap();
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, a1, 8000));
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("::1"), 8000));
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("::"), 8000));
    let _w6 = reg.reserve_port(&m, PS_TCP, ip("::"), 8001).unwrap();
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("0.0.0.0"), 8001));
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, a2, 8001));
    let _v6 = reg.reserve_port(&m, PS_TCP, ip("fe80::1"), 8002).unwrap();
    let _v6b = reg.reserve_port(&m, PS_TCP, ip("fe80::2"), 8002).unwrap();
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("fe80::1"), 8002));
}

#[test]
fn ephemeral_ports_are_distinct_and_in_range() {
    let t = TestDir::new("ephemeral");
    let reg = t.registry();
    let m = reg.join().unwrap();
    let leases: Vec<PortLease> = (0..64)
        .map(|i| {
            // Mix addresses: an ephemeral port is unique in its space on every address.
            let a = if i % 2 == 0 {
                ip("10.0.0.1")
            } else {
                ip("10.0.0.2")
            };
            reg.reserve_port(&m, PS_TCP, a, 0).unwrap()
        })
        .collect();
    let ports: HashSet<u16> = leases.iter().map(PortLease::port).collect();
    assert_eq!(ports.len(), leases.len());
    assert!(ports.iter().all(|p| EPHEMERAL_PORTS.contains(p)));
}

#[test]
fn leases_are_released_on_drop() {
    let t = TestDir::new("drop");
    let reg = t.registry();
    let m = reg.join().unwrap();
    let l = reg.reserve_port(&m, PS_TCP, ip("127.0.0.1"), 9000).unwrap();
    assert_eq!(
        files_with_prefix(&reg, "port-"),
        ["port-0106-9000-127.0.0.1"]
    );
    drop(l);
    assert!(files_with_prefix(&reg, "port-").is_empty());
    let l = reg.reserve_port(&m, PS_TCP, ip("127.0.0.1"), 9000).unwrap();
    assert_eq!(l.port(), 9000);
}

#[test]
fn dead_and_garbage_lease_files_are_cleaned() {
    let t = TestDir::new("stale-leases");
    let reg = t.registry();
    let m = reg.join().unwrap();
    // An unlocked lease file (its holder died), one with garbage contents, one with a
    // name we never create, and an old abandoned temporary file.
    let rec = LeaseRecord {
        slot: 9,
        generation: 1,
        listening: true,
    };
    fs::write(
        reg.dir()
            .join(format::lease_name(PS_TCP, 9100, ip("10.0.0.1"))),
        rec.render(),
    )
    .unwrap();
    fs::write(
        reg.dir().join("port-0106-9101-10.0.0.1"),
        b"\xff\x00garbage",
    )
    .unwrap();
    fs::write(reg.dir().join("port-nonsense"), b"").unwrap();
    let tmp_old = reg.dir().join(".tmp-1-1");
    fs::write(&tmp_old, b"").unwrap();
    File::options()
        .write(true)
        .open(&tmp_old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let tmp_new = reg.dir().join(".tmp-1-2");
    fs::write(&tmp_new, b"").unwrap();

    assert!(reg.listeners(ip("10.0.0.1")).unwrap().is_empty());
    let _l = reg.reserve_port(&m, PS_TCP, ip("10.0.0.1"), 9100).unwrap();
    let _g = reg.reserve_port(&m, PS_TCP, ip("10.0.0.1"), 9101).unwrap();
    assert_eq!(
        files_with_prefix(&reg, "port-"),
        ["port-0106-9100-10.0.0.1", "port-0106-9101-10.0.0.1"]
    );
    assert!(
        !tmp_old.exists(),
        "an old unlocked temporary file is removed"
    );
    assert!(tmp_new.exists(), "a fresh one may be in the making");
}

#[test]
fn a_held_lease_with_garbage_contents_still_blocks_its_port() {
    let t = TestDir::new("garbage-held");
    let reg = t.registry();
    let m = reg.join().unwrap();
    let path = reg
        .dir()
        .join(format::lease_name(PS_TCP, 9200, ip("0.0.0.0")));
    fs::write(&path, b"softrdma-lease 1\nslot=oops\n").unwrap();
    let holder = OpenOptions::new().read(true).open(&path).unwrap();
    assert!(fsutil::flock(&holder, libc::LOCK_EX | libc::LOCK_NB).unwrap());
    assert_addr_in_use(reg.reserve_port(&m, PS_TCP, ip("10.0.0.1"), 9200));
    assert!(reg.listeners(ip("10.0.0.1")).unwrap().is_empty());
}

#[test]
fn garbage_slot_and_group_files_are_treated_as_absent() {
    let t = TestDir::new("garbage");
    let reg = t.registry();
    fs::write(reg.dir().join("slot-1"), b"\x00\x01 not a record").unwrap();
    fs::write(reg.dir().join("slot-2"), vec![b'x'; 100_000]).unwrap();
    fs::create_dir(reg.dir().join("slot-3")).unwrap();
    fs::write(
        reg.dir().join(format::group_name(ip("10.0.0.1"))),
        "epoch=1",
    )
    .unwrap();
    assert_eq!(reg.generation(1), None);
    assert_eq!(reg.generation(2), None);
    assert_eq!(reg.generation(3), None);
    assert!(reg.members().unwrap().is_empty());
    {
        let g = reg.lock().unwrap();
        assert_eq!(
            reg.read_group(&g, ip("10.0.0.1")).unwrap(),
            GroupState::default()
        );
    }
    // Unreadable slots count as never used; the directory one is skipped.
    let a = reg.join().unwrap();
    let b = reg.join().unwrap();
    let c = reg.join().unwrap();
    assert_eq!([a.slot(), b.slot(), c.slot()], [1, 2, 4]);
    assert_eq!(a.generation(), 1);
    assert_eq!(reg.generation(1), Some(1));
}

#[test]
fn listeners_match_address_and_wildcards() {
    let t = TestDir::new("listeners");
    let reg = t.registry();
    let m1 = reg.join().unwrap();
    let m2 = reg.join().unwrap();
    let spec = reg.reserve_port(&m1, PS_TCP, ip("10.0.0.1"), 7471).unwrap();
    let any = reg.reserve_port(&m2, PS_TCP, ip("::"), 7472).unwrap();
    let other = reg.reserve_port(&m2, PS_UDP, ip("10.0.0.2"), 7473).unwrap();
    assert!(
        reg.listeners(ip("10.0.0.1")).unwrap().is_empty(),
        "not listening yet"
    );
    for l in [&spec, &any, &other] {
        l.set_listening(true).unwrap();
        assert!(l.is_listening());
    }
    assert_eq!(
        reg.listeners(ip("10.0.0.1")).unwrap(),
        [(PS_TCP, 7471, m1.slot()), (PS_TCP, 7472, m2.slot())]
    );
    assert_eq!(
        reg.listeners(ip("::ffff:10.0.0.2")).unwrap(),
        [(PS_TCP, 7472, m2.slot()), (PS_UDP, 7473, m2.slot())]
    );
    assert_eq!(
        reg.listeners(ip("fe80::9")).unwrap(),
        [(PS_TCP, 7472, m2.slot())]
    );
    assert_eq!(reg.listeners(ip("0.0.0.0")).unwrap().len(), 3);
    any.set_listening(false).unwrap();
    drop(other);
    assert_eq!(reg.listeners(ip("10.0.0.2")).unwrap(), []);
    assert_eq!(
        reg.listeners(ip("10.0.0.1")).unwrap(),
        [(PS_TCP, 7471, m1.slot())]
    );
}

#[test]
fn lease_holders_are_found_until_released() {
    let t = TestDir::new("holders");
    let reg = t.registry();
    let _m1 = reg.join().unwrap();
    let m2 = reg.join().unwrap();
    let any = ip("0.0.0.0");
    assert_eq!(reg.lease_holder(PS_MAD_CLASS, 0x0401, any).unwrap(), None);
    let l = reg.reserve_port(&m2, PS_MAD_CLASS, any, 0x0401).unwrap();
    assert_eq!(
        reg.lease_holder(PS_MAD_CLASS, 0x0401, any).unwrap(),
        Some(m2.slot()),
        "listening or not"
    );
    assert_eq!(reg.lease_holder(PS_MAD_CLASS, 0x0402, any).unwrap(), None);
    assert_eq!(reg.lease_holder(PS_TCP, 0x0401, any).unwrap(), None);
    assert!(reg.listeners(any).unwrap().is_empty(), "not a listener");
    assert_addr_in_use(reg.reserve_port(&m2, PS_MAD_CLASS, any, 0x0401));
    drop(l);
    assert_eq!(reg.lease_holder(PS_MAD_CLASS, 0x0401, any).unwrap(), None);
}

#[test]
fn group_state_round_trips_under_the_lock() {
    let t = TestDir::new("group");
    let reg = t.registry();
    let m1 = reg.join().unwrap();
    let m2 = reg.join().unwrap();
    let addr = ip("fe80::1");
    let s = GroupState {
        epoch: 3,
        members: vec![m2.slot(), m1.slot()],
    };
    {
        let g = reg.lock().unwrap();
        assert_eq!(reg.read_group(&g, addr).unwrap(), GroupState::default());
        reg.write_group(&g, addr, &s).unwrap();
        assert_eq!(reg.read_group(&g, addr).unwrap(), s);
        // Other addresses are separate groups, the IPv4-mapped form included.
        assert_eq!(
            reg.read_group(&g, ip("::ffff:10.0.0.1")).unwrap(),
            GroupState::default()
        );
        let bad = GroupState {
            epoch: 1,
            members: vec![0],
        };
        assert_eq!(
            reg.write_group(&g, addr, &bad).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // A guard of another registry is no proof of holding this one's lock.
        let t2 = TestDir::new("group-other");
        let other = t2.registry();
        let g2 = other.lock().unwrap();
        assert_eq!(
            reg.read_group(&g2, addr).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
    // Once every member of a recorded group is dead, the record is gone.
    drop(m1);
    {
        let g = reg.lock().unwrap();
        reg.gc(&g).unwrap();
        assert_eq!(reg.read_group(&g, addr).unwrap(), s, "m2 still lives");
    }
    drop(m2);
    let g = reg.lock().unwrap();
    reg.gc(&g).unwrap();
    assert_eq!(reg.read_group(&g, addr).unwrap(), GroupState::default());
    assert!(
        !fs::read_dir(reg.dir())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("group-")),
        "group file left behind"
    );
}

#[test]
fn reports_are_per_epoch_and_vanish_with_their_member() {
    let t = TestDir::new("reports");
    let reg = t.registry();
    let m1 = reg.join().unwrap();
    let m2 = reg.join().unwrap();
    let a = ip("10.0.0.1");
    reg.report_index(&m1, a, 5, 1).unwrap();
    reg.report_index(&m2, a, 5, 0).unwrap();
    reg.report_index(&m2, ip("10.0.0.2"), 5, 7).unwrap();
    assert_eq!(
        reg.read_reports(a, 5).unwrap(),
        [(m1.slot(), 1), (m2.slot(), 0)]
    );
    assert_eq!(reg.read_reports(a, 4).unwrap(), []);
    // A newer report replaces the member's older one.
    reg.report_index(&m1, a, 6, 0).unwrap();
    assert_eq!(reg.read_reports(a, 6).unwrap(), [(m1.slot(), 0)]);
    assert_eq!(reg.read_reports(a, 5).unwrap(), [(m2.slot(), 0)]);

    // A dead member's reports stop counting and are removed; a new holder of the same
    // slot does not inherit them.
    let slot1 = m1.slot();
    drop(m1);
    let m1b = reg.join().unwrap(); // slot 3 (never used)
    drop(m2);
    let again = reg.join().unwrap();
    assert_ne!(again.slot(), slot1);
    assert_eq!(reg.read_reports(a, 6).unwrap(), []);
    assert!(files_with_prefix(&reg, "report-").is_empty());
    drop(m1b);
}

#[test]
fn registry_lock_excludes_other_handles() {
    let t = TestDir::new("lock");
    let reg = t.registry();
    let other = reg.clone();
    let g = reg.lock().unwrap();
    let got = std::sync::Arc::new(AtomicBool::new(false));
    let got2 = got.clone();
    let h = std::thread::spawn(move || {
        let _g = other.lock().unwrap();
        got2.store(true, Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!got.load(Ordering::SeqCst), "second lock() must wait");
    drop(g);
    h.join().unwrap();
    assert!(got.load(Ordering::SeqCst));
}

#[test]
fn racing_reservations_have_one_winner() {
    let t = TestDir::new("race");
    let reg = t.registry();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let reg = Registry::open_in(&t.0).unwrap();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let m = reg.join().unwrap();
                let addr = if i % 2 == 0 {
                    ip("0.0.0.0")
                } else {
                    ip("10.0.0.1")
                };
                barrier.wait();
                let r = reg.reserve_port(&m, PS_TCP, addr, 4444);
                // Keep the winner's lease until every thread has tried.
                barrier.wait();
                r.map(|l| l.port()).map_err(|e| e.raw_os_error())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| *r == Ok(4444) || *r == Err(Some(libc::EADDRINUSE)))
    );
    assert!(reg.members().unwrap().is_empty());
}

#[test]
fn idle_registries_of_other_namespaces_without_members_are_swept() {
    let t = TestDir::new("sweep");
    let base = t.0.clone();
    let own = t.registry();
    let old = SystemTime::now() - 2 * IDLE_NAMESPACE;
    // A namespace gone long ago: a dead member's slot file, untouched for 2 minutes.
    let gone = base.join("net-1111");
    let ghost = registry_at(&gone);
    drop(ghost.join().unwrap());
    // One with a live member, also untouched for long.
    let busy = base.join("net-2222");
    let live = registry_at(&busy);
    let member = live.join().unwrap();
    // One without members but touched just now.
    let fresh = base.join("net-3333");
    drop(registry_at(&fresh).join().unwrap());
    // Another UDP port's device, in a namespace gone long ago.
    let port = base.join("port-5000");
    let port_ns = port.join("net-4444");
    fsutil::ensure_private_dir(&port).unwrap();
    drop(registry_at(&port_ns).join().unwrap());
    for d in [&gone, &busy, &port_ns, &port] {
        File::open(d).unwrap().set_modified(old).unwrap();
    }
    drop(t.registry());
    assert!(!gone.exists(), "idle, memberless: swept");
    assert!(!port.exists(), "another port's, idle and memberless: swept");
    assert!(busy.exists(), "a live member keeps it");
    assert!(fresh.exists(), "recently used: kept");
    assert!(own.dir().exists());
    drop(member);
}

#[test]
fn inboxes_are_found_by_slot_and_vanish_with_their_member() {
    let t = TestDir::new("inboxes");
    let reg = t.registry();
    let m1 = reg.join().unwrap();
    assert_eq!(reg.inbox(m1.slot()), None, "nothing published yet");
    reg.publish_inbox(&m1, 17).unwrap();
    let info = reg.inbox(m1.slot()).unwrap();
    assert_eq!(info.fd, 17);
    assert_eq!(info.pid, std::process::id());
    assert_eq!(info.generation, m1.generation());
    assert_eq!(reg.inbox(0), None);
    let slot = m1.slot();
    drop(m1);
    assert_eq!(reg.inbox(slot), None, "a dead member has no inbox");
    // The next scan under the lock removes its file.
    let _m2 = reg.join().unwrap();
    assert!(files_with_prefix(&reg, "inbox-").is_empty());
}

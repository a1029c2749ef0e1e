//! Runs the built `softrdma` binary on the golden captures and on damaged copies.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PCAPS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/pcaps");
const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

fn golden() -> Vec<PathBuf> {
    let dir = Path::new(PCAPS);
    assert!(
        dir.is_dir(),
        "golden captures not found at {PCAPS}: testdata/pcaps is part of the repository"
    );
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 16,
        "expected the 16 golden captures, found {}",
        v.len()
    );
    v
}

fn softrdma(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().expect("run softrdma")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("utf-8 output")
}

/// Parses the final `N packets, N ok, N bad` line.
fn summary(stdout: &str) -> (u64, u64, u64) {
    let last = stdout.lines().last().expect("some output");
    let nums: Vec<u64> = last
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(
        last.starts_with(&format!(
            "{} packets, {} ok, {} bad",
            nums[0], nums[1], nums[2]
        )),
        "summary line: {last:?}"
    );
    (nums[0], nums[1], nums[2])
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn every_golden_capture_decodes_clean() {
    let mut total = 0;
    for f in golden() {
        let out = softrdma(&["decode".as_ref(), f.as_os_str()]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {stdout}{}",
            f.display(),
            text(&out.stderr)
        );
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        let (n, ok, bad) = summary(&stdout);
        assert!(n > 0, "{}", f.display());
        assert_eq!((ok, bad), (n, 0), "{}", f.display());
        // One line per packet plus the summary, every packet line with a verdict.
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len() as u64, n + 1, "{}", f.display());
        assert!(
            lines[..lines.len() - 1]
                .iter()
                .all(|l| l.ends_with(" icrc ok"))
        );
        total += n;
    }
    assert_eq!(total, 1823);
}

#[test]
fn several_files_give_one_total() {
    let files = golden();
    let args: Vec<&std::ffi::OsStr> = std::iter::once("decode".as_ref())
        .chain(files.iter().map(|p| p.as_os_str()))
        .collect();
    let out = softrdma(&args);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert_eq!(summary(&stdout), (1823, 1823, 0));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("# ")).count(),
        files.len()
    );
    let quiet = softrdma(&[&["decode".as_ref(), "-q".as_ref()][..], &args[1..]].concat());
    assert_eq!(text(&quiet.stdout), "1823 packets, 1823 ok, 0 bad\n");
}

#[test]
fn rping_lines_show_cm_messages() {
    let out = softrdma(&[
        "decode".as_ref(),
        Path::new(PCAPS).join("rping.pcap").as_os_str(),
    ]);
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap();
    assert!(
        first.starts_with("    1    0.000000 10.77.0.3:55410 > 10.77.0.2:4791 UD_SEND_ONLY"),
        "{first}"
    );
    for m in ["CM REQ[", "CM REP[", "CM RTU[", "CM DREQ[", "CM DREP["] {
        assert_eq!(stdout.matches(m).count(), 1, "{m} in\n{stdout}");
    }
}

#[test]
fn corrupted_copy_fails_with_one_bad_packet() {
    let src = Path::new(PCAPS).join("rc_pingpong_small.pcap");
    let mut bytes = std::fs::read(&src).unwrap();
    // Frame 3's last byte is its ICRC's most significant byte: 24-byte file
    // header, then records of 16-byte header + frame.
    let mut off = 24;
    for _ in 0..2 {
        let incl = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    let incl = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
    bytes[off + 16 + incl - 1] ^= 0x80;
    let bad = tmp("corrupt.pcap");
    std::fs::write(&bad, &bytes).unwrap();
    let out = softrdma(&["decode".as_ref(), bad.as_os_str()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(summary(&stdout), (40, 39, 1));
    let line = stdout.lines().find(|l| l.contains("BAD")).unwrap();
    assert!(line.trim_start().starts_with("3 "), "{line}");
    assert!(line.contains("icrc BAD (carried 0x"), "{line}");

    // A capture cut in the middle of its last record.
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let out = softrdma(&["decode".as_ref(), cut.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(summary(&stdout), (40, 38, 2));
    assert!(stdout.contains("ERROR truncated record"), "{stdout}");
}

#[test]
fn errors_are_one_line_on_stderr() {
    let missing = tmp("does-not-exist.pcap");
    let garbage = tmp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture file at all").unwrap();
    for (path, what) in [(&missing, "No such file"), (&garbage, "not a pcap file")] {
        let out = softrdma(&["decode".as_ref(), path.as_os_str()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("softrdma: error: ") && err.contains(what),
            "{err}"
        );
    }
    // Usage errors come from clap, also with status 2.
    let out = softrdma(&["decode".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_and_port_option() {
    let out = softrdma(&["--help".as_ref()]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("decode"));
    let out = softrdma(&["decode".as_ref(), "--help".as_ref()]);
    let help = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        help.contains("--port") && help.contains("FILE.pcap"),
        "{help}"
    );
    // Nothing in the captures goes to port 9: all frames are skipped.
    let f = Path::new(PCAPS).join("udaddy.pcap");
    let out = softrdma(&[
        "decode".as_ref(),
        "--port".as_ref(),
        "9".as_ref(),
        f.as_os_str(),
    ]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        "0 packets, 0 ok, 0 bad (12 other frames skipped)\n"
    );
}

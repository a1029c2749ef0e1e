//! The transport fuzz harness ([`softrdma_sim::fuzz::run`]) over a fixed set
//! of inputs, as an ordinary test: every file of `fuzz/corpus/transport-seed/`
//! (seeds and past findings of `cargo fuzz run transport`), programs built
//! from a seeded generator (biased towards real traffic, towards attacks, and
//! plain random bytes), and byte-level mutations of all of them. Deterministic
//! and a few seconds long; the fuzz target explores further.
//!
//! Each input must run without a panic (the harness panics when memory
//! outside a registered region is touched or changes); over the whole set the
//! paths that matter must have been reached (access violations refused,
//! duplicates answered, bad ICRCs and strangers dropped, completions made),
//! so a harness that silently stopped exercising the transport fails too.

use softrdma_sim::fuzz::{Outcome, run};
use softrdma_transport::Rng;
use std::path::PathBuf;

/// Generated programs per flavour.
const PROGRAMS: usize = 1500;
/// Mutations of each program and seed file.
const MUTATIONS: usize = 3;

/// Step kinds of the harness (`step`: the first byte modulo 12).
const FORGE: u8 = 0;
const RAW: u8 = 3;
const POST_SEND: u8 = 4;
const POST_RECV: u8 = 6;
const DELIVER: u8 = 7;
const ADVANCE: u8 = 9;
const CHURN: u8 = 10;
const MISC: u8 = 11;

/// A program of `steps` steps whose kinds follow `weights` (kind, weight);
/// each step's arguments are random bytes.
fn program(rng: &mut Rng, steps: usize, weights: &[(u8, u64)]) -> Vec<u8> {
    let total: u64 = weights.iter().map(|w| w.1).sum();
    let mut v = Vec::new();
    for _ in 0..steps {
        let mut x = rng.below(total);
        let kind = weights
            .iter()
            .find(|(_, w)| {
                if x < *w {
                    true
                } else {
                    x -= w;
                    false
                }
            })
            .map_or(0, |w| w.0);
        v.push(kind + 12 * (rng.below(20) as u8));
        // Arguments: enough random bytes for the longest step (a forged
        // packet reads about 80); unused ones start the next step.
        let n = 8 + rng.below(90) as usize;
        v.extend((0..n).map(|_| rng.next_u32() as u8));
    }
    v
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        if v.is_empty() {
            v.push(rng.next_u32() as u8);
        }
        let i = rng.below(v.len() as u64) as usize;
        match rng.below(4) {
            0 => v[i] ^= 1 << rng.below(8),
            1 => v[i] = rng.next_u32() as u8,
            2 => v.insert(i, rng.next_u32() as u8),
            _ => {
                v.remove(i);
            }
        }
    }
    v
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/transport-seed")
}

#[derive(Default)]
struct Totals {
    runs: u64,
    steps: u64,
    delivered: u64,
    completions: u64,
    violations: u64,
    duplicates: u64,
    bad_icrc: u64,
    bad_addr: u64,
    malformed: u64,
    unknown_qpn: u64,
    naks: u64,
    retransmits: u64,
}

impl Totals {
    fn add(&mut self, o: &Outcome) {
        self.runs += 1;
        self.steps += o.steps as u64;
        self.delivered += o.delivered;
        self.completions += o.completions;
        for s in &o.stats {
            self.violations += s.access_violations;
            self.duplicates += s.rx_duplicates;
            self.bad_icrc += s.drop_bad_icrc;
            self.bad_addr += s.drop_bad_addr;
            self.malformed += s.drop_malformed;
            self.unknown_qpn += s.drop_unknown_qpn;
            self.naks += s.tx_nak_other + s.tx_nak_seq;
            self.retransmits += s.retransmits;
        }
    }
}

fn run_one(name: &str, input: &[u8], t: &mut Totals) {
    let r = std::panic::catch_unwind(|| run(input));
    match r {
        Ok(o) => t.add(&o),
        Err(_) => {
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            panic!(
                "fuzz harness failed on {name} ({} bytes): save it with\n  \
                 echo {hex} | xxd -r -p > fuzz/corpus/transport-seed/crash-<name>\n\
                 and replay with `cargo test -p softrdma-sim --test fuzz_smoke`",
                input.len()
            );
        }
    }
}

#[test]
fn transport_survives_hostile_programs() {
    let t0 = std::time::Instant::now();
    let mut rng = Rng::new(0x5EED_F022);
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir(corpus_dir()) {
        let mut files: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            inputs.push((f.display().to_string(), std::fs::read(&f).unwrap()));
        }
    }
    let seeds = inputs.len();
    // Real traffic with some loss and reordering, and deregistrations.
    let traffic = [
        (POST_SEND, 6),
        (POST_RECV, 4),
        (DELIVER, 8),
        (ADVANCE, 1),
        (CHURN, 1),
        (MISC, 1),
    ];
    // Attacks among real traffic.
    let attacks = [
        (FORGE, 8),
        (RAW, 2),
        (POST_SEND, 3),
        (POST_RECV, 2),
        (DELIVER, 5),
        (ADVANCE, 1),
        (CHURN, 1),
    ];
    for i in 0..PROGRAMS {
        let steps = 10 + rng.below(60) as usize;
        inputs.push((format!("traffic #{i}"), program(&mut rng, steps, &traffic)));
        inputs.push((format!("attack #{i}"), program(&mut rng, steps, &attacks)));
        let n = rng.below(600) as usize;
        inputs.push((
            format!("random #{i}"),
            (0..n).map(|_| rng.next_u32() as u8).collect(),
        ));
    }
    let originals = inputs.len();
    for i in 0..originals {
        for m in 0..MUTATIONS {
            let v = mutate(&mut rng, &inputs[i].1);
            inputs.push((format!("{} mutation {m}", inputs[i].0), v));
        }
    }
    let mut t = Totals::default();
    for (name, input) in &inputs {
        run_one(name, input, &mut t);
    }
    println!(
        "{} inputs ({seeds} from the corpus) in {:.1?}: {} steps, {} packets delivered, \
         {} completions, {} access violations refused, {} duplicates, {} bad ICRC, \
         {} strangers, {} malformed, {} unknown QPN, {} NAKs, {} retransmits",
        t.runs,
        t0.elapsed(),
        t.steps,
        t.delivered,
        t.completions,
        t.violations,
        t.duplicates,
        t.bad_icrc,
        t.bad_addr,
        t.malformed,
        t.unknown_qpn,
        t.naks,
        t.retransmits
    );
    assert_eq!(t.runs as usize, inputs.len());
    for (what, n) in [
        ("completions", t.completions),
        ("access violations", t.violations),
        ("duplicates", t.duplicates),
        ("bad ICRCs", t.bad_icrc),
        ("packets from strangers", t.bad_addr),
        ("malformed packets", t.malformed),
        ("unknown QPNs", t.unknown_qpn),
        ("NAKs", t.naks),
        ("retransmits", t.retransmits),
    ] {
        assert!(
            n > 0,
            "no {what} in the whole run: the harness lost its reach"
        );
    }
}

/// Writes the seed corpus of `cargo fuzz run transport` (8 traffic and 8
/// attack programs from the same generator). Run by hand:
/// `cargo test -p softrdma-sim --test fuzz_smoke -- --ignored write_seed_corpus`.
#[test]
#[ignore = "writes fuzz/corpus/transport-seed/"]
fn write_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng::new(0xC0_4905);
    for i in 0..8 {
        let traffic = [(POST_SEND, 6), (POST_RECV, 4), (DELIVER, 8), (ADVANCE, 1)];
        let attacks = [(FORGE, 8), (RAW, 2), (POST_SEND, 3), (DELIVER, 5)];
        let steps = 20 + rng.below(40) as usize;
        std::fs::write(
            dir.join(format!("traffic-{i}")),
            program(&mut rng, steps, &traffic),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("attack-{i}")),
            program(&mut rng, steps, &attacks),
        )
        .unwrap();
    }
}

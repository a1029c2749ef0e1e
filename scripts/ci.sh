#!/usr/bin/env bash
# softrdma's whole test suite, as CI runs it on a fresh machine.
#
#   ./scripts/ci.sh            everything (installs missing Debian packages first)
#
# Steps: Debian packages the tests use (reference headers and unmodified
# rdma-core programs), formatting, clippy, the C-ABI libraries
# (cargo xtask compat -> target/compat/), then every test of the workspace
# and rdma-core's own test suite (pyverbs) against the C-ABI libraries.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s ===\n' "$*"; }

step "Debian packages"
./scripts/install-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc --no-deps (no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --all-features --quiet

step "cargo xtask compat (target/compat/libibverbs.so.1, librdmacm.so.1, libibumad.so.3)"
cargo xtask compat

step "cargo test"
cargo test --workspace --no-fail-fast

step "the compat suite and rdmalib again over UDP on loopback (SOFTRDMA_SHM=0)"
# The run above carried traffic between processes of this host through the
# same-host path (shared memory, the default); these keep it on UDP, the
# path between hosts.
SOFTRDMA_SHM=0 cargo test --no-fail-fast -p softrdma-compat-tests \
    --test pingpong --test perftest --test rdmacm --test rsocket --test umad
SOFTRDMA_SHM=0 cargo test --no-fail-fast -p softrdma-rdmalib
SOFTRDMA_SHM=0 cargo test --no-fail-fast -p softrdma --test faults_kill

step "rdma-core's pyverbs test suite against target/compat (scripts/pyverbs.sh)"
# Prints a SKIPPED line and succeeds only if python3-pyverbs cannot be installed.
./scripts/pyverbs.sh

step "pyverbs again through softrdma run (the /dev and /sys view test_rdmacm needs)"
# test_rdmacm skips in the run above: it wants /sys/class/infiniband/<dev>/device/net.
# The whole suite runs again so one run shows every test that can pass.
cargo build --quiet --bin softrdma
./target/debug/softrdma run -- ./scripts/pyverbs.sh
# Again over UDP (SOFTRDMA_SHM=0) rather than the same-host path.
SOFTRDMA_SHM=0 ./scripts/pyverbs.sh
SOFTRDMA_SHM=0 ./target/debug/softrdma run -- ./scripts/pyverbs.sh test_rdmacm

step "cargo test, async (tokio) features"
cargo test -p softrdma --features tokio --no-fail-fast --lib --test cm_async --test rsocket

step "valgrind on the C ABI (short)"
./scripts/valgrind.sh

step "live interop with Linux rxe (skips itself when the machine cannot run the lab)"
./scripts/interop.sh

step "all tests passed"

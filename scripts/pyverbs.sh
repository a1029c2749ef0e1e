#!/usr/bin/env bash
# Runs rdma-core's own test suite (Debian's python3-pyverbs: pyverbs plus the
# tests in /usr/share/doc/rdma-core/tests) against softrdma's libibverbs.so.1.
#
#   ./scripts/pyverbs.sh                 the whole suite
#   ./scripts/pyverbs.sh test_qpex mw    only tests whose id contains a word
#   PYVERBS_VERBOSE=1 ./scripts/pyverbs.sh   also list every skip reason
#
# pyverbs is a Cython extension linked against libibverbs.so.1 and
# librdmacm.so.1; LD_LIBRARY_PATH=target/compat makes it load ours (built by
# `cargo xtask compat` if missing; CARGO_TARGET_DIR moves target/ as it does
# for cargo). The suite is copied to target/pyverbs/
# (Debian gzips most of it) and run with Debian's /usr/bin/python3. Tests pick
# the first device (softrdma0) and its first non-zero GID (index 0, the
# RoCEv2 IPv4-mapped address). Vendor-specific tests (mlx5, efa, ...) skip
# through the suite's own mechanism: the verb they need fails with EOPNOTSUPP.
#
# As root it lends the 2 MB huge-page pool 16 pages for the run (below).
#
# Prints pass/fail/skip counts per test file and every failure; exits non-zero
# on any failure or error. Without python3-pyverbs (and no way to install it)
# it prints a SKIPPED line and exits 0. docs/CONFORMANCE.md says what is
# expected to skip and why.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
case ${CARGO_TARGET_DIR:-} in
  "") TARGET=$ROOT/target ;;
  /*) TARGET=$CARGO_TARGET_DIR ;;
  *) TARGET=$ROOT/$CARGO_TARGET_DIR ;;
esac
SUITE=/usr/share/doc/rdma-core/tests
PY=/usr/bin/python3
OUT=$TARGET/pyverbs

have_pyverbs() {
  [ -x "$PY" ] && [ -f "$SUITE/run_tests.py" ] && "$PY" -c 'import pyverbs.device' 2>/dev/null
}

if ! have_pyverbs; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing python3-pyverbs"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends python3-pyverbs ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pyverbs; }; } \
      >/dev/null 2>&1 || true
  fi
  if ! have_pyverbs; then
    echo "SKIPPED: pyverbs test suite (python3-pyverbs is not installed and cannot be installed)"
    exit 0
  fi
fi

if [ ! -f "$TARGET/compat/libibverbs.so.1" ] || [ ! -f "$TARGET/compat/librdmacm.so.1" ]; then
  cargo xtask compat
fi

rm -rf "$OUT"
mkdir -p "$OUT"
cp -r "$SUITE" "$OUT/tests"
find "$OUT/tests" -name '*.gz' -exec gunzip -f {} +

cat >"$OUT/runner.py" <<'EOF'
"""Loads rdma-core's test package as run_tests.py does, runs it and prints
pass/fail/skip counts per test file. Exit status 1 on any failure."""
import collections, faulthandler, os, sys, time, unittest
import importlib.machinery

tests_dir = sys.argv[1]
words = sys.argv[2:]
verbose = os.environ.get("PYVERBS_VERBOSE", "") not in ("", "0")
sys.path.insert(0, os.path.dirname(tests_dir))
sys.path.insert(0, tests_dir)
sys.argv = [sys.argv[0]]
from args_parser import parser  # noqa: E402  (the suite's own argument parser)
parser.parse_args()
pkg = importlib.machinery.SourceFileLoader(
    "tests", os.path.join(tests_dir, "__init__.py")).load_module()
suite = unittest.defaultTestLoader.loadTestsFromModule(pkg)


def flatten(s):
    for t in s:
        if isinstance(t, unittest.TestSuite):
            yield from flatten(t)
        else:
            yield t


cases = [t for t in flatten(suite) if not words or any(w in t.id() for w in words)]
PER_TEST_LIMIT = 120  # seconds; a hung test dumps its stack and ends the run


def file_of(test):
    parts = test.id().split(".")
    for p in parts:
        if p.startswith("test_"):
            return p
    return parts[0]


class Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.counts = collections.defaultdict(lambda: [0, 0, 0])  # pass fail skip
        self.problems = []
        self.skips = []

    def startTest(self, test):
        super().startTest(test)
        faulthandler.dump_traceback_later(PER_TEST_LIMIT, exit=True)
        self.t0 = time.monotonic()
        if verbose:
            print(f"  {test.id()} ...", end="", flush=True)

    def stopTest(self, test):
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)

    def _note(self, word):
        if verbose:
            print(f" {word} ({time.monotonic() - self.t0:.1f}s)", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.counts[file_of(test)][0] += 1
        self._note("ok")

    def _fail(self, test, err, kind):
        self.counts[file_of(test)][1] += 1
        tb = self._exc_info_to_string(err, test)
        self.problems.append((test.id(), kind, tb))
        self._note(kind)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err, "FAIL")

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err, "ERROR")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.counts[file_of(test)][2] += 1
        self.skips.append((test.id(), reason))
        self._note("skip")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.addSuccess(test)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.counts[file_of(test)][0] += 1


t0 = time.monotonic()
res = Result()
unittest.TestSuite(cases).run(res)
elapsed = time.monotonic() - t0

for tid, kind, tb in res.problems:
    print(f"\n=== {kind}: {tid}\n{tb.rstrip()}")
if verbose:
    print("\nskipped:")
    for tid, why in res.skips:
        print(f"  {tid}: {why}")

print(f"\n{'file':<28}{'pass':>6}{'fail':>6}{'skip':>6}")
tot = [0, 0, 0]
for f in sorted(res.counts):
    p, fl, s = res.counts[f]
    tot = [tot[0] + p, tot[1] + fl, tot[2] + s]
    print(f"{f:<28}{p:>6}{fl:>6}{s:>6}")
print(f"{'total':<28}{tot[0]:>6}{tot[1]:>6}{tot[2]:>6}   ({len(cases)} tests, {elapsed:.1f}s)")
sys.exit(1 if tot[1] else 0)
EOF

# Three tests register memory on 2 MB huge pages (test_odp's two huge-page
# tests, test_parent_domain's test_huge_page_traffic) and skip when the pool
# is empty. As root, lend the pool 16 pages (32 MB: both sides of a test and a
# page the test maps itself, with room for pages Python frees late) for the
# run and give the old size back on exit. PYVERBS_HUGEPAGES=0: leave it.
HUGE=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
if [ "${PYVERBS_HUGEPAGES:-16}" != 0 ] && [ "$(id -u)" -eq 0 ] && [ -w "$HUGE" ]; then
  old_huge=$(cat "$HUGE")
  if [ "$old_huge" -lt "${PYVERBS_HUGEPAGES:-16}" ]; then
    trap 'echo "$old_huge" >"$HUGE"' EXIT
    echo "${PYVERBS_HUGEPAGES:-16}" >"$HUGE" 2>/dev/null || true
    # Fragmented memory may give fewer pages: then none (the tests skip
    # rather than fail to map).
    if [ "$(cat "$HUGE")" -lt "${PYVERBS_HUGEPAGES:-16}" ]; then
      echo "$old_huge" >"$HUGE"
      echo "note: no room for ${PYVERBS_HUGEPAGES:-16} huge pages; huge-page tests will skip"
    fi
  fi
fi

cd "$OUT"
echo "pyverbs suite from $SUITE against $TARGET/compat"
LD_LIBRARY_PATH="$TARGET/compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$PY" "$OUT/runner.py" "$OUT/tests" "$@"

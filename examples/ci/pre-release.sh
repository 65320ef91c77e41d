#!/usr/bin/env bash
# Pre-release gate for a KV connector repository: run before tagging a
# release. It fails (non-zero) if kvaudit's own fault campaign misses a
# fault, or if any transfer in the given dump directories does not verify.
#
#   examples/ci/pre-release.sh DUMPS...
#
# Each DUMPS directory holds producer/ and consumer/ (one rank per
# .safetensors file or dump directory), written by your connector's
# end-to-end test with examples/vllm/dump_kv.py. Set KVAUDIT to a kvaudit
# binary, or have one on PATH (go install
# github.com/kvaudit/kvaudit/cmd/kvaudit@latest).
set -euo pipefail

kvaudit="${KVAUDIT:-kvaudit}"
trials="${TRIALS:-50}"
report="${REPORT_DIR:-kvaudit-report}"
mkdir -p "$report"

if [ "$#" -eq 0 ]; then
  echo "usage: $0 DUMPS..." >&2
  exit 3
fi

echo "== $("$kvaudit" version)"

status=0
echo "== self-test: $trials seeded trials of every fault kind on synthetic transfers"
"$kvaudit" campaign --trials "$trials" --junit "$report/campaign.xml" > "$report/campaign.md" -o markdown || status=1

for dir in "$@"; do
  name=$(basename "$dir")
  echo "== $dir: producer vs consumer"
  # one run: the verdict in markdown, JUnit beside it, the exit code
  code=0
  "$kvaudit" diff "$dir/producer" "$dir/consumer" -o markdown --junit "$report/$name.xml" > "$report/$name.md" || code=$?
  if [ "$code" -eq 0 ]; then
    echo "   verified"
    echo "== $dir: fault campaign on the real dumps"
    "$kvaudit" campaign "$dir/producer" "$dir/consumer" --trials 10 --junit "$report/$name-campaign.xml" -o markdown > "$report/$name-campaign.md" || status=1
  else
    status=1
    case $code in
      1) echo "   MISMATCH: see $report/$name.md" ;;
      2) echo "   UNVERIFIED: see $report/$name.md" ;;
      *) echo "   invalid input (exit $code)" ;;
    esac
    echo "   (no fault campaign on a pair that does not verify)"
  fi
done

if [ "$status" -ne 0 ]; then
  echo "pre-release check FAILED (reports in $report/)" >&2
else
  echo "pre-release check passed (reports in $report/)"
fi
exit "$status"

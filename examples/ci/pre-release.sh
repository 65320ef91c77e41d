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

echo "== kvaudit $("$kvaudit" version)"

echo "== self-test: $trials seeded trials of every fault kind on synthetic transfers"
"$kvaudit" campaign --trials "$trials" -o junit > "$report/campaign.xml"

status=0
for dir in "$@"; do
  name=$(basename "$dir")
  echo "== $dir: producer vs consumer"
  if "$kvaudit" diff "$dir/producer" "$dir/consumer" -o markdown > "$report/$name.md"; then
    echo "   verified"
  else
    code=$?
    status=1
    case $code in
      1) echo "   MISMATCH: see $report/$name.md" ;;
      2) echo "   UNVERIFIED: see $report/$name.md" ;;
      *) echo "   invalid input (exit $code)" ;;
    esac
  fi
  "$kvaudit" diff "$dir/producer" "$dir/consumer" -o junit > "$report/$name.xml" || true
  echo "== $dir: fault campaign on the real dumps"
  "$kvaudit" campaign "$dir/producer" "$dir/consumer" --trials 10 -o junit > "$report/$name-campaign.xml" || status=1
done

if [ "$status" -ne 0 ]; then
  echo "pre-release check FAILED (reports in $report/)" >&2
else
  echo "pre-release check passed (reports in $report/)"
fi
exit "$status"

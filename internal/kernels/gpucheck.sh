#!/usr/bin/env bash
# gpucheck.sh: the GPU engine's checks on a GPU machine, in two halves.
#
#   internal/kernels/gpucheck.sh build [DIR]    here, with Go and Debian's CUDA toolkit:
#       builds kvaudit (pure Go), kvaudit-cuda (-tags cuda), the cuda test
#       binaries of kernels and of the runner, and synth dumps of every
#       preset and layout (TP, PP, consumers with a prefix hit, kernel-block
#       splits) into DIR (default out/gpucheck, git-ignored; a
#       few tens of MB, to carry to the GPU machine).
#   internal/kernels/gpucheck.sh device [DIR]   there, from the repository root, with
#       a CUDA driver, python3 and PyTorch but no Go:
#         1. the device: nvidia-smi, kvaudit-cuda info
#         2. device tests: the GPU equals the reference engine on every synth
#            preset, layout, TP, PP, kernel-block split and format, on odd
#            and random geometries, staged and in place, every load variant
#         3. runner tests: the same through the protocol (kvaudit-cuda serve)
#         4. the CLI: kvaudit checksum --engine cuda equals --engine cpu on
#            every side of DIR/dumps, in both numberings (--numbering
#            request and block, -o json) and as records (-o record: each
#            rank's values and values_block), in what the cuda engine
#            computes: vLLM's values; the cpu engine's mix check (mix,
#            docs/spec.md §14), which checksum.cu does not compute yet, is
#            left out of the comparison unless the cuda output has it too
#            (same_as_cuda)
#         5. live memory: examples/vllm/export_ipc.py --self-test --kvaudit
#            DIR/kvaudit (PyTorch tensors exported as cuda_ipc sources, read
#            in place; cuda on the live tensors equals cpu on copied dumps in
#            both numberings; a byte changed in device memory is found at its
#            block position and nowhere else)
#         6. bandwidth: kvaudit bench --engine cuda on a 4 GiB cache on the
#            device (the kernel's read bandwidth beside a plain-read kernel
#            and a device-to-device copy, in the same run; target: 85% of the
#            copy's read), and on the seeds' shape, 2048 blocks x 8 heads x
#            16 tokens x 128 bf16 K+V (128 MiB; the Triton kernel's 0.039 ms)
#         7. end to end: kvaudit checksum --engine cuda vs cpu on a ~1 GB dump
#       It logs to $OUT/gpucheck.log (or DIR/results/) and ends with a
#       summary; the exit status is the number of failed steps.
#
# With the device tool: `run` with carry ["out/gpucheck"] and the command
#   bash internal/kernels/gpucheck.sh device out/gpucheck
# and a timeout of about 480 s (the steps take 3 to 5 minutes).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
half=${1:-}
dir=${2:-out/gpucheck}

build() {
	set -e
	export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
	export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
	rm -rf "$dir"
	mkdir -p "$dir/dumps"
	echo "building into $dir"
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$dir/kvaudit" ./cmd/kvaudit
	CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -tags cuda -o "$dir/kvaudit-cuda" ./cmd/kvaudit-cuda
	CGO_ENABLED=1 go test -c -trimpath -ldflags="-s -w" -tags cuda -o "$dir/kvaudit-cuda.test" ./cmd/kvaudit-cuda
	CGO_ENABLED=1 go test -c -trimpath -ldflags="-s -w" -tags cuda -o "$dir/kernels.test" ./internal/kernels
	local presets layouts formats i=0
	presets=$("$dir/kvaudit" synth --help | sed -n 's/.*model preset: \([a-z0-9, -]*\).*/\1/p' | tr -d ',')
	layouts="flash nhd hnd packed packed-token-major"
	formats=(safetensors dir raw)
	for p in ${presets:-tiny llama mla swa indexer}; do
		for l in $layouts; do
			local f=${formats[$((i % 3))]}
			local args=(--preset "$p" --layout "$l" --format "$f" --seed $((100 + i)) --layers 2 --requests 2 --tokens 35)
			case $((i % 4)) in
			1) args+=(--tp 2) ;;
			2) args+=(--tp 4 --pp 2) ;;
			3) args+=(--tp 2 --role consumer --prefix-tokens 16) ;;
			esac
			# kernel-block splits: vLLM blocks of 32 tokens held as kernel
			# blocks of 16 (one side in five)
			if [ $((i % 5)) -eq 2 ]; then args+=(--block-size 32 --kernel-block-size 16); fi
			"$dir/kvaudit" synth --out "$dir/dumps/$p-$l" "${args[@]}" >/dev/null
			i=$((i + 1))
		done
	done
	du -sh "$dir" "$dir"/* | sed 's/^/  /'
	local total
	total=$(du -sm "$dir" | cut -f1)
	if [ "$total" -ge 60 ]; then
		echo "$dir is $total MB: over what a device call carries (64 MiB)" >&2
		exit 1
	fi
	echo "ready: carry $dir and run: bash internal/kernels/gpucheck.sh device $dir"
}

device() {
	dir=$(cd "$dir" && pwd)
	local out=${OUT:-$dir/results}
	mkdir -p "$out"
	exec > >(tee "$out/gpucheck.log") 2>&1
	export KVAUDIT_CUDA_RUNNER="$dir/kvaudit-cuda" PYTHONUNBUFFERED=1
	local failed=0 summary=()
	step() { printf '\n==> %s [%s]\n' "$1" "$(date +%T)"; }
	record() { # name status detail
		summary+=("$(printf '%-4s %s: %s' "$2" "$1" "$3")")
		[ "$2" = ok ] || failed=$((failed + 1))
	}
	# same_as_cuda CPU CUDA: the JSON documents of two outputs (one, or
	# records one after the other) are equal in what the cuda engine
	# computes; the cpu engine's "mix" is dropped when the cuda output has
	# none (checksum.cu has no mix step yet: internal/kernels/README.md).
	same_as_cuda() {
		[ -s "$1" ] && python3 - "$1" "$2" <<'PY'
import json, sys
def docs(path):
    text, dec, i, out = open(path).read(), json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        v, i = dec.raw_decode(text, i)
        out.append(v)
def has(v, key):
    if isinstance(v, dict):
        return key in v or any(has(e, key) for e in v.values())
    return isinstance(v, list) and any(has(e, key) for e in v)
def drop(v, key):
    if isinstance(v, dict):
        return {k: drop(e, key) for k, e in v.items() if k != key}
    if isinstance(v, list):
        return [drop(e, key) for e in v]
    return v
cpu, cuda = docs(sys.argv[1]), docs(sys.argv[2])
if not has(cuda, "mix"):
    cpu = drop(cpu, "mix")
sys.exit(0 if cpu == cuda else 1)
PY
	}

	step "1. device"
	nvidia-smi -L || true
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
	if "$dir/kvaudit-cuda" info; then record device ok "$("$dir/kvaudit-cuda" info | head -1)"; else
		record device FAIL "kvaudit-cuda info failed (see the log): nothing else can work"
		printf '%s\n' "${summary[@]}"
		return 1
	fi

	step "2. device tests (GPU vs reference, in process)"
	if timeout 300 "$dir/kvaudit-cuda.test" -test.v -test.count=1 -test.timeout 290s >"$out/device-tests.log" 2>&1; then
		record "device tests" ok "$(grep -c '^--- PASS' "$out/device-tests.log") passed"
	else
		grep -E '^(--- FAIL|FAIL|panic)|_test.go:' "$out/device-tests.log" | head -40
		record "device tests" FAIL "see device-tests.log"
	fi
	grep -A14 'TestDeviceBench' "$out/device-tests.log" | grep -E 'kernel|copy|read' | head -5

	step "3. runner tests (GPU vs reference through kvaudit-cuda serve)"
	if (cd internal/kernels && KVAUDIT_REQUIRE_GPU=1 timeout 300 "$dir/kernels.test" -test.run GPU -test.v -test.count=1) >"$out/runner-tests.log" 2>&1; then
		record "runner tests" ok "$(grep -c '^--- PASS' "$out/runner-tests.log") passed"
	else
		grep -E '^(--- FAIL|FAIL|panic)|_test.go:' "$out/runner-tests.log" | head -40
		record "runner tests" FAIL "see runner-tests.log"
	fi

	step "4. kvaudit checksum --engine cuda equals --engine cpu on every side, both numberings (vLLM's values)"
	local n=0 same=0 d num
	for d in "$dir"/dumps/*/*; do
		for num in request block record; do
			local args=(--numbering "$num" -o json)
			[ "$num" = record ] && args=(--partial -o record)
			n=$((n + 1))
			"$dir/kvaudit" checksum --engine cpu "${args[@]}" "$d" >"$out/cpu.json" 2>"$out/cpu.err"
			if timeout 120 "$dir/kvaudit" checksum --engine cuda "${args[@]}" "$d" >"$out/cuda.json" 2>"$out/cuda.err" &&
				same_as_cuda "$out/cpu.json" "$out/cuda.json"; then
				same=$((same + 1))
			else
				echo "DIFFERS ($num): $d"
				cat "$out/cpu.err" "$out/cuda.err"
				diff "$out/cpu.json" "$out/cuda.json" | head -10
			fi
		done
	done
	if [ "$n" -gt 0 ] && [ "$same" -eq "$n" ]; then record "CLI cuda = cpu" ok "$same/$n (side, numbering) runs"; else record "CLI cuda = cpu" FAIL "$same/$n (side, numbering) runs"; fi

	step "5. live memory: export_ipc.py --self-test (CUDA IPC, both numberings, a changed byte found at its block)"
	if timeout 300 python3 examples/vllm/export_ipc.py --self-test --kvaudit "$dir/kvaudit" 2>&1 | tee "$out/ipc.log"; then
		record "IPC self-test" ok "$(grep -c '^ok ' "$out/ipc.log") configurations"
	else
		record "IPC self-test" FAIL "see ipc.log"
	fi

	step "6. bandwidth: kvaudit bench --engine cuda, a 4 GiB cache and the seeds' shape"
	local size label
	for size in 4GiB 128MiB; do
		label="bench $size"
		[ "$size" = 128MiB ] && label="bench 2048x8x16x128 bf16 K+V"
		if timeout 180 "$dir/kvaudit" bench --engine cuda --size "$size" --reps 20 -o json >"$out/bench-$size.json" 2>"$out/bench-$size.err"; then
			local line
			line=$(python3 - "$out/bench-$size.json" "$size" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, p, q = (r["bytes"] / r[k] for k in ("checksum_seconds", "copy_seconds", "read_seconds"))
s = (f"{r['cache']}: kernel {r['checksum_seconds']*1e3:.3f} ms, {c/1e9:.0f} GB/s = {c/p:.2f}x the copy's read "
     f"({p/1e9:.0f} GB/s; target 0.85x), {c/q:.2f}x the plain-read kernel ({q/1e9:.0f} GB/s); {r['verified_rows']} rows verified")
good = c / p >= 0.85
if sys.argv[2] == "128MiB":
    ahead = r["checksum_seconds"] < 0.039e-3
    good = good and ahead
    s += f"; the Triton kernel (seeds): 0.039 ms, 3440 GB/s: {'ahead' if ahead else 'BEHIND'}"
print(("ok   " if good else "LOW  ") + s)
PY
)
			echo "$line"
			case $line in
			"ok   "*) record "$label" ok "${line#ok   }" ;;
			*) record "$label" FAIL "${line#LOW  }" ;;
			esac
		else
			cat "$out/bench-$size.err"
			record "$label" FAIL "see bench-$size.err"
		fi
	done
	timeout 120 "$dir/kvaudit" bench --engine cuda --size 4GiB --reps 20 2>&1 | tee "$out/bench.txt" || true

	step "7. end to end: a ~1 GB dump, --engine cuda vs cpu (page cache warm)"
	local big=/tmp/gpucheck-big
	rm -rf "$big"
	if "$dir/kvaudit" synth --out "$big" --preset llama --layers 32 --tokens 8192 --requests 1 --num-blocks 520 >/dev/null; then
		"$dir/kvaudit" checksum -o json "$big/producer" >"$out/big-cpu.json"
		local t0 t1 t2
		t0=$(date +%s.%N)
		"$dir/kvaudit" checksum --engine cpu -o json "$big/producer" >"$out/big-cpu.json"
		t1=$(date +%s.%N)
		"$dir/kvaudit" checksum --engine cuda -o json "$big/producer" >"$out/big-cuda.json"
		t2=$(date +%s.%N)
		local times
		times=$(python3 -c "import sys; a,b,c=map(float,sys.argv[1:]); print(f'cpu {b-a:.2f} s, cuda {c-b:.2f} s (runner start included)')" "$t0" "$t1" "$t2")
		if same_as_cuda "$out/big-cpu.json" "$out/big-cuda.json"; then record "1 GB dump" ok "equal; $times"; else record "1 GB dump" FAIL "checks differ; $times"; fi
	else
		record "1 GB dump" FAIL "synth failed"
	fi
	rm -rf "$big"

	printf '\n==> summary\n'
	printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
	return "$failed"
}

case $half in
build) build ;;
device) device ;;
*)
	sed -n '2,30p' "$0" >&2
	exit 3
	;;
esac

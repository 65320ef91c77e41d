#!/usr/bin/env bash
# gpucheck.sh: the GPU engine's checks on a GPU machine, in two halves.
#
#   internal/kernels/gpucheck.sh build [DIR]    here, with Go and Debian's CUDA toolkit:
#       builds kvaudit (pure Go), kvaudit-cuda (-tags cuda), the cuda test
#       binaries of kernels and of the runner, and synth dumps of every
#       preset and layout into DIR (default out/gpucheck, git-ignored; a
#       few tens of MB, to carry to the GPU machine).
#   internal/kernels/gpucheck.sh device [DIR]   there, from the repository root, with
#       a CUDA driver, python3 and PyTorch but no Go:
#         1. the device: nvidia-smi, kvaudit-cuda info
#         2. device tests: the GPU equals the reference engine on every synth
#            preset, layout, TP, PP, kernel-block split and format, on odd
#            and random geometries, staged and in place, every load variant
#         3. runner tests: the same through the protocol (kvaudit-cuda serve)
#         4. the CLI: kvaudit checksum --engine cuda equals --engine cpu on
#            every dump of DIR/dumps
#         5. live memory: examples/vllm/export_ipc.py --self-test (PyTorch
#            tensors exported as cuda_ipc sources, read in place)
#         6. bandwidth: kvaudit-cuda bench on a 4 GiB cache allocated on the
#            device: the kernel's read bandwidth beside a plain read and a
#            device-to-device copy measured in the same run
#         7. end to end: kvaudit checksum --engine cuda vs cpu on a ~1 GB dump
#       It logs to $OUT/gpucheck.log (or DIR/results/) and ends with a
#       summary; the exit status is the number of failed steps.
#
# With the device tool: `run` with carry ["out/gpucheck"] and the command
#   bash internal/kernels/gpucheck.sh device out/gpucheck
# and a timeout of about 480 s (the steps take 3 to 5 minutes).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
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

	step "4. kvaudit checksum --engine cuda equals --engine cpu on every dump"
	local n=0 same=0 d
	for d in "$dir"/dumps/*/*; do
		n=$((n + 1))
		"$dir/kvaudit" checksum --engine cpu -o json "$d" >"$out/cpu.json" 2>"$out/cpu.err"
		if timeout 120 "$dir/kvaudit" checksum --engine cuda -o json "$d" >"$out/cuda.json" 2>"$out/cuda.err" &&
			cmp -s "$out/cpu.json" "$out/cuda.json" && [ -s "$out/cpu.json" ]; then
			same=$((same + 1))
		else
			echo "DIFFERS: $d"
			cat "$out/cuda.err"
			diff "$out/cpu.json" "$out/cuda.json" | head -10
		fi
	done
	if [ "$n" -gt 0 ] && [ "$same" -eq "$n" ]; then record "CLI cuda = cpu" ok "$same/$n sides"; else record "CLI cuda = cpu" FAIL "$same/$n sides"; fi

	step "5. live memory: export_ipc.py --self-test"
	if timeout 300 python3 examples/vllm/export_ipc.py --self-test --kvaudit "$dir/kvaudit" 2>&1 | tee "$out/ipc.log"; then
		record "IPC self-test" ok "$(grep -c '^ok ' "$out/ipc.log") configurations"
	else
		record "IPC self-test" FAIL "see ipc.log"
	fi

	step "6. bandwidth: kvaudit-cuda bench, 4 GiB cache on the device"
	if timeout 120 "$dir/kvaudit-cuda" bench --size 4GiB --reps 20 -o json >"$out/bench.json" 2>"$out/bench.err"; then
		"$dir/kvaudit-cuda" bench --size 4GiB --reps 20 | tee "$out/bench.txt"
		local ratio
		ratio=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r["bytes"]/r["checksum_seconds"]; p=r["bytes"]/r["copy_seconds"]; q=r["bytes"]/r["read_seconds"]; print(f"kernel {c/1e9:.0f} GB/s = {c/p:.2f}x the copy read ({p/1e9:.0f} GB/s), {c/q:.2f}x the plain read kernel ({q/1e9:.0f} GB/s)")' "$out/bench.json")
		record bench ok "$ratio"
	else
		cat "$out/bench.err"
		record bench FAIL "see bench.err"
	fi
	if "$dir/kvaudit" bench --help 2>/dev/null | grep -q -- '--engine'; then
		timeout 120 "$dir/kvaudit" bench --engine cuda 2>&1 | tee "$out/kvaudit-bench.txt" || true
	fi

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
		if cmp -s "$out/big-cpu.json" "$out/big-cuda.json"; then record "1 GB dump" ok "equal; $times"; else record "1 GB dump" FAIL "checks differ; $times"; fi
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

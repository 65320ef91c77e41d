// Command kvaudit-cuda is kvaudit's GPU engine: a companion executable that
// kvaudit starts for --engine cuda (or auto) and drives over its stdin and
// stdout (the protocol of package kernels). It checksums dumps by copying
// only the blocks it needs to the GPU, and live KV caches in device memory
// (cuda_ipc sources) where they lie.
//
// It is built only with the build tag cuda, on a machine with the CUDA
// toolkit (cgo, cuda.h, libcuda), because a Go binary that imports
// gorgonia.org/cu exits at start when there is no GPU:
//
//	go build -tags cuda -o kvaudit-cuda ./cmd/kvaudit-cuda
//
// Without the tag it builds to a stub that says so and exits 3.
//
// --help and version work without a GPU, and info then says that no device
// is usable (exit 1) beside the runner's version: package start answers
// them before gorgonia.org/cu's init can end the process. The binary still
// needs the CUDA driver library (libcuda.so.1) to be loaded at all.
//
// Usage:
//
//	kvaudit-cuda serve            speak the protocol on stdin/stdout (what kvaudit runs)
//	kvaudit-cuda info [-o json]   the device, driver and runner version
//	kvaudit-cuda bench [--size 4GiB] [--reps 5] [-o json]
//	                              the kernel's read bandwidth beside a plain
//	                              read and a device-to-device copy
//	kvaudit-cuda version
//
// KVAUDIT_CUDA_DEVICE selects the device (default 0; --device overrides).
package main

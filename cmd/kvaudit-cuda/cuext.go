//go:build cuda

package main

// CUDA driver calls that gorgonia.org/cu v0.9.6 lacks: IPC memory handles
// and pinned host memory.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

static CUresult kv_ipc_open(CUdeviceptr *dptr, const void *handle64) {
	CUipcMemHandle h;
	memcpy(h.reserved, handle64, CU_IPC_HANDLE_SIZE);
	return cuIpcOpenMemHandle(dptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}
static CUresult kv_ipc_close(CUdeviceptr dptr) { return cuIpcCloseMemHandle(dptr); }
static CUresult kv_mem_alloc_host(void **pp, size_t n) { return cuMemAllocHost(pp, n); }
// kv_jit_log loads image with an error log and returns the log (in log,
// n bytes); the module, if it loads, is unloaded.
static CUresult kv_jit_log(const char *image, char *log, unsigned int n) {
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(size_t)n};
	CUmodule m;
	log[0] = 0;
	CUresult r = cuModuleLoadDataEx(&m, image, 2, opts, vals);
	if (r == CUDA_SUCCESS) cuModuleUnload(m);
	return r;
}
static const char *kv_err_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"gorgonia.org/cu"
)

// ipcHandleSize is CU_IPC_HANDLE_SIZE: a CUipcMemHandle (the bytes of the
// runtime's cudaIpcMemHandle_t, as PyTorch shares them).
const ipcHandleSize = C.CU_IPC_HANDLE_SIZE

// cudaError is a failed driver call of this file.
type cudaError struct {
	op   string
	code C.CUresult
}

func (e *cudaError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.op, C.GoString(C.kv_err_name(e.code)), int(e.code))
}

func check(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &cudaError{op, r}
}

// ipcOpen maps another process's device allocation into the current
// context (peer access enabled as needed).
func ipcOpen(handle []byte) (cu.DevicePtr, error) {
	if len(handle) != ipcHandleSize {
		return 0, fmt.Errorf("an IPC handle has %d bytes, got %d", ipcHandleSize, len(handle))
	}
	var p C.CUdeviceptr
	if err := check("cuIpcOpenMemHandle", C.kv_ipc_open(&p, unsafe.Pointer(&handle[0]))); err != nil {
		return 0, err
	}
	return cu.DevicePtr(p), nil
}

// ipcClose unmaps what ipcOpen mapped.
func ipcClose(p cu.DevicePtr) error {
	return check("cuIpcCloseMemHandle", C.kv_ipc_close(C.CUdeviceptr(p)))
}

// memAllocHost returns n bytes of page-locked host memory (fast, async
// host-to-device copies); free it with memFreeHost.
func memAllocHost(n int64) ([]byte, error) {
	var p unsafe.Pointer
	if err := check("cuMemAllocHost", C.kv_mem_alloc_host(&p, C.size_t(n))); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

func memFreeHost(b []byte) {
	if len(b) > 0 {
		cu.MemFreeHost(unsafe.Pointer(&b[0]))
	}
}

// jitLog loads a PTX image again with an error log in C memory and
// returns the driver's error and log: the explanation of a failed load.
func jitLog(ptx string) string {
	image := C.CString(ptx)
	defer C.free(unsafe.Pointer(image))
	const n = 8192
	log := (*C.char)(C.malloc(n))
	defer C.free(unsafe.Pointer(log))
	err := check("cuModuleLoadDataEx", C.kv_jit_log(image, log, n))
	msg := strings.TrimSpace(C.GoString(log))
	if err != nil {
		return strings.TrimSpace(err.Error() + " " + msg)
	}
	return msg
}

// Package start lets kvaudit-cuda answer --help, version and info on a
// machine without a usable GPU.
//
// gorgonia.org/cu initializes the CUDA driver in its package init and
// exits 1 when that fails (no driver, no device), before kvaudit-cuda's
// main runs. This package's init (init_cuda.go) runs first — packages are
// initialized in import-path order once their imports are, and it imports
// nothing that cu does not — and handles what needs no device itself:
// --help and version always; info, serve and bench when cuInit fails, with
// a message that says so (on stderr, so serve's protocol stream stays
// clean). It must not import package kernels (or anything else cu does not
// import), or it would be initialized after cu; internal/buildinfo, which
// imports only runtime/debug (as this package does) and whose path sorts
// before cu's, is initialized before cu too (TestImportsForInitOrder).
package start

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/buildinfo"
)

// Protocol is kernels.ProtocolVersion (a test keeps them equal; importing
// kernels here would order this package's init after cu's).
const Protocol = 1

// Usage is kvaudit-cuda's help.
const Usage = `usage: kvaudit-cuda <command> [flags]

commands:
  serve     speak kvaudit's runner protocol on stdin/stdout (kvaudit starts this)
  info      print the device, its driver and this runner's version (exit 1
            when no CUDA device is usable)
  bench     time the checksum kernel on a cache on the device beside a plain
            read and a device-to-device copy of the same bytes
  version   print this runner's version

KVAUDIT_CUDA_DEVICE selects the CUDA device (default 0).
--help and version work without a GPU.
`

// VersionLine is what `kvaudit-cuda version` prints.
func VersionLine() string {
	return fmt.Sprintf("kvaudit-cuda %s (protocol %d)\n", buildinfo.Version(), Protocol)
}

// Exit codes, as kvaudit-cuda's.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 3
)

// Early decides what kvaudit-cuda does before the CUDA driver is used:
// args are its arguments (os.Args[1:]); initErr is cuInit's error, nil
// when the driver and a device are usable, and is only asked for when the
// command needs it. done says whether the process should end now with
// code after printing stdout and stderr; otherwise main runs.
func Early(args []string, initErr func() error) (stdout, stderr string, code int, done bool) {
	if len(args) == 0 {
		return "", Usage, ExitUsage, true
	}
	switch args[0] {
	case "-h", "--help", "help":
		return Usage, "", ExitOK, true
	case "version", "--version":
		return VersionLine(), "", ExitOK, true
	case "serve", "info", "bench":
	default:
		return "", fmt.Sprintf("kvaudit-cuda: unknown command %q\n%s", args[0], Usage), ExitUsage, true
	}
	err := initErr()
	if err == nil {
		return "", "", 0, false
	}
	switch args[0] {
	case "info":
		if wantsJSON(args[1:]) {
			// Written by hand: encoding/json is not among cu's imports.
			return fmt.Sprintf("{\n  \"kvaudit_cuda\": %d,\n  \"runner\": \"kvaudit-cuda\",\n  \"version\": %s,\n  \"device\": \"\",\n  \"error\": %s\n}\n",
				Protocol, strconv.QuoteToASCII(buildinfo.Version()), strconv.QuoteToASCII("no usable CUDA device: "+err.Error())), "", ExitFailure, true
		}
		return fmt.Sprintf("device:   none (no usable CUDA device: %v)\nrunner:   kvaudit-cuda %s (protocol %d)\n", err, buildinfo.Version(), Protocol),
			"", ExitFailure, true
	}
	return "", fmt.Sprintf("kvaudit-cuda: no usable CUDA device: %v\n", err), ExitFailure, true
}

// wantsJSON says whether info's flags ask for -o json.
func wantsJSON(args []string) bool {
	for i, a := range args {
		a = strings.TrimPrefix(a, "-")
		switch {
		case a == "o=json" || a == "-o=json" || a == "output=json":
			return true
		case (a == "o" || a == "-o") && i+1 < len(args) && args[i+1] == "json":
			return true
		}
	}
	return false
}

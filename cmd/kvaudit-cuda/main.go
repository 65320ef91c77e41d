//go:build cuda

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	// start's init answers --help and version, and reports a missing
	// device, before gorgonia.org/cu's init can exit.
	"github.com/kvaudit/kvaudit/cmd/kvaudit-cuda/internal/start"
	"github.com/kvaudit/kvaudit/internal/kernels"
)

// Exit codes: as kvaudit's for invalid input or usage; 1 when the device
// fails.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 3
)

func main() {
	// gorgonia.org/cu's init has called cuInit (package start's init has
	// already answered --help and version, and stopped when cuInit fails). A CUDA context is current on one OS thread: keep
	// main's.
	runtime.LockOSThread()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = start.Usage

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("kvaudit-cuda "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	device := fs.Int("device", defaultDevice(), "CUDA device ordinal")
	batch := fs.String("batch-bytes", "64MiB", "pinned staging buffer of one batch (two are used)")
	output := fs.String("o", "text", "output: text or json")
	size := fs.String("size", "4GiB", "bench: the cache's size on the device")
	reps := fs.Int("reps", 5, "bench: timed passes (the median is reported)")
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version":
		fmt.Fprint(stdout, start.VersionLine())
		return exitOK
	case "serve", "info", "bench":
	default:
		fmt.Fprintf(stderr, "kvaudit-cuda: unknown command %q\n%s", cmd, usage)
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvaudit-cuda %s: unexpected arguments %q\n", cmd, fs.Args())
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "kvaudit-cuda: -o %q: want text or json\n", *output)
		return exitUsage
	}
	slot, err := parseBytes(*batch)
	if err != nil || slot < 1<<20 {
		fmt.Fprintf(stderr, "kvaudit-cuda: --batch-bytes %q: want a size of at least 1MiB\n", *batch)
		return exitUsage
	}
	var proto io.Writer = stdout
	if cmd == "serve" {
		// The protocol keeps fd 1 for itself; anything else that writes to
		// stdout (a library, a stray print) goes to stderr.
		if proto, err = claimStdout(); err != nil {
			fmt.Fprintf(stderr, "kvaudit-cuda: %v\n", err)
			return exitFailure
		}
	}
	g, err := newGPU(*device, slot)
	if err != nil {
		fmt.Fprintf(stderr, "kvaudit-cuda: %v\n", err)
		return exitFailure
	}
	defer g.close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch cmd {
	case "serve":
		if err := kernels.Serve(ctx, os.Stdin, proto, g); err != nil {
			fmt.Fprintf(stderr, "kvaudit-cuda: %v\n", err)
			return exitFailure
		}
	case "info":
		if *output == "json" {
			b, _ := json.MarshalIndent(g.Hello(), "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
			break
		}
		h := g.Hello()
		fmt.Fprintf(stdout, "device:   %s\nmemory:   %.1f GB, %d multiprocessors\nrunner:   kvaudit-cuda %s (protocol %d)\n",
			h, float64(h.MemoryBytes)/1e9, h.Multiprocessors, h.Version, kernels.ProtocolVersion)
	case "bench":
		n, err := parseBytes(*size)
		if err != nil || n < kernels.BenchSampleBytes {
			fmt.Fprintf(stderr, "kvaudit-cuda: --size %q: want a size of at least %d bytes\n", *size, kernels.BenchSampleBytes)
			return exitUsage
		}
		res, err := g.Bench(ctx, kernels.BenchRequest{Bytes: n, Reps: *reps})
		if err != nil {
			fmt.Fprintf(stderr, "kvaudit-cuda: %v\n", err)
			return exitFailure
		}
		if *output == "json" {
			b, _ := json.MarshalIndent(res, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
			break
		}
		res.WriteText(stdout)
	}
	return exitOK
}

// defaultDevice is $KVAUDIT_CUDA_DEVICE, or 0.
func defaultDevice() int {
	if n, err := strconv.Atoi(os.Getenv("KVAUDIT_CUDA_DEVICE")); err == nil {
		return n
	}
	return 0
}

// claimStdout moves the process's stdout to a new descriptor for the
// protocol and points descriptor 1 at stderr.
func claimStdout() (io.Writer, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("dup(1): %w", err)
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		return nil, fmt.Errorf("dup3(2, 1): %w", err)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "protocol"), nil
}

// parseBytes reads a size: a number with an optional K, M, G or T suffix
// (powers of 1024; "GiB", "GB" and "G" are the same).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "B"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*float64(mult) > 1<<50 {
		return 0, errors.New("bad size")
	}
	return int64(n * float64(mult)), nil
}

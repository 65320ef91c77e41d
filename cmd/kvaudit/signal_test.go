//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterrupt stops inject and campaign with SIGINT and SIGTERM while
// they copy, and synth after its first rank: it runs kvaudit built with
// -tags kvaudit_testhooks (hookedKvaudit), which holds every copy after
// its first chunk with KVAUDIT_TEST_HOLD_COPY set
// (internal/inject/copyhook_testhooks.go), and synth after its first rank
// with KVAUDIT_TEST_HOLD_SYNTH set (internal/synth/rankhook_testhooks.go),
// until the command is cancelled, so the signal always lands mid-work.
// Each exits 130 or 143 saying "interrupted", and leaves no output and no
// temporary directory. The waits are deadlines for a hung process, not
// timings.
func TestInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvaudit")
	}
	t.Parallel()
	bin := hookedKvaudit(t)
	side := t.TempDir()
	if out, err := exec.Command(bin, "synth", "--out", side, "--preset", "tiny", "--tp", "2").CombinedOutput(); err != nil {
		t.Fatalf("synth: %v\n%s", err, out)
	}
	for _, sig := range []struct {
		name string
		sig  syscall.Signal
		code int
	}{{"SIGINT", syscall.SIGINT, 130}, {"SIGTERM", syscall.SIGTERM, 143}} {
		t.Run("inject/"+sig.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "bad")
			started := func() bool { return len(glob(t, dir, ".bad.kvaudit-tmp-*", "*.safetensors")) > 0 }
			stderr := interrupt(t, bin, dir, started, sig.sig, sig.code,
				"inject", filepath.Join(side, "producer"), "--fault", "bit-flip", "--out", out)
			if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--out %s exists after the interruption (%v)", out, err)
			}
			assertEmpty(t, dir, stderr)
		})
		t.Run("synth/"+sig.name, func(t *testing.T) {
			// Into a new directory: it is removed whole.
			dir := t.TempDir()
			out := filepath.Join(dir, "new", "kv")
			started := func() bool { return len(glob(t, out, "producer/rank-0-0.safetensors")) > 0 }
			stderr := interrupt(t, bin, dir, started, sig.sig, sig.code,
				"synth", "--out", out, "--preset", "tiny", "--tp", "2")
			assertEmpty(t, dir, stderr)
			// Into a directory that holds a file and a producer: the
			// consumer synth started is removed, nothing else.
			mine := filepath.Join(dir, "mine")
			if err := os.MkdirAll(filepath.Join(dir, "producer"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(mine, []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
			started = func() bool { return len(glob(t, dir, "consumer/rank-0-0.safetensors")) > 0 }
			stderr = interrupt(t, bin, dir, started, sig.sig, sig.code,
				"synth", "--out", dir, "--preset", "tiny", "--tp", "2", "--role", "consumer")
			if _, err := os.Stat(filepath.Join(dir, "consumer")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the consumer synth started is left behind (%v)\n%s", err, stderr)
			}
			for _, p := range []string{mine, filepath.Join(dir, "producer")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s, which was there before, is gone: %v", p, err)
				}
			}
		})
		t.Run("campaign/"+sig.name, func(t *testing.T) {
			dir := t.TempDir()
			started := func() bool { return len(glob(t, dir, "kvaudit-campaign-*")) > 0 }
			stderr := interrupt(t, bin, dir, started, sig.sig, sig.code,
				"campaign", "--faults", "bit-flip", "--trials", "1", "--dir", dir)
			assertEmpty(t, dir, stderr)
		})
	}
}

// interrupt runs bin args in dir, sends sig once started() holds, and
// checks the exit code and message; it returns stderr.
func interrupt(t *testing.T, bin, dir string, started func() bool, sig syscall.Signal, code int, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "KVAUDIT_TEST_HOLD_COPY=1", "KVAUDIT_TEST_HOLD_SYNTH=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(2 * time.Minute)
wait:
	for !started() {
		select {
		case err := <-exited:
			t.Fatalf("kvaudit %s ended before it started copying: %v\n%s", args[0], err, stderr.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("kvaudit %s never started copying", args[0])
		case <-time.After(10 * time.Millisecond):
			continue wait
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-deadline:
		cmd.Process.Kill()
		t.Fatalf("kvaudit %s did not stop after %v", args[0], sig)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != code {
		t.Errorf("kvaudit %s after %v: %v, want exit code %d\n%s", args[0], sig, err, code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "kvaudit: interrupted") {
		t.Errorf("stderr does not say interrupted:\n%s", stderr.String())
	}
	return stderr.String()
}

// glob matches pattern in dir, then (when given) sub inside the matches.
func glob(t *testing.T, dir, pattern string, sub ...string) []string {
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	if len(sub) > 0 && len(m) > 0 {
		return glob(t, m[0], sub[0])
	}
	return m
}

func assertEmpty(t *testing.T, dir, stderr string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s left behind after the interruption\n%s", e.Name(), stderr)
	}
}

package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// scrubOptions parses args through scrub's command with a run function
// that only keeps the options.
func scrubOptions(t *testing.T, args ...string) (*ScrubOptions, int, string) {
	t.Helper()
	var got *ScrubOptions
	s := &Streams{Out: &strings.Builder{}, Err: &strings.Builder{}}
	root := NewRootCmd(s)
	for _, c := range root.Commands() {
		if c.Name() == "scrub" {
			root.RemoveCommand(c)
		}
	}
	root.AddCommand(NewCmdScrub(s, func(_ context.Context, o *ScrubOptions) error {
		got = o
		return nil
	}))
	code := execute(root, append([]string{"scrub"}, args...), s)
	return got, code, s.Err.(*strings.Builder).String()
}

// TestNewCmdScrub: flags land in ScrubOptions; a bad --format, -o or a
// missing path is a usage error (exit 3) before anything runs.
func TestNewCmdScrub(t *testing.T) {
	o, code, stderr := scrubOptions(t, "a", "b", "--format", "mooncake-ssd", "-o", "junit", "--allow-unverified", "--threads", "3")
	if code != ExitOK || o == nil {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !slices.Equal(o.Paths, []string{"a", "b"}) || o.Format != "mooncake-ssd" || o.Output != "junit" || !o.AllowUnverified || o.Threads != 3 || o.HTML != "" {
		t.Errorf("options %+v", o)
	}
	if o, _, _ := scrubOptions(t, "a"); o == nil || o.Format != "auto" || o.Output != "table" || o.AllowUnverified {
		t.Errorf("defaults %+v", o)
	}
	for _, args := range [][]string{{"a", "--format", "nfs"}, {"a", "-o", "record"}, {}} {
		if o, code, stderr := scrubOptions(t, args...); o != nil || code != ExitInvalid {
			t.Errorf("%v: ran (%v), exit %d: %s", args, o != nil, code, stderr)
		}
	}
}

// TestScrubExit: the exit codes of §11 from a scrub's verdict.
func TestScrubExit(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, "synth", "--out", dir, "--preset", "tiny", "--store", "lmcache-frame"); code != ExitOK {
		t.Fatal(stderr)
	}
	store := dir + "/store/lmcache-frame"
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"scrub", store}, ExitOK},
		{[]string{"scrub", store, "--format", "lmcache-fs"}, ExitUnverified},
		{[]string{"scrub", store, "--format", "lmcache-fs", "--allow-unverified"}, ExitOK},
		{[]string{"scrub", dir + "/producer"}, ExitInvalid},
	} {
		if code, _, stderr := run(t, c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d: %s", c.args, code, c.code, stderr)
		}
	}
}

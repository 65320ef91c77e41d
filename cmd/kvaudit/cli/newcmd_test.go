package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/wire"
)

// These tests follow gh's TestNewCmdX: a command line is parsed into the
// command's options through runF, with no command run, and the test
// asserts on the options struct. Each runs through the real root (its
// persistent flags and PreRun, the settings' resolution from flags,
// KVAUDIT_* and kvaudit.yaml), with the command replaced by one whose
// runF captures the options.

// cleanSettings leaves no KVAUDIT_* variable and no kvaudit.yaml of the
// user's in the way (HOME is a fresh directory; the tests' working
// directory holds none).
func cleanSettings(t *testing.T) {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "KVAUDIT_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	if _, err := os.Stat("kvaudit.yaml"); err == nil {
		t.Fatal("the package directory holds a kvaudit.yaml: the options would read it")
	}
}

// optsOf (after cleanSettings) parses args (the command's name first) into the options that
// newCmd's command hands its run function, and returns them with the
// command's error; nil options when the command line was refused before
// the run.
func optsOf[T any](t *testing.T, newCmd func(*Streams, func(context.Context, *T) error) *cobra.Command, args ...string) (*T, error) {
	t.Helper()
	s := &Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}
	root := NewRootCmd(s)
	var got *T
	runs := 0
	cmd := newCmd(s, func(_ context.Context, o *T) error {
		got = o
		runs++
		return nil
	})
	found := false
	for _, c := range root.Commands() {
		if c.Name() == cmd.Name() {
			root.RemoveCommand(c)
			found = true
		}
	}
	if !found {
		t.Fatalf("the root has no command %q", cmd.Name())
	}
	root.AddCommand(cmd)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if runs > 1 {
		t.Fatalf("%q: runF called %d times", args, runs)
	}
	if err != nil && got != nil {
		t.Fatalf("%q: runF called, and yet an error: %v", args, err)
	}
	return got, err
}

// wantUsage checks that args are refused as a usage error whose message
// holds want, before anything runs.
func wantUsage[T any](t *testing.T, newCmd func(*Streams, func(context.Context, *T) error) *cobra.Command, want string, args ...string) {
	t.Helper()
	got, err := optsOf(t, newCmd, args...)
	var ue *UsageError
	if got != nil || !errors.As(asUsage(err), &ue) || !strings.Contains(err.Error(), want) {
		t.Errorf("%q: options %v, error %v; want a usage error holding %q and no run", args, got != nil, err, want)
	}
}

func TestNewCmdDiff(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdDiff, "diff", "p", "c")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Producer, []string{"p"}) || !slices.Equal(o.Consumer, []string{"c"}) || o.Output != "table" ||
		o.Strict || o.NoDrill || o.AuditTail || o.Stored || o.AllowUnverified || o.Engine == nil || o.JUnit != "" || o.IO == nil {
		t.Errorf("defaults: %+v", o)
	}
	o, err = optsOf(t, NewCmdDiff, "diff", "--producer", "a", "--producer", "b,c", "--consumer", "d", "--request", "r1", "--request", "r2",
		"--strict", "--no-drill", "--max-details", "5", "--audit-tail", "--stored", "--allow-unverified", "-o", "json", "--transfers", "logs")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Producer, []string{"a", "b", "c"}) || !slices.Equal(o.Consumer, []string{"d"}) || !slices.Equal(o.Requests, []string{"r1", "r2"}) ||
		!o.Strict || !o.NoDrill || o.MaxDetails != 5 || !o.AuditTail || !o.Stored || !o.AllowUnverified || o.Output != "json" ||
		!slices.Equal(o.Transfers, []string{"logs"}) {
		t.Errorf("flags: %+v", o)
	}
	// A variable, and a kvaudit.yaml that --config names, set options as
	// their flags do; the flag wins.
	t.Setenv("KVAUDIT_STRICT", "true")
	o, err = optsOf(t, NewCmdDiff, "diff", "p", "c")
	if err != nil || !o.Strict {
		t.Errorf("KVAUDIT_STRICT=true: %+v, %v", o, err)
	}
	o, err = optsOf(t, NewCmdDiff, "diff", "p", "c", "--strict=false")
	if err != nil || o.Strict {
		t.Errorf("KVAUDIT_STRICT=true --strict=false: %+v, %v", o, err)
	}
	os.Unsetenv("KVAUDIT_STRICT")
	cfg := filepath.Join(t.TempDir(), "kvaudit.yaml")
	if err := os.WriteFile(cfg, []byte("no-drill: true\nrequest: [r9]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err = optsOf(t, NewCmdDiff, "--config", cfg, "diff", "p", "c")
	if err != nil || !o.NoDrill || !slices.Equal(o.Requests, []string{"r9"}) {
		t.Errorf("--config %s: %+v, %v", cfg, o, err)
	}
	wantUsage(t, NewCmdDiff, `got one ("p")`, "diff", "p")
	wantUsage(t, NewCmdDiff, "both sides are given already", "diff", "--producer", "a", "c", "x")
	wantUsage(t, NewCmdDiff, "-o", "diff", "p", "c", "-o", "yaml")
}

func TestNewCmdChecksum(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdChecksum, "checksum", "d1", "d2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Paths, []string{"d1", "d2"}) || o.Output != "table" || o.Partial || o.Stored || o.Scheme != "" ||
		o.Numbering != checksum.NumberRequest || o.PayloadForm != wire.FormNested || o.BlockValues || o.Engine == nil {
		t.Errorf("defaults: %+v", o)
	}
	o, err = optsOf(t, NewCmdChecksum, "checksum", "d", "-o", "payload", "--payload-form", "flat", "--partial", "--request", "a,b")
	if err != nil {
		t.Fatal(err)
	}
	if o.Output != "payload" || o.PayloadForm != wire.FormFlat || !o.BlockValues || !o.Partial || !slices.Equal(o.Requests, []string{"a", "b"}) {
		t.Errorf("-o payload --payload-form flat: %+v", o)
	}
	o, err = optsOf(t, NewCmdChecksum, "checksum", "d", "--numbering", "block")
	if err != nil || o.Numbering != checksum.NumberBlock || !o.BlockValues {
		t.Errorf("--numbering block: %+v, %v", o, err)
	}
	out := t.TempDir()
	o, err = optsOf(t, NewCmdChecksum, "checksum", "d", "-o", "record", "--out", out, "--force")
	if err != nil || o.OutDir != out || !o.Force {
		t.Errorf("-o record --out: %+v, %v", o, err)
	}
	wantUsage(t, NewCmdChecksum, "only -o record writes files", "checksum", "d", "--out", out)
	wantUsage(t, NewCmdChecksum, "--numbering", "checksum", "d", "--numbering", "token")
	wantUsage(t, NewCmdChecksum, "--scheme", "checksum", "d", "--scheme", "md5")
}

func TestNewCmdTransfers(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdTransfers, "transfers", "logs", "--producer", "p", "--consumer", "c1,c2", "--request", "r", "--max-findings", "7")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Logs, []string{"logs"}) || !slices.Equal(o.Producer, []string{"p"}) || !slices.Equal(o.Consumer, []string{"c1", "c2"}) ||
		!slices.Equal(o.Requests, []string{"r"}) || o.MaxFindings != 7 || o.Output != "table" {
		t.Errorf("flags: %+v", o)
	}
	wantUsage(t, NewCmdTransfers, "--producer and --consumer are required", "transfers", "logs", "--producer", "p")
}

func TestNewCmdInspect(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdInspect, "inspect", "a", "b", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Paths, []string{"a", "b"}) || o.Output != "json" {
		t.Errorf("flags: %+v", o)
	}
}

// TestNewCmdScrub is scrub_test.go's.

func TestNewCmdInject(t *testing.T) {
	cleanSettings(t)
	out := filepath.Join(t.TempDir(), "out")
	o, err := optsOf(t, NewCmdInject, "inject", "side", "--fault", "bit-flip", "--out", out, "--seed", "9", "--bits", "3",
		"--request", "r1", "--layer", "4", "--group", "0", "--position", "2", "--rank", "1:0", "--zero-tails")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Paths, []string{"side"}) || o.Out != out || o.Seed != 9 || o.Bits != 3 || string(o.Kind) != "bit-flip" ||
		o.Target.Layer != "4" || !o.Prepare.ZeroTails || o.Target.Request != "r1" || o.Target.Group == nil || *o.Target.Group != 0 ||
		o.Target.Position == nil || *o.Target.Position != 2 || o.Target.Rank == nil || o.Target.Head != nil {
		t.Errorf("flags: %+v", o)
	}
	wantUsage(t, NewCmdInject, "--fault", "inject", "side", "--out", out)
}

func TestNewCmdCampaign(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdCampaign, "campaign", "--trials", "3", "--seed", "5", "--fault", "bit-flip")
	if err != nil {
		t.Fatal(err)
	}
	if o.Trials != 3 || o.Seed != 5 || len(o.Kinds) != 1 || string(o.Kinds[0]) != "bit-flip" || o.Output != "table" {
		t.Errorf("flags: %+v", o)
	}
}

func TestNewCmdSynth(t *testing.T) {
	cleanSettings(t)
	out := t.TempDir()
	o, err := optsOf(t, NewCmdSynth, "synth", "--out", out, "--preset", "mla", "--tp", "2", "--pp", "2", "--block-size", "32", "--role", "consumer", "--seed", "7")
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if o.Out != out || c.Preset != "mla" || c.TP != 2 || c.PP != 2 || c.BlockSize != 32 || c.Role != "consumer" || c.Seed != 7 {
		t.Errorf("flags: %+v", o)
	}
	wantUsage(t, NewCmdSynth, "--tp 100", "synth", "--out", out, "--tp", "100")
	wantUsage(t, NewCmdSynth, "--out", "synth")
}

func TestNewCmdBench(t *testing.T) {
	cleanSettings(t)
	o, err := optsOf(t, NewCmdBench, "bench", "--size", "512MB", "--preset", "mla", "--pp", "2", "--keep")
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != 512<<20 && o.Size != 512_000_000 || o.Preset != "mla" || o.PP != 2 || !o.Keep || o.Engine != "cpu" {
		t.Errorf("flags: %+v", o)
	}
}

func TestNewCmdDemo(t *testing.T) {
	cleanSettings(t)
	dir := filepath.Join(t.TempDir(), "demo")
	o, err := optsOf(t, NewCmdDemo, "demo", "--out", dir, "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	if o.Dir != dir || o.Seed != 3 {
		t.Errorf("flags: %+v", o)
	}
}

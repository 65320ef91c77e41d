package cli

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/verify"
)

// flagVocabulary is the table of kvaudit's flags: every flag of every
// command, by name, with its type and what it means. A name means one
// thing, with one type, on every command that has it; a new flag goes
// here first (TestFlagVocabulary fails on a flag that is not here).
var flagVocabulary = map[string]struct{ typ, meaning string }{
	// Common to every command.
	"color":  {"string", "color in tables and progress bars: auto, always or never"},
	"config": {"string", "the configuration file"},
	"quiet":  {"bool", "-q: only the verdict line and the exit code"},
	// Inputs and selections.
	"request":          {"stringSlice", "request ids, repeatable or comma-separated (KVAUDIT_REQUEST=a,b)"},
	"fault":            {"stringSlice", "fault kinds, repeatable or comma-separated (inject takes one)"},
	"partial":          {"bool", "a subset of a side's ranks is allowed"},
	"producer":         {"stringSlice", "the producer as paths or globs, repeatable or comma-separated (diff: in place of PRODUCER; transfers: the dumps the logs resolve to)"},
	"consumer":         {"stringSlice", "the consumer as paths or globs, repeatable or comma-separated (diff: in place of CONSUMER; transfers: the dumps the logs resolve to)"},
	"seed":             {"uint64", "the seed of every random choice"},
	"engine":           {"string", "the checksum engine; synth and campaign: whose caches (vllm or sglang, as issue 37 names it)"},
	"scheme":           {"string", "checksum: which checksum is computed (kvaudit's, or sglang-adler32)"},
	"sglang-checksum":  {"stringSlice", "diff, checksum --scheme sglang-adler32: the values SGLang's prefill sent, REQ=0xHEX, repeatable"},
	"cuda-timeout":     {"duration", "the deadline of one request to the kvaudit-cuda runner"},
	"threads":          {"int", "how many things run at once (engine threads, trials); the only parallelism flag"},
	"output":           {"string", "-o: the output format"},
	"junit":            {"string", "a file to write the JUnit report to, besides the output"},
	"html":             {"string", "a file to write the HTML report to, besides the output"},
	"out":              {"string", "the directory a command writes its results into, kept"},
	"dir":              {"string", "the directory a command keeps its temporary files under, removed afterwards"},
	"keep":             {"bool", "keep what would be removed"},
	"force":            {"bool", "replace an earlier output of the command"},
	"trials":           {"int", "trials per fault kind"},
	"allow-unverified": {"bool", "unverified loads do not fail the command"},
	// Checks beside the checksum comparison.
	"stored":       {"bool", "check blocks against the stored checksums of the manifests"},
	"audit-tail":   {"bool", "audit the transferred-or-zeroed invariant"},
	"no-drill":     {"bool", "skip the drill-down"},
	"max-details":  {"int", "drill-down details per request at most"},
	"strict":       {"bool", "loaded blocks not compared make a load unverified"},
	"runner-check": {"string", "host-resident output slots of each request the cpu engine recomputes (N or all)"},
	"trust-runner": {"bool", "accept the runner's values of rows in device memory"},
	"require-mix":  {"bool", "a group compared by vLLM's checksum alone is unverified"},
	"mix-key":      {"string", "the key of kvaudit's mix check (a run's mix_key, or published)"},
	"numbering":    {"string", "piece numbering: request or block"},
	// Payloads.
	"payload-form": {"string", "nested or flat payloads"},
	// What inject prepares and targets.
	"add-stored":   {"bool", "inject: first add block hashes and stored checksums"},
	"zero-tails":   {"bool", "inject: first zero every unused slot"},
	"extra-blocks": {"int", "inject: first allocate blocks past the last token"},
	"bits":         {"int", "bits a fault flips"},
	"group":        {"int", "target group id"},
	"layer":        {"string", "target layer name or number"},
	"head":         {"int", "target global head"},
	"position":     {"int", "target block position"},
	"rank":         {"string", "target rank TP or PP:TP"},
	// Synthesized sides.
	"preset":            {"string", "model preset"},
	"layout":            {"string", "tensor layout"},
	"layers":            {"int", "layers"},
	"tp":                {"int", "tensor-parallel size"},
	"pp":                {"int", "pipeline-parallel size"},
	"block-size":        {"int", "tokens per block"},
	"kernel-block-size": {"int", "tokens per kernel block"},
	"num-blocks":        {"int", "blocks per cache"},
	"requests":          {"int", "number of requests"},
	"tokens":            {"int", "tokens per request"},
	"prefix-tokens":     {"int", "a consumer's local prefix hit"},
	"role":              {"string", "producer or consumer"},
	"format":            {"string", "how ranks are written (scrub: the store's format)"},
	"store":             {"string", "synth: the offload store format to write the side's KV as"},
	"conv-layout":       {"string", "conv state layout"},
	"conv-dtype":        {"string", "conv state dtype"},
	"no-state-split":    {"bool", "state layers without their TP split"},
	// Transfer audits (kvaudit transfers, diff --transfers).
	"max-findings": {"int", "findings kept at most"},
	"planner":      {"string", "how a synthesized pull pairs blocks: vllm (as vLLM's connector) or exact (by token)"},
	"lease":        {"int", "the producer's lease on a request's blocks, in seconds"},
	"lookahead":    {"int", "the consumer's num_prefill_lookahead_tokens (multi-token prediction)"},
	"transfers":    {"stringSlice", "NIXL logs to audit"},
	// Bench.
	"size":          {"string", "bytes to synthesize"},
	"reps":          {"int", "timed repetitions"},
	"warmup":        {"int", "untimed runs"},
	"ref-sample":    {"string", "bytes the reference engine reads"},
	"no-end-to-end": {"bool", "skip the end-to-end timing"},
}

// flagTypeExceptions are flags whose type differs from the vocabulary's
// on one command, with why: the issue that asked for them names both.
var flagTypeExceptions = map[string]string{
	// synth writes the logs (a switch), diff --transfers reads them.
	"kvaudit synth --transfers": "bool",
}

// verdictCommands are the commands whose result is a verdict: they offer
// -o junit.
var verdictCommands = []string{"diff", "transfers", "campaign", "scrub"}

// visibleFlags calls f for every flag of every command that help shows
// (not deprecated or hidden aliases, not --help).
func visibleFlags(root *cobra.Command, f func(c *cobra.Command, fl *pflag.Flag)) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(fl *pflag.Flag) {
			if fl.Hidden || fl.Deprecated != "" || fl.Name == "help" || fl.Name == "version" {
				return
			}
			f(c, fl)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestFlagVocabulary: every flag is in the table with its type; booleans
// default to false (a feature on by default is turned off by --no-X, never
// --X=false); -o offers json everywhere, markdown wherever there is a
// table and junit wherever there is a verdict; parallelism is --threads.
func TestFlagVocabulary(t *testing.T) {
	root := NewRootCmd(&Streams{Out: &strings.Builder{}, Err: &strings.Builder{}})
	visibleFlags(root, func(c *cobra.Command, fl *pflag.Flag) {
		where := c.CommandPath() + " --" + fl.Name
		v, ok := flagVocabulary[fl.Name]
		switch {
		case !ok:
			t.Errorf("%s is not in the flag vocabulary (flags_test.go): add it, or use the name that means the same", where)
		case flagTypeExceptions[where] == fl.Value.Type():
		case fl.Value.Type() != v.typ:
			t.Errorf("%s is a %s; the vocabulary says %s (%s)", where, fl.Value.Type(), v.typ, v.meaning)
		}
		if fl.Value.Type() == "bool" && fl.DefValue != "false" {
			t.Errorf("%s defaults to %s: a feature on by default is turned off with --no-...", where, fl.DefValue)
		}
		if fl.Usage == "" {
			t.Errorf("%s has no help", where)
		}
		for _, bad := range []string{"workers", "jobs", "parallel", "faults"} {
			if fl.Name == bad {
				t.Errorf("%s: use the vocabulary's name", where)
			}
		}
	})
	for _, c := range root.Commands() {
		fl := c.Flags().Lookup("output")
		formats := outputFormats[c.Name()]
		if fl == nil {
			if formats != nil {
				t.Errorf("%s has no -o but outputFormats lists %v", c.Name(), formats)
			}
			continue
		}
		if fl.Shorthand != "o" || fl.DefValue != formats[0] {
			t.Errorf("%s --output: shorthand %q default %q", c.Name(), fl.Shorthand, fl.DefValue)
		}
		if !slices.Contains(formats, "json") {
			t.Errorf("%s -o lacks json: %v", c.Name(), formats)
		}
		if slices.Contains(formats, "table") != slices.Contains(formats, "markdown") {
			t.Errorf("%s -o: a table without markdown (or the reverse): %v", c.Name(), formats)
		}
		if slices.Contains(verdictCommands, c.Name()) != slices.Contains(formats, "junit") {
			t.Errorf("%s -o: junit wherever there is a verdict, only there: %v", c.Name(), formats)
		}
		for _, f := range formats {
			if !strings.Contains(fl.Usage, f) {
				t.Errorf("%s -o help %q does not name %s", c.Name(), fl.Usage, f)
			}
		}
	}
}

// TestEnumCompletion: enum flags complete their values, not file names;
// a list flag completes after its last comma.
func TestEnumCompletion(t *testing.T) {
	complete := func(args ...string) []string {
		t.Helper()
		code, out, stderr := run(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if last := lines[len(lines)-1]; last != ":4" { // ShellCompDirectiveNoFileComp
			t.Errorf("%v: directive %s, want :4 (no file names)", args, last)
		}
		return lines[:len(lines)-1]
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"diff", "-o", ""}, outputFormats["diff"]},
		{[]string{"checksum", "--engine", ""}, engineNames},
		{[]string{"bench", "--engine", ""}, []string{"cpu", "cuda"}},
		{[]string{"synth", "--preset", ""}, synth.Presets},
		{[]string{"synth", "--layout", "p"}, []string{"packed", "packed-token-major"}},
		{[]string{"inject", "--fault", "bit"}, []string{"bit-flip"}},
		{[]string{"campaign", "--fault", "bit-flip,st"}, []string{"bit-flip,stale-block", "bit-flip,stale-tail", "bit-flip,state-flip", "bit-flip,store-byte-flip", "bit-flip,store-crc", "bit-flip,store-missing-checksum", "bit-flip,store-truncate", "bit-flip,stray-write"}},
		{[]string{"inspect", "--color", ""}, colorModes},
	} {
		got := complete(c.args...)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%v: %v, want %v", c.args, got, c.want)
		}
	}
}

// TestRequestListFromEnvironment: KVAUDIT_REQUEST="a,b" selects what
// --request a,b and --request a --request b do.
func TestRequestListFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "tiny", Requests: 3}); err != nil {
		t.Fatal(err)
	}
	side := dir + "/producer"
	_, flags, _ := run(t, "checksum", "--request", "req-0", "--request", "req-2", side)
	_, comma, _ := run(t, "checksum", "--request", "req-0,req-2", side)
	t.Setenv("KVAUDIT_REQUEST", "req-0,req-2")
	code, env, stderr := run(t, "checksum", side)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(flags, "req-2") || strings.Contains(flags, "req-1") || comma != flags || env != flags {
		t.Errorf("--request twice:\n%s\n--request a,b:\n%s\nKVAUDIT_REQUEST=a,b:\n%s", flags, comma, env)
	}
}

// TestConfigResolvedOnce: a command's RunE gets the settings the root's
// PersistentPreRunE resolved (kvaudit.yaml and the environment read once
// a run), and a second run of the same tree resolves them afresh.
func TestConfigResolvedOnce(t *testing.T) {
	s := &Streams{Out: &strings.Builder{}, Err: &strings.Builder{}}
	root := NewRootCmd(s)
	var got []*config
	probe := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error {
		cfg, err := newConfig(cmd)
		got = append(got, cfg)
		return err
	}}
	root.AddCommand(probe)
	for range 2 {
		if code := execute(root, []string{"probe"}, s); code != 0 {
			t.Fatalf("exit %d: %s", code, s.Err)
		}
	}
	if len(got) != 2 || got[0] == nil || got[1] == nil {
		t.Fatalf("configs: %v", got)
	}
	if cached, _ := probe.Context().Value(configKey{}).(*config); got[1] != cached {
		t.Error("RunE resolved its own config, not the PersistentPreRunE's")
	}
	if got[0] == got[1] {
		t.Error("the second run reused the first run's config")
	}
}

// TestBoundOptions: the flags bound to diff's options fields (the
// embedded verify.CompareOptions and the command's own) hold each
// setting from wherever it came: the command line, KVAUDIT_*, the
// command's section of kvaudit.yaml, a top-level key, the default.
func TestBoundOptions(t *testing.T) {
	t.Chdir(t.TempDir())
	yaml := "audit-tail: true\ndiff:\n  max-details: 5\n  strict: true\n"
	if err := os.WriteFile("kvaudit.yaml", []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVAUDIT_NO_DRILL", "true")
	t.Setenv("KVAUDIT_JUNIT", "d.xml")
	var got *DiffOptions
	s := &Streams{Out: &strings.Builder{}, Err: &strings.Builder{}}
	root := NewRootCmd(s)
	for _, c := range root.Commands() {
		if c.Name() == "diff" {
			root.RemoveCommand(c)
		}
	}
	root.AddCommand(NewCmdDiff(s, func(_ context.Context, o *DiffOptions) error {
		got = o
		return nil
	}))
	if code := execute(root, []string{"diff", "p", "c", "--request", "a, b", "--request", "c", "--stored"}, s); code != 0 || got == nil {
		t.Fatalf("exit %d: %s", code, s.Err)
	}
	want := verify.CompareOptions{Requests: []string{"a", "b", "c"}, NoDrill: true, MaxDetails: 5, AuditTail: true, Stored: true, Strict: true}
	c := got.CompareOptions
	c.Engine = nil
	if !reflect.DeepEqual(c, want) || got.JUnit != "d.xml" || got.AllowUnverified || !slices.Equal(got.Producer, []string{"p"}) || !slices.Equal(got.Consumer, []string{"c"}) {
		t.Errorf("options %+v (junit %q, allow-unverified %v), want %+v", c, got.JUnit, got.AllowUnverified, want)
	}
}

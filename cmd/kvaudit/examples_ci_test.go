package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/internal/testlong"
)

// ciCommands returns the kvaudit command lines of examples/ci: the `run:`
// steps of kvaudit.yml and the "$kvaudit" lines of pre-release.sh, each
// cut at its first redirection or || and split into words.
func ciCommands(t *testing.T) map[string][]string {
	t.Helper()
	dir := filepath.Join("..", "..", "examples", "ci")
	var lines []string
	b, err := os.ReadFile(filepath.Join(dir, "kvaudit.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name string `yaml:"name"`
				Run  string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("kvaudit.yml: %v", err)
	}
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			for _, l := range strings.Split(s.Run, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "kvaudit ") {
					lines = append(lines, strings.TrimSpace(l))
				}
			}
		}
	}
	b, err = os.ReadFile(filepath.Join(dir, "pre-release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, `"$kvaudit" `) && !strings.HasPrefix(l, `"$kvaudit" version`) {
			lines = append(lines, "kvaudit "+strings.TrimPrefix(l, `"$kvaudit" `))
		}
	}
	out := map[string][]string{}
	word := regexp.MustCompile(`"[^"]*"|'[^']*'|\S+`)
	for _, l := range lines {
		var args []string
		words := word.FindAllString(l, -1)[1:]
		for k := 0; k < len(words); k++ {
			w := words[k]
			if w == "||" || w == "|" || w == "&&" || w == "#" {
				break
			}
			if w == ">" || w == "2>" {
				k++ // and its target
				continue
			}
			w = strings.Trim(w, `"'`)
			// shell variables: numbers where a number is wanted
			w = strings.NewReplacer("${GITHUB_RUN_ID}", "123", "$trials", "50").Replace(w)
			args = append(args, w)
		}
		out[l] = args
	}
	if len(out) < 5 {
		t.Fatalf("only %d kvaudit commands in examples/ci", len(out))
	}
	return out
}

// TestCIExamples: every kvaudit command of examples/ci names a command and
// flags kvaudit has, and the workflow runs diff once (the table and the
// JUnit report from one run, --junit FILE).
func TestCIExamples(t *testing.T) {
	cmds := ciCommands(t)
	diffs := 0
	for line, args := range cmds {
		root := cli.NewRootCmd(&cli.Streams{})
		c, rest, err := root.Find(args)
		if err != nil || c == root {
			t.Errorf("%s: no such command (%v)", line, err)
			continue
		}
		if c.Name() == "diff" {
			diffs++
		}
		if err := c.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	if diffs == 0 {
		t.Error("no kvaudit diff in examples/ci")
	}
	b, _ := os.ReadFile(filepath.Join("..", "..", "examples", "ci", "kvaudit.yml"))
	if n := strings.Count(string(b), "kvaudit diff "); n != 1 {
		t.Errorf("kvaudit.yml runs kvaudit diff %d times, want once", n)
	}
}

// TestPreRelease runs examples/ci/pre-release.sh with this tree's kvaudit
// (KVAUDIT) and one trial per fault kind (TRIALS=1): its first line is
// "== " and what `kvaudit version` prints, the name said once; a verified
// pair passes with exit 0, its diff and campaign reports written; a pair
// with a flipped bit fails the check with exit 1, saying MISMATCH, and
// gets no campaign.
func TestPreRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvaudit")
	}
	testlong.Skip(t, "builds kvaudit and runs a campaign per fault kind")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "ci", "pre-release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	bin := testfiles.BuildKvaudit(t)
	version, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kv := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kvaudit %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kv("synth", "--out", "clean", "--preset", "tiny", "--role", "producer", "--seed", "3")
	kv("synth", "--out", "clean", "--preset", "tiny", "--role", "consumer", "--seed", "3")
	kv("synth", "--out", "flipped", "--preset", "tiny", "--role", "producer", "--seed", "3")
	kv("inject", "clean/consumer", "--fault", "bit-flip", "--seed", "1", "--out", "flipped/consumer")

	run := func(dumps ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bash, append([]string{script}, dumps...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "KVAUDIT="+bin, "TRIALS=1", "REPORT_DIR=report", "NO_COLOR=1")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}

	code, out, stderr := run("clean")
	first, _, _ := strings.Cut(out, "\n")
	if want := "== " + strings.TrimSpace(string(version)); first != want || strings.Count(first, "kvaudit") != 1 {
		t.Errorf("first line %q, want %q", first, want)
	}
	if code != 0 || !strings.Contains(out, "== clean: producer vs consumer\n   verified\n") || !strings.Contains(out, "pre-release check passed") {
		t.Fatalf("a verified pair: exit %d\n%s%s", code, out, stderr)
	}
	for _, f := range []string{"campaign.xml", "campaign.md", "clean.md", "clean.xml", "clean-campaign.xml", "clean-campaign.md"} {
		if st, err := os.Stat(filepath.Join(dir, "report", f)); err != nil || st.Size() == 0 {
			t.Errorf("report/%s: %v, want a report", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "report", "clean.md")); !strings.Contains(string(b), "verified") {
		t.Errorf("report/clean.md does not say verified:\n%s", b)
	}

	code, out, stderr = run("clean", "flipped")
	if code != 1 || !strings.Contains(out, "== flipped: producer vs consumer\n   MISMATCH: see report/flipped.md\n") ||
		strings.Contains(out, "== flipped: fault campaign") || !strings.Contains(stderr, "pre-release check FAILED") {
		t.Fatalf("a pair with a flipped bit: exit %d\n%s%s", code, out, stderr)
	}
}

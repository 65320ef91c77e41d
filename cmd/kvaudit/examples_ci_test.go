package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
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
// JUnit report from one run). Until diff and campaign have --junit FILE
// the flag check is skipped for that flag alone.
func TestCIExamples(t *testing.T) {
	cmds := ciCommands(t)
	diffs := 0
	missingJUnit := false
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
			if strings.Contains(err.Error(), "unknown flag: --junit") {
				missingJUnit = true
				continue
			}
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
	if missingJUnit {
		t.Skip("diff and campaign lack --junit FILE (report.WriteFile): the examples use it")
	}
}

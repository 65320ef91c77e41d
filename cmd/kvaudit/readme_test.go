package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestReadmeWalkthrough runs every command of README.md's console blocks
// (lines "$ kvaudit ..."), in order, in one empty directory, as a testscript:
// each must exit as the README says (0, or "# exit N" after the command),
// and print what the README shows under it (all of it, or the lines before
// a "..." line). "> FILE" saves stdout to FILE.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, n, err := walkthroughScript(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if n < 15 {
		t.Fatalf("README.md's walkthrough has %d commands; expected the whole story (demo, synth, checksum, diff, inject, campaign)", n)
	}
	for _, verb := range []string{"demo", "synth", "inspect", "checksum", "diff", "inject", "campaign"} {
		if !strings.Contains(script, "kvaudit "+verb) && !strings.Contains(script, " "+verb+" ") {
			t.Errorf("README.md's walkthrough never runs kvaudit %s", verb)
		}
	}
	file := filepath.Join(t.TempDir(), "readme.txtar")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(testscript.Params{Files: []string{file}}))
}

var (
	exitComment = regexp.MustCompile(`\s+#\s*exit\s+(\d+)\s*$`)
	redirect    = regexp.MustCompile(`\s+>\s*(\S+)$`)
)

// walkthroughScript turns a Markdown page's console blocks (README.md's,
// or a docs/ page's) into a testscript and counts the commands.
func walkthroughScript(readme string) (string, int, error) {
	var script strings.Builder
	var files strings.Builder
	n := 0
	inBlock := false
	var want []string // output lines under the current command
	flush := func() {
		if n == 0 || len(want) == 0 {
			return
		}
		name := fmt.Sprintf("want-%d.txt", n)
		text := strings.Join(want, "\n") + "\n"
		check := "cmp stdout " + name
		for i, l := range want {
			if l == "..." {
				text = strings.Join(want[:i], "\n") + "\n"
				check = "stdoutprefix " + name
				break
			}
		}
		fmt.Fprintf(&script, "%s\n", check)
		fmt.Fprintf(&files, "-- %s --\n%s", name, text)
		want = nil
	}
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(line, "```console"):
			inBlock = true
			continue
		case inBlock && strings.HasPrefix(line, "```"):
			flush()
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		cmd, isCmd := strings.CutPrefix(line, "$ ")
		if !isCmd {
			if n == 0 {
				return "", 0, fmt.Errorf("output before any command: %q", line)
			}
			want = append(want, line)
			continue
		}
		flush()
		n++
		if !strings.HasPrefix(cmd, "kvaudit ") {
			return "", 0, fmt.Errorf("command %q does not run kvaudit", cmd)
		}
		code := "0"
		if m := exitComment.FindStringSubmatch(cmd); m != nil {
			code, cmd = m[1], cmd[:len(cmd)-len(m[0])]
		}
		out := ""
		if m := redirect.FindStringSubmatch(cmd); m != nil {
			out, cmd = m[1], cmd[:len(cmd)-len(m[0])]
		}
		fmt.Fprintf(&script, "# $ %s\nexits %s %s\n", line[2:], code, strings.TrimPrefix(cmd, "kvaudit "))
		if out != "" {
			fmt.Fprintf(&script, "cp stdout %s\n", out)
		}
		want = []string{}
	}
	return script.String() + files.String(), n, nil
}

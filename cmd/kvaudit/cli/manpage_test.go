package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestManPageSections: one page per command, each titled after its command and
// carrying the version it was built as; EXIT STATUS lists the statuses
// the command can end with, ENVIRONMENT its KVAUDIT_* variables, and the
// runner's only where an --engine can start it; `kvaudit man` says what it
// wrote on stderr, never stdout.
func TestManPageSections(t *testing.T) {
	old := version
	version = "1.2.3"
	t.Cleanup(func() { version = old })
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000") // 2023-11-14

	dir := t.TempDir()
	code, stdout, stderr := run(t, "man", dir)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "wrote ") || !strings.Contains(stderr, dir) {
		t.Fatalf("kvaudit man: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, want := range []string{"kvaudit.1", "kvaudit-diff.1", "kvaudit-checksum.1", "kvaudit-synth.1", "kvaudit-campaign.1", "kvaudit-man.1"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among %q", want, names)
		}
	}
	th := regexp.MustCompile(`(?m)^\.TH "([^"]+)" "1" "([^"]+)" "([^"]+)"`)
	pages := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		pages[n] = page
		m := th.FindStringSubmatch(page)
		wantTitle := strings.ToUpper(strings.TrimSuffix(n, ".1"))
		if m == nil || m[1] != wantTitle || m[2] != "Nov 2023" || m[3] != "kvaudit 1.2.3" {
			t.Errorf("%s: header %q, want title %q, date Nov 2023, source kvaudit 1.2.3", n, m, wantTitle)
		}
		exit, env, also := strings.Index(page, "\n.SH EXIT STATUS\n"), strings.Index(page, "\n.SH ENVIRONMENT\n"), strings.Index(page, "\n.SH SEE ALSO\n")
		if exit < 0 || env < exit || also < env {
			t.Errorf("%s: want EXIT STATUS, then ENVIRONMENT, then SEE ALSO (at %d, %d, %d)", n, exit, env, also)
		}
		if strings.Contains(page, "Auto generated") {
			t.Errorf("%s: cobra's HISTORY section", n)
		}
	}
	statuses := func(page string) []string {
		sec := page[strings.Index(page, ".SH EXIT STATUS"):strings.Index(page, ".SH ENVIRONMENT")]
		var codes []string
		for _, m := range regexp.MustCompile(`(?m)^\\fB(\d+)\\fR$`).FindAllStringSubmatch(sec, -1) {
			codes = append(codes, m[1])
		}
		return codes
	}
	for page, want := range map[string][]string{
		"kvaudit.1": {"0", "1", "2", "3", "4", "130", "143"}, "kvaudit-diff.1": {"0", "1", "2", "3", "4", "130", "143"},
		"kvaudit-checksum.1": {"0", "1", "2", "3", "4", "130", "143"}, "kvaudit-campaign.1": {"0", "1", "3", "4", "130", "143"},
		"kvaudit-synth.1": {"0", "3", "4", "130", "143"}, "kvaudit-inspect.1": {"0", "3", "4", "130", "143"},
	} {
		if got := statuses(pages[page]); !slices.Equal(got, want) {
			t.Errorf("%s: exit statuses %q, want %q", page, got, want)
		}
	}
	if !strings.Contains(pages["kvaudit-diff.1"], `unverified`) || !strings.Contains(pages["kvaudit-diff.1"], `\-\-allow\-unverified`) {
		t.Error("kvaudit-diff.1: exit status 2 does not mention --allow-unverified")
	}
	// checksum's 2: nothing checksummed, or with --stored nothing stored
	// (side.Checksums.Unchecked and storedRun).
	if sec := pages["kvaudit-checksum.1"]; !strings.Contains(sec, "nothing could be checksummed") || !strings.Contains(sec, "nothing stored to compare") {
		t.Error("kvaudit-checksum.1: exit status 2 does not name both of its causes")
	}
	for page, want := range map[string][]string{
		"kvaudit-diff.1":     {"KVAUDIT_ENGINE", "KVAUDIT_ALLOW_UNVERIFIED", "KVAUDIT_CUDA_RUNNER", "KVAUDIT_CUDA_DEVICE", "NO_COLOR"},
		"kvaudit-checksum.1": {"KVAUDIT_ENGINE", "KVAUDIT_CUDA_RUNNER", "KVAUDIT_PARTIAL", "NO_COLOR"},
		"kvaudit-synth.1":    {"KVAUDIT_PRESET", "KVAUDIT_OUT", "NO_COLOR", "XDG_CONFIG_HOME"},
		"kvaudit.1":          {"KVAUDIT_<FLAG>", "KVAUDIT_CUDA_RUNNER", "NO_COLOR"},
		"kvaudit-man.1":      {"SOURCE_DATE_EPOCH"},
	} {
		sec := pages[page][strings.Index(pages[page], ".SH ENVIRONMENT"):strings.Index(pages[page], ".SH SEE ALSO")]
		for _, w := range want {
			if !strings.Contains(sec, w) {
				t.Errorf("%s: ENVIRONMENT lacks %s:\n%s", page, w, sec)
			}
		}
	}
	for _, page := range []string{"kvaudit-synth.1", "kvaudit-inspect.1"} {
		if strings.Contains(pages[page], "KVAUDIT_CUDA_RUNNER") || strings.Contains(pages[page], "KVAUDIT_CONFIG") {
			t.Errorf("%s: lists the CUDA runner or KVAUDIT_CONFIG", page)
		}
	}
}

// TestSpecDocExitCodes: docs/spec.md §11's table of exit codes lists every
// code kvaudit ends with (exitCodes, which the root page and --help list),
// and no other.
func TestSpecDocExitCodes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "spec.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n**Exit codes.**\n")
	if !ok {
		t.Fatal("docs/spec.md: no **Exit codes.** table")
	}
	sec, _, _ = strings.Cut(sec, "\n\n**")
	var got, want []string
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(sec, -1) {
		got = append(got, m[1])
	}
	for _, e := range exitCodes {
		want = append(want, fmt.Sprint(e.code))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/spec.md exit codes %q, want %q", got, want)
	}
}

package transfer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// TestFindLogs: a file is a log, a directory gives its *.jsonl files in
// name order, a quoted glob the paths it matches; a missing path, a
// pattern matching nothing, a directory without logs and one holding an
// unclosed log are errors naming the path.
func TestFindLogs(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a/consumer-pp0-tp1.jsonl", "a/consumer-pp0-tp0.jsonl", "a/notes.txt", "b/producer.jsonl", "c/x.jsonl.partial", "empty/readme"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, filepath.Join(dir, n))
		}
		return out
	}
	for _, c := range []struct {
		given, want []string
	}{
		{at("b/producer.jsonl"), at("b/producer.jsonl")},
		{at("a"), at("a/consumer-pp0-tp0.jsonl", "a/consumer-pp0-tp1.jsonl")},
		{at("a", "b"), at("a/consumer-pp0-tp0.jsonl", "a/consumer-pp0-tp1.jsonl", "b/producer.jsonl")},
		{at("[ab]"), at("a/consumer-pp0-tp0.jsonl", "a/consumer-pp0-tp1.jsonl", "b/producer.jsonl")},
		{at("a/*-tp1.jsonl"), at("a/consumer-pp0-tp1.jsonl")},
	} {
		got, err := FindLogs(c.given)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("FindLogs(%q) = %q, %v; want %q", c.given, got, err, c.want)
		}
	}
	for _, c := range []struct {
		given, says string
	}{
		{"nowhere", "does not exist: want a NIXL log"},
		{"a/*-tp9.jsonl", "no file matches: want NIXL logs"},
		{"empty", "holds no NIXL log"},
		{"c", "a log the recorder has not closed"},
	} {
		p := filepath.Join(dir, c.given)
		got, err := FindLogs([]string{p})
		var re *layout.ReadError
		if got != nil || !errors.As(err, &re) || re.Path == "" || !strings.Contains(err.Error(), c.says) {
			t.Errorf("FindLogs(%q) = %q, %v; want a *layout.ReadError saying %q", c.given, got, err, c.says)
		}
		if c.given != "c" && re != nil && re.Path != p {
			t.Errorf("FindLogs(%q): the error names %q", c.given, re.Path)
		}
	}
}

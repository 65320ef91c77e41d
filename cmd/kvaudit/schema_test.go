package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kvaudit/kvaudit/internal/kernels"
)

// modelRunnerEnv makes this test binary, started as "serve", a CUDA runner
// that serves the kernel's Go model (kernels.ModelDevice): the runner
// behind `kvaudit bench --engine cuda` in testdata/schema.
const modelRunnerEnv = "KVAUDIT_SCHEMA_MODEL_RUNNER"

func init() {
	if os.Getenv(modelRunnerEnv) == "1" && len(os.Args) == 2 && os.Args[1] == "serve" {
		if err := kernels.Serve(context.Background(), os.Stdin, os.Stdout, kernels.ModelDevice{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// schemaDir holds one JSON Schema per machine output, named after its
// format: kvaudit-diff/1 is checked against kvaudit-diff.schema.json.
var schemaDir = filepath.Join("..", "..", "docs", "schemas")

// TestOutputSchemas runs testdata/schema/*.txtar: real outputs of every
// command on synthesized dumps, each checked with `schema FILE`.
func TestOutputSchemas(t *testing.T) {
	dir, err := filepath.Abs(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	p := scriptParams(testscript.Params{Dir: "testdata/schema"})
	setup := p.Setup
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("SCHEMAS", dir)
		env.Setenv("MODEL_RUNNER", exe)
		return setup(env)
	}
	p.Cmds["schema"] = cmdSchema
	testscript.Run(t, p)
}

// cmdSchema validates a JSON output (a file, or stdout) against the schema
// its "format" names, or the schema of FORMAT: schema FILE|stdout [FORMAT]
// (a document of another format then fails on its "format" const).
func cmdSchema(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: schema FILE|stdout [FORMAT]")
	}
	doc := []byte(ts.ReadFile(args[0]))
	format := formatOf(doc)
	if len(args) == 2 {
		format = args[1]
	}
	errs, err := validateAgainst(ts.Getenv("SCHEMAS"), format, doc)
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	if neg {
		if len(errs) == 0 {
			ts.Fatalf("%s: conforms to %s", args[0], format)
		}
		return
	}
	if len(errs) > 0 {
		ts.Fatalf("%s does not conform to %s:\n%s", args[0], format, strings.Join(errs, "\n"))
	}
}

var formatRE = regexp.MustCompile(`^kvaudit-[a-z-]+/[0-9]+$`)

// formatOf returns a document's top-level "format" ("" when none).
func formatOf(doc []byte) string {
	m := regexp.MustCompile(`^\s*\{\s*"format":\s*"([^"]*)"`).FindSubmatch(doc)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func validateAgainst(dir, format string, doc []byte) ([]string, error) {
	if !formatRE.MatchString(format) {
		return nil, fmt.Errorf("no versioned format (%q) as the first field", format)
	}
	name := strings.Split(format, "/")[0] + ".schema.json"
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	s, err := parseSchema(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	// Every field a real output carries must be in its schema.
	s.documented = true
	if title, _ := s.root["title"].(string); title != format {
		return nil, fmt.Errorf("%s is titled %q, not %q", name, title, format)
	}
	return s.validate(doc), nil
}

// TestSchemasCovered: every schema file is a valid schema of this subset
// whose title is its format, and the scripts check an output against each.
func TestSchemasCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s (%v)", schemaDir, err)
	}
	scripts, err := filepath.Glob("testdata/schema/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range scripts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseSchema(b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		title, _ := s.root["title"].(string)
		if filepath.Base(f) != strings.Split(title, "/")[0]+".schema.json" || !formatRE.MatchString(title) {
			t.Errorf("%s: title %q is not its format", f, title)
		}
		props, _ := s.root["properties"].(map[string]any)
		format, _ := props["format"].(map[string]any)
		if format["const"] != title {
			t.Errorf("%s: properties.format is %v, want const %q", f, format, title)
		}
		if req, _ := s.root["required"].([]any); !slices.Contains(req, any("format")) {
			t.Errorf("%s: format is not required", f)
		}
		if !regexp.MustCompile(`(?m)^schema \S+ ` + regexp.QuoteMeta(title) + `$`).MatchString(all.String()) {
			t.Errorf("no script in testdata/schema checks an output against %s", title)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
	"github.com/kvaudit/kvaudit/report"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"kvaudit": func() { os.Exit(cli.Main(os.Args[1:], cli.SystemStreams())) },
	})
}

// TestScripts runs the whole-CLI stories in testdata/script/*.txtar.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"checks": cmdChecks,
		},
	})
}

// cmdChecks prints check 0 of every request and group of a `kvaudit
// checksum -o json` file, one line each, and fails when another check (a
// replica's) differs from it: sides of any TP, PP or layout holding the
// same KV print the same lines. Usage: checks FILE.
func cmdChecks(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: checks FILE")
	}
	var c report.ChecksumsJSON
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &c))
	if len(c.Requests) == 0 {
		ts.Fatalf("%s: no requests", args[0])
	}
	for _, r := range c.Requests {
		for _, g := range r.Groups {
			for k, check := range g.Checks {
				if fmt.Sprint(check) != fmt.Sprint(g.Checks[0]) {
					ts.Fatalf("request %s group %d: check %d %v differs from check 0 %v", r.ID, g.ID, k, check, g.Checks[0])
				}
			}
			fmt.Fprintf(ts.Stdout(), "%s group %d fingerprint %s start %d: %v\n", r.ID, g.ID, g.Fingerprint, g.Start, g.Checks[0])
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
	"github.com/kvaudit/kvaudit/internal/report"
)

func TestMain(m *testing.M) {
	testscript.Main(hookedMain{m}, map[string]func(){
		"kvaudit": func() { os.Exit(cli.Main(os.Args[1:], cli.SystemStreams())) },
		// A runner serving the kernel's Go model (script_runner_test.go).
		"kvaudit-cuda-fake": fakeRunner,
	})
}

// TestScripts runs the whole-CLI stories in testdata/script/*.txtar.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(testscript.Params{Dir: "testdata/script"}))
}

// scriptParams adds the environment and the custom commands every script
// gets.
func scriptParams(p testscript.Params) testscript.Params {
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("NO_COLOR", "1")
		return nil
	}
	p.Cmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"checks":       cmdChecks,
		"exits":        cmdExits,
		"stdoutprefix": cmdStdoutPrefix,
		"flipkv":       cmdFlipKV,
		"junitxml":     cmdJUnitXML,
		"payloadof":    cmdPayloadOf,
		"setenvfile":   cmdSetenvFile,
		"scribble":     cmdScribble,
		"samefile":     cmdSameFile,
		"samejson":     cmdSameJSON,
		"jsondrop":     cmdJSONDrop,
		"sharedblock":  cmdSharedBlock,
		// script_transfers_test.go
		"transferexpect": cmdTransferExpect,
	}
	return p
}

// cmdStdoutPrefix checks that the last command's stdout starts with the
// contents of FILE: stdoutprefix FILE.
func cmdStdoutPrefix(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: stdoutprefix FILE")
	}
	got, want := ts.ReadFile("stdout"), ts.ReadFile(args[0])
	if !strings.HasPrefix(got, want) {
		ts.Fatalf("stdout does not start with %s:\n--- got\n%s\n--- want\n%s", args[0], got, want)
	}
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

// cmdExits runs kvaudit and checks its exit code: exits N ARGS... Its
// stdout and stderr become the script's, as with exec.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: exits CODE ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	runKVAudit(ts, context.Background(), want, args[1:])
}

// runKVAudit runs the kvaudit on the script's PATH with args in the
// script's directory, with empty stdin, NO_COLOR and only the script's
// KVAUDIT_<FLAG> variables, until ctx is done. Its stdout and stderr become
// the script's; it fails the script when kvaudit was killed for ctx or
// exited other than want.
func runKVAudit(ts *testscript.TestScript, ctx context.Context, want int, args []string) {
	bin := ""
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if p := filepath.Join(dir, "kvaudit"); fileExists(p) {
			bin = p
			break
		}
	}
	if bin == "" {
		ts.Fatalf("no kvaudit on the script's PATH")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "NO_COLOR=1", "HOME="+ts.Getenv("HOME"))
	cmd.Env = append(cmd.Env, scriptKVAuditEnv(ts)...)
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprint(ts.Stdout(), stdout.String())
	fmt.Fprint(ts.Stderr(), stderr.String())
	if ctx.Err() != nil {
		ts.Fatalf("kvaudit %s did not return in time (killed)", strings.Join(args, " "))
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("running kvaudit: %v", err)
	}
	if code != want {
		ts.Fatalf("kvaudit exited %d, want %d\nstderr: %s", code, want, stderr.String())
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

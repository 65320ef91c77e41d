package main

import (
	"os"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
)

// cmdScribble writes "SCRIBBLED" over the first bytes of FILE in place,
// through links, as an editor or a careless tool would: scribble FILE.
func cmdScribble(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: scribble FILE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_WRONLY, 0)
	ts.Check(err)
	_, err = f.WriteAt([]byte("SCRIBBLED"), 0)
	ts.Check(err)
	ts.Check(f.Close())
}

// cmdSameFile checks whether two paths are the same file (one inode):
// [!] samefile A B.
func cmdSameFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: samefile A B")
	}
	a, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	b, err := os.Stat(ts.MkAbs(args[1]))
	ts.Check(err)
	if same := os.SameFile(a, b); same != !neg {
		ts.Fatalf("samefile %s %s: %v", args[0], args[1], same)
	}
}

// scriptKVAuditEnv returns the script's KVAUDIT_<FLAG> variables (set with
// env), for the commands `exits` runs.
func scriptKVAuditEnv(ts *testscript.TestScript) []string {
	var env []string
	seen := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			name := "KVAUDIT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			if !seen[name] {
				seen[name] = true
				env = append(env, name+"="+ts.Getenv(name))
			}
		}
		c.Flags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cli.NewRootCmd(&cli.Streams{}))
	return env
}

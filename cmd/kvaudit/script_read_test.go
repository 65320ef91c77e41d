//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestReadSafety runs the stories of hostile input in testdata/read: what
// a dump names outside its directory, FIFOs and devices in place of files,
// huge sparse files, strides that alias, repeated block ids. Every kvaudit
// run there has a deadline (exitsin), so a read that blocks fails the
// script instead of hanging it.
func TestReadSafety(t *testing.T) {
	p := scriptParams(testscript.Params{Dir: "testdata/read"})
	p.Cmds["exitsin"] = cmdExitsIn
	p.Cmds["fifo"] = cmdFifo
	p.Cmds["sparse"] = cmdSparse
	p.Cmds["jsonset"] = cmdJSONSet
	// Outputs of hostile input against their schemas (schema_test.go).
	schemas, err := filepath.Abs(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("SCHEMAS", schemas)
		return setup(env)
	}
	p.Cmds["schema"] = cmdSchema
	testscript.Run(t, p)
}

// cmdExitsIn runs kvaudit with a deadline and checks its exit code:
// exitsin SECONDS CODE ARGS... Stdin is empty. A run past the deadline is
// killed and fails the script.
func cmdExitsIn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitsin SECONDS CODE ARGS...")
	}
	secs, err := strconv.Atoi(args[0])
	ts.Check(err)
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	runKVAudit(ts, ctx, want, args[2:])
}

// cmdFifo makes a named pipe, replacing any file there: fifo PATH.
func cmdFifo(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fifo PATH")
	}
	p := ts.MkAbs(args[0])
	os.Remove(p)
	ts.Check(syscall.Mkfifo(p, 0o644))
}

// cmdSparse makes a sparse file of the given size, holding nothing but
// an optional prefix: sparse PATH BYTES [PREFIX].
func cmdSparse(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: sparse PATH BYTES [PREFIX]")
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	f, err := os.Create(ts.MkAbs(args[0]))
	ts.Check(err)
	if len(args) == 3 {
		_, err = f.WriteString(args[2])
		ts.Check(err)
	}
	ts.Check(f.Truncate(n))
	ts.Check(f.Close())
}

// cmdJSONSet edits a JSON file (numbers kept exact): jsonset FILE PATH
// VALUE sets the value at a dotted path (array indexes as numbers) to the
// JSON VALUE, to the value at another path with @PATH, or deletes it with
// VALUE "-".
func cmdJSONSet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: jsonset FILE PATH VALUE")
	}
	file := ts.MkAbs(args[0])
	decode := func(b []byte) any {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		ts.Check(dec.Decode(&v))
		return v
	}
	doc := decode([]byte(ts.ReadFile(args[0])))
	// walk returns the container holding the last key of path.
	walk := func(path string) (any, string) {
		keys := strings.Split(path, ".")
		cur := doc
		for _, k := range keys[:len(keys)-1] {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[k]
			case []any:
				i, err := strconv.Atoi(k)
				ts.Check(err)
				cur = c[i]
			default:
				ts.Fatalf("%s: %q leads into a %T", path, k, cur)
			}
		}
		return cur, keys[len(keys)-1]
	}
	get := func(path string) any {
		c, k := walk(path)
		switch c := c.(type) {
		case map[string]any:
			return c[k]
		case []any:
			i, err := strconv.Atoi(k)
			ts.Check(err)
			return c[i]
		}
		ts.Fatalf("%s: not found", path)
		return nil
	}
	var v any
	switch {
	case args[2] == "-":
	case strings.HasPrefix(args[2], "@"):
		v = get(args[2][1:])
	default:
		v = decode([]byte(args[2]))
	}
	c, k := walk(args[1])
	switch c := c.(type) {
	case map[string]any:
		if args[2] == "-" {
			delete(c, k)
		} else {
			c[k] = v
		}
	case []any:
		i, err := strconv.Atoi(k)
		ts.Check(err)
		c[i] = v
	default:
		ts.Fatalf("%s: not found", args[1])
	}
	out, err := json.MarshalIndent(doc, "", " ")
	ts.Check(err)
	ts.Check(os.WriteFile(file, out, 0o644))
}

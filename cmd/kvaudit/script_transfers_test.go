package main

import (
	"encoding/json"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/transfer"
)

// cmdTransferExpect checks a transfer audit's JSON (a file, or stdout)
// against a transfer-log fault's fault.json: every finding fault.json
// expects is reported at its invariant, request, transfer (in the log of
// the same name), descriptor, layer and tokens. Usage: transferexpect
// FAULT.json FILE|stdout.
func cmdTransferExpect(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: transferexpect FAULT.json FILE|stdout")
	}
	f, err := inject.ReadFault(ts.MkAbs(args[0]))
	ts.Check(err)
	var res transfer.Result
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[1])), &res))
	if len(f.Expect.Transfers) == 0 {
		ts.Fatalf("%s expects no transfer finding", args[0])
	}
	for _, w := range f.Expect.Transfers {
		found := false
		for _, g := range res.Findings {
			if g.Invariant == w.Invariant && g.Request == w.Request && g.Transfer == w.Transfer && g.Descriptor == w.Descriptor &&
				g.Layer == w.Layer && g.Tokens == w.Tokens && filepath.Base(g.Log) == w.Log {
				found = true
			}
		}
		if !found {
			ts.Fatalf("no %s finding at request %s transfer %d descriptor %d layer %d tokens %d-%d (log %s)", w.Invariant, w.Request, w.Transfer, w.Descriptor, w.Layer, w.Tokens[0], w.Tokens[1], w.Log)
		}
		ts.Logf("found %s at request %s transfer %d descriptor %d layer %d tokens %d-%d", w.Invariant, w.Request, w.Transfer, w.Descriptor, w.Layer, w.Tokens[0], w.Tokens[1])
	}
}

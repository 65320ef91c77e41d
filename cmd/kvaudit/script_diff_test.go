package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/rogpeppe/go-internal/testscript"
)

// cmdFlipKV flips one bit of one logical cell of a side's dumps, in place:
// flipkv SIDE REQUEST GROUP LAYER HEAD REPLICA TOKEN BYTE BIT, where SIDE
// is a dump or a directory of dumps, HEAD the global KV head and BYTE the
// byte of the cell's logical bytes (K then V). It prints what it changed
// and where (the byte's offset in the file).
func cmdFlipKV(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 9 {
		ts.Fatalf("usage: flipkv SIDE REQUEST GROUP LAYER HEAD REPLICA TOKEN BYTE BIT")
	}
	n := make([]int, 0, 6)
	for _, a := range []string{args[2], args[4], args[5], args[6], args[7], args[8]} {
		v, err := strconv.Atoi(a)
		ts.Check(err)
		n = append(n, v)
	}
	paths, _, err := layout.FindDumps([]string{ts.MkAbs(args[0])})
	ts.Check(err)
	ref := dumpindex.CellRef{Request: args[1], Group: n[0], Layer: args[3], Head: n[1], Replica: n[2], Token: n[3]}
	file, off, err := dumpindex.FlipBit(paths, ref, n[4], n[5])
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "flipped bit %d of byte %d of %s: byte %d of %s\n", n[5], n[4], ref, off, filepath.Base(file))
}

// cmdJUnitXML reads a JUnit XML file with encoding/xml, as a CI would, and
// prints its totals and each failing, erroring or skipped test case:
// junitxml FILE.
func cmdJUnitXML(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: junitxml FILE")
	}
	type outcome struct {
		Message string `xml:"message,attr"`
	}
	var doc struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Errors   int      `xml:"errors,attr"`
		Skipped  int      `xml:"skipped,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string   `xml:"name,attr"`
				Failure *outcome `xml:"failure"`
				Error   *outcome `xml:"error"`
				Skipped *outcome `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	ts.Check(xml.Unmarshal([]byte(ts.ReadFile(args[0])), &doc))
	fmt.Fprintf(ts.Stdout(), "tests %d failures %d errors %d skipped %d\n", doc.Tests, doc.Failures, doc.Errors, doc.Skipped)
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			for kind, o := range map[string]*outcome{"failure": c.Failure, "error": c.Error, "skipped": c.Skipped} {
				if o != nil {
					fmt.Fprintf(ts.Stdout(), "%s / %s: %s: %s\n", s.Name, c.Name, kind, o.Message)
				}
			}
		}
	}
}

// cmdPayloadOf prints the payload of request ID from the map `kvaudit
// checksum -o payload` printed: payloadof FILE ID [params]. With params it
// prints it inside a kv_transfer_params object, as vLLM's proxy forwards
// it.
func cmdPayloadOf(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 4 || len(args) >= 3 && args[2] != "params" {
		ts.Fatalf("usage: payloadof FILE ID [params [BLOCKS]]")
	}
	var m map[string]string
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &m))
	text, ok := m[args[1]]
	if !ok {
		ts.Fatalf("%s: no request %q", args[0], args[1])
	}
	switch len(args) {
	case 3:
		b, err := json.Marshal(map[string]any{"do_remote_prefill": true, "remote_block_ids": []int{3, 1, 4}, "kv_checksums": text})
		ts.Check(err)
		text = string(b)
	case 4:
		// As long as vLLM's, remote_block_ids first: no "/" (a base64
		// character) in the first few hundred bytes.
		n, err := strconv.Atoi(args[3])
		ts.Check(err)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = 1000 + i
		}
		b, err := json.Marshal(struct {
			IDs       []int  `json:"remote_block_ids"`
			Prefill   bool   `json:"do_remote_prefill"`
			Checksums string `json:"kv_checksums"`
		}{ids, true, text})
		ts.Check(err)
		text = string(b)
	}
	fmt.Fprintln(ts.Stdout(), text)
}

// cmdSetenvFile sets an environment variable of the script to the
// contents of a file, its final newline dropped: setenvfile NAME FILE.
func cmdSetenvFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: setenvfile NAME FILE")
	}
	ts.Setenv(args[0], strings.TrimSuffix(ts.ReadFile(args[1]), "\n"))
}

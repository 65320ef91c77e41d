package testfiles

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// PayloadVector is one file of the payload corpus (wire/testdata/payload):
// a few "key: value" lines (comment, expect, contains, form, shape; an
// unknown key is an error), a blank line, then the input.
type PayloadVector struct {
	Name     string
	Expect   string // "ok" or "error"
	Contains string // substring of the error
	Form     string // "raw", "hex" (msgpack) or "base64" (text)
	Shape    string // "flat" or "nested", for expect: ok
	Input    []byte // msgpack for raw and hex, the text for base64
}

// ReadPayloadVectors reads every vector of the payload corpus in dir. It
// fails the test on an unreadable or malformed vector, and on a corpus of
// fewer than 15 (a glob that matched nothing fuzzes nothing).
func ReadPayloadVectors(tb testing.TB, dir string) []PayloadVector {
	tb.Helper()
	glob := filepath.Join(dir, "*")
	files, err := filepath.Glob(glob)
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) < 15 {
		tb.Fatalf("%q matched %d files, want at least 15", glob, len(files))
	}
	var vs []PayloadVector
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		v, err := parsePayloadVector(data)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		v.Name = filepath.Base(f)
		vs = append(vs, v)
	}
	return vs
}

func parsePayloadVector(data []byte) (PayloadVector, error) {
	var v PayloadVector
	head, body, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok {
		return v, errors.New("no blank line after the header")
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(head), "\n") {
		key, value, ok := strings.Cut(line, ": ")
		if !ok {
			return v, fmt.Errorf("header line %q is not \"key: value\"", line)
		}
		if seen[key] {
			return v, fmt.Errorf("repeated key %q", key)
		}
		seen[key] = true
		switch key {
		case "comment":
		case "expect":
			v.Expect = value
		case "contains":
			v.Contains = value
		case "form":
			v.Form = value
		case "shape":
			v.Shape = value
		default:
			return v, fmt.Errorf("unknown key %q", key)
		}
	}
	switch v.Expect {
	case "ok":
		if v.Shape != "flat" && v.Shape != "nested" || v.Contains != "" {
			return v, errors.New("expect: ok needs shape: flat|nested and no contains")
		}
	case "error":
		if v.Contains == "" || v.Shape != "" {
			return v, errors.New("expect: error needs contains and no shape")
		}
	default:
		return v, fmt.Errorf("expect is %q, want ok or error", v.Expect)
	}
	switch v.Form {
	case "raw", "base64":
		v.Input = body
	case "hex":
		b, err := hex.DecodeString(strings.Join(strings.Fields(string(body)), ""))
		if err != nil {
			return v, err
		}
		v.Input = b
	default:
		return v, fmt.Errorf("form is %q, want raw, hex or base64", v.Form)
	}
	return v, nil
}

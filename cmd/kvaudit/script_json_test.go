package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdSameJSON checks that two JSON files (or stdout) hold the same value,
// every object key named by -drop removed from both first (at any depth):
// [!] samejson A B [-drop KEY]...
func cmdSameJSON(ts *testscript.TestScript, neg bool, args []string) {
	var drop []string
	var files []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-drop" && i+1 < len(args) {
			drop = append(drop, args[i+1])
			i++
			continue
		}
		files = append(files, args[i])
	}
	if len(files) != 2 {
		ts.Fatalf("usage: samejson A B [-drop KEY]...")
	}
	var docs [2]any
	for i, f := range files {
		ts.Check(json.Unmarshal([]byte(ts.ReadFile(f)), &docs[i]))
		docs[i] = dropKeys(docs[i], drop)
	}
	if same := reflect.DeepEqual(docs[0], docs[1]); same != !neg {
		ts.Fatalf("samejson %s: equal %v", strings.Join(args, " "), same)
	}
}

// dropKeys returns v without the object keys named in drop, at any depth.
func dropKeys(v any, drop []string) any {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range drop {
			delete(x, k)
		}
		for k, e := range x {
			x[k] = dropKeys(e, drop)
		}
	case []any:
		for i, e := range x {
			x[i] = dropKeys(e, drop)
		}
	}
	return v
}

// cmdJSONDrop rewrites a JSON file without the object key KEY, at any
// depth (numbers kept exact): jsondrop FILE KEY. It makes a record of an
// older kvaudit (jsondrop R mix).
func cmdJSONDrop(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: jsondrop FILE KEY")
	}
	dec := json.NewDecoder(strings.NewReader(ts.ReadFile(args[0])))
	dec.UseNumber()
	var v any
	ts.Check(dec.Decode(&v))
	if !strings.Contains(ts.ReadFile(args[0]), `"`+args[1]+`"`) {
		ts.Fatalf("%s has no key %q", args[0], args[1])
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", " ")
	ts.Check(enc.Encode(dropKeys(v, []string{args[1]})))
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b.Bytes(), 0o644))
}

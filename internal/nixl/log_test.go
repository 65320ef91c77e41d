package nixl_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/parse"
)

// readAll reads a whole log.
func readAll(name string, data []byte) (nixl.Header, []nixl.Record, error) {
	r, err := nixl.NewReader(bytes.NewReader(data), name)
	if err != nil {
		return nixl.Header{}, nil, err
	}
	var recs []nixl.Record
	for {
		var rec nixl.Record
		err := r.Next(&rec)
		if err == io.EOF {
			return r.Header(), recs, nil
		}
		if err != nil {
			return nixl.Header{}, nil, err
		}
		recs = append(recs, rec)
	}
}

// TestLogCorpus reads every log of testdata/log and checks it against the
// outcome cases.txt gives: a *parse.Error (parse.NIXLLog) naming the file, the line and the
// field, or records that survive a round trip through the Writer.
func TestLogCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "log")
	cases := testfiles.ReadCases(t, filepath.Join(dir, "cases.txt"))
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) < 40 || len(files) != len(cases) {
		t.Fatalf("%d log files, %d cases: the corpus must hold at least 40, each with an outcome", len(files), len(cases))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".jsonl")
		want, ok := cases[name]
		if !ok {
			t.Errorf("%s: no outcome in cases.txt", name)
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		h, recs, err := readAll(file, data)
		if want == "ok" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			roundTrip(t, name, h, recs)
			continue
		}
		le := parse.As(err, parse.NIXLLog)
		if le == nil {
			t.Errorf("%s: got %v (%T), want a *parse.Error (parse.NIXLLog)", name, err, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), `nixl log "`+file+`": `) {
			t.Errorf("%s: error %q does not name the file and say %q", name, err, want)
		}
	}
}

// roundTrip writes records and reads them back.
func roundTrip(t *testing.T, name string, h nixl.Header, recs []nixl.Record) {
	t.Helper()
	var b bytes.Buffer
	w := nixl.NewWriter(&b, h)
	for i := range recs {
		w.Write(&recs[i])
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	h2, recs2, err := readAll(name, b.Bytes())
	if err != nil {
		t.Fatalf("%s: rereading what the writer wrote: %v\n%s", name, err, b.Bytes())
	}
	for i := range recs2 {
		recs2[i].Line = recs[i].Line
	}
	if h2 != h || !equalRecords(recs, recs2) {
		t.Fatalf("%s: round trip differs:\n%+v\n%+v", name, recs, recs2)
	}
}

func equalRecords(a, b []nixl.Record) bool {
	if len(a) != len(b) {
		return false
	}
	norm := func(r nixl.Record) nixl.Record {
		for _, s := range []*[]nixl.Desc{&r.Descs, &r.LocalDescs, &r.RemoteDescs} {
			if len(*s) == 0 {
				*s = nil
			}
		}
		for _, s := range []*[]int{&r.LocalIDs, &r.RemoteIDs} {
			if len(*s) == 0 {
				*s = nil
			}
		}
		return r
	}
	for i := range a {
		if !reflect.DeepEqual(norm(a[i]), norm(b[i])) {
			return false
		}
	}
	return true
}

// TestWriterIsPython: the writer's bytes are those the recorder writes
// (Python's json.dumps with ensure_ascii, compact separators).
func TestWriterIsPython(t *testing.T) {
	var b bytes.Buffer
	w := nixl.NewWriter(&b, nixl.Header{Agent: "dec-0", TPRank: 1})
	w.Write(&nixl.Record{Op: nixl.OpDList, Handle: 2, Agent: "prefill-3", Descs: []nixl.Desc{{Addr: 0x11000, Len: 256}}})
	w.Write(&nixl.Record{Op: nixl.OpXfer, ID: 1, Kind: nixl.Read, Prepped: true, Local: 1, LocalIDs: []int{0, 2}, Remote: 2,
		RemoteIDs: []int{1, 3}, Notif: "req-7:2 é😀\x7f", Request: "req-7", HasRequest: true})
	w.Write(&nixl.Record{Op: nixl.OpXfer, ID: 2, Kind: nixl.Write, LocalDescs: []nixl.Desc{{Addr: 1, Len: 2, Dev: 3}},
		RemoteDescs: []nixl.Desc{}, RemoteAgent: "pre-0", Notif: ""})
	w.Write(&nixl.Record{Op: nixl.OpState, ID: 1, State: nixl.Done})
	w.Flush()
	// What kvaudit_export.nixl_log writes for the same calls
	// (test_nixl_log.py's records).
	want := `{"format":"kvaudit-nixl-log/1","agent":"dec-0","tp_rank":1,"pp_rank":0}
{"op":"dlist","handle":2,"agent":"prefill-3","descs":[["0x11000",256,0]]}
{"op":"xfer","id":1,"kind":"READ","local":1,"local_ids":[0,2],"remote":2,"remote_ids":[1,3],"notif":"req-7:2 \u00e9\ud83d\ude00\u007f","request":"req-7"}
{"op":"xfer","id":2,"kind":"WRITE","local_descs":[["0x1",2,3]],"remote_descs":[],"remote_agent":"pre-0","notif":""}
{"op":"state","id":1,"state":"DONE"}
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// FuzzLog: the reader never panics; it returns records that survive a
// round trip through the writer, or a *parse.Error (parse.NIXLLog).
func FuzzLog(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "log", "*.jsonl"))
	if len(seeds) < 40 {
		f.Fatalf("%d seed logs, want at least 40", len(seeds))
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, recs, err := readAll("fuzz.jsonl", data)
		if err != nil {
			le := parse.As(err, parse.NIXLLog)
			if le == nil || le.Line < 1 {
				t.Fatalf("error %v (%T), want a *parse.Error (parse.NIXLLog) with a line", err, err)
			}
			return
		}
		roundTrip(t, "fuzz", h, recs)
	})
}

// TestLogValues: what the reader returns, value by value: escapes and
// surrogates as Python writes them, numbers and strings at their bounds.
func TestLogValues(t *testing.T) {
	header := `{"format":"kvaudit-nixl-log/1","agent":"a","tp_rank":65536,"pp_rank":0}` + "\n"
	notif := func(text string) (string, error) {
		_, recs, err := readAll("v.jsonl", []byte(header+`{"op":"xfer","id":1,"kind":"READ","local_descs":[],"remote_descs":[],"remote_agent":"p","notif":"`+text+`"}`+"\n"))
		if err != nil {
			return "", err
		}
		return recs[0].Notif, nil
	}
	for text, want := range map[string]string{
		`\u00e9\ud83d\ude00\n\"q\"\\\/\b\f\r\t`: "é😀\n\"q\"\\/\b\f\r\t",
		`\udc80x`:                               "\ufffdx",
		`\ud83dx`:                               "\ufffdx",
		`\ud83d\u0041`:                          "\ufffdA",
		`\ud83d\ud83d`:                          "\ufffd\ufffd",
		strings.Repeat("a", nixl.MaxString):     strings.Repeat("a", nixl.MaxString),
	} {
		got, err := notif(text)
		if err != nil || got != want {
			t.Errorf("notif %.40q: got %.40q, %v; want %.40q", text, got, err, want)
		}
	}
	if _, err := notif(strings.Repeat("a", nixl.MaxString+1)); err == nil {
		t.Errorf("a string of MaxString+1 bytes is accepted")
	}
	h, _, err := readAll("v.jsonl", []byte(header))
	if err != nil || h.TPRank != 65536 {
		t.Fatalf("tp_rank 65536: %+v, %v", h, err)
	}
	if _, _, err := readAll("v.jsonl", []byte(strings.Replace(header, "65536", "65537", 1))); err == nil {
		t.Errorf("tp_rank 65537 is accepted")
	}
	// An address of 16 hex digits and a length up to the last byte of the
	// address space are the largest a descriptor holds (one byte more
	// would wrap: the corpus's desc-overflow).
	_, recs, err := readAll("v.jsonl", []byte(header+`{"op":"register","mem":"VRAM","descs":[["0xfffffffffffffff0",15,7],["0xF",1,0]]}`+"\n"))
	if err != nil || len(recs) != 1 || recs[0].Descs[0] != (nixl.Desc{Addr: 0xfffffffffffffff0, Len: 15, Dev: 7}) || recs[0].Descs[1].Addr != 15 {
		t.Fatalf("descs: %+v, %v", recs, err)
	}
}

// TestWriterEscapes: the header's strings come out as Python's
// json.dumps (ensure_ascii, compact separators) writes them, the line
// below printed by it, and read back the same.
func TestWriterEscapes(t *testing.T) {
	h := nixl.Header{Agent: "a\"\\\n\r\t\b\f\x01\x7f\u00e9\u20ac\U0001F600z", TPRank: 1, PPRank: 2}
	var b bytes.Buffer
	if err := nixl.NewWriter(&b, h).Flush(); err != nil {
		t.Fatal(err)
	}
	const want = `{"format":"kvaudit-nixl-log/1","agent":"a\"\\\n\r\t\b\f\u0001\u007f\u00e9\u20ac\ud83d\ude00z","tp_rank":1,"pp_rank":2}` + "\n"
	if b.String() != want {
		t.Fatalf("header line:\n got %s\nwant %s", b.String(), want)
	}
	got, _, err := readAll("escapes.jsonl", b.Bytes())
	if err != nil || got != h {
		t.Fatalf("read back %+v, %v; want %+v", got, err, h)
	}
}

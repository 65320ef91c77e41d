package side

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// TestOpenInput: an input names a side one way; payload bytes are read
// as what a producer sent, whatever their form.
func TestOpenInput(t *testing.T) {
	for _, in := range []Input{{}, {Payload: []byte("x"), Arg: "y"}, {Arg: "y", Paths: []string{"z"}}} {
		if _, err := Open(in); err == nil {
			t.Errorf("Open(%+v): no error", in)
		}
	}
	for _, c := range []struct {
		payload string
		bare    bool
		ids     []string
		reason  string
	}{
		{`{"kv_checksums": null}`, true, nil, ReasonNoChecksums},
		{`{"do_remote_prefill": true}`, true, nil, ReasonNoChecksums},
		{`{"kv_checksums": 7}`, true, nil, ReasonInvalidChecksums},
		{`{"req-1": "AAAA", "req-0": "AAAA"}`, false, []string{"req-0", "req-1"}, ""},
	} {
		s, err := Open(Input{Payload: []byte(c.payload)})
		if err != nil {
			t.Fatalf("%s: %v", c.payload, err)
		}
		if !s.payload || (s.bare != nil) != c.bare {
			t.Errorf("%s: payload %v, bare %v", c.payload, s.payload, s.bare != nil)
		}
		var ids []string
		for _, r := range s.byID {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != strings.Join(c.ids, ",") {
			t.Errorf("%s: ids %v, want %v", c.payload, ids, c.ids)
		}
		if c.reason != "" && (s.bare == nil || !strings.Contains(strings.Join(s.bare.Unverified, " "), c.reason)) {
			t.Errorf("%s: bare request %+v, want reason %q", c.payload, s.bare, c.reason)
		}
	}
	// As an argument: kv_transfer_params JSON, base64 text of a payload
	// and text that cannot be a file name (too long, a NUL byte) are
	// payloads; a name meant as a path is a missing path, anything else
	// neither a path nor payload text.
	long := `{"remote_block_ids": [` + strings.Repeat("1234, ", 60) + `5], "kv_checksums": null}`
	for arg, want := range map[string]string{
		`{"kv_checksums": null}`: "payload", "kgGTKAGRlQDPeKyizW3ZIl4A": "payload", long: "payload",
		strings.Repeat("A", 300): "payload", "kgGT\x00KAGRlQ": "payload",
		"kOVidmVyaWZpZWQ=": "neither", "nope": "neither", "producerdumps": "neither",
		filepath.Join(t.TempDir(), "missing"): "missing", "missing.safetensors": "missing",
	} {
		s, err := Open(Input{Arg: arg})
		var nf *layout.NotFoundError
		var np *NotPayloadError
		switch {
		case want == "payload" && (err != nil || !s.payload):
			t.Errorf("Open(Arg %q): %v, want a payload side", arg, err)
		case want == "missing" && (!errors.As(err, &nf) || nf.Path != arg || !errors.Is(err, fs.ErrNotExist)):
			t.Errorf("Open(Arg %q): %v, want a *layout.NotFoundError", arg, err)
		case want == "neither" && (!errors.As(err, &np) || np.Arg != arg):
			t.Errorf("Open(Arg %q): %v, want a *NotPayloadError", arg, err)
		}
	}
	if len(long) <= 255 {
		t.Fatalf("the long kv_transfer_params is %d bytes, want more than a file name may have", len(long))
	}
	if _, err := Open(Input{Payload: []byte(`{"format": "kvaudit-diff/1"}`)}); err == nil || !strings.Contains(err.Error(), "kvaudit-diff/1 output") {
		t.Errorf("a kvaudit report as a payload: %v", err)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

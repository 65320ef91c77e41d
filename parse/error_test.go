package parse

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// TestError: the message has each part only when it is set, in the order
// format, file, line, field, message (or the cause's); Unwrap gives the
// cause.
func TestError(t *testing.T) {
	cause := fs.ErrNotExist
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{&Error{Format: Payload, Msg: "empty input"}, "payload: empty input"},
		{&Error{Format: Payload, Field: "groups[2].values", Msg: "bin length 13 is not a multiple of 8"}, "payload: groups[2].values: bin length 13 is not a multiple of 8"},
		{&Error{Format: Manifest, File: `d/"m".json`, Msg: "not JSON"}, `manifest "d/\"m\".json": not JSON`},
		{&Error{Format: Manifest, File: "m.json", Field: "groups[0].layers[2].layout", Msg: "x"}, `manifest "m.json": groups[0].layers[2].layout: x`},
		{&Error{Format: NIXLLog, File: "a.jsonl", Line: 7, Field: "descs[2][0]", Msg: "not a number"}, `nixl log "a.jsonl": line 7: descs[2][0]: not a number`},
		{&Error{Format: NIXLLog, File: "a.jsonl", Line: 1, Msg: "empty"}, `nixl log "a.jsonl": line 1: empty`},
		{&Error{Format: Dump, File: "r.safetensors", Field: "parallel", Err: cause}, `dump "r.safetensors": parallel: ` + cause.Error()},
		{&Error{Format: Dump, File: "r", Msg: "m", Err: cause}, `dump "r": m`},
		{&Error{Format: SynthConfig, Field: "TP", Msg: "0 is not in 1..64"}, "synth.Config: TP: 0 is not in 1..64"},
		{errorf(Record, "r.json", "values", "%d of %d", 1, 2), `record "r.json": values: 1 of 2`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
		if got := c.e.Unwrap(); got != c.e.Err {
			t.Errorf("%+v: Unwrap %v", c.e, got)
		}
	}
	if !errors.Is(&Error{Format: Dump, Err: cause}, fs.ErrNotExist) {
		t.Error("errors.Is does not see the cause")
	}
}

// TestAs: the first Error of a format, through wrapping and through the
// causes of Errors of other formats; any format with ""; nil otherwise.
func TestAs(t *testing.T) {
	man := &Error{Format: Manifest, File: "m.json", Msg: "x"}
	dump := &Error{Format: Dump, File: "d", Err: fmt.Errorf("layer %q: %w", "l", man)}
	err := fmt.Errorf("consumer: %w", dump)
	for _, c := range []struct {
		err    error
		format string
		want   *Error
	}{
		{err, Dump, dump},
		{err, Manifest, man},
		{err, "", dump},
		{err, Record, nil},
		{man, Dump, nil},
		{errors.New("x"), "", nil},
		{nil, "", nil},
	} {
		if got := As(c.err, c.format); got != c.want {
			t.Errorf("As(%v, %q) = %v, want %v", c.err, c.format, got, c.want)
		}
	}
}

package report

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/layout"
)

// TestWriteJSONIsMarshalIndent: writeJSON writes what json.MarshalIndent
// writes, byte for byte, for random checks outputs (empty, nil and long
// lists of checks, omitted and present optional fields, strings that
// encoding/json escapes) and for outputs that hold no list of checks.
func TestWriteJSONIsMarshalIndent(t *testing.T) {
	hexes := func(t *rapid.T, label string) []layout.Hex64 {
		if rapid.IntRange(0, 5).Draw(t, label+" nil") == 0 {
			return nil
		}
		vals := rapid.SliceOfN(rapid.Uint64(), 0, 6).Draw(t, label)
		out := make([]layout.Hex64, len(vals))
		for i, v := range vals {
			out[i] = layout.Hex64(v)
		}
		return out
	}
	str := rapid.StringMatching(`[a-z<>&"\\\x00-\x1f\x{202e}é]{0,6}`)
	rapid.Check(t, func(t *rapid.T) {
		c := &ChecksumsJSON{Format: ChecksumsFormat, TPSize: rapid.IntRange(1, 4).Draw(t, "tp"), Numbering: str.Draw(t, "numbering")}
		if rapid.Bool().Draw(t, "requests nil") {
			c.Requests = []ChecksumRequestJSON{}
		}
		for r := range rapid.IntRange(0, 3).Draw(t, "requests") {
			rj := ChecksumRequestJSON{ID: str.Draw(t, "id"), ProducerID: str.Draw(t, "producer"), NumTokens: r, Unverified: rapid.SliceOfN(str, 0, 2).Draw(t, "unverified")}
			for g := range rapid.IntRange(0, 3).Draw(t, "groups") {
				gj := ChecksumGroupJSON{ID: g, Kind: str.Draw(t, "kind"), Fingerprint: layout.Hex64(rapid.Uint64().Draw(t, "fp")), MissingReplica: rapid.Bool().Draw(t, "missing")}
				if !rapid.Bool().Draw(t, "checks nil") {
					gj.Checks = [][]layout.Hex64{}
					for k := range rapid.IntRange(0, 3).Draw(t, "checks") {
						gj.Checks = append(gj.Checks, hexes(t, "check"+string(rune('0'+k))))
					}
				}
				if rapid.Bool().Draw(t, "keys") {
					gj.ReplicaKeys = [][2]int{{1, 0}}
				}
				rj.Groups = append(rj.Groups, gj)
			}
			if rapid.Bool().Draw(t, "skipped") {
				rj.SkippedGroups = []SkippedGroupJSON{{ID: 1, Reason: str.Draw(t, "reason")}}
			}
			c.Requests = append(c.Requests, rj)
		}
		if rapid.Bool().Draw(t, "repeated") {
			c.Repeated = []RepeatedBlockJSON{{Request: str.Draw(t, "rid"), Positions: []int{0, 2}}}
		}
		// An embedded struct's fields are its parent's in encoding/json:
		// left to it whole.
		type embeds struct {
			*ChecksumsJSON
			Extra int `json:"extra"`
		}
		for _, v := range []any{c, *c, &DiffJSON{Format: "x", Requests: []DiffRequestJSON{{ID: str.Draw(t, "d")}}}, nil, map[string]any{"a": c}, embeds{c, 1}} {
			want, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeJSON(&got, v); err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want)+"\n" {
				t.Fatalf("writeJSON:\n%s\nMarshalIndent:\n%s", got.String(), want)
			}
		}
	})
}

// TestWriteJSONStreams: the checks of a million positions are written
// without holding their text (about 30 MB as MarshalIndent writes it).
func TestWriteJSONStreams(t *testing.T) {
	check := make([]layout.Hex64, 1<<20)
	c := &ChecksumsJSON{Format: ChecksumsFormat, Requests: []ChecksumRequestJSON{{ID: "r", Groups: []ChecksumGroupJSON{{Checks: [][]layout.Hex64{check}}}}}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := writeJSON(io.Discard, c); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("writing 1M checks allocated %d MB", got>>20)
	}
}

package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// RecordFormat is the format tag of a record.
const RecordFormat = "kvaudit-record/1"

// Record is one rank's partial checksums (docs/spec.md §8).
type Record struct {
	Format string `json:"format"`
	// Source is the dump the record was computed from (informative).
	Source string `json:"source,omitempty"`
	Model  string `json:"model,omitempty"`
	TPRank int    `json:"tp_rank"`
	TPSize int    `json:"tp_size"`
	PPRank int    `json:"pp_rank"`
	PPSize int    `json:"pp_size"`
	// Groups describes every group of the rank's manifest.
	Groups []RecordGroup `json:"groups"`
	// SkippedGroups maps a group id to the reason it is not checksummed.
	SkippedGroups map[string]string `json:"skipped_groups"`
	Requests      []RecordRequest   `json:"requests"`
}

// RecordGroup is a group as one rank sees it.
type RecordGroup struct {
	ID              int          `json:"id"`
	Kind            string       `json:"kind"`
	BlockSize       int          `json:"block_size"`
	Fingerprint     layout.Hex64 `json:"fingerprint"`
	FingerprintFlat layout.Hex64 `json:"fingerprint_flat"`
	// Layers counts the group's layers on the rank (aliases included).
	Layers int `json:"layers"`
	// SplitLess marks a state group without a TP split (docs/spec.md §6):
	// comparable only between equal TP sizes.
	SplitLess bool `json:"split_less,omitempty"`
}

// RecordRequest is one request's partial checksums on one rank.
type RecordRequest struct {
	ID                     string               `json:"id"`
	ProducerID             string               `json:"producer_id,omitempty"`
	NumTokens              int                  `json:"num_tokens"`
	NumLocalComputedTokens int                  `json:"num_local_computed_tokens"`
	Groups                 []RecordRequestGroup `json:"groups"`
}

// RecordRequestGroup is one group's partial checksums for a request:
// Values.At(i)[k] is the sum of the rank's slices under ReplicaKeys[k] at
// block position Start+i.
type RecordRequestGroup struct {
	ID          int      `json:"id"`
	Start       int      `json:"start"`
	ReplicaKeys [][2]int `json:"replica_keys"`
	Values      Values   `json:"values"`
	// ValuesBlock are Values in block numbering (docs/spec.md §1), as vLLM's
	// published code computes them; absent (the zero Values) when the
	// engine did not give them (checksum.Options.BlockValues asks for
	// them).
	ValuesBlock Values `json:"values_block,omitzero"`
	// Mix is kvaudit's mix check (docs/spec.md §14), Mix.At(i)[k] beside
	// Values.At(i)[k]; absent (the zero Values) in records of engines that
	// do not compute it (the cuda engine) and of kvaudit before it, which
	// then compare by vLLM's checksum alone.
	Mix Values `json:"mix,omitzero"`
}

// MarshalRecord returns the record as indented JSON with a final newline.
func MarshalRecord(rec *Record) ([]byte, error) {
	b, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseRecords reads one record, or several JSON records one after the
// other, from a file's contents. On error it returns nil and a
// *parse.Error (parse.Record).
func ParseRecords(file string, data []byte) ([]*Record, error) {
	// Each document is decoded where it lies: no copy of the input.
	docs, err := splitJSONDocs(data)
	if err != nil {
		return nil, &parse.Error{Format: parse.Record, File: file, Msg: fmt.Sprintf("not JSON: %v", err)}
	}
	recs := make([]*Record, 0, len(docs))
	for i, d := range docs {
		var rec Record
		if err := layout.DecodeStrictJSON(data[d[0]:d[1]], &rec); err != nil {
			return nil, &parse.Error{Format: parse.Record, File: file, Field: recordField(i), Msg: err.Error()}
		}
		if err := rec.Validate(); err != nil {
			err.File = file
			if len(docs) > 1 {
				err.Field = recordField(i) + "." + err.Field
			}
			return nil, err
		}
		recs = append(recs, &rec)
	}
	return recs, nil
}

// splitJSONDocs returns the byte ranges of the JSON values that follow one
// another in data (whitespace between), as internal/jsonscan reads them;
// DecodeStrictJSON then checks and decodes each. A value with a syntax
// error ends the split: the range from its start to the end of the input
// is the last, and its check reports the error where it is. An input that
// is empty, that ends inside a value, or that holds a closing bracket where
// a value starts is an error of the split.
func splitJSONDocs(data []byte) ([][2]int, error) {
	sc := jsonscan.New(data, jsonscan.Options{Stream: true, LoneSurrogates: true})
	var docs [][2]int
	for {
		c, err := sc.Peek()
		if err != nil {
			break // only whitespace is left
		}
		start := int(sc.Offset())
		if c == '}' || c == ']' {
			return nil, fmt.Errorf("unbalanced %q at offset %d", c, start)
		}
		k, err := sc.Next()
		if err == nil {
			err = sc.Skip(k)
		}
		if err != nil {
			if je := (*jsonscan.Error)(nil); errors.As(err, &je) && je.Code == jsonscan.ErrEOF {
				return nil, fmt.Errorf("unexpected end of input (a value opened at offset %d does not close)", start)
			}
			docs = append(docs, [2]int{start, len(data)})
			break
		}
		docs = append(docs, [2]int{start, int(sc.Offset())})
	}
	if len(docs) == 0 {
		return nil, errors.New("unexpected end of JSON input")
	}
	return docs, nil
}

func recordField(i int) string { return fmt.Sprintf("records[%d]", i) }

// Validate checks a record's consistency. The error has no File.
func (rec *Record) Validate() *parse.Error {
	bad := func(field, format string, args ...any) *parse.Error {
		return &parse.Error{Format: parse.Record, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if rec.Format != RecordFormat {
		return bad("format", "got %q, want %q", rec.Format, RecordFormat)
	}
	if rec.TPSize < 1 || rec.TPSize > 1<<16 || rec.TPRank < 0 || rec.TPRank >= rec.TPSize {
		return bad("tp_rank", "rank %d of tp_size %d", rec.TPRank, rec.TPSize)
	}
	if rec.PPSize < 1 || rec.PPSize > 1<<16 || rec.PPRank < 0 || rec.PPRank >= rec.PPSize {
		return bad("pp_rank", "rank %d of pp_size %d", rec.PPRank, rec.PPSize)
	}
	groups := map[int]RecordGroup{}
	for i, g := range rec.Groups {
		f := fmt.Sprintf("groups[%d]", i)
		if _, ok := groups[g.ID]; ok {
			return bad(f+".id", "group %d appears twice", g.ID)
		}
		if g.ID < 0 || g.BlockSize < 1 || g.BlockSize > 1<<20 || g.Layers < 0 {
			return bad(f, "id %d, block_size %d, layers %d out of range", g.ID, g.BlockSize, g.Layers)
		}
		groups[g.ID] = g
	}
	for k := range rec.SkippedGroups {
		id, err := strconv.Atoi(k)
		if _, ok := groups[id]; err != nil || !ok {
			return bad(fmt.Sprintf("skipped_groups[%q]", k), "names no group of the record")
		}
	}
	ids := map[string]bool{}
	for i, r := range rec.Requests {
		f := fmt.Sprintf("requests[%d]", i)
		if r.ID == "" || ids[r.ID] {
			return bad(f+".id", "empty or repeated request id %q", r.ID)
		}
		ids[r.ID] = true
		if r.NumTokens < 0 || r.NumTokens > 1<<40 || r.NumLocalComputedTokens < 0 || r.NumLocalComputedTokens > r.NumTokens {
			return bad(f, "num_tokens %d, num_local_computed_tokens %d out of range", r.NumTokens, r.NumLocalComputedTokens)
		}
		seen := map[int]bool{}
		for j, g := range r.Groups {
			gf := fmt.Sprintf("%s.groups[%d]", f, j)
			gi, ok := groups[g.ID]
			if !ok || seen[g.ID] {
				return bad(gf+".id", "group %d is not a group of the record or appears twice", g.ID)
			}
			seen[g.ID] = true
			if g.Start < 0 || g.Start > 1<<40 {
				return bad(gf+".start", "%d out of range", g.Start)
			}
			// Exactly the values start, num_tokens and the block size
			// imply: the run ends at the request's last block (docs/spec.md §5, §9).
			if gi.Kind == layout.KindMamba {
				if g.Start != 0 || g.Values.Len() != 1 {
					return bad(gf+".values", "a state group has one value at position 0, got %d from position %d", g.Values.Len(), g.Start)
				}
			} else if want := (r.NumTokens+gi.BlockSize-1)/gi.BlockSize - g.Start; want < 1 || g.Values.Len() != want {
				return bad(gf+".values", "%d values from position %d; num_tokens %d and block size %d imply %d", g.Values.Len(), g.Start, r.NumTokens, gi.BlockSize, max(want, 0))
			}
			if len(g.ReplicaKeys) == 0 {
				return bad(gf+".replica_keys", "empty")
			}
			for k, key := range g.ReplicaKeys {
				if key[0] < 1 || key[0] > rec.TPSize || key[1] < 0 || key[1] >= key[0] {
					return bad(fmt.Sprintf("%s.replica_keys[%d]", gf, k), "key %v is not (replicas in 1..tp_size, index < replicas)", key)
				}
				for _, prev := range g.ReplicaKeys[:k] {
					if prev == key {
						return bad(fmt.Sprintf("%s.replica_keys[%d]", gf, k), "key %v appears twice", key)
					}
				}
			}
			if k, n, ragged := g.Values.ragged(len(g.ReplicaKeys)); ragged {
				return bad(fmt.Sprintf("%s.values[%d]", gf, k), "%d values for %d replica keys", n, len(g.ReplicaKeys))
			}
			for _, extra := range []struct {
				name string
				vals Values
			}{{"values_block", g.ValuesBlock}, {"mix", g.Mix}} {
				if extra.vals.IsZero() {
					continue
				}
				if extra.vals.Len() != g.Values.Len() {
					return bad(gf+"."+extra.name, "%d positions, values has %d", extra.vals.Len(), g.Values.Len())
				}
				if k, n, ragged := extra.vals.ragged(len(g.ReplicaKeys)); ragged {
					return bad(fmt.Sprintf("%s.%s[%d]", gf, extra.name, k), "%d values for %d replica keys", n, len(g.ReplicaKeys))
				}
			}
		}
	}
	return nil
}

package verify_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// storedSide synthesizes a side in the dir format and returns each rank's
// dump directory.
func storedSide(t *testing.T, cfg synth.Config) []string {
	t.Helper()
	cfg.Format = "dir"
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// blockHash is a test's block hash of request id at position p.
func blockHash(id string, p int) string {
	s := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", id, p)))
	return hex.EncodeToString(s[:])
}

// rewrite replaces a dump directory's manifest.json with edit's result
// (a fresh file: the directory is the test's own copy).
func rewrite(t *testing.T, dir string, edit func(m *layout.Manifest)) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.ParseManifest(p, data)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	text, err := layout.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, text, 0o644); err != nil {
		t.Fatal(err)
	}
}

func storedOf(t *testing.T, dir string) *verify.StoredRank {
	t.Helper()
	d, err := layout.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := verify.RankStored(context.Background(), d, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoredSums: a stored checksum's sum is the rank's part of the block
// checksum over every replica key (the record's values of the position,
// added), and stored values written into the manifest match.
func TestStoredSums(t *testing.T) {
	for _, cfg := range []synth.Config{
		{Preset: "llama", TP: 2, Layers: 2},
		{Preset: "indexer", TP: 2, Layout: "hnd"},
		{Preset: "mamba2-hybrid", TP: 2},
	} {
		t.Run(cfg.Preset, func(t *testing.T) {
			for _, dir := range storedSide(t, cfg) {
				rewrite(t, dir, func(m *layout.Manifest) {
					for i := range m.Requests {
						r := &m.Requests[i]
						r.BlockHashes = map[string][]string{}
						for key := range r.BlockTable {
							for p := range len(r.BlockTable[key]) {
								r.BlockHashes[key] = append(r.BlockHashes[key], blockHash(r.ID, p))
							}
						}
						for key := range r.StateBlock {
							r.BlockHashes[key] = []string{blockHash(r.ID, 0)}
						}
					}
				})
				d, err := layout.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := checksum.RankRecord(context.Background(), d, checksum.Options{})
				if err != nil {
					t.Fatal(err)
				}
				s, err := verify.RankStored(context.Background(), d, checksum.Options{Engine: checksum.Reference{}})
				d.Close()
				if err != nil {
					t.Fatal(err)
				}
				if len(s.Blocks) == 0 {
					t.Fatal("no stored block")
				}
				for _, g := range d.Groups {
					if g.Group.Kind == layout.KindMamba && s.Skipped[g.Group.ID] != verify.StoredSkipState {
						t.Errorf("state group %d: skipped %q", g.Group.ID, s.Skipped[g.Group.ID])
					}
				}
				for _, b := range s.Blocks {
					var want uint64
					for _, rr := range rec.Requests {
						for _, g := range rr.Groups {
							if rr.ID == b.Request && g.ID == b.Group {
								for _, v := range g.Values.At(b.Position - g.Start) {
									want += uint64(v)
								}
							}
						}
					}
					if b.Sum != want {
						t.Errorf("%s group %d position %d: sum %#x, record says %#x", b.Request, b.Group, b.Position, b.Sum, want)
					}
					if b.HasStored {
						t.Errorf("%s position %d: a stored value without stored_checksums", b.Request, b.Position)
					}
				}
				// Write the values into the manifest: every block matches.
				rewrite(t, dir, func(m *layout.Manifest) { setStored(m, s.Blocks, nil) })
				again := storedOf(t, dir)
				if again.Checked() != len(s.Blocks) || len(again.Mismatches()) != 0 {
					t.Errorf("%d of %d blocks checked, %d mismatches", again.Checked(), len(s.Blocks), len(again.Mismatches()))
				}
			}
		})
	}
}

// setStored writes the blocks' values as the manifest's stored checksums;
// override, when it returns true, replaces a value.
func setStored(m *layout.Manifest, blocks []verify.StoredBlock, override func(b verify.StoredBlock) (uint64, bool)) {
	for i := range m.Requests {
		r := &m.Requests[i]
		r.StoredChecksums = map[string][]string{}
		for _, b := range blocks {
			if b.Request != r.ID {
				continue
			}
			key := fmt.Sprint(b.Group)
			for len(r.StoredChecksums[key]) < b.Position {
				r.StoredChecksums[key] = append(r.StoredChecksums[key], "0x0")
			}
			v := b.Value
			if override != nil {
				if o, ok := override(b); ok {
					v = o
				}
			}
			r.StoredChecksums[key] = append(r.StoredChecksums[key], layout.Hex64(v).String())
		}
	}
}

// TestStoredWrongPrefix: an offload store that returns another prefix's
// intact block, with that block's own intact stored value, passes an
// untagged comparison but fails the tagged one, and a changed byte fails
// both.
func TestStoredWrongPrefix(t *testing.T) {
	dir := storedSide(t, synth.Config{Preset: "llama", Layers: 2, Requests: 2, Tokens: 48})[0]
	rewrite(t, dir, func(m *layout.Manifest) {
		for i := range m.Requests {
			r := &m.Requests[i]
			r.BlockHashes = map[string][]string{"0": {blockHash(r.ID, 0), blockHash(r.ID, 1), blockHash(r.ID, 2)}}
		}
	})
	clean := storedOf(t, dir)
	find := func(id string, p int) verify.StoredBlock {
		for _, b := range clean.Blocks {
			if b.Request == id && b.Position == p {
				return b
			}
		}
		t.Fatalf("no block %s/%d", id, p)
		return verify.StoredBlock{}
	}
	victim, other := find("req-0", 1), find("req-1", 1)
	// The store hands req-0 the block (and stored value) it holds for
	// req-1's prefix: copy req-1's block 1 over req-0's block 1.
	d, err := layout.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	type edit struct {
		file string
		off  int64
		data []byte
	}
	var edits []edit
	for _, c := range d.Groups[0].Caches {
		cv := &c.Cells
		for tok := range d.Groups[0].Group.BlockSize {
			for h := range cv.Heads {
				for _, run := range cv.Runs {
					src := cv.CellAddr(other.Block, tok, h) + run.Offset
					dst := cv.CellAddr(victim.Block, tok, h) + run.Offset
					edits = append(edits, edit{cv.File, cv.FileOffset + dst, append([]byte(nil), cv.Data[src:src+int64(run.Len)]...)})
				}
			}
		}
	}
	d.Close()
	apply := func(edits []edit) {
		for _, e := range edits {
			f, err := os.OpenFile(e.file, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(e.data, e.off); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	apply(edits)
	rewrite(t, dir, func(m *layout.Manifest) {
		setStored(m, clean.Blocks, func(b verify.StoredBlock) (uint64, bool) {
			return other.Value, b.Request == victim.Request && b.Position == victim.Position
		})
	})
	got := storedOf(t, dir)
	bad := got.Mismatches()
	if len(bad) != 1 || bad[0].Request != "req-0" || bad[0].Position != 1 {
		t.Fatalf("mismatches %+v, want req-0 position 1 only", bad)
	}
	// Untagged, the loaded block agrees with the value it came with.
	fp := bad[0].Value ^ bad[0].Sum ^ mustTag(t, victim.Hash, 0)
	if bad[0].Sum != other.Value^mustTag(t, other.Hash, fp) {
		t.Errorf("the loaded block's sum %#x is not the sum stored for req-1's prefix", bad[0].Sum)
	}
	// A changed byte fails too.
	e := edits[0]
	e.data = []byte{e.data[0] ^ 0x10}
	apply([]edit{{e.file, e.off, e.data}})
	if n := len(storedOf(t, dir).Mismatches()); n != 1 {
		t.Errorf("after a flipped bit: %d mismatches, want 1", n)
	}
}

func mustTag(t *testing.T, hash string, fp uint64) uint64 {
	t.Helper()
	v, err := checksum.StoredTag(hash, fp)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStoredBadHash: a block hash that is not hex is an error naming the
// field.
func TestStoredBadHash(t *testing.T) {
	dir := storedSide(t, synth.Config{Preset: "tiny"})[0]
	rewrite(t, dir, func(m *layout.Manifest) {
		m.Requests[0].BlockHashes = map[string][]string{"0": {"not-hex"}}
	})
	d, err := layout.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = verify.RankStored(context.Background(), d, checksum.Options{})
	if err == nil || !strings.Contains(err.Error(), `block_hashes["0"][0]`) {
		t.Errorf("got %v, want an error naming block_hashes[\"0\"][0]", err)
	}
}

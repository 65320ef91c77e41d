package inject

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// PrepareOptions say how to turn a side into the consumer an audit
// expects.
type PrepareOptions struct {
	// ZeroTails zeroes every cell slot of an attention cache that no
	// request's valid token occupies: the tails of last blocks, blocks
	// past a request's last token and unused blocks (what a connector
	// that keeps the transferred-or-zeroed invariant leaves).
	ZeroTails bool
	// ExtraBlocks appends this many unused blocks to every request's
	// attention block tables, past its last token (blocks a consumer
	// allocated beyond the transfer).
	ExtraBlocks int
	// Stored gives every request block_hashes for its full attention
	// blocks (kept where the manifest has them; else synthesized from the
	// request id, group and position, chained like prefix hashes) and the
	// stored_checksums of those blocks (an offload tier that stored them).
	Stored bool
	// Engine computes the stored checksums (nil: the cpu engine).
	Engine checksum.Engine
}

// asks says whether the options ask for any preparation.
func (o PrepareOptions) asks() bool { return o.ZeroTails || o.ExtraBlocks > 0 || o.Stored }

// Asks says whether o asks for anything: Inject then copies the side
// twice, into the prepared copy and into the output.
func (o PrepareOptions) Asks() bool { return o.asks() }

// Prepare writes into out (created, and empty if it exists) a copy of the
// side made of dumps with opts applied, each rank under the name it has
// beside its input, and returns the paths of the dumps written. Every
// file is copied (never linked: the copy shares no storage with the
// input); the dumps are only read.
func Prepare(ctx context.Context, dumps []*layout.Dump, out string, opts PrepareOptions) ([]string, error) {
	if err := refuseDevice(dumps); err != nil {
		return nil, err
	}
	if err := prepareOut(out); err != nil {
		return nil, err
	}
	var paths []string
	for _, d := range dumps {
		p, err := prepareRank(ctx, d, out, opts)
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// cloneManifest deep-copies a manifest.
func cloneManifest(m *layout.Manifest) (*layout.Manifest, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var c layout.Manifest
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// blockHash is the block hash Prepare gives position pos of a request's
// group when the manifest has none: the hex SHA-256 of the previous
// position's hash (none for position 0), the request id, the group and
// the position.
func blockHash(prev, request string, group, pos int) string {
	s := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d|%d", prev, request, group, pos))
	return hex.EncodeToString(s[:])
}

// prepareRank writes rank d into out with opts applied: blocks appended
// to the tables, tails zeroed, stored checksums added.
func prepareRank(ctx context.Context, d *layout.Dump, out string, opts PrepareOptions) (string, error) {
	m, err := cloneManifest(d.Manifest)
	if err != nil {
		return "", err
	}
	if opts.ExtraBlocks > 0 {
		if err := addExtraBlocks(d, m, opts.ExtraBlocks); err != nil {
			return "", err
		}
	}
	var edits []edit
	if opts.ZeroTails {
		err := layout.Guard("dump data while zeroing tails", func() error {
			edits = zeroEdits(d, m)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	if opts.Stored {
		if err := addStored(ctx, d, m, opts.Engine); err != nil {
			return "", err
		}
	}
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("dump %q: the prepared manifest: %w", d.Path, err)
	}
	return writeDump(ctx, d, out, m, edits)
}

// attention says whether a group holds attention caches (not state).
func attention(g *layout.Group) bool { return g.Kind != layout.KindMamba }

// addExtraBlocks appends n unused blocks to every request's attention
// block tables in m (rank d's manifest, being prepared), past its last
// token.
func addExtraBlocks(d *layout.Dump, m *layout.Manifest, n int) error {
	for _, g := range m.Groups {
		if !attention(&g) {
			continue
		}
		key := strconv.Itoa(g.ID)
		used := map[int]bool{}
		for _, r := range m.Requests {
			for _, b := range r.BlockTable[key] {
				if b != layout.NoBlock {
					used[b] = true
				}
			}
		}
		next := 0
		for ri := range m.Requests {
			r := &m.Requests[ri]
			t, ok := r.BlockTable[key]
			if !ok {
				continue
			}
			for range n {
				for next < m.NumBlocks && used[next] {
					next++
				}
				if next == m.NumBlocks {
					return &OptionError{Option: "ExtraBlocks", Value: strconv.Itoa(n), Msg: fmt.Sprintf("dump %q group %d: no unused block left", d.Path, g.ID)}
				}
				b := next
				used[b] = true
				t = append(t, b)
			}
			r.BlockTable[key] = t
		}
	}
	return nil
}

// addStored gives every request of m (rank d's manifest, being prepared)
// block_hashes for its full attention blocks (kept where the manifest has
// them, else blockHash) and the stored_checksums of those blocks,
// computed with engine.
func addStored(ctx context.Context, d *layout.Dump, m *layout.Manifest, engine checksum.Engine) error {
	for ri := range m.Requests {
		r := &m.Requests[ri]
		for _, g := range m.Groups {
			key := strconv.Itoa(g.ID)
			t, ok := r.BlockTable[key]
			if !attention(&g) || !ok {
				continue
			}
			full := min(r.NumTokens/g.BlockSize, len(t))
			if full == 0 {
				continue
			}
			if r.BlockHashes == nil {
				r.BlockHashes = map[string][]string{}
			}
			hashes := slices.Clone(r.BlockHashes[key])
			for p := len(hashes); p < full; p++ {
				prev := ""
				if p > 0 {
					prev = hashes[p-1]
				}
				hashes = append(hashes, blockHash(prev, r.ID, g.ID, p))
			}
			r.BlockHashes[key] = hashes
		}
	}
	// Compute the values on a view of the dump with the new manifest:
	// zeroing tails does not touch the valid tokens of full blocks.
	view := *d
	view.Manifest = m
	s, err := verify.RankStored(ctx, &view, checksum.Options{Engine: engine})
	if err != nil {
		return err
	}
	for ri := range m.Requests {
		r := &m.Requests[ri]
		r.StoredChecksums = nil
		for _, b := range s.Blocks {
			if b.Request != r.ID {
				continue
			}
			if r.StoredChecksums == nil {
				r.StoredChecksums = map[string][]string{}
			}
			key := strconv.Itoa(b.Group)
			for len(r.StoredChecksums[key]) < b.Position {
				// a null block: no value can be stored for it
				r.StoredChecksums[key] = append(r.StoredChecksums[key], layout.Hex64(0).String())
			}
			r.StoredChecksums[key] = append(r.StoredChecksums[key], layout.Hex64(b.Value).String())
		}
	}
	return nil
}

// zeroEdits zeroes every slot of every block of the dump's attention
// caches past the valid tokens its owners hold (by the new manifest m).
func zeroEdits(d *layout.Dump, m *layout.Manifest) []edit {
	var edits []edit
	p := &planner{}
	for _, gv := range d.Groups {
		g := gv.Group
		if g.Kind == layout.KindMamba || gv.Skip != "" {
			continue
		}
		key := strconv.Itoa(g.ID)
		owned := make([]int, m.NumBlocks)
		for _, r := range m.Requests {
			for pos, b := range r.BlockTable[key] {
				if b != layout.NoBlock {
					owned[b] = max(owned[b], blockspan.ValidTokens(r.NumTokens, pos, g.BlockSize))
				}
			}
		}
		for _, v := range gv.Caches {
			if v.Cells.Data == nil {
				continue
			}
			c := cache{View: v}
			zero := make([]byte, v.Cells.CellBytes)
			for b := range m.NumBlocks {
				for slot := owned[b]; slot < g.BlockSize; slot++ {
					for lh := range v.Heads {
						if slices.ContainsFunc(p.cell(c, b, slot, lh), func(x byte) bool { return x != 0 }) {
							p.write(c, b, slot, lh, zero)
						}
					}
				}
			}
		}
	}
	edits = p.edits
	return edits
}

// writeDump writes a rank's dump into out with manifest m and the edits:
// a .safetensors dump rewritten with m embedded, a dump directory with a
// new manifest.json; other files copied (never linked) and patched.
func writeDump(ctx context.Context, d *layout.Dump, out string, m *layout.Manifest, edits []edit) (string, error) {
	rf, err := dumpFiles(d)
	if err != nil {
		return "", err
	}
	mf, err := manifestFile(d)
	if err != nil {
		return "", err
	}
	byFile := map[string][]edit{}
	for _, e := range edits {
		byFile[e.file] = append(byFile[e.file], e)
	}
	base := filepath.Join(out, filepath.Base(d.Path))
	for i, src := range rf.files {
		dst := filepath.Join(out, filepath.FromSlash(rf.rel[i]))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		switch {
		case src == mf && filepath.Base(src) == "manifest.json":
			text, err := layout.MarshalManifest(m)
			if err != nil {
				return "", err
			}
			if err := writeNew(dst, append(text, '\n')); err != nil {
				return "", err
			}
		case src == mf:
			if err := rewriteEmbedded(src, dst, m, byFile[src]); err != nil {
				return "", err
			}
		default:
			if err := copyFile(ctx, src, dst); err != nil {
				return "", err
			}
			if es := byFile[src]; len(es) > 0 {
				moved := slices.Clone(es)
				for i := range moved {
					moved[i].file = dst
				}
				if _, err := patchFile(dst, moved); err != nil {
					return "", err
				}
			}
		}
	}
	return base, nil
}

// rewriteEmbedded writes a .safetensors dump anew: its tensors (streamed
// from the mapped input, never held in memory) and manifest m in its
// metadata, then the edits patched in at the tensors' new offsets.
func rewriteEmbedded(src, dst string, m *layout.Manifest, edits []edit) error {
	st, err := safetensors.Open(src)
	if err != nil {
		return err
	}
	defer st.Close()
	tensors := make([]safetensors.TensorData, len(st.Tensors))
	begin := make([]int64, len(st.Tensors)) // in the new data section
	var pos int64
	for i, t := range st.Tensors {
		tensors[i] = safetensors.TensorData{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: t.Data}
		begin[i] = pos
		pos += int64(len(t.Data))
	}
	err = layout.Guard("dump data while rewriting "+src, func() error {
		return dumpwrite.File(dst, m, tensors)
	})
	if err != nil || len(edits) == 0 {
		return err
	}
	out, err := safetensors.Open(dst)
	if err != nil {
		return err
	}
	dataOffset := out.DataOffset
	out.Close()
	moved := make([]edit, 0, len(edits))
	for _, e := range edits {
		rel := e.off - st.DataOffset
		i := slices.IndexFunc(st.Tensors, func(t safetensors.TensorInfo) bool {
			return rel >= t.Begin && rel+int64(len(e.data)) <= t.End
		})
		if i < 0 {
			return checksum.Internalf("an edit of %q at %d+%d lies in no tensor", src, e.off, len(e.data))
		}
		e.file, e.off = dst, dataOffset+begin[i]+rel-st.Tensors[i].Begin
		moved = append(moved, e)
	}
	_, err = patchFile(dst, moved)
	return err
}

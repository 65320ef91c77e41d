package inject

import (
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
)

// Audit faults: faults the faulted request's checksum does not see, caught
// by the checks beside it: another request's checksums (a write into a
// block it owns), the tail audit (bytes left past the transferred range),
// the stored checksums of an offload tier (an intact block of another
// prefix).

// Audit fault kinds.
const (
	StrayWrite  Kind = "stray-write"
	StaleTail   Kind = "stale-tail"
	WrongPrefix Kind = "wrong-prefix"
)

var strayWrite = kindDef{
	kind:     StrayWrite,
	models:   "a transfer wrote into a block another request owns",
	detector: DetectCoResident,
	plan:     dumpPlan((*planner).strayWrite),
}

var staleTail = kindDef{
	kind:     StaleTail,
	models:   "the untransferred tail of the last block, or a block past the transfer, left unzeroed",
	detector: DetectTail,
	plan:     dumpPlan((*planner).staleTail),
}

var wrongPrefix = kindDef{
	kind:     WrongPrefix,
	models:   "an offload store returned an intact block stored for another prefix",
	detector: DetectStored,
	plan:     dumpPlan((*planner).wrongPrefix),
}

// strayWrite copies a full block of the targeted request into a block
// another request owns, on one rank; the targeted request is untouched.
func (p *planner) strayWrite() error {
	type cand struct {
		src    place
		victim place
	}
	var cands []cand
	t := p.opts.Target
	for _, src := range p.places(false, false, place.full) {
		if t.Position != nil && src.pos != *t.Position {
			continue
		}
		for _, id := range p.ranks.ids {
			if id == src.id {
				continue
			}
			// The victim's positions: the target's request names the
			// source, so look at the other requests without it.
			saved := p.opts.Target
			p.opts.Target.Request, p.opts.Target.Position = id, nil
			victims := p.places(false, true, func(v place) bool { return v.g.ID == src.g.ID })
			p.opts.Target = saved
			for _, v := range victims {
				if len(p.filterCaches(src.g.ID, func(c cache) bool {
					return p.hasBlocks(c.Dump, src.id, src.g, src.pos) && p.hasBlocks(c.Dump, v.id, v.g, v.pos)
				})) > 0 {
					cands = append(cands, cand{src, v})
				}
			}
		}
	}
	if len(cands) == 0 {
		return p.na("no second request: a stray write needs a block another request owns")
	}
	c := pick(p.rng, cands)
	cs, di, err := p.rankCaches(c.src.g, func(di int) bool {
		return p.hasBlocks(di, c.src.id, c.src.g, c.src.pos) && p.hasBlocks(di, c.victim.id, c.victim.g, c.victim.pos)
	})
	if err != nil {
		return err
	}
	src, dst := p.blockOf(di, c.src.id, c.src.g, c.src.pos), p.blockOf(di, c.victim.id, c.victim.g, c.victim.pos)
	p.moveBlock(cs, src, dst, c.victim.id, c.victim.g, c.victim.pos, c.victim.valid, "holds KV of request "+c.src.id)
	if len(p.details) == 0 {
		return p.na("the two blocks are equal")
	}
	p.f.Request = c.src.id
	p.f.Description = fmt.Sprintf("request %q's block %d (group %d position %d) was also written into block id %d, which request %q owns at position %d, on rank %s",
		c.src.id, src, c.src.g.ID, c.src.pos, dst, c.victim.id, c.victim.pos, p.ranks.rankOf(di))
	return nil
}

// staleTail leaves noise past num_tokens (the tail of the last block, or a
// block past the transfer) on one rank: only the tail audit sees it.
func (p *planner) staleTail() error {
	w, err := p.writePastTokens(false)
	if err != nil {
		return err
	}
	p.f.Expect.Tail = w.tail
	p.f.Description = fmt.Sprintf("left noise in %s (block id %d, position %d) of request %q group %d in %d cache(s) on rank %s",
		w.where(), w.block, w.rg.pos, w.rg.id, w.rg.g.ID, len(w.cs), p.ranks.rankOf(w.di))
	return nil
}

// storedBlock is a full block of a request with a stored checksum: its
// place, block hash and stored checksum text.
type storedBlock struct {
	pl   place
	hash string
	text string
}

// prefixSwap is a wrong-prefix candidate on rank di: victim's block and
// stored checksum replaced by src's, another prefix's at the same
// position.
type prefixSwap struct {
	di          int
	victim, src storedBlock
}

// storedBlocks lists rank di's full attention blocks with stored
// checksums and block hashes, in request order.
func (p *planner) storedBlocks(di int) []storedBlock {
	d := p.ranks.Dumps[di]
	var all []storedBlock
	for _, r := range d.Manifest.Requests {
		for _, key := range slices.Sorted(maps.Keys(r.StoredChecksums)) {
			gid, _ := strconv.Atoi(key)
			g := d.Manifest.Group(gid)
			gv := d.GroupView(gid)
			if g.Kind == layout.KindMamba || gv.Skip != "" || len(gv.Caches) == 0 {
				continue
			}
			for pos, text := range r.StoredChecksums[key] {
				if pos >= len(r.BlockHashes[key]) || blockspan.ValidTokens(r.NumTokens, pos, g.BlockSize) != g.BlockSize {
					continue
				}
				if _, ok := p.ranks.Block(di, r.ID, g, pos); !ok {
					continue
				}
				all = append(all, storedBlock{place{r.ID, g, pos, g.BlockSize}, r.BlockHashes[key][pos], text})
			}
		}
	}
	return all
}

// prefixSwaps lists, on the target's ranks, the target's stored blocks
// (those the fault may change) with each block another prefix stored at
// the same position: its sum alone equals the loaded block's, only the
// tag differs.
func (p *planner) prefixSwaps() []prefixSwap {
	var cands []prefixSwap
	t := p.opts.Target
	for di := range p.ranks.Dumps {
		if t.Rank != nil && p.ranks.rankOf(di) != *t.Rank {
			continue
		}
		all := p.storedBlocks(di)
		for _, v := range all {
			if (t.Request != "" && v.pl.id != t.Request) || (t.Group != nil && v.pl.g.ID != *t.Group) || (t.Position != nil && v.pl.pos != *t.Position) {
				continue
			}
			if !p.opts.allows(v.pl.id, v.pl.g.ID, v.pl.pos) {
				continue
			}
			for _, s := range all {
				if s.pl.id != v.pl.id && s.pl.g.ID == v.pl.g.ID && s.pl.pos == v.pl.pos && s.hash != v.hash && s.text != v.text {
					cands = append(cands, prefixSwap{di, v, s})
				}
			}
		}
	}
	return cands
}

// wrongPrefix makes a block and its stored checksum those the offload
// store keeps for another prefix (another request's full block with a
// different block hash), on one rank.
func (p *planner) wrongPrefix() error {
	cands := p.prefixSwaps()
	if len(cands) == 0 {
		return p.na("no rank lists stored checksums (block_hashes and stored_checksums) for full blocks of two requests")
	}
	c := pick(p.rng, cands)
	d := p.ranks.Dumps[c.di]
	for _, s := range []storedBlock{c.victim, c.src} {
		if _, err := layout.ParseHex64(s.text); err != nil || len(s.text) != 18 {
			return p.na("stored checksum %q is not 0x and 16 hex digits", s.text)
		}
	}
	mf, err := manifestFile(d)
	if err != nil {
		return err
	}
	text, err := readManifestBytes(mf)
	if err != nil {
		return err
	}
	e, err := replaceText(mf, text, c.victim.text, c.src.text)
	if err != nil {
		return p.na("%v", err)
	}
	p.edits = append(p.edits, e)
	g := c.victim.pl.g
	var cs []cache
	for _, x := range p.ranks.Caches(g.ID) {
		if x.Dump == c.di {
			cs = append(cs, x)
		}
	}
	src, dst := p.blockOf(c.di, c.src.pl.id, g, c.src.pl.pos), p.blockOf(c.di, c.victim.pl.id, g, c.victim.pl.pos)
	for _, x := range cs {
		for slot := range g.BlockSize {
			for lh := range x.View.Heads {
				p.write(x, dst, slot, lh, p.cell(x, src, slot, lh))
			}
		}
		for lh := range x.View.Heads {
			if p.validDiffers(x, src, dst, g.BlockSize, lh) {
				p.mismatch(c.victim.pl.id, g.ID, c.victim.pl.pos, x.View.Key())
				p.detail(c.victim.pl.id, g.ID, c.victim.pl.pos, x, lh, "holds KV of request "+c.src.pl.id, nil)
			}
		}
	}
	p.f.Expect.Stored = []AuditPlace{{Request: c.victim.pl.id, Group: g.ID, Position: c.victim.pl.pos, Rank: p.ranks.rankOf(c.di)}}
	p.f.Request = c.victim.pl.id
	p.f.Description = fmt.Sprintf("the offload store returned, for request %q group %d position %d (block id %d) on rank %s, the block and stored checksum %s it keeps for request %q position %d (another prefix)",
		c.victim.pl.id, g.ID, c.victim.pl.pos, dst, p.ranks.rankOf(c.di), c.src.text, c.src.pl.id, c.src.pl.pos)
	return nil
}

// readManifestBytes reads a manifest.json, or the header of a
// .safetensors dump (where an embedded manifest lives).
func readManifestBytes(path string) ([]byte, error) {
	if filepath.Base(path) == "manifest.json" {
		return mapped.ReadRegularFile(path, layout.MaxManifestSize, "manifest")
	}
	f, _, err := mapped.OpenRegular(nil, path, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > safetensors.MaxHeader {
		return nil, fmt.Errorf("%q: header of %d bytes", path, size)
	}
	b := make([]byte, 8+size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

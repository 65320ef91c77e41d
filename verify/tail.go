package verify

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/layout"
)

// TailFinding is a block of a consumer request, past the range its
// transfer wrote, that holds non-zero bytes on one rank in one layer: the
// tail of the request's last block (slots past num_tokens), or a whole
// block of its table past the last token.
type TailFinding struct {
	Request  string
	Group    int
	Position int
	// Block is the block id.
	Block int
	Rank  layout.Rank
	// Layer is the cache's layer name.
	Layer string
	// Whole is set for a block past the last token (else it is the tail
	// of the last block).
	Whole bool
	// FirstToken and LastToken are the request token positions of the
	// first and last slots holding non-zero bytes.
	FirstToken, LastToken int
	// Bytes counts the non-zero bytes; File and Offset locate the first.
	Bytes  int
	File   string
	Offset int64
}

// TailAudit is the result of the transferred-or-zeroed audit.
type TailAudit struct {
	// Checked counts the (request, group, position, rank, layer) regions
	// read.
	Checked  int
	Findings []TailFinding
	// Notes say what could not be audited (skipped groups, device
	// memory).
	Notes []string
}

// AuditTails checks the invariant a consumer's connector must keep: every
// byte of a request's attention blocks past the transferred range is zero
// (the tail of the last block past num_tokens, and whole blocks of its
// table past the last token). Only cell bytes are read (not padding between
// blocks); slots that hold another request's valid tokens (a shared block)
// are not counted; state groups have no token blocks and are not audited.
// requests restricts the requests (all when empty). The audit reads mapped
// data inside layout.Guard; a fault there is the only error.
//
// It is a load-time check: a dump taken after decoding started holds the
// decoded tokens' KV past num_tokens and fails it, as it should.
func AuditTails(dumps []*layout.Dump, requests []string) (*TailAudit, error) {
	a := &TailAudit{}
	err := layout.Guard("dump data during the tail audit", func() error {
		for _, d := range dumps {
			auditRank(a, d, requests)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(a.Findings, func(x, y TailFinding) int {
		return cmp.Or(cmp.Compare(x.Request, y.Request), cmp.Compare(x.Group, y.Group), cmp.Compare(x.Position, y.Position),
			cmp.Compare(x.Rank.PP, y.Rank.PP), cmp.Compare(x.Rank.TP, y.Rank.TP), cmp.Compare(x.Layer, y.Layer))
	})
	return a, nil
}

func auditRank(a *TailAudit, d *layout.Dump, requests []string) {
	pp, tp := d.Rank()
	rank := layout.Rank{PP: pp, TP: tp}
	m := d.Manifest
	for _, gv := range d.Groups {
		g := gv.Group
		if g.Kind == layout.KindMamba {
			continue
		}
		key := strconv.Itoa(g.ID)
		S := g.BlockSize
		// owned[b]: the valid slots some request holds in block b.
		owned := map[int]int{}
		for _, r := range m.Requests {
			for pos, b := range r.BlockTable[key] {
				if b != layout.NoBlock {
					owned[b] = max(owned[b], blockspan.ValidTokens(r.NumTokens, pos, S))
				}
			}
		}
		// The tail of block b is the same for every position that reads
		// it (from owned[b] on): each block's is read once (the work a
		// manifest naming one block many times asks for stays bounded by
		// the cache, docs/spec.md §10), keyed by block and cache.
		tails := map[[2]int]TailFinding{}
		for _, r := range m.Requests {
			if len(requests) > 0 && !slices.Contains(requests, r.ID) {
				continue
			}
			table, ok := r.BlockTable[key]
			if !ok {
				continue
			}
			if gv.Skip != "" {
				a.Notes = append(a.Notes, fmt.Sprintf("rank %s group %d: not audited: %s", rank, g.ID, gv.Skip))
				continue
			}
			for pos := r.NumTokens / S; pos < len(table); pos++ {
				if table[pos] == layout.NoBlock {
					continue
				}
				b := table[pos]
				lo := max(0, r.NumTokens-pos*S, owned[b])
				for ci, c := range gv.Caches {
					cv := &c.Cells
					if cv.Data == nil {
						a.Notes = append(a.Notes, fmt.Sprintf("rank %s layer %q: not audited: in device memory", rank, c.Layer.Name))
						continue
					}
					a.Checked++
					f := TailFinding{Request: r.ID, Group: g.ID, Position: pos, Block: b, Rank: rank, Layer: c.Layer.Name,
						Whole: r.NumTokens <= pos*S, FirstToken: -1}
					if t, ok := tails[[2]int{b, ci}]; ok && lo == owned[b] {
						if t.Bytes > 0 {
							f.File, f.Offset, f.Bytes = t.File, t.Offset, t.Bytes
							f.FirstToken, f.LastToken = pos*S+t.FirstToken, pos*S+t.LastToken
							a.Findings = append(a.Findings, f)
						}
						continue
					}
					for slot := lo; slot < S; slot++ {
						for h := range cv.Heads {
							addr := cv.CellAddr(b, slot, h)
							for _, run := range cv.Runs {
								for i, x := range cv.Data[addr+run.Offset : addr+run.Offset+int64(run.Len)] {
									if x == 0 {
										continue
									}
									if f.Bytes == 0 {
										f.File, f.Offset = cv.File, cv.FileOffset+addr+run.Offset+int64(i)
										f.FirstToken = pos*S + slot
									}
									f.Bytes++
									f.LastToken = pos*S + slot
								}
							}
						}
					}
					if lo == owned[b] {
						t := f // its tokens as slots of the block
						t.FirstToken, t.LastToken = f.FirstToken-pos*S, f.LastToken-pos*S
						tails[[2]int{b, ci}] = t
					}
					if f.Bytes > 0 {
						a.Findings = append(a.Findings, f)
					}
				}
			}
		}
	}
	slices.Sort(a.Notes)
	a.Notes = slices.Compact(a.Notes)
}

// Extent says how much the findings cover, exactly: "1 block over 4
// layers" (every block not zeroed in every layer named), else the blocks,
// the layers and the (block, layer) regions ("2 blocks over 3 layers, 4
// block-layer regions"); "" without findings. A block is a request's
// group's position on one rank.
func (a *TailAudit) Extent() string {
	if len(a.Findings) == 0 {
		return ""
	}
	type block struct {
		request         string
		group, position int
		rank            layout.Rank
	}
	blocks, layers := map[block]bool{}, map[string]bool{}
	for _, f := range a.Findings {
		blocks[block{f.Request, f.Group, f.Position, f.Rank}] = true
		layers[f.Layer] = true
	}
	plural := func(n int, what string) string {
		if n == 1 {
			return "1 " + what
		}
		return fmt.Sprintf("%d %ss", n, what)
	}
	s := plural(len(blocks), "block") + " over " + plural(len(layers), "layer")
	if len(a.Findings) != len(blocks)*len(layers) {
		s += ", " + plural(len(a.Findings), "block-layer region")
	}
	return s
}

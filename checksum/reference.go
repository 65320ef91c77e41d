package checksum

import (
	"context"
	"encoding/binary"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// Reference is the definition of docs/spec.md §1 written as plainly as
// possible: one loop per sum, every cell assembled byte by byte. It is slow
// and exists to check the other engines.
type Reference struct{}

// Slopes returns true: Reference fills ckplan.Plan.Slopes.
func (Reference) Slopes() bool { return true }

// Mixes returns true: Reference fills ckplan.Plan.Mix.
func (Reference) Mixes() bool { return true }

// Name returns "ref".
func (Reference) Name() string { return "ref" }

// Run implements Engine.
func (Reference) Run(ctx context.Context, p *ckplan.Plan, out []uint64) error {
	if err := deviceCheck("ref", p); err != nil {
		return err
	}
	for _, task := range p.Tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := task.Cache
		err := layout.Guard(c.Cells.File, func() error {
			for _, row := range task.Rows {
				v, slope, mix := referenceRow(c, row, p.MixKey)
				out[row.Out] += v
				if p.Slopes {
					out[p.Outputs+row.Out] += slope
				}
				if p.Mix {
					out[2*p.Outputs+row.Out] += mix
				}
				if p.Progress != nil {
					p.Progress(int64(row.Valid*c.Heads) * int64(c.Cells.CellBytes))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ReferenceBlock returns one cache's part of a block checksum:
// c = sum over heads of m*s, s = sum_j x_j*(2j+1), j = t*P + p for piece p
// of the token at request position t. Pieces are little-endian unsigned
// integers of the view's piece width, zero-extended.
func ReferenceBlock(c *layout.LayerView, row ckplan.Row) uint64 {
	v, _, _ := referenceRow(c, row, PublishedMixKey)
	return v
}

// referenceRow returns ReferenceBlock's value and, from the same reads,
// the row's slope (the sum over heads of m*P*A, A the plain sum of the
// head's pieces over the row's valid tokens: docs/spec.md §1, the
// conversion between numberings) and its mix check (docs/spec.md §14):
// the sum over heads, valid tokens and 8-byte words x of each cell (its
// bytes in logical order, the last word zero-padded) of
// Mix(x ^ MixKeyOf(mixKey, layer*65536 + head, j)), j = t*W + p for word p of the
// token at request position t, W the words of a cell.
func referenceRow(c *layout.LayerView, row ckplan.Row, mixKey uint64) (block, slope, mix uint64) {
	P := uint64(c.Pieces)
	w := uint64(c.Cells.Width())
	W := uint64(cellWords(c))
	var cell []byte
	for h := 0; h < c.Heads; h++ {
		var s, a uint64
		for t := 0; t < row.Valid; t++ {
			cell = c.Cells.ReadCell(cell[:0], row.Block, t, h)
			for p := uint64(0); p < P; p++ {
				x := piece(cell[w*p : w*p+w])
				j := uint64(row.FirstToken+int64(t))*P + p
				s += x * (2*j + 1)
				a += x
			}
			for len(cell)%8 != 0 {
				cell = append(cell, 0)
			}
			for p := uint64(0); p < W; p++ {
				x := binary.LittleEndian.Uint64(cell[8*p:])
				j := uint64(row.FirstToken+int64(t))*W + p
				mix += Mix(x ^ MixKeyOf(mixKey, MixSlice(c, c.HeadBase+h), j))
			}
		}
		m := c.Factor(c.HeadBase + h)
		block += m * s
		slope += m * P * a
	}
	return block, slope, mix
}

// piece reads a little-endian unsigned integer of len(b) bytes (2, 4 or 8).
func piece(b []byte) uint64 {
	switch len(b) {
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return binary.LittleEndian.Uint64(b)
	}
}

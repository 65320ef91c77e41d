package checksum

import (
	"fmt"

	"github.com/kvaudit/kvaudit/internal/ckplan"
)

// Numbering says where the piece index j of a block checksum counts from
// (docs/spec.md §1).
type Numbering int

const (
	// NumberRequest counts pieces from the request's first token, so that
	// block sizes are comparable. It is the default: records, the nested
	// payload form and JSON carry it.
	NumberRequest Numbering = iota
	// NumberBlock restarts the count at every block's first token, as
	// vLLM's first published KV checksum code does (the fork
	// sawsa307/vllm, vllm/distributed/kv_transfer/kv_checksum/worker.py).
	// The flat payload form carries it.
	NumberBlock
)

// ParseNumbering returns the numbering named "request" or "block".
func ParseNumbering(s string) (Numbering, error) {
	switch s {
	case "request":
		return NumberRequest, nil
	case "block":
		return NumberBlock, nil
	}
	return 0, fmt.Errorf("unknown numbering %q (want \"request\" or \"block\")", s)
}

// String returns "request" or "block".
func (n Numbering) String() string {
	switch n {
	case NumberRequest:
		return "request"
	case NumberBlock:
		return "block"
	}
	return fmt.Sprintf("Numbering(%d)", int(n))
}

// blockNumbered converts a request-numbered block checksum to block
// numbering: c_block = c_request - 2*f*D, f the block's first token
// (position * block size) and D = sum over slices of m*P*A, the slope an
// engine gives with ckplan.Plan.Slopes (docs/spec.md §1).
func blockNumbered(cRequest, slope uint64, first int64) uint64 {
	return cRequest - 2*uint64(first)*slope
}

// requestNumbered is the inverse of blockNumbered.
func requestNumbered(cBlock, slope uint64, first int64) uint64 {
	return cBlock + 2*uint64(first)*slope
}

// A slopeEngine is an Engine that honours ckplan.Plan.Slopes: in the same pass
// over the bytes it also adds each row's slope D, so that one pass gives
// both numberings. Engines that do not (the CUDA runner, whose kernel
// returns one sum per row) are given a block-numbered plan instead when
// block numbering is wanted (see blockRows).
type slopeEngine interface {
	Engine
	// Slopes reports whether the engine fills slopes.
	Slopes() bool
}

func engineSlopes(e Engine) bool {
	s, ok := e.(slopeEngine)
	return ok && s.Slopes()
}

// blockRows returns a copy of the plan whose rows count pieces from each
// block's first token (FirstToken 0: a row is one whole logical block, its
// kernel blocks included), so that any engine computes block-numbered
// values with it. It asks for neither slopes nor the mix check (which is
// request-numbered only).
func blockRows(p *ckplan.Plan) *ckplan.Plan {
	q := *p
	q.Slopes, q.Mix = false, false
	q.Tasks = make([]ckplan.Task, len(p.Tasks))
	for i, t := range p.Tasks {
		if i > 0 && sameRows(t.Rows, p.Tasks[i-1].Rows) {
			q.Tasks[i] = ckplan.Task{Cache: t.Cache, Rows: q.Tasks[i-1].Rows} // shared, as in p
			continue
		}
		rows := make([]ckplan.Row, len(t.Rows))
		for k, r := range t.Rows {
			r.FirstToken = 0
			rows[k] = r
		}
		q.Tasks[i] = ckplan.Task{Cache: t.Cache, Rows: rows}
	}
	return &q
}

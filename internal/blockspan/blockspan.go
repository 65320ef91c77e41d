// Package blockspan is which of a request's blocks a group checksums
// (docs/spec.md §5): the span of its block table that the checksum, the
// tail audit, the transfer audit and the faults walk.
package blockspan

import (
	"fmt"
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
)

// A Span is the run of a request's blocks that a group checksums (docs/spec.md
// §5): Blocks[i] is the block id at block position Start+i.
type Span struct {
	Start  int
	Blocks []int
}

// Status says why a request has no span in a group.
type Status int

const (
	// OK: the span is to be checksummed (it may be empty).
	OK Status = iota
	// NoTable: the request has no block table for the group.
	NoTable
	// NullInside: a null block follows a non-null one, which leaves the
	// group out for the request.
	NullInside
)

// Of returns the blocks of group g that request r checksums: for
// tokens [num_local_computed_tokens, num_tokens), table[first/S :
// ceil(num_tokens/S)] with leading nulls dropped and, for a sliding-window
// group, only the last ceil(window/S)+1 blocks kept. A state group's span is
// its state block at position 0. A table too short for num_tokens is an
// error naming the request and group.
func Of(r *layout.Request, g *layout.Group) (Span, Status, error) {
	key := strconv.Itoa(g.ID)
	if g.Kind == layout.KindMamba {
		b, ok := r.StateBlock[key]
		if !ok {
			return Span{}, NoTable, nil
		}
		return Span{Start: 0, Blocks: []int{b}}, OK, nil
	}
	table, ok := r.BlockTable[key]
	if !ok {
		return Span{}, NoTable, nil
	}
	S := g.BlockSize
	first := r.NumLocalComputedTokens / S
	end := ceilDiv(r.NumTokens, S)
	if end > len(table) {
		return Span{}, OK, fmt.Errorf("request %q: block_table[%q] has %d blocks, %d tokens need %d", r.ID, key, len(table), r.NumTokens, end)
	}
	if first > end {
		first = end
	}
	run := table[first:end]
	start := first
	for len(run) > 0 && run[0] == layout.NoBlock {
		run = run[1:]
		start++
	}
	if g.Kind == layout.KindSlidingWindow {
		keep := ceilDiv(g.SlidingWindow, S) + 1
		if len(run) > keep {
			start += len(run) - keep
			run = run[len(run)-keep:]
		}
	}
	blocks := make([]int, len(run))
	for i, b := range run {
		if b == layout.NoBlock {
			return Span{}, NullInside, nil
		}
		blocks[i] = b
	}
	return Span{Start: start, Blocks: blocks}, OK, nil
}

// ValidTokens is the number of tokens that block position pos of a request
// with numTokens tokens holds, for block size S: min(S, max(0, numTokens -
// pos*S)).
func ValidTokens(numTokens, pos, S int) int {
	return min(S, max(0, numTokens-pos*S))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Package dumpindex indexes the dumps of every rank of one side by
// request, group, layer and head, for the drill-down and fault injection.
package dumpindex

import (
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
)

// Index indexes the dumps of every rank of one producer or consumer, for
// tools that look cells up by request, group, layer and head (the
// drill-down, fault injection).
type Index struct {
	Dumps []*layout.Dump
	// reqs maps, per dump, a request id to its request.
	reqs []map[string]*layout.Request
}

// New indexes dumps (they stay open; the caller closes them).
func New(dumps []*layout.Dump) *Index {
	s := &Index{Dumps: dumps}
	for _, d := range dumps {
		m := map[string]*layout.Request{}
		for i := range d.Manifest.Requests {
			m[d.Manifest.Requests[i].ID] = &d.Manifest.Requests[i]
		}
		s.reqs = append(s.reqs, m)
	}
	return s
}

// Request returns request id as the first rank holding it lists it, or
// nil.
func (s *Index) Request(id string) *layout.Request {
	for _, m := range s.reqs {
		if r := m[id]; r != nil {
			return r
		}
	}
	return nil
}

// RankRequest returns request id as dump di lists it, or nil.
func (s *Index) RankRequest(di int, id string) *layout.Request { return s.reqs[di][id] }

// RequestIDs lists the side's request ids, the first rank's first.
func (s *Index) RequestIDs() []string {
	return firstSeen(s.Dumps, func(m *layout.Manifest) []layout.Request { return m.Requests }, func(r *layout.Request) string { return r.ID })
}

// Group returns group id as the first rank that has it describes it, or
// nil.
func (s *Index) Group(id int) *layout.Group {
	for _, d := range s.Dumps {
		if g := d.Manifest.Group(id); g != nil {
			return g
		}
	}
	return nil
}

// GroupIDs lists the side's group ids in manifest order.
func (s *Index) GroupIDs() []int {
	return firstSeen(s.Dumps, func(m *layout.Manifest) []layout.Group { return m.Groups }, func(g *layout.Group) int { return g.ID })
}

// firstSeen lists the ids of the items every dump's manifest lists, each
// once, in the order they are first seen (the first rank's first). A set
// keeps it linear: a side of many requests would make a scan of the list
// for each one quadratic.
func firstSeen[T any, K comparable](dumps []*layout.Dump, items func(*layout.Manifest) []T, id func(*T) K) []K {
	var ids []K
	seen := map[K]bool{}
	for _, d := range dumps {
		xs := items(d.Manifest)
		for i := range xs {
			if k := id(&xs[i]); !seen[k] {
				seen[k] = true
				ids = append(ids, k)
			}
		}
	}
	return ids
}

// RankCache is one distinct cache of a group on one rank of a side.
type RankCache struct {
	Dump  int // index in Index.Dumps
	Group *layout.Group
	View  *layout.LayerView
}

// Caches returns the checksummed caches of group id on every rank, in rank
// order (none for a skipped group).
func (s *Index) Caches(group int) []RankCache {
	var out []RankCache
	for di, d := range s.Dumps {
		gv := d.GroupView(group)
		if gv == nil || gv.Skip != "" {
			continue
		}
		for _, v := range gv.Caches {
			out = append(out, RankCache{Dump: di, Group: gv.Group, View: v})
		}
	}
	return out
}

// Block returns the block id that holds block position pos of request id
// in group g on dump di: from the block table, or, for a state group, the
// request's state block at position 0. ok is false where there is none (no
// such request or position, a null block, an id out of range).
func (s *Index) Block(di int, id string, g *layout.Group, pos int) (block int, ok bool) {
	r := s.reqs[di][id]
	if r == nil {
		return 0, false
	}
	key := strconv.Itoa(g.ID)
	if g.Kind == layout.KindMamba {
		var found bool
		block, found = r.StateBlock[key]
		ok = found && pos == 0
	} else {
		t := r.BlockTable[key]
		if pos < 0 || pos >= len(t) || t[pos] == layout.NoBlock {
			return 0, false
		}
		block, ok = t[pos], true
	}
	return block, ok && block >= 0 && block < s.Dumps[di].Manifest.NumBlocks
}

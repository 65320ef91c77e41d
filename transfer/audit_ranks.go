package transfer

// This file finds what a rank holds: its address map, the owners of a
// block, its requests and their pairing ids.

import (
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/layout"
)

// addressMap returns a rank's address map, or nil (unresolved).
func (rk *rank) addressMap(a *auditor) *addrmap.Map {
	if rk.am == nil && rk.amErr == nil {
		rk.am, rk.amErr = addrmap.New(rk.dump)
		if rk.amErr != nil {
			a.unresolve("%v", rk.amErr)
		}
	}
	return rk.am
}

// ownersOf returns the requests holding a block of a group on the rank.
func (rk *rank) ownersOf(group, block int) []owner {
	if rk.owners == nil {
		rk.owners = map[int]map[int][]owner{}
		groupOf := func(key string) map[int][]owner {
			g, _ := strconv.Atoi(key)
			m := rk.owners[g]
			if m == nil {
				m = map[int][]owner{}
				rk.owners[g] = m
			}
			return m
		}
		for _, r := range rk.dump.Manifest.Requests {
			for key, table := range r.BlockTable {
				m := groupOf(key)
				for pos, b := range table {
					if b != layout.NoBlock {
						m[b] = append(m[b], owner{r.ID, pos})
					}
				}
			}
			for key, b := range r.StateBlock {
				m := groupOf(key)
				m[b] = append(m[b], owner{r.ID, 0})
			}
		}
	}
	return rk.owners[group][block]
}

// request returns the rank's request of a consumer id, or of a producer
// id it pairs with (producer_id), or nil.
func (rk *rank) request(id string) *request {
	if r := rk.reqs[id]; r != nil {
		return r
	}
	if rk.byID == nil {
		rk.byID, rk.byProducer = map[string]*layout.Request{}, map[string]*layout.Request{}
		for i := range rk.dump.Manifest.Requests {
			m := &rk.dump.Manifest.Requests[i]
			if _, dup := rk.byID[m.ID]; !dup {
				rk.byID[m.ID] = m
			}
			if _, dup := rk.byProducer[m.ProducerID]; m.ProducerID != "" && !dup {
				rk.byProducer[m.ProducerID] = m
			}
		}
	}
	m := rk.byID[id]
	if m == nil {
		m = rk.byProducer[id]
	}
	if m == nil {
		return nil
	}
	if r := rk.reqs[m.ID]; r != nil {
		rk.reqs[id] = r
		return r
	}
	r := &request{req: m, rank: rk, groups: map[int]*reqGroup{}}
	for _, gv := range rk.dump.Groups {
		rg := &reqGroup{gv: gv, loaded: map[int]int{}, all: map[int]int{}}
		key := strconv.Itoa(gv.Group.ID)
		if gv.Group.Kind == layout.KindMamba {
			if b, ok := m.StateBlock[key]; ok {
				rg.loaded[b], rg.all[b] = 0, 0
			}
		} else {
			for pos, b := range m.BlockTable[key] {
				if b != layout.NoBlock {
					if _, dup := rg.all[b]; !dup {
						rg.all[b] = pos
					}
				}
			}
			if span, st, err := blockspan.Of(m, gv.Group); err == nil && st == blockspan.OK {
				for i, b := range span.Blocks {
					if _, dup := rg.loaded[b]; !dup {
						rg.loaded[b] = span.Start + i
					}
				}
			}
		}
		r.groups[gv.Group.ID] = rg
	}
	rk.reqs[m.ID], rk.reqs[id] = r, r
	return r
}

// pairID is the producer's id of a consumer request.
func (r *request) pairID() string { return r.req.PairID() }

// wanted says whether a request is audited (Options.Requests).
func (a *auditor) wanted(r *request) bool {
	if len(a.opts.Requests) == 0 {
		return true
	}
	return slices.Contains(a.opts.Requests, r.req.ID) || slices.Contains(a.opts.Requests, r.pairID())
}

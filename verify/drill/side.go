package drill

import (
	"slices"
	"strconv"
	"sync"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/layout"
)

// cache is one distinct cache of a group on one rank.
type cache = dumpindex.RankCache

// side is one side's dumps, indexed for the drill-down's lookups.
type side struct {
	*dumpindex.Index
	ids      []string       // request ids, the first rank's first
	index    map[string]int // request id -> index in ids
	producer bool
	mu       sync.Mutex
	grps     map[int]*sideGroup
}

func newSide(dumps []*layout.Dump, producer bool) *side {
	s := &side{Index: dumpindex.New(dumps), index: map[string]int{}, grps: map[int]*sideGroup{}, producer: producer}
	s.ids = s.RequestIDs()
	for i, id := range s.ids {
		s.index[id] = i
	}
	return s
}

// sideGroup is one group of a side: its caches, their lookup by layer
// name and global head, and every request's block table on every rank.
type sideGroup struct {
	id     int
	caches []cache
	// byName maps a layer name (an alias too) and a global head to the
	// caches holding it, replica index 0 first.
	byName map[string]map[int][]int
	// tables[dump][request] is the request's block table on that rank
	// (nil where it has none); tokens[request] its num_tokens.
	tables [][]layout.BlockIDs
	tokens []int
	// indexed[ci] lists the local heads of cache ci an index holds: all
	// of them, or on the producer only the copies find prefers (set by
	// indexedHeads).
	indexed [][]int
	S       int // the block size
	// headBase[ci] is the first of cache ci's heads in flat's numbering.
	headBase []int
}

// flat numbers the local head lh of cache ci among all the group's
// caches' heads (flat(len(caches), 0) is their number).
func (g *sideGroup) flat(ci, lh int) int { return g.headBase[ci] + lh }

// indexedHeads sets g.indexed for side sd (0 the producer, 1 the
// consumer).
func (g *sideGroup) indexedHeads(sd uint8) {
	g.indexed = make([][]int, len(g.caches))
	for ci, c := range g.caches {
		v := c.View
		if v.Cells.Data == nil {
			continue
		}
		for lh := range v.Heads {
			if sd == 0 {
				if pci, _ := g.find(v.Layer.Name, v.HeadBase+lh, -1); pci != ci {
					continue // the producer's other copies
				}
			}
			g.indexed[ci] = append(g.indexed[ci], lh)
		}
	}
}

// group returns the side's view of group id (built once).
func (s *side) group(id int) *sideGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.grps[id]; g != nil {
		return g
	}
	g := &sideGroup{id: id, caches: s.Caches(id), byName: map[string]map[int][]int{}}
	for ci, c := range g.caches {
		for _, name := range append([]string{c.View.Layer.Name}, c.View.Aliases...) {
			heads := g.byName[name]
			if heads == nil {
				heads = map[int][]int{}
				g.byName[name] = heads
			}
			for lh := range c.View.Heads {
				heads[c.View.HeadBase+lh] = append(heads[c.View.HeadBase+lh], ci)
			}
		}
	}
	for _, heads := range g.byName {
		for h, cis := range heads {
			slices.SortStableFunc(cis, func(a, b int) int {
				return g.caches[a].View.ReplicaIndex - g.caches[b].View.ReplicaIndex
			})
			heads[h] = cis
		}
	}
	key := strconv.Itoa(id)
	g.tables = make([][]layout.BlockIDs, len(s.Dumps))
	for di := range s.Dumps {
		g.tables[di] = make([]layout.BlockIDs, len(s.ids))
		for ri, rid := range s.ids {
			if r := s.RankRequest(di, rid); r != nil {
				g.tables[di][ri] = r.BlockTable[key]
			}
		}
	}
	g.tokens = make([]int, len(s.ids))
	for ri, rid := range s.ids {
		g.tokens[ri] = s.Request(rid).NumTokens
	}
	if len(g.caches) > 0 {
		g.S = g.caches[0].Group.BlockSize
	}
	g.headBase = make([]int, len(g.caches)+1)
	for ci, c := range g.caches {
		g.headBase[ci+1] = g.headBase[ci] + c.View.Heads
	}
	sd := uint8(1)
	if s.producer {
		sd = 0
	}
	g.indexedHeads(sd)
	s.grps[id] = g
	return g
}

// find returns the cache of g holding layer name (or an alias of it) and
// global head: replica index replica, or, for replica < 0, replica 0 if
// there is one, else any.
func (g *sideGroup) find(name string, head, replica int) (int, bool) {
	cis := g.byName[name][head]
	if len(cis) == 0 {
		return 0, false
	}
	if replica < 0 {
		return cis[0], true
	}
	for _, ci := range cis {
		if g.caches[ci].View.ReplicaIndex == replica {
			return ci, true
		}
	}
	return 0, false
}

// holds says whether cache ci holds layer name (or an alias of it).
func (g *sideGroup) holds(ci int, name string) bool {
	v := g.caches[ci].View
	return v.Layer.Name == name || slices.Contains(v.Aliases, name)
}

// addr returns the address in its cache's Data of the cell of request ri
// at token t of local head lh of cache ci; ok is false where the side
// holds no such cell (no block there, a null block, device memory).
func (g *sideGroup) addr(s *side, ci, ri, lh, t int) (int64, bool) {
	c := g.caches[ci]
	cells := &c.View.Cells
	if cells.Data == nil || t < 0 {
		return 0, false
	}
	S := c.Group.BlockSize
	table := g.tables[c.Dump][ri]
	pos := t / S
	if pos >= len(table) || table[pos] == layout.NoBlock {
		return 0, false
	}
	b := table[pos]
	if b < 0 || b >= s.Dumps[c.Dump].Manifest.NumBlocks {
		return 0, false
	}
	return cells.CellAddr(b, t%S, lh), true
}

// block returns the block id of request ri at position pos of cache ci's
// rank.
func (g *sideGroup) block(s *side, ci, ri, pos int) (int, bool) {
	c := g.caches[ci]
	table := g.tables[c.Dump][ri]
	if pos < 0 || pos >= len(table) || table[pos] == layout.NoBlock {
		return 0, false
	}
	b := table[pos]
	return b, b >= 0 && b < s.Dumps[c.Dump].Manifest.NumBlocks
}

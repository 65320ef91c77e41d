package layout

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/parse"
)

// MaxHeadsPerLayer is H of docs/spec.md §1: the bound on a layer number's
// global KV heads, and the stride of layer numbers in slice factors.
const MaxHeadsPerLayer = 1 << 16

// Reasons a group is not checksummed (docs/spec.md §4), reported verbatim.
const (
	reasonNoLayerNumber     = "no single layer number"
	reasonSharedLayerNumber = "two caches share a layer number"
	reasonTooManyHeads      = "more than 65536 KV heads per layer"
	reasonReplication       = "KV head replication is unknown"
	reasonNumBlocks         = "cache does not hold num_blocks blocks"
	reasonPieces            = "cells are not whole 8-byte pieces"
	reasonKernelBlocks      = "kernel blocks do not tile the block size"
	reasonCompressed        = "compressed cache (tokens_per_state != 1)"
	reasonHeadSlots         = "KV heads packed into head slots"
	reasonHostResident      = "host-resident KV"
)

// Reasons lists every fixed reason, for documentation and tests.
var Reasons = []string{
	reasonNoLayerNumber, reasonSharedLayerNumber, reasonTooManyHeads,
	reasonReplication, reasonNumBlocks, reasonPieces, reasonKernelBlocks,
	reasonCompressed, reasonHeadSlots, reasonHostResident, reasonStateWidth,
}

// GroupView is a group of one rank resolved for checksumming.
type GroupView struct {
	Group *Group
	// Skip is the reason the group is not checksummed, or "".
	Skip string
	// Caches are the distinct caches to checksum, KV-sharing aliases folded
	// into the cache they share. Empty when Skip is set.
	Caches []*LayerView
	// Layers are all of the group's layers on the rank, aliases included,
	// in manifest order (fingerprints cover them all).
	Layers []LayerInfo
}

// LayerInfo is what a fingerprint needs of one layer.
type LayerInfo struct {
	Name  string
	Spec  string // spec type name, the kind's default when not given
	Dtype string // PyTorch dtype name (an alias takes its cache's)
	// States are a state layer's covered states (nil for attention).
	States []StateShape
	Layer  *Layer
}

// LayerView is one distinct cache of a group on one rank.
type LayerView struct {
	Layer   *Layer
	Number  int    // the layer number of docs/spec.md §3
	Module  string // the layer name up to and including its number
	Aliases []string
	// Heads is the number of heads this rank holds; HeadBase is the global
	// index of its first (docs/spec.md §2 and §3).
	Heads    int
	HeadBase int
	// GlobalHeads is the cache's head count over all TP shards.
	GlobalHeads  int
	Replicas     int
	ReplicaIndex int
	// Pieces is P, the pieces of one cell.
	Pieces int
	Cells  CellView
	// State marks a state layer's view (docs/spec.md §6): its "heads" are
	// global rows of one (state, segment), its pieces the row's elements,
	// and its block is a request's state block at position 0. StateIndex
	// is the index of its state in the layer's states.
	State      bool
	StateIndex int
}

// ReplicaKey is the (replicas, replica_index) key of a partial checksum.
type ReplicaKey struct{ Replicas, Index int }

// Key returns the cache's replica key.
func (l *LayerView) Key() ReplicaKey { return ReplicaKey{l.Replicas, l.ReplicaIndex} }

// Factor returns m = 2*(layer*H + head) + 1 for global head head.
func (l *LayerView) Factor(head int) uint64 {
	return 2*(uint64(l.Number)*MaxHeadsPerLayer+uint64(head)) + 1
}

// defaultSpec returns the spec type name a kind implies.
func defaultSpec(kind string) string {
	switch kind {
	case KindSlidingWindow:
		return "SlidingWindowSpec"
	case KindMLA:
		return "MLAAttentionSpec"
	case KindMamba:
		return "MambaSpec"
	default:
		return "FullAttentionSpec"
	}
}

// layerNumber returns the one dot-separated component of name made of ASCII
// digits only, and the module: name up to and including it. ok is false when
// there is none or more than one.
func layerNumber(name string) (number int, module string, ok bool) {
	parts := strings.Split(name, ".")
	found := -1
	for i, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			if found >= 0 {
				return 0, "", false
			}
			found = i
		}
	}
	if found < 0 {
		return 0, "", false
	}
	digits := strings.TrimLeft(parts[found], "0")
	if len(digits) > 9 {
		return 0, "", false // no model has a billion layers; keep factors exact
	}
	n := 0
	if digits != "" {
		n, _ = strconv.Atoi(digits)
	}
	return n, strings.Join(parts[:found+1], "."), true
}

// IsMLA says whether layer l of the group holds an MLA-type cache: held
// whole by every rank unless max_tp_shards says otherwise.
func (g *Group) IsMLA(l *Layer) bool {
	if l.Spec != "" {
		return strings.Contains(l.Spec, "MLA")
	}
	return g.Kind == KindMLA
}

// replicas applies the rules of docs/spec.md §2. ok is false when the
// replication is unknown.
func replicas(m *Manifest, g *Group, l *Layer, heads int) (int, bool) {
	tp := m.Parallel.TPSize
	switch {
	case l.Replicas != nil:
		return *l.Replicas, true
	case l.MaxTPShards != nil:
		return tp / min(tp, *l.MaxTPShards), true
	case g.IsMLA(l):
		return tp, true
	case heads > 1 || tp == 1:
		return 1, true
	case m.Model.NumKVHeads > 0 && tp%m.Model.NumKVHeads == 0:
		return tp / m.Model.NumKVHeads, true
	}
	return 0, false
}

// opened is a layer's tensor as cell views: one for an attention cache;
// for a state layer one per (state, segment), with each view's replica key
// and first global row, and the layer's global rows.
type opened struct {
	views     []CellView
	keys      []ReplicaKey
	firstRows []int
	states    []int
	rows      int
}

// resolveGroup builds the view of group gi of m, in phases: its layers
// described (aliases followed), the configuration that makes it
// unsupported, its distinct caches, then each cache's tensor as views with
// global heads and replicas. tensor opens a layer's tensor as cell views;
// it is only called for layers of groups that pass the configuration
// checks. Errors are inconsistencies of the dump; a reason to skip the
// group is returned in the view (GroupView.Skip).
func resolveGroup(m *Manifest, gi int, tensor func(gf string, g *Group, l *Layer) (opened, string, error)) (*GroupView, error) {
	gl := newGroupLayers(m, gi)
	v := &GroupView{Group: gl.g}
	var err error
	if v.Layers, err = gl.describe(m); err != nil {
		return nil, err
	}
	if v.Skip = configSkip(gl.g); v.Skip != "" {
		return v, nil
	}
	caches, reason := gl.distinctCaches()
	if reason != "" {
		v.Skip = reason
		return v, nil
	}
	if v.Caches, v.Skip, err = gl.views(m, caches, tensor); err != nil {
		return nil, err
	}
	return v, nil
}

// groupLayers is a group's layers by name, for following alias_of.
type groupLayers struct {
	g      *Group
	gf     string // the group's field in the manifest, for errors
	byName map[string]*Layer
}

func newGroupLayers(m *Manifest, gi int) *groupLayers {
	gl := &groupLayers{g: &m.Groups[gi], gf: fmt.Sprintf("groups[%d]", gi), byName: map[string]*Layer{}}
	for i := range gl.g.Layers {
		gl.byName[gl.g.Layers[i].Name] = &gl.g.Layers[i]
	}
	return gl
}

// target follows alias_of to the layer that holds l's cache.
func (gl *groupLayers) target(l *Layer) (*Layer, error) {
	for steps := 0; l.AliasOf != ""; steps++ {
		next := gl.byName[l.AliasOf]
		if next == nil {
			return nil, &parse.Error{Format: parse.Manifest, Field: gl.gf, Msg: fmt.Sprintf("layer %q: alias_of %q names no layer of group %d", l.Name, l.AliasOf, gl.g.ID)}
		}
		if steps > len(gl.g.Layers) {
			return nil, &parse.Error{Format: parse.Manifest, Field: gl.gf, Msg: fmt.Sprintf("layer %q: alias_of forms a cycle", l.Name)}
		}
		l = next
	}
	return l, nil
}

// describe lists the group's layers with the spec and dtype they inherit
// from the layer holding their cache (and, for state layers, the shapes
// of their states).
func (gl *groupLayers) describe(m *Manifest) ([]LayerInfo, error) {
	g := gl.g
	var infos []LayerInfo
	for i := range g.Layers {
		l := &g.Layers[i]
		t, err := gl.target(l)
		if err != nil {
			return nil, err
		}
		spec := l.Spec
		if spec == "" {
			spec = t.Spec
		}
		if spec == "" {
			spec = defaultSpec(g.Kind)
		}
		dtype := l.Dtype
		if dtype == "" {
			dtype = t.Dtype
		}
		info := LayerInfo{Name: l.Name, Spec: spec, Dtype: dtype, Layer: l}
		if g.Kind == KindMamba {
			info.States = stateShapes(t, m.Parallel.TPSize)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// configSkip is the reason the group's configuration makes it unsupported,
// before any tensor is read ("" if none).
func configSkip(g *Group) string {
	for i := range g.Layers {
		l := &g.Layers[i]
		switch {
		case l.TokensPerState != nil && *l.TokensPerState != 1:
			return reasonCompressed
		case l.NumHeadSlots != nil:
			return reasonHeadSlots
		}
	}
	if g.HostResident {
		return reasonHostResident
	}
	return ""
}

// groupCache is one distinct cache of a group: the layer holding it, the
// layers using it, and the lowest (layer number, name) among them, which
// numbers it.
type groupCache struct {
	layer   *Layer
	number  int
	module  string
	name    string
	aliases []string
}

// distinctCaches lists the group's distinct caches in (layer number, name)
// order, or a reason to skip the group (a layer without a number).
func (gl *groupLayers) distinctCaches() ([]*groupCache, string) {
	g := gl.g
	caches := map[string]*groupCache{}
	for i := range g.Layers {
		l := &g.Layers[i]
		n, mod, ok := layerNumber(l.Name)
		if !ok {
			return nil, reasonNoLayerNumber
		}
		t, _ := gl.target(l) // checked by describe
		key := tensorKey(t)
		c := caches[key]
		if c == nil {
			c = &groupCache{layer: t, number: n, module: mod, name: l.Name}
			caches[key] = c
		}
		c.aliases = append(c.aliases, l.Name)
		if n < c.number || (n == c.number && l.Name < c.name) {
			c.number, c.module, c.name = n, mod, l.Name
		}
	}
	list := make([]*groupCache, 0, len(caches))
	for _, c := range caches {
		slices.Sort(c.aliases)
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b *groupCache) int {
		return cmp.Or(cmp.Compare(a.number, b.number), cmp.Compare(a.name, b.name))
	})
	return list, ""
}

// views opens each cache's tensor and numbers its global heads (state rows
// for a state group) and replicas, or returns a reason to skip the group.
func (gl *groupLayers) views(m *Manifest, caches []*groupCache, tensor func(gf string, g *Group, l *Layer) (opened, string, error)) ([]*LayerView, string, error) {
	g := gl.g
	tp := m.Parallel.TPSize
	headsAt := map[int]int{} // layer number -> global heads numbered so far
	moduleAt := map[int]string{}
	var views []*LayerView
	for _, c := range caches {
		if mod, seen := moduleAt[c.number]; seen && mod != c.module {
			return nil, reasonSharedLayerNumber, nil
		}
		moduleAt[c.number] = c.module
		o, reason, err := tensor(gl.gf, g, c.layer)
		if err != nil {
			return nil, "", err
		}
		if reason != "" {
			return nil, reason, nil
		}
		base := headsAt[c.number]
		if g.Kind == KindMamba {
			// State rows take the place of heads (docs/spec.md §6).
			if base+o.rows > MaxHeadsPerLayer {
				return nil, reasonTooManyHeads, nil
			}
			headsAt[c.number] = base + o.rows
			for i, cells := range o.views {
				views = append(views, &LayerView{
					Layer: c.layer, Number: c.number, Module: c.module, Aliases: c.aliases,
					Heads: cells.Heads, HeadBase: base + o.firstRows[i], GlobalHeads: o.rows,
					Replicas: o.keys[i].Replicas, ReplicaIndex: o.keys[i].Index,
					Pieces: cells.Pieces(), Cells: cells, State: true, StateIndex: o.states[i],
				})
			}
			continue
		}
		cells := o.views[0]
		heads := cells.Heads
		r, ok := replicas(m, g, c.layer, heads)
		if !ok {
			return nil, reasonReplication, nil
		}
		if r < 1 || tp%r != 0 {
			return nil, "", &parse.Error{Format: parse.Manifest, Field: gl.gf, Msg: fmt.Sprintf("layer %q: %d replicas do not divide tp_size %d", c.layer.Name, r, tp)}
		}
		global := heads * (tp / r)
		if base+global > MaxHeadsPerLayer {
			return nil, reasonTooManyHeads, nil
		}
		headsAt[c.number] = base + global
		views = append(views, &LayerView{
			Layer:        c.layer,
			Number:       c.number,
			Module:       c.module,
			Aliases:      c.aliases,
			Heads:        heads,
			HeadBase:     base + (m.Parallel.TPRank/r)*heads,
			GlobalHeads:  global,
			Replicas:     r,
			ReplicaIndex: m.Parallel.TPRank % r,
			Pieces:       cells.Pieces(),
			Cells:        cells,
		})
	}
	return views, "", nil
}

// tensorKey identifies the memory a layer's cache lives in: layers naming the
// same tensor (or the same raw bytes) share one cache.
func tensorKey(l *Layer) string {
	if s := l.Source; s != nil {
		return fmt.Sprintf("source\x00%s\x00%s\x00%d", s.File, s.CUDAIPC, s.Offset)
	}
	return "tensor\x00" + l.File + "\x00" + l.Tensor
}

// Package addrmap places a rank's caches at the device addresses its
// engine registered them at, so that a byte range a NIXL descriptor names
// resolves to the cells it holds: the inverse of layout's geometry, which
// turns a tensor into cells. The transfer audit, the NIXL log planner and
// the transfer faults resolve descriptors with it.
package addrmap

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/strided"
	"github.com/kvaudit/kvaudit/layout"
)

// Metadata keys kvaudit_export writes beside the manifest of a dump whose
// blocks it renumbered: the worker's block id of each dump block, and each
// attention layer's shape and strides in the engine (in the dump's axis
// order), which the device addresses are relative to.
const (
	metadataBlockIDs = "kvaudit_export.block_ids"
	metadataEngine   = "kvaudit_export.engine"
)

// A Map places a rank's caches at the device addresses its engine
// registered them at (the manifest's address fields, docs/spec.md §13), so
// that a byte range a NIXL descriptor names resolves to the cells it holds:
// the inverse of the geometry that turns a tensor into cells. Where an
// exporter renumbered the blocks it dumped (kvaudit_export's metadata), the
// engine's geometry and block ids are used, and a block the dump does not
// hold resolves to layout.NoBlock.
type Map struct {
	Dump *layout.Dump
	// Regions are the caches by start address.
	Regions []*Region
	// Skipped lists the groups left out, with why (a group that is not
	// checksummed has no cell views to resolve to).
	Skipped []string
}

// Region is one cache's tensor at its device address.
type Region struct {
	// Start and End bound the addresses the tensor spans: [Start, End).
	Start, End uint64
	Group      *layout.GroupView
	Layer      *layout.Layer
	// Views are the cache's views: one for an attention cache, one per
	// (state, segment) for a state layer with a split, one for a state
	// layer without.
	Views []*layout.LayerView
	State bool
	// KernelBlocks and KernelTokens: kernel rows per block, tokens per
	// kernel row (1 and 1 for a state layer).
	KernelBlocks, KernelTokens int
	// Parts is 2 (K then V) or 1 (MLA, a state layer); PartBytes the
	// bytes of one part of a cell.
	Parts, PartBytes int
	// Covered is, for a state layer, the bytes of its covered states at
	// the start of each page; stateOffsets their first bytes in the page.
	Covered      int64
	stateOffsets []int64
	stateSizes   []int64

	axes  []axis // by stride, outermost first; only axes of 2 or more
	order []axis // every axis of the layout, by stride
	// pageOrder is PageOrder, computed once.
	pageOrder string
	elem      int64
	span      int64
	heads     int
	// blockOf maps an engine block id to the dump's, engineOf a dump
	// block id to the engine's (nil: the same).
	blockOf  map[int]int
	engineOf []int
	// engineBlocks is the engine's block count.
	engineBlocks int
	// identity: the engine's geometry is the dump's, so an offset in
	// the engine tensor is an offset in the dump's data.
	identity bool
	pages    []Page
}

// axis is one axis of a tensor, for address arithmetic.
type axis struct {
	name   string
	n      int64
	stride int64 // bytes
	kind   DimKind
	step   int64 // what one index adds to its kind's coordinate
}

// DimKind is what an axis of a box counts: tokens, heads (state rows) or
// bytes of a cell (of a state row).
type DimKind uint8

// Dim kinds.
const (
	DimToken DimKind = iota
	DimHead
	DimByte
)

func (k DimKind) String() string {
	return [...]string{"token", "head", "byte"}[k]
}

// Dim is one axis of a box in memory order: Count indices, each adding
// Step to its kind's coordinate.
type Dim struct {
	Kind  DimKind
	Count int
	Step  int
}

// Cells is what a byte range of one region holds on one block: a box of
// cells, the product of its kernel rows, tokens, heads and cell bytes (for
// a state layer: rows of a (state, segment) view and their bytes).
type Cells struct {
	Region *Region
	// View is the cache view the cells belong to; nil for state bytes
	// that do not fall into whole rows of a view (a split axis that is
	// not the state's first).
	View *layout.LayerView
	// Block is the dump's block id (layout.NoBlock when the dump does not hold
	// the engine's block EngineBlock).
	Block, EngineBlock int
	// Kernels are kernel rows [k0, k1) of the block; Tokens the tokens
	// [t0, t1) of each kernel row (attention).
	Kernels, Tokens [2]int
	// Heads are local heads [h0, h1) of View (a state layer: local rows
	// of its (state, segment) view).
	Heads [2]int
	// Bytes are the bytes [b0, b1) of each cell (K then V), of each
	// state row, or, View nil, of the state.
	Bytes [2]int
	// State is a state layer's state index.
	State int
	// Addr is the address of the first byte; Len the bytes of cells the
	// box covers.
	Addr, Len uint64
	dims      []Dim
}

// Shape returns the box's axes in memory order, outermost first, merged
// where one is the continuation of the next and without axes of one
// index: two boxes with equal bases (first token, head and byte) and
// equal shapes map their bytes to the same cells in the same order.
func (c *Cells) Shape() []Dim { return c.dims }

// FirstToken is the block-relative token of the box's first cell.
func (c *Cells) FirstToken() int { return c.Kernels[0]*c.Region.KernelTokens + c.Tokens[0] }

// LastToken is the block-relative token of the box's last cell.
func (c *Cells) LastToken() int { return (c.Kernels[1]-1)*c.Region.KernelTokens + c.Tokens[1] - 1 }

// Page is one kind of descriptor unit of a region, as vLLM's NIXL
// connector cuts a cache into descriptors: the bytes of one kernel row
// (block) of one part (K or V) when the parts are apart, or of all of
// them; for a state layer, the rows of one (state, segment).
type Page struct {
	// Part is the part (0 K, 1 V) the page holds, -1 for all.
	Part int
	// Base is the address of kernel row 0's page; Stride the bytes from
	// one kernel row's page to the next; Len the page's bytes.
	Base, Stride, Len uint64
	// HeadsOuter says the page holds its heads (state rows) one after
	// another, HeadBytes each: a range of heads is one range of bytes.
	HeadsOuter bool
	HeadBytes  uint64
	// View is the (state, segment) view a state page holds; nil for an
	// attention page (the region's only view).
	View *layout.LayerView
	// State is a state page's state index.
	State int
}

// Pages returns the region's descriptor units.
func (r *Region) Pages() []Page { return r.pages }

// NoAddressError is a dump that cannot place its caches at device
// addresses: a layer (or state) without an address, or addresses that do
// not describe the engine's memory.
type NoAddressError struct {
	Dump  string
	Field string
	Msg   string
}

func (e *NoAddressError) Error() string {
	return fmt.Sprintf("dump %q: %s: %s", e.Dump, e.Field, e.Msg)
}

// New returns the dump's caches placed at their device addresses.
// A layer without an address is a *NoAddressError; so are regions that
// overlap and engine metadata that does not describe the dump's tensors.
func New(d *layout.Dump) (*Map, error) {
	am := &Map{Dump: d}
	eng, blockIDs, err := engineMetadata(d)
	if err != nil {
		return nil, err
	}
	for gi, gv := range d.Groups {
		if gv.Skip != "" {
			am.Skipped = append(am.Skipped, fmt.Sprintf("group %d: %s", gv.Group.ID, gv.Skip))
			continue
		}
		// One region per distinct layer (a state layer's views share it).
		var layers []*layout.Layer
		views := map[*layout.Layer][]*layout.LayerView{}
		for _, v := range gv.Caches {
			if views[v.Layer] == nil {
				layers = append(layers, v.Layer)
			}
			views[v.Layer] = append(views[v.Layer], v)
		}
		for _, l := range layers {
			li := slices.IndexFunc(gv.Group.Layers, func(x layout.Layer) bool { return x.Name == l.Name })
			field := fmt.Sprintf("groups[%d].layers[%d].address", gi, li)
			r, err := newRegion(d, gv, l, views[l], eng, blockIDs, field)
			if err != nil {
				return nil, err
			}
			am.Regions = append(am.Regions, r)
		}
	}
	slices.SortFunc(am.Regions, func(a, b *Region) int { return cmp.Compare(a.Start, b.Start) })
	for i := 1; i < len(am.Regions); i++ {
		if a, b := am.Regions[i-1], am.Regions[i]; b.Start < a.End {
			return nil, &NoAddressError{Dump: d.Path, Field: "address", Msg: fmt.Sprintf("layer %q at 0x%x overlaps layer %q at 0x%x..0x%x", b.Layer.Name, b.Start, a.Layer.Name, a.Start, a.End)}
		}
	}
	return am, nil
}

// engineEntry is one layer of kvaudit_export's engine metadata.
type engineEntry struct {
	Shape    []int64 `json:"shape"`
	Strides  []int64 `json:"strides"`
	Itemsize int64   `json:"itemsize"`
}

// engineMetadata reads the exporter's engine geometry and block ids (nil
// when the dump has none: its geometry is the engine's).
func engineMetadata(d *layout.Dump) (map[string]engineEntry, []int, error) {
	text, ok := d.Metadata()[metadataBlockIDs]
	if !ok {
		return nil, nil, nil
	}
	bad := func(key, format string, args ...any) error {
		return &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(key) + "]", Msg: fmt.Sprintf(format, args...)}
	}
	var ids []int
	if err := json.Unmarshal([]byte(text), &ids); err != nil {
		return nil, nil, bad(metadataBlockIDs, "not a list of block ids: %v", err)
	}
	if len(ids) != d.Manifest.NumBlocks {
		return nil, nil, bad(metadataBlockIDs, "%d block ids for num_blocks %d", len(ids), d.Manifest.NumBlocks)
	}
	seen := map[int]bool{}
	for i, id := range ids {
		if id < 0 || id >= 1<<40 || seen[id] {
			return nil, nil, bad(metadataBlockIDs, "block id %d at %d is negative, too large or repeated", id, i)
		}
		seen[id] = true
	}
	eng := map[string]engineEntry{}
	if text, ok := d.Metadata()[metadataEngine]; ok {
		if err := json.Unmarshal([]byte(text), &eng); err != nil {
			return nil, nil, bad(metadataEngine, "%v", err)
		}
	}
	return eng, ids, nil
}

// newRegion places one layer's cache.
func newRegion(d *layout.Dump, gv *layout.GroupView, l *layout.Layer, views []*layout.LayerView, eng map[string]engineEntry, blockIDs []int, field string) (*Region, error) {
	addr, ok := l.DeviceAddress()
	if !ok {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q has no device address: a NIXL log cannot be resolved without one (kvaudit_export and kvaudit synth write it)", l.Name)}
	}
	shape, strides, dtype, ok := d.Geometry(l)
	geo := strided.Tensor{Shape: shape, Strides: strides, Dtype: dtype}
	if !ok {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q: no tensor geometry", l.Name)}
	}
	r := &Region{Start: addr, Group: gv, Layer: l, Views: views, State: gv.Group.Kind == layout.KindMamba, identity: true}
	v := &views[0].Cells
	r.KernelBlocks, r.KernelTokens = v.KernelBlocks, v.KernelTokens
	r.engineBlocks = d.Manifest.NumBlocks
	if blockIDs != nil {
		r.identity = false
		r.blockOf, r.engineOf = map[int]int{}, blockIDs
		for i, id := range blockIDs {
			r.blockOf[id] = i
		}
	}
	var err error
	if r.State {
		err = r.placeState(d, l, geo, blockIDs)
	} else {
		if blockIDs != nil {
			e, ok := eng[l.Name]
			if !ok {
				return nil, &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(metadataEngine) + "]", Msg: fmt.Sprintf("no engine geometry for layer %q, whose blocks the dump renumbered", l.Name)}
			}
			if geo, err = engineGeometry(e, geo, l); err != nil {
				return nil, &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(metadataEngine) + "]", Msg: fmt.Sprintf("layer %q: %v", l.Name, err)}
			}
		}
		err = r.placeAttention(l, geo, views[0])
	}
	if err != nil {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q: %v", l.Name, err)}
	}
	if r.span <= 0 || uint64(r.span) > math.MaxUint64-addr {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q: address 0x%x and %d bytes overflow", l.Name, addr, r.span)}
	}
	r.End = addr + uint64(r.span)
	return r, nil
}

// engineGeometry is a layer's tensor as the engine holds it.
func engineGeometry(e engineEntry, dump strided.Tensor, l *layout.Layer) (strided.Tensor, error) {
	if len(e.Shape) != len(dump.Shape) || len(e.Strides) != len(e.Shape) {
		return strided.Tensor{}, fmt.Errorf("engine shape %v and strides %v for a %d-axis layout", e.Shape, e.Strides, len(dump.Shape))
	}
	if e.Itemsize != int64(max(dump.Dtype.Bits/8, 1)) {
		return strided.Tensor{}, fmt.Errorf("engine itemsize %d, the dump's elements are %d bytes", e.Itemsize, dump.Dtype.Bits/8)
	}
	g := strided.Tensor{Shape: e.Shape, Dtype: dump.Dtype, Size: -1}
	for i, s := range e.Strides {
		if s < 0 || s > math.MaxInt64/e.Itemsize || e.Shape[i] < 0 {
			return strided.Tensor{}, fmt.Errorf("engine stride %d or size %d", s, e.Shape[i])
		}
		g.Strides = append(g.Strides, s*e.Itemsize)
	}
	if _, ok := strided.End(g); !ok {
		return strided.Tensor{}, fmt.Errorf("engine tensor of shape %v spans more than 2^62 bytes", e.Shape)
	}
	if msg := strided.Overlapping(g, l.Layout); msg != "" {
		return strided.Tensor{}, fmt.Errorf("engine strides: %s", msg)
	}
	for i, a := range l.Layout {
		if a != "block" && e.Shape[i] != dump.Shape[i] {
			return strided.Tensor{}, fmt.Errorf("engine axis %q has %d, the dump's %d", a, e.Shape[i], dump.Shape[i])
		}
	}
	return g, nil
}

// placeAttention builds an attention region's axes from its tensor's
// geometry (the engine's).
func (r *Region) placeAttention(l *layout.Layer, geo strided.Tensor, v *layout.LayerView) error {
	c := &v.Cells
	r.heads = c.Heads
	r.elem = int64(max(geo.Dtype.Bits/8, 1))
	r.Parts = 2
	if !slices.Contains(l.Layout, "kv") && isMLALayout(r.Group.Group, l) {
		r.Parts = 1
	}
	r.PartBytes = c.CellBytes / r.Parts
	dtype, _ := layout.TorchDtype(l.Dtype)
	e := int64(dtype.Size())
	for i, name := range l.Layout {
		a := axis{name: name, n: geo.Shape[i], stride: geo.Strides[i]}
		switch name {
		case "block":
			a.kind, a.step = DimToken, int64(c.KernelTokens) // within a block; rows split per block
			if !r.identity && a.n%int64(c.KernelBlocks) != 0 {
				return fmt.Errorf("engine block axis of %d rows is not whole blocks of %d kernel rows", a.n, c.KernelBlocks)
			}
			r.engineBlocks = int(a.n) / c.KernelBlocks
		case "token":
			a.kind, a.step = DimToken, 1
		case "head":
			a.kind, a.step = DimHead, 1
		case "kv":
			a.kind, a.step = DimByte, int64(r.PartBytes)
		case "dim":
			a.kind, a.step = DimByte, e
		case "cell":
			a.kind, a.step = DimByte, 1
		}
		if a.n > 1 {
			r.axes = append(r.axes, a)
		}
		r.order = append(r.order, a)
	}
	slices.SortStableFunc(r.axes, func(a, b axis) int { return cmp.Compare(b.stride, a.stride) })
	slices.SortStableFunc(r.order, func(a, b axis) int { return cmp.Compare(b.stride, a.stride) })
	end, ok := strided.End(geo)
	if !ok {
		return fmt.Errorf("the tensor spans more than 2^62 bytes")
	}
	r.span = end
	r.pages = r.attentionPages()
	return nil
}

// isMLALayout says whether a layer's cell is one vector (no K and V).
func isMLALayout(g *layout.Group, l *layout.Layer) bool {
	if slices.Contains(l.Layout, "cell") {
		return g.IsMLA(l)
	}
	return !slices.Contains(l.Layout, "kv")
}

// attentionPages cuts an attention region into vLLM's descriptor units:
// per kernel row, the part pages when K and V lie apart (a kv axis outside
// the others of the row), else the row's page.
func (r *Region) attentionPages() []Page {
	bi := slices.IndexFunc(r.axes, func(a axis) bool { return a.name == "block" })
	if bi < 0 {
		return nil // one row: no pages worth naming
	}
	row := r.axes[bi]
	inner := r.axes[bi+1:]
	outer := r.axes[:bi]
	var parts []int64 // the kv axis's stride, when the parts lie apart
	kvStride := int64(-1)
	switch {
	case len(outer) == 1 && outer[0].name == "kv":
		kvStride = outer[0].stride
	case len(outer) == 0 && len(inner) > 0 && inner[0].name == "kv":
		kvStride = inner[0].stride
		inner = inner[1:]
	case len(outer) == 0:
	default:
		return nil // an axis outside the block axis that is not K/V
	}
	headsOuter := len(inner) > 0 && inner[0].name == "head"
	var headBytes int64
	if headsOuter {
		headBytes = inner[0].stride
	}
	n := extent(inner, r.elem)
	if kvStride < 0 {
		return []Page{{Part: -1, Base: r.Start, Stride: uint64(row.stride), Len: uint64(n), HeadsOuter: headsOuter, HeadBytes: uint64(headBytes)}}
	}
	parts = []int64{0, kvStride}
	var pages []Page
	for p, off := range parts {
		pages = append(pages, Page{Part: p, Base: r.Start + uint64(off), Stride: uint64(row.stride), Len: uint64(n), HeadsOuter: headsOuter, HeadBytes: uint64(headBytes)})
	}
	return pages
}

// extent is the bytes a box of full axes spans, from its first byte.
func extent(axes []axis, elem int64) int64 {
	n := elem
	for _, a := range axes {
		n += (a.n - 1) * a.stride
	}
	return n
}

// placeState builds a state region: [block, page] bytes, the covered
// states packed from the page start (docs/spec.md §6).
func (r *Region) placeState(d *layout.Dump, l *layout.Layer, geo strided.Tensor, blockIDs []int) error {
	r.Parts, r.elem = 1, 1
	page, rowStride := geo.Shape[1], geo.Strides[0]
	if blockIDs != nil {
		rowStride = page // the engine's pages follow one another
	}
	var off int64
	for i, s := range l.States {
		n, _ := s.Bytes()
		if s.Address != "" {
			a, _ := s.DeviceAddress()
			if a != r.Start+uint64(off) {
				return fmt.Errorf("states[%d] at 0x%x is not at its place in the layer's pages (0x%x): states in tensors of their own are not supported", i, a, r.Start+uint64(off))
			}
		}
		r.stateOffsets = append(r.stateOffsets, off)
		r.stateSizes = append(r.stateSizes, n)
		off += n
	}
	r.Covered = off
	engineRows := geo.Shape[0]
	if blockIDs != nil {
		engineRows = int64(slices.Max(blockIDs) + 1)
	}
	r.engineBlocks = int(engineRows)
	r.axes = []axis{{name: "block", n: engineRows, stride: rowStride}, {name: "page", n: page, stride: 1, kind: DimByte, step: 1}}
	r.span = (engineRows-1)*rowStride + page
	r.KernelBlocks, r.KernelTokens = 1, 1
	r.pages = r.statePages(l, uint64(rowStride))
	return nil
}

// statePages are a state region's descriptor units: per state, its rows
// of each segment when the split axis is the first (rows one after
// another), else the whole state.
func (r *Region) statePages(l *layout.Layer, rowStride uint64) []Page {
	var pages []Page
	for si, s := range l.States {
		base := r.Start + uint64(r.stateOffsets[si])
		switch {
		case s.Split == nil:
			pages = append(pages, Page{Part: -1, Base: base, Stride: rowStride, Len: uint64(r.stateSizes[si]), View: r.viewOf(si, 0), State: si})
			continue
		case s.Split.Axis != 0:
			pages = append(pages, Page{Part: -1, Base: base, Stride: rowStride, Len: uint64(r.stateSizes[si]), State: si})
			continue
		}
		rowBytes := uint64(r.stateSizes[si] / s.Shape[0])
		var lo uint64
		for k, seg := range s.Split.Segments {
			pages = append(pages, Page{Part: -1, Base: base + lo*rowBytes, Stride: rowStride, Len: uint64(seg[0]) * rowBytes,
				HeadsOuter: true, HeadBytes: rowBytes, View: r.viewOf(si, k), State: si})
			lo += uint64(seg[0])
		}
	}
	return pages
}

// viewOf returns the view of segment k of state si (for a layer without
// a split, its one view).
func (r *Region) viewOf(si, k int) *layout.LayerView {
	if r.Layer.States[0].Split == nil {
		return r.Views[0]
	}
	n := 0
	for _, v := range r.Views {
		if v.StateIndex == si {
			if n == k {
				return v
			}
			n++
		}
	}
	return nil
}

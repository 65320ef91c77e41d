package layout

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Metadata keys kvaudit_export writes beside the manifest of a dump whose
// blocks it renumbered: the worker's block id of each dump block, and each
// attention layer's shape and strides in the engine (in the dump's axis
// order), which the device addresses are relative to.
const (
	MetadataBlockIDs = "kvaudit_export.block_ids"
	MetadataEngine   = "kvaudit_export.engine"
)

// An AddressMap places a rank's caches at the device addresses its engine
// registered them at (the manifest's address fields, docs/spec.md §13), so
// that a byte range a NIXL descriptor names resolves to the cells it holds:
// the inverse of the geometry that turns a tensor into cells. Where an
// exporter renumbered the blocks it dumped (kvaudit_export's metadata), the
// engine's geometry and block ids are used, and a block the dump does not
// hold resolves to NoBlock.
type AddressMap struct {
	Dump *Dump
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
	Group      *GroupView
	Layer      *Layer
	// Views are the cache's views: one for an attention cache, one per
	// (state, segment) for a state layer with a split, one for a state
	// layer without.
	Views []*LayerView
	State bool
	// KernelBlocks and KernelTokens: kernel rows per block, tokens per
	// kernel row (1 and 1 for a state layer).
	KernelBlocks, KernelTokens int
	// Parts is 2 (K then V) or 1 (MLA, a state layer); PartBytes the
	// bytes of one part of a cell.
	Parts, PartBytes int
	// Covered is, for a state layer, the bytes of its covered states at
	// the start of each page; StateOffsets their first bytes in the page.
	Covered      int64
	StateOffsets []int64
	StateSizes   []int64

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
	View *LayerView
	// Block is the dump's block id (NoBlock when the dump does not hold
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
	View *LayerView
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

// AddressMap returns the dump's caches placed at their device addresses.
// A layer without an address is a *NoAddressError; so are regions that
// overlap and engine metadata that does not describe the dump's tensors.
func (d *Dump) AddressMap() (*AddressMap, error) {
	am := &AddressMap{Dump: d}
	eng, blockIDs, err := d.engineMetadata()
	if err != nil {
		return nil, err
	}
	for gi, gv := range d.Groups {
		if gv.Skip != "" {
			am.Skipped = append(am.Skipped, fmt.Sprintf("group %d: %s", gv.Group.ID, gv.Skip))
			continue
		}
		// One region per distinct layer (a state layer's views share it).
		var layers []*Layer
		views := map[*Layer][]*LayerView{}
		for _, v := range gv.Caches {
			if views[v.Layer] == nil {
				layers = append(layers, v.Layer)
			}
			views[v.Layer] = append(views[v.Layer], v)
		}
		for _, l := range layers {
			li := slices.IndexFunc(gv.Group.Layers, func(x Layer) bool { return x.Name == l.Name })
			field := fmt.Sprintf("groups[%d].layers[%d].address", gi, li)
			r, err := d.newRegion(gv, l, views[l], eng, blockIDs, field)
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
func (d *Dump) engineMetadata() (map[string]engineEntry, []int, error) {
	text, ok := d.metadata[MetadataBlockIDs]
	if !ok {
		return nil, nil, nil
	}
	bad := func(key, format string, args ...any) error {
		return &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(key) + "]", Msg: fmt.Sprintf(format, args...)}
	}
	var ids []int
	if err := json.Unmarshal([]byte(text), &ids); err != nil {
		return nil, nil, bad(MetadataBlockIDs, "not a list of block ids: %v", err)
	}
	if len(ids) != d.Manifest.NumBlocks {
		return nil, nil, bad(MetadataBlockIDs, "%d block ids for num_blocks %d", len(ids), d.Manifest.NumBlocks)
	}
	seen := map[int]bool{}
	for i, id := range ids {
		if id < 0 || id >= 1<<40 || seen[id] {
			return nil, nil, bad(MetadataBlockIDs, "block id %d at %d is negative, too large or repeated", id, i)
		}
		seen[id] = true
	}
	eng := map[string]engineEntry{}
	if text, ok := d.metadata[MetadataEngine]; ok {
		if err := json.Unmarshal([]byte(text), &eng); err != nil {
			return nil, nil, bad(MetadataEngine, "%v", err)
		}
	}
	return eng, ids, nil
}

// newRegion places one layer's cache.
func (d *Dump) newRegion(gv *GroupView, l *Layer, views []*LayerView, eng map[string]engineEntry, blockIDs []int, field string) (*Region, error) {
	addr, ok := l.DeviceAddress()
	if !ok {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q has no device address: a NIXL log cannot be resolved without one (kvaudit_export and kvaudit synth write it)", l.Name)}
	}
	geo, ok := d.geometry[l]
	if !ok {
		return nil, &NoAddressError{Dump: d.Path, Field: field, Msg: fmt.Sprintf("layer %q: no tensor geometry", l.Name)}
	}
	r := &Region{Start: addr, Group: gv, Layer: l, Views: views, State: gv.Group.Kind == KindMamba, identity: true}
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
				return nil, &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(MetadataEngine) + "]", Msg: fmt.Sprintf("no engine geometry for layer %q, whose blocks the dump renumbered", l.Name)}
			}
			if geo, err = engineGeometry(e, geo, l); err != nil {
				return nil, &NoAddressError{Dump: d.Path, Field: "__metadata__[" + strconv.Quote(MetadataEngine) + "]", Msg: fmt.Sprintf("layer %q: %v", l.Name, err)}
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
func engineGeometry(e engineEntry, dump tensorGeometry, l *Layer) (tensorGeometry, error) {
	if len(e.Shape) != len(dump.shape) || len(e.Strides) != len(e.Shape) {
		return tensorGeometry{}, fmt.Errorf("engine shape %v and strides %v for a %d-axis layout", e.Shape, e.Strides, len(dump.shape))
	}
	if e.Itemsize != int64(max(dump.dtype.Bits/8, 1)) {
		return tensorGeometry{}, fmt.Errorf("engine itemsize %d, the dump's elements are %d bytes", e.Itemsize, dump.dtype.Bits/8)
	}
	g := tensorGeometry{shape: e.Shape, dtype: dump.dtype, size: -1}
	for i, s := range e.Strides {
		if s < 0 || s > math.MaxInt64/e.Itemsize || e.Shape[i] < 0 {
			return tensorGeometry{}, fmt.Errorf("engine stride %d or size %d", s, e.Shape[i])
		}
		g.strides = append(g.strides, s*e.Itemsize)
	}
	if _, ok := tensorEnd(g); !ok {
		return tensorGeometry{}, fmt.Errorf("engine tensor of shape %v spans more than 2^62 bytes", e.Shape)
	}
	if msg := overlapping(g, l.Layout); msg != "" {
		return tensorGeometry{}, fmt.Errorf("engine strides: %s", msg)
	}
	for i, a := range l.Layout {
		if a != "block" && e.Shape[i] != dump.shape[i] {
			return tensorGeometry{}, fmt.Errorf("engine axis %q has %d, the dump's %d", a, e.Shape[i], dump.shape[i])
		}
	}
	return g, nil
}

// placeAttention builds an attention region's axes from its tensor's
// geometry (the engine's).
func (r *Region) placeAttention(l *Layer, geo tensorGeometry, v *LayerView) error {
	c := &v.Cells
	r.heads = c.Heads
	r.elem = int64(max(geo.dtype.Bits/8, 1))
	r.Parts = 2
	if !slices.Contains(l.Layout, "kv") && isMLALayout(r.Group.Group, l) {
		r.Parts = 1
	}
	r.PartBytes = c.CellBytes / r.Parts
	dtype, _ := TorchDtype(l.Dtype)
	e := int64(dtype.Size())
	for i, name := range l.Layout {
		a := axis{name: name, n: geo.shape[i], stride: geo.strides[i]}
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
	end, ok := tensorEnd(geo)
	if !ok {
		return fmt.Errorf("the tensor spans more than 2^62 bytes")
	}
	r.span = end
	r.pages = r.attentionPages()
	return nil
}

// isMLALayout says whether a layer's cell is one vector (no K and V).
func isMLALayout(g *Group, l *Layer) bool {
	if slices.Contains(l.Layout, "cell") {
		return isMLA(g, l)
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
func (r *Region) placeState(d *Dump, l *Layer, geo tensorGeometry, blockIDs []int) error {
	r.Parts, r.elem = 1, 1
	page, rowStride := geo.shape[1], geo.strides[0]
	if blockIDs != nil {
		rowStride = page // the engine's pages follow one another
	}
	var off int64
	for i, s := range l.States {
		n, _ := stateBytes(s)
		if s.Address != "" {
			a, _ := s.DeviceAddress()
			if a != r.Start+uint64(off) {
				return fmt.Errorf("states[%d] at 0x%x is not at its place in the layer's pages (0x%x): states in tensors of their own are not supported", i, a, r.Start+uint64(off))
			}
		}
		r.StateOffsets = append(r.StateOffsets, off)
		r.StateSizes = append(r.StateSizes, n)
		off += n
	}
	r.Covered = off
	engineRows := geo.shape[0]
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
func (r *Region) statePages(l *Layer, rowStride uint64) []Page {
	var pages []Page
	for si, s := range l.States {
		base := r.Start + uint64(r.StateOffsets[si])
		switch {
		case s.Split == nil:
			pages = append(pages, Page{Part: -1, Base: base, Stride: rowStride, Len: uint64(r.StateSizes[si]), View: r.viewOf(si, 0), State: si})
			continue
		case s.Split.Axis != 0:
			pages = append(pages, Page{Part: -1, Base: base, Stride: rowStride, Len: uint64(r.StateSizes[si]), State: si})
			continue
		}
		rowBytes := uint64(r.StateSizes[si] / s.Shape[0])
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
func (r *Region) viewOf(si, k int) *LayerView {
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

// Find returns the region holding address a, or nil.
func (m *AddressMap) Find(a uint64) *Region {
	i, _ := slices.BinarySearchFunc(m.Regions, a, func(r *Region, a uint64) int {
		switch {
		case r.End <= a:
			return -1
		case r.Start > a:
			return 1
		}
		return 0
	})
	if i < len(m.Regions) && m.Regions[i].Start <= a && a < m.Regions[i].End {
		return m.Regions[i]
	}
	return nil
}

// Resolve calls fn with the cells the bytes [a, a+n) hold, in address
// order, one box per block. It returns the bytes that fall in no cache
// (outside every region) and those inside a region that hold no cell
// (padding, the uncovered end of a state page); a non-nil error is fn's.
func (m *AddressMap) Resolve(a, n uint64, fn func(Cells) error) (outside, padding uint64, err error) {
	for n > 0 {
		r := m.Find(a)
		if r == nil {
			// Skip to the next region, if it starts within the range.
			i, _ := slices.BinarySearchFunc(m.Regions, a, func(r *Region, a uint64) int { return cmp.Compare(r.Start, a) })
			skip := n
			if i < len(m.Regions) && m.Regions[i].Start-a < n {
				skip = m.Regions[i].Start - a
			}
			outside += skip
			a, n = a+skip, n-skip
			continue
		}
		k := min(n, r.End-a)
		covered, err := r.resolve(int64(a-r.Start), int64(k), fn)
		if err != nil {
			return outside, padding, err
		}
		padding += uint64(k) - covered
		a, n = a+k, n-k
	}
	return outside, padding, nil
}

// box is a product of index ranges of a region's axes (idx, cnt per axis
// of r.axes), and, inside one element, a byte range [pb0, pb1) (pb1 0: the
// whole element).
type box struct {
	idx, cnt []int64
	pb0, pb1 int64
}

// resolve calls fn with the cells of bytes [lo, lo+n) of the region (in
// range) and returns the bytes that hold cells.
func (r *Region) resolve(lo, n int64, fn func(Cells) error) (uint64, error) {
	var covered uint64
	var ferr error
	idx := make([]int64, len(r.axes))
	cnt := make([]int64, len(r.axes))
	emit := func(b box) {
		if ferr != nil {
			return
		}
		covered += r.boxBytes(b)
		ferr = r.cells(b, fn)
	}
	var rec func(k int, lo, hi int64)
	rec = func(k int, lo, hi int64) {
		if k == len(r.axes) {
			b := box{idx: idx, cnt: cnt}
			if lo > 0 || hi < r.elem {
				b.pb0, b.pb1 = lo, hi
			}
			emit(b)
			return
		}
		ext := extent(r.axes[k:], r.elem)
		if lo >= ext {
			return // padding after the sub-box
		}
		hi = min(hi, ext)
		if lo == 0 && hi == ext {
			for j := k; j < len(r.axes); j++ {
				idx[j], cnt[j] = 0, r.axes[j].n
			}
			emit(box{idx: idx, cnt: cnt})
			return
		}
		a := r.axes[k]
		innerExt := extent(r.axes[k+1:], r.elem)
		i0 := lo / a.stride
		i1 := min((hi-1)/a.stride, a.n-1)
		set := func(i, c int64) { idx[k], cnt[k] = i, c }
		if i0 == i1 {
			set(i0, 1)
			rec(k+1, lo-i0*a.stride, hi-i0*a.stride)
			return
		}
		first := i0
		if lo-i0*a.stride > 0 {
			set(i0, 1)
			rec(k+1, lo-i0*a.stride, innerExt)
			first++
		}
		last := i1
		tail := hi - i1*a.stride
		if tail < innerExt {
			last--
		}
		if first <= last {
			set(first, last-first+1)
			for j := k + 1; j < len(r.axes); j++ {
				idx[j], cnt[j] = 0, r.axes[j].n
			}
			emit(box{idx: idx, cnt: cnt})
		}
		if tail < innerExt {
			set(i1, 1)
			rec(k+1, 0, tail)
		}
	}
	rec(0, lo, lo+n)
	return covered, ferr
}

// boxBytes is the bytes of elements a box covers.
func (r *Region) boxBytes(b box) uint64 {
	n := uint64(1)
	for _, c := range b.cnt {
		n *= uint64(c)
	}
	if b.pb1 > 0 {
		return n * uint64(b.pb1-b.pb0)
	}
	return n * uint64(r.elem)
}

// cells turns a box into Cells, one per block (and, for a state layer,
// per state and row run), and calls fn with each.
func (r *Region) cells(b box, fn func(Cells) error) error {
	bi := slices.IndexFunc(r.axes, func(a axis) bool { return a.name == "block" })
	rows := [2]int64{0, 1}
	if bi >= 0 {
		rows = [2]int64{b.idx[bi], b.idx[bi] + b.cnt[bi]}
	}
	hasToken := slices.ContainsFunc(r.axes, func(a axis) bool { return a.name == "token" })
	hasHead := slices.ContainsFunc(r.axes, func(a axis) bool { return a.name == "head" })
	kb := int64(r.KernelBlocks)
	for blk := rows[0] / kb; blk*kb < rows[1]; blk++ {
		k0, k1 := max(rows[0], blk*kb)-blk*kb, min(rows[1], (blk+1)*kb)-blk*kb
		c := Cells{Region: r, EngineBlock: int(blk), Block: r.DumpBlock(int(blk)), Kernels: [2]int{int(k0), int(k1)}}
		var off int64
		if bi >= 0 {
			off = (blk*kb + k0) * r.axes[bi].stride
		}
		if r.State {
			if err := r.stateCells(c, b, off, fn); err != nil {
				return err
			}
			continue
		}
		c.View = r.Views[0]
		c.Tokens, c.Heads, c.Bytes = [2]int{0, 1}, [2]int{0, 1}, [2]int{0, 0}
		var bytes0, bytes1 int64 = 0, 1
		var dims []Dim
		for j, a := range r.axes {
			i0, n := b.idx[j], b.cnt[j]
			if j == bi {
				i0, n = k0, k1-k0
			} else {
				off += i0 * a.stride
			}
			switch a.name {
			case "token":
				c.Tokens = [2]int{int(i0), int(i0 + n)}
			case "head":
				c.Heads = [2]int{int(i0), int(i0 + n)}
			}
			if a.kind == DimByte {
				bytes0 += i0 * a.step
				bytes1 += (i0 + n - 1) * a.step
			}
			if n > 1 {
				dims = append(dims, Dim{Kind: a.kind, Count: int(n), Step: int(a.step)})
			}
		}
		// The element's bytes are the innermost axis.
		if b.pb1 > 0 {
			bytes0 += b.pb0
			bytes1 += b.pb1 - 1
			off += b.pb0
			dims = append(dims, Dim{Kind: DimByte, Count: int(b.pb1 - b.pb0), Step: 1})
		} else {
			bytes1 += r.elem - 1
			dims = append(dims, Dim{Kind: DimByte, Count: int(r.elem), Step: 1})
		}
		if !hasToken {
			c.Tokens = [2]int{0, r.KernelTokens}
		}
		if !hasHead {
			c.Heads = [2]int{0, r.heads}
		}
		c.Bytes = [2]int{int(bytes0), int(bytes1)}
		c.Addr = r.Start + uint64(off)
		c.dims = mergeDims(dims)
		c.Len = dimsLen(c.dims)
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// stateCells splits the page bytes of a state box into states, and a
// state's bytes into its (state, segment) views' rows: without a split,
// the layer's one view, whose one "row" is every covered state's bytes;
// with a split along the first axis, rows of each segment's view; along
// another axis, the state's bytes (View nil).
func (r *Region) stateCells(c Cells, b box, off int64, fn func(Cells) error) error {
	pi := len(r.axes) - 1 // the page axis
	p0, p1 := b.idx[pi], b.idx[pi]+b.cnt[pi]
	for si, so := range r.StateOffsets {
		lo, hi := max(p0, so), min(p1, so+r.StateSizes[si])
		if lo >= hi {
			continue
		}
		st := r.Layer.States[si]
		emit := func(v *LayerView, rows, bytes [2]int, dims []Dim, at int64) error {
			x := c
			x.View, x.State, x.Heads, x.Bytes, x.Tokens = v, si, rows, bytes, [2]int{0, 1}
			x.Addr = r.Start + uint64(off+at)
			x.dims = mergeDims(dims)
			x.Len = dimsLen(x.dims)
			return fn(x)
		}
		whole := []Dim{{Kind: DimByte, Count: int(hi - lo), Step: 1}}
		switch {
		case st.Split == nil:
			if err := emit(r.Views[0], [2]int{0, 1}, [2]int{int(lo), int(hi)}, whole, lo); err != nil {
				return err
			}
			continue
		case st.Split.Axis != 0:
			if err := emit(nil, [2]int{0, 1}, [2]int{int(lo - so), int(hi - so)}, whole, lo); err != nil {
				return err
			}
			continue
		}
		rowBytes := r.StateSizes[si] / st.Shape[0]
		var segLo int64
		for k, seg := range st.Split.Segments {
			segHi := segLo + int64(seg[0])
			v := r.viewOf(si, k)
			a, z := max(lo-so, segLo*rowBytes), min(hi-so, segHi*rowBytes)
			for a < z {
				row := a / rowBytes
				rb := a - row*rowBytes
				lr := int(row - segLo)
				if rb > 0 || z-a < rowBytes {
					e := min(z, (row+1)*rowBytes)
					if err := emit(v, [2]int{lr, lr + 1}, [2]int{int(rb), int(rb + e - a)},
						[]Dim{{Kind: DimByte, Count: int(e - a), Step: 1}}, so+a); err != nil {
						return err
					}
					a = e
					continue
				}
				nrows := (z - a) / rowBytes
				dims := []Dim{{Kind: DimHead, Count: int(nrows), Step: 1}, {Kind: DimByte, Count: int(rowBytes), Step: 1}}
				if err := emit(v, [2]int{lr, lr + int(nrows)}, [2]int{0, int(rowBytes)}, dims, so+a); err != nil {
					return err
				}
				a += nrows * rowBytes
			}
			segLo = segHi
		}
	}
	return nil
}

func dimsLen(dims []Dim) uint64 {
	n := uint64(1)
	for _, d := range dims {
		n *= uint64(d.Count)
	}
	return n
}

// mergeDims drops axes of one index and merges an axis into the one
// inside it where it continues it (same kind, step = inner count x inner
// step).
func mergeDims(dims []Dim) []Dim {
	out := make([]Dim, 0, len(dims))
	for _, d := range dims {
		if d.Count <= 1 {
			continue
		}
		out = append(out, d)
	}
	for i := len(out) - 2; i >= 0; i-- {
		o, in := out[i], out[i+1]
		if o.Kind == in.Kind && o.Step == in.Count*in.Step {
			out[i] = Dim{Kind: o.Kind, Count: o.Count * in.Count, Step: in.Step}
			out = slices.Delete(out, i+1, i+2)
		}
	}
	return out
}

// PageOrder names what a page holds, in memory order: its axes inside the
// block axis (K and V apart or together, heads, tokens, cell bytes). Two
// regions of one order and kernel block size hold a kernel row's cells in
// the same byte order, so a byte copy of a page moves whole cells.
func (r *Region) PageOrder() string {
	if r.pageOrder == "" {
		r.pageOrder = r.computePageOrder()
	}
	return r.pageOrder
}

func (r *Region) computePageOrder() string {
	var names []string
	seenBlock := false
	for _, a := range r.order {
		switch {
		case a.name == "block":
			seenBlock = true
			continue
		case a.name == "kv" && !seenBlock:
			names = append(names, "kv-apart")
			continue
		case a.name == "dim" || a.name == "cell":
			if len(names) > 0 && names[len(names)-1] == "cell" {
				continue
			}
			names = append(names, "cell")
			continue
		}
		names = append(names, a.name)
	}
	if r.State {
		return "state"
	}
	if len(r.pages) > 0 && r.pages[0].Part >= 0 && !slices.Contains(names, "kv-apart") {
		names = slices.DeleteFunc(names, func(s string) bool { return s == "kv" })
		names = append([]string{"kv-apart"}, names...)
	}
	return strings.Join(names, ",")
}

// EngineBlocks is the engine's block count of the cache.
func (r *Region) EngineBlocks() int { return r.engineBlocks }

// DumpBlock maps an engine block id to the dump's (NoBlock: not dumped).
func (r *Region) DumpBlock(engine int) int {
	if r.blockOf == nil {
		return engine
	}
	if b, ok := r.blockOf[engine]; ok {
		return b
	}
	return NoBlock
}

// EngineBlockOf maps a dump block id to the engine's.
func (r *Region) EngineBlockOf(dump int) int {
	if r.engineOf == nil {
		return dump
	}
	return r.engineOf[dump]
}

// Intervals calls fn with the address ranges [lo, hi) that the cells of
// tokens [t0, t1) of kernel row k of dump block b occupy (every head, K
// and V), in address order, adjacent ranges merged. A block the engine
// does not hold (not in the dump) has none.
func (r *Region) Intervals(block, k int, tokens [2]int, fn func(lo, hi uint64)) {
	r.PartIntervals(block, k, tokens, -1, fn)
}

// PartIntervals is Intervals for one part of the cells (0 K, 1 V; -1
// both). A part is only apart from the other with a kv axis.
func (r *Region) PartIntervals(block, k int, tokens [2]int, part int, fn func(lo, hi uint64)) {
	eng := r.EngineBlockOf(block)
	if eng == NoBlock || r.State || tokens[0] >= tokens[1] {
		return
	}
	idx := make([]int64, len(r.axes))
	cnt := make([]int64, len(r.axes))
	for j, a := range r.axes {
		idx[j], cnt[j] = 0, a.n
		switch a.name {
		case "block":
			idx[j], cnt[j] = int64(eng*r.KernelBlocks+k), 1
		case "token":
			idx[j], cnt[j] = int64(tokens[0]), int64(tokens[1]-tokens[0])
		case "kv":
			if part >= 0 {
				idx[j], cnt[j] = int64(part), 1
			}
		}
	}
	r.runs(idx, cnt, fn)
}

// StateInterval returns the address range of the covered states of dump
// block b's page, and false for a block the engine does not hold.
func (r *Region) StateInterval(block int) (lo, hi uint64, ok bool) {
	eng := r.EngineBlockOf(block)
	if eng == NoBlock || !r.State {
		return 0, 0, false
	}
	base := r.Start
	if len(r.axes) > 1 {
		base += uint64(int64(eng) * r.axes[0].stride)
	}
	return base, base + uint64(r.Covered), true
}

// runs calls fn with the contiguous address ranges of the box (idx, cnt),
// merged where adjacent.
func (r *Region) runs(idx, cnt []int64, fn func(lo, hi uint64)) {
	var curLo, curHi uint64
	have := false
	out := func(lo, hi uint64) {
		if have && lo == curHi {
			curHi = hi
			return
		}
		if have {
			fn(curLo, curHi)
		}
		curLo, curHi, have = lo, hi, true
	}
	var rec func(j int, off int64)
	rec = func(j int, off int64) {
		if j == len(r.axes) {
			out(r.Start+uint64(off), r.Start+uint64(off+r.elem))
			return
		}
		if r.denseFrom(j) && allFull(r.axes[j:], idx[j:], cnt[j:]) {
			out(r.Start+uint64(off), r.Start+uint64(off+extent(r.axes[j:], r.elem)))
			return
		}
		a := r.axes[j]
		for i := idx[j]; i < idx[j]+cnt[j]; i++ {
			rec(j+1, off+i*a.stride)
		}
	}
	rec(0, 0)
	if have {
		fn(curLo, curHi)
	}
}

// denseFrom says whether the axes from j on hold their elements without
// gaps: each stride is the extent of the axes inside it.
func (r *Region) denseFrom(j int) bool {
	for m := j; m < len(r.axes); m++ {
		if r.axes[m].stride != extent(r.axes[m+1:], r.elem) {
			return false
		}
	}
	return true
}

func allFull(axes []axis, idx, cnt []int64) bool {
	for i, a := range axes {
		if idx[i] != 0 || cnt[i] != a.n {
			return false
		}
	}
	return true
}

// NonZero counts the non-zero bytes the dump holds in the cells of the
// address range [lo, hi) of the region, and returns the address of the
// first. Read it inside Guard: the data is mapped.
func (r *Region) NonZero(lo, hi uint64) (n, first uint64) {
	if hi <= lo {
		return 0, 0
	}
	count := func(at uint64, b []byte) {
		for i, x := range b {
			if x != 0 {
				if n == 0 {
					first = at + uint64(i)
				}
				n++
			}
		}
	}
	if r.identity {
		data := r.Views[0].Cells.Data
		if data == nil || hi-r.Start > uint64(len(data)) {
			return 0, 0
		}
		count(lo, data[lo-r.Start:hi-r.Start])
		return n, first
	}
	var cell []byte
	m := &AddressMap{Regions: []*Region{r}}
	m.Resolve(lo, hi-lo, func(c Cells) error {
		if c.Block == NoBlock || c.View == nil {
			return nil
		}
		v := &c.View.Cells
		if v.Data == nil {
			return nil
		}
		if r.State {
			base := int64(c.Block) * v.RowStride
			count(c.Addr, v.Data[base+int64(c.Addr-r.Start)%r.axes[0].stride:][:c.Len])
			return nil
		}
		for k := c.Kernels[0]; k < c.Kernels[1]; k++ {
			for t := c.Tokens[0]; t < c.Tokens[1]; t++ {
				for h := c.Heads[0]; h < c.Heads[1]; h++ {
					cell = v.ReadCell(cell[:0], c.Block, k*r.KernelTokens+t, h)
					count(c.Addr, cell[c.Bytes[0]:c.Bytes[1]])
				}
			}
		}
		return nil
	})
	return n, first
}

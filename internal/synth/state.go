package synth

import (
	"encoding/binary"
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

// StateDef is one covered state of a state layer: rows along the axis TP
// shards (conv channels, temporal heads), in segments, each row holding
// Other (the other axes, in order) elements.
type StateDef struct {
	Name     string
	Dtype    string
	Segments []Segment
	Other    []int64
	// AxisLast puts the split axis after the others (a channels-last conv
	// state); otherwise it is the first axis.
	AxisLast bool
}

// Segment is a run of rows along the split axis: Global rows over all TP
// ranks, sharded over them, or held whole by every rank (Replicated, as
// Mamba2 pads B and C when it has one group).
type Segment struct {
	Global     int
	Replicated bool
}

// stateModel builds the state presets: Mamba2 (conv [x, B, C] with one
// group, so B and C are replicated at TP > 1; temporal heads sharded),
// gated delta net (conv [Q, K, V]; value heads) and Mamba1 (channels). The
// hybrids put attention on even layers and state on odd ones; mamba1 is
// state only.
func stateModel(c Config) (*Model, error) {
	last := c.ConvLayout == "channels-last"
	var conv, ssm StateDef
	hybrid := true
	switch c.Preset {
	case "mamba2-hybrid":
		conv = StateDef{Name: "conv", Dtype: c.ConvDtype, AxisLast: last, Other: []int64{3},
			Segments: []Segment{{64, false}, {16, true}, {16, true}}}
		ssm = StateDef{Name: "ssm", Dtype: "float32", Other: []int64{8, 16}, Segments: []Segment{{8, false}}}
	case "gdn-hybrid":
		conv = StateDef{Name: "conv", Dtype: c.ConvDtype, AxisLast: last, Other: []int64{3},
			Segments: []Segment{{64, false}, {64, false}, {128, false}}}
		ssm = StateDef{Name: "ssm", Dtype: "float32", Other: []int64{16, 16}, Segments: []Segment{{8, false}}}
	case "mamba1":
		conv = StateDef{Name: "conv", Dtype: c.ConvDtype, AxisLast: last, Other: []int64{3}, Segments: []Segment{{64, false}}}
		ssm = StateDef{Name: "ssm", Dtype: "float32", Other: []int64{16}, Segments: []Segment{{64, false}}}
		hybrid = false
	default:
		return nil, fmt.Errorf("unknown state preset %q", c.Preset)
	}
	m := &Model{Name: "synth/" + c.Preset, NumKVHeads: 4}
	attn := Group{ID: 0, Kind: layout.KindFullAttention}
	state := Group{ID: 1, Kind: layout.KindMamba}
	if !hybrid {
		state.ID = 0
	}
	for l := range c.Layers {
		if hybrid && l%2 == 0 {
			attn.Caches = append(attn.Caches, Cache{Name: fmt.Sprintf("model.layers.%d.self_attn.attn", l), Layer: l, Heads: 4, HeadSize: 64, Dtype: "bfloat16"})
			continue
		}
		state.Caches = append(state.Caches, Cache{Name: fmt.Sprintf("model.layers.%d.mixer", l), Layer: l,
			States: []StateDef{conv, ssm}, Extra: 40})
	}
	if hybrid {
		m.Groups = []Group{attn, state}
	} else {
		m.Groups = []Group{state}
	}
	return m, nil
}

// localSegments returns, for a TP size, each segment's (local rows,
// replicas).
func localSegments(st StateDef, tp int) [][2]int {
	var out [][2]int
	for _, seg := range st.Segments {
		if seg.Replicated {
			out = append(out, [2]int{seg.Global, tp})
		} else {
			out = append(out, [2]int{seg.Global / tp, 1})
		}
	}
	return out
}

// localShape is a state's shape on a rank, and its split axis.
func localShape(st StateDef, tp int) (shape []int64, axis int) {
	var rows int64
	for _, seg := range localSegments(st, tp) {
		rows += int64(seg[0])
	}
	if st.AxisLast {
		return append(append([]int64(nil), st.Other...), rows), len(st.Other)
	}
	return append([]int64{rows}, st.Other...), 0
}

func dtypeSize(torch string) int {
	dt, _ := layout.TorchDtype(torch)
	return dt.Size()
}

func prod(xs []int64) int64 {
	n := int64(1)
	for _, x := range xs {
		n *= x
	}
	return n
}

// manifestStates describes a state layer's covered states for a rank's
// manifest (without their split when NoStateSplit).
func (c *Config) manifestStates(ca Cache) []layout.State {
	var out []layout.State
	for _, st := range ca.States {
		shape, axis := localShape(st, c.TP)
		s := layout.State{Dtype: st.Dtype, Shape: shape}
		if !c.NoStateSplit {
			s.Split = &layout.Split{Axis: axis, Segments: localSegments(st, c.TP)}
		}
		out = append(out, s)
	}
	return out
}

// placeState lays a state layer out as a [block, page] byte tensor: the
// covered states packed from the page start, an extra state, then padding
// to a multiple of 64 bytes.
func (c *Config) placeState(ca Cache) placement {
	var covered int64
	for _, st := range ca.States {
		shape, _ := localShape(st, c.TP)
		covered += prod(shape) * int64(dtypeSize(st.Dtype))
	}
	page := (covered + int64(ca.Extra) + 63) / 64 * 64
	pl := placement{axes: []string{"block", "page"}, sizes: []int64{int64(c.NumBlocks), page}, elem: 1, dtype: "U8", kb: 1}
	pl.strides = []int64{page, 1}
	run := page * int64(c.NumBlocks)
	if c.Format == "raw" {
		pl.strides[0] = page + 64
		run = (page + 64) * int64(c.NumBlocks)
	}
	pl.total = run
	return pl
}

// StateValue is the logical state: element e of global row row (counted
// within the state) of a state, for a request, truncated to the element's
// width.
func (c *Config) StateValue(request, cache string, state, row, e int, width int) uint64 {
	v := mix(cellSeed(c.Seed, request, fmt.Sprintf("%s/state%d", cache, state), row, 0) ^ uint64(e))
	return v & (1<<(8*width) - 1)
}

// localStateBytes returns a rank's covered states of a state layer for a
// request, packed as the page holds them.
func (c *Config) localStateBytes(ca Cache, request string, tpRank int) []byte {
	var out []byte
	for si, st := range ca.States {
		shape, axis := localShape(st, c.TP)
		w := dtypeSize(st.Dtype)
		buf := make([]byte, prod(shape)*int64(w))
		// row-major element strides of the local state
		strides := make([]int64, len(shape))
		acc := int64(1)
		for k := len(shape) - 1; k >= 0; k-- {
			strides[k] = acc
			acc *= shape[k]
		}
		elems := prod(st.Other)
		var localStart int64 // the segment's first row on this rank
		globalStart := 0     // the segment's first row in the state
		for k, seg := range localSegments(st, c.TP) {
			local, replicas := seg[0], seg[1]
			shard := tpRank / replicas
			for lr := range local {
				row := globalStart + shard*local + lr
				for e := range elems {
					// coordinates of element e among the other axes
					var off int64
					rem := e
					for oi := len(st.Other) - 1; oi >= 0; oi-- {
						idx := rem % st.Other[oi]
						rem /= st.Other[oi]
						ax := oi
						if !st.AxisLast {
							ax = oi + 1
						}
						off += idx * strides[ax]
					}
					off += (localStart + int64(lr)) * strides[axis]
					v := c.StateValue(request, ca.Name, si, row, int(e), w)
					switch w {
					case 2:
						binary.LittleEndian.PutUint16(buf[off*2:], uint16(v))
					case 4:
						binary.LittleEndian.PutUint32(buf[off*4:], uint32(v))
					}
				}
			}
			localStart += int64(local)
			globalStart += st.Segments[k].Global
		}
		out = append(out, buf...)
	}
	return out
}

// fillState writes each request's covered states into its state block.
func (c *Config) fillState(data []byte, ca Cache, pl placement, tables []layout.BlockIDs, tpRank int) {
	for r, table := range tables {
		covered := c.localStateBytes(ca, RequestID(r), tpRank)
		base := int64(table[0]) * pl.strides[0]
		copy(data[base:], covered)
	}
}

// expectedState is a request's checksum of one state layer from the
// definition of docs/spec.md §6: with a split, over the global rows of every
// state in order, each row's elements read at their width; without one, the
// sum over TP ranks of each rank's covered bytes as 8-byte pieces, as head
// tp_rank.
func (c *Config) expectedState(ca Cache, request string) uint64 {
	var sum uint64
	L := uint64(ca.Layer)
	if c.NoStateSplit {
		for rank := range c.TP {
			b := c.localStateBytes(ca, request, rank)
			var s uint64
			for p := 0; p+8 <= len(b); p += 8 {
				s += binary.LittleEndian.Uint64(b[p:]) * uint64(2*(p/8)+1)
			}
			sum += (2*(L*65536+uint64(rank)) + 1) * s
		}
		return sum
	}
	layerRow := 0
	for si, st := range ca.States {
		w := dtypeSize(st.Dtype)
		elems := int(prod(st.Other))
		row := 0
		for _, seg := range st.Segments {
			for range seg.Global {
				var s uint64
				for e := range elems {
					s += c.StateValue(request, ca.Name, si, row, e, w) * uint64(2*e+1)
				}
				sum += (2*(L*65536+uint64(layerRow)) + 1) * s
				row++
				layerRow++
			}
		}
	}
	return sum
}

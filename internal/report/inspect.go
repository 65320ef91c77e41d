package report

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// InspectFormat is the format tag of `kvaudit inspect -o json`.
const InspectFormat = "kvaudit-inspect/1"

// InspectJSON describes dumps: what `kvaudit inspect` prints.
type InspectJSON struct {
	Format string            `json:"format"`
	Dumps  []InspectDumpJSON `json:"dumps"`
}

// InspectDumpJSON describes one rank's dump.
type InspectDumpJSON struct {
	Path      string               `json:"path"`
	Model     string               `json:"model"`
	TPRank    int                  `json:"tp_rank"`
	TPSize    int                  `json:"tp_size"`
	PPRank    int                  `json:"pp_rank"`
	PPSize    int                  `json:"pp_size"`
	NumBlocks int                  `json:"num_blocks"`
	Groups    []InspectGroupJSON   `json:"groups"`
	Requests  []InspectRequestJSON `json:"requests"`
	// SGLang describes an SGLang dump's pool (nil for another engine's).
	SGLang *InspectSGLangJSON `json:"sglang,omitempty"`
}

// InspectGroupJSON describes a group on one rank.
type InspectGroupJSON struct {
	ID              int                `json:"id"`
	Kind            string             `json:"kind"`
	BlockSize       int                `json:"block_size"`
	SlidingWindow   int                `json:"sliding_window,omitempty"`
	Skipped         string             `json:"skipped,omitempty"`
	Fingerprint     layout.Hex64       `json:"fingerprint"`
	FingerprintFlat layout.Hex64       `json:"fingerprint_flat"`
	Layers          int                `json:"layers"`
	Caches          []InspectCacheJSON `json:"caches"`
}

// InspectCacheJSON describes one distinct cache.
type InspectCacheJSON struct {
	Name         string   `json:"name"`
	Aliases      []string `json:"aliases,omitempty"`
	Layer        int      `json:"layer"`
	Dtype        string   `json:"dtype"`
	Layout       []string `json:"layout"`
	Heads        int      `json:"heads"`
	FirstHead    int      `json:"first_head"`
	GlobalHeads  int      `json:"global_heads"`
	Replicas     int      `json:"replicas"`
	ReplicaIndex int      `json:"replica_index"`
	CellBytes    int      `json:"cell_bytes"`
	KernelBlocks int      `json:"kernel_blocks"`
	Contiguous   bool     `json:"contiguous"`
	Bytes        int64    `json:"bytes"`
	File         string   `json:"file"`
}

// InspectRequestJSON describes a request of a dump.
type InspectRequestJSON struct {
	ID                     string         `json:"id"`
	NumTokens              int            `json:"num_tokens"`
	NumLocalComputedTokens int            `json:"num_local_computed_tokens"`
	Blocks                 map[string]int `json:"blocks"`
}

// NewInspectJSON describes dumps.
func NewInspectJSON(dumps []*layout.Dump) *InspectJSON {
	out := &InspectJSON{Format: InspectFormat, Dumps: []InspectDumpJSON{}}
	for _, d := range dumps {
		m := d.Manifest
		dj := InspectDumpJSON{
			Path: d.Path, Model: m.Model.Name, NumBlocks: m.NumBlocks,
			TPRank: m.Parallel.TPRank, TPSize: m.Parallel.TPSize, PPRank: m.Parallel.PPRank, PPSize: m.Parallel.PPSize,
			Groups: []InspectGroupJSON{}, Requests: []InspectRequestJSON{},
		}
		for _, g := range d.Groups {
			fp, flat := checksum.Fingerprints(g)
			gj := InspectGroupJSON{
				ID: g.Group.ID, Kind: g.Group.Kind, BlockSize: g.Group.BlockSize, SlidingWindow: g.Group.SlidingWindow,
				Skipped: g.Skip, Fingerprint: layout.Hex64(fp), FingerprintFlat: layout.Hex64(flat),
				Layers: len(g.Layers), Caches: []InspectCacheJSON{},
			}
			for _, c := range g.Caches {
				gj.Caches = append(gj.Caches, InspectCacheJSON{
					Name: c.Layer.Name, Aliases: others(c.Aliases, c.Layer.Name), Layer: c.Number, Dtype: c.Layer.Dtype,
					Layout: c.Layer.Layout, Heads: c.Heads, FirstHead: c.HeadBase, GlobalHeads: c.GlobalHeads,
					Replicas: c.Replicas, ReplicaIndex: c.ReplicaIndex, CellBytes: c.Cells.CellBytes,
					KernelBlocks: c.Cells.KernelBlocks, Contiguous: c.Cells.Contiguous(),
					Bytes: c.Cells.BlockBytes() * int64(m.NumBlocks), File: c.Cells.File,
				})
			}
			dj.Groups = append(dj.Groups, gj)
		}
		for i := range m.Requests {
			r := &m.Requests[i]
			rj := InspectRequestJSON{ID: r.ID, NumTokens: r.NumTokens, NumLocalComputedTokens: r.NumLocalComputedTokens, Blocks: map[string]int{}}
			for k, t := range r.BlockTable {
				rj.Blocks[k] = len(t)
			}
			for k := range r.StateBlock {
				rj.Blocks[k] = 1
			}
			dj.Requests = append(dj.Requests, rj)
		}
		dj.SGLang = newInspectSGLang(m)
		out.Dumps = append(out.Dumps, dj)
	}
	return out
}

func others(names []string, self string) []string {
	var out []string
	for _, n := range names {
		if n != self {
			out = append(out, n)
		}
	}
	return out
}

// formatBytes writes a size in bytes for a person: "512 B", "704.0 KiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// hybrid says whether groups are of more than one kind.
func hybrid(groups []InspectGroupJSON) bool {
	for _, g := range groups {
		if g.Kind != groups[0].Kind {
			return true
		}
	}
	return false
}

// InspectTables lays out what dumps hold: one table per dump.
func InspectTables(in *InspectJSON) []*Table {
	var tables []*Table
	for _, d := range in.Dumps {
		t := &Table{
			Title: fmt.Sprintf("%s: %s, tp %d/%d, pp %d/%d, %d blocks, %d requests",
				d.Path, d.Model, d.TPRank, d.TPSize, d.PPRank, d.PPSize, d.NumBlocks, len(d.Requests)),
			Header: []string{"group", "kind", "block size", "cache", "layer", "dtype", "layout", "heads", "replicas", "cell size", "cache size"},
			// the cache, its layer, dtype, layout and heads tell most
			Drop: []string{"replicas", "cell size", "cache size", "group", "block size", "kind"},
		}
		if hybrid(d.Groups) {
			// Groups of more than one kind (attention and mamba state, full
			// and sliding window attention):
			// the kind says which a cache is, so it stays, and the layer
			// (the cache's name holds it) and dtype go first.
			t.Drop = []string{"replicas", "cell size", "cache size", "group", "block size", "layer", "dtype"}
		}
		for _, g := range d.Groups {
			kind := g.Kind
			if g.SlidingWindow > 0 {
				kind += fmt.Sprintf(" (%d)", g.SlidingWindow)
			}
			if g.Skipped != "" {
				t.Add(C("%d", g.ID), C("%s", kind), C("%d", g.BlockSize), Cell{Text: "skipped: " + g.Skipped, Tone: Warn},
					C("-"), C("-"), C("-"), C("-"), C("-"), C("-"), C("-"))
				continue
			}
			for _, c := range g.Caches {
				name := c.Name
				if len(c.Aliases) > 0 {
					name += " (+" + strings.Join(c.Aliases, ", ") + ")"
				}
				heads := fmt.Sprintf("%d..%d of %d", c.FirstHead, c.FirstHead+c.Heads-1, c.GlobalHeads)
				t.Add(C("%d", g.ID), C("%s", kind), C("%d", g.BlockSize), C("%s", name), C("%d", c.Layer), C("%s", c.Dtype),
					C("%s", strings.Join(c.Layout, ",")), C("%s", heads), C("%d (index %d)", c.Replicas, c.ReplicaIndex),
					C("%s", formatBytes(int64(c.CellBytes))), C("%s", formatBytes(c.Bytes)))
			}
		}
		for _, r := range d.Requests {
			t.Notes = append(t.Notes, fmt.Sprintf("request %s: %d tokens, %d local", r.ID, r.NumTokens, r.NumLocalComputedTokens))
		}
		tables = append(tables, t)
		if d.SGLang != nil {
			tables = append(tables, sglangInspectTable(d))
		}
	}
	return tables
}

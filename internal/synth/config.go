package synth

// This file fills a configuration's defaults and checks it, its memory
// included.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/memlimit"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/parse"
)

// Normalize fills defaults and checks the configuration.
func (c Config) Normalize() (Config, error) {
	if c.Preset == "" {
		c.Preset = "llama"
	}
	d, ok := presetDefaults[c.Preset]
	if !ok {
		return c, fmt.Errorf("unknown preset %q (want one of %s)", c.Preset, strings.Join(Presets, ", "))
	}
	if c.Layers == 0 {
		c.Layers = d.layers
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.blockSize
	}
	if c.Tokens == 0 {
		c.Tokens = d.tokens
	}
	if c.Requests == 0 {
		c.Requests = d.requests
	}
	if c.TP == 0 {
		c.TP = 1
	}
	if c.PP == 0 {
		c.PP = 1
	}
	if c.Layout == "" {
		c.Layout = "flash"
	}
	if c.KernelBlockSize == 0 {
		c.KernelBlockSize = c.BlockSize
	}
	if c.Role == "" {
		c.Role = "producer"
	}
	if c.Format == "" {
		c.Format = "safetensors"
	}
	if c.ConvLayout == "" {
		c.ConvLayout = "dim-first"
	}
	if c.ConvDtype == "" {
		c.ConvDtype = "bfloat16"
	}
	switch {
	case !slices.Contains(Layouts, c.Layout):
		return c, fmt.Errorf("unknown layout %q (want one of %s)", c.Layout, strings.Join(Layouts, ", "))
	case !slices.Contains(Formats, c.Format):
		return c, fmt.Errorf("unknown format %q (want one of %s)", c.Format, strings.Join(Formats, ", "))
	case !slices.Contains(ConvLayouts, c.ConvLayout):
		return c, fmt.Errorf("unknown conv layout %q (want one of %s)", c.ConvLayout, strings.Join(ConvLayouts, ", "))
	case c.ConvDtype != "bfloat16" && c.ConvDtype != "float32":
		return c, fmt.Errorf("conv dtype %q: want bfloat16 or float32", c.ConvDtype)
	case c.Role != "producer" && c.Role != "consumer":
		return c, fmt.Errorf("unknown role %q (want producer or consumer)", c.Role)
	case c.Layers < 1 || c.Layers > 1024:
		return c, fieldErrorf("Layers", c.Layers, "is not in 1..1024")
	case c.TP < 1 || c.TP > 64:
		return c, fieldErrorf("TP", c.TP, "is not in 1..64")
	case c.PP < 1 || c.PP > c.Layers:
		return c, fieldErrorf("PP", c.PP, "is not in 1..layers (%d)", c.Layers)
	case c.BlockSize < 1 || c.BlockSize > 4096:
		return c, fieldErrorf("BlockSize", c.BlockSize, "is not in 1..4096")
	case c.KernelBlockSize < 1 || c.BlockSize%c.KernelBlockSize != 0:
		return c, fieldErrorf("KernelBlockSize", c.KernelBlockSize, "does not divide the block size %d", c.BlockSize)
	case c.Requests < 1 || c.Requests > 4096:
		return c, fieldErrorf("Requests", c.Requests, "is not in 1..4096")
	case c.Tokens < 1 || c.Tokens > 1<<24:
		return c, fieldErrorf("Tokens", c.Tokens, "is not in 1..2^24")
	case c.PrefixTokens < 0 || c.PrefixTokens > c.Tokens:
		return c, fieldErrorf("PrefixTokens", c.PrefixTokens, "is not in 0..tokens (%d)", c.Tokens)
	case c.PrefixTokens > 0 && c.Role != "consumer":
		return c, fieldErrorf("PrefixTokens", c.PrefixTokens, "is a consumer's local prefix hit: the role must be consumer")
	case c.Planner != "" && c.Planner != nixl.PlannerVLLM && c.Planner != nixl.PlannerExact:
		return c, fmt.Errorf("unknown planner %q (want %s)", c.Planner, strings.Join(nixl.Planners, " or "))
	case c.Transfers && c.Role != "consumer":
		return c, errors.New("transfers are a consumer's pull from its producer: the role must be consumer")
	}
	switch c.Engine {
	case "", "vllm":
	case "sglang":
		if err := c.normalizeSGLang(); err != nil {
			return c, err
		}
	default:
		return c, fmt.Errorf("unknown engine %q (want one of %s)", c.Engine, strings.Join(Engines, ", "))
	}
	if c.Transfers {
		c.ZeroTails = true
	}
	m, err := BuildModel(c)
	if err != nil {
		return c, err
	}
	for _, g := range m.Groups {
		for _, ca := range g.Caches {
			for _, st := range ca.States {
				for _, seg := range st.Segments {
					if !seg.Replicated && seg.Global%c.TP != 0 {
						return c, fieldErrorf("TP", c.TP, "does not divide the %d rows of a %s segment of %q", seg.Global, st.Name, ca.Name)
					}
				}
			}
			if ca.States == nil && !ca.Latent && ca.Heads%c.TP != 0 && c.TP%ca.Heads != 0 {
				return c, fieldErrorf("TP", c.TP, "neither divides nor is a multiple of the %d KV heads of %q", ca.Heads, ca.Name)
			}
		}
	}
	need := c.Requests * ceilDiv(c.Tokens, c.BlockSize)
	given := c.NumBlocks != 0
	if !given {
		c.NumBlocks = 2*need + 3
	}
	if c.NumBlocks < need {
		return c, fieldErrorf("NumBlocks", c.NumBlocks, "cannot hold %d requests of %d tokens (%d blocks)", c.Requests, c.Tokens, need)
	}
	if c.NumBlocks > 1<<40 {
		return c, fieldErrorf("NumBlocks", c.NumBlocks, "is not in 1..2^40")
	}
	if err := c.checkMemory(m, given); err != nil {
		return c, err
	}
	return c, nil
}

// checkMemory refuses a configuration whose largest rank would not fit in
// c.MaxBytes (or memlimit.Bytes()): Write builds a rank in memory (twice
// over for the raw format) beside its block tables, and a Go runtime
// out-of-memory crash cannot be caught. The error blames NumBlocks when it
// was given (given), else Requests, and says what the rank would take.
func (c *Config) checkMemory(m *Model, given bool) error {
	limit := c.MaxBytes
	if limit <= 0 {
		limit = memlimit.Bytes()
	}
	if limit <= 0 {
		return nil
	}
	// One block's bytes on the largest rank, from a placement of one
	// block (so nothing overflows), in float64.
	one := *c
	one.NumBlocks = 1
	var perBlock float64
	for pp := range c.PP {
		lo, hi := stageLayers(c.Layers, pp, c.PP)
		var stage float64
		for _, g := range m.Groups {
			for _, ca := range g.Caches {
				if ca.Layer < lo || ca.Layer >= hi {
					continue
				}
				if ca.States != nil {
					stage += float64(one.placeState(ca).total)
				} else {
					stage += float64(one.place(ca, 0).total)
				}
			}
		}
		perBlock = max(perBlock, stage)
	}
	rank := perBlock * float64(c.NumBlocks)
	total := rank
	if c.Format == "raw" {
		total *= 2 // the data file is assembled from the tensors
	}
	// The block tables: a permutation of the blocks per group, and the
	// requests' tables.
	total += 8 * float64(len(m.Groups)) * (float64(c.NumBlocks) + float64(c.Requests*ceilDiv(c.Tokens, c.BlockSize)))
	if total <= float64(limit) {
		return nil
	}
	size := fmt.Sprintf("a rank of %s (%s a block)", memlimit.Format(rank), memlimit.Format(perBlock))
	where := fmt.Sprintf("more than the %s of memory this process may use: synth builds each rank in memory before writing it", memlimit.Format(float64(limit)))
	if given {
		return fieldErrorf("NumBlocks", c.NumBlocks, "makes %s, %s", size, where)
	}
	return fieldErrorf("Requests", c.Requests, "of %d tokens need %d blocks, %s, %s", c.Tokens, c.NumBlocks, size, where)
}

// fieldErrorf is a Config field out of range: a *parse.Error of
// parse.SynthConfig whose Field is the field's Go name ("TP",
// "BlockSize", ...) and whose Msg starts with its value ("0 is not in
// 1..64").
func fieldErrorf(field string, value int, format string, args ...any) error {
	return &parse.Error{Format: parse.SynthConfig, Field: field, Msg: strconv.Itoa(value) + " " + fmt.Sprintf(format, args...)}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

package bench

import (
	"fmt"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// InputLayers is the number of layers of the bench's synthesized input
// (the llama preset with 32 layers is Llama-3-8B's KV cache: 8 KV heads of
// 128 bfloat16 per layer).
const InputLayers = 32

// InputConfig returns the synth configuration of the bench's input: a
// producer's dumps holding about size bytes of checksummed KV, InputLayers
// layers of preset in layout lay, split over pp pipeline stages, requests
// of up to 2048 tokens and no unused blocks (so the dumps are about size
// bytes too).
func InputConfig(size int64, preset, lay string, pp int) (synth.Config, error) {
	if preset == "" {
		preset = "llama"
	}
	base, err := synth.Config{Preset: preset, Layers: InputLayers, Layout: lay}.Normalize()
	if err != nil {
		return synth.Config{}, err
	}
	m, err := synth.BuildModel(base)
	if err != nil {
		return synth.Config{}, err
	}
	// perToken is the bytes a token adds to the side: an attention
	// cache's cells, a state cache's page (its states, its extra bytes,
	// padded to 64 as synth lays it out) spread over its block's tokens.
	var perToken, perBlock int64
	for _, g := range m.Groups {
		for _, c := range g.Caches {
			if len(c.States) > 0 {
				page, err := statePage(c)
				if err != nil {
					return synth.Config{}, err
				}
				perBlock += page
				continue
			}
			dt, err := layout.TorchDtype(c.Dtype)
			if err != nil {
				return synth.Config{}, err
			}
			cell := int64(c.HeadSize * dt.Size())
			if !c.Latent {
				cell *= 2 * int64(c.Heads)
			}
			perToken += cell
		}
	}
	perToken += (perBlock + int64(base.BlockSize) - 1) / int64(base.BlockSize)
	if size < perToken {
		return synth.Config{}, fmt.Errorf("size %d bytes is less than one token of %s (%d bytes)", size, preset, perToken)
	}
	tokens := size / perToken
	requests := min((tokens+2047)/2048, 4096)
	perRequest := tokens / requests
	if perRequest > 1<<24 {
		return synth.Config{}, fmt.Errorf("size %d bytes is too large to synthesize", size)
	}
	cfg := synth.Config{
		Preset: preset, Layers: InputLayers, Layout: lay, PP: max(pp, 1),
		Requests: int(requests), Tokens: int(perRequest), Seed: 1,
	}
	n, err := cfg.Normalize()
	if err != nil {
		return synth.Config{}, err
	}
	cfg.NumBlocks = n.Requests * ((n.Tokens + n.BlockSize - 1) / n.BlockSize)
	return cfg, nil
}

// WriteInput writes the dumps of InputConfig under dir and returns their
// paths.
func WriteInput(dir string, size int64, preset, lay string, pp int) ([]string, error) {
	cfg, err := InputConfig(size, preset, lay, pp)
	if err != nil {
		return nil, err
	}
	return synth.Write(dir, cfg)
}

// statePage is the bytes of one block of a state cache at TP 1: its
// covered states, then its extra bytes, padded to a multiple of 64.
func statePage(c synth.Cache) (int64, error) {
	covered := int64(c.Extra)
	for _, st := range c.States {
		dt, err := layout.TorchDtype(st.Dtype)
		if err != nil {
			return 0, fmt.Errorf("state %s of %s: %w", st.Name, c.Name, err)
		}
		n := int64(dt.Size())
		for _, d := range st.Other {
			n *= d
		}
		var rows int64
		for _, seg := range st.Segments {
			rows += int64(seg.Global)
		}
		covered += n * rows
	}
	return (covered + 63) / 64 * 64, nil
}

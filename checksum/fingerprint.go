package checksum

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
)

// layerTuple returns the Python repr of the tuple a layer's fingerprint
// hashes (docs/spec.md §7): (name, spec type, block size, 'torch.<dtype>')
// in the flat form, without the block size in the nested form. A state
// layer has, in place of the dtype, the tuple of its covered states, each
// ('torch.<dtype>', (shape)).
func layerTuple(g *layout.Group, l layout.LayerInfo, flat bool) string {
	items := []string{pyStr(l.Name), pyStr(l.Spec)}
	if flat {
		items = append(items, strconv.Itoa(g.BlockSize))
	}
	items = append(items, dtypeItem(l))
	return pyTuple(items...)
}

// dtypeItem is the last item of a layer's tuple: 'torch.<dtype>', or a
// state layer's states.
func dtypeItem(l layout.LayerInfo) string {
	if l.States == nil {
		return pyStr("torch." + l.Dtype)
	}
	var states []string
	for _, s := range l.States {
		dims := make([]string, len(s.Shape))
		for i, d := range s.Shape {
			dims[i] = strconv.FormatInt(d, 10)
		}
		states = append(states, pyTuple(pyStr("torch."+s.Dtype), pyTuple(dims...)))
	}
	return pyTuple(states...)
}

// layerHash is the first 8 bytes, little-endian, of SHA-256 of a tuple's
// repr.
func layerHash(tuple string) uint64 {
	sum := sha256.Sum256([]byte(tuple))
	return binary.LittleEndian.Uint64(sum[:8])
}

// Fingerprints returns a group's fingerprint on one rank in the nested
// form (no block size) and the flat form: the sum mod 2^64 of layerHash
// over every layer of the group on the rank, aliases included.
func Fingerprints(g *layout.GroupView) (nested, flat uint64) {
	for _, l := range g.Layers {
		nested += layerHash(layerTuple(g.Group, l, false))
		flat += layerHash(layerTuple(g.Group, l, true))
	}
	return nested, flat
}

// FlatFingerprintAt is a group's flat fingerprint on one rank as it would
// be with block size bs (a flat payload's fingerprint holds the block
// size: this tells a block size apart from other layers).
func FlatFingerprintAt(g *layout.GroupView, bs int) uint64 {
	gg := *g.Group
	gg.BlockSize = bs
	var flat uint64
	for _, l := range g.Layers {
		flat += layerHash(layerTuple(&gg, l, true))
	}
	return flat
}

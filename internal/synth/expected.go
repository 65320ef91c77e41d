package synth

import (
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// ExpectedGroup is a request's expected checks of one group: Values[i] at
// block position Start+i.
type ExpectedGroup struct {
	Start  int
	Values []uint64
}

// Expected computes the checks of a configuration straight from the
// definition of docs/spec.md §1 to §5 over the logical KV, without writing
// or reading a dump: request id -> group id -> values. Every check of every
// replica must equal these.
func Expected(cfg Config) (map[string]map[int]ExpectedGroup, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	m, err := BuildModel(c)
	if err != nil {
		return nil, err
	}
	tables := c.BlockTables(m)
	S := c.BlockSize
	out := map[string]map[int]ExpectedGroup{}
	for r := range c.Requests {
		req := RequestID(r)
		out[req] = map[int]ExpectedGroup{}
		for _, g := range m.Groups {
			if g.Kind == layout.KindMamba {
				var sum uint64
				for _, ca := range g.Caches {
					sum += c.expectedState(ca, req)
				}
				out[req][g.ID] = ExpectedGroup{Start: 0, Values: []uint64{sum}}
				continue
			}
			table := tables[g.ID][r]
			first := c.PrefixTokens / S
			end := ceilDiv(c.Tokens, S)
			for first < end && table[first] == layout.NoBlock {
				first++
			}
			if g.Window > 0 {
				first = max(first, end-(ceilDiv(g.Window, S)+1))
			}
			// Global head bases: caches of one layer number in name order.
			caches := slices.Clone(g.Caches)
			slices.SortFunc(caches, func(a, b Cache) int {
				if a.Layer != b.Layer {
					return a.Layer - b.Layer
				}
				return strings.Compare(a.Name, b.Name)
			})
			eg := ExpectedGroup{Start: first}
			for pos := first; pos < end; pos++ {
				var sum uint64
				base, prevLayer := 0, -1
				for _, ca := range caches {
					if ca.Layer != prevLayer {
						base, prevLayer = 0, ca.Layer
					}
					cellBytes := 2 * ca.HeadSize * dtypeBytes(ca.Dtype)
					if ca.Latent {
						cellBytes /= 2
					}
					P := cellBytes / 8
					for h := range ca.Heads {
						var s uint64
						for t := pos * S; t < min((pos+1)*S, c.Tokens); t++ {
							for p := range P {
								x := c.Piece(req, ca.Name, ca.Layer, h, t, p)
								s += x * uint64(2*(t*P+p)+1)
							}
						}
						m := uint64(2*(ca.Layer*65536+base+h) + 1)
						sum += m * s
					}
					base += ca.Heads
				}
				eg.Values = append(eg.Values, sum)
			}
			out[req][g.ID] = eg
		}
	}
	return out, nil
}

func dtypeBytes(torch string) int {
	switch torch {
	case "float32":
		return 4
	case "bfloat16", "float16":
		return 2
	}
	return 1
}

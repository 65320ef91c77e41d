package checksum_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// goldenVector is testdata/golden/spec1.txt: the worked example of docs/spec.md
// §1 (and its mix check, §14), as key: value lines.
type goldenVector struct {
	layers    []string
	heads     int
	blockSize int
	cellBytes int
	numTokens int
	// slices: position, layer, head, factor, slice sum
	slices    [][5]uint64
	checksums []uint64
	// mix is kvaudit's mix check by position.
	mix []uint64
}

func readGolden(t *testing.T) goldenVector {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", "spec1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v goldenVector
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok || seen[key] {
			t.Fatalf("bad or repeated line %q", line)
		}
		seen[key] = true
		fields := strings.Fields(val)
		atoi := func(s string) int {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return n
		}
		switch key {
		case "layers":
			v.layers = fields
		case "heads":
			v.heads = atoi(val)
		case "block_size":
			v.blockSize = atoi(val)
		case "cell_bytes":
			v.cellBytes = atoi(val)
		case "num_tokens":
			v.numTokens = atoi(val)
		case "slices":
			for _, f := range fields {
				var s [5]uint64
				for i, p := range strings.Split(f, ":") {
					s[i] = uint64(atoi(p))
				}
				v.slices = append(v.slices, s)
			}
		case "checksums", "mix":
			for _, f := range fields {
				x, err := layout.ParseHex64(f)
				if err != nil {
					t.Fatal(err)
				}
				if key == "mix" {
					v.mix = append(v.mix, x)
				} else {
					v.checksums = append(v.checksums, x)
				}
			}
		default:
			t.Fatalf("unknown key %q", key)
		}
	}
	if len(seen) != 8 {
		t.Fatalf("golden vector has %d keys, want 8", len(seen))
	}
	return v
}

// goldenPiece is the worked example's KV.
func goldenPiece(L, h, t, p int) uint64 {
	return uint64((L+1)*1000 + (h+1)*100 + t*10 + p)
}

// TestGoldenArithmetic checks the vector against itself: the slice sums
// from the definition, and the checksums from the slices.
func TestGoldenArithmetic(t *testing.T) {
	v := readGolden(t)
	P := v.cellBytes / 8
	sums := make([]uint64, len(v.checksums))
	for _, s := range v.slices {
		pos, L, h, m, want := int(s[0]), int(s[1]), int(s[2]), s[3], s[4]
		if got := uint64(2*(L*65536+h) + 1); got != m {
			t.Errorf("factor of (%d,%d) = %d, vector says %d", L, h, got, m)
		}
		var sum uint64
		for tok := pos * v.blockSize; tok < min((pos+1)*v.blockSize, v.numTokens); tok++ {
			for p := range P {
				sum += goldenPiece(L, h, tok, p) * uint64(2*(tok*P+p)+1)
			}
		}
		if sum != want {
			t.Errorf("slice (pos %d, L %d, h %d) = %d, vector says %d", pos, L, h, sum, want)
		}
		sums[pos] += m * sum
	}
	if !slices.Equal(sums, v.checksums) {
		t.Errorf("checksums %x, vector says %x", sums, v.checksums)
	}
}

// writeGoldenDump writes the worked example as a one-file dump by hand (not
// through synth): FlashAttention layout [kv, block, token, head, dim] of
// float32, head size 2 (a 16-byte cell), blocks 2 and 0 holding positions 0
// and 1, block 1 and the slot of token 3 filled with junk.
func writeGoldenDump(t *testing.T, v goldenVector) string {
	t.Helper()
	const numBlocks = 3
	table := []int{2, 0}
	m := &layout.Manifest{
		Format:    layout.ManifestFormat,
		Model:     layout.Model{Name: "golden", NumKVHeads: v.heads},
		Parallel:  layout.Parallel{TPSize: 1, PPSize: 1},
		NumBlocks: numBlocks,
		Groups:    []layout.Group{{ID: 0, Kind: layout.KindFullAttention, BlockSize: v.blockSize}},
		Requests: []layout.Request{{ID: "req", NumTokens: v.numTokens, BlockTable: map[string]layout.BlockIDs{
			"0": {table[0], table[1]},
		}}},
	}
	var tensors []safetensors.TensorData
	dt, _ := layout.ParseDtype("F32")
	for L, name := range v.layers {
		// shape [kv=2, block=3, token=2, head=2, dim=2] of 4-byte elements
		shape := []int64{2, numBlocks, int64(v.blockSize), int64(v.heads), 2}
		data := make([]byte, 2*numBlocks*v.blockSize*v.heads*2*4)
		for i := range data {
			data[i] = byte(0xa5 ^ i) // junk everywhere first
		}
		at := func(kv, b, tok, h, d int) int {
			return ((((kv*numBlocks+b)*v.blockSize+tok)*v.heads+h)*2 + d) * 4
		}
		for pos, b := range table {
			for tok := range v.blockSize {
				reqTok := pos*v.blockSize + tok
				if reqTok >= v.numTokens {
					continue // the slot past num_tokens keeps its junk
				}
				for h := range v.heads {
					// piece 0 is K (two float32), piece 1 is V
					for p := range 2 {
						var piece [8]byte
						binary.LittleEndian.PutUint64(piece[:], goldenPiece(L, h, reqTok, p))
						copy(data[at(p, b, tok, h, 0):], piece[0:4])
						copy(data[at(p, b, tok, h, 1):], piece[4:8])
					}
				}
			}
		}
		m.Groups[0].Layers = append(m.Groups[0].Layers, layout.Layer{
			Name: name, Dtype: "float32", NumKVHeads: v.heads, HeadSize: 2, Tensor: name,
			Layout: []string{"kv", "block", "token", "head", "dim"},
		})
		tensors = append(tensors, safetensors.TensorData{Name: name, Dtype: dt, Shape: shape, Data: data})
	}
	path := filepath.Join(t.TempDir(), "golden.safetensors")
	if err := dumpwrite.File(path, m, tensors); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGoldenDump runs the worked example through a real safetensors dump
// and every engine.
func TestGoldenDump(t *testing.T) {
	v := readGolden(t)
	path := writeGoldenDump(t, v)
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}, checksum.Fast{Threads: 1, ChunkBytes: 1}} {
		d, err := layout.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := side.Compute(context.Background(), []*layout.Dump{d}, checksum.Options{Engine: e})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		g := c.Requests[0].Groups[0]
		if g.Start != 0 || len(g.Checks) != 1 || !slices.Equal(g.Checks[0], v.checksums) {
			t.Errorf("%s engine: start %d, checks %x, want %x", e.Name(), g.Start, g.Checks, v.checksums)
		}
		if len(g.ChecksMix) != 1 || !slices.Equal(g.ChecksMix[0], v.mix) {
			t.Errorf("%s engine: mix check %x, want %x", e.Name(), g.ChecksMix, v.mix)
		}
	}
}

// TestGoldenSynth runs the worked example through synth in every layout,
// TP 1 and 2 (one head per rank), PP 2 and kernel blocks of one token.
func TestGoldenSynth(t *testing.T) {
	v := readGolden(t)
	for _, lay := range synth.Layouts {
		for _, tp := range []int{1, 2} {
			for _, format := range synth.Formats {
				cfg := synth.Config{Preset: "tiny", Layout: lay, TP: tp, PP: 2, KernelBlockSize: 1, Format: format, Values: goldenPiece}
				t.Run(fmt.Sprintf("%s/tp%d/%s", lay, tp, format), func(t *testing.T) {
					for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}} {
						c := computeSide(t, cfg, e)
						g := c.Requests[0].Groups[0]
						if !slices.Equal(g.Checks[0], v.checksums) {
							t.Errorf("%s engine: %x, want %x", e.Name(), g.Checks[0], v.checksums)
						}
						if !slices.Equal(g.ChecksMix[0], v.mix) {
							t.Errorf("%s engine: mix check %x, want %x", e.Name(), g.ChecksMix[0], v.mix)
						}
					}
				})
			}
		}
	}
}

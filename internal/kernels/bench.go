package kernels

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// BenchRequest asks the runner to time the kernel on a cache of Bytes
// bytes it allocates and fills on the device.
type BenchRequest struct {
	Bytes int64 `json:"bytes"`
	Reps  int   `json:"reps"`
}

// DefaultBenchBytes is the benchmark's cache: 4 GiB, several times any
// GPU's L2 cache, and about the KV of a 32k-token prompt of an 8B model.
const DefaultBenchBytes = 4 << 30

// BenchResult is what the benchmark measured: the median over Reps of the
// checksum kernel over the whole cache, of a plain read of the same bytes
// (a kernel summing every 8-byte word with 16-byte loads) and of a
// device-to-device copy of them, all in one run on one device.
type BenchResult struct {
	Device string `json:"device"`
	Cache  string `json:"cache"`
	Bytes  int64  `json:"bytes"`
	Reps   int    `json:"reps"`
	// Seconds of one pass, medians.
	ChecksumSeconds float64 `json:"checksum_seconds"`
	ReadSeconds     float64 `json:"read_seconds"`
	CopySeconds     float64 `json:"copy_seconds"`
	// VerifiedRows is how many rows of the cache were copied back and
	// checksummed by checksum.ReferenceBlock on the host, equal to the
	// kernel's output (a mismatch fails the benchmark instead).
	VerifiedRows int `json:"verified_rows"`
}

// gbps returns bytes per second in GB/s (10^9).
func gbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) / seconds / 1e9
}

// WriteText prints the result as a small table: each pass's time, the
// bytes it read per second, and that read bandwidth as a ratio to the
// copy's (which also writes as many bytes as it reads).
func (r *BenchResult) WriteText(w io.Writer) error {
	copyRead := gbps(r.Bytes, r.CopySeconds)
	ratio := func(s float64) string {
		if copyRead == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", gbps(r.Bytes, s)/copyRead)
	}
	_, err := fmt.Fprintf(w, `device: %s
cache:  %s, %.2f GB (median of %d passes each)

pass                      ms      GB/s read   vs copy's read
checksum kernel      %9.3f   %10.0f   %s
plain read kernel    %9.3f   %10.0f   %s
device-to-device copy %8.3f   %10.0f   1.00x  (%.0f GB/s read+write)

verified: %d rows equal checksum.ReferenceBlock on the host
`, r.Device, r.Cache, float64(r.Bytes)/1e9, r.Reps,
		r.ChecksumSeconds*1e3, gbps(r.Bytes, r.ChecksumSeconds), ratio(r.ChecksumSeconds),
		r.ReadSeconds*1e3, gbps(r.Bytes, r.ReadSeconds), ratio(r.ReadSeconds),
		r.CopySeconds*1e3, copyRead, 2*copyRead,
		r.VerifiedRows)
	return err
}

// Median returns the median of xs (the lower middle of an even count).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// The benchmark cache: one FlashAttention-layout layer, [kv, block, token,
// head, dim] of bfloat16, blocks of 16 tokens, 8 KV heads of 128 (a layer
// of an 8B model at TP 1): 64 KiB per block.
const (
	benchTokens   = 16
	benchHeads    = 8
	benchHeadSize = 128
	benchHalf     = benchTokens * benchHeads * benchHeadSize * 2 // bytes of K (or V) of a block
)

// BenchCache returns the benchmark's cache of about bytes (at least one
// block) in device memory, and one row per block: a request whose block
// position b is block id b, all 16 tokens valid, output slot b.
func BenchCache(bytes int64) (*layout.LayerView, []ckplan.Row) {
	blocks := max(1, bytes/(2*benchHalf))
	c := benchView(blocks)
	c.Cells.Device = &layout.DeviceTensor{
		Dtype: layout.Dtype{Name: "BF16", Bits: 16},
		Shape: []int64{2, blocks, benchTokens, benchHeads, benchHeadSize},
	}
	rows := make([]ckplan.Row, blocks)
	for b := range rows {
		rows[b] = ckplan.Row{Block: b, FirstToken: int64(b) * benchTokens, Valid: benchTokens, Out: b}
	}
	return c, rows
}

func benchView(blocks int64) *layout.LayerView {
	cell := benchHeadSize * 2
	return &layout.LayerView{
		Layer:  &layout.Layer{Name: "model.layers.0.self_attn.attn", Dtype: "bfloat16", NumKVHeads: benchHeads, HeadSize: benchHeadSize},
		Number: 0, Heads: benchHeads, HeadBase: 0, GlobalHeads: benchHeads, Replicas: 1,
		Pieces: 2 * cell / 8,
		Cells: layout.CellView{
			File: "bench", KernelBlocks: 1, KernelTokens: benchTokens, Heads: benchHeads,
			CellBytes:   2 * cell,
			RowStride:   benchHalf,
			TokenStride: int64(benchHeads * cell),
			HeadStride:  int64(cell),
			Runs:        []layout.CellRun{{Offset: 0, Len: cell}, {Offset: blocks * benchHalf, Len: cell}},
		},
	}
}

// BenchDescription describes the benchmark cache of BenchCache.
func BenchDescription(c *layout.LayerView) string {
	return fmt.Sprintf("flash layout [kv, block, token, head, dim] bfloat16, %d blocks of %d tokens x %d heads x %d",
		c.Cells.Device.Shape[1], benchTokens, benchHeads, benchHeadSize)
}

// BenchSampleRanges returns the byte ranges [offset, offset+benchHalf) of
// the cache's tensor that hold block b (its K, then its V).
func BenchSampleRanges(c *layout.LayerView, b int) [2]int64 {
	return [2]int64{int64(b) * benchHalf, c.Cells.Runs[1].Offset + int64(b)*benchHalf}
}

// BenchSampleBytes is the size of a block's sample: its K and V.
const BenchSampleBytes = 2 * benchHalf

// BenchSampleBlocks returns the blocks the benchmark checks on the host.
func BenchSampleBlocks(blocks int) []int {
	bs := []int{0, blocks / 3, blocks / 2, blocks - 1}
	slices.Sort(bs)
	return slices.Compact(bs)
}

// BenchCheck checksums block b of the benchmark cache on the host from its
// sample (its K then its V, as copied from BenchSampleRanges) and returns
// the value the kernel's output slot b must hold.
func BenchCheck(sample []byte, b int) uint64 {
	c := benchView(1)
	c.Cells.Data = sample
	return checksum.ReferenceBlock(c, ckplan.Row{Block: 0, FirstToken: int64(b) * benchTokens, Valid: benchTokens, Out: b})
}

// FillWord is word i of the pattern kvaudit_fill writes with seed seed:
// splitmix64(seed + i).
func FillWord(seed, i uint64) uint64 {
	x := seed + i + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// since returns the seconds elapsed since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }

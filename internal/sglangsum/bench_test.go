package sglangsum_test

import (
	"fmt"
	"hash/adler32"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/kvaudit/kvaudit/internal/bench"
	"github.com/kvaudit/kvaudit/internal/sglangsum"
)

// sglangBenchPool is an SGLang MHA pool of a Llama-8B-like rank (8 KV
// heads of 128 bf16 elements: 2 KiB a slot) over 8 layers: 16 K and V
// buffers of 512 pages of 16 slots, and a 2048-token request on 128 pages
// in scattered order. 64 MiB are read.
func sglangBenchPool() []sglangsum.Segment {
	const slot, pageSize, pages, nbuf, reqPages = 2048, 16, 512, 16, 128
	r := rand.New(rand.NewPCG(9, 10))
	var bufs []sglangsum.Buffer
	for range nbuf {
		d := make([]byte, slot*pageSize*pages)
		for i := 0; i < len(d); i += 8 {
			v := r.Uint64()
			for k := range 8 {
				d[i+k] = byte(v >> (8 * k))
			}
		}
		bufs = append(bufs, sglangsum.Buffer{Data: d, ItemLen: slot * pageSize})
	}
	var idx []int64
	for _, p := range r.Perm(pages)[:reqPages] {
		idx = append(idx, int64(p))
	}
	return []sglangsum.Segment{{Buffers: bufs, Indices: idx}}
}

// BenchmarkSGLangAdler32 measures sglang-adler32 over one request's
// stream against the plain read of the same bytes (internal/bench's
// vectorised sum, the practical limit), on 1 and 2 threads, and Go's
// hash/adler32 serially: the ratio of MB/s is the efficiency quoted in
// docs/sglang.md.
func BenchmarkSGLangAdler32(b *testing.B) {
	segs := sglangBenchPool()
	items, err := sglangsum.Items(segs)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, it := range items {
		total += int64(len(it.Data))
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("read/threads=%d", threads), func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				readItems(items, threads)
			}
		})
		b.Run(fmt.Sprintf("sglang-adler32/threads=%d", threads), func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				if _, err := sglangsum.Adler32(segs, threads); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("hash-adler32/threads=1", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			h := adler32.New()
			for _, it := range items {
				h.Write(it.Data)
			}
			_ = h.Sum32()
		}
	})
}

// readItems is the plain read of the items on threads workers, each
// taking every threads-th item.
func readItems(items []sglangsum.Item, threads int) uint64 {
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(items); i += threads {
				sums[w] += bench.ReadSumVec(items[i].Data)
			}
		}()
	}
	wg.Wait()
	var s uint64
	for _, v := range sums {
		s += v
	}
	return s
}

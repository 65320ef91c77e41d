package safetensors

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bigHeaderFile returns a safetensors file whose header is about size
// bytes: many one-byte tensors with long names, as a dump of every layer
// of a large model split per head might have.
func bigHeaderFile(tb testing.TB, size int) []byte {
	u8, _ := ParseDtype("U8")
	pad := strings.Repeat("x", 80)
	var tensors []TensorData
	n := size / 150
	for i := range n {
		tensors = append(tensors, TensorData{Name: fmt.Sprintf("model.layers.%d.%s.%d", i/64, pad, i%64), Dtype: u8, Shape: []int64{1}, Data: []byte{byte(i)}})
	}
	var buf bytes.Buffer
	if err := Write(&buf, map[string]string{"kvaudit.manifest": "{}"}, tensors); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// heapDuring runs fn once and returns the peak of live heap above what
// was live before (sampled every millisecond, and at the end) and what is
// still live after a collection (what fn's result keeps), in bytes.
func heapDuring(fn func()) (peak, kept uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var top atomic.Uint64
	top.Store(base)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > top.Load() {
				top.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > top.Load() {
		top.Store(ms.HeapAlloc)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return top.Load() - base, ms.HeapAlloc - min(base, ms.HeapAlloc)
}

// BenchmarkSafetensorsBigHeader parses a file with a 62 MB header (the
// issue's case: many tensors) and reports, beside B/op and allocs/op, the
// peak of live heap during one parse (peak-MB) and what the parsed result
// keeps (kept-MB), beyond the file itself (header-MB, mapped in real use).
func BenchmarkSafetensorsBigHeader(b *testing.B) {
	file := bigHeaderFile(b, 62<<20)
	var s *File
	parse := func() {
		var err error
		if s, err = Parse("big.safetensors", file); err != nil {
			b.Fatal(err)
		}
	}
	peak, kept := heapDuring(parse)
	runtime.KeepAlive(s)
	s = nil
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		parse()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
	b.ReportMetric(float64(kept)/(1<<20), "kept-MB")
	b.ReportMetric(float64(len(file))/(1<<20), "header-MB")
	b.ReportMetric(float64(len(s.Tensors)), "tensors")
}

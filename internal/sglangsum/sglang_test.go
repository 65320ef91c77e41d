package sglangsum

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// withAdler runs f with the Adler-32 kernel on (when the build has it)
// and with hash/adler32 alone.
func withAdler(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := adlerSIMD
	defer func() { adlerSIMD = saved }()
	for _, on := range []bool{false, true} {
		if on && !kernelAvailable {
			continue
		}
		adlerSIMD = on
		t.Run(fmt.Sprintf("simd=%v", on), f)
	}
}

// TestAdler32Textbook: Adler-32("123456789") = 0x091E01DE, of nothing 1
// (../docs/sglang.md, the textbook value).
func TestAdler32Textbook(t *testing.T) {
	withAdler(t, func(t *testing.T) {
		if got := adler32Sum([]byte("123456789")); got != 0x091E01DE {
			t.Errorf("Adler32(123456789) = %#08x, want 0x091e01de", got)
		}
		if got := adler32Sum(nil); got != 1 {
			t.Errorf("Adler32(nil) = %#x, want 1", got)
		}
		// 100 KiB of 0xFF: B wraps the modulus many times.
		ff := bytes.Repeat([]byte{0xff}, 100<<10)
		if got, want := adler32Sum(ff), adler32.Checksum(ff); got != want {
			t.Errorf("Adler32(100 KiB of 0xff) = %#08x, hash/adler32 %#08x", got, want)
		}
	})
}

// TestAdler32Kernel compares the vectorised kernel with hash/adler32 over
// every length to 300 bytes, at every alignment to 32, and over random
// lengths to 200 KiB (past one kernel call's 32 KiB) of random and
// all-0xFF bytes.
func TestAdler32Kernel(t *testing.T) {
	if !kernelAvailable {
		t.Skip("no Adler-32 kernel in this build")
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 200<<10+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	ff := bytes.Repeat([]byte{0xff}, len(buf))
	for _, data := range [][]byte{buf, ff} {
		for off := range 32 {
			for n := 0; n <= 300; n++ {
				p := data[off : off+n]
				if got, want := adler32Sum(p), adler32.Checksum(p); got != want {
					t.Fatalf("offset %d length %d: kernel %#08x, hash/adler32 %#08x", off, n, got, want)
				}
			}
		}
		for range 200 {
			off, n := r.IntN(64), r.IntN(200<<10)
			p := data[off : off+n]
			if got, want := adler32Sum(p), adler32.Checksum(p); got != want {
				t.Fatalf("offset %d length %d: kernel %#08x, hash/adler32 %#08x", off, n, got, want)
			}
		}
	}
}

// TestAdler32Combine: combining the values of A and B equals hash/adler32
// of A||B, for random splits of random and all-0xFF data, empty parts and
// parts longer than the modulus included.
func TestAdler32Combine(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 300000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	ff := bytes.Repeat([]byte{0xff}, len(data))
	for _, d := range [][]byte{data, ff} {
		cuts := []int{0, 1, 65520, 65521, 65522, 131042, len(d)}
		for range 50 {
			cuts = append(cuts, r.IntN(len(d)+1))
		}
		for _, c := range cuts {
			a, b := d[:c], d[c:]
			got := adler32Combine(adler32.Checksum(a), adler32.Checksum(b), int64(len(b)))
			if want := adler32.Checksum(d); got != want {
				t.Fatalf("split at %d: combine %#08x, hash/adler32 of the whole %#08x", c, got, want)
			}
		}
	}
	if got := adler32Combine(0x12345678, 1, 0); got != 0x12345678 {
		t.Errorf("combine with the empty stream = %#08x, want the first value", got)
	}
}

// workedPool builds docs/spec.md §1's worked example as an SGLang MHA
// pool: int64 elements, 2 layers, 2 heads, head_dim 1, page_size 2, K =
// piece 0 and V = piece 1 of each cell, buffers K0, K1, V0, V1
// (kv_data_ptrs order), with the request's tokens 0..2 on pages
// pages[0], pages[1] and the unused tail slot (token 3) filled with tail.
// Each buffer holds 8 pages of 2 slots.
func workedPool(pages [2]int64, tail byte) []Buffer {
	const pageSize, heads, slots = 2, 2, 16
	var bufs []Buffer
	for kv := range 2 {
		for layer := range 2 {
			data := make([]byte, slots*heads*8)
			for pos, page := range pages {
				for s := range pageSize {
					tok := pos*pageSize + s
					for h := range heads {
						at := ((int(page)*pageSize+s)*heads + h) * 8
						if tok >= 3 {
							for i := range 8 {
								data[at+i] = tail
							}
							continue
						}
						v := uint64((layer+1)*1000 + (h+1)*100 + tok*10 + kv)
						binary.LittleEndian.PutUint64(data[at:], v)
					}
				}
			}
			bufs = append(bufs, Buffer{Data: data, ItemLen: heads * 8 * pageSize})
		}
	}
	return bufs
}

// TestSGLangWorkedExample: the worked example of docs/sglang.md (computed
// there with zlib): 0xAFDA0C3D with a zero tail slot, 0xB7404BFD with
// 0xFF, the same on pages [5, 2]; the suffix-only form from
// start_send_idx 2 (page 1 alone) 0x4C4F0465 / 0x5F014425. Swapping K and
// V or flipping any one byte of the stream changes the value.
func TestSGLangWorkedExample(t *testing.T) {
	withAdler(t, func(t *testing.T) {
		for _, c := range []struct {
			tail         byte
			full, suffix uint32
		}{{0x00, 0xAFDA0C3D, 0x4C4F0465}, {0xff, 0xB7404BFD, 0x5F014425}} {
			for _, pages := range [][2]int64{{0, 1}, {5, 2}} {
				bufs := workedPool(pages, c.tail)
				row := []int64{pages[0] * 2, pages[0]*2 + 1, pages[1] * 2}
				all, err := sglangPages(row, 2, 0, 3)
				if err != nil {
					t.Fatal(err)
				}
				for _, threads := range []int{1, 2, 4} {
					got, err := Adler32([]Segment{{Buffers: bufs, Indices: all}}, threads)
					if err != nil {
						t.Fatal(err)
					}
					if got != c.full {
						t.Errorf("tail %#x pages %v threads %d: %#08x, want %#08x", c.tail, pages, threads, got, c.full)
					}
				}
				suffix, err := sglangPages(row, 2, 2, 3)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := Adler32([]Segment{{Buffers: bufs, Indices: suffix}}, 1)
				if got != c.suffix {
					t.Errorf("suffix, tail %#x pages %v: %#08x, want %#08x", c.tail, pages, got, c.suffix)
				}
				swapped := []Buffer{bufs[2], bufs[3], bufs[0], bufs[1]}
				if v, _ := Adler32([]Segment{{Buffers: swapped, Indices: all}}, 1); v == c.full {
					t.Errorf("K and V swapped: value unchanged %#08x", v)
				}
				items, _ := Items([]Segment{{Buffers: bufs, Indices: all}})
				for _, it := range items {
					for i := range it.Data {
						it.Data[i] ^= 1
						if v, _ := Adler32([]Segment{{Buffers: bufs, Indices: all}}, 1); v == c.full {
							t.Errorf("buffer %d page %d byte %d flipped: value unchanged", it.Buffer, it.Index, i)
						}
						it.Data[i] ^= 1
					}
				}
			}
		}
	})
}

// TestSGLangPages paraphrases the NPU test of sgl-project/sglang
// (test/manual/ascend/test_npu_kv_checksum.py @93f0ef62): with page size
// 4, a request whose six tokens sit in slots 20..23 and 8, 9 (one full
// page and one partial, not adjacent) has pages [5, 2]; a page size of 1
// takes every slot; a range past the row, a negative slot or a page size
// below 1 is an error.
func TestSGLangPages(t *testing.T) {
	row := []int64{20, 21, 22, 23, 8, 9}
	if got, err := sglangPages(row, 4, 0, 6); err != nil || fmt.Sprint(got) != "[5 2]" {
		t.Errorf("pages = %v, %v; want [5 2]", got, err)
	}
	if got, _ := sglangPages(row, 4, 4, 6); fmt.Sprint(got) != "[2]" {
		t.Errorf("suffix pages = %v, want [2]", got)
	}
	if got, _ := sglangPages(row, 1, 1, 5); fmt.Sprint(got) != "[21 22 23 8]" {
		t.Errorf("page size 1: %v", got)
	}
	for _, c := range []struct {
		row            []int64
		ps, start, end int
	}{{row, 4, 0, 7}, {row, 0, 0, 6}, {row, 4, 3, 2}, {[]int64{-1}, 1, 0, 1}} {
		if _, err := sglangPages(c.row, c.ps, c.start, c.end); err == nil {
			t.Errorf("SGLangPages(%v, %d, %d, %d): no error", c.row, c.ps, c.start, c.end)
		}
	}
	if sglangEnd(40, 37) != 37 || sglangEnd(32, 37) != 32 {
		t.Error("SGLangEnd is not min(extend end, input length)")
	}
}

// TestSGLangItemBounds: a page past a buffer's end is an error naming the
// buffer, not a panic.
func TestSGLangItemBounds(t *testing.T) {
	bufs := []Buffer{{Data: make([]byte, 64), ItemLen: 32}}
	for _, idx := range []int64{2, -1, 1 << 62} {
		if _, err := Adler32([]Segment{{Buffers: bufs, Indices: []int64{idx}}}, 1); err == nil || !strings.Contains(err.Error(), "buffer 0") {
			t.Errorf("page %d: err %v", idx, err)
		}
	}
}

// TestSGLangParallel: the parallel value (threads 2, 3, 7; a stream above
// the serial threshold) equals hash/adler32 of the concatenated stream,
// with KV and state segments and a page repeated.
func TestSGLangParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	mk := func(n, item int) Buffer {
		d := make([]byte, n*item)
		for i := range d {
			d[i] = byte(r.Uint32())
		}
		return Buffer{Data: d, ItemLen: item}
	}
	segs := []Segment{
		{Buffers: []Buffer{mk(40, 16384), mk(40, 16384), mk(40, 16384)}, Indices: []int64{7, 3, 39, 0, 3, 12, 25, 26, 27}},
		{Buffers: []Buffer{mk(4, 1000), mk(4, 24)}, Indices: []int64{2}},
	}
	var cat []byte
	items, _ := Items(segs)
	for _, it := range items {
		cat = append(cat, it.Data...)
	}
	want := adler32.Checksum(cat)
	withAdler(t, func(t *testing.T) {
		for _, threads := range []int{1, 2, 3, 7, 0} {
			if got, _ := Adler32(segs, threads); got != want {
				t.Errorf("threads %d: %#08x, want %#08x", threads, got, want)
			}
		}
	})
}

// TestSGLangAgainstZlib checks Adler32 against Python's
// zlib.adler32 over the same bytes: random pools, pages and page sizes
// written to a file that Python reads item by item. It skips without a
// python3.
func TestSGLangAgainstZlib(t *testing.T) {
	py := ""
	for _, p := range []string{os.Getenv("KVAUDIT_PYTHON"), "/usr/bin/python3", "python3"} {
		if p != "" && exec.Command(p, "-c", "import zlib").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3")
	}
	r := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	for trial := range 6 {
		pageSize := []int{1, 2, 16, 64}[trial%4]
		slotBytes := 8 * (1 + r.IntN(40))
		pages := 3 + r.IntN(20)
		nbuf := 2 * (1 + r.IntN(3))
		var bufs []Buffer
		var all []byte
		for range nbuf {
			d := make([]byte, pages*pageSize*slotBytes)
			for i := range d {
				d[i] = byte(r.Uint32())
			}
			bufs = append(bufs, Buffer{Data: d, ItemLen: pageSize * slotBytes})
			all = append(all, d...)
		}
		idx := r.Perm(pages)[:1+r.IntN(pages)]
		var pagesArg []string
		var indices []int64
		for _, p := range idx {
			indices = append(indices, int64(p))
			pagesArg = append(pagesArg, strconv.Itoa(p))
		}
		f := fmt.Sprintf("%s/pool-%d.bin", dir, trial)
		if err := os.WriteFile(f, all, 0o644); err != nil {
			t.Fatal(err)
		}
		script := `import sys, zlib
data = open(sys.argv[1], "rb").read()
nbuf, item, pages = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
idx = [int(x) for x in sys.argv[5].split(",")]
size = item * pages
stream = b"".join(data[b*size + i*item : b*size + (i+1)*item] for b in range(nbuf) for i in idx)
print("%08x" % zlib.adler32(stream))`
		out, err := exec.Command(py, "-c", script, f, strconv.Itoa(nbuf), strconv.Itoa(pageSize*slotBytes), strconv.Itoa(pages), strings.Join(pagesArg, ",")).Output()
		if err != nil {
			t.Fatalf("python: %v", err)
		}
		want, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 16, 32)
		got, err := Adler32([]Segment{{Buffers: bufs, Indices: indices}}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got != uint32(want) {
			t.Errorf("trial %d (page size %d, %d buffers, pages %v): %#08x, zlib.adler32 %#08x", trial, pageSize, nbuf, idx, got, want)
		}
	}
}

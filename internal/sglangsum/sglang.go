// Package sglangsum is SGLang's own KV checksum, sglang-adler32
// (docs/sglang.md): zlib Adler-32 of one byte stream per request and TP
// rank, the stream being every buffer SGLang registers for transfer read
// at the request's pages (its state buffers at its state indices), joined
// across workers with adler32_combine as SGLang's kernel joins its
// threads'. checksum.SGLangValues computes it for every request of a
// dump; verify's SGLang audit and inject's SGLang faults walk the stream.
package sglangsum

import (
	"fmt"
	"runtime"
	"sync"
)

// Buffer is one buffer SGLang registers for transfer (one entry of
// kv_data_ptrs, or a state buffer): Data is the whole buffer, page 0 at
// its start, and ItemLen the bytes of one item (one page of page_size
// slots for a KV buffer: buffer[0].nbytes * page_size).
type Buffer struct {
	Data    []byte
	ItemLen int
}

// Segment is buffers that share one index list: every KV buffer
// takes the request's pages, the state buffers their state indices. The
// stream holds, for each buffer in order, for each index in order, the
// item [index*ItemLen, (index+1)*ItemLen) of the buffer.
type Segment struct {
	Buffers []Buffer
	Indices []int64
}

// sglangPages returns the pages of req_to_token[req_pool_idx, start:end]
// as SGLang computes them: row[start:end] read at every pageSize-th slot,
// each slot divided by pageSize (the whole row when pageSize is 1). start
// is 0 for the value PR #39500 defines, the first token sent
// (start_send_idx) for the suffix-only form; SGLang keeps start on a page
// boundary, and so must a caller, for a slot in between names its page
// and the pages after it are read from slots pageSize further on.
func sglangPages(row []int64, pageSize, start, end int) ([]int64, error) {
	if pageSize < 1 {
		return nil, fmt.Errorf("page size %d is less than 1", pageSize)
	}
	if start < 0 || end < start || end > len(row) {
		return nil, fmt.Errorf("token range [%d, %d) does not lie in the %d slots of the req_to_token row", start, end, len(row))
	}
	var pages []int64
	for i := start; i < end; i += pageSize {
		if row[i] < 0 {
			return nil, fmt.Errorf("req_to_token slot %d of token %d is negative", row[i], i)
		}
		pages = append(pages, row[i]/int64(pageSize))
	}
	return pages, nil
}

// sglangEnd is the end of the range SGLang checksums for a request: the
// end of its last prefill chunk, at most the request's input length
// (end_idx = min(extend_range.end, len(origin_input_ids))).
func sglangEnd(extendEnd, inputLen int) int { return min(extendEnd, inputLen) }

// Item is one item of the stream: the buffer's index in the
// segments' order (KV buffers first, then the state buffers), the index
// (page) it reads, and its bytes.
type Item struct {
	Buffer int
	Index  int64
	Data   []byte
}

// Items lists the stream's items in order, checking that each lies
// in its buffer.
func Items(segs []Segment) ([]Item, error) {
	var items []Item
	ord := 0
	for _, s := range segs {
		for _, b := range s.Buffers {
			if b.ItemLen < 0 {
				return nil, fmt.Errorf("buffer %d: item length %d is negative", ord, b.ItemLen)
			}
			for _, idx := range s.Indices {
				at := idx * int64(b.ItemLen)
				if idx < 0 || (b.ItemLen > 0 && idx > int64(len(b.Data))/int64(b.ItemLen)) || at+int64(b.ItemLen) > int64(len(b.Data)) {
					return nil, fmt.Errorf("buffer %d: item %d (bytes %d..%d) is past the end of its %d bytes", ord, idx, at, at+int64(b.ItemLen), len(b.Data))
				}
				items = append(items, Item{Buffer: ord, Index: idx, Data: b.Data[at : at+int64(b.ItemLen)]})
			}
			ord++
		}
	}
	return items, nil
}

// sglangSerialBytes is the stream length below which Adler32 does
// not start goroutines.
const sglangSerialBytes = 1 << 20

// Adler32 is SGLang's checksum of a request on one rank: Adler-32 of
// the stream of segs (Items), 1 for an empty stream. threads workers
// (GOMAXPROCS when 0 or less) each take a run of consecutive items, and
// their values are joined in order with adler32Combine, as SGLang's kernel
// joins its threads' (the value is that of one serial pass).
func Adler32(segs []Segment, threads int) (uint32, error) {
	items, err := Items(segs)
	if err != nil {
		return 0, err
	}
	return ItemsAdler32(items, threads), nil
}

func ItemsAdler32(items []Item, threads int) uint32 {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	var total int64
	for _, it := range items {
		total += int64(len(it.Data))
	}
	if threads == 1 || total < sglangSerialBytes || len(items) < 2 {
		v := uint32(1)
		for _, it := range items {
			v = adlerUpdate(v, it.Data)
		}
		return v
	}
	threads = min(threads, len(items))
	type part struct {
		v uint32
		n int64
	}
	parts := make([]part, threads)
	var wg sync.WaitGroup
	// Split by bytes: worker w takes the items whose first byte falls in
	// its share of the stream.
	cuts := make([]int, threads+1)
	var at int64
	w := 1
	for i, it := range items {
		for w < threads && at >= total*int64(w)/int64(threads) {
			cuts[w] = i
			w++
		}
		at += int64(len(it.Data))
	}
	for ; w <= threads; w++ {
		cuts[w] = len(items)
	}
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, n := uint32(1), int64(0)
			for _, it := range items[cuts[w]:cuts[w+1]] {
				v = adlerUpdate(v, it.Data)
				n += int64(len(it.Data))
			}
			parts[w] = part{v, n}
		}()
	}
	wg.Wait()
	v := parts[0].v
	for _, p := range parts[1:] {
		v = adler32Combine(v, p.v, p.n)
	}
	return v
}

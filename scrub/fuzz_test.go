package scrub

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// scrubBytes scrubs one file holding b, named name, in a fresh directory
// (with kv_cache.meta beside it when meta is not nil) as format.
func scrubBytes(t *testing.T, format Format, name string, b, meta []byte) *Result {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if meta != nil {
		if err := os.WriteFile(filepath.Join(dir, mooncakeMeta), meta, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Scrub(context.Background(), []string{dir}, Options{Format: format, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Hostile kv_cache.meta files: truncated varints, lengths past the end,
// wrong wire types, another version, allocator states of the wrong size,
// node counts past Mooncake's bound, a multiplier of 32 bits or more, used
// nodes pointing past the data file.
func FuzzMooncakeMeta(f *testing.F) {
	data, meta := mooncakeStore([]mcRecord{{Key: "a", Value: []byte("123456789"), CRC: true}, {Key: "b", Value: bytes.Repeat([]byte{1}, 5000)}})
	f.Add(meta)
	f.Add(meta[:len(meta)/2])
	f.Add([]byte{})
	f.Add([]byte{0x08})                         // a tag, no value
	f.Add([]byte{0x08, 0x80, 0x80})             // a truncated varint
	f.Add([]byte{0x08, 0x03, 0x12, 0xff, 0x7f}) // a length past the end
	f.Add([]byte{0x08, 0x02})                   // version 2
	f.Add([]byte{0x0b})                         // wire type 3
	f.Add(protoBytes(protoVarint(nil, 1, 3), 2, make([]byte, allocatorFixed)))
	big := make([]byte, allocatorFixed)
	binary.LittleEndian.PutUint64(big[8:], 40)          // multiplier bits
	binary.LittleEndian.PutUint32(big[44:], 0xffffffff) // current capacity
	binary.LittleEndian.PutUint32(big[48:], 0xffffffff)
	f.Add(protoBytes(protoVarint(nil, 1, 3), 2, big))
	far := bytes.Clone(meta)
	f.Add(bytes.ReplaceAll(far, []byte{1, 0, 0, 0, 0xff}, []byte{1, 0, 0, 0x7f, 0xff}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMooncakeMeta(b)
		if err == nil {
			if m.Version != mooncakeVersion {
				t.Fatalf("accepted version %d", m.Version)
			}
			for _, x := range m.Extents {
				if x.Size > 1<<63 {
					t.Fatalf("extent %+v", x)
				}
			}
		}
		res := scrubBytes(t, Auto, mooncakeData, data, b)
		if err != nil && (len(res.Entries) != 1 || res.Entries[0].Status != Unverified) {
			t.Fatalf("a bad meta (%v) gives %+v", err, res.Entries)
		}
		if err == nil && len(res.Entries) != len(m.Extents) {
			t.Fatalf("%d extents, %d entries", len(m.Extents), len(res.Entries))
		}
	})
}

// Hostile kv_cache.data under a valid checkpoint: headers with huge
// key_len or value_len, unknown flags, records cut short, zeros.
func FuzzMooncakeRecords(f *testing.F) {
	recs := []mcRecord{{Key: "k", Value: []byte("123456789"), CRC: true}, {Key: "key2", Value: bytes.Repeat([]byte("v"), 3000), CRC: true}}
	data, meta := mooncakeStore(recs)
	f.Add(data)
	f.Add(data[:30])
	f.Add(data[:4096+4])
	f.Add(make([]byte, len(data)))
	huge := bytes.Clone(data)
	binary.LittleEndian.PutUint32(huge[0:], 0xffffffff)
	binary.LittleEndian.PutUint32(huge[4:], 0xffffffff)
	f.Add(huge)
	flags := bytes.Clone(data)
	flags[16] = 0xfe
	f.Add(flags)
	f.Fuzz(func(t *testing.T, b []byte) {
		res := scrubBytes(t, MooncakeSSD, mooncakeData, b, meta)
		if len(res.Entries) != len(recs) {
			t.Fatalf("%d records located, %d entries", len(recs), len(res.Entries))
		}
		if bytes.Equal(b, data) && res.Verdict() != Verified {
			t.Fatalf("the written store does not verify: %+v", res.Entries)
		}
		for _, e := range res.Entries {
			if e.Status == Verified && e.Expected != e.Actual {
				t.Fatalf("verified with %s != %s", e.Expected, e.Actual)
			}
		}
	})
}

// Hostile frames: empty, 4 bytes, a header alone, version 0 and 2, a
// fingerprint of another chunk, a flipped digest.
func FuzzFrameHeader(f *testing.F) {
	chunk := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	good := frame(chunk, []byte("123456789"))
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:4])
	f.Add(good[:frameHeader])
	for _, v := range []byte{0, 2, 0xff} {
		b := bytes.Clone(good)
		b[0] = v
		f.Add(b)
	}
	f.Add(frame([]byte{9, 9}, []byte("123456789")))
	d := bytes.Clone(good)
	d[12] ^= 1
	f.Add(d)
	name := "m@0x00000000@0@010203040506070809.data"
	f.Fuzz(func(t *testing.T, b []byte) {
		res := scrubBytes(t, LMCacheFrame, name, b, nil)
		if len(res.Entries) != 1 {
			t.Fatalf("%d entries", len(res.Entries))
		}
		e := res.Entries[0]
		valid := len(b) >= frameHeader && bytes.Equal(b, frame(chunk, b[frameHeader:]))
		if valid != (e.Status == Verified) {
			t.Fatalf("frame %x: %s (%s)", b, e.Status, e.Reason)
		}
	})
}

// Hostile LMC1 trailers: none, a damaged magic, a wrong CRC, an O_DIRECT
// block whose padding is not zero, files shorter than a trailer.
func FuzzLMC1Trailer(f *testing.F) {
	good := lmcacheTrailed([]byte("123456789"))
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte("LMC1"))
	f.Add([]byte("LMC1\x00\x00\x00\x00"))
	f.Add(append([]byte("123456789"), "LMC0\x26\x39\xf4\xcb"...))
	od := make([]byte, 8192)
	copy(od[4096:], "LMC1")
	od[4096+100] = 1
	f.Add(od)
	name := "m@0x00000000@0@01.data"
	f.Fuzz(func(t *testing.T, b []byte) {
		res := scrubBytes(t, LMCacheFS, name, b, nil)
		if len(res.Entries) != 1 {
			t.Fatalf("%d entries", len(res.Entries))
		}
		e := res.Entries[0]
		if len(b) >= 8 && bytes.Equal(b, lmcacheTrailed(b[:len(b)-8])) && e.Status != Verified {
			t.Fatalf("a trailed file: %s (%s)", e.Status, e.Reason)
		}
		if e.Status == Verified && e.Expected != e.Actual {
			t.Fatalf("verified with %s != %s", e.Expected, e.Actual)
		}
	})
}

// Hostile names: vllm-fs paths whose fan-out does not match the hash, a
// group that is not a number, upper-case hex; lmcache names with too few
// or many fields, no 0x, odd-length hashes, huge numbers.
func FuzzNames(f *testing.F) {
	for _, s := range []string{
		"/r/m_0123456789ab_r0/abc/de_g0/abcdef.bin", "abc/de_g0/abcdef.bin", "abc/df_g0/abcdef.bin", "abd/de_g0/abcdef.bin",
		"abc/de_gx/abcdef.bin", "ABC/DE_g0/ABCDEF.bin", "a/b_g0/a.bin", "abc/de_g99999999999999999999/abcdef.bin", "abc/de_g0/abcde.bin.tmp",
		"m@0x00000000@0@ab.data", "m@0x00000000@0@ab@salt.data", "m@00000000@0@ab.data", "m@0x@0@ab.data", "m@0x0@0@abc.data",
		"m@0x0@ffffffffffffffffff@ab.data", "@0x0@0@ab.data", "m@0x0@0@@x.data", "m@0x0@0@ab@s@t.data", "org-SEP-m@0x01020304@a@00.data",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ok := parseVLLMPath(s); ok {
			if n.Group == nil || *n.Group < 0 || len(n.BlockHash) < 5 || !hexName.MatchString(n.BlockHash) {
				t.Fatalf("%q: %+v", s, n)
			}
		}
		if n, ok := parseLMCacheName(filepath.Base(s)); ok {
			if len(n.chunk) == 0 || n.Group == nil || *n.Group < 0 {
				t.Fatalf("%q: %+v", s, n)
			}
		}
	})
}

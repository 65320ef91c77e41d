//go:build linux

package scrub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// The check values of the engines' formats (docs/scrub.md): textbook
// values and the bytes each engine's writer gives for "123456789".
func TestGoldenVectors(t *testing.T) {
	v := []byte("123456789")
	if got := crc32.Checksum(v, castagnoli); got != 0xE3069283 {
		t.Errorf("CRC-32C(123456789) = %#x, want 0xE3069283", got)
	}
	if got := crc32.ChecksumIEEE(v); got != 0xCBF43926 {
		t.Errorf("CRC-32(123456789) = %#x, want 0xCBF43926", got)
	}
	if got := crc32.Checksum(make([]byte, 32), castagnoli); got != 0x8A9136AA {
		t.Errorf("CRC-32C(32 x 00) = %#x, want 0x8A9136AA (RFC 3720)", got)
	}
	if got := hex.EncodeToString(lmcacheTrailed(v)); got != "313233343536373839"+"4c4d4331"+"2639f4cb" {
		t.Errorf("LMC1 file of 123456789 = %s, want the payload then 4c4d4331 2639f4cb", got)
	}
	if n := len(lmcacheTrailed(v)); n != 17 {
		t.Errorf("LMC1 file of 9 bytes: %d bytes, want 17", n)
	}
	chunk := make([]byte, 32)
	for i := range chunk {
		chunk[i] = byte(i + 1)
	}
	if got := hex.EncodeToString(frame(chunk, v)); got != "01"+"0102030405060708"+"72dcb18b67a17dff"+"313233343536373839" {
		t.Errorf("frame of 123456789 = %s", got)
	}
	if got := xxh3.Hash(nil); got != 0x2D06800538D394C2 {
		t.Errorf("xxh3_64('') = %#x", got)
	}
	rec := mooncakeRecordBytes("k", v, 7, true)
	if got := hex.EncodeToString(rec[:24]); got != "01000000"+"09000000"+"0700000000000000"+"01000000"+"a201a418" {
		t.Errorf("Mooncake header = %s", got)
	}
	if !bytes.Equal(rec[4096:], v) || len(rec) != 4096+9 || !bytes.Equal(rec[24:25], []byte("k")) || !allZero(rec[25:4096]) {
		t.Errorf("Mooncake record: the key at 24, zeros, the value at 4096 (%d bytes)", len(rec))
	}
	h, err := parseRecordHeader(rec)
	if err != nil || h.CRC != 0x18A401A2 || h.Seq != 7 || h.Flags != 1 || h.Size() != 4105 {
		t.Errorf("parseRecordHeader = %+v, %v", h, err)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// --- writers paraphrased from the engines, independent of write.go ---

// vllmStore writes a block as vLLM's FS tier does at CHIPMUNK-T0T/vllm
// (PR #57912; io.py _store_block, file_mapper.py get_file_name @addfd008):
// the path <base>_r<rank>/<h[:3]>/<h[3:5]>_g<group>/<h>.bin, the bytes
// written to <path>_<n>.tmp opened O_CREAT|O_EXCL|O_WRONLY, the CRC-32C set
// as four big-endian bytes in user.vllm.kv_crc32c on that descriptor before
// os.replace. crc nil: checksum_blocks off (no xattr).
func vllmStore(t *testing.T, root, base string, rank, group int, hash string, data, crc []byte) string {
	t.Helper()
	path := fmt.Sprintf("%s/%s_r%d/%s/%s_g%d/%s.bin", root, base, rank, hash[:3], hash[3:5], group, hash)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + "_12345.tmp"
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, data); err != nil {
		t.Fatal(err)
	}
	if crc != nil {
		if err := unix.Fsetxattr(fd, "user.vllm.kv_crc32c", crc, 0); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
				t.Skipf("the filesystem at %s keeps no extended attributes", root)
			}
			t.Fatal(err)
		}
	}
	unix.Close(fd)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// lmcacheStore writes a chunk as LMCache's FS L2 adapter does with
// checksum="crc32" at LMCache/LMCache @07a84874 (fs_l2_adapter.py
// _execute_store): the name from _object_key_to_filename, the payload then
// struct.pack("<4sI", b"LMC1", zlib.crc32(payload)) written to
// <stem>.tmp and os.replace'd; with odirect, _write_with_odirect's
// layout: the payload, then one bs-byte block opening with the trailer.
// trailer false: checksum="none".
func lmcacheStore(t *testing.T, dir, model string, kvRank uint32, group int, chunk, payload []byte, trailer bool, odirect int) string {
	t.Helper()
	name := fmt.Sprintf("%s@%#010x@%x@%s.data", strings.ReplaceAll(model, "/", "-SEP-"), kvRank, group, hex.EncodeToString(chunk))
	var b []byte
	b = append(b, payload...)
	if trailer {
		tr := append([]byte("LMC1"), binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(payload))...)
		if odirect > 0 {
			block := make([]byte, odirect)
			copy(block, tr)
			tr = block
		}
		b = append(b, tr...)
	}
	return writeRaw(t, filepath.Join(dir, name), b)
}

func writeRaw(t *testing.T, path string, b []byte) string {
	t.Helper()
	stem := strings.TrimSuffix(path, filepath.Ext(path))
	if err := os.WriteFile(stem+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(stem+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// frameOf frames a payload as LMCache's checksum serde does at
// LMCache/LMCache @7afa51bf (serde/checksum.py ChecksumSerializer.serialize):
// bytes((1,)), chunk_hash[:8] or chunk_hash zero-padded to 8,
// xxhash.xxh3_64(payload).digest() (big-endian), the payload.
func frameOf(chunk, payload []byte) []byte {
	fp := chunk
	if len(fp) >= 8 {
		fp = fp[:8]
	} else {
		fp = append(slices.Clone(fp), make([]byte, 8-len(fp))...)
	}
	out := append([]byte{1}, fp...)
	out = binary.BigEndian.AppendUint64(out, xxh3.Hash(payload))
	return append(out, payload...)
}

// mooncakeRecord writes a record as Mooncake's OffsetAllocator backend
// does at kvcache-ai/Mooncake 30eff961 (PR #2932; storage_backend.cpp
// BatchOffload): mcHeader{key_len, value_len, seq, flags=kFlagHasCrc,
// crc32} written field by field little-endian, the CRC-32C extended over
// the 20-byte prefix, the key and the value's slices, then the key, the
// zero padding ValuePadding(key_len) = (4096 - (24+key_len)%4096)%4096 and
// the value.
func mooncakeRecord(key string, value []byte, seq uint64, withCRC bool) []byte {
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(value)))
	binary.LittleEndian.PutUint64(hdr[8:], seq)
	if withCRC {
		binary.LittleEndian.PutUint32(hdr[16:], 1)
		c := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		c.Write(hdr[:20])
		c.Write([]byte(key))
		c.Write(value)
		binary.LittleEndian.PutUint32(hdr[20:], c.Sum32())
	}
	pad := (4096 - (24+len(key))%4096) % 4096
	out := append(hdr, key...)
	out = append(out, make([]byte, pad)...)
	return append(out, value...)
}

func scrubDir(t *testing.T, format Format, paths ...string) *Result {
	t.Helper()
	res, err := Scrub(context.Background(), paths, Options{Format: format, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func entryOf(t *testing.T, res *Result, suffix string) Entry {
	t.Helper()
	for _, e := range res.Entries {
		if strings.HasSuffix(e.Path, suffix) {
			return e
		}
	}
	t.Fatalf("no entry for %s in %+v", suffix, res.Entries)
	return Entry{}
}

func TestVLLMFS(t *testing.T) {
	root := t.TempDir()
	base := "meta-llama_Llama-3.1-8B_0123456789ab"
	block := bytes.Repeat([]byte("kv"), 4096)
	good := "a1b2c3d4" + strings.Repeat("0", 56)
	bad := "ffee0011" + strings.Repeat("1", 56)
	none := "0badc0de" + strings.Repeat("2", 56)
	short := "12345678" + strings.Repeat("3", 56)
	vllmStore(t, root, base, 1, 0, good, block, be32(crc32.Checksum(block, castagnoli)))
	p := vllmStore(t, root, base, 1, 2, bad, block, be32(crc32.Checksum(block, castagnoli)))
	flipByte(t, p, 100)
	vllmStore(t, root, base, 0, 0, none, block, nil)
	vllmStore(t, root, base, 0, 1, short, block, []byte{1, 2, 3})
	// a store in progress is not scrubbed
	tmp := filepath.Join(root, base+"_r0", "123", "45_g1", short+".bin_999.tmp")
	os.WriteFile(tmp, []byte("partial"), 0o644)

	res := scrubDir(t, Auto, root)
	e := entryOf(t, res, good+".bin")
	if e.Status != Verified || e.Algorithm != algCRC32C || e.Expected != e.Actual || e.Expected != hex4(crc32.Checksum(block, castagnoli)) {
		t.Errorf("good block: %+v", e)
	}
	if e.Name.BlockHash != good || *e.Name.Rank != 1 || *e.Name.Group != 0 || e.Name.Model != "meta-llama_Llama-3.1-8B" || e.Name.ConfigHash != "0123456789ab" {
		t.Errorf("good block's name: %+v", e.Name)
	}
	if e.Length != int64(len(block)) || e.Offset != 0 {
		t.Errorf("good block covers %d at %d", e.Length, e.Offset)
	}
	if e := entryOf(t, res, bad+".bin"); e.Status != Mismatch || e.Problem != ProblemChecksum || e.Expected == e.Actual || *e.Name.Group != 2 {
		t.Errorf("flipped block: %+v", e)
	}
	if e := entryOf(t, res, none+".bin"); e.Status != Unverified || e.Problem != ProblemNoChecksum || e.Expected != "" {
		t.Errorf("block without xattr: %+v", e)
	}
	if e := entryOf(t, res, short+".bin"); e.Status != Mismatch || e.Problem != ProblemChecksumSize || e.Expected != "010203" {
		t.Errorf("3-byte xattr: %+v", e)
	}
	if len(res.Entries) != 4 || len(res.Skipped) != 1 || !strings.HasSuffix(res.Skipped[0].Path, ".tmp") {
		t.Errorf("entries %d, skipped %+v", len(res.Entries), res.Skipped)
	}
	for _, d := range res.Dirs {
		if d.Format != VLLMFS || !strings.Contains(d.How, "vLLM") {
			t.Errorf("directory %s read as %s (%s)", d.Path, d.Format, d.How)
		}
	}
	if res.Verdict() != Mismatch {
		t.Errorf("verdict %s", res.Verdict())
	}
}

// An earlier revision of PR #57912 (CHIPMUNK-T0T/vllm @db631430, io.py
// _stamp_blocks) set zlib's CRC-32 as user.vllm.kv_crc32 after the write.
func TestVLLMFSEarlierRevision(t *testing.T) {
	root := t.TempDir()
	block := []byte("123456789")
	h := strings.Repeat("ab", 32)
	p := vllmStore(t, root, "m_0123456789ab", 0, 0, h, block, nil)
	if err := unix.Setxattr(p, "user.vllm.kv_crc32", be32(crc32.ChecksumIEEE(block)), 0); err != nil {
		t.Skip(err)
	}
	e := scrubDir(t, Auto, root).Entries[0]
	if e.Status != Verified || e.Algorithm != algCRC32 || e.Expected != "cbf43926" {
		t.Errorf("%+v", e)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x01
	// In place, keeping the inode (and so the xattrs).
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b[off:off+1], off); err != nil {
		t.Fatal(err)
	}
}

func TestLMCacheFS(t *testing.T) {
	dir := t.TempDir()
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 64) }
	ch := func(i int) []byte { return []byte{0xde, 0xad, 0xbe, byte(i)} }
	files := map[string]string{}
	for i := range 6 {
		files[fmt.Sprint(i)] = lmcacheStore(t, dir, "meta-llama/Llama-3.1-8B", 0x02010200|uint32(i%2), 1, ch(i), payload(i), true, 0)
	}
	// the test's flips at 0, 63 (payload), 64 (magic) and 71 (CRC)
	flipByte(t, files["0"], 0)
	flipByte(t, files["1"], 63)
	flipByte(t, files["2"], 64)
	flipByte(t, files["3"], 71)
	noTrailer := lmcacheStore(t, dir, "llama", 0, 1, ch(9), bytes.Repeat([]byte{9}, 72), false, 0)
	cut := files["5"]
	if err := os.Truncate(cut, 40); err != nil {
		t.Fatal(err)
	}
	res := scrubDir(t, Auto, dir)
	if len(res.Dirs) != 1 || res.Dirs[0].Format != LMCacheFS {
		t.Fatalf("dirs %+v", res.Dirs)
	}
	want := map[string][2]string{
		files["0"]: {"mismatch", ProblemChecksum}, files["1"]: {"mismatch", ProblemChecksum},
		files["2"]: {"mismatch", ProblemTrailer}, files["3"]: {"mismatch", ProblemChecksum},
		files["4"]: {"verified", ""}, noTrailer: {"unverified", ProblemNoChecksum}, cut: {"mismatch", ProblemTruncated},
	}
	for _, e := range res.Entries {
		w, ok := want[e.Path]
		if !ok {
			t.Errorf("unexpected entry %s", e.Path)
			continue
		}
		if string(e.Status) != w[0] || e.Problem != w[1] {
			t.Errorf("%s: %s %s (%s), want %s %s", filepath.Base(e.Path), e.Status, e.Problem, e.Reason, w[0], w[1])
		}
	}
	e := entryOf(t, res, filepath.Base(files["4"]))
	if e.Name.Model != "meta-llama/Llama-3.1-8B" || e.Name.KVRank != "0x02010200" || *e.Name.WorldSize != 2 || *e.Name.Rank != 1 ||
		*e.Name.LocalWorldSize != 2 || *e.Name.LocalRank != 0 || *e.Name.Group != 1 || e.Name.ChunkHash != "deadbe04" {
		t.Errorf("name: %+v", e.Name)
	}
	if e.Expected != hex4(crc32.ChecksumIEEE(payload(4))) || e.Length != 72 {
		t.Errorf("verified: %+v", e)
	}
}

func TestLMCacheODirect(t *testing.T) {
	dir := t.TempDir()
	bs := 4096
	pay := bytes.Repeat([]byte("odirect!"), bs*2/8)
	good := lmcacheStore(t, dir, "m", 0, 0, []byte{1}, pay, true, bs)
	bad := lmcacheStore(t, dir, "m", 0, 0, []byte{2}, pay, true, bs)
	flipByte(t, bad, 0)
	res := scrubDir(t, LMCacheFS, dir)
	if e := entryOf(t, res, filepath.Base(good)); e.Status != Verified || e.Length != int64(3*bs) || !strings.Contains(e.Note, "O_DIRECT") {
		t.Errorf("O_DIRECT file: %+v", e)
	}
	if e := entryOf(t, res, filepath.Base(bad)); e.Status != Mismatch || e.Problem != ProblemChecksum {
		t.Errorf("flipped O_DIRECT file: %+v", e)
	}
}

func TestLMCacheFrame(t *testing.T) {
	dir := t.TempDir()
	pay := bytes.Repeat([]byte("frame"), 40)
	chunk := func(i int) []byte { return append([]byte{byte(i)}, bytes.Repeat([]byte{0xcc}, 31)...) }
	put := func(i int, b []byte) string {
		return writeRaw(t, filepath.Join(dir, fmt.Sprintf("m@0x00000000@0@%x.data", chunk(i))), b)
	}
	good := put(0, frameOf(chunk(0), pay))
	good2 := put(1, frameOf(chunk(1), pay))
	flipped := put(2, frameOf(chunk(2), pay))
	flipByte(t, flipped, -1) // the test's last-byte flip: xxh3_64 mismatch
	v2 := frameOf(chunk(3), pay)
	v2[0] = 2
	version := put(3, v2)
	other := put(4, frameOf(chunk(5), pay)) // loaded under another hash
	tiny := put(6, frameOf(chunk(6), pay)[:4])
	cut := put(7, frameOf(chunk(7), pay)[:100])
	// a 3-byte chunk hash is zero-padded
	short := writeRaw(t, filepath.Join(dir, "m@0x00000000@0@abcdef.data"), frameOf([]byte{0xab, 0xcd, 0xef}, pay))
	res := scrubDir(t, Auto, dir)
	if res.Dirs[0].Format != LMCacheFrame {
		t.Fatalf("read as %s (%s)", res.Dirs[0].Format, res.Dirs[0].How)
	}
	want := map[string][2]string{
		good: {"verified", ""}, good2: {"verified", ""}, short: {"verified", ""},
		flipped: {"mismatch", ProblemChecksum}, version: {"mismatch", ProblemVersion},
		other: {"mismatch", ProblemFingerprint}, tiny: {"mismatch", ProblemTruncated}, cut: {"mismatch", ProblemTruncated},
	}
	for _, e := range res.Entries {
		w := want[e.Path]
		if string(e.Status) != w[0] || e.Problem != w[1] {
			t.Errorf("%s: %s %s (%s), want %v", filepath.Base(e.Path), e.Status, e.Problem, e.Reason, w)
		}
	}
	if e := entryOf(t, res, filepath.Base(good)); e.Expected != hex8(xxh3.Hash(pay)) || e.Algorithm != algXXH3 {
		t.Errorf("good frame: %+v", e)
	}
	if len(res.Entries) != len(want) {
		t.Errorf("%d entries, want %d", len(res.Entries), len(want))
	}
}

// mooncakeDir writes kv_cache.data with records at the given 4 KiB-unit
// offsets and a kv_cache.meta whose allocator marks them used, as
// SaveMetadata persists it (struct_pb of OffsetAllocatorPersistedMetadata,
// allocator_state from OffsetAllocator::serialize_to), Mooncake 30eff961.
func mooncakeDir(t *testing.T, dir string, recs [][]byte, units []uint32, insertSeq uint64) (data, meta string) {
	t.Helper()
	const bits = 12
	var file []byte
	var nodes [][2]uint32
	for i, r := range recs {
		off := int(units[i]) << bits
		if len(file) < off+len(r) {
			file = append(file, make([]byte, off+len(r)-len(file))...)
		}
		copy(file[off:], r)
		nodes = append(nodes, [2]uint32{units[i], uint32((len(r) + 4095) >> bits)})
	}
	le := binary.LittleEndian
	var st []byte
	for _, v := range []uint64{0, bits, uint64(len(file)), uint64(len(file)), uint64(len(nodes))} {
		st = le.AppendUint64(st, v)
	}
	n := uint32(len(nodes) + 2)
	for _, v := range []uint32{uint32(len(file) >> bits), n, 64, 0, 0} {
		st = le.AppendUint32(st, v)
	}
	st = append(st, make([]byte, 32+256*4)...)
	st = le.AppendUint32(st, 0)
	for i := range n {
		node := make([]byte, 28)
		if int(i) < len(nodes) {
			le.PutUint32(node, nodes[i][0])
			le.PutUint32(node[4:], nodes[i][1])
			node[24] = 1
		}
		st = append(st, node...)
	}
	st = append(st, make([]byte, 4*n)...)
	var m []byte
	m = protoVarint(m, 1, 3)
	m = protoBytes(m, 2, st)
	m = protoVarint(m, 3, insertSeq)
	data, meta = filepath.Join(dir, "kv_cache.data"), filepath.Join(dir, "kv_cache.meta")
	if err := os.WriteFile(data, file, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, m, 0o644); err != nil {
		t.Fatal(err)
	}
	return data, meta
}

func TestMooncakeSSD(t *testing.T) {
	dir := t.TempDir()
	v := bytes.Repeat([]byte("value"), 1000)
	recs := [][]byte{
		mooncakeRecord("k", []byte("123456789"), 7, true),
		mooncakeRecord("key-good", v, 1, true),
		mooncakeRecord("key-bad", v, 2, true),
		mooncakeRecord("key-nocrc", v, 3, false),
		mooncakeRecord("key-late", v, 9, true),
	}
	recs[2][4096+10] ^= 0x80
	units := []uint32{10, 0, 3, 6, 20}
	data, _ := mooncakeDir(t, dir, recs, units, 8)
	res := scrubDir(t, Auto, dir)
	if len(res.Dirs) != 1 || res.Dirs[0].Format != MooncakeSSD || len(res.Entries) != 5 {
		t.Fatalf("%+v %+v", res.Dirs, res.Entries)
	}
	byKey := map[string]Entry{}
	for _, e := range res.Entries {
		byKey[e.Name.Key] = e
		if e.Path != data {
			t.Errorf("entry path %s", e.Path)
		}
	}
	if e := byKey["k"]; e.Status != Verified || e.Expected != "18a401a2" || e.Offset != 10<<12 || e.Length != 4105 || *e.Name.Seq != 7 {
		t.Errorf("k: %+v", e)
	}
	if e := byKey["key-good"]; e.Status != Verified || e.Offset != 0 {
		t.Errorf("key-good: %+v", e)
	}
	if e := byKey["key-bad"]; e.Status != Mismatch || e.Problem != ProblemChecksum || e.Offset != 3<<12 {
		t.Errorf("key-bad: %+v", e)
	}
	if e := byKey["key-nocrc"]; e.Status != Unverified || e.Problem != ProblemNoChecksum {
		t.Errorf("key-nocrc: %+v", e)
	}
	if e := byKey["key-late"]; e.Status != Verified || !strings.Contains(e.Note, "after the checkpoint") {
		t.Errorf("key-late: %+v", e)
	}
	// entries in file order
	if !slices.IsSortedFunc(res.Entries, func(a, b Entry) int { return int(a.Offset - b.Offset) }) {
		t.Error("records not in offset order")
	}
}

func TestMooncakeBadMetaAndTruncation(t *testing.T) {
	dir := t.TempDir()
	v := bytes.Repeat([]byte{7}, 5000)
	data, meta := mooncakeDir(t, dir, [][]byte{mooncakeRecord("a", v, 0, true), mooncakeRecord("b", v, 1, true)}, []uint32{0, 3}, 5)
	if err := os.Truncate(data, 3<<12+4096+100); err != nil {
		t.Fatal(err)
	}
	res := scrubDir(t, Auto, dir)
	if e := res.Entries[1]; e.Status != Mismatch || e.Problem != ProblemTruncated {
		t.Errorf("cut record: %+v", e)
	}
	// a version-2 checkpoint names its field
	b, _ := os.ReadFile(meta)
	b[1] = 2
	os.WriteFile(meta, b, 0o644)
	res = scrubDir(t, Auto, dir)
	if len(res.Entries) != 1 || res.Entries[0].Status != Unverified || !strings.Contains(res.Entries[0].Reason, "version: 2") {
		t.Errorf("version-2 meta: %+v", res.Entries)
	}
}

// Auto says which format it read each directory as; a path with no store
// file is an error naming it.
func TestAutoFormatPerDirectory(t *testing.T) {
	root := t.TempDir()
	blocks := []Block{{Model: "org/m", Rank: 0, TP: 1, Group: 0, Hash: bytes.Repeat([]byte{0xab}, 32), Data: []byte("123456789")},
		{Model: "org/m", Rank: 0, TP: 1, Group: 0, Hash: bytes.Repeat([]byte{0xcd}, 32), Data: []byte("987654321")}}
	for _, f := range Formats {
		if _, _, err := WriteStore(filepath.Join(root, string(f)), f, blocks); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "README"), []byte("not a store"), 0o644)
	res := scrubDir(t, Auto, root)
	got := map[Format]int{}
	for _, d := range res.Dirs {
		got[d.Format]++
		if !strings.Contains(d.Path, string(d.Format)) {
			t.Errorf("%s read as %s (%s)", d.Path, d.Format, d.How)
		}
	}
	if got[LMCacheFS] != 1 || got[LMCacheFrame] != 1 || got[MooncakeSSD] != 1 || got[VLLMFS] < 1 {
		t.Errorf("formats %v", got)
	}
	if v, m, u := res.Counts(); m != 0 || v+u != 8 {
		t.Errorf("counts %d %d %d", v, m, u)
	}
	empty := t.TempDir()
	os.WriteFile(filepath.Join(empty, "x.txt"), nil, 0o644)
	var ie *InputError
	if _, err := Scrub(context.Background(), []string{empty}, Options{}); !errors.As(err, &ie) {
		t.Errorf("no store: %v", err)
	}
	if _, err := Scrub(context.Background(), []string{filepath.Join(empty, "nope")}, Options{}); !errors.As(err, &ie) {
		t.Errorf("missing path: %v", err)
	}
}

// WriteStore writes each format byte for byte as the paraphrased writers
// above do.
func TestWriteStoreMatchesEngines(t *testing.T) {
	chunk := []byte{1, 2, 3}
	pay := []byte("payload")
	if got, want := lmcacheTrailed(pay), func() []byte {
		b, _ := os.ReadFile(lmcacheStore(t, t.TempDir(), "m", 0, 0, chunk, pay, true, 0))
		return b
	}(); !bytes.Equal(got, want) {
		t.Errorf("trailer %x, engine %x", got, want)
	}
	if !bytes.Equal(frame(chunk, pay), frameOf(chunk, pay)) {
		t.Error("frame differs")
	}
	for _, crc := range []bool{true, false} {
		if !bytes.Equal(mooncakeRecordBytes("key", pay, 3, crc), mooncakeRecord("key", pay, 3, crc)) {
			t.Errorf("record (crc %v) differs", crc)
		}
	}
	b := Block{Model: "org/m", Rank: 3, TP: 4, Group: 2, Hash: []byte{0xab, 0xcd, 0xef}}
	if got := lmcacheFileName(b); got != "org-SEP-m@0x04030403@2@abcdef.data" {
		t.Errorf("LMCache name %s", got)
	}
	if got := vllmFileName(b, "0123456789ab"); got != "org_m_0123456789ab_r3/abc/de_g2/abcdef.bin" {
		t.Errorf("vLLM name %s", got)
	}
}

// fileState is everything a scrub could change of a file: its bytes, its
// xattrs, its mode, size and modification time.
func storeState(t *testing.T, root string) map[string]string {
	t.Helper()
	st := map[string]string{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		s := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			s += fmt.Sprintf(" %x", sha256.Sum256(b))
			buf := make([]byte, 4096)
			if n, err := unix.Listxattr(p, buf); err == nil {
				for _, name := range strings.Split(string(buf[:n]), "\x00") {
					if name == "" {
						continue
					}
					v := make([]byte, 256)
					k, _ := unix.Getxattr(p, name, v)
					s += fmt.Sprintf(" %s=%x", name, v[:max(k, 0)])
				}
			}
		}
		st[p] = s
		return nil
	})
	return st
}

// A scrub writes, renames and deletes nothing under its paths, whatever it
// finds: every file's bytes and xattrs, every directory's entries, hashed
// before and after.
func TestScrubLeavesStoreUntouched(t *testing.T) {
	root := t.TempDir()
	blocks := []Block{{Model: "m", TP: 1, Hash: bytes.Repeat([]byte{1}, 32), Data: bytes.Repeat([]byte{9}, 8192)},
		{Model: "m", TP: 1, Hash: bytes.Repeat([]byte{2}, 32), Data: bytes.Repeat([]byte{8}, 8192)}}
	var all []string
	for _, f := range Formats {
		files, _, err := WriteStore(filepath.Join(root, string(f)), f, blocks)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, files...)
	}
	for _, f := range all {
		flipByte(t, f, 30) // every store now has a mismatch its engine would delete
	}
	os.Symlink(all[0], filepath.Join(root, "link.data"))
	syscall.Mkfifo(filepath.Join(root, string(LMCacheFS), "fifo@0x0@0@00.data"), 0o644)
	before := storeState(t, root)
	res := scrubDir(t, Auto, root)
	if _, m, _ := res.Counts(); m == 0 {
		t.Fatalf("no mismatch found: %+v", res.Entries)
	}
	after := storeState(t, root)
	if len(before) != len(after) {
		t.Errorf("%d paths before, %d after", len(before), len(after))
	}
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s changed:\n%s\n%s", p, s, after[p])
		}
	}
	skipped := map[string]bool{}
	for _, s := range res.Skipped {
		skipped[filepath.Base(s.Path)] = true
	}
	if !skipped["link.data"] || !skipped["fifo@0x0@0@00.data"] {
		t.Errorf("a symlink and a FIFO are skipped, not read: %+v", res.Skipped)
	}
}

// A file given as the path scrubs that file alone.
func TestScrubOneFile(t *testing.T) {
	dir := t.TempDir()
	a := lmcacheStore(t, dir, "m", 0, 0, []byte{1}, []byte("aaaa"), true, 0)
	lmcacheStore(t, dir, "m", 0, 0, []byte{2}, []byte("bbbb"), false, 0)
	res := scrubDir(t, Auto, a)
	if len(res.Entries) != 1 || res.Entries[0].Path != a || res.Verdict() != Verified {
		t.Errorf("%+v", res.Entries)
	}
}

// Counts per directory: a vllm-fs store is counted at its rank
// namespaces, each with its own verified, mismatch and unverified.
func TestDirectoryCounts(t *testing.T) {
	root := t.TempDir()
	base := "m_0123456789ab"
	b := []byte("block")
	c := be32(crc32.Checksum(b, castagnoli))
	vllmStore(t, root, base, 0, 0, strings.Repeat("a", 64), b, c)
	vllmStore(t, root, base, 0, 0, strings.Repeat("b", 64), b, []byte{0, 0, 0, 0})
	vllmStore(t, root, base, 1, 3, strings.Repeat("c", 64), b, nil)
	res := scrubDir(t, Auto, root)
	if len(res.Dirs) != 2 {
		t.Fatalf("dirs %+v", res.Dirs)
	}
	d0, d1 := res.Dirs[0], res.Dirs[1]
	if filepath.Base(d0.Path) != base+"_r0" || d0.Files != 2 || d0.Verified != 1 || d0.Mismatch != 1 || d0.Unverified != 0 {
		t.Errorf("r0: %+v", d0)
	}
	if filepath.Base(d1.Path) != base+"_r1" || d1.Files != 1 || d1.Verified != 0 || d1.Mismatch != 0 || d1.Unverified != 1 {
		t.Errorf("r1: %+v", d1)
	}
	for _, e := range res.Entries {
		if e.Dir != d0.Path && e.Dir != d1.Path {
			t.Errorf("%s counted in %s", e.Path, e.Dir)
		}
	}
	if v, m, u := res.Counts(); v != 1 || m != 1 || u != 1 {
		t.Errorf("counts %d %d %d", v, m, u)
	}
	if !strings.Contains(res.Summary(), "1 verified, 1 mismatch, 1 unverified in 2 directories") {
		t.Errorf("summary %q", res.Summary())
	}
}

// Frames are told from trailed payloads by most of the sampled files,
// and only by a frame whose fingerprint is the file's own chunk hash.
func TestRecogniseFrames(t *testing.T) {
	pay := []byte("0123456789abcdef")
	put := func(dir string, i int, b []byte) {
		writeRaw(t, filepath.Join(dir, fmt.Sprintf("m@0x00000000@0@%02x.data", i)), b)
	}
	mostly := t.TempDir()
	put(mostly, 1, frameOf([]byte{1}, pay))
	put(mostly, 2, frameOf([]byte{2}, pay))
	put(mostly, 3, lmcacheTrailed(pay))
	few := t.TempDir()
	put(few, 1, frameOf([]byte{1}, pay))
	put(few, 2, lmcacheTrailed(pay))
	put(few, 3, lmcacheTrailed(pay))
	foreign := t.TempDir()
	put(foreign, 1, frameOf([]byte{7}, pay))
	put(foreign, 2, frameOf([]byte{8}, pay))
	for dir, want := range map[string]Format{mostly: LMCacheFrame, few: LMCacheFS, foreign: LMCacheFS} {
		if res := scrubDir(t, Auto, dir); res.Dirs[0].Format != want {
			t.Errorf("read as %s (%s), want %s", res.Dirs[0].Format, res.Dirs[0].How, want)
		}
	}
	// an empty payload is a frame too
	empty := t.TempDir()
	put(empty, 1, frameOf([]byte{1}, nil))
	if e := scrubDir(t, LMCacheFrame, empty).Entries[0]; e.Status != Verified {
		t.Errorf("a 17-byte frame: %+v", e)
	}
}

// Two of LMC1's four bytes changed is a damaged trailer; three, none.
func TestNearMagic(t *testing.T) {
	dir := t.TempDir()
	pay := bytes.Repeat([]byte{5}, 32)
	two := lmcacheTrailed(pay)
	two[32], two[33] = 'X', 'Y'
	three := lmcacheTrailed(pay)
	three[32], three[33], three[34] = 'X', 'Y', 'Z'
	writeRaw(t, filepath.Join(dir, "m@0x00000000@0@01.data"), two)
	writeRaw(t, filepath.Join(dir, "m@0x00000000@0@02.data"), three)
	res := scrubDir(t, LMCacheFS, dir)
	if e := res.Entries[0]; e.Problem != ProblemTrailer {
		t.Errorf("two bytes changed: %+v", e)
	}
	if e := res.Entries[1]; e.Status != Unverified || e.Problem != ProblemNoChecksum {
		t.Errorf("three bytes changed: %+v", e)
	}
}

// The walk stops 64 directories down, saying so.
func TestWalkDepth(t *testing.T) {
	root := t.TempDir()
	deep := root
	for i := range maxDepth + 2 {
		deep = filepath.Join(deep, fmt.Sprint(i%10))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	lmcacheStore(t, deep, "m", 0, 0, []byte{1}, []byte("x"), true, 0)
	lmcacheStore(t, root, "m", 0, 0, []byte{1}, []byte("x"), true, 0)
	res := scrubDir(t, Auto, root)
	if len(res.Entries) != 1 || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Reason, "deeper than 64") {
		t.Errorf("entries %d, skipped %+v", len(res.Entries), res.Skipped)
	}
}

func TestNames(t *testing.T) {
	for s, ok := range map[string]bool{
		"abc/de_g0/abcde.bin": true, "abc/de_g0/abcd.bin": false, "abc/de_g1x/abcde.bin": false, "abc/df_g0/abcde.bin": false,
		"abd/de_g0/abcde.bin": false, "abc/de_g0/abcdE.bin": false, "abc/de_g0/abcde.bin_1.tmp": false,
	} {
		if _, got := parseVLLMPath(s); got != ok {
			t.Errorf("parseVLLMPath(%q) = %v", s, got)
		}
	}
	for s, ok := range map[string]bool{
		"m@0x0@0@ab.data": true, "m@0x0@0@ab@salt.data": true, "m@0x0@0.data": false, "m@0x0@0@ab@s@t.data": false,
		"m@0@0@ab.data": false, "m@0x0@0@abc.data": false, "@0x0@0@ab.data": false, "m@0x0@g@ab.data": false, "m@0x0@0@ab.tmp": false,
	} {
		if _, got := parseLMCacheName(s); got != ok {
			t.Errorf("parseLMCacheName(%q) = %v", s, got)
		}
	}
}

// Hostile kv_cache.meta bytes, each an error naming its field (a
// truncated tag must not loop).
func TestParseMooncakeMetaHostile(t *testing.T) {
	_, good := mooncakeStore([]mcRecord{{Key: "a", Value: []byte("v"), CRC: true}})
	if m, err := parseMooncakeMeta(good); err != nil || len(m.Extents) != 1 || m.InsertSeq != 1 || m.Keys[0] != "a" {
		t.Fatalf("%+v %v", m, err)
	}
	state := func(bits uint64, cur, maxCap uint32) []byte {
		b := make([]byte, allocatorFixed+int(cur)*(allocatorNode+4))
		binary.LittleEndian.PutUint64(b[8:], bits)
		binary.LittleEndian.PutUint32(b[44:], cur)
		binary.LittleEndian.PutUint32(b[48:], maxCap)
		return protoBytes(protoVarint(nil, 1, 3), 2, b)
	}
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{[]byte{0x80}, "tag"},
		{[]byte{0x08, 0x80}, "truncated varint"},
		{[]byte{0x12, 0x05, 0x00}, "past the end"},
		{[]byte{0x08, 0x02}, "version: 2"},
		{[]byte{0x08, 0x03}, "allocator_state: empty"},
		{[]byte{0x0a, 0x00}, "version: not a uint32"},
		{state(32, 1, 1), "m_multiplier_bits 32"},
		{state(12, 2, 1), "m_current_capacity 2"},
		{state(12, 1, 1<<24+1), "m_max_capacity 16777217"},
		{state(12, 1, 0), "m_max_capacity 0"},
	} {
		if _, err := parseMooncakeMeta(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: %v, want %q", c.b, err, c.want)
		}
	}
	for _, b := range [][]byte{state(31, 1, 1), state(12, 1, 1<<24)} {
		if _, err := parseMooncakeMeta(b); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestProgressAddsUpToBytes: Options.Progress is told every file's bytes
// read, from the reading goroutines: they add up to Result.Bytes, the
// bytes of the blocks checked.
func TestProgressAddsUpToBytes(t *testing.T) {
	root := t.TempDir()
	base := "meta-llama_Llama-3.1-8B_0123456789ab"
	block := bytes.Repeat([]byte("kv"), 4096)
	for i := range 3 {
		vllmStore(t, root, base, 0, i, fmt.Sprintf("%08x", i)+strings.Repeat("0", 56), block, be32(crc32.Checksum(block, castagnoli)))
	}
	var told atomic.Int64
	res, err := Scrub(context.Background(), []string{root}, Options{Threads: 2, Progress: func(n int64) { told.Add(n) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(3 * len(block)); res.Bytes != want || told.Load() != res.Bytes {
		t.Errorf("Progress was told %d bytes, the result says %d, the blocks hold %d", told.Load(), res.Bytes, want)
	}
}

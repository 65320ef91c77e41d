package scrub

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/internal/xattr"
	"github.com/zeebo/xxh3"
)

var (
	errEOF      = io.EOF
	errNoAttr   = errors.New("no such extended attribute")
	errNoXattrs = xattr.ErrUnsupported
)

// castagnoli is CRC-32C's table: hash/crc32 takes the SSE 4.2 path with
// it where the machine has one, and zlib's CRC-32 (crc32.IEEETable) the
// CLMUL one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// vLLM's FS tier (PR #57912) sets the block's CRC-32C, 4 bytes big-endian,
// as vllmXattr on the temporary file before its rename
// (vllm/v1/kv_offload/tiering/fs/io.py, _store_block); an earlier revision
// of the same PR (CHIPMUNK-T0T/vllm @db631430) set zlib's CRC-32 as
// vllmXattrIEEE instead, and is read too.
const (
	vllmXattr     = "user.vllm.kv_crc32c"
	vllmXattrIEEE = "user.vllm.kv_crc32"
)

// hex4 is a uint32 as 8 hex digits.
func hex4(v uint32) string { return fmt.Sprintf("%08x", v) }

// hex8 is a uint64 as 16 hex digits.
func hex8(v uint64) string { return fmt.Sprintf("%016x", v) }

func (w *walker) planVLLM(d *dirRoot, rel string, files []string, dir func() *dirState) int {
	n := 0
	for _, f := range files {
		child := filepath.Join(rel, f)
		if vllmTemp.MatchString(f) {
			w.skip(child, "a temporary file of a store in progress (vLLM renames it into place when complete)")
			continue
		}
		name, ok := parseVLLMPath(w.abs(child))
		if !ok {
			w.skip(child, "not named as vLLM's FS tier names a block file (<h[:3]>/<h[3:5]>_g<group>/<h>.bin)")
			continue
		}
		n++
		path := w.show(child)
		w.queue(d, dir(), func(buf []byte, add func(Entry)) int64 {
			e, read := checkVLLM(d.dirHandle, f, path, name, buf)
			add(e)
			return read
		})
	}
	return n
}

func checkVLLM(h *dirHandle, file, path string, name Name, buf []byte) (Entry, int64) {
	e := Entry{Path: path, Format: VLLMFS, Name: name, Algorithm: algCRC32C}
	f, st, err := h.open(file)
	if err != nil {
		return readErr(path, VLLMFS, err), 0
	}
	defer f.Close()
	e.Length = st.Size()
	var attr [64]byte
	table := castagnoli
	k, xerr := getxattr(f, vllmXattr, attr[:])
	if errors.Is(xerr, errNoAttr) {
		if k2, err2 := getxattr(f, vllmXattrIEEE, attr[:]); err2 == nil {
			k, xerr, table, e.Algorithm = k2, nil, crc32.IEEETable, algCRC32
		}
	}
	var sum uint32
	read, err := hashRange(f, 0, st.Size(), buf, func(p []byte) { sum = crc32.Update(sum, table, p) })
	if err != nil {
		return readErr(path, VLLMFS, err), read
	}
	e.Actual = hex4(sum)
	switch {
	case errors.Is(xerr, errNoAttr):
		e.Status, e.Problem = Unverified, ProblemNoChecksum
		e.Reason = "no " + vllmXattr + " xattr (stored with checksum_blocks off, or the attribute was lost)"
	case errors.Is(xerr, errNoXattrs):
		e.Status, e.Problem = Unverified, ProblemNoXattrs
		e.Reason = "the filesystem keeps no extended attributes: nothing stored to check against"
	case xerr != nil:
		return readErr(path, VLLMFS, fmt.Errorf("reading its %s xattr: %w", vllmXattr, xerr)), read
	case k != 4:
		e.Status, e.Problem = Mismatch, ProblemChecksumSize
		e.Expected = hex.EncodeToString(attr[:min(k, len(attr))])
		e.Reason = fmt.Sprintf("the %s xattr is %d bytes, not 4 (vLLM fails the load and removes the file)", xattrName(e.Algorithm), k)
	default:
		stored := binary.BigEndian.Uint32(attr[:4])
		e.Expected = hex4(stored)
		if stored == sum {
			e.Status = Verified
		} else {
			e.Status, e.Problem = Mismatch, ProblemChecksum
			e.Reason = "the block's bytes differ from the CRC stored with it (vLLM fails the load with EBADMSG and removes the file)"
		}
	}
	return e, read
}

func xattrName(alg string) string {
	if alg == algCRC32 {
		return vllmXattrIEEE
	}
	return vllmXattr
}

// LMCache's FS L2 adapter with checksum="crc32" writes the payload, then
// struct "<4sI": b"LMC1" and zlib.crc32(payload); under O_DIRECT the
// trailer opens one more block of statvfs's f_bsize, zero-padded
// (fs_l2_adapter.py _execute_store and _write_with_odirect, LMCache/LMCache
// @07a84874). The payload's length is not stored: the loader reads
// len(dst) bytes.
const (
	lmcacheMagic   = "LMC1"
	lmcacheTrailer = 8
)

// odirectBlocks are the block sizes an O_DIRECT trailer is looked for at,
// after the filesystem's own.
var odirectBlocks = []int64{4096, 512, 1024, 2048, 8192, 16384, 32768, 65536}

// LMCache's checksum serde (PR #4558, lmcache/v1/distributed/serde/
// checksum.py @7afa51bf) frames a payload as [1 B version = 1][8 B
// chunk_hash[:8], zero-padded][8 B xxh3_64(payload).digest(), big-endian]
// [payload].
const (
	frameVersion   = 1
	fingerprintLen = 8
	frameHeader    = 1 + fingerprintLen + 8
)

// fingerprint is the serde's chunk fingerprint of a chunk hash: its first
// 8 bytes, zero-padded.
func fingerprint(chunk []byte) []byte {
	fp := make([]byte, fingerprintLen)
	copy(fp, chunk)
	return fp
}

func (w *walker) planLMCache(d *dirRoot, rel string, files []string, format Format, dir func() *dirState) int {
	type file struct {
		name   string
		parsed lmcacheName
		size   int64
	}
	var todo []file
	var sizes []int64
	for _, f := range files {
		child := filepath.Join(rel, f)
		if filepath.Ext(f) == ".tmp" {
			w.skip(child, "a temporary file of a store in progress (LMCache renames it into place when complete)")
			continue
		}
		name, ok := parseLMCacheName(f)
		if !ok {
			w.skip(child, "not named as LMCache's FS L2 adapter names a file (<model>@0x<kv_rank>@<group>@<chunk hash>[@salt].data)")
			continue
		}
		st, err := d.size(f)
		if err != nil {
			w.skip(child, err.Error())
			continue
		}
		todo = append(todo, file{f, name, st})
		sizes = append(sizes, st)
	}
	// The files of one directory are the chunks of one model and layout:
	// one size. A file shorter than most is truncated.
	expect := modalSize(sizes)
	bs := blockSize(w.abs(rel))
	for _, t := range todo {
		path := w.show(filepath.Join(rel, t.name))
		w.queue(d, dir(), func(buf []byte, add func(Entry)) int64 {
			var e Entry
			var read int64
			if format == LMCacheFrame {
				e, read = checkFrame(d.dirHandle, t.name, path, t.parsed, expect, buf)
			} else {
				e, read = checkTrailer(d.dirHandle, t.name, path, t.parsed, expect, bs, buf)
			}
			add(e)
			return read
		})
	}
	return len(todo)
}

// checkTrailer checks an lmcache-fs file: the buffered form (the last 8
// bytes are the trailer) first, then the O_DIRECT form (the trailer opens
// the last block).
func checkTrailer(h *dirHandle, file, path string, name lmcacheName, expect, bs int64, buf []byte) (Entry, int64) {
	e := Entry{Path: path, Format: LMCacheFS, Name: name.Name, Algorithm: algCRC32}
	f, st, err := h.open(file)
	if err != nil {
		return readErr(path, LMCacheFS, err), 0
	}
	defer f.Close()
	size := st.Size()
	e.Length = size
	var tail [lmcacheTrailer]byte
	payload := int64(-1)
	if size >= lmcacheTrailer {
		if _, err := f.ReadAt(tail[:], size-lmcacheTrailer); err != nil {
			return readErr(path, LMCacheFS, err), 0
		}
		if string(tail[:4]) == lmcacheMagic {
			payload = size - lmcacheTrailer
		}
	}
	var padding string
	if payload < 0 {
		blocks := odirectBlocks
		if bs > 0 {
			blocks = append([]int64{bs}, blocks...)
		}
		for _, b := range blocks {
			if size < b || size%b != 0 {
				continue
			}
			if _, err := f.ReadAt(tail[:], size-b); err != nil || string(tail[:4]) != lmcacheMagic {
				continue
			}
			payload = size - b
			if !zeros(f, size-b+lmcacheTrailer, b-lmcacheTrailer, buf) {
				padding = fmt.Sprintf("the O_DIRECT trailer block of %d bytes is not zero after its 8 bytes", b)
			}
			e.Note = fmt.Sprintf("O_DIRECT form: the trailer opens a %d-byte block", b)
			break
		}
	}
	if payload < 0 {
		// No trailer: a file the adapter wrote with checksum="none", one
		// whose trailer is damaged, or one cut short.
		var sum uint32
		read, err := hashRange(f, 0, size, buf, func(p []byte) { sum = crc32.Update(sum, crc32.IEEETable, p) })
		if err != nil {
			return readErr(path, LMCacheFS, err), read
		}
		e.Actual = hex4(sum)
		switch {
		case expect > size && isTrailerSize(expect-size, bs):
			// Its payload is whole: written without a trailer.
			e.Status, e.Problem = Unverified, ProblemNoChecksum
			e.Reason = fmt.Sprintf("no LMC1 trailer: its %d bytes are the payload the other files of its directory carry with a %d-byte trailer (written with checksum=\"none\", or the trailer was lost)", size, expect-size)
		case expect > size:
			e.Status, e.Problem = Mismatch, ProblemTruncated
			e.Reason = fmt.Sprintf("%d bytes and no LMC1 trailer, where the other files of its directory have %d: cut short", size, expect)
		case size >= lmcacheTrailer && nearMagic(tail[:4]):
			e.Status, e.Problem = Mismatch, ProblemTrailer
			e.Expected = hex4(binary.LittleEndian.Uint32(tail[4:]))
			e.Reason = fmt.Sprintf("the trailer's magic reads %x, not %x (LMC1): LMCache serves a miss and deletes the file", tail[:4], lmcacheMagic)
		default:
			e.Status, e.Problem = Unverified, ProblemNoChecksum
			e.Reason = "no LMC1 trailer (written with checksum=\"none\", or the trailer was lost)"
		}
		return e, read
	}
	stored := binary.LittleEndian.Uint32(tail[4:])
	var sum uint32
	read, err := hashRange(f, 0, payload, buf, func(p []byte) { sum = crc32.Update(sum, crc32.IEEETable, p) })
	if err != nil {
		return readErr(path, LMCacheFS, err), read
	}
	e.Expected, e.Actual = hex4(stored), hex4(sum)
	switch {
	case stored != sum:
		e.Status, e.Problem = Mismatch, ProblemChecksum
		e.Reason = fmt.Sprintf("the %d-byte payload differs from the CRC-32 in its trailer (LMCache serves a miss and deletes the file)", payload)
	case padding != "":
		e.Status, e.Problem, e.Reason = Mismatch, ProblemTrailer, padding
	case expect > size:
		e.Status, e.Problem = Mismatch, ProblemTruncated
		e.Reason = fmt.Sprintf("%d bytes where the other files of its directory have %d (its trailer verifies: written short)", size, expect)
	default:
		e.Status = Verified
	}
	return e, read
}

// isTrailerSize says whether n bytes are a trailer: the buffered 8, or an
// O_DIRECT block.
func isTrailerSize(n, bs int64) bool {
	return n == lmcacheTrailer || n == bs || slices.Contains(odirectBlocks, n)
}

// nearMagic says whether b is LMC1 with at most two of its four bytes
// changed: a damaged trailer rather than none.
func nearMagic(b []byte) bool {
	same := 0
	for i := range 4 {
		if b[i] == lmcacheMagic[i] {
			same++
		}
	}
	return same >= 2
}

// zeros says whether the n bytes of f at off are all zero.
func zeros(f interface {
	ReadAt([]byte, int64) (int, error)
}, off, n int64, buf []byte) bool {
	for n > 0 {
		k := min(int64(len(buf)), n)
		got, err := f.ReadAt(buf[:k], off)
		for _, c := range buf[:got] {
			if c != 0 {
				return false
			}
		}
		if err != nil || int64(got) < k {
			return false
		}
		off += k
		n -= k
	}
	return true
}

// checkFrame checks an lmcache-frame file.
func checkFrame(h *dirHandle, file, path string, name lmcacheName, expect int64, buf []byte) (Entry, int64) {
	e := Entry{Path: path, Format: LMCacheFrame, Name: name.Name, Algorithm: algXXH3}
	f, st, err := h.open(file)
	if err != nil {
		return readErr(path, LMCacheFrame, err), 0
	}
	defer f.Close()
	size := st.Size()
	e.Length = size
	if size < frameHeader {
		e.Status, e.Problem = Mismatch, ProblemTruncated
		e.Reason = fmt.Sprintf("truncated frame: %d bytes, less than the %d-byte header", size, frameHeader)
		return e, 0
	}
	var head [frameHeader]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return readErr(path, LMCacheFrame, err), 0
	}
	x := xxh3.New()
	read, err := hashRange(f, frameHeader, size-frameHeader, buf, func(p []byte) { x.Write(p) })
	if err != nil {
		return readErr(path, LMCacheFrame, err), read
	}
	stored := binary.BigEndian.Uint64(head[1+fingerprintLen:])
	sum := x.Sum64()
	e.Expected, e.Actual = hex8(stored), hex8(sum)
	want := fingerprint(name.chunk)
	switch {
	case head[0] != frameVersion:
		e.Status, e.Problem = Mismatch, ProblemVersion
		e.Reason = fmt.Sprintf("unknown frame version %d (the serde writes %d; LMCache raises ValueError and serves a miss)", head[0], frameVersion)
	case string(head[1:1+fingerprintLen]) != string(want):
		e.Status, e.Problem = Mismatch, ProblemFingerprint
		e.Reason = fmt.Sprintf("chunk fingerprint mismatch: the frame was stored for chunk %x..., its name says %x... (a payload in another chunk's file)", head[1:1+fingerprintLen], want)
	case expect > size:
		e.Status, e.Problem = Mismatch, ProblemTruncated
		e.Reason = fmt.Sprintf("truncated frame: %d bytes where the other frames of its directory have %d", size, expect)
	case stored != sum:
		e.Status, e.Problem = Mismatch, ProblemChecksum
		e.Reason = fmt.Sprintf("the %d-byte payload differs from the xxh3_64 in its frame (LMCache raises ValueError: the whole batch becomes misses)", size-frameHeader)
	default:
		e.Status = Verified
	}
	return e, read
}

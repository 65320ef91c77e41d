package scrub

import (
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

	"github.com/zeebo/xxh3"

	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/xattr"
)

// Block is one KV block (or chunk) of a store to write: its bytes and what
// its name says.
type Block struct {
	Model string
	// Rank is the TP rank of TP ranks whose shard Data is.
	Rank, TP int
	Group    int
	// Hash is the block's (vllm-fs) or chunk's (lmcache) hash, and, in
	// hex, a Mooncake record's key.
	Hash []byte
	Data []byte
}

// WriteStore writes blocks under dir as format's engine writes them, for
// kvaudit synth --store and tests: vllm-fs block files with their
// user.vllm.kv_crc32c xattr (left off, with a warning, where the
// filesystem keeps none), lmcache-fs files with the LMC1 trailer,
// lmcache-frame files framed by the checksum serde, and a Mooncake
// kv_cache.data and kv_cache.meta per rank (rank-<r>/). Every file is
// written under a temporary name and renamed when complete, never over an
// existing file. It returns the files written and warnings.
func WriteStore(dir string, format Format, blocks []Block) (files, warnings []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	switch format {
	case VLLMFS:
		return writeVLLM(dir, blocks)
	case LMCacheFS, LMCacheFrame:
		for _, b := range blocks {
			p := filepath.Join(dir, lmcacheFileName(b))
			data := lmcacheTrailed(b.Data)
			if format == LMCacheFrame {
				data = frame(b.Hash, b.Data)
			}
			if err := writeNew(p, data, nil); err != nil {
				return files, warnings, err
			}
			files = append(files, p)
		}
		return files, warnings, nil
	case MooncakeSSD:
		ranks := map[int][]Block{}
		for _, b := range blocks {
			ranks[b.Rank] = append(ranks[b.Rank], b)
		}
		keys := make([]int, 0, len(ranks))
		for r := range ranks {
			keys = append(keys, r)
		}
		slices.Sort(keys)
		for _, r := range keys {
			var recs []mcRecord
			for _, b := range ranks[r] {
				recs = append(recs, mcRecord{Key: hex.EncodeToString(b.Hash), Value: b.Data, CRC: true})
			}
			data, meta := mooncakeStore(recs)
			d := filepath.Join(dir, fmt.Sprintf("rank-%d", r))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return files, warnings, err
			}
			for _, f := range []struct {
				name string
				b    []byte
			}{{mooncakeData, data}, {mooncakeMeta, meta}} {
				p := filepath.Join(d, f.name)
				if err := writeNew(p, f.b, nil); err != nil {
					return files, warnings, err
				}
				files = append(files, p)
			}
		}
		return files, warnings, nil
	}
	return nil, nil, fmt.Errorf("no writer for store format %q", format)
}

// vllmFileName is the path vLLM's FS tier gives a block under its root
// (FileMapper.get_file_name), with cfg standing for the namespace's
// sha256(config)[:12]: <model>_<cfg>_r<rank>/<h[:3]>/<h[3:5]>_g<group>/<h>.bin.
func vllmFileName(b Block, cfg string) string {
	h := hex.EncodeToString(b.Hash)
	return filepath.Join(fmt.Sprintf("%s_%s_r%d", strings.ReplaceAll(b.Model, "/", "_"), cfg, b.Rank), h[:3], fmt.Sprintf("%s_g%d", h[3:5], b.Group), h+".bin")
}

func writeVLLM(dir string, blocks []Block) (files, warnings []string, err error) {
	cfg := sha256.Sum256([]byte("kvaudit synth --store vllm-fs"))
	noXattrs := false
	for _, b := range blocks {
		p := filepath.Join(dir, vllmFileName(b, hex.EncodeToString(cfg[:])[:12]))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return files, warnings, err
		}
		crc := make([]byte, 4)
		binary.BigEndian.PutUint32(crc, crc32.Checksum(b.Data, castagnoli))
		err := writeNew(p, b.Data, func(f *os.File) error {
			err := xattr.Set(f, vllmXattr, crc)
			if errors.Is(err, xattr.ErrUnsupported) {
				noXattrs = true
				return nil
			}
			return err
		})
		if err != nil {
			return files, warnings, err
		}
		files = append(files, p)
	}
	if noXattrs {
		warnings = append(warnings, fmt.Sprintf("the filesystem at %s keeps no extended attributes: the block files have no %s (a scrub finds them unverified)", dir, vllmXattr))
	}
	return files, warnings, nil
}

// writeNew writes data to path through a temporary file, calls before on
// it (an xattr set before the rename, as vLLM does), and renames it into
// place, refusing an existing file.
func writeNew(path string, data []byte, before func(*os.File) error) error {
	f, err := safeio.Create(path, false)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if before != nil {
		if err := before(f.File); err != nil {
			return fmt.Errorf("%q: %w", path, err)
		}
	}
	return f.Commit()
}

// lmcacheFileName is the name LMCache's FS L2 adapter gives a chunk
// (_object_key_to_filename): the model with "/" as "-SEP-", the kv_rank
// (world_size<<24)|(rank<<16)|(local_world_size<<8)|local_rank, the group
// and the chunk hash.
func lmcacheFileName(b Block) string {
	kvRank := uint32(b.TP)<<24 | uint32(b.Rank)<<16 | uint32(b.TP)<<8 | uint32(b.Rank)
	return fmt.Sprintf("%s@0x%08x@%x@%x.data", strings.ReplaceAll(b.Model, "/", lmcacheSlash), kvRank, b.Group, b.Hash)
}

// lmcacheTrailed is payload as the FS L2 adapter stores it with
// checksum="crc32" (buffered): the payload, "LMC1", zlib.crc32(payload)
// little-endian.
func lmcacheTrailed(payload []byte) []byte {
	out := append(slices.Clip(payload), lmcacheMagic...)
	return binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(payload))
}

// frame is payload framed by LMCache's checksum serde for chunk.
func frame(chunk, payload []byte) []byte {
	out := make([]byte, 0, frameHeader+len(payload))
	out = append(out, frameVersion)
	out = append(out, fingerprint(chunk)...)
	out = binary.BigEndian.AppendUint64(out, xxh3.Hash(payload))
	return append(out, payload...)
}

// mcRecord is a record to write: its key and value, and whether it
// carries a CRC (MOONCAKE_OFFSET_RECORD_CRC, on by default).
type mcRecord struct {
	Key   string
	Value []byte
	CRC   bool
}

// mooncakeRecordBytes is one record as BatchOffload writes it with write
// sequence number seq: the header (CRC-32C over its first 20 bytes, the
// key and the value, when crc), the key, zero padding, the value.
func mooncakeRecordBytes(key string, value []byte, seq uint64, crc bool) []byte {
	h := mcHeader{KeyLen: uint32(len(key)), ValueLen: uint32(len(value)), Seq: seq}
	if crc {
		h.Flags = flagHasCrc
	}
	out := h.Append(nil)
	if crc {
		c := crc32.Update(0, castagnoli, out[:recordPrefix])
		c = crc32.Update(c, castagnoli, []byte(key))
		c = crc32.Update(c, castagnoli, value)
		h.CRC = c
		out = h.Append(out[:0])
	}
	out = append(out, key...)
	out = append(out, make([]byte, int(h.ValueOffset())-len(out))...)
	return append(out, value...)
}

// mooncakeStore lays records out as the OffsetAllocator backend would
// leave them: each at a 4 KiB boundary of kv_cache.data (allocator units
// of 1<<12 bytes), with kv_cache.meta holding a version-3 checkpoint whose
// insert_seq follows the last record and whose allocator state marks each
// record's node used. (The allocator's free-space bins are left empty:
// enough for a scrub, which reads only the used nodes, not a state
// Mooncake would resume allocating from.)
func mooncakeStore(recs []mcRecord) (data, meta []byte) {
	const bits = 12
	var nodes []extent
	for i, r := range recs {
		off := uint64(len(data))
		rec := mooncakeRecordBytes(r.Key, r.Value, uint64(i), r.CRC)
		data = append(data, rec...)
		size := (uint64(len(rec)) + 1<<bits - 1) &^ (1<<bits - 1)
		data = append(data, make([]byte, size-uint64(len(rec)))...)
		nodes = append(nodes, extent{Offset: off, Size: size})
	}
	le := binary.LittleEndian
	cap := uint32(len(nodes) + 1)
	var st []byte
	st = le.AppendUint64(st, 0)                 // m_base
	st = le.AppendUint64(st, bits)              // m_multiplier_bits
	st = le.AppendUint64(st, uint64(len(data))) // m_capacity
	st = le.AppendUint64(st, uint64(len(data))) // m_allocated_size
	st = le.AppendUint64(st, uint64(len(nodes)))
	st = le.AppendUint32(st, uint32(len(data)>>bits)) // m_size
	st = le.AppendUint32(st, cap)                     // m_current_capacity
	st = le.AppendUint32(st, cap)                     // m_max_capacity
	st = le.AppendUint32(st, 0)                       // m_freeStorage
	st = le.AppendUint32(st, 0)                       // m_usedBinsTop
	st = append(st, make([]byte, 32)...)              // m_usedBins
	for range 256 {
		st = le.AppendUint32(st, 0xffffffff) // m_binIndices
	}
	st = le.AppendUint32(st, cap) // m_freeOffset
	for i := range int(cap) {
		var n [allocatorNode]byte
		for j := 8; j < 24; j += 4 {
			le.PutUint32(n[j:], 0xffffffff)
		}
		if i < len(nodes) {
			le.PutUint32(n[0:], uint32(nodes[i].Offset>>bits))
			le.PutUint32(n[4:], uint32(nodes[i].Size>>bits))
			n[24] = 1
		}
		st = append(st, n[:]...)
	}
	for i := range int(cap) {
		st = le.AppendUint32(st, uint32(i))
	}
	meta = protoVarint(meta, 1, mooncakeVersion)
	meta = protoBytes(meta, 2, st)
	meta = protoVarint(meta, 3, uint64(len(recs)))
	for i, r := range recs {
		var e []byte
		e = protoVarint(e, 1, uint64(i))
		e = protoBytes(e, 2, []byte(r.Key))
		meta = protoBytes(meta, 4, e)
	}
	return data, meta
}

func protoVarint(b []byte, num int, v uint64) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3)
	return binary.AppendUvarint(b, v)
}

func protoBytes(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

package scrub

import (
	"strings"

	"encoding/binary"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"hash/crc32"
	"path/filepath"
	"slices"
)

// Mooncake's OffsetAllocator SSD backend (PR #2932, merged as 30eff961;
// read at kvcache-ai/Mooncake @3b5a5941, whose record and allocator layouts
// are unchanged) keeps every record in <storage_filepath>/kv_cache.data
// and the allocator state that says where they are in kv_cache.meta
// (OffsetAllocatorStorageBackend::GetDataFilePath/GetMetaFilePath,
// mooncake-store/src/storage_backend.cpp).
const (
	mooncakeData = "kv_cache.data"
	mooncakeMeta = "kv_cache.meta"
	// mooncakeVersion is kOffsetAllocatorPersistVersion: v3 has the
	// 24-byte header with flags and the 4 KiB-aligned value.
	mooncakeVersion = 3
	// maxMetaSize bounds kv_cache.meta: 1<<24 allocator nodes (Mooncake's
	// own bound, kMaxSerializedNodes) at 32 bytes each, and the FIFO.
	maxMetaSize = 1 << 30
)

// A record (mcHeader, mooncake-store/include/storage_backend.h):
// [u32 key_len][u32 value_len][u64 seq][u32 flags][u32 crc32], little-
// endian, then the key, zero padding so that the value starts at a 4096
// boundary of the record, then the value. The CRC-32C covers the first 20
// header bytes, the key and the value, when flags bit 0 is set.
const (
	recordHeader    = 24
	recordPrefix    = 20
	valueAlignment  = 4096
	flagHasCrc      = 1
	knownFlags      = flagHasCrc
	maxKeyLen       = 1 << 20
	allocatorFixed  = 40 + 20 + 32 + 256*4 + 4
	allocatorNode   = 28
	allocatorMaxCap = 1 << 24
)

// mcHeader is a Mooncake SSD record's header.
type mcHeader struct {
	KeyLen, ValueLen uint32
	Seq              uint64
	Flags, CRC       uint32
}

// parseRecordHeader reads the 24-byte header at the start of b.
func parseRecordHeader(b []byte) (mcHeader, error) {
	if len(b) < recordHeader {
		return mcHeader{}, fmt.Errorf("%d bytes, less than the %d-byte record header", len(b), recordHeader)
	}
	le := binary.LittleEndian
	return mcHeader{KeyLen: le.Uint32(b), ValueLen: le.Uint32(b[4:]), Seq: le.Uint64(b[8:]), Flags: le.Uint32(b[16:]), CRC: le.Uint32(b[20:])}, nil
}

// Append appends the header's 24 bytes to b.
func (h mcHeader) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, h.KeyLen)
	b = le.AppendUint32(b, h.ValueLen)
	b = le.AppendUint64(b, h.Seq)
	b = le.AppendUint32(b, h.Flags)
	return le.AppendUint32(b, h.CRC)
}

// ValueOffset is where the value starts in the record.
func (h mcHeader) ValueOffset() uint64 {
	head := uint64(recordHeader) + uint64(h.KeyLen)
	return head + (valueAlignment-head%valueAlignment)%valueAlignment
}

// Size is the record's whole extent.
func (h mcHeader) Size() uint64 { return h.ValueOffset() + uint64(h.ValueLen) }

// mcMeta is what a scrub reads of kv_cache.meta.
type mcMeta struct {
	Version   uint32
	InsertSeq uint64
	// Keys maps a write's sequence number to its key (the FIFO index).
	Keys map[uint64]string
	// Extents are the allocator's used nodes: where records are.
	Extents []extent
}

// extent is one used allocator node.
type extent struct{ Offset, Size uint64 }

// parseMooncakeMeta reads kv_cache.meta: the struct_pb (protobuf) encoding
// of OffsetAllocatorPersistedMetadata, fields numbered in YLT_REFL order —
// 1 version, 2 allocator_state, 3 insert_seq, 4 fifo_entries {1 seq,
// 2 key}, 5 evicted_keys_this_batch — whose allocator_state is the
// OffsetAllocator's serialize_to bytes (mooncake-store/include/
// offset_allocator/offset_allocator.h). A field that cannot be right is an
// error naming it.
func parseMooncakeMeta(b []byte) (*mcMeta, error) {
	m, err := parseMeta(b)
	if err != nil {
		// "field: what": one parse.Error naming the field.
		field, msg, ok := strings.Cut(err.Error(), ": ")
		if !ok || strings.ContainsAny(field, " ") {
			field, msg = "", err.Error()
		}
		return nil, &parse.Error{Format: metaFormat, Field: field, Msg: msg}
	}
	return m, nil
}

// metaFormat is how a *parse.Error names a Mooncake kv_cache.meta.
const metaFormat = "mooncake kv_cache.meta"

func parseMeta(b []byte) (*mcMeta, error) {
	m := &mcMeta{Keys: map[uint64]string{}}
	var state []byte
	err := protoFields(b, func(num int, wire int, v uint64, data []byte) error {
		switch num {
		case 1:
			if wire != 0 || v > 1<<32-1 {
				return fmt.Errorf("version: not a uint32")
			}
			m.Version = uint32(v)
		case 2:
			if wire != 2 {
				return fmt.Errorf("allocator_state: not bytes")
			}
			state = data
		case 3:
			if wire != 0 {
				return fmt.Errorf("insert_seq: not a varint")
			}
			m.InsertSeq = v
		case 4:
			if wire != 2 {
				return fmt.Errorf("fifo_entries: not a message")
			}
			var seq uint64
			var key string
			if err := protoFields(data, func(n, w int, v uint64, d []byte) error {
				switch {
				case n == 1 && w == 0:
					seq = v
				case n == 2 && w == 2:
					key = string(d)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("fifo_entries: %v", err)
			}
			m.Keys[seq] = key
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.Version != mooncakeVersion {
		return nil, fmt.Errorf("version: %d, where this scrub reads version %d (the 24-byte record header)", m.Version, mooncakeVersion)
	}
	if len(state) == 0 {
		return nil, fmt.Errorf("allocator_state: empty")
	}
	ext, err := parseAllocator(state)
	if err != nil {
		return nil, fmt.Errorf("allocator_state: %v", err)
	}
	m.Extents = ext
	return m, nil
}

// parseAllocator reads OffsetAllocator::serialize_to's bytes (native,
// little-endian on the machines Mooncake runs on): m_base, m_multiplier_bits,
// m_capacity, m_allocated_size, m_allocated_num (u64 each), then
// __Allocator's m_size, m_current_capacity, m_max_capacity, m_freeStorage,
// m_usedBinsTop (u32), m_usedBins[32] (u8), m_binIndices[256] (u32),
// m_freeOffset (u32), m_current_capacity 28-byte Nodes {dataOffset,
// dataSize, binListPrev, binListNext, neighborPrev, neighborNext (u32),
// used (bool), 3 bytes padding} and m_current_capacity free-node indices.
// A used node is a record at m_base + dataOffset<<m_multiplier_bits of
// dataSize<<m_multiplier_bits bytes (visit_used_nodes).
func parseAllocator(b []byte) ([]extent, error) {
	le := binary.LittleEndian
	if len(b) < allocatorFixed {
		return nil, fmt.Errorf("%d bytes, less than the %d-byte fixed part", len(b), allocatorFixed)
	}
	base, bits := le.Uint64(b), le.Uint64(b[8:])
	if bits >= 32 {
		return nil, fmt.Errorf("m_multiplier_bits %d is not below 32", bits)
	}
	cur, maxCap := le.Uint32(b[44:]), le.Uint32(b[48:])
	if maxCap == 0 || maxCap > allocatorMaxCap || cur > maxCap {
		return nil, fmt.Errorf("m_current_capacity %d, m_max_capacity %d: not 0 < current <= max <= %d", cur, maxCap, allocatorMaxCap)
	}
	want := allocatorFixed + uint64(cur)*(allocatorNode+4)
	if uint64(len(b)) != want {
		return nil, fmt.Errorf("%d bytes, where %d nodes make %d", len(b), cur, want)
	}
	var ext []extent
	nodes := b[allocatorFixed:]
	for i := range uint64(cur) {
		n := nodes[i*allocatorNode:]
		if n[24] == 0 {
			continue
		}
		ext = append(ext, extent{Offset: base + uint64(le.Uint32(n))<<bits, Size: uint64(le.Uint32(n[4:])) << bits})
	}
	slices.SortFunc(ext, func(a, b extent) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	return ext, nil
}

// protoFields calls fn for every field of the protobuf message b: its
// number, wire type, varint value (wire 0, and the fixed ones) or bytes
// (wire 2).
func protoFields(b []byte, fn func(num, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("a field tag that is not a varint")
		}
		b = b[n:]
		num, wire := int(tag>>3), int(tag&7)
		if num == 0 || tag>>3 > 1<<29 {
			return fmt.Errorf("field number %d", tag>>3)
		}
		var v uint64
		var data []byte
		switch wire {
		case 0:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("field %d: a truncated varint", num)
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("field %d: truncated", num)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("field %d: truncated", num)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: a length past the end", num)
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("field %d: wire type %d", num, wire)
		}
		if err := fn(num, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) planMooncake(d *dirRoot, rel string, files []string, dir func() *dirState) int {
	hasData := slices.Contains(files, mooncakeData)
	for _, f := range files {
		if f != mooncakeData && f != mooncakeMeta {
			reason := "not kv_cache.data or kv_cache.meta"
			if f == mooncakeMeta+".tmp" {
				reason = "a temporary file of a checkpoint in progress (Mooncake renames it into place when complete)"
			}
			w.skip(filepath.Join(rel, f), reason)
		}
	}
	if !hasData {
		if slices.Contains(files, mooncakeMeta) {
			w.skip(filepath.Join(rel, mooncakeMeta), "a kv_cache.meta without its kv_cache.data")
		}
		return 0
	}
	dataPath, metaPath := w.show(filepath.Join(rel, mooncakeData)), w.show(filepath.Join(rel, mooncakeMeta))
	ds := dir()
	meta, err := readMeta(d.dirHandle)
	if err != nil {
		e := Entry{Path: dataPath, Format: MooncakeSSD, Status: Unverified, Problem: ProblemRead,
			Reason: fmt.Sprintf("its records cannot be located: %s: %v", metaPath, err)}
		w.queue(d, ds, func([]byte, func(Entry)) int64 { ds.add(e); return 0 })
		return 1
	}
	// The records are checked on every thread: a job per run of them.
	const perJob = 64
	for i := 0; i < len(meta.Extents); i += perJob {
		ext := meta.Extents[i:min(i+perJob, len(meta.Extents))]
		w.queue(d, ds, func(buf []byte, add func(Entry)) int64 {
			return checkRecords(d.dirHandle, dataPath, meta, ext, buf, add)
		})
	}
	return 1
}

// checkRecords checks the records of kv_cache.data at ext, which
// kv_cache.meta locates.
func checkRecords(h *dirHandle, dataPath string, meta *mcMeta, ext []extent, buf []byte, add func(Entry)) int64 {
	f, st, err := h.open(mooncakeData)
	if err != nil {
		add(readErr(dataPath, MooncakeSSD, err))
		return 0
	}
	defer f.Close()
	size := uint64(st.Size())
	var total int64
	for _, x := range ext {
		e := Entry{Path: dataPath, Format: MooncakeSSD, Offset: int64(x.Offset), Length: int64(x.Size), Algorithm: algCRC32C}
		if x.Offset+recordHeader > size {
			e.Status, e.Problem = Mismatch, ProblemTruncated
			e.Reason = fmt.Sprintf("the allocator places a record at %d, past the end of kv_cache.data (%d bytes)", x.Offset, size)
			add(e)
			continue
		}
		var hb [recordHeader]byte
		if _, err := f.ReadAt(hb[:], int64(x.Offset)); err != nil {
			add(readErr(dataPath, MooncakeSSD, err))
			continue
		}
		h, _ := parseRecordHeader(hb[:])
		seq := h.Seq
		e.Name.Seq = &seq
		e.Expected = hex4(h.CRC)
		switch {
		case h.KeyLen > maxKeyLen:
			e.Status, e.Problem = Mismatch, ProblemHeader
			e.Reason = fmt.Sprintf("key_len %d is over Mooncake's %d bound: not a record header (Mooncake's recovery drops it)", h.KeyLen, maxKeyLen)
			add(e)
			continue
		case h.Flags&^knownFlags != 0:
			e.Status, e.Problem = Mismatch, ProblemHeader
			e.Reason = fmt.Sprintf("unknown flags %#x (Mooncake's recovery drops the record)", h.Flags)
			add(e)
			continue
		case h.Size() > x.Size:
			e.Status, e.Problem = Mismatch, ProblemHeader
			e.Reason = fmt.Sprintf("the header says %d bytes, more than its %d-byte allocation (Mooncake's recovery drops it)", h.Size(), x.Size)
			add(e)
			continue
		}
		e.Length = int64(h.Size())
		key := make([]byte, h.KeyLen)
		if k, _ := f.ReadAt(key, int64(x.Offset)+recordHeader); k < len(key) {
			e.Status, e.Problem = Mismatch, ProblemTruncated
			e.Reason = fmt.Sprintf("the record's key runs past the end of kv_cache.data (%d bytes)", size)
			add(e)
			continue
		}
		e.Name.Key = string(key)
		crc := crc32.Update(0, castagnoli, hb[:recordPrefix])
		crc = crc32.Update(crc, castagnoli, key)
		read, err := hashRange(f, int64(x.Offset+h.ValueOffset()), int64(h.ValueLen), buf, func(p []byte) { crc = crc32.Update(crc, castagnoli, p) })
		total += read + int64(len(key)) + recordHeader
		if err != nil {
			add(readErr(dataPath, MooncakeSSD, err))
			continue
		}
		if h.Seq >= meta.InsertSeq {
			e.Note = fmt.Sprintf("written after the checkpoint (seq %d, insert_seq %d): Mooncake's recovery drops it", h.Seq, meta.InsertSeq)
		} else if k, ok := meta.Keys[h.Seq]; ok && k != e.Name.Key {
			e.Note = fmt.Sprintf("the checkpoint's FIFO has key %q for seq %d", k, h.Seq)
		}
		switch {
		case read < int64(h.ValueLen):
			e.Actual = hex4(crc)
			e.Status, e.Problem = Mismatch, ProblemTruncated
			e.Reason = fmt.Sprintf("the value runs past the end of kv_cache.data (%d bytes): %d of its %d bytes are there", size, read, h.ValueLen)
		case h.Flags&flagHasCrc == 0:
			e.Actual, e.Expected = hex4(crc), ""
			e.Status, e.Problem = Unverified, ProblemNoChecksum
			e.Reason = "written without a CRC (flags bit 0 clear: MOONCAKE_OFFSET_RECORD_CRC=0, or a DMA writer)"
		case crc != h.CRC:
			e.Actual = hex4(crc)
			e.Status, e.Problem = Mismatch, ProblemChecksum
			e.Reason = "the record's header, key or value differs from its CRC-32C (Mooncake's recovery skips it)"
		default:
			e.Actual = hex4(crc)
			e.Status = Verified
		}
		add(e)
	}
	return total
}

func readMeta(h *dirHandle) (*mcMeta, error) {
	f, st, err := h.open(mooncakeMeta)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > maxMetaSize {
		return nil, fmt.Errorf("%d bytes, more than the %d-byte limit", st.Size(), maxMetaSize)
	}
	b := make([]byte, st.Size())
	if k, err := f.ReadAt(b, 0); k < len(b) {
		return nil, fmt.Errorf("read %d of %d bytes: %v", k, len(b), err)
	}
	return parseMooncakeMeta(b)
}

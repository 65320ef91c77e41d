package scrub

import (
	"encoding/binary"
	"fmt"
	"os"
)

// Layout is where an entry's KV bytes and its stored checksum lie: the
// payload's and the checksum's [offset, offset+length) in the entry's
// file, or, for vllm-fs, the xattr that holds the checksum (Checksum is
// then zero). Header is a Mooncake record header's offset (-1 for the
// other formats).
type Layout struct {
	Payload, Checksum [2]int64
	Xattr             string
	Header            int64
}

// LayoutOf reads where the payload and the stored checksum of a verified
// entry lie (kvaudit inject's store faults change one or the other).
func LayoutOf(e Entry) (Layout, error) {
	f, err := os.Open(e.Path)
	if err != nil {
		return Layout{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Layout{}, err
	}
	size := st.Size()
	l := Layout{Header: -1}
	switch e.Format {
	case VLLMFS:
		l.Payload, l.Xattr = [2]int64{0, size}, xattrName(e.Algorithm)
	case LMCacheFrame:
		if size < frameHeader {
			return l, fmt.Errorf("%q: not a frame", e.Path)
		}
		l.Payload, l.Checksum = [2]int64{frameHeader, size - frameHeader}, [2]int64{1 + fingerprintLen, 8}
	case LMCacheFS:
		var tail [lmcacheTrailer]byte
		for _, b := range append([]int64{lmcacheTrailer}, odirectBlocks...) {
			if size < b || (b != lmcacheTrailer && size%b != 0) {
				continue
			}
			if _, err := f.ReadAt(tail[:], size-b); err == nil && string(tail[:4]) == lmcacheMagic {
				l.Payload, l.Checksum = [2]int64{0, size - b}, [2]int64{size - b + 4, 4}
				return l, nil
			}
		}
		return l, fmt.Errorf("%q: no LMC1 trailer", e.Path)
	case MooncakeSSD:
		var hb [recordHeader]byte
		if _, err := f.ReadAt(hb[:], e.Offset); err != nil {
			return l, err
		}
		h, _ := parseRecordHeader(hb[:])
		l.Payload = [2]int64{e.Offset + int64(h.ValueOffset()), int64(h.ValueLen)}
		l.Checksum, l.Header = [2]int64{e.Offset + recordPrefix, 4}, e.Offset
	default:
		return l, fmt.Errorf("format %q", e.Format)
	}
	return l, nil
}

// RecordFlagsAt is the offset of the flags field in a record header.
const RecordFlagsAt = 16

// ClearRecordCRC rewrites a record header as BatchOffload writes it with
// MOONCAKE_OFFSET_RECORD_CRC=0: flags bit 0 clear, crc32 zero.
func ClearRecordCRC(h []byte) {
	binary.LittleEndian.PutUint32(h[RecordFlagsAt:], binary.LittleEndian.Uint32(h[RecordFlagsAt:])&^flagHasCrc)
	binary.LittleEndian.PutUint32(h[recordPrefix:], 0)
}

package wire

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"math"
	"slices"

	"github.com/kvaudit/kvaudit/parse"
)

// EncodePayloadBase64 returns the standard padded base64 of EncodePayload(p).
func EncodePayloadBase64(p *Payload) (string, error) {
	b, err := EncodePayload(p)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// EncodePayload returns the msgpack bytes exactly as Python msgspec encodes
// the same tuple structure: arrays, the smallest encoding of each integer
// (positive fixint, uint8, uint16, uint32, uint64), and bin8/16/32 holding
// the little-endian values. Values nil and empty encode alike; a Mix that
// is not nil adds the nested form's sixth element (kvaudit's mix check),
// and must hold len(Values) values.
//
// It returns a *parse.Error, and no bytes, for a payload that a producer
// does not send (DecodePayload lets some of these pass, as vLLM's consumer
// does): a nil payload, an unknown form, a value
// out of the documented bounds (group_id <= 2^31-1; num_tokens and start
// <= 2^40; in the nested form tp_size in [1, 65536] and block_size in
// [1, 2^20]), a non-zero TPSize, BlockSize or Mix in the flat form, which
// cannot carry them, a Mix of another length than Values, or a duplicate
// group id. So DecodePayload(EncodePayload(p))
// equals p, up to nil versus empty Values.
func EncodePayload(p *Payload) ([]byte, error) {
	if err := checkPayload(p); err != nil {
		return nil, err
	}
	size := 0
	if p.Form == FormNested {
		size += 3 + uintSize(uint64(p.NumTokens)) + uintSize(uint64(p.TPSize))
	} else {
		size += 2 + uintSize(uint64(p.NumTokens))
	}
	size += arrayHeaderSize(len(p.Groups))
	for i := range p.Groups {
		g := &p.Groups[i]
		size += 1 + uintSize(uint64(g.ID)) + uintSize(g.Fingerprint) + uintSize(uint64(g.Start))
		if p.Form == FormNested {
			size += uintSize(uint64(g.BlockSize))
		}
		n := 8 * len(g.Values)
		size += binHeaderSize(n) + n
		if g.Mix != nil {
			size += binHeaderSize(n) + n
		}
	}

	b := make([]byte, 0, size)

	if p.Form == FormNested {
		b = appendArrayHeader(b, 2)
		b = appendUint(b, payloadVersion)
		b = appendArrayHeader(b, 3)
		b = appendUint(b, uint64(p.NumTokens))
		b = appendUint(b, uint64(p.TPSize))
	} else {
		b = appendArrayHeader(b, 3)
		b = appendUint(b, payloadVersion)
		b = appendUint(b, uint64(p.NumTokens))
	}
	b = appendArrayHeader(b, len(p.Groups))
	for i := range p.Groups {
		g := &p.Groups[i]
		switch {
		case p.Form == FormNested && g.Mix != nil:
			b = appendArrayHeader(b, 6)
		case p.Form == FormNested:
			b = appendArrayHeader(b, 5)
		default:
			b = appendArrayHeader(b, 4)
		}
		b = appendUint(b, uint64(g.ID))
		b = appendUint(b, g.Fingerprint)
		b = appendUint(b, uint64(g.Start))
		if p.Form == FormNested {
			b = appendUint(b, uint64(g.BlockSize))
		}
		b = appendBinHeader(b, 8*len(g.Values))
		for _, v := range g.Values {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		if g.Mix != nil {
			b = appendBinHeader(b, 8*len(g.Mix))
			for _, v := range g.Mix {
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		}
	}
	return b, nil
}

// checkPayload applies the bounds that decoding enforces to a payload
// about to be encoded.
func checkPayload(p *Payload) error {
	if p == nil {
		return &parse.Error{Format: parse.Payload, Msg: "nil payload"}
	}
	nested := false
	switch p.Form {
	case FormNested:
		nested = true
	case FormFlat:
	default:
		return payloadErrorf(topField("form"), "unknown payload form %d", int(p.Form))
	}
	if err := checkRange(topField("num_tokens"), p.NumTokens, 0, payloadMaxTokens); err != nil {
		return err
	}
	if nested {
		if err := checkRange(topField("tp_size"), p.TPSize, 1, payloadMaxTPSize); err != nil {
			return err
		}
	} else if p.TPSize != 0 {
		return payloadErrorf(topField("tp_size"), "tp_size %d is not carried by the flat form (want 0)", p.TPSize)
	}
	if uint64(len(p.Groups)) > math.MaxUint32 {
		return payloadErrorf(topField("groups"), "%d groups do not fit a msgpack array", len(p.Groups))
	}
	for i := range p.Groups {
		g := &p.Groups[i]
		if err := checkRange(fieldRef{i, "id"}, g.ID, 0, payloadMaxGroupID); err != nil {
			return err
		}
		if err := checkRange(fieldRef{i, "start"}, g.Start, 0, payloadMaxTokens); err != nil {
			return err
		}
		if nested {
			if err := checkRange(fieldRef{i, "block_size"}, g.BlockSize, 1, payloadMaxBlockSize); err != nil {
				return err
			}
		} else if g.BlockSize != 0 {
			return payloadErrorf(fieldRef{i, "block_size"}, "block_size %d is not carried by the flat form (want 0)", g.BlockSize)
		}
		if g.Mix != nil && !nested {
			return payloadErrorf(fieldRef{i, "mix"}, "the flat form does not carry the mix check (want nil)")
		}
		if g.Mix != nil && len(g.Mix) != len(g.Values) {
			return payloadErrorf(fieldRef{i, "mix"}, "%d values, values has %d", len(g.Mix), len(g.Values))
		}
		if uint64(len(g.Values)) > payloadMaxBin/8 {
			return payloadErrorf(fieldRef{i, "values"}, "%d values do not fit a msgpack bin", len(g.Values))
		}
	}
	return checkDuplicateIDs(p.Groups)
}

func checkRange(f fieldRef, v, lo, hi int) error {
	if v < lo || v > hi {
		return payloadErrorf(f, "value %d is out of range [%d, %d]", v, lo, hi)
	}
	return nil
}

// checkDuplicateIDs reports the first group, in wire order, whose id an
// earlier group already has. It allocates 4 bytes per group at most
// (8 past 2^31 groups).
func checkDuplicateIDs(groups []PayloadGroup) error {
	var first, dup int
	switch {
	case len(groups) <= 16:
		first, dup = firstDuplicateSmall(groups)
	case len(groups) <= math.MaxInt32:
		first, dup = firstDuplicate[int32](groups)
	default:
		first, dup = firstDuplicate[int](groups)
	}
	if dup < 0 {
		return nil
	}
	return payloadErrorf(fieldRef{dup, "id"}, "duplicate group id %d (also groups[%d])", groups[dup].ID, first)
}

// firstDuplicateSmall returns the indexes of the first occurrence and of the
// earliest repeat of a group id, or -1, -1; it does not allocate.
func firstDuplicateSmall(groups []PayloadGroup) (first, dup int) {
	for j := 1; j < len(groups); j++ {
		for i := 0; i < j; i++ {
			if groups[i].ID == groups[j].ID {
				return i, j
			}
		}
	}
	return -1, -1
}

// firstDuplicate is firstDuplicateSmall by sorting group indexes of type I
// by (id, index).
func firstDuplicate[I int32 | int](groups []PayloadGroup) (first, dup int) {
	order := make([]I, len(groups))
	for i := range order {
		order[i] = I(i)
	}
	slices.SortFunc(order, func(a, b I) int {
		if c := cmp.Compare(groups[a].ID, groups[b].ID); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	first, dup = -1, -1
	// In a run of equal ids the first entry is the first occurrence and the
	// second the earliest repeat.
	for k := 1; k < len(order); k++ {
		i, j := int(order[k-1]), int(order[k])
		if groups[i].ID != groups[j].ID || (k >= 2 && groups[order[k-2]].ID == groups[j].ID) {
			continue
		}
		if dup < 0 || j < dup {
			first, dup = i, j
		}
	}
	return first, dup
}

func uintSize(v uint64) int {
	switch {
	case v <= 0x7f:
		return 1
	case v <= math.MaxUint8:
		return 2
	case v <= math.MaxUint16:
		return 3
	case v <= math.MaxUint32:
		return 5
	}
	return 9
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func arrayHeaderSize(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func binHeaderSize(n int) int {
	switch {
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}

package wire

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/kvaudit/kvaudit/parse"
)

// DecodePayloadBase64 decodes a payload from its text as vLLM's consumer
// does: Python's base64.b64decode without validate (characters outside
// the standard alphabet, such as newlines and spaces, are discarded;
// padding is required; decoding stops at the first padded quad), then
// DecodePayload. Each leniency becomes a note of the payload. It returns a
// nil payload and a *parse.Error (Field "base64" for the text itself) for
// malformed input, and allocates at most about len(s) bytes besides what
// DecodePayload allocates.
func DecodePayloadBase64(s string) (*Payload, error) {
	b, notes, err := pythonB64Decode(s)
	if err != nil {
		return nil, err
	}
	p, err := DecodePayload(b)
	if err != nil {
		return nil, err
	}
	p.Notes = append(notes, p.Notes...)
	return p, nil
}

// nativeLittleEndian says whether uint64 memory is little-endian, so
// that values decoded in place need no conversion.
var nativeLittleEndian = func() bool {
	x := uint64(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// NewPayloadBuffer returns a zeroed buffer of n bytes whose memory is
// 8-aligned uint64 memory, for DecodePayloadInPlace.
func NewPayloadBuffer(n int) []byte {
	if n <= 0 {
		return []byte{}
	}
	u := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), n)
}

// DecodePayloadInPlace decodes a payload from buf, which holds its base64
// text (as DecodePayloadBase64 reads it) or, when text is false, its
// msgpack bytes, reusing buf's memory: the decoded bytes and every
// group's Values live in buf, which the payload then owns (the caller
// must not use buf again). So decoding allocates only the groups' headers
// besides buf (docs/spec.md §8: bounded by the input's size). buf must come from
// NewPayloadBuffer (8-aligned); other memory is decoded by copying.
func DecodePayloadInPlace(buf []byte, text bool) (*Payload, error) {
	var notes []string
	if text {
		var err error
		var n int
		if n, notes, err = pythonB64DecodeInto(buf, buf); err != nil {
			return nil, err
		}
		buf = buf[:n]
	}
	r := payloadReader{b: buf, inPlace: len(buf) > 0 && uintptr(unsafe.Pointer(&buf[0]))%8 == 0}
	p, err := r.payload()
	if err != nil {
		return nil, err
	}
	p.Notes = append(notes, p.Notes...)
	return p, nil
}

// DecodePayload decodes a payload from msgpack in either form, telling
// them apart by shape: a 3-element top array is the flat form, a 2-element
// one whose second element is an array the nested form. Integers may use
// any msgpack integer encoding; arrays and bins any header size. As vLLM's
// consumer decodes it, num_tokens, a group's id, fingerprint and start
// take any integer (a negative one, or a group id listed twice, becomes a
// note: the last entry of an id is kept); tp_size and block_size must be
// in bounds (see EncodePayload).
//
// It returns a nil payload and a *parse.Error for anything else: an empty
// or truncated input, a version other than 1, an out-of-bounds tp_size or
// block_size, an array of another length than the form allows (or a group
// count the bytes left cannot hold), nil, bool, float, str, map or ext
// where an integer, array or bin is due, a values bin whose length is not
// a multiple of 8, or trailing bytes.
//
// It never panics, never recurses, and allocates at most about ten times
// len(b): every declared length is checked against the bytes left before
// anything is allocated for it, and bins are read in place. The payload
// does not retain b.
func DecodePayload(b []byte) (*Payload, error) {
	r := payloadReader{b: b}
	return r.payload()
}

// payloadReader reads the subset of msgpack a payload uses, straight from
// the input, peeking each type code before it reads a value.
type payloadReader struct {
	b   []byte
	off int
	// inPlace makes every group's Values a view of b (8-aligned): each
	// bin's data is moved down to b[placed:] once its headers are read,
	// and converted to native order there.
	inPlace bool
	placed  int
}

func (r *payloadReader) payload() (*Payload, error) {
	top := topField("top level")
	if len(r.b) == 0 {
		return nil, &parse.Error{Format: parse.Payload, Msg: "empty input"}
	}
	n, err := r.arrayLen(top)
	if err != nil {
		return nil, err
	}
	if n != 2 && n != 3 {
		return nil, payloadErrorf(top, "array length %d, want 3 (flat form) or 2 (nested form)", n)
	}
	if err := r.version(); err != nil {
		return nil, err
	}
	p := &Payload{}
	if n == 3 {
		p.Form = FormFlat
		if p.NumTokens, err = r.lenientInt(topField("num_tokens"), &p.Notes); err != nil {
			return nil, err
		}
	} else {
		p.Form = FormNested
		body := topField("body")
		c, err := r.peek(body)
		if err != nil {
			return nil, err
		}
		if !isArrayCode(c) {
			return nil, payloadErrorf(body, "a 2-element payload holds an array [num_tokens, tp_size, groups] (nested form), found %s", codeName(c))
		}
		m, err := r.arrayLen(body)
		if err != nil {
			return nil, err
		}
		if m != 3 {
			return nil, payloadErrorf(body, "array length %d, want 3 [num_tokens, tp_size, groups]", m)
		}
		if p.NumTokens, err = r.lenientInt(topField("num_tokens"), &p.Notes); err != nil {
			return nil, err
		}
		if p.TPSize, err = r.intIn(topField("tp_size"), 1, payloadMaxTPSize); err != nil {
			return nil, err
		}
	}
	if p.Groups, err = r.groups(p.Form, &p.Notes); err != nil {
		return nil, err
	}
	if r.off != len(r.b) {
		return nil, payloadErrorf(top, "trailing bytes after the payload: %d at offset %d", len(r.b)-r.off, r.off)
	}
	p.Groups = keepLast(p.Groups, &p.Notes)
	return p, nil
}

// keepLast drops every group whose id a later group repeats, as the dict
// vLLM's consumer builds keeps the last entry, with a note per id. It
// allocates 5 bytes per group (a group takes at least 6 on the wire).
func keepLast(groups []PayloadGroup, notes *[]string) []PayloadGroup {
	if checkDuplicateIDs(groups) == nil {
		return groups
	}
	order := make([]int32, len(groups))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(cmp.Compare(groups[a].ID, groups[b].ID), cmp.Compare(a, b))
	})
	drop := make([]bool, len(groups))
	var repeated [][2]int // (id, kept index), few in practice
	for k := 0; k+1 < len(order); k++ {
		i, j := order[k], order[k+1]
		if groups[i].ID == groups[j].ID {
			drop[i] = true
			if len(repeated) == 0 || repeated[len(repeated)-1][0] != groups[i].ID {
				repeated = append(repeated, [2]int{groups[i].ID, 0})
			}
			repeated[len(repeated)-1][1] = int(j)
		}
	}
	for n, r := range repeated {
		if n == 8 {
			*notes = append(*notes, fmt.Sprintf("%d more group ids listed more than once", len(repeated)-n))
			break
		}
		*notes = append(*notes, fmt.Sprintf("group id %d listed more than once: the last entry (groups[%d]) is used, as vLLM's consumer does", r[0], r[1]))
	}
	kept := groups[:0]
	for i := range groups {
		if !drop[i] {
			kept = append(kept, groups[i])
		}
	}
	return kept
}

// Clamps of integers decoded leniently: msgspec takes any integer in
// [-2^63, 2^64-1]; values beyond these bounds behave the same in every
// comparison (no block in common) and keep products far from overflow.
const lenientMax = 1 << 50

// lenientInt reads any msgpack integer as vLLM's consumer does (msgspec
// int), clamped to [-2^50, 2^50]; a negative value is kept, with a note.
func (r *payloadReader) lenientInt(f fieldRef, notes *[]string) (int, error) {
	u, s, neg, err := r.integer(f)
	if err != nil {
		return 0, err
	}
	if neg {
		*notes = append(*notes, fmt.Sprintf("%s is negative (%d): decoded and judged by the verdict rules, as vLLM's consumer does", f, s))
		return int(max(s, -lenientMax)), nil
	}
	return int(min(u, lenientMax)), nil
}

func (r *payloadReader) version() error {
	f := topField("version")
	u, s, neg, err := r.integer(f)
	if err != nil {
		return err
	}
	if neg {
		return payloadErrorf(f, "unsupported payload version %d", s)
	}
	if u != payloadVersion {
		return payloadErrorf(f, "unsupported payload version %d", u)
	}
	return nil
}

func (r *payloadReader) groups(form PayloadForm, notes *[]string) ([]PayloadGroup, error) {
	gf := topField("groups")
	n, err := r.arrayLen(gf)
	if err != nil {
		return nil, err
	}
	want, minBytes := uint64(5), uint64(minNestedGroupBytes)
	if form == FormFlat {
		want, minBytes = 4, minFlatGroupBytes
	}
	if left := uint64(len(r.b) - r.off); n > left/minBytes {
		return nil, payloadErrorf(gf, "array claims %d groups but only %d bytes are left (a group takes at least %d)", n, left, minBytes)
	}
	if n == 0 {
		return nil, nil
	}
	groups := make([]PayloadGroup, n)
	for i := range groups {
		g := &groups[i]
		m, err := r.arrayLen(fieldRef{i, ""})
		if err != nil {
			return nil, err
		}
		// The nested form's sixth element is kvaudit's mix check
		// (docs/spec.md §14), optional: five-element groups decode as
		// before it existed.
		if m != want && (form != FormNested || m != want+1) {
			if form == FormNested {
				return nil, payloadErrorf(fieldRef{i, ""}, "array length %d, want 5 or 6 (%s form)", m, form)
			}
			return nil, payloadErrorf(fieldRef{i, ""}, "array length %d, want %d (%s form)", m, want, form)
		}
		// Any integer, as msgspec decodes it: an id no consumer group has
		// (negative, huge) is simply a group the consumer lacks.
		if g.ID, err = r.lenientID(fieldRef{i, "id"}); err != nil {
			return nil, err
		}
		u, neg, err := r.anyInt(fieldRef{i, "fingerprint"})
		if err != nil {
			return nil, err
		}
		g.Fingerprint, g.NegativeFingerprint = u, neg
		if neg {
			*notes = append(*notes, fmt.Sprintf("%s is negative: it equals no fingerprint", fieldRef{i, "fingerprint"}))
		}
		if g.Start, err = r.lenientInt(fieldRef{i, "start"}, notes); err != nil {
			return nil, err
		}
		if form == FormNested {
			if g.BlockSize, err = r.intIn(fieldRef{i, "block_size"}, 1, payloadMaxBlockSize); err != nil {
				return nil, err
			}
		}
		if g.Values, err = r.uint64s(fieldRef{i, "values"}); err != nil {
			return nil, err
		}
		if m == want+1 {
			mf := fieldRef{i, "mix"}
			if g.Mix, err = r.uint64s(mf); err != nil {
				return nil, err
			}
			if g.Mix == nil {
				g.Mix = []uint64{}
			}
			if len(g.Mix) != len(g.Values) {
				return nil, payloadErrorf(mf, "%d values, values has %d", len(g.Mix), len(g.Values))
			}
		}
	}
	return groups, nil
}

// uint64s reads a bin of little-endian uint64s (nil when empty): in place
// when the reader decodes in place, else into a new slice.
func (r *payloadReader) uint64s(f fieldRef) ([]uint64, error) {
	bin, err := r.bin(f)
	if err != nil {
		return nil, err
	}
	if len(bin)%8 != 0 {
		return nil, payloadErrorf(f, "bin length %d is not a multiple of 8", len(bin))
	}
	var vals []uint64
	switch {
	case len(bin) == 0:
	case r.inPlace:
		// Everything before the bin's end is read: its bytes may be
		// overwritten. placed stays a multiple of 8.
		dst := r.b[r.placed : r.placed+len(bin)]
		copy(dst, bin)
		vals = unsafe.Slice((*uint64)(unsafe.Pointer(&dst[0])), len(bin)/8)
		if !nativeLittleEndian {
			for k := range vals {
				vals[k] = binary.LittleEndian.Uint64(dst[8*k:])
			}
		}
		r.placed += len(bin)
	default:
		vals = make([]uint64, len(bin)/8)
		for k := range vals {
			vals[k] = binary.LittleEndian.Uint64(bin[8*k:])
		}
	}
	return vals, nil
}

func (r *payloadReader) peek(f fieldRef) (byte, error) {
	if r.off >= len(r.b) {
		return 0, payloadErrorf(f, "input ends at offset %d where a value is due", r.off)
	}
	return r.b[r.off], nil
}

// take returns the next n bytes of the input, in place. what and code
// describe them in the error for a short input ("bin8 (0xc4)" + " data").
func (r *payloadReader) take(f fieldRef, code byte, what string, n uint64) ([]byte, error) {
	left := uint64(len(r.b) - r.off)
	if n > left {
		return nil, payloadErrorf(f, "%s%s of %d bytes at offset %d runs past the end of the input (%d bytes left)", codeName(code), what, n, r.off, left)
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// header reads the type code and the big-endian length or value of width
// bytes that follows it.
func (r *payloadReader) header(f fieldRef, width int) (uint64, error) {
	c := r.b[r.off]
	h, err := r.take(f, c, " header", uint64(1+width))
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, x := range h[1:] {
		v = v<<8 | uint64(x)
	}
	return v, nil
}

func (r *payloadReader) arrayLen(f fieldRef) (uint64, error) {
	c, err := r.peek(f)
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.off++
		return uint64(c & 0x0f), nil
	case c == 0xdc:
		return r.header(f, 2)
	case c == 0xdd:
		return r.header(f, 4)
	}
	return 0, payloadErrorf(f, "want an array, found %s", codeName(c))
}

func (r *payloadReader) bin(f fieldRef) ([]byte, error) {
	c, err := r.peek(f)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case 0xc4:
		n, err = r.header(f, 1)
	case 0xc5:
		n, err = r.header(f, 2)
	case 0xc6:
		n, err = r.header(f, 4)
	default:
		return nil, payloadErrorf(f, "want bin, found %s", codeName(c))
	}
	if err != nil {
		return nil, err
	}
	return r.take(f, c, " data", n)
}

// integer reads any msgpack integer. A non-negative value is returned in
// u; a negative one in s, with neg set.
func (r *payloadReader) integer(f fieldRef) (u uint64, s int64, neg bool, err error) {
	c, err := r.peek(f)
	if err != nil {
		return 0, 0, false, err
	}
	var width int
	signed := false
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), 0, false, nil
	case c >= 0xe0:
		r.off++
		return 0, int64(int8(c)), true, nil
	case c >= 0xcc && c <= 0xcf:
		width = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		width, signed = 1<<(c-0xd0), true
	default:
		return 0, 0, false, payloadErrorf(f, "want an integer, found %s", codeName(c))
	}
	v, err := r.header(f, width)
	if err != nil {
		return 0, 0, false, err
	}
	if signed {
		// Sign-extend from width bytes.
		shift := 64 - 8*uint(width)
		if x := int64(v<<shift) >> shift; x < 0 {
			return 0, x, true, nil
		}
	}
	return v, 0, false, nil
}

// lenientID reads a group id of any integer value; ids outside
// [0, 2^31-1] (no group of any dump) become -1 - (their low 31 bits), a
// negative id no consumer group has, distinct for distinct small
// negative values.
func (r *payloadReader) lenientID(f fieldRef) (int, error) {
	u, s, neg, err := r.integer(f)
	if err != nil {
		return 0, err
	}
	switch {
	case neg:
		return int(max(s, -lenientMax)), nil
	case u > payloadMaxGroupID:
		return -lenientMax - 1 - int(u%lenientMax), nil
	}
	return int(u), nil
}

// anyInt reads any integer: its two's complement bits, and whether it
// was negative.
func (r *payloadReader) anyInt(f fieldRef) (uint64, bool, error) {
	u, s, neg, err := r.integer(f)
	if neg {
		return uint64(s), true, err
	}
	return u, false, err
}

func (r *payloadReader) intIn(f fieldRef, lo, hi uint64) (int, error) {
	u, s, neg, err := r.integer(f)
	if err != nil {
		return 0, err
	}
	if neg {
		return 0, payloadErrorf(f, "value %d is out of range [%d, %d]", s, lo, hi)
	}
	if u < lo || u > hi {
		return 0, payloadErrorf(f, "value %d is out of range [%d, %d]", u, lo, hi)
	}
	return int(u), nil
}

func isArrayCode(c byte) bool {
	return (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd
}

// codeName names a msgpack type code for error messages, e.g.
// "fixstr (0xa5)" or "float64 (0xcb)".
func codeName(c byte) string {
	var name string
	switch {
	case c <= 0x7f:
		name = "positive fixint"
	case c <= 0x8f:
		name = "fixmap"
	case c <= 0x9f:
		name = "fixarray"
	case c <= 0xbf:
		name = "fixstr"
	case c >= 0xe0:
		name = "negative fixint"
	default:
		name = [...]string{
			"nil", "unused code", "false", "true", "bin8", "bin16", "bin32",
			"ext8", "ext16", "ext32", "float32", "float64",
			"uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
			"fixext1", "fixext2", "fixext4", "fixext8", "fixext16",
			"str8", "str16", "str32", "array16", "array32", "map16", "map32",
		}[c-0xc0]
	}
	return fmt.Sprintf("%s (0x%02x)", name, c)
}

package checksum

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// PayloadForm is the shape of a payload on the wire (docs/spec.md §8).
type PayloadForm int

const (
	// FormNested is
	// [1, [num_tokens, tp_size, [[group_id, fingerprint, start, block_size, values], ...]]].
	// kvaudit writes it by default.
	FormNested PayloadForm = iota
	// FormFlat is [1, num_tokens, [[group_id, fingerprint, start, values], ...]],
	// the form without tp_size and block sizes.
	FormFlat
)

// ParsePayloadForm returns the form named "nested" or "flat" (exactly, as
// String writes them); any other name is an error.
func ParsePayloadForm(s string) (PayloadForm, error) {
	switch s {
	case "nested":
		return FormNested, nil
	case "flat":
		return FormFlat, nil
	}
	return 0, fmt.Errorf("unknown payload form %q (want \"nested\" or \"flat\")", s)
}

// String returns "nested" or "flat", or "PayloadForm(N)" for a value that
// is neither.
func (f PayloadForm) String() string {
	switch f {
	case FormNested:
		return "nested"
	case FormFlat:
		return "flat"
	}
	return fmt.Sprintf("PayloadForm(%d)", int(f))
}

// Bounds of the integers a payload carries. Decoding rejects a value outside
// them and EncodePayload refuses to write one; they keep every value an int
// on every platform and every product of them far from overflow.
const (
	payloadVersion      = 1
	payloadMaxGroupID   = math.MaxInt32 // group_id in [0, 2^31-1]
	payloadMaxTokens    = 1 << 40       // num_tokens and start in [0, 2^40]
	payloadMaxTPSize    = 1 << 16       // tp_size in [1, 65536] (nested form)
	payloadMaxBlockSize = 1 << 20       // block_size in [1, 2^20] (nested form)
	payloadMaxBin       = math.MaxUint32
)

// The fewest bytes one group can take on the wire: a fixarray header, one
// positive fixint per integer and an empty bin8 (2 bytes). A claimed group
// count is checked against the bytes left with these, so the groups slice
// is never larger than a small multiple of the input.
const (
	minFlatGroupBytes   = 1 + 3 + 2
	minNestedGroupBytes = 1 + 4 + 2
)

// A Payload is a producer's whole-model checks for one request (check 0
// only), as carried in vLLM's kv_transfer_params["kv_checksums"].
type Payload struct {
	Form      PayloadForm
	NumTokens int
	TPSize    int // 0 in the flat form (not carried)
	Groups    []PayloadGroup
	// Notes name the leniencies decoding applied as vLLM's consumer does
	// (docs/spec.md §8): characters discarded from the base64, a group id
	// listed twice, a negative start or num_tokens, ...
	Notes []string
}

// A PayloadGroup is one KV cache group's checks in a payload.
type PayloadGroup struct {
	ID          int
	Fingerprint uint64
	Start       int
	BlockSize   int      // 0 in the flat form
	Values      []uint64 // one per block position start, start+1, ...
	// NegativeFingerprint marks a fingerprint sent as a negative integer:
	// vLLM's consumer decodes it and it equals no fingerprint (those are
	// taken mod 2^64), so the group is unverified.
	NegativeFingerprint bool
}

// A PayloadError says why a payload is malformed, or why EncodePayload
// refused one. Field names the offending element as the wire format names
// it ("version", "num_tokens", "tp_size", "body", "groups",
// "groups[2].values", ...), "base64" for the text around the msgpack, or
// is empty when the error concerns the input as a whole.
type PayloadError struct {
	Field string
	Msg   string
}

// Error returns "payload: FIELD: MSG", or "payload: MSG" without a field.
func (e *PayloadError) Error() string {
	if e.Field == "" {
		return "payload: " + e.Msg
	}
	return "payload: " + e.Field + ": " + e.Msg
}

// fieldRef names a payload element without formatting it, so that the
// decoder builds a name only when it reports an error. group < 0 means a
// top-level element called name; otherwise it is groups[group].name, or
// groups[group] itself when name is empty.
type fieldRef struct {
	group int
	name  string
}

func topField(name string) fieldRef { return fieldRef{group: -1, name: name} }

func (f fieldRef) String() string {
	switch {
	case f.group < 0:
		return f.name
	case f.name == "":
		return fmt.Sprintf("groups[%d]", f.group)
	}
	return fmt.Sprintf("groups[%d].%s", f.group, f.name)
}

func payloadErrorf(f fieldRef, format string, args ...any) error {
	return &PayloadError{Field: f.String(), Msg: fmt.Sprintf(format, args...)}
}

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
// the little-endian values. Values nil and empty encode alike.
//
// It returns a *PayloadError, and no bytes, for a payload that a producer
// does not send (DecodePayload lets some of these pass, as vLLM's consumer
// does): a nil payload, an unknown form, a value
// out of the documented bounds (group_id <= 2^31-1; num_tokens and start
// <= 2^40; in the nested form tp_size in [1, 65536] and block_size in
// [1, 2^20]), a non-zero TPSize or BlockSize in the flat form, which cannot
// carry them, or a duplicate group id. So DecodePayload(EncodePayload(p))
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
		if p.Form == FormNested {
			b = appendArrayHeader(b, 5)
		} else {
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
	}
	return b, nil
}

// checkPayload applies the bounds that decoding enforces to a payload
// about to be encoded.
func checkPayload(p *Payload) error {
	if p == nil {
		return &PayloadError{Msg: "nil payload"}
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

// DecodePayloadBase64 decodes a payload from its text as vLLM's consumer
// does: Python's base64.b64decode without validate (characters outside
// the standard alphabet, such as newlines and spaces, are discarded;
// padding is required; decoding stops at the first padded quad), then
// DecodePayload. Each leniency becomes a note of the payload. It returns a
// nil payload and a *PayloadError (Field "base64" for the text itself) for
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

// pythonB64Decode is CPython's binascii.a2b_base64 in non-strict mode, as
// base64.b64decode(s) (validate=False) calls it: non-ASCII text is an
// error; other characters outside the alphabet are skipped; '=' before the
// third character of a quad is skipped; a quad completed by padding ends
// the input (what follows is ignored); a last quad of 1 character, or of 2
// or 3 without its padding, is an error ("Incorrect padding").
func pythonB64Decode(s string) ([]byte, []string, error) {
	out := make([]byte, len(s)/4*3+3)
	n, notes, err := pythonB64DecodeInto(out, s)
	if err != nil {
		return nil, nil, err
	}
	return out[:n], notes, nil
}

// pythonB64DecodeInto is pythonB64Decode writing into out (at least
// len(s)*3/4+3 bytes, or s itself: the output never passes the input).
func pythonB64DecodeInto[T string | []byte](out []byte, s T) (int, []string, error) {
	base := topField("base64")
	lo, hi := 0, len(s)
	for lo < hi && isSpace(s[lo]) {
		lo++
	}
	for hi > lo && isSpace(s[hi-1]) {
		hi--
	}
	for i := lo; i < hi; i++ {
		if s[i] >= 0x80 {
			return 0, nil, payloadErrorf(base, "non-ASCII byte 0x%02x at offset %d (Python's b64decode refuses the text)", s[i], i)
		}
	}
	n := 0
	var quad, pads, skipped int
	var left byte
	stopped := -1
	for i := lo; i < hi; i++ {
		c := s[i]
		if c == '=' {
			if quad >= 2 {
				pads++
				if quad+pads >= 4 {
					stopped = i + 1
					break
				}
			} else {
				skipped++
			}
			continue
		}
		v := b64Value(c)
		if v < 0 {
			skipped++
			continue
		}
		pads = 0
		switch quad {
		case 0:
			left, quad = byte(v), 1
		case 1:
			out[n] = left<<2 | byte(v)>>4
			n++
			left, quad = byte(v)&0x0f, 2
		case 2:
			out[n] = left<<4 | byte(v)>>2
			n++
			left, quad = byte(v)&0x03, 3
		case 3:
			out[n] = left<<6 | byte(v)
			n++
			quad = 0
		}
	}
	if stopped < 0 && quad != 0 {
		if quad == 1 {
			return 0, nil, payloadErrorf(base, "one character past a multiple of 4 (text truncated)")
		}
		return 0, nil, payloadErrorf(base, "incorrect padding (padding missing or text truncated)")
	}
	if n == 0 {
		return 0, nil, payloadErrorf(base, "empty input")
	}
	var notes []string
	if skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d characters outside the base64 alphabet discarded, as Python's b64decode does", skipped))
	}
	if stopped >= 0 && stopped < hi {
		notes = append(notes, fmt.Sprintf("%d characters after the padding ignored, as Python's b64decode does", hi-stopped))
	}
	return n, notes, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// b64Value is the value of a character of the standard alphabet, or -1.
func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
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
// It returns a nil payload and a *PayloadError for anything else: an empty
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
		return nil, &PayloadError{Msg: "empty input"}
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
		if m != want {
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
		vf := fieldRef{i, "values"}
		bin, err := r.bin(vf)
		if err != nil {
			return nil, err
		}
		if len(bin)%8 != 0 {
			return nil, payloadErrorf(vf, "bin length %d is not a multiple of 8", len(bin))
		}
		switch {
		case len(bin) == 0:
		case r.inPlace:
			// Everything before the bin's end is read: its bytes may be
			// overwritten. placed stays a multiple of 8.
			dst := r.b[r.placed : r.placed+len(bin)]
			copy(dst, bin)
			g.Values = unsafe.Slice((*uint64)(unsafe.Pointer(&dst[0])), len(bin)/8)
			if !nativeLittleEndian {
				for k := range g.Values {
					g.Values[k] = binary.LittleEndian.Uint64(dst[8*k:])
				}
			}
			r.placed += len(bin)
		default:
			g.Values = make([]uint64, len(bin)/8)
			for k := range g.Values {
				g.Values[k] = binary.LittleEndian.Uint64(bin[8*k:])
			}
		}
	}
	return groups, nil
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

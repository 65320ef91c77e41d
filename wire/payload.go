package wire

import (
	"fmt"
	"math"

	"github.com/kvaudit/kvaudit/parse"
)

// PayloadForm is the shape of a payload on the wire (docs/spec.md §8).
type PayloadForm int

const (
	// FormNested is
	// [1, [num_tokens, tp_size, [[group_id, fingerprint, start, block_size, values(, mix)], ...]]].
	// kvaudit writes it by default, with the optional sixth element mix
	// (kvaudit's mix check, docs/spec.md §14) when it has it.
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
	// Mix is kvaudit's mix check (docs/spec.md §14) at the same positions,
	// the nested form's optional sixth element; nil when not carried (the
	// flat form never carries it).
	Mix []uint64
	// NegativeFingerprint marks a fingerprint sent as a negative integer:
	// vLLM's consumer decodes it and it equals no fingerprint (those are
	// taken mod 2^64), so the group is unverified.
	NegativeFingerprint bool
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
	return &parse.Error{Format: parse.Payload, Field: f.String(), Msg: fmt.Sprintf(format, args...)}
}

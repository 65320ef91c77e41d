package inject

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// Payload faults: a producer payload (kv_transfer_params) tampered with or
// broken on its way to the consumer. Positions are the producer's.

// Payload fault kinds.
const (
	PayloadFlip     Kind = "payload-flip"
	PayloadTruncate Kind = "payload-truncate"
	PayloadVersion  Kind = "payload-version"
	PayloadNesting  Kind = "payload-nesting"
)

var payloadFlip = kindDef{
	kind:     PayloadFlip,
	models:   "a tampered producer payload: one bit of a checksum value flipped",
	detector: DetectPayload,
	plan:     payloadPlan((*tamper).flipValue),
}

var payloadTruncate = kindDef{
	kind:     PayloadTruncate,
	models:   "a producer payload cut short",
	detector: DetectPayload,
	plan: payloadPlan(func(t *tamper) error {
		id, _, err := t.pickRequest()
		if err != nil {
			return err
		}
		text := t.payloads[id]
		n := t.rng.IntN(len(text))
		t.cut(id, n)
		t.expectInvalid(id)
		t.f.Description = fmt.Sprintf("cut request %q's payload to %d of its %d base64 characters", id, n, len(text))
		return nil
	}),
}

var payloadVersion = kindDef{
	kind:     PayloadVersion,
	models:   "a producer payload with another format version",
	detector: DetectPayload,
	plan: payloadPlan(func(t *tamper) error {
		id, orig, err := t.pickRequest()
		if err != nil {
			return err
		}
		b := slices.Clone(orig)
		for b[1] == orig[1] {
			b[1] = byte(2 + t.rng.IntN(126)) // a positive fixint other than 1
		}
		t.rewrite(id, b)
		t.expectInvalid(id)
		t.f.Description = fmt.Sprintf("set the version of request %q's payload to %d", id, b[1])
		return nil
	}),
}

var payloadNesting = kindDef{
	kind:     PayloadNesting,
	models:   "a hostile producer payload: deeply nested arrays",
	detector: DetectPayload,
	plan: payloadPlan(func(t *tamper) error {
		id, _, err := t.pickRequest()
		if err != nil {
			return err
		}
		depth := 1000 + t.rng.IntN(20000)
		b := append([]byte{0x92, 0x01}, slices.Repeat([]byte{0x91}, depth)...)
		t.rewrite(id, append(b, 0x90))
		t.expectInvalid(id)
		t.f.Description = fmt.Sprintf("replaced the body of request %q's payload with %d nested arrays", id, depth)
		return nil
	}),
}

// payloadValue is one checksum value of a payload: request id's group
// index gi, value index i (group id group, producer position position).
type payloadValue struct {
	id              string
	gi, i           int
	group, position int
}

// flipValue flips Bits bits of one checksum value of a payload: the
// comparison must be a mismatch at that position.
func (t *tamper) flipValue() error {
	target := t.opts.Target
	var values []payloadValue
	for _, id := range t.ids {
		for gi, g := range t.encoded[id].Groups {
			if target.Group != nil && g.ID != *target.Group {
				continue
			}
			for i := range g.Values {
				pos := g.Start + i
				if (target.Position != nil && pos != *target.Position) || !t.opts.allows(id, g.ID, pos) {
					continue
				}
				values = append(values, payloadValue{id, gi, i, g.ID, pos})
			}
		}
	}
	if len(values) == 0 {
		return t.na("no checksum value in the producer's payloads to flip")
	}
	if _, _, err := t.pickRequest(); err != nil { // drawn, as every payload kind draws a request first
		return err
	}
	v := pick(t.rng, values)
	p := *t.encoded[v.id]
	p.Groups = slices.Clone(p.Groups)
	g := &p.Groups[v.gi]
	g.Values = slices.Clone(g.Values)
	n := max(t.opts.Bits, 1)
	if n > 64 {
		return &OptionError{Option: "Bits", Value: strconv.Itoa(n), Msg: "a checksum value holds 64 bits"}
	}
	var b [8]byte
	flipped := flipBits(t.rng, b[:], n)
	for k := range 8 {
		g.Values[v.i] ^= uint64(b[k]) << (8 * k)
	}
	tampered, err := wire.EncodePayload(&p)
	if err != nil {
		return err
	}
	t.rewrite(v.id, tampered)
	f := t.f
	f.Description = fmt.Sprintf("flipped bit(s) %v of the checksum value of group %d position %d in request %q's payload", flipped, v.group, v.position, v.id)
	f.Expect.Verdict = string(verify.Mismatch)
	f.Expect.Requests = []RequestExpect{{ID: v.id, Verdict: string(verify.Mismatch), Groups: []GroupExpect{{ID: v.group, Positions: []int{v.position}}}}}
	f.Affected = []Place{{v.id, v.group, v.position}}
	return nil
}

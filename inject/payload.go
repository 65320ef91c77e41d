package inject

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// PayloadsFile is the name of the payloads a payload fault writes.
const PayloadsFile = "payloads.json"

// injectPayload checksums the producer side and writes its payloads, one
// of them tampered.
func injectPayload(ctx context.Context, dumps []*layout.Dump, out string, opts Options) (*Fault, error) {
	c, err := verify.Compute(ctx, dumps, checksum.Options{Engine: opts.Engine})
	if err != nil {
		return nil, err
	}
	if !c.Complete {
		return nil, fmt.Errorf("fault %s: give every rank of the producer (a payload holds whole-model checks)", opts.Kind)
	}
	payloads, f, err := TamperPayload(c, opts)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(payloads, "", " ")
	if err != nil {
		return nil, err
	}
	if err := checkOut(out, opts.Force); err != nil {
		return nil, err
	}
	err = staged(out, opts.Force, func(stage string) error {
		if err := writeNew(filepath.Join(stage, PayloadsFile), append(b, '\n')); err != nil {
			return err
		}
		return writeFault(stage, f)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// TamperPayload returns the payload of every request of the producer
// checks c (request id -> base64, in opts.PayloadForm), one of them
// tampered as opts.Kind says (payload-flip, payload-truncate,
// payload-version, payload-nesting), and the fault. A flipped value must
// be a mismatch at its position; a payload that no longer decodes leaves
// its load unverified ("the producer's checksums are invalid").
func TamperPayload(c *verify.Checks, opts Options) (map[string]string, *Fault, error) {
	info, ok := InfoOf(opts.Kind)
	if !ok || info.Input != InputPayload {
		return nil, nil, fmt.Errorf("fault %s: not a payload fault", opts.Kind)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind)))
	t := opts.Target
	payloads := map[string]string{}
	encoded := map[string]*wire.Payload{}
	var ids []string
	for _, r := range c.Requests {
		p, err := verify.NewPayload(c, r, opts.PayloadForm)
		if err != nil {
			continue // no payload for a request not every rank reported
		}
		text, err := wire.EncodePayloadBase64(p)
		if err != nil {
			return nil, nil, fmt.Errorf("request %q: %w", r.ID, err)
		}
		payloads[r.ID], encoded[r.ID] = text, p
		if t.Request == "" || t.Request == r.ID {
			ids = append(ids, r.ID)
		}
	}
	if t.Request != "" && len(ids) == 0 {
		return nil, nil, &OptionError{Option: "Target.Request", Value: strconv.Quote(t.Request), Msg: "the producer holds no such request with a payload"}
	}
	na := func(format string, args ...any) error {
		return &NotApplicableError{Kind: opts.Kind, Msg: fmt.Sprintf(format, args...)}
	}
	f := &Fault{
		Format: FaultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: InputPayload, Detector: info.Detector,
		File: PayloadsFile, Changes: []Change{}, Affected: []Place{},
		Expect: Expect{Verdict: string(verify.Unverified)},
	}
	type value struct {
		id       string
		g, i     int // group index, value index
		group    int
		position int
	}
	var values []value
	if opts.Kind == PayloadFlip {
		for _, id := range ids {
			for gi, g := range encoded[id].Groups {
				if t.Group != nil && g.ID != *t.Group {
					continue
				}
				for i := range g.Values {
					pos := g.Start + i
					if (t.Position != nil && pos != *t.Position) || (opts.Allow != nil && !opts.Allow(id, g.ID, pos)) {
						continue
					}
					values = append(values, value{id, gi, i, g.ID, pos})
				}
			}
		}
		if len(values) == 0 {
			return nil, nil, na("no checksum value in the producer's payloads to flip")
		}
	}
	if len(ids) == 0 {
		return nil, nil, na("the producer has no request with a payload")
	}
	id := pick(rng, ids)
	var v value
	if opts.Kind == PayloadFlip {
		v = pick(rng, values)
		id = v.id
	}
	orig, _ := base64.StdEncoding.DecodeString(payloads[id])
	var tampered []byte
	pc := &PayloadChange{Request: id, Form: opts.PayloadForm.String(), File: PayloadsFile, Original: payloads[id]}
	switch opts.Kind {
	case PayloadFlip:
		p := *encoded[id]
		p.Groups = slices.Clone(p.Groups)
		g := &p.Groups[v.g]
		g.Values = slices.Clone(g.Values)
		n := max(opts.Bits, 1)
		if n > 64 {
			return nil, nil, &OptionError{Option: "Bits", Value: strconv.Itoa(n), Msg: "a checksum value holds 64 bits"}
		}
		var b [8]byte
		flipped := flipBits(rng, b[:], n)
		for k := range 8 {
			g.Values[v.i] ^= uint64(b[k]) << (8 * k)
		}
		var err error
		if tampered, err = wire.EncodePayload(&p); err != nil {
			return nil, nil, err
		}
		f.Description = fmt.Sprintf("flipped bit(s) %v of the checksum value of group %d position %d in request %q's payload", flipped, v.group, v.position, id)
		f.Expect.Verdict = string(verify.Mismatch)
		f.Expect.Requests = []RequestExpect{{ID: id, Verdict: string(verify.Mismatch), Groups: []GroupExpect{{ID: v.group, Positions: []int{v.position}}}}}
		f.Affected = []Place{{id, v.group, v.position}}
	case PayloadVersion:
		tampered = slices.Clone(orig)
		old := tampered[1]
		for tampered[1] == old {
			tampered[1] = byte(2 + rng.IntN(126)) // a positive fixint other than 1
		}
		f.Description = fmt.Sprintf("set the version of request %q's payload to %d", id, tampered[1])
	case PayloadNesting:
		depth := 1000 + rng.IntN(20000)
		tampered = append([]byte{0x92, 0x01}, slices.Repeat([]byte{0x91}, depth)...)
		tampered = append(tampered, 0x90)
		f.Description = fmt.Sprintf("replaced the body of request %q's payload with %d nested arrays", id, depth)
	case PayloadTruncate:
		n := rng.IntN(len(payloads[id]))
		pc.TextLength = n
		pc.Tampered = payloads[id][:n]
		f.Description = fmt.Sprintf("cut request %q's payload to %d of its %d base64 characters", id, n, len(payloads[id]))
	}
	if tampered != nil {
		pc.Tampered = base64.StdEncoding.EncodeToString(tampered)
		pc.Msgpack = byteChanges(orig, tampered)
	}
	if opts.Kind != PayloadFlip {
		f.Expect.Requests = []RequestExpect{{ID: id, Verdict: string(verify.Unverified), Reason: verify.ReasonInvalidChecksums, Groups: []GroupExpect{}}}
	}
	payloads[id] = pc.Tampered
	f.Request, f.Payload = id, pc
	return payloads, f, nil
}

// byteChanges returns the ranges where b differs from a, and a range
// covering whatever b adds past a's end (or a's bytes b drops).
func byteChanges(a, b []byte) []Change {
	var out []Change
	n := min(len(a), len(b))
	for i := 0; i < n; {
		if a[i] == b[i] {
			i++
			continue
		}
		j := i
		for j < n && a[j] != b[j] {
			j++
		}
		out = append(out, Change{Tensor: "msgpack", Offset: int64(i), Length: int64(j - i)})
		i = j
	}
	if len(a) != len(b) {
		out = append(out, Change{Tensor: "msgpack", Offset: int64(n), Length: int64(max(len(a), len(b)) - n)})
	}
	return out
}

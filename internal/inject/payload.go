package inject

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// PayloadsFile is the name of the payloads a payload fault writes.
const PayloadsFile = "payloads.json"

// injectPayload checksums the producer side and writes its payloads, one
// of them tampered.
func injectPayload(ctx context.Context, dumps []*layout.Dump, out string, def *kindDef, plan payloadPlan, opts Options) (*Fault, error) {
	c, err := side.Compute(ctx, dumps, checksum.Options{Engine: opts.Engine})
	if err != nil {
		return nil, err
	}
	if !c.Complete {
		return nil, fmt.Errorf("fault %s: give every rank of the producer (a payload holds whole-model checks)", opts.Kind)
	}
	payloads, f, err := tamperWith(c, def, plan, opts)
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

// tamperPayload returns the payload of every request of the producer
// checks c (request id -> base64, in opts.PayloadForm), one of them
// tampered as opts.Kind, a payload kind, says, and the fault. A flipped
// value must be a mismatch at its position; a payload that no longer
// decodes leaves its load unverified ("the producer's checksums are
// invalid").
func tamperPayload(c *side.Checks, opts Options) (map[string]string, *Fault, error) {
	if def := lookup(opts.Kind); def != nil {
		if plan, ok := def.plan.(payloadPlan); ok {
			return tamperWith(c, def, plan, opts)
		}
	}
	return nil, nil, fmt.Errorf("fault %s: not a payload fault", opts.Kind)
}

// tamper is a payload fault in the making: the producer's payloads, the
// requests the target allows, and the fault the kind's payloadPlan fills
// (through pickRequest, rewrite or cut, and the expectations).
type tamper struct {
	opts     Options
	rng      *rand.Rand
	f        *Fault
	payloads map[string]string // request id -> base64
	encoded  map[string]*wire.Payload
	// ids are the target's requests with a payload, in the producer's
	// order.
	ids []string
}

func tamperWith(c *side.Checks, def *kindDef, plan payloadPlan, opts Options) (map[string]string, *Fault, error) {
	t := &tamper{
		opts:     opts,
		rng:      rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind))),
		payloads: map[string]string{},
		encoded:  map[string]*wire.Payload{},
	}
	target := opts.Target
	for _, r := range c.Requests {
		p, err := side.NewPayload(c, r, opts.PayloadForm)
		if err != nil {
			continue // no payload for a request not every rank reported
		}
		text, err := wire.EncodePayloadBase64(p)
		if err != nil {
			return nil, nil, fmt.Errorf("request %q: %w", r.ID, err)
		}
		t.payloads[r.ID], t.encoded[r.ID] = text, p
		if target.Request == "" || target.Request == r.ID {
			t.ids = append(t.ids, r.ID)
		}
	}
	if target.Request != "" && len(t.ids) == 0 {
		return nil, nil, &OptionError{Option: "Target.Request", Value: strconv.Quote(target.Request), Msg: "the producer holds no such request with a payload"}
	}
	t.f = &Fault{
		Format: faultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: InputPayload, Detector: def.detector,
		File: PayloadsFile, Changes: []Change{}, Affected: []Place{},
		Expect: Expect{Verdict: string(verify.Unverified)},
	}
	if err := plan(t); err != nil {
		return nil, nil, err
	}
	pc := t.f.Payload
	t.payloads[pc.Request] = pc.Tampered
	return t.payloads, t.f, nil
}

func (t *tamper) na(format string, args ...any) error {
	return &NotApplicableError{Kind: t.opts.Kind, Msg: fmt.Sprintf(format, args...)}
}

// pickRequest picks the request whose payload the fault tampers with and
// returns it with its payload's msgpack.
func (t *tamper) pickRequest() (string, []byte, error) {
	if len(t.ids) == 0 {
		return "", nil, t.na("the producer has no request with a payload")
	}
	id := pick(t.rng, t.ids)
	orig, _ := base64.StdEncoding.DecodeString(t.payloads[id])
	return id, orig, nil
}

// change starts the fault's description of request id's payload.
func (t *tamper) change(id string) *PayloadChange {
	pc := &PayloadChange{Request: id, Form: t.opts.PayloadForm.String(), File: PayloadsFile, Original: t.payloads[id]}
	t.f.Request, t.f.Payload = id, pc
	return pc
}

// rewrite replaces request id's payload with the msgpack b, and records
// the byte ranges that differ.
func (t *tamper) rewrite(id string, b []byte) {
	orig, _ := base64.StdEncoding.DecodeString(t.payloads[id])
	pc := t.change(id)
	pc.Tampered = base64.StdEncoding.EncodeToString(b)
	pc.Msgpack = byteChanges(orig, b)
}

// cut cuts request id's payload text to n characters.
func (t *tamper) cut(id string, n int) {
	pc := t.change(id)
	pc.TextLength = n
	pc.Tampered = t.payloads[id][:n]
}

// expectInvalid expects request id's load to be unverified: its payload
// no longer decodes.
func (t *tamper) expectInvalid(id string) {
	t.f.Expect.Requests = []RequestExpect{{ID: id, Verdict: string(verify.Unverified), Reason: verify.ReasonInvalidChecksums, Groups: []GroupExpect{}}}
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

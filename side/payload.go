package side

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvaudit/kvaudit/wire"
)

// PayloadRequest returns the producer checks a decoded payload carries,
// as request id: check 0 of each group, with the nested fingerprint and
// block size of a nested payload, or the flat fingerprint alone (FlatOnly,
// BlockSize 0) of a flat one. TPSize is the payload's (0 for the flat
// form). The groups are sorted by id and share no memory with p.
func PayloadRequest(id string, p *wire.Payload) *RequestChecks {
	return payloadRequest(id, p, true)
}

// payloadRequestInPlace decodes a payload held in buf (base64 text, or
// msgpack when text is false) in place (wire.DecodePayloadInPlace) into the
// producer checks of request id, which keep buf's memory: decoding a
// payload file costs about its size once. A malformed payload gives a
// request unverified with ReasonInvalidChecksums and the decoding error.
func payloadRequestInPlace(id string, buf []byte, text bool) (*RequestChecks, error) {
	p, err := wire.DecodePayloadInPlace(buf, text)
	if err != nil {
		return invalidRequest(id, ReasonInvalidChecksums), err
	}
	return payloadRequest(id, p, false), nil
}

func payloadRequest(id string, p *wire.Payload, clone bool) *RequestChecks {
	r := &RequestChecks{ID: id, NumTokens: p.NumTokens, TPSize: p.TPSize, Notes: slices.Clone(p.Notes)}
	for _, g := range p.Groups {
		vals := g.Values
		if clone {
			vals = slices.Clone(vals)
		}
		gc := &GroupChecks{ID: g.ID, Start: g.Start, BlockSize: g.BlockSize, Checks: [][]uint64{vals}, BadFingerprint: g.NegativeFingerprint, FromPayload: true}
		if gc.Checks[0] == nil {
			gc.Checks[0] = []uint64{}
		}
		if g.Mix != nil {
			mix := g.Mix
			if clone {
				mix = slices.Clone(mix)
			}
			gc.ChecksMix = [][]uint64{mix}
		}
		if p.Form == wire.FormFlat {
			gc.FingerprintFlat, gc.HasFlat, gc.FlatOnly = g.Fingerprint, true, true
		} else {
			gc.Fingerprint = g.Fingerprint
		}
		r.Groups = append(r.Groups, gc)
	}
	slices.SortFunc(r.Groups, func(a, b *GroupChecks) int { return cmp.Compare(a.ID, b.ID) })
	return r
}

// PayloadRequestBase64 decodes a payload's base64 text into the producer
// checks of request id. A malformed payload is not an error of the
// comparison: it gives a request unverified with ReasonInvalidChecksums,
// and the decoding error (a *parse.Error) to report.
func PayloadRequestBase64(id, text string) (*RequestChecks, error) {
	p, err := wire.DecodePayloadBase64(text)
	if err != nil {
		return invalidRequest(id, ReasonInvalidChecksums), err
	}
	return PayloadRequest(id, p), nil
}

// invalidRequest returns a producer request with no checks, unverified
// for reason (ReasonInvalidChecksums, ReasonNoChecksums).
func invalidRequest(id, reason string) *RequestChecks {
	return &RequestChecks{ID: id, Unverified: []string{reason}}
}

// ProducerChecks makes a side of producer requests given one by one
// (payloads): complete, nothing skipped, the TP size of the first request
// that carries one.
func ProducerChecks(reqs ...*RequestChecks) *Checks {
	c := &Checks{PPSize: 1, Complete: true, Skipped: map[int]string{}, Requests: reqs}
	for _, r := range reqs {
		if r.TPSize != 0 {
			c.TPSize = r.TPSize
			break
		}
	}
	return c
}

// NewPayload returns what a producer sends for request r of side c: check
// 0 of each group, in form (wire.FormNested with the nested fingerprint, block
// size, the side's TP size, request-numbered values and, when the side has
// it, kvaudit's mix check; wire.FormFlat with the
// flat fingerprint and block-numbered values, byte for byte what vLLM's
// published producer encodes). A request with load-level unverified
// reasons (not every rank reported) has no payload: vLLM's producer sends
// none then. The flat form needs the block-numbered checks
// (GroupChecks.ChecksBlock).
func NewPayload(c *Checks, r *RequestChecks, form wire.PayloadForm) (*wire.Payload, error) {
	if len(r.Unverified) > 0 {
		return nil, fmt.Errorf("request %q: no payload: %s", r.ID, r.Unverified[0])
	}
	p := &wire.Payload{Form: form, NumTokens: r.NumTokens}
	if form == wire.FormNested {
		p.TPSize = c.TPSize
	}
	for _, g := range r.Groups {
		pg := wire.PayloadGroup{ID: g.ID, Start: g.Start, Fingerprint: g.Fingerprint}
		if form == wire.FormNested {
			pg.BlockSize = g.BlockSize
			if len(g.Checks) > 0 {
				pg.Values = g.Checks[0]
			}
			if len(g.ChecksMix) > 0 {
				pg.Mix = g.ChecksMix[0] // the sixth element (docs/spec.md §8)
			}
		} else {
			pg.Fingerprint = g.FingerprintFlat
			if g.ChecksBlock == nil && g.Positions() > 0 {
				return nil, fmt.Errorf("request %q group %d: no block-numbered values for the flat form (records without values_block)", r.ID, g.ID)
			}
			if len(g.ChecksBlock) > 0 {
				pg.Values = g.ChecksBlock[0]
			}
		}
		p.Groups = append(p.Groups, pg)
	}
	return p, nil
}

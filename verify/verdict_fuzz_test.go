package verify

import (
	"github.com/kvaudit/kvaudit/side"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/wire"
)

// fuzzConsumer is the consumer the fuzzed payloads are compared with: two
// groups whose fingerprints and values no seed carries, so that no input
// the fuzzer can reach holds the 16 exact bytes a verification needs.
func fuzzConsumer() *side.Checks {
	g := func(id, bs int, fp uint64, vals ...uint64) *side.GroupChecks {
		return &side.GroupChecks{ID: id, Kind: "full_attention", BlockSize: bs, Fingerprint: fp, FingerprintFlat: fp ^ 0x5a5a5a5a5a5a5a5a,
			HasFlat: true, Checks: [][]uint64{vals, slices.Clone(vals)}, Keys: [][2]int{{2, 0}, {2, 1}}}
	}
	return &side.Checks{TPSize: 2, PPSize: 1, Complete: true, Skipped: map[int]string{}, Requests: []*side.RequestChecks{{
		ID: "req-0", NumTokens: 40, TPSize: 2, Groups: []*side.GroupChecks{
			g(0, 16, 0x8f3c_61d2_0b7a_94e5, 0x3d0a_19f2_7c44_b861, 0xa1b2_c3d4_e5f6_0718, 0x0f1e_2d3c_4b5a_6978),
			g(1, 32, 0x71e6_0c2b_9d48_f5a3, 0x6b8c_5e1f_2a3d_4c70, 0x5566_7788_99aa_bbcc),
		},
	}}}
}

// FuzzPayloadDiff sends arbitrary bytes, as msgpack and as base64 text,
// through the producer's side of a comparison: decoding and Diff never
// panic, a malformed payload is unverified with ReasonInvalidChecksums,
// and nothing is ever verified. Seeds: every vector of testdata/payload
// (the glob must match) and near misses of both forms that decode and get
// compared (right fingerprints, one wrong value; right values in one group
// and a wrong fingerprint).
func FuzzPayloadDiff(f *testing.F) {
	for _, v := range testfiles.ReadPayloadVectors(f, filepath.Join("..", "wire", "testdata", "payload")) { // fails on an empty glob
		f.Add(v.Input)
	}
	cons := fuzzConsumer()
	cg := cons.Requests[0].Groups
	nearMisses := []*wire.Payload{
		{Form: wire.FormNested, NumTokens: 40, TPSize: 1, Groups: []wire.PayloadGroup{
			{ID: 0, Fingerprint: cg[0].Fingerprint, BlockSize: 16, Values: []uint64{cg[0].Checks[0][0], cg[0].Checks[0][1], 1}},
			{ID: 1, Fingerprint: cg[1].Fingerprint, BlockSize: 32, Values: []uint64{7, 8}},
		}},
		{Form: wire.FormNested, NumTokens: 40, TPSize: 4, Groups: []wire.PayloadGroup{
			{ID: 0, Fingerprint: cg[0].Fingerprint, BlockSize: 32, Values: []uint64{9, 10}},
		}},
		{Form: wire.FormFlat, NumTokens: 40, Groups: []wire.PayloadGroup{
			{ID: 0, Fingerprint: cg[0].FingerprintFlat, Values: []uint64{1, 2, 3}},
			{ID: 1, Fingerprint: 1, Values: cg[1].Checks[0]},
		}},
	}
	for _, p := range nearMisses {
		b, err := wire.EncodePayload(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		s, _ := wire.EncodePayloadBase64(p)
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := wire.DecodePayload(data)
		check := func(entry string, p *wire.Payload, err error) {
			rc := &side.RequestChecks{ID: "req-0", Unverified: []string{ReasonInvalidChecksums}}
			if err == nil {
				rc = side.PayloadRequest("req-0", p)
			}
			res := Diff(side.ProducerChecks(rc), cons)
			r := res.Requests[0]
			if res.Verdict == Verified || r.Verdict == Verified {
				t.Fatalf("%s: verified %x", entry, data)
			}
			if err != nil && (r.Verdict != Unverified || !slices.Equal(r.Reasons, []string{ReasonInvalidChecksums})) {
				t.Fatalf("%s: malformed payload gave %q %q", entry, r.Verdict, r.Reasons)
			}
		}
		check("DecodePayload", p, err)
		p, err = wire.DecodePayloadBase64(string(data))
		check("DecodePayloadBase64", p, err)
	})
}

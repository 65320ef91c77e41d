package wire

import (
	"fmt"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// bigRecords returns two records one after the other, as a multi-rank
// record file holds them: each of 100 requests of 4,096 tokens (256
// positions of 2 replica keys, with block-numbered values and the mix
// check), about 10 MB in all.
func bigRecords(tb testing.TB) []byte {
	var out []byte
	for rank := range 2 {
		rec := &Record{
			Format: RecordFormat, TPRank: rank, TPSize: 2, PPSize: 1,
			Groups:        []RecordGroup{{ID: 0, Kind: layout.KindFullAttention, BlockSize: 16, Fingerprint: 0x1234, FingerprintFlat: 0x5678, Layers: 32}},
			SkippedGroups: map[string]string{},
		}
		for r := range 100 {
			g := RecordRequestGroup{ID: 0, ReplicaKeys: [][2]int{{2, 0}, {2, 1}}}
			for _, v := range []*Values{&g.Values, &g.ValuesBlock, &g.Mix} {
				*v = NewValues(256, 2)
				for i := range v.Flat() {
					v.Flat()[i] = uint64(i+r) * 0x9e3779b97f4a7c15
				}
			}
			rec.Requests = append(rec.Requests, RecordRequest{
				ID: fmt.Sprintf("req-%d", r), NumTokens: 4096, Groups: []RecordRequestGroup{g},
			})
		}
		b, err := MarshalRecord(rec)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// BenchmarkParseRecords reads a 10 MB file of two records (ParseRecords:
// splitting, the strict check, decoding, validation).
func BenchmarkParseRecords(b *testing.B) {
	data := bigRecords(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		recs, err := ParseRecords("big.json", data)
		if err != nil || len(recs) != 2 {
			b.Fatal(len(recs), err)
		}
	}
}

// BenchmarkSplitJSONDocs splits BenchmarkParseRecords's two records,
// through internal/jsonscan (new) and with the bracket matcher it
// replaced (old).
func BenchmarkSplitJSONDocs(b *testing.B) {
	data := bigRecords(b)
	for _, c := range []struct {
		name  string
		split func([]byte) ([][2]int, error)
	}{{"old", oldSplitJSONDocs}, {"new", splitJSONDocs}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if docs, err := c.split(data); err != nil || len(docs) != 2 {
					b.Fatal(docs, err)
				}
			}
		})
	}
}

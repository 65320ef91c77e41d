package verify_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// TestCompareSides: Compare says what each side was (form, parallel
// sizes, ranks, files, payload form), and hands the drill-down's heat and
// the consumer's num_tokens on with the verdicts.
func TestCompareSides(t *testing.T) {
	ctx := context.Background()
	pp := writeSide(t, synth.Config{Preset: "llama", Seed: 3, PP: 2})
	cp := writeSide(t, synth.Config{Preset: "llama", Seed: 3, Role: "consumer", TP: 2})
	flipBit(t, cp, dumpindex.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.1.self_attn.attn", Head: 6, Token: 4}, 0, 0)
	res, err := verify.Compare(ctx, side.Input{Paths: pp}, side.Input{Paths: cp}, verify.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantP := side.SideInfo{Form: "dumps", TPSize: 1, PPSize: 2, Ranks: []string{"pp 0 tp 0", "pp 1 tp 0"}, Files: pp}
	wantC := side.SideInfo{Form: "dumps", TPSize: 2, PPSize: 1, Ranks: []string{"pp 0 tp 0", "pp 0 tp 1"}, Files: cp}
	if !reflect.DeepEqual(res.Producer, wantP) || !reflect.DeepEqual(res.Consumer, wantC) {
		t.Errorf("sides:\n%+v\n%+v\nwant\n%+v\n%+v", res.Producer, res.Consumer, wantP, wantC)
	}
	r := res.Diff.Requests[0]
	if r.NumTokens != 40 {
		t.Errorf("num_tokens %d, want 40", r.NumTokens)
	}
	if len(r.Heat) != 1 || r.Heat[0].Position != 0 || r.Heat[0].At(1, 6, 0) != 1 {
		t.Errorf("heat %+v, want one of position 0 with layer 1 head 6 hot", r.Heat)
	}

	// A flat payload as the producer; records as the consumer.
	dir := t.TempDir()
	prod, err := side.Checksum(ctx, side.Input{Paths: pp}, side.ChecksumOptions{})
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string]string{}
	for _, rc := range prod.Checks.Requests {
		p, err := side.NewPayload(prod.Checks, rc, wire.FormFlat)
		if err != nil {
			t.Fatal(err)
		}
		if payloads[rc.ID], err = wire.EncodePayloadBase64(p); err != nil {
			t.Fatal(err)
		}
	}
	text, _ := json.Marshal(payloads)
	recs, err := side.Records(ctx, side.Input{Paths: cp}, side.RecordsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for i, rec := range recs {
		b, err := wire.MarshalRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "rank"+string(rune('0'+i))+".json")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	res, err = verify.Compare(ctx, side.Input{Payload: text}, side.Input{Paths: files}, verify.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantC = side.SideInfo{Form: "records", TPSize: 2, PPSize: 1, Ranks: []string{"pp 0 tp 0", "pp 0 tp 1"}, Files: files}
	if want := (side.SideInfo{Form: "payload", PayloadForm: "flat"}); !reflect.DeepEqual(res.Producer, want) || !reflect.DeepEqual(res.Consumer, wantC) {
		t.Errorf("sides:\n%+v\n%+v\nwant\n%+v\n%+v", res.Producer, res.Consumer, want, wantC)
	}

	// One record file as the consumer's argument: the file is named too.
	res, err = verify.Compare(ctx, side.Input{Payload: text}, side.Input{Arg: files[0]}, verify.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantC = side.SideInfo{Form: "records", TPSize: 2, PPSize: 1, Ranks: []string{"pp 0 tp 0"}, Files: files[:1]}
	if !reflect.DeepEqual(res.Consumer, wantC) {
		t.Errorf("one record file: %+v, want %+v", res.Consumer, wantC)
	}
}

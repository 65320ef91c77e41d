//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// bigRecord returns a valid record of about size bytes as MarshalRecord
// writes it: one request of one group whose positions each hold one value
// in both numberings and its mix check (about 135 bytes of JSON a
// position), the shape that makes a record large.
func bigRecord(size int64) *wire.Record {
	positions := int(size / 135)
	rec := &wire.Record{
		Format: wire.RecordFormat, TPSize: 1, PPSize: 1, SkippedGroups: map[string]string{},
		Groups: []wire.RecordGroup{{ID: 0, Kind: layout.KindFullAttention, BlockSize: 16, Fingerprint: 0x1234, FingerprintFlat: 0x5678, Layers: 32}},
	}
	g := wire.RecordRequestGroup{ID: 0, ReplicaKeys: [][2]int{{1, 0}}, Values: wire.NewValues(positions, 1), ValuesBlock: wire.NewValues(positions, 1),
		Mix: wire.NewValues(positions, 1)}
	for i := range positions {
		v := uint64(i)*0x9e3779b97f4a7c15 + 1
		g.Values.At(i)[0], g.ValuesBlock.At(i)[0], g.Mix.At(i)[0] = v, ^v, v*0xbf58476d1ce4e5b9
	}
	rec.Requests = []wire.RecordRequest{{ID: "req-0", NumTokens: positions * 16, Groups: []wire.RecordRequestGroup{g}}}
	return rec
}

// compactRecord returns a valid record of about size bytes in the shape
// that costs a reader the most memory for its size: compact JSON, one
// replica key, every value the shortest hex string ("0x0"), so that a value
// takes 8 bytes of JSON (and 8 bytes decoded).
func compactRecord(size int64) []byte {
	positions := int(size / 24) // 8 bytes a value, three lists
	var b strings.Builder
	fmt.Fprintf(&b, `{"format":"kvaudit-record/1","tp_rank":0,"tp_size":1,"pp_rank":0,"pp_size":1,"groups":[{"id":0,"kind":"full_attention","block_size":16,"fingerprint":"0x1","fingerprint_flat":"0x2","layers":1}],"skipped_groups":{},"requests":[{"id":"r","num_tokens":%d,"num_local_computed_tokens":0,"groups":[{"id":0,"start":0,"replica_keys":[[1,0]]`, positions*16)
	for _, key := range []string{"values", "values_block", "mix"} {
		fmt.Fprintf(&b, `,"%s":[`, key)
		for i := range positions {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`["0x0"]`)
		}
		b.WriteByte(']')
	}
	b.WriteString("}]}]}\n")
	return []byte(b.String())
}

// BenchmarkRecordPeakRSS runs the built kvaudit, as a user does, on
// records of KVAUDIT_BENCH_RECORD_SIZE bytes (default 96 MB) in two
// shapes, as kvaudit writes them (indented, 16-digit hex: "written") and
// the costliest to read (compact, "0x0" values: "compact"): `checksum REC`
// (its table, piped), `checksum -o json REC` and `diff REC REC2` (two such
// records, producer and consumer),
// and reports each child's peak RSS (VmHWM, sampled) and its ratio to
// the size of one record (x-record) and of all the records it reads
// (x-input). Issue 26's target: under 3x the record. It only runs with
// -bench:
//
//	go test ./cmd/kvaudit -run '^$' -bench RecordPeakRSS -benchtime 1x
func BenchmarkRecordPeakRSS(b *testing.B) {
	size := int64(96e6)
	if s := os.Getenv("KVAUDIT_BENCH_RECORD_SIZE"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("KVAUDIT_BENCH_RECORD_SIZE=%q: want bytes", s)
		}
		size = n
	}
	dir := b.TempDir()
	bin := testfiles.BuildKvaudit(b)
	written, err := wire.MarshalRecord(bigRecord(size))
	if err != nil {
		b.Fatal(err)
	}
	shapes := []struct {
		name string
		data []byte
	}{{"written", written}, {"compact", compactRecord(size)}}
	sizes := map[string]float64{}
	for _, shape := range shapes {
		for _, side := range []string{"-p", "-c"} {
			if err := os.WriteFile(filepath.Join(dir, shape.name+side+".record.json"), shape.data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		sizes[shape.name] = float64(len(shape.data))
	}
	// The children start as copies of this process (vfork): let go of the
	// records first, so that they do not count in a child's peak.
	written, shapes = nil, nil
	debug.FreeOSMemory()
	for _, shape := range []string{"written", "compact"} {
		prod, cons := filepath.Join(dir, shape+"-p.record.json"), filepath.Join(dir, shape+"-c.record.json")
		recSize := sizes[shape]
		for _, c := range []struct {
			name  string
			args  []string
			input float64
		}{
			{"checksum", []string{"checksum", prod}, recSize},
			{"checksum-json", []string{"checksum", "-o", "json", prod}, recSize},
			{"diff", []string{"diff", prod, cons}, 2 * recSize},
		} {
			b.Run(shape+"/"+c.name, func(b *testing.B) {
				for range b.N {
					cmd := exec.Command(bin, c.args...)
					var stderr strings.Builder
					cmd.Stderr = &stderr
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					done := make(chan error, 1)
					go func() { done <- cmd.Wait() }()
					// VmHWM, the peak of the child's own memory since its
					// exec, sampled until it exits.
					var hwm int64
				sample:
					for {
						select {
						case err = <-done:
							break sample
						case <-time.After(2 * time.Millisecond):
							hwm = max(hwm, procStatus(cmd.Process.Pid, "VmHWM:"))
						}
					}
					if err != nil {
						b.Fatalf("kvaudit %s: %v\n%s", strings.Join(c.args, " "), err, stderr.String())
					}
					rss := float64(hwm)
					b.ReportMetric(recSize/1e6, "record-MB")
					b.ReportMetric(rss/1e6, "peak-RSS-MB")
					b.ReportMetric(rss/recSize, "x-record")
					b.ReportMetric(rss/c.input, "x-input")
				}
			})
		}
	}
}

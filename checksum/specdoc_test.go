package checksum_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// specDoc is the project's specification, which users read.
var specDoc = filepath.Join("..", "docs", "spec.md")

// specExample is the worked example of docs/spec.md §1 as the document
// writes it.
type specExample struct {
	// slices: position, layer, head, m, s (request), s (block), A
	slices [][7]uint64
	// checksums by numbering ("request", "block"), by position
	checksums map[string][]uint64
}

var (
	specSliceRow = regexp.MustCompile(`^\| (\d+) \| \((\d+), (\d+)\) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$`)
	specSumsLine = regexp.MustCompile("^- (request|block) numbering: (.*)$")
	specSum      = regexp.MustCompile("`c\\((\\d+)\\) = (\\d+) = (0x[0-9a-f]{16})`")
)

func readSpecDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readSpecExample parses the worked example out of docs/spec.md: the slice
// table and the block checksums in both numberings, whose decimal and hex
// forms must agree.
func readSpecExample(t *testing.T) specExample {
	t.Helper()
	doc := readSpecDoc(t)
	_, sec, ok := strings.Cut(doc, "\n### Worked example\n")
	if !ok {
		t.Fatalf("%s: no worked example", specDoc)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	ex := specExample{checksums: map[string][]uint64{}}
	for line := range strings.Lines(sec) {
		line = strings.TrimSpace(line)
		if m := specSliceRow.FindStringSubmatch(line); m != nil {
			var row [7]uint64
			for i := range row {
				v, err := strconv.ParseUint(m[i+1], 10, 64)
				if err != nil {
					t.Fatalf("%s: %q: %v", specDoc, line, err)
				}
				row[i] = v
			}
			ex.slices = append(ex.slices, row)
			continue
		}
		m := specSumsLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if ex.checksums[m[1]] != nil {
			t.Fatalf("%s: %s numbering given twice", specDoc, m[1])
		}
		for i, s := range specSum.FindAllStringSubmatch(m[2], -1) {
			if s[1] != strconv.Itoa(i) {
				t.Fatalf("%s: %q: c(%s) where c(%d) belongs", specDoc, line, s[1], i)
			}
			dec, err1 := strconv.ParseUint(s[2], 10, 64)
			hex, err2 := layout.ParseHex64(s[3])
			if err1 != nil || err2 != nil || dec != hex {
				t.Fatalf("%s: c(%d): %s and %s are not the same number", specDoc, i, s[2], s[3])
			}
			ex.checksums[m[1]] = append(ex.checksums[m[1]], dec)
		}
	}
	if len(ex.slices) != 8 || len(ex.checksums["request"]) != 2 || len(ex.checksums["block"]) != 2 {
		t.Fatalf("%s: the worked example has %d slice rows and checksums %x, want 8 rows and 2 checksums in each numbering",
			specDoc, len(ex.slices), ex.checksums)
	}
	return ex
}

// TestSpecDocArithmetic recomputes every number of the document's worked
// example from the definition: each slice's factor, sums in both
// numberings and plain piece sum, the checksums from the slices, and the
// conversion between the numberings.
func TestSpecDocArithmetic(t *testing.T) {
	ex := readSpecExample(t)
	v := readGolden(t)
	if !slices.Equal(ex.checksums["request"], v.checksums) {
		t.Errorf("request numbering %x, testdata/golden/spec1.txt says %x", ex.checksums["request"], v.checksums)
	}
	P := v.cellBytes / 8
	sums := map[string][]uint64{"request": make([]uint64, 2), "block": make([]uint64, 2)}
	slopes := make([]uint64, 2) // sum of m*P*A by position
	for _, row := range ex.slices {
		pos, L, h := int(row[0]), int(row[1]), int(row[2])
		m := uint64(2*(L*layout.MaxHeadsPerLayer+h) + 1)
		var sReq, sBlock, A uint64
		first := pos * v.blockSize
		for tok := first; tok < min(first+v.blockSize, v.numTokens); tok++ {
			for p := range P {
				x := goldenPiece(L, h, tok, p)
				sReq += x * uint64(2*(tok*P+p)+1)
				sBlock += x * uint64(2*((tok-first)*P+p)+1)
				A += x
			}
		}
		if want := [4]uint64{m, sReq, sBlock, A}; [4]uint64(row[3:]) != want {
			t.Errorf("position %d (L %d, h %d): the document says m, s, s, A = %d, the definition gives %d", pos, L, h, row[3:], want)
		}
		sums["request"][pos] += row[3] * row[4]
		sums["block"][pos] += row[3] * row[5]
		slopes[pos] += row[3] * uint64(P) * row[6]
	}
	for _, n := range []string{"request", "block"} {
		if !slices.Equal(sums[n], ex.checksums[n]) {
			t.Errorf("%s numbering: the slices add up to %x, the document says %x", n, sums[n], ex.checksums[n])
		}
	}
	for pos := range 2 {
		f := uint64(pos * v.blockSize)
		if got := ex.checksums["block"][pos] + 2*f*slopes[pos]; got != ex.checksums["request"][pos] {
			t.Errorf("position %d: c_block + 2*f*sum(m*P*A) = %#x, c_request = %#x", pos, got, ex.checksums["request"][pos])
		}
	}
}

// TestSpecDocEngines checks the document's checksums against what the
// engines compute from the worked example written as a dump: request
// numbering through Compute, block numbering by running each engine on
// the rank's plan with every row's token count restarted at its block
// (FirstToken 0).
func TestSpecDocEngines(t *testing.T) {
	ex := readSpecExample(t)
	path := writeGoldenDump(t, readGolden(t))
	ctx := context.Background()
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}} {
		c, err := side.Compute(ctx, []*layout.Dump{d}, checksum.Options{Engine: e})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Requests[0].Groups[0].Checks[0]; !slices.Equal(got, ex.checksums["request"]) {
			t.Errorf("%s engine, request numbering: %x, the document says %x", e.Name(), got, ex.checksums["request"])
		}

		plan, rec, err := checksum.NewPlan(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range plan.Tasks {
			rows := slices.Clone(plan.Tasks[i].Rows)
			for k := range rows {
				rows[k].FirstToken = 0
			}
			plan.Tasks[i].Rows = rows
		}
		out := make([]uint64, plan.Outputs)
		if err := e.Run(ctx, plan, out); err != nil {
			t.Fatal(err)
		}
		// One request, one group, one replica key: slot i is position i.
		if n := rec.Requests[0].Groups[0].Values.Len(); n != plan.Outputs {
			t.Fatalf("%d positions, %d output slots", n, plan.Outputs)
		}
		got := out
		if !slices.Equal(got, ex.checksums["block"]) {
			t.Errorf("%s engine, block numbering: %x, the document says %x", e.Name(), got, ex.checksums["block"])
		}
	}
}

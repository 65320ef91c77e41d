package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/bench"
	"github.com/kvaudit/kvaudit/internal/report"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"2GB", 2e9}, {"2gb", 2e9}, {"512MB", 512e6}, {"1GiB", 1 << 30}, {"64MiB", 64 << 20},
		{"4G", 4e9}, {"100", 100}, {"1.5GB", 1.5e9}, {" 3 KB ", 3000}, {"7B", 7},
	} {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GB", "-1GB", "0", "2XB", "1e40"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// TestBenchTable: one row per measurement, ratios with two decimals, the
// machine, the end-to-end ratio, heap and RSS, and the page-cache note.
func TestBenchTable(t *testing.T) {
	r := &bench.Result{
		Machine: bench.Machine{GOOS: "linux", GOARCH: "amd64", CPU: "Test CPU", NumCPU: 2, GOMAXPROCS: 2, GoVersion: "go1.x", LoadAverage: 0.5},
		Bytes:   2e9, Dumps: 1, Caches: 32, Rows: 100,
		Measurements: []bench.Measurement{
			{Method: bench.MethodRead, Threads: 1, GBPerS: 20, Ratio: 1},
			{Method: bench.MethodFast, Threads: 1, GBPerS: 19, Ratio: 0.95},
		},
		EndToEnd:      &bench.EndToEnd{Threads: 2, Ratio: 1.05, RatioWarm: 1.3},
		PeakHeapBytes: 3e6, PeakRSSBytes: 2.1e9, RSSSource: "VmHWM while measuring",
		Notes: []string{"the side is in the page cache"},
	}
	var b strings.Builder
	if err := benchTable(r).Render(&b, report.FormatMarkdown, report.Style{}); err != nil {
		t.Fatal(err)
	}
	out := regexp.MustCompile(" {2,}").ReplaceAllString(b.String(), " ") // markdown columns are padded
	for _, want := range []string{
		"| 1 | read (vectorised sum) | 20.00 | 1.00 |", "| 1 | cpu engine | 19.00 | 0.95 |",
		"Test CPU, 2 CPUs, GOMAXPROCS 2", "load average 0.50", "1.05x the time of opening and reading",
		"peak Go heap 3.0 MB", "peak RSS 2100.0 MB", "page cache",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

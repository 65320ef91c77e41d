package kernels_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/kernels"
)

// TestPTXIsGenerated: checksum.ptx carries the generated-code marker and
// targets compute_70.
func TestPTXIsGenerated(t *testing.T) {
	first, _, _ := strings.Cut(kernels.PTX, "\n")
	if !regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`).MatchString(first) {
		t.Errorf("first line %q lacks the generated-code marker", first)
	}
	if !strings.Contains(kernels.PTX, "\n.target sm_70\n") {
		t.Error("PTX does not target sm_70 (compute_70)")
	}
	if strings.ContainsRune(kernels.PTX, 0) {
		t.Error("PTX holds a NUL byte (cuModuleLoadData reads a C string)")
	}
}

// TestPTXEntries: every entry point exists with only 64-bit parameters
// (gorgonia.org/cu's Launch copies 8 bytes per parameter), the checksum
// variants with the 6 pointers and counts plus kernels.Kernel's fields.
func TestPTXEntries(t *testing.T) {
	nargs := 6 + len((&kernels.Kernel{}).Args())
	want := map[string]int{kernels.EntryFill: 3, kernels.EntryReadSum: 3}
	for _, e := range kernels.Entries {
		want[e] = nargs
	}
	entry := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(\n((?:\s*\.param [^\n]*\n)*)`)
	got := map[string]int{}
	for _, m := range entry.FindAllStringSubmatch(kernels.PTX, -1) {
		params := strings.Split(strings.TrimSpace(m[2]), "\n")
		for _, p := range params {
			if !strings.HasPrefix(strings.TrimSpace(p), ".param .u64 ") {
				t.Errorf("%s: parameter %q is not 64-bit", m[1], strings.TrimSpace(p))
			}
		}
		got[m[1]] = len(params)
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("entry %s: %d parameters, want %d", name, got[name], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("PTX entries %v, want %v", got, want)
	}
}

// TestKernelConstantsMatchCUDA: the #defines of checksum.cu equal the Go
// constants of the model.
func TestKernelConstantsMatchCUDA(t *testing.T) {
	src, err := os.ReadFile("checksum.cu")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"UNROLL": kernels.Unroll, "ROW_WORDS": kernels.RowWords, "WARP": kernels.Warp,
		"MAX_THREADS": kernels.MaxTileLanes,
	}
	for name, v := range want {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Errorf("checksum.cu has no #define %s", name)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); n != v {
			t.Errorf("checksum.cu: %s is %d, Go says %d", name, n, v)
		}
	}
	// The parameter list names kernels.Kernel's fields in order.
	fields := []string{"rowStride", "tokenStride", "headStride", "kernelTokens", "blockTokens",
		"pieces", "width", "vec", "lanes", "tileLanes", "tokenLanes", "chunkTokens", "chunks",
		"tiles", "threads", "gather"}
	if len(fields) != len((&kernels.Kernel{}).Args()) {
		t.Fatalf("update this test: Kernel has %d parameters", len((&kernels.Kernel{}).Args()))
	}
	sig := regexp.MustCompile(`(?s)__device__ __forceinline__ void checksum\((.*?)\)`).FindSubmatch(src)
	if sig == nil {
		t.Fatal("checksum.cu: no checksum() template")
	}
	var names []string
	for _, p := range strings.Split(string(sig[1]), ",") {
		f := strings.Fields(p)
		names = append(names, f[len(f)-1])
	}
	if got := strings.Join(names[6:], " "); got != strings.Join(fields, " ") {
		t.Errorf("checksum.cu parameters %s\nwant %s", got, strings.Join(fields, " "))
	}
}

// TestEntryNamesAVariant: every load variant has its entry point.
func TestEntryNamesAVariant(t *testing.T) {
	for _, k := range []kernels.Kernel{
		{Width: 8, Vec: 2}, {Width: 8, Vec: 1}, {Width: 4, Vec: 1}, {Width: 2, Vec: 1}, {Width: 8, Vec: 1, Gather: 1},
	} {
		found := false
		for _, e := range kernels.Entries {
			found = found || e == k.Entry()
		}
		if !found {
			t.Errorf("%+v: entry %q is not in Entries", k, k.Entry())
		}
	}
}

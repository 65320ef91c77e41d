package transfer

import (
	"reflect"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
)

// TestDescRuns: a prepared list keeps its descriptors as runs, one per
// stretch of descriptors of one length whose addresses step by one
// stride (up or down), and gives each back as it was added.
func TestDescRuns(t *testing.T) {
	var in []nixl.Desc
	for k := range 5 { // a region's blocks: one run
		in = append(in, nixl.Desc{Addr: 0x10000 + uint64(k)*0x200, Len: 0x200})
	}
	in = append(in,
		nixl.Desc{Addr: 0x20000, Len: 0x100},                                       // another length: a run
		nixl.Desc{Addr: 0x1f000, Len: 0x100}, nixl.Desc{Addr: 0x1e000, Len: 0x100}, // stepping down
		nixl.Desc{Addr: 0x1e000, Len: 0x100}, // not the next step: a run
		nixl.Desc{Addr: 0x1e000, Len: 0x100}, // the same again: a stride of 0
	)
	var d dlist
	for _, x := range in {
		d.add(x)
	}
	want := []descRun{
		{first: 0, count: 5, addr: 0x10000, stride: 0x200, len: 0x200},
		{first: 5, count: 3, addr: 0x20000, stride: -0x1000, len: 0x100},
		{first: 8, count: 2, addr: 0x1e000, stride: 0, len: 0x100},
	}
	if d.n != len(in) || !reflect.DeepEqual(d.runs, want) {
		t.Fatalf("%d descriptors in runs %+v, want %d in %+v", d.n, d.runs, len(in), want)
	}
	for i, x := range in {
		if got := d.at(i); got != x {
			t.Fatalf("descriptor %d: %+v, want %+v", i, got, x)
		}
	}
}

package side

import (
	"reflect"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

func tablesDump(tp int, reqs ...layout.Request) *layout.Dump {
	return &layout.Dump{Path: "d", Manifest: &layout.Manifest{Parallel: layout.Parallel{TPRank: tp, TPSize: 2, PPSize: 1}, Requests: reqs}}
}

// TestRepeatedBlocks: a block at two positions of one request's table is
// found once however many ranks show it, with its positions in order;
// null entries, a block shared by two requests at one position (a shared
// prefix) or in two groups are not; the request filter applies.
func TestRepeatedBlocks(t *testing.T) {
	n := layout.NoBlock
	reqs := []layout.Request{
		{ID: "a", BlockTable: map[string]layout.BlockIDs{"0": {5, 5, 6}, "1": {7, 8}}},
		{ID: "b", BlockTable: map[string]layout.BlockIDs{"0": {5, 9, 10}, "1": {n, n, 7}}},
		{ID: "c", BlockTable: map[string]layout.BlockIDs{"0": {11, 12, 11, 13, 11}, "1": {14, 14}}},
	}
	dumps := []*layout.Dump{tablesDump(1, reqs...), tablesDump(0, reqs...)}
	got := RepeatedBlocks("consumer", dumps, nil)
	want := []RepeatedBlock{
		{Side: "consumer", Request: "a", Group: 0, Block: 5, Positions: []int{0, 1}, Rank: layout.Rank{TP: 1}},
		{Side: "consumer", Request: "c", Group: 0, Block: 11, Positions: []int{0, 2, 4}, Rank: layout.Rank{TP: 1}},
		{Side: "consumer", Request: "c", Group: 1, Block: 14, Positions: []int{0, 1}, Rank: layout.Rank{TP: 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := RepeatedBlocks("", dumps, []string{"b", "c"}); len(got) != 2 || got[0].Request != "c" {
		t.Fatalf("requests b, c: got %+v", got)
	}
	if got := RepeatedBlocks("", dumps, []string{"b"}); got != nil {
		t.Fatalf("request b: got %+v", got)
	}
	if s := want[1].String(); s != `consumer request "c" group 0: block 11 is given at positions 0,2,4 of one request (rank 0:1)` {
		t.Errorf("String: %s", s)
	}
	e := &RepeatedBlocksError{Blocks: want}
	if e.Error() != "repeated blocks: "+want[0].String()+" (and 2 more)" {
		t.Errorf("RepeatedBlocksError: %q", e.Error())
	}
	c := &Checksums{Repeated: want[:1]}
	if err := c.Failed(); err == nil || err.Error() != "repeated blocks: "+want[0].String() {
		t.Errorf("Failed: %v", err)
	}
	if err := (&Checksums{}).Failed(); err != nil {
		t.Errorf("Failed with nothing repeated: %v", err)
	}
}

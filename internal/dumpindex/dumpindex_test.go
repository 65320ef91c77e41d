package dumpindex_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

func TestDumpIndex(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "mamba2-hybrid", TP: 2, Requests: 2, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	s := dumpindex.New(dumps)
	if ids := s.RequestIDs(); !slices.Equal(ids, []string{"req-0", "req-1"}) {
		t.Errorf("request ids %v", ids)
	}
	if ids := s.GroupIDs(); !slices.Equal(ids, []int{0, 1}) {
		t.Errorf("group ids %v", ids)
	}
	if s.Request("nope") != nil || s.Group(7) != nil {
		t.Error("found what is not there")
	}
	r := s.Request("req-1")
	attn, state := s.Group(0), s.Group(1)
	for pos, want := range r.BlockTable["0"] {
		if b, ok := s.Block(1, "req-1", attn, pos); !ok || b != want {
			t.Errorf("position %d: block %d %v, want %d", pos, b, ok, want)
		}
	}
	if _, ok := s.Block(1, "req-1", attn, len(r.BlockTable["0"])); ok {
		t.Error("a block past the table")
	}
	if b, ok := s.Block(0, "req-1", state, 0); !ok || b != r.StateBlock["1"] {
		t.Errorf("state block %d %v, want %d", b, ok, r.StateBlock["1"])
	}
	if _, ok := s.Block(0, "req-1", state, 1); ok {
		t.Error("a state group has only position 0")
	}
	if _, ok := s.Block(0, "nope", attn, 0); ok {
		t.Error("a block of an unknown request")
	}
	// Two ranks, each with its caches of each group.
	// state layers: a view per (state, segment): conv x, B, C and ssm
	for g, want := range map[int]int{0: 4, 1: 16} {
		caches := s.Caches(g)
		if len(caches) != want || caches[0].Dump != 0 || caches[len(caches)-1].Dump != 1 {
			t.Errorf("group %d: %d caches, want %d over both ranks", g, len(caches), want)
		}
	}
}

// TestIDsFirstSeen checks RequestIDs and GroupIDs on ranks that list
// different ids in different orders: each id once, the first rank's first,
// then the ones only a later rank lists, in its order.
func TestIDsFirstSeen(t *testing.T) {
	rank := func(reqs []string, groups []int) *layout.Dump {
		m := &layout.Manifest{}
		for _, id := range reqs {
			m.Requests = append(m.Requests, layout.Request{ID: id})
		}
		for _, id := range groups {
			m.Groups = append(m.Groups, layout.Group{ID: id})
		}
		return &layout.Dump{Manifest: m}
	}
	s := dumpindex.New([]*layout.Dump{rank([]string{"b", "a"}, []int{2, 0}), rank([]string{"a", "c", "b", "d"}, []int{0, 1, 2})})
	if ids := s.RequestIDs(); !slices.Equal(ids, []string{"b", "a", "c", "d"}) {
		t.Errorf("request ids %v, want [b a c d]", ids)
	}
	if ids := s.GroupIDs(); !slices.Equal(ids, []int{2, 0, 1}) {
		t.Errorf("group ids %v, want [2 0 1]", ids)
	}
}

func BenchmarkRequestIDs(b *testing.B) {
	var dumps []*layout.Dump
	for range 8 {
		m := &layout.Manifest{}
		for i := range 2000 {
			m.Requests = append(m.Requests, layout.Request{ID: "req-" + strconv.Itoa(i)})
		}
		dumps = append(dumps, &layout.Dump{Manifest: m})
	}
	s := dumpindex.New(dumps)
	for b.Loop() {
		if len(s.RequestIDs()) != 2000 {
			b.Fatal("wrong count")
		}
	}
}

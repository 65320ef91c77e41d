package layout

import "testing"

// TestPairID: a consumer request pairs by its producer_id, else by its
// own id.
func TestPairID(t *testing.T) {
	for _, c := range []struct{ id, producer, want string }{
		{"req-0", "", "req-0"},
		{"req-0", "prefill-7", "prefill-7"},
		{"", "prefill-7", "prefill-7"},
		{"", "", ""},
	} {
		if got := (Request{ID: c.id, ProducerID: c.producer}).PairID(); got != c.want {
			t.Errorf("Request{ID: %q, ProducerID: %q}.PairID() = %q, want %q", c.id, c.producer, got, c.want)
		}
	}
}

// TestPaired: a transfer's request id finds the request of that id first,
// even when an earlier request pairs with it, else the first request that
// pairs with it; nothing else matches.
func TestPaired(t *testing.T) {
	m := &Manifest{Requests: []Request{
		{ID: "c-0", ProducerID: "p-0"},
		{ID: "c-1", ProducerID: "c-2"},
		{ID: "c-2"},
		{ID: "c-3", ProducerID: "p-0"},
	}}
	for id, want := range map[string]string{"c-0": "c-0", "p-0": "c-0", "c-2": "c-2", "c-3": "c-3", "p-9": "", "": ""} {
		r := m.Paired(id)
		got := ""
		if r != nil {
			got = r.ID
			if r != &m.Requests[0] && r != &m.Requests[1] && r != &m.Requests[2] && r != &m.Requests[3] {
				t.Errorf("Paired(%q) is a copy, not the manifest's request", id)
			}
		}
		if got != want {
			t.Errorf("Paired(%q) = %q, want %q", id, got, want)
		}
	}
}

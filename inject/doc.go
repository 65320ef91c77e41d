// Package inject corrupts copies of KV cache dumps and producer payloads
// the way real transfers go wrong, says in a Fault (fault.json) exactly
// what it changed and what should catch it, and runs campaigns of seeded
// faults that measure detection and localisation (package verify's
// checks, judged against each fault.json).
//
// An input dump is never written to: Inject writes a copy of the side into
// a new directory, hard-linking the files it leaves unchanged and writing
// every file it changes as a fresh file.
//
// Flip one bit of request req-0's block at position 2, then see that the
// comparison reports exactly that position:
//
//	dumps, err := layout.OpenPaths([]string{"kv/consumer"})
//	...
//	defer layout.CloseAll(dumps)
//	pos := 2
//	f, err := inject.Inject(ctx, dumps, "bad", inject.Options{
//		Kind: inject.BitFlip, Seed: 7,
//		Target: inject.Target{Request: "req-0", Position: &pos},
//	})
//	...
//	res, err := verify.Compare(ctx, verify.Input{Paths: []string{"kv/producer"}},
//		verify.Input{Paths: []string{"bad"}}, verify.CompareOptions{})
//	// res.Verdict() is mismatch at f.Affected's positions
//
// Campaign runs every kind many times over pairs of sides and reports
// what was detected, localised exactly and missed.
package inject

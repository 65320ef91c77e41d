// Package inject corrupts copies of KV cache dumps and producer payloads
// the way real transfers go wrong, says in a Fault (fault.json) exactly
// what it changed and what should catch it, and runs campaigns of seeded
// faults that measure detection and localisation (package verify's
// checks, judged against each fault.json).
//
// An input dump is never written to: Inject copies every file of the side
// (streamed, never linked) into a temporary directory beside the output,
// patches the fault into the copy, and renames the directory into place
// when complete.
//
// Each fault kind is one definition (what it models, its detector, its
// plan, whose type says its input) in its family's kinds_*.go file, listed
// once in the registry (kind.go) that Kinds, InfoOf and ParseKind read;
// plan.go holds the planner's machinery the dump kinds share.
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
//	res, err := verify.Compare(ctx, side.Input{Paths: []string{"kv/producer"}},
//		side.Input{Paths: []string{"bad"}}, verify.CompareOptions{})
//	// res.Verdict() is mismatch at f.Affected's positions
//
// Campaign runs every kind many times over pairs of sides and reports
// what was detected, localised exactly and missed.
package inject

// Package transfer audits NIXL transfers recorded in kvaudit-nixl-log/1
// logs (docs/spec.md §13) against the producer's and the consumer's dumps:
// every descriptor resolves, through the dumps' device addresses, to the
// cells it names, and the transfer's invariants are checked per request
// and per transfer: confined, aligned, covered, transferred or zeroed, no
// byte written twice from different sources, no request loaded from a
// failed transfer.
//
// Logs are streamed (the reader of internal/nixl): a record at a time,
// arrays element by element; what the audit keeps is compact (the prepared descriptor
// lists, and one interval per delivered descriptor).
//
// Audit the consumer's logs of a pull:
//
//	producer, err := layout.OpenPaths([]string{"kv/producer"})
//	...
//	consumer, err := layout.OpenPaths([]string{"kv/consumer"})
//	...
//	res, err := transfer.Audit(ctx, []string{"kv/nixl/consumer-pp0-tp0.jsonl"}, producer, consumer, transfer.Options{})
//	// res.Verdict: clean, violated or unresolved; res.Findings say where
//
// The log format's reader and writer, and the planner of a correct pull
// (kvaudit synth --transfers), are in internal/nixl.
package transfer

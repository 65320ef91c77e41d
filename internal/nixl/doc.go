// Package nixl holds kvaudit's NIXL log format, kvaudit-nixl-log/1
// (docs/spec.md §13): its streamed, bounded reader (Reader) and its writer
// (Writer), and Plan, the correct pull vLLM's NIXL connector makes between
// two sides, written as logs (kvaudit synth --transfers). Package transfer
// audits the logs; this package only reads, writes and plans them.
package nixl

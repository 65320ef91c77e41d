// Package wire encodes and decodes kvaudit's formats on the wire and on
// disk (docs/spec.md §8): the payload a producer sends in vLLM's
// kv_transfer_params["kv_checksums"] (msgpack in the flat or nested form,
// as Python's msgspec writes it, in base64 as Python decodes it), and the
// record (kvaudit-record/1), one rank's partial checksums as JSON. It
// validates them and computes nothing: package checksum fills records,
// package verify judges what they carry.
//
// Every decoder takes untrusted input: it never panics, bounds what it
// allocates by the input's size, and returns nil results and an error of
// one type (*parse.Error, Format parse.Payload or parse.Record) naming the
// offending field.
package wire

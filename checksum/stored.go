package checksum

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Offload-tier stored checksums (docs/spec.md §10).
//
// An offload store (CPU memory, disk, a remote cache) keeps full blocks
// under their block hash, each with a stored checksum: the rank's part of
// the block checksum XOR the tag le64(first 8 bytes of the block hash) ^
// fingerprint. A dump that lists block_hashes and stored_checksums for a
// request is checked block by block against them, with no producer: a
// block whose KV changed fails, and so does an intact block (and its own,
// intact stored value) that the store returned for another prefix, because
// the tag of the hash the request asked for differs from the tag the value
// was stored under.

// parseBlockHash decodes a block hash as a manifest carries it: a string
// of hex digits, with or without a "0x" prefix, upper or lower case, two
// digits per byte in the order of the bytes (the first two digits are
// byte 0, as Python's bytes.hex() writes them), at least 8 bytes (vLLM's
// block hashes are 32-byte SHA-256 digests, 64 digits).
func parseBlockHash(s string) ([]byte, error) {
	digits := strings.TrimPrefix(s, "0x")
	if len(digits)%2 != 0 {
		return nil, fmt.Errorf("block hash %q: an odd number of hex digits", s)
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return nil, fmt.Errorf("block hash %q: not hex digits", s)
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("block hash %q: %d bytes, want at least 8", s, len(b))
	}
	return b, nil
}

// StoredTag returns the tag of a stored checksum: the first 8 bytes of the
// block hash read as a little-endian uint64 (byte 0 is the least
// significant: hash "0102030405060708..." gives 0x0807060504030201), XOR
// the rank's nested fingerprint of the group.
func StoredTag(blockHash string, fingerprint uint64) (uint64, error) {
	b, err := parseBlockHash(blockHash)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:8]) ^ fingerprint, nil
}

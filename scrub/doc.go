// Package scrub checks KV stores at rest against the checksums the engines
// stored beside them, and names every file or record that fails, without
// ever writing, renaming or deleting anything in the store (the engines
// delete a file whose check fails; a scrub keeps the evidence).
//
// Four stores are read (docs/scrub.md has each format and the engine code
// it was read from):
//
//   - vllm-fs: vLLM's FS offload tier (PR #57912). Each block file
//     <model>_<cfg>_r<rank>/<h[:3]>/<h[3:5]>_g<group>/<h>.bin carries the
//     xattr user.vllm.kv_crc32c: the CRC-32C of the whole file, 4 bytes
//     big-endian.
//   - lmcache-fs: LMCache's FS L2 adapter with checksum="crc32". A file
//     <model>@0x<kv_rank>@<group>@<chunk hash>[@salt].data is the payload,
//     then "LMC1" and the zlib CRC-32 of the payload (little-endian); under
//     O_DIRECT that trailer opens one more zero-padded block.
//   - lmcache-frame: LMCache's checksum serde (PR #4558): [1 B version]
//     [8 B chunk-hash prefix][8 B xxh3_64 of the payload, big-endian]
//     [payload], in files named as lmcache-fs's.
//   - mooncake-ssd: Mooncake's SSD offload (PR #2932): records in
//     kv_cache.data, each a 24-byte header, the key, zero padding to a 4096
//     boundary and the value, with a CRC-32C over the header's first 20
//     bytes, the key and the value; kv_cache.meta holds the allocator
//     state that says where the records are.
//
// Every file or record comes out verified, mismatch or unverified, with its
// path, offset, length, algorithm, expected and actual value, and what its
// name says it holds (rank, group, block or chunk hash, model, key).
package scrub

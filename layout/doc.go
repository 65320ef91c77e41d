// Package layout reads kvaudit dumps: safetensors files and raw tensors,
// their JSON manifests, and the geometry that turns a rank's cache tensors
// into strided views of cells, layer numbers, global heads and replica keys.
//
// A dump is opened with Open (one rank) or OpenSide (all ranks of a producer
// or consumer). Data is memory-mapped and never written. Every inconsistency
// in a dump is an error naming the file and the field; a group that is valid
// but cannot be checksummed is kept with the fixed reason of docs/spec.md §4.
package layout

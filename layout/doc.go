// Package layout reads kvaudit dumps: safetensors files and raw tensors,
// their JSON manifests, and the geometry that turns a rank's cache tensors
// into strided views of cells, layer numbers, global heads and replica keys.
//
// A dump is opened with Open (one rank), OpenSide (all ranks of a producer
// or consumer) or OpenPaths (a side given as paths: dumps or directories
// holding them). Data is memory-mapped and never written. Every inconsistency
// in a dump is an error naming the file and the field; a group that is valid
// but cannot be checksummed is kept with the fixed reason of docs/spec.md §4.
//
// Open every rank of a side and walk its groups and caches:
//
//	dumps, err := layout.OpenPaths([]string{"kv/consumer"}) // dumps or directories
//	...
//	defer layout.CloseAll(dumps)
//	for _, d := range dumps {
//		for _, g := range d.Groups {
//			fmt.Println(d.Path, g.Group.ID, g.Group.Kind, g.Skip) // Skip: why not checksummed
//		}
//	}
package layout

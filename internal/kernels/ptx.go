package kernels

import (
	_ "embed"
	"fmt"
)

//go:generate sh gen_ptx.sh

// PTX is checksum.cu compiled for the virtual architecture compute_70
// (Volta and every later GPU; the driver compiles it for the device when
// the module is loaded). Its PTX ISA 7.8 needs a driver of release 520 or
// newer.
//
//go:embed checksum.ptx
var PTX string

// Entry points of PTX besides the checksum variants (Kernel.Entry).
const (
	// EntryFill (dst, words, seed) writes splitmix64(seed+i) to word i.
	EntryFill = "kvaudit_fill"
	// EntryReadSum (src, pairs, out) adds every 8-byte word of pairs
	// 16-byte pairs to *out: a plain read.
	EntryReadSum = "kvaudit_read_sum"
)

// Entries lists the checksum entry points of PTX, one per load variant.
var Entries = []string{
	"kvaudit_checksum_pair", "kvaudit_checksum_u64", "kvaudit_checksum_u32",
	"kvaudit_checksum_u16", "kvaudit_checksum_gather",
}

// Entry returns the name of the checksum entry point compiled for the
// kernel's load variant.
func (k *Kernel) Entry() string {
	switch {
	case k.Gather != 0:
		return "kvaudit_checksum_gather"
	case k.Width == 2:
		return "kvaudit_checksum_u16"
	case k.Width == 4:
		return "kvaudit_checksum_u32"
	case k.Vec == 2:
		return "kvaudit_checksum_pair"
	case k.Width == 8:
		return "kvaudit_checksum_u64"
	}
	panic(fmt.Sprintf("kernels: no entry point for %+v", *k))
}

package dumpindex

import (
	"fmt"
	"os"
	"slices"

	"github.com/kvaudit/kvaudit/layout"
)

// CellRef names one logical cell of a side: one token of one global KV
// head of one layer, in one replica copy; in a state group, one global row
// (Head) of the request's state block (Token is then ignored).
type CellRef struct {
	Request string
	Group   int
	Layer   string // the layer's name (an alias names its cache)
	Head    int    // global KV head, or global state row
	Replica int    // replica index of the copy; 0 when not replicated
	Token   int    // token position in the request
}

func (r CellRef) String() string {
	return fmt.Sprintf("request %q group %d layer %q head %d replica %d token %d", r.Request, r.Group, r.Layer, r.Head, r.Replica, r.Token)
}

// Locate returns the file that holds byte i of a cell's logical bytes (K
// then V) and the byte's offset in it, so that a tool or a test can change
// exactly one byte of a copy of a dump. It reads no tensor data. It fails
// for a cell the side does not hold (no such request, layer, head or copy,
// a null or missing block) or held in device memory.
func Locate(dumps []*layout.Dump, ref CellRef, i int) (string, int64, error) {
	return New(dumps).Locate(ref, i)
}

// FlipBit flips bit (0-7) of byte i of a cell of the side whose dumps
// are at paths, in place (a test's or a tool's own copy), and returns the
// file it changed and the byte's offset in it.
func FlipBit(paths []string, ref CellRef, i, bit int) (string, int64, error) {
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		return "", 0, err
	}
	file, off, err := Locate(dumps, ref, i)
	layout.CloseAll(dumps)
	if err != nil {
		return "", 0, err
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", 0, err
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		f.Close()
		return "", 0, err
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return "", 0, err
	}
	return file, off, f.Close()
}

// Locate is the package's Locate on the index's dumps, without building
// the index again: a caller locating many bytes builds it once.
func (s *Index) Locate(ref CellRef, i int) (string, int64, error) {
	var c RankCache
	ok := false
	for _, x := range s.Caches(ref.Group) {
		v := x.View
		if (v.Layer.Name == ref.Layer || slices.Contains(v.Aliases, ref.Layer)) && ref.Head >= v.HeadBase && ref.Head < v.HeadBase+v.Heads && v.ReplicaIndex == ref.Replica {
			c, ok = x, true
			break
		}
	}
	if !ok {
		return "", 0, fmt.Errorf("locating %s: no dump holds that layer, head and replica", ref)
	}
	if s.RankRequest(c.Dump, ref.Request) == nil {
		return "", 0, fmt.Errorf("locating %s: %q does not hold the request", ref, s.Dumps[c.Dump].Path)
	}
	cells := &c.View.Cells
	if cells.Data == nil {
		return "", 0, fmt.Errorf("locating %s: the cache is in device memory", ref)
	}
	if i < 0 || i >= cells.CellBytes {
		return "", 0, fmt.Errorf("locating %s: byte %d of a %d-byte cell", ref, i, cells.CellBytes)
	}
	// A state row is the request's state block at position 0; a cell is
	// the token's block.
	pos, tok := 0, 0
	if !c.View.State {
		pos, tok = ref.Token/c.Group.BlockSize, ref.Token%c.Group.BlockSize
	}
	b, ok := s.Block(c.Dump, ref.Request, c.Group, pos)
	if !ok || ref.Token < 0 {
		return "", 0, fmt.Errorf("locating %s: no block at position %d of group %d", ref, pos, ref.Group)
	}
	addr := cells.CellAddr(b, tok, ref.Head-c.View.HeadBase)
	for _, run := range cells.Runs {
		if i < run.Len {
			return cells.File, cells.FileOffset + addr + run.Offset + int64(i), nil
		}
		i -= run.Len
	}
	return "", 0, fmt.Errorf("locating %s: byte beyond the cell's runs", ref)
}

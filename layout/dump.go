package layout

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Dump is one rank's KV cache: its manifest, the resolved groups and the
// mapped data. Close releases the mappings.
type Dump struct {
	// Path is the .safetensors file or the dump directory.
	Path     string
	Manifest *Manifest
	Groups   []*GroupView // in manifest order
	closers  []io.Closer
}

// DumpError is a dump that cannot be opened: the file, the field and what is
// wrong.
type DumpError struct {
	File  string
	Field string
	Err   error
}

func (e *DumpError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("dump %q: %v", e.File, e.Err)
	}
	return fmt.Sprintf("dump %q: %s: %v", e.File, e.Field, e.Err)
}

func (e *DumpError) Unwrap() error { return e.Err }

// IsDump reports whether path is a dump: a .safetensors file or a
// directory holding manifest.json.
func IsDump(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	if st.IsDir() {
		_, err := os.Stat(filepath.Join(path, "manifest.json"))
		return err == nil
	}
	return strings.HasSuffix(path, ".safetensors")
}

// Open opens one rank's dump: a .safetensors file with the manifest in its
// __metadata__ under "kvaudit.manifest", or a directory holding
// manifest.json and the data files it names. Files are mapped read-only.
func Open(path string) (*Dump, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &DumpError{File: path, Err: err}
	}
	d := &Dump{Path: path}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	files := map[string]*Safetensors{}
	var dir, manifestFile string
	var embedded *Safetensors
	if st.IsDir() {
		dir = path
		manifestFile = filepath.Join(path, "manifest.json")
		data, err := os.ReadFile(manifestFile)
		if err != nil {
			return nil, &DumpError{File: path, Err: fmt.Errorf("not a dump: %w", err)}
		}
		if d.Manifest, err = ParseManifest(manifestFile, data); err != nil {
			return nil, err
		}
	} else {
		dir = filepath.Dir(path)
		manifestFile = path
		embedded, err = OpenSafetensors(path)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, embedded)
		files[""] = embedded
		text, ok := embedded.Metadata[MetadataKey]
		if !ok {
			return nil, &DumpError{File: path, Field: "__metadata__", Err: fmt.Errorf("no %q key: not a kvaudit dump (a dump directory holds manifest.json)", MetadataKey)}
		}
		if d.Manifest, err = ParseManifest(path, []byte(text)); err != nil {
			return nil, err
		}
	}
	// safetensorsFile returns the file a layer's tensor lives in.
	safetensorsFile := func(name string) (*Safetensors, error) {
		if f, ok := files[name]; ok {
			return f, nil
		}
		p := name
		if name == "" {
			matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if len(matches) != 1 {
				return nil, fmt.Errorf("no file given and the dump directory holds %d .safetensors files, not one", len(matches))
			}
			p = matches[0]
		} else {
			p = filepath.Join(dir, filepath.FromSlash(name))
		}
		f, err := OpenSafetensors(p)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, f)
		files[name] = f
		return f, nil
	}
	raws := map[string]*Mapping{}
	rawFile := func(name string) (*Mapping, error) {
		if f, ok := raws[name]; ok {
			return f, nil
		}
		f, err := MapFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, f)
		raws[name] = f
		return f, nil
	}
	m := d.Manifest
	tensor := func(gf string, g *Group, l *Layer) (opened, string, error) {
		li := slices.IndexFunc(g.Layers, func(x Layer) bool { return x.Name == l.Name })
		field := fmt.Sprintf("%s.layers[%d]", gf, li)
		fail := func(f string, err error) (opened, string, error) {
			var se *SafetensorsError
			if errors.As(err, &se) {
				return opened{}, "", err
			}
			return opened{}, "", &DumpError{File: manifestFile, Field: f, Err: fmt.Errorf("layer %q: %w", l.Name, err)}
		}
		var geo tensorGeometry
		var data []byte
		var file string
		var fileOffset int64
		var device *DeviceTensor
		switch s := l.Source; {
		case s == nil:
			f, err := safetensorsFile(l.File)
			if err != nil {
				return fail(field+".file", err)
			}
			ti, ok := f.Tensor(l.Tensor)
			if !ok {
				return fail(field+".tensor", fmt.Errorf("tensor %q missing from %q", l.Tensor, f.Path))
			}
			data, file, fileOffset = ti.Data, f.Path, f.DataOffset+ti.Begin
			geo = tensorGeometry{shape: ti.Shape, dtype: ti.Dtype, size: int64(len(ti.Data))}
			geo.strides = rowMajorStrides(ti.Shape, int64(max(ti.Dtype.Bits/8, 1)))
		default:
			dt, _ := ParseDtype(s.Dtype) // validated with the manifest
			elem := int64(max(dt.Bits/8, 1))
			geo = tensorGeometry{shape: s.Shape, dtype: dt, size: -1}
			if s.Strides == nil {
				geo.strides = rowMajorStrides(s.Shape, elem)
			} else {
				for _, st := range s.Strides {
					geo.strides = append(geo.strides, st*elem)
				}
			}
			if s.CUDAIPC != "" {
				device = &DeviceTensor{IPCHandle: s.CUDAIPC, Offset: s.Offset, Dtype: dt, Shape: s.Shape, Strides: geo.strides}
				file = "cuda_ipc"
				break
			}
			f, err := rawFile(s.File)
			if err != nil {
				return fail(field+".source.file", err)
			}
			if s.Offset > int64(len(f.Data)) {
				return fail(field+".source.offset", fmt.Errorf("offset %d is past the end of %q (%d bytes)", s.Offset, f.Path, len(f.Data)))
			}
			data, file, fileOffset = f.Data[s.Offset:], f.Path, s.Offset
			geo.size = int64(len(data))
		}
		var o opened
		var reason string
		var err error
		if g.Kind == KindMamba {
			o.views, o.keys, o.firstRows, o.states, o.rows, reason, err = stateViews(m, l, geo)
		} else {
			var v CellView
			v, reason, err = buildCellView(m, g, l, geo)
			o.views = []CellView{v}
		}
		if err != nil {
			return fail(field, err)
		}
		for i := range o.views {
			v := &o.views[i]
			v.Data, v.File, v.FileOffset, v.Device = data, file, fileOffset, device
		}
		return o, reason, nil
	}
	for gi := range m.Groups {
		gv, err := resolveGroup(m, gi, tensor)
		if err != nil {
			var me *ManifestError
			if errors.As(err, &me) && me.File == "" {
				me.File = manifestFile
			}
			return nil, err
		}
		d.Groups = append(d.Groups, gv)
	}
	ok = true
	return d, nil
}

// Close unmaps the dump's files.
func (d *Dump) Close() error {
	var errs []error
	for _, c := range d.closers {
		errs = append(errs, c.Close())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// Rank is a rank of a side: its pipeline and tensor parallel ranks.
type Rank struct {
	PP int `json:"pp"`
	TP int `json:"tp"`
}

func (r Rank) String() string { return fmt.Sprintf("pp %d tp %d", r.PP, r.TP) }

// Rank returns the dump's (pp_rank, tp_rank).
func (d *Dump) Rank() (pp, tp int) {
	return d.Manifest.Parallel.PPRank, d.Manifest.Parallel.TPRank
}

// GroupView returns the view of group id, or nil.
func (d *Dump) GroupView(id int) *GroupView {
	for _, g := range d.Groups {
		if g.Group.ID == id {
			return g
		}
	}
	return nil
}

// FindDumps expands a side given on the command line: each path is a dump
// (a .safetensors file, or a directory holding manifest.json) or a
// directory holding dumps (every *.safetensors file with an embedded
// manifest and every subdirectory holding manifest.json). Other files are
// returned in rest (records, payloads) for the caller to interpret.
func FindDumps(paths []string) (dumps, rest []string, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !st.IsDir() {
			if strings.HasSuffix(p, ".safetensors") {
				dumps = append(dumps, p)
			} else {
				rest = append(rest, p)
			}
			continue
		}
		if IsDump(p) {
			dumps = append(dumps, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, nil, err
		}
		found := 0
		for _, e := range entries {
			q := filepath.Join(p, e.Name())
			switch {
			case e.IsDir() && IsDump(q):
				dumps = append(dumps, q)
				found++
			case !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors") && hasEmbeddedManifest(q):
				dumps = append(dumps, q)
				found++
			case !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && e.Name() != "fault.json":
				rest = append(rest, q)
				found++
			}
		}
		if found == 0 {
			return nil, nil, fmt.Errorf("%q holds no dump: no .safetensors file with an embedded manifest and no subdirectory with manifest.json", p)
		}
	}
	return dumps, rest, nil
}

// hasEmbeddedManifest reads only the header of a .safetensors file.
func hasEmbeddedManifest(path string) bool {
	f, err := OpenSafetensors(path)
	if err != nil {
		return true // let Open report what is wrong with it
	}
	defer f.Close()
	_, ok := f.Metadata[MetadataKey]
	return ok
}

// OpenSide opens the dumps of one side (all ranks of a producer or
// consumer), sorted by (pp_rank, tp_rank). All must agree on tp_size and
// pp_size and no rank may appear twice. On error every dump opened so far is
// closed.
func OpenSide(paths []string) ([]*Dump, error) {
	var dumps []*Dump
	closeAll := func() {
		for _, d := range dumps {
			d.Close()
		}
	}
	for _, p := range paths {
		d, err := Open(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		dumps = append(dumps, d)
	}
	if err := CheckRanks(dumps); err != nil {
		closeAll()
		return nil, err
	}
	return dumps, nil
}

// CheckRanks sorts dumps by (pp_rank, tp_rank) and checks that they are
// ranks of one deployment.
func CheckRanks(dumps []*Dump) error {
	slices.SortFunc(dumps, func(a, b *Dump) int {
		ap, at := a.Rank()
		bp, bt := b.Rank()
		return cmp.Or(cmp.Compare(ap, bp), cmp.Compare(at, bt))
	})
	for i, d := range dumps {
		p, q := d.Manifest.Parallel, dumps[0].Manifest.Parallel
		if p.TPSize != q.TPSize || p.PPSize != q.PPSize {
			return &DumpError{File: d.Path, Field: "parallel", Err: fmt.Errorf("tp_size %d x pp_size %d, but %q has %d x %d", p.TPSize, p.PPSize, dumps[0].Path, q.TPSize, q.PPSize)}
		}
		if i > 0 {
			if pp, tp := dumps[i-1].Rank(); pp == p.PPRank && tp == p.TPRank {
				return &DumpError{File: d.Path, Field: "parallel", Err: fmt.Errorf("rank pp %d tp %d appears twice (also %q)", pp, tp, dumps[i-1].Path)}
			}
		}
	}
	return nil
}

// CloseAll closes every dump (of a side).
func CloseAll(dumps []*Dump) {
	for _, d := range dumps {
		d.Close()
	}
}

// NotDumpError is a path given as part of a side that is neither a dump
// nor a directory holding dumps.
type NotDumpError struct{ Path string }

func (e *NotDumpError) Error() string {
	return fmt.Sprintf("%q is not a dump: give a .safetensors file with an embedded manifest, or a directory holding manifest.json or dumps", e.Path)
}

// OpenPaths opens a side given as paths: dumps, or directories holding
// them, as FindDumps reads them. Any other file is a *NotDumpError. It is
// OpenSide after FindDumps; the caller closes the dumps (CloseAll).
func OpenPaths(paths []string) ([]*Dump, error) {
	found, rest, err := FindDumps(paths)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, &NotDumpError{Path: rest[0]}
	}
	return OpenSide(found)
}

package layout

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
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
//
// A dump is untrusted input: every file a directory's manifest names must
// be a regular file that resolves, after symlinks, inside the directory
// (no absolute path, no "..", no symlink leading out of it); a .safetensors
// dump reads only its own file. Anything else is a *DumpError naming the
// manifest and the field, and nothing outside is opened. FIFOs and devices
// are refused without blocking; manifest.json is read only up to
// MaxManifestSize.
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
	var root *os.Root // the dump directory; nil for a .safetensors dump
	if st.IsDir() {
		dir = path
		manifestFile = filepath.Join(path, "manifest.json")
		if root, err = os.OpenRoot(path); err != nil {
			return nil, &DumpError{File: path, Err: err}
		}
		defer root.Close()
		f, fi, err := openRegular(root, "manifest.json", manifestFile)
		if err != nil {
			var re *ReadError
			if errors.As(err, &re) {
				return nil, err
			}
			return nil, &DumpError{File: path, Err: fmt.Errorf("not a dump: %w", err)}
		}
		data, err := readCapped(f, fi.Size(), manifestFile, MaxManifestSize, "manifest")
		f.Close()
		if err != nil {
			return nil, err
		}
		if d.Manifest, err = ParseManifest(manifestFile, data); err != nil {
			return nil, err
		}
	} else {
		dir = filepath.Dir(path)
		manifestFile = path
		embedded, err := OpenSafetensors(path)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, embedded)
		files[""] = embedded
		files[filepath.Base(path)] = embedded
		text, ok := embedded.Metadata[MetadataKey]
		if !ok {
			return nil, &DumpError{File: path, Field: "__metadata__", Err: fmt.Errorf("no %q key: not a kvaudit dump (a dump directory holds manifest.json)", MetadataKey)}
		}
		if d.Manifest, err = ParseManifest(path, []byte(text)); err != nil {
			return nil, err
		}
	}
	// inside checks a file name the manifest gives: a local path, for a
	// dump directory (a .safetensors dump names no other file).
	inside := func(name string) (string, error) {
		if root == nil {
			return "", fmt.Errorf("file %q: a .safetensors dump reads only its own tensors; a dump naming other files is a directory holding manifest.json", name)
		}
		local := filepath.FromSlash(name)
		if !filepath.IsLocal(local) {
			return "", fmt.Errorf("file %q is outside the dump directory %q (absolute, empty, or leaving it with \"..\"): refused", name, dir)
		}
		return local, nil
	}
	// confined wraps an error of opening name in the dump directory.
	confined := func(name string, err error) error {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
			return fmt.Errorf("file %q resolves outside the dump directory %q (through a symbolic link): refused", name, dir)
		}
		return err
	}
	// safetensorsFile returns the file a layer's tensor lives in.
	safetensorsFile := func(name string) (*Safetensors, error) {
		if f, ok := files[name]; ok {
			return f, nil
		}
		key := name
		if name == "" {
			matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if len(matches) != 1 {
				return nil, fmt.Errorf("no file given and the dump directory holds %d .safetensors files, not one", len(matches))
			}
			name = filepath.Base(matches[0])
			if f, ok := files[name]; ok {
				files[key] = f
				return f, nil
			}
		}
		local, err := inside(name)
		if err != nil {
			return nil, err
		}
		m, err := mapIn(root, local, filepath.Join(dir, local))
		if err != nil && !errors.Is(err, ErrEmptyFile) {
			return nil, confined(name, err)
		}
		f, err := openSafetensorsMapping(filepath.Join(dir, local), m)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, f)
		files[key], files[name] = f, f
		return f, nil
	}
	raws := map[string]*Mapping{}
	rawFile := func(name string) (*Mapping, error) {
		if f, ok := raws[name]; ok {
			return f, nil
		}
		local, err := inside(name)
		if err != nil {
			return nil, err
		}
		f, err := mapIn(root, local, filepath.Join(dir, local))
		if err != nil {
			return nil, confined(name, err)
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
		var err error
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
			geo.strides, _ = rowMajorStrides(ti.Shape, int64(max(ti.Dtype.Bits/8, 1))) // the shape's size was checked
		default:
			var sub string
			if geo, sub, err = sourceGeometry(s, l.Layout); err != nil {
				return fail(field+".source"+sub, err)
			}
			dt := geo.dtype
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

// sourceGeometry returns the geometry of a source's tensor (its size
// unknown, -1), refusing strides that overflow and layouts whose distinct
// elements may share memory; the error's field is what follows ".source"
// (".strides[2]", ".strides", ".shape", ""). names are the layout's axes.
func sourceGeometry(s *Source, names []string) (tensorGeometry, string, error) {
	dt, err := ParseDtype(s.Dtype)
	if err != nil {
		return tensorGeometry{}, ".dtype", err
	}
	elem := int64(max(dt.Bits/8, 1))
	geo := tensorGeometry{shape: s.Shape, dtype: dt, size: -1}
	if s.Strides == nil {
		var ok bool
		if geo.strides, ok = rowMajorStrides(s.Shape, elem); !ok {
			return geo, ".shape", fmt.Errorf("shape %v of %d-byte elements exceeds 2^62 bytes", s.Shape, elem)
		}
	} else {
		if len(s.Strides) != len(s.Shape) {
			return geo, ".strides", fmt.Errorf("%d strides for %d dimensions", len(s.Strides), len(s.Shape))
		}
		for i, st := range s.Strides {
			if st < 0 || st > math.MaxInt64/elem {
				return geo, fmt.Sprintf(".strides[%d]", i), fmt.Errorf("stride %d of %d-byte elements overflows a 64-bit byte offset", st, elem)
			}
			geo.strides = append(geo.strides, st*elem)
		}
	}
	for i, n := range s.Shape {
		if n < 0 {
			return geo, fmt.Sprintf(".shape[%d]", i), fmt.Errorf("%d is negative", n)
		}
	}
	if _, ok := tensorEnd(geo); !ok {
		return geo, "", fmt.Errorf("tensor of shape %v and strides %v (bytes) spans more than 2^62 bytes", s.Shape, geo.strides)
	}
	if msg := overlapping(geo, names); msg != "" {
		return geo, ".strides", errors.New(msg)
	}
	return geo, "", nil
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
// manifest, every subdirectory holding manifest.json, and every *.json
// file that is a record). Other files given as paths are returned in rest
// (records, payloads) for the caller to interpret.
//
// In a directory, a *.json file is taken as a record when its first 4 KiB
// name the record format ("kvaudit-record/"), as kvaudit's records do;
// any other JSON file (notes, fault.json) is not read further. A
// .safetensors file is checked for an embedded manifest by looking for its
// key in the header, without parsing it (Open parses it, once). A FIFO,
// device or socket named like a dump or record is an error, found without
// blocking, and so is a symbolic link named so that leads out of the
// directory.
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
		root, err := os.OpenRoot(p)
		if err != nil {
			return nil, nil, err
		}
		found := 0
		for _, e := range entries {
			q := filepath.Join(p, e.Name())
			candidate := strings.HasSuffix(e.Name(), ".safetensors") || strings.HasSuffix(e.Name(), ".json")
			if candidate && e.Type()&fs.ModeSymlink != 0 {
				// A link in a side directory stays inside it, like the
				// files a dump names.
				if _, err := root.Stat(e.Name()); err != nil {
					root.Close()
					return nil, nil, &ReadError{Path: q, Msg: fmt.Sprintf("a symbolic link that resolves outside the side directory %q (or nowhere): refused", p)}
				}
			}
			switch {
			case e.IsDir() && IsDump(q):
				dumps = append(dumps, q)
				found++
			case !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors"):
				embedded, err := hasEmbeddedManifest(q)
				if err != nil {
					root.Close()
					return nil, nil, err
				}
				if embedded {
					dumps = append(dumps, q)
					found++
				}
			case !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && e.Name() != "fault.json":
				head, err := readHead(q, sniffSize)
				if err != nil {
					root.Close()
					return nil, nil, err
				}
				if bytes.Contains(head, []byte(`"kvaudit-record/`)) { // checksum.RecordFormat
					rest = append(rest, q)
					found++
				}
			}
		}
		root.Close()
		if found == 0 {
			return nil, nil, fmt.Errorf("%q holds no dump: no .safetensors file with an embedded manifest, no subdirectory with manifest.json and no record", p)
		}
	}
	return dumps, rest, nil
}

// hasEmbeddedManifest says whether a .safetensors file's header holds the
// manifest key, looking for it as a JSON string without parsing the header.
// A file whose header cannot be located is reported as a dump, for Open to
// say what is wrong with it; a file that is not a regular file is an error.
func hasEmbeddedManifest(path string) (bool, error) {
	m, err := MapFile(path)
	if errors.Is(err, ErrEmptyFile) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	found := true
	err = Guard(path, func() error {
		if len(m.Data) < 8 {
			return nil
		}
		n := binary.LittleEndian.Uint64(m.Data)
		if n > MaxSafetensorsHeader || n > uint64(len(m.Data)-8) {
			return nil
		}
		found = bytes.Contains(m.Data[8:8+n], []byte(`"`+MetadataKey+`"`))
		return nil
	})
	return found, err
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

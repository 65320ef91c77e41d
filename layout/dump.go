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
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/parallel"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/internal/strided"
	"github.com/kvaudit/kvaudit/parse"
)

// Dump is one rank's KV cache: its manifest, the resolved groups and the
// mapped data. Close releases the mappings.
type Dump struct {
	// Path is the .safetensors file or the dump directory.
	Path     string
	Manifest *Manifest
	Groups   []*GroupView // in manifest order
	closers  []io.Closer
	// geometry is each layer's tensor as it was opened (shape and byte
	// strides), for the address map.
	geometry map[*Layer]strided.Tensor
	// metadata is a .safetensors dump's __metadata__ (nil for a dump
	// directory): an exporter's engine geometry, for the address map.
	metadata map[string]string
	// sglang is each buffer of an SGLang dump's pool, in kv_data_ptrs
	// order (nil for another engine's dump).
	sglang [][]byte
}

// isDump reports whether path is a dump: a .safetensors file or a
// directory holding manifest.json.
func isDump(path string) bool {
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
// dump reads only its own file. Anything else is a *parse.Error (parse.Dump) naming the
// manifest and the field, and nothing outside is opened. FIFOs and devices
// are refused without blocking; manifest.json is read only up to
// MaxManifestSize.
func Open(path string) (*Dump, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &parse.Error{Format: parse.Dump, File: path, Err: err}
	}
	o := &opener{d: &Dump{Path: path}, files: map[string]*safetensors.File{}, raws: map[string]*mapped.Mapping{}}
	ok := false
	defer func() {
		if !ok {
			o.d.Close()
		}
	}()
	if st.IsDir() {
		err = o.readManifestFile(path)
	} else {
		err = o.readEmbeddedManifest(path)
	}
	if o.root != nil {
		defer o.root.Close()
	}
	if err != nil {
		return nil, err
	}
	if err := o.resolveGroups(); err != nil {
		return nil, err
	}
	if err := o.openSGLang(); err != nil {
		return nil, err
	}
	ok = true
	return o.d, nil
}

// opener is the state of Open: the dump being built, where its manifest
// came from, and the files its layers have mapped so far (each mapped
// once, closed with the dump).
type opener struct {
	d            *Dump
	dir          string   // the dump directory, or the .safetensors file's
	manifestFile string   // manifest.json, or the .safetensors file
	root         *os.Root // the dump directory; nil for a .safetensors dump
	files        map[string]*safetensors.File
	raws         map[string]*mapped.Mapping
}

// readManifestFile reads the manifest of a dump directory.
func (o *opener) readManifestFile(path string) error {
	o.dir = path
	o.manifestFile = filepath.Join(path, "manifest.json")
	root, err := os.OpenRoot(path)
	if err != nil {
		return &parse.Error{Format: parse.Dump, File: path, Err: err}
	}
	o.root = root
	f, fi, err := mapped.OpenRegular(root, "manifest.json", o.manifestFile)
	if err != nil {
		var re *ReadError
		if errors.As(err, &re) {
			return err
		}
		return &parse.Error{Format: parse.Dump, File: path, Err: fmt.Errorf("not a dump: %w", err)}
	}
	data, err := mapped.ReadCapped(f, fi.Size(), o.manifestFile, MaxManifestSize, "manifest")
	f.Close()
	if err != nil {
		return err
	}
	o.d.Manifest, err = ParseManifest(o.manifestFile, data)
	return err
}

// readEmbeddedManifest reads the manifest in a .safetensors dump's
// __metadata__; the file is also the one its layers' tensors live in.
func (o *opener) readEmbeddedManifest(path string) error {
	o.dir = filepath.Dir(path)
	o.manifestFile = path
	embedded, err := safetensors.Open(path)
	if err != nil {
		return err
	}
	o.d.closers = append(o.d.closers, embedded)
	o.files[""] = embedded
	o.files[filepath.Base(path)] = embedded
	o.d.metadata = embedded.Metadata
	text, ok := embedded.Metadata[ManifestKey]
	if !ok {
		return &parse.Error{Format: parse.Dump, File: path, Field: "__metadata__", Err: fmt.Errorf("no %q key: not a kvaudit dump (a dump directory holds manifest.json)", ManifestKey)}
	}
	o.d.Manifest, err = ParseManifest(path, []byte(text))
	return err
}

// resolveGroups builds the view of every group of the manifest.
func (o *opener) resolveGroups() error {
	m := o.d.Manifest
	for gi := range m.Groups {
		gv, err := resolveGroup(m, gi, o.tensor)
		if err != nil {
			if me := parse.As(err, parse.Manifest); me != nil && me.File == "" {
				me.File = o.manifestFile
			}
			return err
		}
		o.d.Groups = append(o.d.Groups, gv)
	}
	return nil
}

// inside checks a file name the manifest gives: a local path, for a dump
// directory (a .safetensors dump names no other file).
func (o *opener) inside(name string) (string, error) {
	if o.root == nil {
		return "", fmt.Errorf("file %q: a .safetensors dump reads only its own tensors; a dump naming other files is a directory holding manifest.json", name)
	}
	local := filepath.FromSlash(name)
	if !filepath.IsLocal(local) {
		return "", fmt.Errorf("file %q is outside the dump directory %q (absolute, empty, or leaving it with \"..\"): refused", name, o.dir)
	}
	return local, nil
}

// confined wraps an error of opening name in the dump directory.
func (o *opener) confined(name string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return fmt.Errorf("file %q resolves outside the dump directory %q (through a symbolic link): refused", name, o.dir)
	}
	return err
}

// safetensorsFile returns the file a layer's tensor lives in.
func (o *opener) safetensorsFile(name string) (*safetensors.File, error) {
	if f, ok := o.files[name]; ok {
		return f, nil
	}
	key := name
	if name == "" {
		matches, _ := filepath.Glob(filepath.Join(o.dir, "*.safetensors"))
		if len(matches) != 1 {
			return nil, fmt.Errorf("no file given and the dump directory holds %d .safetensors files, not one", len(matches))
		}
		name = filepath.Base(matches[0])
		if f, ok := o.files[name]; ok {
			o.files[key] = f
			return f, nil
		}
	}
	local, err := o.inside(name)
	if err != nil {
		return nil, err
	}
	m, err := mapped.MapIn(o.root, local, filepath.Join(o.dir, local))
	if err != nil && !errors.Is(err, mapped.ErrEmpty) {
		return nil, o.confined(name, err)
	}
	f, err := safetensors.OpenMapping(filepath.Join(o.dir, local), m)
	if err != nil {
		return nil, err
	}
	o.d.closers = append(o.d.closers, f)
	o.files[key], o.files[name] = f, f
	return f, nil
}

// rawFile maps a raw source's file.
func (o *opener) rawFile(name string) (*mapped.Mapping, error) {
	if f, ok := o.raws[name]; ok {
		return f, nil
	}
	local, err := o.inside(name)
	if err != nil {
		return nil, err
	}
	f, err := mapped.MapIn(o.root, local, filepath.Join(o.dir, local))
	if err != nil {
		return nil, o.confined(name, err)
	}
	o.d.closers = append(o.d.closers, f)
	o.raws[name] = f
	return f, nil
}

// tensor opens layer l of group g (field gf) as cell views over the bytes
// of its tensor (resolveGroup's tensor function).
func (o *opener) tensor(gf string, g *Group, l *Layer) (opened, string, error) {
	m := o.d.Manifest
	li := slices.IndexFunc(g.Layers, func(x Layer) bool { return x.Name == l.Name })
	field := fmt.Sprintf("%s.layers[%d]", gf, li)
	fail := func(f string, err error) (opened, string, error) {
		if parse.As(err, parse.Safetensors) != nil {
			return opened{}, "", err
		}
		return opened{}, "", &parse.Error{Format: parse.Dump, File: o.manifestFile, Field: f, Err: fmt.Errorf("layer %q: %w", l.Name, err)}
	}
	t, sub, err := o.tensorBytes(l)
	if err != nil {
		return fail(field+sub, err)
	}
	var op opened
	var reason string
	if g.Kind == KindMamba {
		op.views, op.keys, op.firstRows, op.states, op.rows, reason, err = stateViews(m, l, t.geo)
	} else {
		var v CellView
		v, reason, err = buildCellView(m, g, l, t.geo)
		op.views = []CellView{v}
	}
	if err != nil {
		return fail(field, err)
	}
	for i := range op.views {
		v := &op.views[i]
		v.Data, v.File, v.FileOffset, v.Device = t.data, t.file, t.fileOffset, t.device
	}
	if o.d.geometry == nil {
		o.d.geometry = map[*Layer]strided.Tensor{}
	}
	o.d.geometry[l] = t.geo
	return op, reason, nil
}

// layerTensor is where a layer's tensor lies: its geometry and bytes in a
// mapped file, or, in live device memory, its device tensor.
type layerTensor struct {
	geo        strided.Tensor
	data       []byte
	file       string
	fileOffset int64
	device     *DeviceTensor
}

// tensorBytes locates layer l's tensor: a safetensors tensor, or a raw or
// cuda_ipc source. On error, sub is the layer's field at fault (".file",
// ".tensor", ".source.offset", ...).
func (o *opener) tensorBytes(l *Layer) (t layerTensor, sub string, err error) {
	s := l.Source
	if s == nil {
		f, err := o.safetensorsFile(l.File)
		if err != nil {
			return t, ".file", err
		}
		ti, ok := f.Tensor(l.Tensor)
		if !ok {
			return t, ".tensor", fmt.Errorf("tensor %q missing from %q", l.Tensor, f.Path)
		}
		t.data, t.file, t.fileOffset = ti.Data, f.Path, f.DataOffset+ti.Begin
		t.geo = strided.Tensor{Shape: ti.Shape, Dtype: ti.Dtype, Size: int64(len(ti.Data))}
		t.geo.Strides, _ = rowMajorStrides(ti.Shape, int64(max(ti.Dtype.Bits/8, 1))) // the shape's size was checked
		return t, "", nil
	}
	if t.geo, sub, err = sourceGeometry(s, l.Layout); err != nil {
		return t, ".source" + sub, err
	}
	if s.CUDAIPC != "" {
		t.device = &DeviceTensor{IPCHandle: s.CUDAIPC, Offset: s.Offset, Dtype: t.geo.Dtype, Shape: s.Shape, Strides: t.geo.Strides}
		t.file = "cuda_ipc"
		return t, "", nil
	}
	f, err := o.rawFile(s.File)
	if err != nil {
		return t, ".source.file", err
	}
	if s.Offset > int64(len(f.Data)) {
		return t, ".source.offset", fmt.Errorf("offset %d is past the end of %q (%d bytes)", s.Offset, f.Path, len(f.Data))
	}
	t.data, t.file, t.fileOffset = f.Data[s.Offset:], f.Path, s.Offset
	t.geo.Size = int64(len(t.data))
	return t, "", nil
}

// sourceGeometry returns the geometry of a source's tensor (its size
// unknown, -1), refusing strides that overflow and layouts whose distinct
// elements may share memory; the error's field is what follows ".source"
// (".strides[2]", ".strides", ".shape", ""). names are the layout's axes.
func sourceGeometry(s *Source, names []string) (strided.Tensor, string, error) {
	dt, err := ParseDtype(s.Dtype)
	if err != nil {
		return strided.Tensor{}, ".dtype", err
	}
	elem := int64(max(dt.Bits/8, 1))
	geo := strided.Tensor{Shape: s.Shape, Dtype: dt, Size: -1}
	if s.Strides == nil {
		var ok bool
		if geo.Strides, ok = rowMajorStrides(s.Shape, elem); !ok {
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
			geo.Strides = append(geo.Strides, st*elem)
		}
	}
	for i, n := range s.Shape {
		if n < 0 {
			return geo, fmt.Sprintf(".shape[%d]", i), fmt.Errorf("%d is negative", n)
		}
	}
	if _, ok := strided.End(geo); !ok {
		return geo, "", fmt.Errorf("tensor of shape %v and strides %v (bytes) spans more than 2^62 bytes", s.Shape, geo.Strides)
	}
	if msg := strided.Overlapping(geo, names); msg != "" {
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

// Metadata returns a .safetensors dump's __metadata__ (nil for a dump
// directory): its manifest, and what an exporter wrote beside it
// (kvaudit_export's engine geometry and block ids, docs/spec.md §13).
func (d *Dump) Metadata() map[string]string { return d.metadata }

// Geometry returns layer l's tensor as the dump opened it: its shape, its
// strides in bytes and its element type; ok is false for a layer whose
// tensor was not opened.
func (d *Dump) Geometry(l *Layer) (shape, strides []int64, dtype Dtype, ok bool) {
	g, ok := d.geometry[l]
	return g.Shape, g.Strides, g.Dtype, ok
}

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
// directory. A path that does not exist is a *NotFoundError, and a
// directory holding neither dumps nor records a *NoDumpError (which names
// its subdirectories that hold dumps).
//
// A path that does not exist and holds a glob metacharacter (*, ? or [)
// is a pattern (filepath.Match): the paths it matches, in name order, are
// read as if given one by one ('rec/*' for the records of every host); a
// pattern that matches nothing is a *NotFoundError too.
func FindDumps(paths []string) (dumps, rest []string, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && IsPattern(p) {
			matches, gerr := filepath.Glob(p)
			if gerr != nil || len(matches) == 0 {
				return nil, nil, &NotFoundError{Path: p, Err: err, Pattern: true}
			}
			d, r, err := FindDumps(matches)
			if err != nil {
				return nil, nil, err
			}
			dumps, rest = append(dumps, d...), append(rest, r...)
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, &NotFoundError{Path: p, Err: err}
		}
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
		if isDump(p) {
			dumps = append(dumps, p)
			continue
		}
		d, r, err := scanSideDir(p)
		if err != nil {
			return nil, nil, err
		}
		if len(d)+len(r) == 0 {
			return nil, nil, &NoDumpError{Dir: p, Sides: sidesBelow(p)}
		}
		dumps, rest = append(dumps, d...), append(rest, r...)
	}
	return dumps, rest, nil
}

// scanSideDir returns the dumps and records directly in side directory p
// (see FindDumps).
func scanSideDir(p string) (dumps, rest []string, err error) {
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(p)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	for _, e := range entries {
		q := filepath.Join(p, e.Name())
		candidate := strings.HasSuffix(e.Name(), ".safetensors") || strings.HasSuffix(e.Name(), ".json")
		if candidate && e.Type()&fs.ModeSymlink != 0 {
			// A link in a side directory stays inside it, like the
			// files a dump names.
			if _, err := root.Stat(e.Name()); err != nil {
				return nil, nil, &ReadError{Path: q, Msg: fmt.Sprintf("a symbolic link that resolves outside the side directory %q (or nowhere): refused", p)}
			}
		}
		switch {
		case e.IsDir() && isDump(q):
			dumps = append(dumps, q)
		case !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors"):
			embedded, err := hasEmbeddedManifest(q)
			if err != nil {
				return nil, nil, err
			}
			if embedded {
				dumps = append(dumps, q)
			}
		case !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && e.Name() != "fault.json":
			head, err := readHead(q, sniffSize)
			if err != nil {
				return nil, nil, err
			}
			if bytes.Contains(head, []byte(`"kvaudit-record/`)) { // wire.RecordFormat
				rest = append(rest, q)
			}
		}
	}
	return dumps, rest, nil
}

// sidesBelow returns the subdirectories of dir that hold dumps, in name
// order: the sides of a root such as synth --out writes.
func sidesBelow(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var sides []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		q := filepath.Join(dir, e.Name())
		if dumps, _, err := scanSideDir(q); err == nil && len(dumps) > 0 {
			sides = append(sides, q)
		}
	}
	return sides
}

// NotFoundError is a path given as (part of) a side that does not exist,
// or a pattern (Pattern) that matches nothing.
type NotFoundError struct {
	Path    string
	Err     error // the error of os.Stat
	Pattern bool
}

func (e *NotFoundError) Error() string {
	if e.Pattern {
		return fmt.Sprintf("no file matches %q: want dumps (.safetensors files, or directories with manifest.json), directories of dumps, or record files", e.Path)
	}
	return fmt.Sprintf("%q does not exist: want a dump (a .safetensors file, or a directory with manifest.json), a directory of dumps, or a record file", e.Path)
}

// IsPattern says whether a side path is a glob pattern (FindDumps): it
// holds *, ? or [.
func IsPattern(path string) bool { return strings.ContainsAny(path, "*?[") }

func (e *NotFoundError) Unwrap() error { return e.Err }

// NoDumpError is a directory given as a side that holds no dump and no
// record. Sides names its subdirectories that do hold dumps, if any: the
// directory is then a root holding several sides (producer/ and
// consumer/, as synth --out writes them), and one of them was meant.
type NoDumpError struct {
	Dir   string
	Sides []string
}

func (e *NoDumpError) Error() string {
	if len(e.Sides) == 0 {
		return fmt.Sprintf("%q holds no dump: no .safetensors file with an embedded manifest, no subdirectory with manifest.json and no record", e.Dir)
	}
	q := make([]string, len(e.Sides))
	for i, s := range e.Sides {
		q[i] = strconv.Quote(s)
	}
	list := q[0]
	if len(q) > 1 {
		list = strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
	}
	return fmt.Sprintf("%q holds no dump itself; the dumps are in %s: give one of them", e.Dir, list)
}

// hasEmbeddedManifest says whether a .safetensors file's header holds the
// manifest key, looking for it as a JSON string without parsing the header.
// A file whose header cannot be located is reported as a dump, for Open to
// say what is wrong with it; a file that is not a regular file is an error.
func hasEmbeddedManifest(path string) (bool, error) {
	m, err := mapped.Map(path)
	if errors.Is(err, mapped.ErrEmpty) {
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
		if n > safetensors.MaxHeader || n > uint64(len(m.Data)-8) {
			return nil
		}
		found = bytes.Contains(m.Data[8:8+n], []byte(`"`+ManifestKey+`"`))
		return nil
	})
	return found, err
}

// OpenSide opens the dumps of one side (all ranks of a producer or
// consumer), sorted by (pp_rank, tp_rank). All must agree on tp_size and
// pp_size and no rank may appear twice. The dumps are opened on up to
// GOMAXPROCS goroutines (each rank's manifest and headers are parsed on
// their own: a TP 8 side of a Llama model is 8 manifests); an error is
// the one Open gives for the first failing path in the order given, as if
// they were opened in turn. On error every dump opened is closed.
func OpenSide(paths []string) ([]*Dump, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	dumps := make([]*Dump, len(paths))
	if err := parallel.Each(len(paths), func(i int) (err error) {
		dumps[i], err = Open(paths[i])
		return err
	}); err != nil {
		CloseAll(dumps)
		return nil, err
	}
	if err := checkRanks(dumps); err != nil {
		CloseAll(dumps)
		return nil, err
	}
	return dumps, nil
}

// checkRanks sorts dumps by (pp_rank, tp_rank) and checks that they are
// ranks of one deployment.
func checkRanks(dumps []*Dump) error {
	slices.SortFunc(dumps, func(a, b *Dump) int {
		ap, at := a.Rank()
		bp, bt := b.Rank()
		return cmp.Or(cmp.Compare(ap, bp), cmp.Compare(at, bt))
	})
	for i, d := range dumps {
		p, q := d.Manifest.Parallel, dumps[0].Manifest.Parallel
		if p.TPSize != q.TPSize || p.PPSize != q.PPSize {
			return &parse.Error{Format: parse.Dump, File: d.Path, Field: "parallel", Err: fmt.Errorf("tp_size %d x pp_size %d, but %q has %d x %d", p.TPSize, p.PPSize, dumps[0].Path, q.TPSize, q.PPSize)}
		}
		if i > 0 {
			if pp, tp := dumps[i-1].Rank(); pp == p.PPRank && tp == p.TPRank {
				return &parse.Error{Format: parse.Dump, File: d.Path, Field: "parallel", Err: fmt.Errorf("rank pp %d tp %d appears twice (also %q)", pp, tp, dumps[i-1].Path)}
			}
		}
	}
	return nil
}

// CloseAll closes every dump (of a side), on up to GOMAXPROCS goroutines:
// unmapping a rank's files is the kernel's work on every page mapped, and
// the ranks' mappings are apart.
func CloseAll(dumps []*Dump) {
	parallel.Each(len(dumps), func(i int) error {
		if dumps[i] != nil {
			dumps[i].Close()
		}
		return nil
	})
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

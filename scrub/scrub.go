package scrub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Format names a store format (the values of --format).
type Format string

// The formats, and Auto: recognise each directory's by its names and
// content.
const (
	Auto         Format = "auto"
	VLLMFS       Format = "vllm-fs"
	LMCacheFS    Format = "lmcache-fs"
	LMCacheFrame Format = "lmcache-frame"
	MooncakeSSD  Format = "mooncake-ssd"
)

// Formats are the formats a scrub reads, in the order --help lists them.
var Formats = []Format{VLLMFS, LMCacheFS, LMCacheFrame, MooncakeSSD}

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	f := Format(s)
	if f == Auto || slices.Contains(Formats, f) {
		return f, nil
	}
	names := []string{string(Auto)}
	for _, f := range Formats {
		names = append(names, string(f))
	}
	return "", fmt.Errorf("--format %q: want one of %s", s, strings.Join(names, ", "))
}

// Status is what a scrub found of one file or record.
type Status string

// The statuses, from best to worst for a verdict: Mismatch outranks
// Unverified, which outranks Verified.
const (
	Verified   Status = "verified"
	Mismatch   Status = "mismatch"
	Unverified Status = "unverified"
)

// Algorithms, as Entry.Algorithm names them.
const (
	algCRC32C = "crc32c"
	algCRC32  = "crc32"
	algXXH3   = "xxh3_64"
)

// Problems, as Entry.Problem names them: what exactly failed, for a
// mismatch or an unverified entry.
const (
	// ProblemChecksum: the stored checksum differs from the bytes'.
	ProblemChecksum = "checksum"
	// ProblemNoChecksum: nothing stored to check against (no xattr, no
	// trailer, a record written without a CRC).
	ProblemNoChecksum = "no-checksum"
	// ProblemNoXattrs: the filesystem keeps no extended attributes.
	ProblemNoXattrs = "no-xattrs"
	// ProblemChecksumSize: a stored checksum of the wrong size (an xattr
	// that is not 4 bytes).
	ProblemChecksumSize = "checksum-size"
	// ProblemTrailer: a trailer that is there but damaged (its magic).
	ProblemTrailer = "trailer"
	// ProblemTruncated: a file or record shorter than its format says
	// (or than the other files of its directory).
	ProblemTruncated = "truncated"
	// ProblemVersion: a frame of an unknown version.
	ProblemVersion = "version"
	// ProblemFingerprint: a frame stored for another chunk.
	ProblemFingerprint = "fingerprint"
	// ProblemHeader: a record header that cannot be right (unknown flags,
	// a key too long, a record larger than its allocation).
	ProblemHeader = "header"
	// ProblemRead: the file could not be read (its path and the error
	// are in Reason).
	ProblemRead = "read"
)

// Name is what a file's or record's name says it holds; each format fills
// the fields its names carry.
type Name struct {
	Model string `json:"model,omitempty"`
	// ConfigHash is vllm-fs's sha256(config)[:12] of the namespace.
	ConfigHash string `json:"config_hash,omitempty"`
	// Rank is vllm-fs's r<rank>, or lmcache's kv_rank (KVRank, the whole
	// bitmap, in hex) decoded: (world_size<<24)|(rank<<16)|
	// (local_world_size<<8)|local_rank.
	Rank           *int   `json:"rank,omitempty"`
	KVRank         string `json:"kv_rank,omitempty"`
	WorldSize      *int   `json:"world_size,omitempty"`
	LocalWorldSize *int   `json:"local_world_size,omitempty"`
	LocalRank      *int   `json:"local_rank,omitempty"`
	Group          *int   `json:"group,omitempty"`
	BlockHash      string `json:"block_hash,omitempty"`
	ChunkHash      string `json:"chunk_hash,omitempty"`
	Salt           string `json:"salt,omitempty"`
	// Key and Seq are a Mooncake record's key and write sequence number.
	Key string  `json:"key,omitempty"`
	Seq *uint64 `json:"seq,omitempty"`
}

// Entry is one file or record checked.
type Entry struct {
	Path string `json:"path"`
	// Dir is the directory (of Result.Dirs) the entry is counted in: the
	// file's own, or for vllm-fs the tier's <model>_<cfg>_r<rank>
	// namespace above its fan-out directories.
	Dir    string `json:"directory"`
	Format Format `json:"format"`
	// Offset and Length are the bytes the check covers (a record's whole
	// extent for mooncake-ssd; the whole file otherwise).
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// Algorithm is the check's ("" when there is nothing to check).
	Algorithm string `json:"algorithm"`
	// Expected is the stored value and Actual the one computed, in hex
	// ("" when there is none).
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Status   Status `json:"status"`
	// Problem (Problem* constants) and Reason say what failed.
	Problem string `json:"problem,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Note says more that does not change the status (a record Mooncake's
	// recovery would drop for its sequence number).
	Note string `json:"note,omitempty"`
	Name Name   `json:"name"`
}

// Dir is one directory of a store and the format it was read as.
type Dir struct {
	Path   string `json:"path"`
	Format Format `json:"format"`
	// How says why: the names or content it was recognised by, or that
	// --format said so.
	How        string `json:"how"`
	Files      int    `json:"files"`
	Verified   int    `json:"verified"`
	Mismatch   int    `json:"mismatch"`
	Unverified int    `json:"unverified"`
}

// Skip is a file the scrub did not read, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Result is a scrub's outcome.
type Result struct {
	Paths   []string `json:"paths"`
	Format  Format   `json:"requested_format"`
	Dirs    []Dir    `json:"directories"`
	Entries []Entry  `json:"entries"`
	Skipped []Skip   `json:"skipped"`
	// Bytes is how many bytes were read and hashed.
	Bytes int64 `json:"bytes"`
}

// Counts returns how many entries have each status.
func (r *Result) Counts() (verified, mismatch, unverified int) {
	for _, e := range r.Entries {
		switch e.Status {
		case Verified:
			verified++
		case Mismatch:
			mismatch++
		default:
			unverified++
		}
	}
	return
}

// Verdict is the worst status: Mismatch if any entry mismatches, else
// Unverified if any is unverified, else Verified.
func (r *Result) Verdict() Status {
	_, m, u := r.Counts()
	switch {
	case m > 0:
		return Mismatch
	case u > 0:
		return Unverified
	}
	return Verified
}

// Summary is the verdict in one line.
func (r *Result) Summary() string {
	v, m, u := r.Counts()
	return fmt.Sprintf("scrub: %s: %d verified, %d mismatch, %d unverified in %d directories", r.Verdict(), v, m, u, len(r.Dirs))
}

// Options are a scrub's settings.
type Options struct {
	// Format is Auto or the format every directory is read as.
	Format Format
	// Threads read files at once (0: GOMAXPROCS).
	Threads int
	// Progress, when set, is told the bytes of each file read, once it
	// is checked (from the reading goroutines, at once); they add up to
	// Result.Bytes.
	Progress func(n int64)
}

// An InputError is a path or store file a scrub cannot read as what it
// should be: Path names the file, Field the part of it (empty for the
// file as a whole).
type InputError struct {
	Path  string
	Field string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%q: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("%q: %s: %s", e.Path, e.Field, e.Msg)
}

// Limits of what a scrub reads of a store.
const (
	// maxDepth bounds how deep directories are walked.
	maxDepth = 64
	// maxDirEntries bounds one directory's entries.
	maxDirEntries = 1 << 22
	// chunkSize is the read size: each worker reads a file through one
	// buffer of this size, whatever the file's size.
	chunkSize = 1 << 20
)

// job is one unit of work: a file (or a Mooncake data file) to check.
type job struct {
	dir  *dirState
	root *dirRoot
	run  func(buf []byte, add func(Entry)) int64
}

// dirRoot is a directory of a store, open, which its files are opened
// from (one openat each, confined to it); it is closed when the walk has
// left it and its last job is done.
type dirRoot struct {
	*dirHandle
	refs atomic.Int64
}

func (d *dirRoot) hold() { d.refs.Add(1) }

func (d *dirRoot) release() {
	if d.refs.Add(-1) == 0 {
		d.close()
	}
}

// dirState is a directory being scrubbed.
type dirState struct {
	Dir
	mu      sync.Mutex
	entries []Entry
}

func (d *dirState) add(e Entry) {
	e.Dir = d.Path
	d.mu.Lock()
	d.entries = append(d.entries, e)
	d.mu.Unlock()
}

// Scrub checks the stores at paths (directories, walked, or single files)
// and returns what it found of every file or record. Nothing is written,
// renamed or deleted under paths: files are opened read-only, only
// regular files are read, symlinks are not followed, and every read stays
// inside the path given. An error is a path that cannot be scrubbed (it
// does not exist, it holds no store file, a Mooncake kv_cache.meta that
// cannot be parsed): an *InputError names the file and field.
func Scrub(ctx context.Context, paths []string, opts Options) (*Result, error) {
	if opts.Format == "" {
		opts.Format = Auto
	}
	if _, err := ParseFormat(string(opts.Format)); err != nil {
		return nil, err
	}
	res := &Result{Paths: slices.Clone(paths), Format: opts.Format, Entries: []Entry{}, Skipped: []Skip{}, Dirs: []Dir{}}
	var dirs []*dirState
	// The files are checked while the walk goes on: workers take each
	// directory's jobs as soon as it is planned.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	// A queued job holds its directory open: the queue's length bounds
	// the directories open at once.
	queue := make(chan job, 256)
	var bytes atomic.Int64
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			buf := make([]byte, chunkSize)
			for j := range queue {
				if ctx.Err() == nil {
					n := j.run(buf, j.dir.add)
					bytes.Add(n)
					if opts.Progress != nil {
						opts.Progress(n)
					}
				}
				j.root.release()
			}
		})
	}
	walkErr := func() error {
		for _, p := range paths {
			st, err := os.Stat(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return &InputError{Path: p, Msg: "does not exist"}
				}
				return &InputError{Path: p, Msg: err.Error()}
			}
			w := &walker{res: res, format: opts.Format, emit: func(j job) { queue <- j }}
			dir, only := p, ""
			switch {
			case st.IsDir():
			case st.Mode().IsRegular():
				dir, only = filepath.Dir(p), filepath.Base(p)
			default:
				return &InputError{Path: p, Msg: "not a directory or a regular file"}
			}
			h, err := openTop(dir)
			if err != nil {
				return &InputError{Path: p, Msg: err.Error()}
			}
			d := &dirRoot{dirHandle: h}
			d.hold()
			w.display, w.only = dir, only
			err = w.walk(ctx, d, ".", 0)
			d.release()
			if err != nil {
				return err
			}
			dirs = append(dirs, w.dirs...)
		}
		return nil
	}()
	close(queue)
	if walkErr != nil {
		cancel()
	}
	wg.Wait()
	if walkErr != nil {
		return nil, walkErr
	}
	if len(dirs) == 0 {
		return nil, &InputError{Path: strings.Join(paths, " "), Msg: noStoreMsg(opts.Format)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Bytes = bytes.Load()
	for _, d := range dirs {
		slices.SortFunc(d.entries, func(a, b Entry) int {
			return cmp.Or(strings.Compare(a.Path, b.Path), cmp.Compare(a.Offset, b.Offset))
		})
		for _, e := range d.entries {
			switch e.Status {
			case Verified:
				d.Verified++
			case Mismatch:
				d.Mismatch++
			default:
				d.Unverified++
			}
		}
		res.Dirs = append(res.Dirs, d.Dir)
		res.Entries = append(res.Entries, d.entries...)
	}
	slices.SortFunc(res.Skipped, func(a, b Skip) int { return strings.Compare(a.Path, b.Path) })
	return res, nil
}

func noStoreMsg(f Format) string {
	if f == Auto {
		return "holds no file of a store kvaudit scrub reads (vllm-fs block files, lmcache .data files, a Mooncake kv_cache.data)"
	}
	return fmt.Sprintf("holds no file of a %s store", f)
}

// walker walks one path.
type walker struct {
	res     *Result
	format  Format
	display string
	// only, when set, is the one file of the root's directory to scrub
	// (a file given as the path).
	only string
	// absDir is display made absolute, for names: a vllm-fs file's rank
	// is in a directory above the path given.
	absDir string
	dirs   []*dirState
	// emit queues a job.
	emit func(job)
	// byPath finds a directory's state, which several directories'
	// files may share (a vllm-fs namespace).
	byPath map[string]*dirState
}

// abs is rel made absolute, only to read names from: nothing outside the
// root is opened.
func (w *walker) abs(rel string) string {
	if w.absDir == "" {
		if a, err := filepath.Abs(w.display); err == nil {
			w.absDir = a
		} else {
			w.absDir = w.display
		}
	}
	return filepath.Join(w.absDir, rel)
}

// show is the path of rel (inside the root) as the user sees it.
func (w *walker) show(rel string) string {
	if rel == "." {
		return w.display
	}
	return filepath.Join(w.display, rel)
}

func (w *walker) skip(rel, reason string) {
	w.res.Skipped = append(w.res.Skipped, Skip{Path: w.show(rel), Reason: reason})
}

// walk lists the directory rel, recognises its store and queues its files,
// then walks its subdirectories.
func (w *walker) walk(ctx context.Context, d *dirRoot, rel string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > maxDepth {
		w.skip(rel, fmt.Sprintf("deeper than %d directories: not walked", maxDepth))
		return nil
	}
	ents, err := d.list(maxDirEntries + 1)
	if err != nil && len(ents) == 0 {
		return &InputError{Path: w.show(rel), Msg: err.Error()}
	}
	if len(ents) > maxDirEntries {
		return &InputError{Path: w.show(rel), Msg: fmt.Sprintf("more than %d entries", maxDirEntries)}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var files []string
	var subdirs []string
	for _, e := range ents {
		name := e.Name()
		if w.only != "" && name != w.only {
			continue
		}
		child := filepath.Join(rel, name)
		switch t := e.Type(); {
		case t.IsDir():
			if w.only == "" {
				subdirs = append(subdirs, name)
			}
		case t&fs.ModeSymlink != 0:
			w.skip(child, "a symlink: not followed")
		case t.IsRegular():
			files = append(files, name)
		default:
			w.skip(child, "not a regular file")
		}
	}
	if len(files) > 0 {
		w.plan(d, rel, files)
	}
	for _, name := range subdirs {
		sub, err := d.sub(name)
		if err != nil {
			w.skip(filepath.Join(rel, name), err.Error())
			continue
		}
		sd := &dirRoot{dirHandle: sub}
		sd.hold()
		err = w.walk(ctx, sd, filepath.Join(rel, name), depth+1)
		sd.release()
		if err != nil {
			return err
		}
	}
	return nil
}

// plan recognises the store of the directory rel from its files' names
// and content (or takes --format) and queues a job per file.
func (w *walker) plan(d *dirRoot, rel string, files []string) {
	format, how := w.format, "--format "+string(w.format)
	if format == Auto {
		format, how = w.recognise(d, rel, files)
	}
	var planned int
	var ds *dirState
	dir := func() *dirState {
		if ds != nil {
			return ds
		}
		at := rel
		if format == VLLMFS {
			// The tier fans a namespace out into 4096 x 256 directories:
			// its files are counted at the namespace.
			if ns := filepath.Dir(filepath.Dir(rel)); rel != "." && filepath.Dir(rel) != "." && vllmBase.MatchString(filepath.Base(w.abs(ns))) {
				at = ns
			}
		}
		if w.byPath == nil {
			w.byPath = map[string]*dirState{}
		}
		if ds = w.byPath[at]; ds == nil {
			ds = &dirState{Dir: Dir{Path: w.show(at), Format: format, How: how}}
			w.byPath[at] = ds
			w.dirs = append(w.dirs, ds)
		}
		return ds
	}
	switch format {
	case MooncakeSSD:
		planned = w.planMooncake(d, rel, files, dir)
	case VLLMFS:
		planned = w.planVLLM(d, rel, files, dir)
	case LMCacheFS, LMCacheFrame:
		planned = w.planLMCache(d, rel, files, format, dir)
	default:
		for _, f := range files {
			w.skip(filepath.Join(rel, f), "not a file of a store kvaudit scrub reads")
		}
	}
	if ds != nil {
		ds.Files += planned
	}
}

// recognise says which store the directory rel holds, and why.
func (w *walker) recognise(d *dirRoot, rel string, files []string) (Format, string) {
	if slices.Contains(files, mooncakeData) {
		return MooncakeSSD, "holds " + mooncakeData + " (Mooncake's SSD offload records)"
	}
	var bins, datas []string
	for _, f := range files {
		if _, ok := parseVLLMPath(w.abs(filepath.Join(rel, f))); ok {
			bins = append(bins, f)
		} else if _, ok := parseLMCacheName(f); ok {
			datas = append(datas, f)
		}
	}
	switch {
	case len(bins) > 0 && len(bins) >= len(datas):
		return VLLMFS, "block files named <h>.bin in <h[:3]>/<h[3:5]>_g<group> (vLLM's FS tier)"
	case len(datas) > 0:
		frames, sampled := w.sampleFrames(d, datas)
		if frames*2 > sampled {
			return LMCacheFrame, fmt.Sprintf("%d of %d sampled .data files open with a version-1 frame whose fingerprint is their name's chunk hash (LMCache's checksum serde)", frames, sampled)
		}
		return LMCacheFS, fmt.Sprintf("%d files named <model>@0x<kv_rank>@<group>@<chunk hash>.data, %d of %d sampled framed (LMCache's FS L2 adapter)", len(datas), frames, sampled)
	}
	return "", ""
}

// frameSample is how many of a directory's .data files are opened to tell
// frames from raw payloads.
const frameSample = 16

// sampleFrames opens up to frameSample of the .data files and counts those
// that open with a frame for their name's chunk.
func (w *walker) sampleFrames(d *dirRoot, datas []string) (frames, sampled int) {
	step := max(1, len(datas)/frameSample)
	for i := 0; i < len(datas) && sampled < frameSample; i += step {
		n, _ := parseLMCacheName(datas[i])
		f, _, err := d.open(datas[i])
		if err != nil {
			continue
		}
		var head [frameHeader]byte
		k, _ := f.ReadAt(head[:], 0)
		f.Close()
		sampled++
		if k >= 1+fingerprintLen && head[0] == frameVersion && string(head[1:1+fingerprintLen]) == string(fingerprint(n.chunk)) {
			frames++
		}
	}
	return frames, sampled
}

// queue emits a job of the directory d, which it holds open until done.
func (w *walker) queue(d *dirRoot, ds *dirState, run func(buf []byte, add func(Entry)) int64) {
	d.hold()
	w.emit(job{dir: ds, root: d, run: run})
}

// readErr is the entry of a file that could not be read.
func readErr(path string, f Format, err error) Entry {
	return Entry{Path: path, Format: f, Status: Unverified, Problem: ProblemRead, Reason: err.Error()}
}

// hashRange feeds the bytes [off, off+n) of f through update in chunks of
// buf, and returns how many bytes it read (fewer than n at end of file).
func hashRange(f *os.File, off, n int64, buf []byte, update func([]byte)) (int64, error) {
	var done int64
	for done < n {
		want := min(int64(len(buf)), n-done)
		k, err := f.ReadAt(buf[:want], off+done)
		if k > 0 {
			update(buf[:k])
			done += int64(k)
		}
		if err != nil {
			if done < n && errors.Is(err, errEOF) {
				return done, nil
			}
			if done == n {
				return done, nil
			}
			return done, err
		}
	}
	return done, nil
}

// modalSize is the size most of sizes share, when at least two share it
// (0 otherwise): what a directory's files of one kind are expected to be.
func modalSize(sizes []int64) int64 {
	counts := map[int64]int{}
	var best int64
	bestN := 1
	for _, s := range sizes {
		counts[s]++
		if n := counts[s]; n > bestN || (n == bestN && n > 1 && s > best) {
			best, bestN = s, n
		}
	}
	if bestN < 2 {
		return 0
	}
	return best
}

package inject

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/synthstore"
	"github.com/kvaudit/kvaudit/internal/xattr"
	"github.com/kvaudit/kvaudit/scrub"
)

// Store faults: a KV store at rest (vLLM's FS tier, LMCache's FS L2
// adapter and checksum serde, Mooncake's SSD offload) damaged in one file
// or record, which kvaudit scrub must name (docs/scrub.md). Their input
// is a store directory, not a side's dumps: InjectStore.

// Store fault kinds.
const (
	StoreByteFlip        Kind = "store-byte-flip"
	StoreCRC             Kind = "store-crc"
	StoreTruncate        Kind = "store-truncate"
	StoreMissingChecksum Kind = "store-missing-checksum"
)

// InputStore is a store fault's input: a store directory (InjectStore).
const InputStore = "store"

// DetectScrub is kvaudit scrub, the detector of store faults.
const DetectScrub = "scrub"

// storePlan damages one file or record of a copy of a store and fills the
// fault's expectations.
type storePlan func(t *storeTamper) error

func (storePlan) input() string { return InputStore }

var storeByteFlip = kindDef{
	kind:     StoreByteFlip,
	models:   "one bit of a stored block's KV flipped at rest (bit rot, a bad sector, a torn write)",
	detector: DetectScrub,
	plan:     storePlan((*storeTamper).byteFlip),
}

var storeCRC = kindDef{
	kind:     StoreCRC,
	models:   "one bit of the checksum an engine stored beside a block flipped (xattr, LMC1 trailer, frame digest, record header)",
	detector: DetectScrub,
	plan:     storePlan((*storeTamper).crc),
}

var storeTruncate = kindDef{
	kind:     StoreTruncate,
	models:   "a block file, or the data file in a record's value, cut short (a full disk, a crash mid-write)",
	detector: DetectScrub,
	plan:     storePlan((*storeTamper).truncate),
}

var storeMissingChecksum = kindDef{
	kind:     StoreMissingChecksum,
	models:   "a block stored without its checksum (xattr lost on copy, checksum off, a record without a CRC): unverifiable, not corrupt",
	detector: DetectScrub,
	plan:     storePlan((*storeTamper).missingChecksum),
}

// StoreChange is what a store fault changed.
type StoreChange struct {
	Format scrub.Format `json:"format"`
	// File is the file changed, relative to the store; Offset the record's
	// (mooncake-ssd) or 0.
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	What   string `json:"what"`
}

// StoreExpect is what kvaudit scrub must report of the store's copy: the
// entry at File (relative to the store) and Offset with Status and
// Problem, every other entry verified.
type StoreExpect struct {
	File    string `json:"file"`
	Offset  int64  `json:"offset"`
	Status  string `json:"status"`
	Problem string `json:"problem"`
}

// storeTamper is a store fault being planned on a staged copy.
type storeTamper struct {
	kind    Kind
	root    string
	entries []scrub.Entry // the copy's verified entries
	rng     *rand.Rand
	f       *Fault
}

// InjectStore writes into out a copy of the store at path with one store
// fault (opts.Kind a store kind) applied, and out/fault.json. The store is
// only read: its files are copied (with their xattrs) into a temporary
// directory beside out, damaged there, and the directory is renamed to out
// when complete. A store kvaudit scrub cannot read, or a kind the store
// cannot take (a frame has no checksum to leave out), is a
// *NotApplicableError; nothing is written then.
func InjectStore(ctx context.Context, path, out string, opts Options) (*Fault, error) {
	def := lookup(opts.Kind)
	if def == nil {
		_, err := ParseKind(string(opts.Kind))
		return nil, err
	}
	plan, ok := def.plan.(storePlan)
	if !ok {
		return nil, fmt.Errorf("fault %s: not a store fault", opts.Kind)
	}
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return nil, &NotApplicableError{Kind: opts.Kind, Msg: fmt.Sprintf("%s is not a store directory", path)}
	}
	clean, err := scrub.Scrub(ctx, []string{path}, scrub.Options{})
	if err != nil {
		return nil, &NotApplicableError{Kind: opts.Kind, Msg: fmt.Sprintf("the input holds no store kvaudit scrub reads (%v)", err)}
	}
	if !slices.ContainsFunc(clean.Entries, func(e scrub.Entry) bool { return e.Status == scrub.Verified }) {
		return nil, &NotApplicableError{Kind: opts.Kind, Msg: "no file or record of the store verifies: nothing to damage"}
	}
	if err := checkOut(out, opts.Force); err != nil {
		return nil, err
	}
	defer opts.step(fmt.Sprintf("injecting %s into %s", opts.Kind, out))()
	var f *Fault
	err = staged(out, opts.Force, func(stage string) error {
		if err := copyStore(ctx, path, stage); err != nil {
			return err
		}
		t := &storeTamper{kind: opts.Kind, root: stage, rng: rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind))),
			f: &Fault{Format: faultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: InputStore, Detector: DetectScrub,
				Affected: []Place{}, Changes: []Change{}, Expect: Expect{Requests: []RequestExpect{}}}}
		for _, e := range clean.Entries {
			if e.Status != scrub.Verified {
				continue
			}
			rel, err := filepath.Rel(filepath.Clean(path), e.Path)
			if err != nil {
				return err
			}
			e.Path = filepath.Join(stage, rel)
			t.entries = append(t.entries, e)
		}
		if err := plan(t); err != nil {
			return err
		}
		f = t.f
		return writeFault(stage, f)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// copyStore copies the regular files and directories of src into dst, with
// the files' extended attributes (a vllm-fs block's checksum is one);
// symlinks and special files are left out, as a scrub leaves them.
func copyStore(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		attrs, err := xattr.List(p)
		if err != nil {
			out.Close()
			return err
		}
		for name, v := range attrs {
			if err := xattr.Set(out, name, v); err != nil {
				out.Close()
				return err
			}
		}
		return out.Close()
	})
}

// rel is a staged path relative to the store.
func (t *storeTamper) rel(p string) string {
	r, err := filepath.Rel(t.root, p)
	if err != nil {
		return p
	}
	return r
}

// expect records what the fault did and what the scrub must report.
func (t *storeTamper) expect(e scrub.Entry, status scrub.Status, problem, what string, changes ...Change) {
	file := t.rel(e.Path)
	t.f.File = file
	t.f.Store = &StoreChange{Format: e.Format, File: file, Offset: e.Offset, What: what}
	at := ""
	if e.Format == scrub.MooncakeSSD {
		at = fmt.Sprintf(" (the record of key %q at offset %d)", e.Name.Key, e.Offset)
	}
	t.f.Description = fmt.Sprintf("%s: %s of %s%s", t.kind, what, file, at)
	t.f.Changes = append(t.f.Changes, changes...)
	t.f.Expect.Verdict = string(status)
	t.f.Expect.Store = []StoreExpect{{File: file, Offset: e.Offset, Status: string(status), Problem: problem}}
}

func (t *storeTamper) pick(ok func(e scrub.Entry) bool) (scrub.Entry, error) {
	var cands []scrub.Entry
	for _, e := range t.entries {
		if ok == nil || ok(e) {
			cands = append(cands, e)
		}
	}
	if len(cands) == 0 {
		return scrub.Entry{}, &NotApplicableError{Kind: t.kind, Msg: "no file or record of the store can take it"}
	}
	return pick(t.rng, cands), nil
}

// pickLayout is pick, with where the chosen file's payload and checksum lie.
func (t *storeTamper) pickLayout(ok func(e scrub.Entry) bool) (scrub.Entry, scrub.Layout, error) {
	e, err := t.pick(ok)
	if err != nil {
		return e, scrub.Layout{}, err
	}
	l, err := scrub.LayoutOf(e)
	return e, l, err
}

// flipAt flips bit of the byte at off of the file at path.
func flipAt(path string, off int64, bit byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return err
	}
	b[0] ^= bit
	_, err = f.WriteAt(b[:], off)
	return err
}

func (t *storeTamper) byteFlip() error {
	e, l, err := t.pickLayout(nil)
	if err != nil {
		return err
	}
	if l.Payload[1] == 0 {
		return &NotApplicableError{Kind: t.kind, Msg: "an empty payload"}
	}
	off := l.Payload[0] + t.rng.Int64N(l.Payload[1])
	bit := byte(1) << t.rng.IntN(8)
	if err := flipAt(e.Path, off, bit); err != nil {
		return err
	}
	t.expect(e, scrub.Mismatch, scrub.ProblemChecksum, fmt.Sprintf("bit %#02x of byte %d of the KV flipped", bit, off), Change{File: t.rel(e.Path), Offset: off, Length: 1})
	return nil
}

func (t *storeTamper) crc() error {
	e, l, err := t.pickLayout(nil)
	if err != nil {
		return err
	}
	bit := byte(1) << t.rng.IntN(8)
	if l.Xattr != "" {
		attrs, err := xattr.List(e.Path)
		if err != nil {
			return err
		}
		v := slices.Clone(attrs[l.Xattr])
		if len(v) == 0 {
			return &NotApplicableError{Kind: t.kind, Msg: "no xattr"}
		}
		i := t.rng.IntN(len(v))
		v[i] ^= bit
		f, err := os.OpenFile(e.Path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = xattr.Set(f, l.Xattr, v)
		f.Close()
		if err != nil {
			return err
		}
		t.expect(e, scrub.Mismatch, scrub.ProblemChecksum, fmt.Sprintf("bit %#02x of byte %d of its %s xattr flipped", bit, i, l.Xattr),
			Change{File: t.rel(e.Path), Tensor: "xattr " + l.Xattr, Offset: int64(i), Length: 1})
		return nil
	}
	off := l.Checksum[0] + t.rng.Int64N(l.Checksum[1])
	if err := flipAt(e.Path, off, bit); err != nil {
		return err
	}
	t.expect(e, scrub.Mismatch, scrub.ProblemChecksum, fmt.Sprintf("bit %#02x of byte %d, in its stored %s, flipped", bit, off, e.Algorithm), Change{File: t.rel(e.Path), Offset: off, Length: 1})
	return nil
}

func (t *storeTamper) truncate() error {
	// A truncated lmcache file is told from its directory's others: it
	// needs two more of its size there.
	same := map[[2]string]int{}
	for _, e := range t.entries {
		same[[2]string{e.Dir, fmt.Sprint(e.Length)}]++
	}
	last := map[string]int64{}
	for _, e := range t.entries {
		last[e.Path] = max(last[e.Path], e.Offset)
	}
	e, err := t.pick(func(e scrub.Entry) bool {
		switch e.Format {
		case scrub.LMCacheFS, scrub.LMCacheFrame:
			return same[[2]string{e.Dir, fmt.Sprint(e.Length)}] >= 3 && e.Length > 1
		case scrub.MooncakeSSD:
			return e.Offset == last[e.Path] // the last record: the others stay whole
		}
		return e.Length > 1
	})
	if err != nil {
		return err
	}
	st, err := os.Stat(e.Path)
	if err != nil {
		return err
	}
	var size int64
	problem := scrub.ProblemTruncated
	switch e.Format {
	case scrub.VLLMFS:
		size, problem = 1+t.rng.Int64N(e.Length-1), scrub.ProblemChecksum
	case scrub.LMCacheFS:
		l, err := scrub.LayoutOf(e)
		if err != nil {
			return err
		}
		if l.Payload[1] < 2 {
			return &NotApplicableError{Kind: t.kind, Msg: "a payload too short to cut"}
		}
		size = 1 + t.rng.Int64N(l.Payload[1]-1) // into the payload: the trailer goes
	case scrub.LMCacheFrame:
		size = t.rng.Int64N(e.Length)
	case scrub.MooncakeSSD:
		l, err := scrub.LayoutOf(e)
		if err != nil {
			return err
		}
		if l.Payload[1] == 0 {
			return &NotApplicableError{Kind: t.kind, Msg: "an empty value"}
		}
		size = l.Payload[0] + t.rng.Int64N(l.Payload[1]) // into its value
	}
	if err := os.Truncate(e.Path, size); err != nil {
		return err
	}
	t.expect(e, scrub.Mismatch, problem, fmt.Sprintf("the file cut from %d to %d bytes", st.Size(), size),
		Change{File: t.rel(e.Path), Tensor: "truncated", Offset: size, Length: st.Size() - size})
	return nil
}

func (t *storeTamper) missingChecksum() error {
	e, err := t.pick(func(e scrub.Entry) bool { return e.Format != scrub.LMCacheFrame })
	if err != nil {
		return &NotApplicableError{Kind: t.kind, Msg: "an lmcache-frame store has no checksum to leave out (a frame without its header is no frame)"}
	}
	l, err := scrub.LayoutOf(e)
	if err != nil {
		return err
	}
	switch e.Format {
	case scrub.VLLMFS:
		f, err := os.OpenFile(e.Path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = xattr.Set(f, l.Xattr, nil)
		f.Close()
		if err != nil {
			return err
		}
		t.expect(e, scrub.Unverified, scrub.ProblemNoChecksum, "its "+l.Xattr+" xattr removed", Change{File: t.rel(e.Path), Tensor: "xattr " + l.Xattr, Length: 4})
	case scrub.LMCacheFS:
		st, err := os.Stat(e.Path)
		if err != nil {
			return err
		}
		if err := os.Truncate(e.Path, l.Payload[1]); err != nil {
			return err
		}
		t.expect(e, scrub.Unverified, scrub.ProblemNoChecksum, "its LMC1 trailer removed (as checksum=\"none\" writes it)",
			Change{File: t.rel(e.Path), Tensor: "trailer", Offset: l.Payload[1], Length: st.Size() - l.Payload[1]})
	case scrub.MooncakeSSD:
		f, err := os.OpenFile(e.Path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		h := make([]byte, 24)
		if _, err := f.ReadAt(h, l.Header); err != nil {
			return err
		}
		scrub.ClearRecordCRC(h)
		if _, err := f.WriteAt(h[scrub.RecordFlagsAt:], l.Header+scrub.RecordFlagsAt); err != nil {
			return err
		}
		t.expect(e, scrub.Unverified, scrub.ProblemNoChecksum, "its header rewritten without a CRC (flags bit 0 clear, crc32 0)",
			Change{File: t.rel(e.Path), Tensor: "record header", Offset: l.Header + scrub.RecordFlagsAt, Length: 8})
	}
	return nil
}

// storeTrial is a campaign's trial of a store kind: a store of a small
// synthetic side is written in one of the formats (each trial the next
// that can take the kind), scrubbed clean, damaged by InjectStore and
// scrubbed again; the fault is detected when the scrub's verdict is the
// expected one, localised when the entry the fault names has the
// expected status and problem and every other entry verifies.
func storeTrial(ctx context.Context, k Kind, trial int, seed uint64, dir string) trialOutcome {
	formats := scrub.Formats
	first := registryIndex(k) + trial
	for attempt := range len(formats) {
		format := formats[(first+attempt)%len(formats)]
		o := trialOutcome{pair: "store " + string(format), seed: seed}
		err := storeTrialOn(ctx, k, format, seed, dir, &o)
		if isNotApplicable(err) {
			continue
		}
		o.err = err
		return o
	}
	return trialOutcome{notApplicable: true, seed: seed}
}

func storeTrialOn(ctx context.Context, k Kind, format scrub.Format, seed uint64, dir string, o *trialOutcome) error {
	defer os.RemoveAll(dir)
	blocks, err := synthstore.Blocks(synth.Config{Preset: "tiny", Requests: 2, Tokens: 5, BlockSize: 2, Seed: seed})
	if err != nil {
		return err
	}
	clean, bad := filepath.Join(dir, "clean"), filepath.Join(dir, "bad")
	_, warnings, err := scrub.WriteStore(clean, format, blocks)
	if err != nil {
		return err
	}
	if len(warnings) > 0 {
		return &NotApplicableError{Kind: k, Msg: warnings[0]}
	}
	res, err := scrub.Scrub(ctx, []string{clean}, scrub.Options{})
	if err != nil {
		return err
	}
	if res.Verdict() != scrub.Verified {
		o.falsePositive = true
		o.problems = append(o.problems, "the clean store does not verify: "+res.Summary())
	}
	f, err := InjectStore(ctx, clean, bad, Options{Kind: k, Seed: seed})
	if err != nil {
		return err
	}
	o.description = f.Description
	res, err = scrub.Scrub(ctx, []string{bad}, scrub.Options{})
	if err != nil {
		return err
	}
	want := f.Expect.Store[0]
	o.detected = string(res.Verdict()) == f.Expect.Verdict
	o.localised = true
	found := false
	for _, e := range res.Entries {
		rel, _ := filepath.Rel(bad, e.Path)
		if rel == want.File && e.Offset == want.Offset {
			found = true
			o.example = fmt.Sprintf("%s %s (%s)", e.Format, e.Status, e.Problem)
			if string(e.Status) != want.Status || e.Problem != want.Problem {
				o.localised = false
				o.problems = append(o.problems, fmt.Sprintf("%s at %d: %s %s, want %s %s", rel, e.Offset, e.Status, e.Problem, want.Status, want.Problem))
			}
		} else if e.Status != scrub.Verified {
			o.localised = false
			o.problems = append(o.problems, fmt.Sprintf("%s at %d also %s (%s)", rel, e.Offset, e.Status, e.Reason))
		}
	}
	if !found {
		o.localised = false
		o.problems = append(o.problems, fmt.Sprintf("no entry for %s at %d", want.File, want.Offset))
	}
	return nil
}

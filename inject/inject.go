package inject

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// Options say which fault to inject where.
type Options struct {
	Kind Kind
	// Seed drives every choice the target leaves open.
	Seed   uint64
	Target Target
	// Bits is the number of bits bit-flip, replica-diverge and state-flip
	// flip in one cell or state row (0 means 1).
	Bits int
	// Allow, when set, restricts the block positions a fault may target
	// (the campaign passes the positions a comparison covers). It is not
	// applied to stale-tail and past-num-tokens, which write past the
	// tokens.
	Allow func(request string, group, position int) bool
	// ChangedOnly writes only the ranks the fault changes, not the whole
	// side, into a scratch directory: the campaign's trials.
	ChangedOnly bool
	// Engine checksums the producer for payload faults (nil: the cpu
	// engine).
	Engine checksum.Engine
	// PayloadForm is the form of the payloads payload faults write.
	PayloadForm wire.PayloadForm
	// Force replaces an output directory a previous injection wrote.
	Force bool
}

// Target narrows where a fault goes; zero fields leave the choice to the
// seed.
type Target struct {
	Request string
	Group   *int
	// Layer is a layer name (or alias) or a layer number.
	Layer string
	// Head is a global KV head (for state faults, a global state row).
	Head     *int
	Position *int
	Rank     *Rank
}

// FaultFile is the name of the fault description in the output directory.
const FaultFile = "fault.json"

// Inject writes into out a copy of the side made of dumps with the fault
// applied, and out/fault.json, and returns the fault. The dumps are only
// read, once: their files are copied (streamed, never linked) into a
// temporary directory beside out, the fault is planned on that copy and
// patched into it, and the directory is renamed to out when complete, so
// fault.json always describes the bytes beside it and an interrupted
// injection leaves nothing at out. out must not exist or be empty, unless
// opts.Force, which replaces a previous injection's output (a directory
// holding fault.json). A payload fault writes out/payloads.json (request
// id -> base64 payload, as `kvaudit checksum -o payload` prints) instead
// of a copy of the dumps. A kind the side cannot take (no second request,
// no replicated head, ...) is a *NotApplicableError; nothing is written
// then.
//
// With opts.ChangedOnly (the campaign's trials) out is a scratch
// directory the caller owns: the fault is planned on the dumps and only
// the ranks it changes are copied into out.
func Inject(ctx context.Context, dumps []*layout.Dump, out string, opts Options) (*Fault, error) {
	info, ok := InfoOf(opts.Kind)
	if !ok {
		_, err := ParseKind(string(opts.Kind))
		return nil, err
	}
	if len(dumps) == 0 {
		return nil, fmt.Errorf("fault %s: no dump", opts.Kind)
	}
	if info.Input == InputPayload {
		return injectPayload(ctx, dumps, out, opts)
	}
	if err := refuseDevice(dumps); err != nil {
		return nil, err
	}
	if opts.ChangedOnly {
		f, edits, err := plan(dumps, opts)
		if err != nil {
			return nil, err
		}
		if err := prepareOut(out); err != nil {
			return nil, err
		}
		changes, err := materialize(ctx, dumps, out, edits, true)
		if err != nil {
			return nil, err
		}
		return f, finishFault(out, f, changes)
	}
	if err := checkOut(out, opts.Force); err != nil {
		return nil, err
	}
	var f *Fault
	err := staged(out, opts.Force, func(stage string) error {
		copyRanks, err := copySide(ctx, dumps, stage)
		if err != nil {
			return err
		}
		var paths []string
		for _, d := range dumps {
			paths = append(paths, filepath.Join(stage, filepath.Base(d.Path)))
		}
		copies, err := layout.OpenSide(paths)
		if err != nil {
			return fmt.Errorf("reading the copy of the side: %w", err)
		}
		defer layout.CloseAll(copies)
		var edits []edit
		if f, edits, err = plan(copies, opts); err != nil {
			return err
		}
		// Changes are listed rank by rank, in the copies' order.
		slices.SortFunc(copyRanks, func(a, b rankFiles) int {
			return cmp.Or(cmp.Compare(a.rank.PP, b.rank.PP), cmp.Compare(a.rank.TP, b.rank.TP))
		})
		changes, err := patch(copyRanks, edits)
		if err != nil {
			return err
		}
		layout.CloseAll(copies)
		return finishFault(stage, f, changes)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// finishFault records the changes in f and writes dir/fault.json.
func finishFault(dir string, f *Fault, changes []Change) error {
	f.Changes = changes
	if len(changes) > 0 {
		c := changes[0]
		f.Rank, f.File = &c.Rank, c.File
		for _, c := range changes {
			if c.Tensor != "manifest" {
				f.Tensor = c.Tensor
				break
			}
		}
	}
	if f.Changes == nil {
		f.Changes = []Change{}
	}
	return writeFault(dir, f)
}

func writeFault(out string, f *Fault) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeNew(filepath.Join(out, FaultFile), append(b, '\n'))
}

// ReadFault reads a fault.json file.
func ReadFault(path string) (*Fault, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f Fault
	if err := layout.DecodeStrictJSON(data, &f); err != nil {
		return nil, fmt.Errorf("fault %q: %w", path, err)
	}
	if f.Format != FaultFormat {
		return nil, fmt.Errorf("fault %q: format: got %q, want %q", path, f.Format, FaultFormat)
	}
	return &f, nil
}

// plan decides a dump fault without writing anything: the fault (without
// its Changes, which only writing measures) and the edits. The dumps'
// mapped data is read inside layout.Guard.
func plan(dumps []*layout.Dump, opts Options) (*Fault, []edit, error) {
	info, _ := InfoOf(opts.Kind)
	p := &planner{
		s:    newSide(dumps),
		opts: opts,
		rng:  rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind))),
		f: &Fault{
			Format: FaultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: info.Input,
			Detector: info.Detector, Affected: []Place{},
			Expect: Expect{Verdict: string(verify.Verified), Requests: []RequestExpect{}},
		},
	}
	if err := p.checkTarget(); err != nil {
		return nil, nil, err
	}
	err := layout.Guard("dump data while planning a fault", func() error {
		return p.plan()
	})
	if err != nil {
		return nil, nil, err
	}
	p.finish()
	return p.f, p.edits, nil
}

func kindSeed(k Kind) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	return h.Sum64()
}

// side is a side's dumps, indexed, with what injection needs of them.
type side struct {
	*layout.DumpIndex
	ids []string // request ids, the first rank's first
}

func newSide(dumps []*layout.Dump) *side {
	s := &side{DumpIndex: layout.NewDumpIndex(dumps)}
	s.ids = s.RequestIDs()
	return s
}

func (s *side) rank(di int) Rank {
	pp, tp := s.Dumps[di].Rank()
	return Rank{PP: pp, TP: tp}
}

// cache is one distinct cache of a group on one rank.
type cache = layout.RankCache

// maxReplicas is the number of checks of a group on the side.
func (s *side) maxReplicas(group int) int {
	n := 1
	for _, c := range s.Caches(group) {
		n = max(n, c.View.Replicas)
	}
	return n
}

// checks returns the checks that differ when the sums under keys change:
// check k sums key (R, k mod R) for every replica count R.
func (s *side) checks(group int, keys []layout.ReplicaKey) []int {
	out := []int{}
	for k := range s.maxReplicas(group) {
		if slices.ContainsFunc(keys, func(key layout.ReplicaKey) bool { return k%key.Replicas == key.Index }) {
			out = append(out, k)
		}
	}
	return out
}

package inject

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
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
	// flip in one cell or state row (0 means 1), and, when above 1, the
	// even number of pieces whose top bit cancelling-flips flips (2 or 4
	// at random otherwise).
	Bits int
	// Positions, when set, says which checksummed block positions a fault
	// may change (the campaign passes those the clean comparison covers;
	// kvaudit inject those of the requests --request names). A fault that
	// changes no checksummed position, writing only past a request's
	// tokens or breaking a whole payload, is not narrowed by it.
	Positions func(request string, group, position int) bool
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
	// Prepare, when it asks for anything, first turns the side into the
	// consumer the audits expect (Prepare), in a temporary directory
	// beside the output that is removed afterwards; the fault goes into
	// that prepared copy. A nil Prepare.Engine is Engine.
	Prepare PrepareOptions
	// Step, when set, is told of each long step (preparing, injecting)
	// and returns the function that says it is done.
	Step func(what string) (done func())
	// Progress, when set, is told the bytes of each chunk of the side's
	// files Inject copies (into a prepared copy, into the output), as it
	// is written.
	Progress func(n int64)
	// Transfers are the NIXL logs (files or directories) of the pull into
	// the side, and Producer the producer's dumps: the input of the
	// transfer-log kinds.
	Transfers []string
	Producer  []*layout.Dump
}

// step starts opts.Step, if set.
func (o *Options) step(what string) (done func()) {
	if o.Step == nil {
		return func() {}
	}
	return o.Step(what)
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

// allows says whether a fault may change a position (Positions).
func (o *Options) allows(request string, group, position int) bool {
	return o.Positions == nil || o.Positions(request, group, position)
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
// then. With opts.Prepare, the side is prepared first and fault.json's
// byte ranges are relative to the prepared copy.
//
// With opts.ChangedOnly (the campaign's trials) out is a scratch
// directory the caller owns: the fault is planned on the dumps and only
// the ranks it changes are copied into out.
func Inject(ctx context.Context, dumps []*layout.Dump, out string, opts Options) (*Fault, error) {
	def := lookup(opts.Kind)
	if def == nil {
		_, err := ParseKind(string(opts.Kind))
		return nil, err
	}
	if _, ok := def.plan.(storePlan); ok {
		return nil, &NotApplicableError{Kind: opts.Kind, Msg: "a store fault takes a store directory, not a side's dumps (InjectStore; kvaudit inject STORE)"}
	}
	if len(dumps) == 0 {
		return nil, fmt.Errorf("fault %s: no dump", opts.Kind)
	}
	ctx = withCopyProgress(ctx, opts.Progress)
	if opts.Prepare.asks() {
		prepared, cleanup, err := prepareBeside(ctx, dumps, out, opts)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		dumps = prepared
	}
	defer opts.step(fmt.Sprintf("injecting %s into %s", opts.Kind, out))()
	switch plan := def.plan.(type) {
	case payloadPlan:
		return injectPayload(ctx, dumps, out, def, plan, opts)
	case dumpPlan:
		return injectDumps(ctx, dumps, out, def, plan, opts)
	case logPlan:
		return injectLogs(ctx, dumps, out, def, plan, opts)
	}
	return nil, checksum.Internalf("fault %s: no injector for input %q", opts.Kind, def.plan.input())
}

// prepareBeside prepares the side made of dumps (opts.Prepare) in a new
// temporary directory beside out and opens the prepared copy; cleanup
// closes it and removes the directory.
func prepareBeside(ctx context.Context, dumps []*layout.Dump, out string, opts Options) (prepared []*layout.Dump, cleanup func(), err error) {
	abs, err := filepath.Abs(out)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, nil, err
	}
	tmp, err := safeio.TempDir(filepath.Dir(abs), ".kvaudit-prepare-")
	if err != nil {
		return nil, nil, err
	}
	p := opts.Prepare
	if p.Engine == nil {
		p.Engine = opts.Engine
	}
	done := opts.step("preparing the side (tails zeroed, blocks past the last token, stored checksums)")
	paths, err := Prepare(ctx, dumps, filepath.Join(tmp, "side"), p)
	done()
	if err == nil {
		prepared, err = layout.OpenSide(paths)
	}
	if err != nil {
		safeio.RemoveTemp(tmp)
		return nil, nil, err
	}
	return prepared, func() {
		layout.CloseAll(prepared)
		safeio.RemoveTemp(tmp)
	}, nil
}

// injectDumps writes a dump fault (Inject).
func injectDumps(ctx context.Context, dumps []*layout.Dump, out string, def *kindDef, plan dumpPlan, opts Options) (*Fault, error) {
	if err := refuseDevice(dumps); err != nil {
		return nil, err
	}
	if opts.ChangedOnly {
		f, edits, err := planDumps(dumps, def, plan, opts)
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
		if f, edits, err = planDumps(copies, def, plan, opts); err != nil {
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
	if f.Format != faultFormat {
		return nil, fmt.Errorf("fault %q: format: got %q, want %q", path, f.Format, faultFormat)
	}
	return &f, nil
}

// planDumps decides a dump fault without writing anything: the fault
// (without its Changes, which only writing measures) and the edits. The
// dumps' mapped data is read inside layout.Guard.
func planDumps(dumps []*layout.Dump, def *kindDef, plan dumpPlan, opts Options) (*Fault, []edit, error) {
	info := def.info()
	p := &planner{
		ranks: newRanks(dumps),
		def:   def,
		opts:  opts,
		rng:   rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind))),
		f: &Fault{
			Format: faultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: info.Input,
			Detector: info.Detector, Affected: []Place{},
			Expect: Expect{Verdict: string(verify.Verified), Requests: []RequestExpect{}},
		},
	}
	if err := p.checkTarget(); err != nil {
		return nil, nil, err
	}
	err := layout.Guard("dump data while planning a fault", func() error {
		return p.run(plan)
	})
	if err != nil {
		return nil, nil, err
	}
	p.finish()
	return p.f, p.edits, nil
}

// injectLogs writes a transfer-log fault (Inject): a copy of the
// consumer's dumps as the changed transfer leaves them, the logs under
// out/nixl, fault.json.
func injectLogs(ctx context.Context, dumps []*layout.Dump, out string, def *kindDef, plan logPlan, opts Options) (*Fault, error) {
	if err := refuseDevice(dumps); err != nil {
		return nil, err
	}
	info := def.info()
	f := &Fault{Format: faultFormat, Kind: opts.Kind, Seed: opts.Seed, Input: info.Input, Detector: info.Detector,
		Affected: []Place{}, Expect: Expect{Verdict: string(verify.Verified), Requests: []RequestExpect{}, Transfers: []TransferExpect{}}}
	t, err := newLogTamper(dumps, opts, f, rand.New(rand.NewPCG(opts.Seed, kindSeed(opts.Kind))))
	if err != nil {
		return nil, err
	}
	if err := layout.Guard("dump data while planning a fault", func() error { return plan(t) }); err != nil {
		return nil, err
	}
	t.finish()
	write := func(dir string, changedOnly bool) error {
		changes, err := materialize(ctx, dumps, dir, t.edits, changedOnly)
		if err != nil {
			return err
		}
		if err := t.writeLogs(filepath.Join(dir, transferDir)); err != nil {
			return err
		}
		return finishFault(dir, f, changes)
	}
	if opts.ChangedOnly {
		if err := prepareOut(out); err != nil {
			return nil, err
		}
		return f, write(out, true)
	}
	if err := checkOut(out, opts.Force); err != nil {
		return nil, err
	}
	if err := staged(out, opts.Force, func(stage string) error { return write(stage, false) }); err != nil {
		return nil, err
	}
	return f, nil
}

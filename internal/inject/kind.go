package inject

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// Kind is a kind of fault.
type Kind string

// kindDef is a fault kind's whole definition: what it models, what must
// catch it, whether it is a control, and how it plans (whose type says
// what it corrupts). Each kind's definition sits with its family in a
// kinds_*.go file and is listed once in registry.
type kindDef struct {
	kind     Kind
	models   string
	detector string // Detect*
	// control: no detector it is judged by may report it.
	control bool
	// everyReader: the plan predicts a mismatch at every place that reads
	// the cells it changes, so it may change a block several places read
	// (a block id of a shared prefix); the other kinds, which predict only
	// the places they pick, leave such blocks alone.
	everyReader bool
	plan        faultPlan
}

// A faultPlan decides a fault on its input and says which input that is:
// a dumpPlan edits a copy of the side's dumps, a payloadPlan rewrites one
// of the producer's payloads. A kind on another input (a transfer log,
// say) brings a plan type of its own, with its Input* constant and its
// case in Inject.
type faultPlan interface {
	input() string
}

// dumpPlan decides the edits of a dump fault and its expectations on the
// planner (positions are the side's).
type dumpPlan func(p *planner) error

func (dumpPlan) input() string { return InputDumps }

// payloadPlan tampers with one of the producer's payloads and fills the
// fault's expectations (positions are the producer's).
type payloadPlan func(t *tamper) error

func (payloadPlan) input() string { return InputPayload }

func (d *kindDef) info() Info {
	return Info{Kind: d.kind, Models: d.models, Detector: d.detector, Input: d.plan.input(), Control: d.control}
}

// registry lists every kind but None, in the order of the campaign table.
// A kind's place in it also picks the pair its trials start on.
var registry = []*kindDef{
	&bitFlip, &byteNoise, &zeroBlock, &cancellingFlips,
	&swapTokens, &swapHeads, &swapLayers,
	&misplaceBlock, &shiftBlocks, &staleBlock,
	&replicaDiverge, &stateFlip,
	&strayWrite, &staleTail, &wrongPrefix,
	&payloadFlip, &payloadTruncate, &payloadVersion, &payloadNesting,
	&xferLocalOther, &xferRemoteShift, &xferDrop, &xferLapsedLease, &xferDuplicate, &xferLateRead,
	&pastNumTokens,
	&storeByteFlip, &storeCRC, &storeTruncate, &storeMissingChecksum,
}

// lookup returns a kind's definition (None's too), or nil.
func lookup(k Kind) *kindDef {
	if k == None {
		return &none
	}
	if i := registryIndex(k); i >= 0 {
		return registry[i]
	}
	return nil
}

// registryIndex is a kind's place in registry, -1 for None or an unknown
// kind.
func registryIndex(k Kind) int {
	return slices.IndexFunc(registry, func(d *kindDef) bool { return d.kind == k })
}

// Info describes a kind.
type Info struct {
	Kind     Kind
	Models   string
	Detector string
	Input    string
	// Control kinds must not be reported by any detector they are judged
	// by.
	Control bool
}

// Kinds lists every fault kind (not None), in table order.
func Kinds() []Kind {
	out := make([]Kind, len(registry))
	for i, d := range registry {
		out[i] = d.kind
	}
	return out
}

// InfoOf returns a kind's description; ok is false for an unknown kind.
// None is a control with no detector.
func InfoOf(k Kind) (Info, bool) {
	d := lookup(k)
	if d == nil {
		return Info{}, false
	}
	return d.info(), true
}

// ParseKind checks a kind name.
func ParseKind(s string) (Kind, error) {
	if lookup(Kind(s)) != nil {
		return Kind(s), nil
	}
	names := []string{string(None)}
	for _, k := range Kinds() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("unknown fault kind %q (want one of %s)", s, strings.Join(names, ", "))
}

// kindSeed is the stream of a kind's random choices: a fault's rng is
// seeded with the seed and it.
func kindSeed(k Kind) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	return h.Sum64()
}

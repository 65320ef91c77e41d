package inject

// State faults: a Mamba/SSM state row corrupted.

// StateFlip flips bits of a covered row of a state.
const StateFlip Kind = "state-flip"

var stateFlip = kindDef{
	kind:        StateFlip,
	models:      "a bit flipped in a covered row of a Mamba/SSM state",
	detector:    DetectChecksum,
	everyReader: true,
	plan: dumpPlan(func(p *planner) error {
		return p.flipCell(p.places(true, true, nil), true, nil)
	}),
}

package inject

import (
	"slices"
	"testing"
)

// TestRegistry: every kind is registered once, with what it models, a
// known detector (none exactly for a control) and a plan; None is not in
// the table but parses and describes itself; the campaign table's order
// is the registry's.
func TestRegistry(t *testing.T) {
	detectors := []string{DetectChecksum, DetectCoResident, DetectTail, DetectStored, DetectPayload, DetectTransfers, DetectScrub, DetectNone}
	seen := map[Kind]bool{}
	for _, d := range append(slices.Clone(registry), &none) {
		if seen[d.kind] {
			t.Errorf("%s: registered twice", d.kind)
		}
		seen[d.kind] = true
		if d.models == "" || !slices.Contains(detectors, d.detector) || d.control != (d.detector == DetectNone) {
			t.Errorf("%s: models %q, detector %q, control %v", d.kind, d.models, d.detector, d.control)
		}
		switch p := d.plan.(type) {
		case dumpPlan:
			if p == nil {
				t.Errorf("%s: no plan", d.kind)
			}
		case payloadPlan:
			if p == nil {
				t.Errorf("%s: no plan", d.kind)
			}
		case logPlan:
			if p == nil || d.detector != DetectTransfers {
				t.Errorf("%s: no plan, or detector %q (a transfer-log fault is the transfer audit's)", d.kind, d.detector)
			}
		case storePlan:
			if p == nil || d.detector != DetectScrub {
				t.Errorf("%s: no plan, or detector %q (a store fault is kvaudit scrub's)", d.kind, d.detector)
			}
		default:
			t.Errorf("%s: plan %T of no input Inject (or InjectStore) writes", d.kind, d.plan)
		}
		if k, err := ParseKind(string(d.kind)); err != nil || k != d.kind {
			t.Errorf("ParseKind(%q): %q, %v", d.kind, k, err)
		}
		if in, ok := InfoOf(d.kind); !ok || in != d.info() {
			t.Errorf("InfoOf(%s): %+v, %v", d.kind, in, ok)
		}
	}
	if slices.Contains(Kinds(), None) || registryIndex(None) >= 0 {
		t.Errorf("None is in the registry")
	}
	for i, k := range Kinds() {
		if registry[i].kind != k || registryIndex(k) != i {
			t.Errorf("Kinds()[%d] = %s, registry[%d] = %s", i, k, i, registry[i].kind)
		}
	}
	if _, err := ParseKind("bit-flop"); err == nil {
		t.Errorf("an unknown kind parses")
	}
}

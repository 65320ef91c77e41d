package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/verify"
)

// What the verdicts were judged by (docs/spec.md §14), said wherever a
// verdict is: the table's notes, JSON's strength, JUnit's properties and
// system-out, -q's line, stderr and the HTML page.

// VLLMOnlySuffix is what follows a verdict judged by vLLM's checksum
// alone: `verified (vLLM's checksum only)`.
const VLLMOnlySuffix = " (vLLM's checksum only)"

// VerdictLine is a comparison's verdict as -q prints it: the verdict,
// and VLLMOnlySuffix when it is verified and some compared group had
// vLLM's checksum alone.
func VerdictLine(res *verify.DiffResult, v verify.Verdict) string {
	if v == verify.Verified && res != nil && res.Strength() == verify.StrengthVLLM {
		return string(v) + VLLMOnlySuffix
	}
	return string(v)
}

// StrengthLine says in one line what the comparison was judged by: which
// groups had vLLM's checksum alone and why, or that every compared group
// had kvaudit's mix check too, and under which key. "" when nothing was
// compared.
func StrengthLine(res *verify.DiffResult) string {
	switch res.Strength() {
	case verify.StrengthVLLM:
		return "strength: vllm: compared by vLLM's checksum only " + vllmOnlyWhy(res)
	case verify.StrengthMix:
		line := "strength: vllm+mix: every compared group by vLLM's checksum and kvaudit's mix check"
		if k := mixKeyNote(res); k != "" {
			line += "; " + k
		}
		return line
	}
	return ""
}

// vllmOnlyWhy says why groups were compared by vLLM's checksum alone and
// what that misses: "(why; ...): what it misses; --require-mix ...".
func vllmOnlyWhy(res *verify.DiffResult) string {
	var whys []string
	for _, rv := range res.Requests {
		for _, g := range rv.Groups {
			if g.Strength == verify.StrengthVLLM && !slices.Contains(whys, g.VLLMOnly) {
				whys = append(whys, g.VLLMOnly)
			}
		}
	}
	return fmt.Sprintf("(%s): %s; --require-mix makes that unverified", strings.Join(whys, "; "), verify.MissedByVLLM)
}

// VLLMOnlyNotice is the stderr line of a comparison verified by vLLM's
// checksum alone, "" otherwise.
func VLLMOnlyNotice(res *verify.DiffResult, v verify.Verdict) string {
	if v != verify.Verified || res == nil || res.Strength() != verify.StrengthVLLM {
		return ""
	}
	return "verified by vLLM's checksum only " + vllmOnlyWhy(res)
}

// mixCompared says whether some group was compared by the mix check.
func mixCompared(res *verify.DiffResult) bool {
	for _, rv := range res.Requests {
		for _, g := range rv.Groups {
			if g.Strength == verify.StrengthMix {
				return true
			}
		}
	}
	return false
}

// mixKeyNote says which key the mix checks were computed under, "" when
// none was (docs/spec.md §14).
func mixKeyNote(res *verify.DiffResult) string {
	switch {
	case res.MixKeySource == "":
		return ""
	case res.MixKey == 0 && res.MixKeySource == verify.MixKeyPublished:
		return "kvaudit's mix check is under the published key, which records and payloads carry: a change chosen against it can cancel in both checks; dumps against dumps get a random key (docs/spec.md §14)"
	case res.MixKey == 0:
		return "kvaudit's mix check is under the published key, as --mix-key asks: a change chosen against it can cancel in both checks (docs/spec.md §14)"
	case res.MixKeySource == verify.MixKeyGiven:
		return fmt.Sprintf("kvaudit's mix check is under the key %s that --mix-key gives", hexKey(res.MixKey))
	}
	return fmt.Sprintf("kvaudit's mix check is under this run's random key %s (--mix-key %s reproduces the run)", hexKey(res.MixKey), hexKey(res.MixKey))
}

// hexKey writes a mix key as JSON does: 0x and 16 hex digits.
func hexKey(k uint64) string { return fmt.Sprintf("%#016x", k) }

// mixKeyTableNote is the table's note on the key, for the keys a user
// should know of: the published one (records, payloads, --mix-key
// published) and one --mix-key gives; a run's random key is in the JSON.
func mixKeyTableNote(res *verify.DiffResult) string {
	if !mixCompared(res) || res.MixKeySource == verify.MixKeyRun {
		return ""
	}
	return mixKeyNote(res)
}

// groupStrengths are the JUnit properties of a load's groups: "group N
// strength" for each compared group.
func groupStrengths(rv *verify.RequestVerdict) []junitProperty {
	var ps []junitProperty
	for _, g := range rv.Groups {
		if g.Strength != "" {
			ps = append(ps, junitProperty{Name: fmt.Sprintf("group %d strength", g.ID), Value: string(g.Strength)})
		}
	}
	return ps
}

// requestStrength is a load's system-out line in JUnit: what its groups
// were judged by.
func requestStrength(res *verify.DiffResult, rv *verify.RequestVerdict) string {
	var mix, vllm []int
	var whys []string
	for _, g := range rv.Groups {
		switch g.Strength {
		case verify.StrengthMix:
			mix = append(mix, g.ID)
		case verify.StrengthVLLM:
			vllm = append(vllm, g.ID)
			if !slices.Contains(whys, g.VLLMOnly) {
				whys = append(whys, g.VLLMOnly)
			}
		}
	}
	var parts []string
	if len(vllm) > 0 {
		parts = append(parts, fmt.Sprintf("strength: vllm for group(s) %s: compared by vLLM's checksum only (%s): %s", ranges.Format(vllm), strings.Join(whys, "; "), verify.MissedByVLLM))
	}
	if len(mix) > 0 {
		line := fmt.Sprintf("strength: vllm+mix for group(s) %s: vLLM's checksum and kvaudit's mix check", ranges.Format(mix))
		if k := mixKeyNote(res); k != "" {
			line += "; " + k
		}
		parts = append(parts, line)
	}
	if len(parts) == 0 {
		return "strength: nothing compared"
	}
	return strings.Join(parts, "\n")
}

// RunnerCheckJSON is, in kvaudit-diff/1's runner_check, what the cpu
// engine recomputed of the cuda runner's results (checksum.EngineCheck).
type RunnerCheckJSON struct {
	Engine   string `json:"engine"`
	Requests int    `json:"requests"`
	// HostSlots are the output slots of host-resident rows the runner
	// computed; Checked those the cpu engine recomputed.
	HostSlots int `json:"host_slots"`
	Checked   int `json:"checked"`
	// Sample is --runner-check: "default", "all" or a number of slots per
	// request; CatchProbability the least probability, over the
	// requests, that a single wrong slot was recomputed.
	Sample           string  `json:"sample"`
	CatchProbability float64 `json:"catch_probability"`
	// DeviceSlots are the parts of slots from rows in device memory
	// (cuda_ipc) only the runner read: unchecked, and the comparison
	// unverified, unless Trusted (--trust-runner).
	DeviceSlots int  `json:"device_slots"`
	Trusted     bool `json:"trusted"`
}

func newRunnerCheckJSON(c *checksum.EngineCheck) *RunnerCheckJSON {
	if c == nil {
		return nil
	}
	return &RunnerCheckJSON{Engine: c.Engine, Requests: c.Requests, HostSlots: c.HostSlots, Checked: c.Checked,
		Sample: c.Sample, CatchProbability: c.CatchProbability, DeviceSlots: c.DeviceSlots, Trusted: c.Trusted}
}

// RunnerCheckNote says in one line what the cpu engine recomputed of an
// untrusted engine's results and what that can catch, "" for nil.
func RunnerCheckNote(c *checksum.EngineCheck) string {
	if c == nil {
		return ""
	}
	s := fmt.Sprintf("runner check: the cpu engine recomputed %d of the %d host-resident output slots the %s runner computed in %d request(s) (--runner-check %s): a single wrong slot is caught with probability %s",
		c.Checked, c.HostSlots, c.Engine, c.Requests, c.Sample, percent(c.CatchProbability))
	if c.CatchProbability < 1 {
		s += " (--runner-check all: always)"
	}
	switch {
	case c.DeviceSlots > 0 && c.Trusted:
		s += fmt.Sprintf("; %d part(s) of slots from rows in device memory (cuda_ipc) are the runner's alone, accepted by --trust-runner", c.DeviceSlots)
	case c.DeviceSlots > 0:
		s += fmt.Sprintf("; %d part(s) of slots from rows in device memory (cuda_ipc) are the runner's alone, unchecked: unverified unless --trust-runner", c.DeviceSlots)
	}
	return s
}

// percent writes a probability as a percentage: 12.5%, 100%.
func percent(p float64) string {
	return strconv.FormatFloat(100*p, 'f', -1, 64) + "%"
}

// runnerSuite is the JUnit suite of the runner check: one case, an error
// (skipped with allowUnverified) when rows only the runner read were not
// accepted, so that CI fails when diff exits 2 for it.
func runnerSuite(c *checksum.EngineCheck, allowUnverified bool) junitSuite {
	tc := junitCase{Name: "runner check", Classname: "kvaudit diff"}
	if c.DeviceSlots > 0 && !c.Trusted {
		o := &junitOutcome{Message: verify.DeviceUncheckedSummary(c), Type: "unverified"}
		if allowUnverified {
			tc.Skipped = o
		} else {
			tc.Error = o
		}
	}
	return junitSuite{Name: "runner check", Cases: []junitCase{tc}, SystemOut: RunnerCheckNote(c)}
}

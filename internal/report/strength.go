package report

import (
	"fmt"
	"slices"
	"strings"

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

package cli

import (
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// unknownFlag finds the flag name in pflag's "unknown flag: --name"
// (compiled when a flag is mistyped, not at start-up).
var unknownFlag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^unknown flag: --([^\s=]+)`) })

// suggestFlag names the flag of c a mistyped one (pflag's unknown flag
// error err) was likely meant as, "--audit-tail" for --audit-tial, as
// cobra suggests commands: the closest visible flag by edit distance (at
// most 2, or a third of its length), or the only one it is a prefix of;
// "" when none is close.
func suggestFlag(c *cobra.Command, err error) string {
	m := unknownFlag().FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	typed := m[1]
	best, bestDist, prefixed := "", 0, []string{}
	visit := func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		if strings.HasPrefix(f.Name, typed) {
			prefixed = append(prefixed, f.Name)
		}
		d := editDistance(typed, f.Name)
		if d <= max(2, len(f.Name)/3) && (best == "" || d < bestDist) {
			best, bestDist = f.Name, d
		}
	}
	c.Flags().VisitAll(visit)
	c.InheritedFlags().VisitAll(visit)
	switch {
	case best != "":
		return "--" + best
	case len(prefixed) == 1:
		return "--" + prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

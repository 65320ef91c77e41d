package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/verify"
)

// auditTables lays out the audits that ran.
func auditTables(a *verify.Audits) []*Table {
	var out []*Table
	if a.Tail != nil {
		out = append(out, tailAuditTable(a.Tail))
	}
	if a.Stored != nil {
		out = append(out, StoredTable(a.Stored))
	}
	if len(a.Repeated) > 0 {
		out = append(out, RepeatedTable(a.Repeated))
	}
	if a.Transfers != nil {
		out = append(out, transfersTables(a.Transfers, false)...)
	}
	if a.SGLang != nil {
		out = append(out, SGLangAuditTable(a.SGLang))
	}
	return out
}

// auditKey is a (request, group) of an audit suite.
type auditKey struct {
	request string
	group   int
}

// auditCases returns one test case per request and group of the
// comparison, in its order, then one per (request, group) that only a
// finding names (a request the comparison does not hold), sorted; skip
// says why a group is not audited ("" when it is).
func auditCases(res *verify.DiffResult, found []auditKey, skip func(g *verify.GroupVerdict) string) ([]auditKey, map[auditKey]*junitCase) {
	var keys []auditKey
	cases := map[auditKey]*junitCase{}
	for _, rv := range res.Requests {
		for _, g := range rv.Groups {
			k := auditKey{rv.ID, g.ID}
			if cases[k] != nil {
				continue
			}
			c := &junitCase{Name: fmt.Sprintf("request %s group %d", rv.ID, g.ID), Classname: rv.ID}
			if why := skip(g); why != "" {
				c.Skipped = &junitOutcome{Message: why}
			}
			keys, cases[k] = append(keys, k), c
		}
	}
	var extra []auditKey
	for _, k := range found {
		if cases[k] == nil {
			cases[k] = &junitCase{Name: fmt.Sprintf("request %s group %d", k.request, k.group), Classname: k.request}
			extra = append(extra, k)
		}
	}
	slices.SortFunc(extra, func(a, b auditKey) int {
		if c := strings.Compare(a.request, b.request); c != 0 {
			return c
		}
		return a.group - b.group
	})
	return append(keys, extra...), cases
}

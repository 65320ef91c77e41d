// Package report renders kvaudit's results (checks, verdicts, campaign
// outcomes) for people and for machines: a styled table on a terminal,
// plain tab-separated text when piped or when NO_COLOR is set, JSON with the
// stable schemas of docs/spec.md §12, markdown, and JUnit XML.
//
// Each result is one value; every renderer reads that value, so the formats
// never disagree. Tables never truncate a checksum or an offset. Report
// decides nothing: verdicts are package verify's, campaign outcomes package
// inject's.
package report

package report

// For the external tests (the demo's report, made by package cli, which
// imports this one).
type DOMWant = domWant

var (
	CheckDOM = checkDOM
	Update   = update
)

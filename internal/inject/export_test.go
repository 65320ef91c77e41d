package inject

// The campaign's judge, for the external tests (inject_test).
var Judge = judge

type Observed = observed

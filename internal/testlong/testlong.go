// Package testlong decides how long kvaudit's tests run. By default `go
// test ./...` runs every test with shorter property runs and skips the few
// that build binaries, start browsers, Python or clusters; with
// KVAUDIT_LONG_TESTS=1 (as .ci/run sets) the property runs are rapid's
// full default and every test runs. It is for tests only.
package testlong

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Env is the variable that asks for the long runs.
const Env = "KVAUDIT_LONG_TESTS"

// ShortChecks is the number of rapid checks a property test makes by
// default (rapid's own default, 100, with Env set).
const ShortChecks = 20

// Long reports whether the long runs were asked for: Env set to a true
// value (1, true, ...).
func Long() bool {
	v, err := strconv.ParseBool(os.Getenv(Env))
	return err == nil && v
}

// Skip skips the test unless Long, saying what makes it long.
func Skip(t testing.TB, why string) {
	t.Helper()
	if !Long() {
		t.Skipf("%s: a long test, run with %s=1 (as .ci/run does)", why, Env)
	}
}

// Main runs the tests of a package that has property tests: unless Long
// or -rapid.checks was given, rapid makes ShortChecks checks a property.
// A package's TestMain calls it as os.Exit(testlong.Main(m)).
func Main(m *testing.M) int {
	flag.Parse()
	SetChecks()
	return m.Run()
}

// SetChecks sets rapid's -rapid.checks to ShortChecks unless Long or the
// flag was given on the command line; for a TestMain that does more than
// Main, after flag.Parse. Without rapid in the binary it does nothing.
func SetChecks() {
	if Long() || flag.Lookup("rapid.checks") == nil {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		flag.Set("rapid.checks", strconv.Itoa(ShortChecks))
	}
}

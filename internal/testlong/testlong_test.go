package testlong

import (
	"flag"
	"testing"
)

// checks stands in for rapid's flag, which this package does not import.
var checks = flag.Int("rapid.checks", 100, "rapid: number of checks to perform")

func TestSetChecks(t *testing.T) {
	for _, c := range []struct {
		long string
		set  bool // -rapid.checks given
		want int
	}{
		{"", false, ShortChecks},
		{"0", false, ShortChecks},
		{"1", false, 100},
		{"true", false, 100},
		{"", true, 7},
		{"1", true, 7},
	} {
		t.Setenv(Env, c.long)
		fs := flag.CommandLine
		flag.CommandLine = flag.NewFlagSet("test", flag.ContinueOnError)
		*checks = 100
		flag.CommandLine.IntVar(checks, "rapid.checks", 100, "")
		if c.set {
			flag.CommandLine.Parse([]string{"-rapid.checks=7"})
		}
		SetChecks()
		flag.CommandLine = fs
		if *checks != c.want {
			t.Errorf("%s=%q, -rapid.checks given %v: %d checks, want %d", Env, c.long, c.set, *checks, c.want)
		}
		if Long() != (c.long == "1" || c.long == "true") {
			t.Errorf("%s=%q: Long() = %v", Env, c.long, Long())
		}
	}
}

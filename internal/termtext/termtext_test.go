package termtext

import "testing"

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"req-0", "req-0"},
		{"日本語", "日本語"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"x\r\nverified", `x\r\nverified`},
		{"t\tab", `t\tab`},
		{"c1\u009b31m", `c1\u009b31m`},
		{"rtl\u202eexe.txt", `rtl\u202eexe.txt`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"keep \ufffd", "keep \ufffd"},
		{`forged\x1b[2J`, `forged\\x1b[2J`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLine: a whole line keeps its backslashes (its quoted parts stay
// as %q wrote them) and loses every control character.
func TestLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"mismatch: request req-0", "mismatch: request req-0"},
		{`reading "a\"b\x1b": bad`, `reading "a\"b\x1b": bad`},
		{"mismatch: request req-0\r\x1b[2Kverified", `mismatch: request req-0\r\x1b[2Kverified`},
		{"two\nlines", `two\nlines`},
		{"rtl\u202e \xff", `rtl\u202e \xff`},
	} {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRequests: up to three ids are named; more are counted.
func TestRequests(t *testing.T) {
	ids := []string{"req-0", "req-1", "req-2", "req-3", "req-4"}
	for _, c := range []struct {
		n    int
		want string
	}{
		{1, "request req-0"},
		{3, "request req-0, req-1, req-2"},
		{4, "4 requests (req-0, req-1, req-2, ... and 1 more)"},
		{5, "5 requests (req-0, req-1, req-2, ... and 2 more)"},
	} {
		if got := Requests(ids[:c.n]); got != c.want {
			t.Errorf("Requests(%d ids) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Some([]string{"a", "b", "c", "d"}, "; "); got != "a; b; c; ... and 1 more" {
		t.Errorf("Some = %q", got)
	}
}

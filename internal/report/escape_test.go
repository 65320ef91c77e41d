package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"req-0", "req-0"},
		{"model.layers.0.self_attn", "model.layers.0.self_attn"},
		{"日本語", "日本語"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"x\r\nverified", `x\r\nverified`},
		{"t\tab", `t\tab`},
		{"del\x7f", `del\x7f`},
		{"c1\u009b31m", `c1\u009b31m`},
		{"rtl\u202eexe.txt", `rtl\u202eexe.txt`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"keep \ufffd", "keep \ufffd"},
		{`forged\x1b[2J`, `forged\\x1b[2J`},
		{"both\\\x1b", `both\\\x1b`},
	} {
		if got := escapeText(c.in); got != c.want {
			t.Errorf("escapeText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A request id and a reason crafted to clear the screen and forge a
// verified line print inert in every table format.
func TestTablesEscapeUntrustedText(t *testing.T) {
	res := diffFixture()
	res.Requests[0].ID = "req\x1b[2J\r\nreq-9\tverified"
	res.Requests[0].Groups[0].Reason = "r\x1b]0;title\x07"
	res.Requests[0].Details[0].LayerName = "layer\u202e\n"
	for _, f := range []Format{FormatTable, FormatMarkdown} {
		for _, color := range []bool{false, true} {
			var b bytes.Buffer
			if err := RenderDiff(&b, res, f, DiffOptions{Style: Style{Color: color}}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !strings.Contains(out, `req\x1b[2J\r\nreq-9\tverified`) {
				t.Errorf("%s color=%v: the request id is not printed escaped:\n%s", f, color, out)
			}
			for _, bad := range []string{"\x1b[2J", "\x1b]0", "\r", "\u202e", "\x07", "req-9\tverified"} {
				if strings.Contains(out, bad) {
					t.Errorf("%s color=%v: output holds %q raw", f, color, bad)
				}
			}
		}
	}

}
